"""Keeping secrets out of what a recording writes down (the manifest, and the bundle packed for a reviewer).

Rules: an environment variable (or JSON key) whose name contains TOKEN, KEY,
SECRET, PASSWORD, CREDENTIAL, AUTH or BEARER, or ends in the word PASS; the user:password
part of a URL (the password may hold '@', '/' or a space); the value of a flag whose
last word is such a thing (--api-key X, --hf-token=X). Flags are matched on their last
word so that --max-num-batched-tokens and --dbo-decode-token-threshold, which
are settings a reviewer needs, stay. In free text (a server's log tail, an
error body) also: `NAME=value`, `"name": "value"` and `'name': 'value'` (Python's
repr, as vLLM logs its arguments) with a secret name, `--secret-flag value`,
`Bearer <token>`, PEM private keys, and the token shapes of TOKEN_RULES: data taken
from the published rules of detect-secrets and gitleaks (docs/recording.md,
tests/data/README.md), not a dependency, so the same rules hold in any Python.

A Redactor also learns the run's own secret values (from its environment and
command line) and masks them wherever they appear: a key echoed in a log line
or an error body is caught by its value, whatever surrounds it.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

REDACTED = "<redacted>"
_SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "BEARER")
# As the name's last word only: HF_HUB_PASS, not COMPASS, nor a compiler pass's name (a torch.compile
# range, pass.joint_graph_passes.pass_pattern_1_data, whose first word is PASS).
_SECRET_WHOLE_WORDS = {"PASS", "PWD"}
# Words prose uses alone before a colon (a table's "key: busy: GPU busy", "tokens: 512"): there, a
# secret only where the value looks like a credential (_credential_like); NAME=value stays masked.
_PROSE_WORDS = {"KEY", "KEYS", "TOKEN", "TOKENS", "AUTH", "PASS"}
_SECRET_FLAG_WORDS = {"TOKEN", "KEY", "APIKEY", "SECRET", "SECRETS", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS", "AUTH"}

# Every pattern below is bounded, or starts only where a run of its characters starts (a lookbehind),
# so that a hostile text costs linear time: a scheme tried at every letter of a long word, or a base64
# run tried at each of its characters, took minutes on 100 kB (tests/system/test_record_parts.py).
# A quoted string, its escaped quotes included ("a\"b", 'it\'s'), on one line.
_QUOTED = r""""(?:[^"\\\n]|\\.){0,4096}"|'(?:[^'\\\n]|\\.){0,4096}'"""
# user:password@ (the password may hold '@', '/' or a space) or token@, up to the '@' before a host:
# the shortest such stretch, so that a later e-mail address on the line stays.
_URL_CREDENTIALS = re.compile(
    r"(?<![a-zA-Z0-9+.-])(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]{0,31}://)"
    r"(?P<cred>[^\s/@:]{0,256}:(?:(?!://)[^\n]){0,256}?|[^\s/@:]{1,256})@"
    r"(?=[A-Za-z0-9._~-]+(?::\d+)?(?:[/?#\s\"'<>,;)\]}]|$))"
)
# NAME=value, NAME: value, NAME='a value' (Python's repr of arguments, as vLLM logs them: Namespace(api_key='x')).
_ASSIGNMENT = re.compile(
    rf"(?P<name>(?<![A-Za-z0-9_.-])[A-Za-z_][A-Za-z0-9_.-]{{0,63}})(?P<eq>[ \t]{{0,8}}[=:][ \t]{{0,8}})"
    rf"(?P<value>{_QUOTED}|\[[^\]]{{0,2000}}\]|[^\s\"',;&)}}\]]+)"
)
# "name": "value" and 'name': 'value' (JSON, and Python's repr of a dict: {'api_key': 'x'}), the value
# also a list (['k1', 'k2']) or a bare word.
_QUOTED_PAIR = re.compile(
    rf"""(?P<nq>["'])(?P<name>[^"'\\\n]{{1,64}})(?P=nq)(?P<sep>[ \t]{{0,8}}[:=][ \t]{{0,8}})"""
    rf"(?P<value>{_QUOTED}|\[[^\]]{{0,2000}}\]|\([^)\n]{{0,2000}}\)|[^\s,;}}\]]+)"
)
# --api-key VALUE and --hf-token=VALUE in free text (a logged command line).
_FLAG_VALUE = re.compile(
    rf"(?P<flag>(?<![\w-])--?[A-Za-z][A-Za-z0-9_-]{{0,63}})(?P<sep>=|[ \t]{{1,8}})(?P<value>{_QUOTED}|[^\s\"']+)"
)
# aws_secret_access_key VALUE: a secret's name, a space, then a value with a digit in it.
_SPACED_PAIR = re.compile(
    r"(?P<name>(?<![A-Za-z0-9_-])[A-Za-z][A-Za-z0-9]{0,63}(?:[_-][A-Za-z0-9]{1,64}){1,8})(?P<sp>[ \t]{1,8})"
    r"(?P<value>[A-Za-z0-9/+=._~-]{8,4096})"
)
_BEARER = re.compile(r"(?i)\b(?P<kind>bearer|basic|token)[ \t]{1,8}(?P<value>[A-Za-z0-9._~+/=-]{8,4096})")
# PEM private keys: a whole block, a block cut short by the end of the text, and the end of a block
# whose start was cut off (a log tail). Line breaks as they are or escaped (\n in a repr or JSON).
_NL = r"(?:\r?\n|\\r?\\n)"
_PEM_KIND = r"(?P<kind>[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?)"
_PEM_BLOCK = re.compile(rf"-----BEGIN {_PEM_KIND}-----.{{0,20000}}?-----END (?P=kind)-----", re.S)
# A line of a key: base64, a padded last line, a header (Proc-Type: ...), or an empty line before more
# base64; not a log line.
_PEM_LINE = (
    r"(?:[A-Za-z0-9+/]{16,}={0,2}|[A-Za-z0-9+/]*={1,2}|(?:Proc-Type|DEK-Info|Comment): [^\n\\]*"
    rf"|(?={_NL}[A-Za-z0-9+/]{{16,}}))"
)
_PEM_OPEN = re.compile(rf"-----BEGIN {_PEM_KIND}-----(?!{re.escape(REDACTED)})(?:{_NL}{_PEM_LINE})*")
_PEM_TAIL = re.compile(
    rf"(?<![A-Za-z0-9+/=])(?:[A-Za-z0-9+/=]{{16,100}}[ \t]{{0,8}}{_NL}){{1,200}}(?=-----END [A-Z0-9 ]*PRIVATE KEY)"
)


