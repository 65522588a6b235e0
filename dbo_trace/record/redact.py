"""Keeping secrets out of what a recording writes down (the manifest, and the bundle packed for a reviewer).

Rules: an environment variable (or JSON key) whose name contains TOKEN, KEY,
SECRET, PASSWORD, CREDENTIAL or AUTH; the user:password part of a URL; the
value of a flag whose last word is such a thing (--api-key X, --hf-token=X).
Flags are matched on their last word so that --max-num-batched-tokens and
--dbo-decode-token-threshold, which are settings a reviewer needs, stay.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

REDACTED = "<redacted>"
_SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
_SECRET_FLAG_WORDS = {"TOKEN", "KEY", "APIKEY", "SECRET", "SECRETS", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS", "AUTH"}
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<cred>[^/@\s:]+(?::[^/@\s]*)?)@")


def is_secret_name(name: str) -> bool:
    upper = name.upper().replace("-", "_")
    return any(word in upper for word in _SECRET_WORDS)


def is_secret_flag(flag: str) -> bool:
    words = re.split(r"[-_]", flag.lstrip("-").split("=", 1)[0].upper())
    return words[-1] in _SECRET_FLAG_WORDS


def redact_text(text: str) -> str:
    """Credentials inside URLs: scheme://user:pass@host -> scheme://<redacted>@host."""
    return _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (REDACTED if is_secret_name(k) else redact_text(v)) for k, v in env.items()}


def redact_argv(argv: Iterable[str]) -> list[str]:
    """A command line with secret flag values and URL credentials replaced."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if arg.startswith("-") and is_secret_flag(arg):
            if "=" in arg:
                out.append(arg.split("=", 1)[0] + "=" + REDACTED)
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(redact_text(arg))
    return out


def redact_json(value):
    """Any JSON-like value: keys whose last word is a secret word hidden (as for flags), URL credentials removed."""
    if isinstance(value, dict):
        return {k: (REDACTED if isinstance(k, str) and is_secret_flag(k) else redact_json(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_json(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value
