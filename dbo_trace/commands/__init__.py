"""One module per command: a frozen request built from the command line's arguments, its checked()
(every refusal of a bad combination of options, as errors.UsageError, before any work) and run()
(the work). cli.py only declares the options and builds the requests; these are testable without
click (tests/unit/test_commands.py)."""