def _rule(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(pattern, flags)


# Token shapes, as data: (rule, pattern, where it comes from). Most are the published patterns of
# Yelp's detect-secrets 1.5.0 (detect_secrets/plugins/*.py, Apache License 2.0) and of gitleaks'
# default rules (config/gitleaks.toml, MIT License); lengths are loosened to "at least" where a
# provider's length may change, since a redactor that misses costs more than one that over-masks.
# The whole match is masked. docs/recording.md lists them.
TOKEN_RULES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("aws-access-key-id", _rule(r"\b(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}\b"), "detect-secrets aws.py"),
    ("github-token", _rule(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9_]{20,}"), "detect-secrets github_token.py (36: at least 20)"),
    ("github-fine-grained-pat", _rule(r"\bgithub_pat_\w{20,}"), "gitleaks github-fine-grained-pat (82: at least 20)"),
    (
        "gitlab-token",
        _rule(r"\b(?:glpat|gldt|glft|glsoat|glrt|glcbt|glimt|glptt|glagent)-[A-Za-z0-9_-]{20,}"),
        "detect-secrets gitlab_token.py",
    ),
    (
        "jwt",
        _rule(r"(?<![A-Za-z0-9_=-])eyJ[A-Za-z0-9_=-]{8,}\.[A-Za-z0-9_=-]{8,}(?:\.[A-Za-z0-9_.+/=-]*)?"),
        "detect-secrets jwt.py (the signature taken whole)",
    ),
    ("stripe-key", _rule(r"\b[rs]k_(?:live|test)_[0-9a-zA-Z]{16,}"), "detect-secrets stripe.py (24: at least 16; test keys too)"),
    ("slack-token", _rule(r"\bxox[abposr]-[A-Za-z0-9-]{10,}", re.I), "detect-secrets slack.py, loosened"),
    (
        "slack-webhook",
        _rule(r"https://hooks\.slack\.com/services/T[a-zA-Z0-9_]+/B[a-zA-Z0-9_]+/[a-zA-Z0-9_]+", re.I),
        "detect-secrets slack.py",
    ),
    ("openai-key", _rule(r"\bsk-[A-Za-z0-9_-]{16,}"), "detect-secrets openai.py, loosened (any sk- key: Anthropic's too)"),
    ("huggingface-token", _rule(r"\bhf_[A-Za-z0-9]{16,}"), "gitleaks huggingface-access-token, loosened"),
    # No word boundary before AIza (gitleaks has one): a key right after a word character (a repr's
    # escaped newline, '\\nAIza...', or a name glued to it, KEY_AIza...) is still one; AIza followed by
    # 35 of the key's characters is no word's spelling.
    ("google-api-key", _rule(r"AIza[0-9A-Za-z_-]{35}"), "gitleaks gcp-api-key, its leading boundary dropped"),
    ("sendgrid-key", _rule(r"\bSG\.[a-zA-Z0-9_-]{22}\.[a-zA-Z0-9_-]{43}"), "detect-secrets sendgrid.py"),
    ("pypi-token", _rule(r"\bpypi-AgE(?:IcHlwaS5vcmc|NdGVzdC5weXBpLm9yZw)[A-Za-z0-9_-]{70,}"), "detect-secrets pypi_token.py"),
    ("npm-token", _rule(r"\bnpm_[A-Za-z0-9]{36}"), "gitleaks npm-access-token"),
    ("twilio-key", _rule(r"\b(?:AC|SK)[a-z0-9]{32}\b"), "detect-secrets twilio.py"),
    ("mailchimp-key", _rule(r"\b[0-9a-z]{32}-us[0-9]{1,2}\b"), "detect-secrets mailchimp.py"),
    ("discord-token", _rule(r"\b[MNO][a-zA-Z\d_-]{23,25}\.[a-zA-Z\d_-]{6}\.[a-zA-Z\d_-]{27}"), "detect-secrets discord.py"),
    ("square-oauth", _rule(r"\bsq0csp-[0-9A-Za-z_-]{43}"), "detect-secrets square_oauth.py"),
    ("telegram-bot-token", _rule(r"\b\d{8,10}:[0-9A-Za-z_-]{35}\b"), "detect-secrets telegram_token.py"),
    ("azure-storage-key", _rule(r"AccountKey=[a-zA-Z0-9+/=]{88}"), "detect-secrets azure_storage_key.py"),
)
# AWS's secret access key: 40 characters beside an AWS key name (detect-secrets aws.py, quotes made
# optional), or right after an access key id ("AKIA... wJalr...", the pair as printed).
_AWS_SECRET = re.compile(
    r"(?i)(?P<lead>aws.{0,20}?(?:key|pwd|pw|password|pass|token).{0,20}?[\s\"'=:]{1,8})(?P<value>[0-9a-zA-Z/+]{40})(?![0-9a-zA-Z/+=])"
)
_AWS_PAIR = re.compile(rf"(?P<lead>{re.escape(REDACTED)}[\s,;:|\"'=]+)(?P<value>[0-9a-zA-Z/+]{{40}})(?![0-9a-zA-Z/+=])")
MIN_LEARNED = 6  # shorter values are not learned: masking "1" or "true" everywhere would wreck the text


def is_secret_name(name: str) -> bool:
    upper = name.upper().replace("-", "_").replace(".", "_")
    return any(word in upper for word in _SECRET_WORDS) or upper.split("_")[-1] in _SECRET_WHOLE_WORDS


def _credential_like(value: str) -> bool:
    """A bare value that could be a credential: 8 characters or more with a digit among them, and not
    itself a label (a legend's next "name:")."""
    return len(value) >= 8 and any(c.isdigit() for c in value) and not value.endswith(":")


def _prose(name: str, eq: str, value: str) -> bool:
    """`key: word` in prose (a table's legend), not a credential: one bare word of _PROSE_WORDS, a
    colon, and an unquoted value that does not look like one."""
    return eq.strip() == ":" and name.upper() in _PROSE_WORDS and value[:1] not in "\"'[" and not _credential_like(value)


def is_secret_flag(flag: str) -> bool:
    words = re.split(r"[-_]", flag.lstrip("-").split("=", 1)[0].upper())
    return words[-1] in _SECRET_FLAG_WORDS


# Values that hold no secret and whose masking would break a JSON document (app/review_archive.py redacts the
# report's JSON text): numbers, null, true, false (and Python's None, True, False).
_LITERAL = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|null|true|false|None|True|False")
_DQ = '"'  # a double-quoted name: JSON's, maybe
_ITEM = re.compile(rf"{_QUOTED}|[^\s,\[\]()]+")


def _masked(value: str, json_literals: bool = False) -> str:
    """A value replaced, its quotes kept, so that the text around it still reads; in a list or tuple
    each item is. With json_literals (a "name": value pair, which may be JSON's) a number or a
    literal stays, so that a JSON document stays one."""
    if len(value) >= 2 and value[0] in "\"'" and value[-1] == value[0]:
        return f"{value[0]}{REDACTED}{value[0]}"
    if value[:1] in "[(":
        return _ITEM.sub(lambda m: _masked(m.group(0), json_literals), value)
    return value if json_literals and _LITERAL.fullmatch(value) else REDACTED


def _not_masked(value: str) -> bool:
    return REDACTED not in value


def redact_text(text: str) -> str:
    """Secrets by shape in free text: private keys, URL credentials, Bearer tokens, secret names with
    their values (NAME=value, "name": "value", 'name': 'value', --secret-flag value, name value), and
    the token shapes of TOKEN_RULES."""
    text = _PEM_BLOCK.sub(lambda m: f"-----BEGIN {m['kind']}-----{REDACTED}-----END {m['kind']}-----", text)
    text = _PEM_OPEN.sub(lambda m: f"-----BEGIN {m['kind']}-----{REDACTED}", text)
    text = _PEM_TAIL.sub(REDACTED + "\n", text)
    text = _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    text = _BEARER.sub(lambda m: f"{m['kind']} {REDACTED}", text)  # before NAME: value, which would take "Bearer"
    text = _QUOTED_PAIR.sub(
        lambda m: (
            f"{m['nq']}{m['name']}{m['nq']}{m['sep']}{_masked(m['value'], json_literals=m['nq'] == _DQ)}"
            if is_secret_name(m["name"]) and _not_masked(m["value"])
            else m.group(0)
        ),
        text,
    )
    text = _FLAG_VALUE.sub(
        lambda m: (
            f"{m['flag']}{m['sep']}{_masked(m['value'])}"
            if is_secret_flag(m["flag"]) and _not_masked(m["value"]) and not m["value"].startswith("-")
            else m.group(0)
        ),
        text,
    )
    text = _ASSIGNMENT.sub(
        lambda m: (
            f"{m['name']}{m['eq']}{_masked(m['value'])}"
            if is_secret_name(m["name"]) and _not_masked(m["value"]) and not _prose(m["name"], m["eq"], m["value"])
            else m.group(0)
        ),
        text,
    )
    text = _SPACED_PAIR.sub(
        lambda m: (
            f"{m['name']}{m['sp']}{REDACTED}"
            if is_secret_flag(m["name"]) and _not_masked(m["value"]) and any(c.isdigit() for c in m["value"])
            else m.group(0)
        ),
        text,
    )
    text = _AWS_SECRET.sub(lambda m: f"{m['lead']}{REDACTED}", text)
    for _rule_id, pattern, _source in TOKEN_RULES:
        text = pattern.sub(REDACTED, text)
    return _AWS_PAIR.sub(lambda m: f"{m['lead']}{REDACTED}", text)


class Redactor:
    """The rules above plus the secret values of one run, learned from its environment and command line."""

    def __init__(self, env: Mapping[str, str] | None = None, argv: Iterable[str] = ()):
        values = {v for k, v in (env or {}).items() if is_secret_name(k)}
        args = list(argv)
        for i, arg in enumerate(args):
            if arg.startswith("-") and is_secret_flag(arg):
                values.add(arg.split("=", 1)[1] if "=" in arg else (args[i + 1] if i + 1 < len(args) else ""))
        for text in [*args, *(env or {}).values()]:  # a URL's credentials, in any argument or variable
            for m in _URL_CREDENTIALS.finditer(text):
                values.update(m["cred"].split(":", 1))
        self.values = sorted((v for v in values if len(v) >= MIN_LEARNED), key=len, reverse=True)

    def text(self, text: str) -> str:
        for value in self.values:
            text = text.replace(value, REDACTED)
        return redact_text(text)

    def json(self, value: Any) -> Any:
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


DEEPEST = 32  # a manifest nests a few levels; what lies deeper is dropped whole (nothing in it can leak)


def redact_json(value: Any, depth: int = 0) -> Any:
    """Any JSON-like value: keys whose last word is a secret word hidden (as for flags), URL credentials
    removed; an object or list nested deeper than DEEPEST replaced by REDACTED (a manifest is input: the
    standard parser takes ~1,000 levels, more than this recursion could follow)."""
    if isinstance(value, (dict, list)) and depth >= DEEPEST:
        return REDACTED
    if isinstance(value, dict):
        return {k: (REDACTED if isinstance(k, str) and is_secret_flag(k) else redact_json(v, depth + 1)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_json(v, depth + 1) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value
