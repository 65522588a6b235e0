"""The one error a user sees: a single line that names what was wrong and what to do, and an exit
status. Raised anywhere (readers, analyses, the CLI's checks); turned into output in one place, the
command group in cli.py. Every line shown is made inert first (inert below): a message quotes
paths, names and server output, which are data."""

import re

# C0 (tab, newline and carriage return too: a line is one line), DEL, C1 (ESC starts the OSC 52
# clipboard write, OSC 0 title and OSC 8 link sequences, BEL ends them, CR and backspace overwrite
# what was printed), the line and paragraph separators, and the bidi embeddings, overrides and
# isolates (U+202A-202E, U+2066-2069: text shown in another order than it reads).
UNSAFE_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def inert(text: str) -> str:
    """The text as one inert line: every unsafe character written as its Python escape (`\\x1b`,
    `\\u202e`), visible and searchable, doing nothing; lone surrogates (JSON's `\\ud800`, which
    cannot be written as UTF-8) as escapes too."""
    text = str(text)
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return UNSAFE_CHARACTERS.sub(_escape, text) if UNSAFE_CHARACTERS.search(text) else text


class UsageError(Exception):
    """str(exc) is the whole one-line message; exit_code the process's status (2: bad input or usage)."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived while workers ran (trace/workers.py): handled as Ctrl-C is, so the workers are
    stopped and not left orphaned; the command exits 143 (128 + SIGTERM), as a process it killed would."""


def shown(value: object, most: int = 40) -> str:
    """A value from input in an error line: its repr, cut to `most` characters (a pattern, a version
    or a JSON flag may be a megabyte); made inert with the rest of the line."""
    text = repr(value)
    return text if len(text) <= most else f"{text[: most - 3]}..."
