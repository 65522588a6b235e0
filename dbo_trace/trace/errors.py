"""The error every reader raises: one line, naming the input, saying what to do."""

from dbo_trace.errors import UsageError


class InputError(UsageError):
    """Bad input. str(exc) is the whole one-line message shown to the user; exit status 2."""
