"""Recording: vLLM hooks, the event log and the plugin. Imported only where recording happens."""
