"""Keeping secrets out of what a recording writes down (the manifest, and the bundle packed for a reviewer).

Rules: an environment variable (or JSON key) whose name contains TOKEN, KEY,
SECRET, PASSWORD, CREDENTIAL, AUTH or BEARER, or has the word PASS; the user:password
part of a URL (the password may hold '@'); the value of a flag whose last word
is such a thing (--api-key X, --hf-token=X). Flags are matched on their last
word so that --max-num-batched-tokens and --dbo-decode-token-threshold, which
are settings a reviewer needs, stay. In free text (a server's log tail, an
error body) also: `NAME=value` and `"name": "value"` with a secret name,
`Bearer <token>`, and well-known token shapes (hf_, sk-, ghp_, xox?-).

A Redactor also learns the run's own secret values (from its environment and
command line) and masks them wherever they appear: a key echoed in a log line
or an error body is caught by its value, whatever surrounds it.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

REDACTED = "<redacted>"
_SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "BEARER")
_SECRET_WHOLE_WORDS = {"PASS", "PWD"}  # as whole words only: HF_HUB_PASS, not COMPASS
_SECRET_FLAG_WORDS = {"TOKEN", "KEY", "APIKEY", "SECRET", "SECRETS", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS", "AUTH"}
# user:password@ up to the last '@' before the host (passwords may hold '@').
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<cred>[^/\s]+)@(?=[^/@\s]+)")
_ASSIGNMENT = re.compile(r"(?P<name>\b[A-Za-z_][A-Za-z0-9_.-]*)(?P<eq>\s*[=:]\s*)(?P<q>[\"']?)(?P<value>[^\s\"',;&]+)")
_JSON_PAIR = re.compile(r'"(?P<name>[^"]{1,64})"(?P<sep>\s*:\s*)"(?P<value>[^"]*)"')
_BEARER = re.compile(r"(?i)\b(?P<kind>bearer|basic|token)\s+(?P<value>[A-Za-z0-9._~+/=-]{8,})")
_TOKEN_SHAPES = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{16,}|sk-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|xox[abpr]-[A-Za-z0-9-]{10,})"
)
MIN_LEARNED = 6  # shorter values are not learned: masking "1" or "true" everywhere would wreck the text


def is_secret_name(name: str) -> bool:
    upper = name.upper().replace("-", "_").replace(".", "_")
    return any(word in upper for word in _SECRET_WORDS) or bool(_SECRET_WHOLE_WORDS & set(upper.split("_")))


def is_secret_flag(flag: str) -> bool:
    words = re.split(r"[-_]", flag.lstrip("-").split("=", 1)[0].upper())
    return words[-1] in _SECRET_FLAG_WORDS


def redact_text(text: str) -> str:
    """Secrets by shape in free text: URL credentials, secret NAME=value and "name": "value", Bearer tokens, token shapes."""
    text = _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    text = _BEARER.sub(lambda m: f"{m['kind']} {REDACTED}", text)  # before NAME: value, which would take "Bearer"
    text = _JSON_PAIR.sub(lambda m: f'"{m["name"]}"{m["sep"]}"{REDACTED}"' if is_secret_name(m["name"]) else m.group(0), text)
    text = _ASSIGNMENT.sub(
        lambda m: (
            f"{m['name']}{m['eq']}{m['q']}{REDACTED}" if is_secret_name(m["name"]) and m["value"] != REDACTED else m.group(0)
        ),
        text,
    )
    return _TOKEN_SHAPES.sub(REDACTED, text)


class Redactor:
    """The rules above plus the secret values of one run, learned from its environment and command line."""

    def __init__(self, env: Mapping[str, str] | None = None, argv: Iterable[str] = ()):
        values = {v for k, v in (env or {}).items() if is_secret_name(k)}
        args = list(argv)
        for i, arg in enumerate(args):
            if arg.startswith("-") and is_secret_flag(arg):
                values.add(arg.split("=", 1)[1] if "=" in arg else (args[i + 1] if i + 1 < len(args) else ""))
            for m in _URL_CREDENTIALS.finditer(arg):
                values.update(m["cred"].split(":", 1))
        self.values = sorted((v for v in values if len(v) >= MIN_LEARNED), key=len, reverse=True)

    def text(self, text: str) -> str:
        for value in self.values:
            text = text.replace(value, REDACTED)
        return redact_text(text)

    def json(self, value):
        if isinstance(value, dict):
            return {k: (REDACTED if isinstance(k, str) and is_secret_flag(k) else self.json(v)) for k, v in value.items()}
        if isinstance(value, list):
            return [self.json(v) for v in value]
        if isinstance(value, str):
            return self.text(value)
        return value


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
