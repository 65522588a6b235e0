"""Pure functions over arrays: no I/O, no rendering."""
