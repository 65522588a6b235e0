"""The one error a user sees: a single line that names what was wrong and what to do, and an exit
status. Raised anywhere (readers, analyses, the CLI's checks); turned into output in one place, the
command group in cli.py."""


class UsageError(Exception):
    """str(exc) is the whole one-line message; exit_code the process's status (2: bad input or usage)."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived while workers ran (trace/workers.py): handled as Ctrl-C is, so the workers are
    stopped and not left orphaned; the command exits 143 (128 + SIGTERM), as a process it killed would."""
