"""The error every reader raises: one line, naming the input, saying what to do."""


class InputError(Exception):
    """Bad input. str(exc) is the whole one-line message shown to the user."""
