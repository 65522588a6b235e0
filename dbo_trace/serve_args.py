"""A `vllm serve` command line read: its flags, whether it serves vLLM, the settings that decide
whether and how DBO runs, and the server's URL. The recording side writes these settings into the
manifest; compare reads them back from an older manifest's command line. A leaf: it imports nothing
of dbo_trace."""

from __future__ import annotations

import json
import os
import re

# `vllm serve` flags that decide whether and how DBO runs, grouped for the manifest.
SERVE_SETTINGS = {
    "dbo": ("enable-dbo", "dbo-decode-token-threshold", "dbo-prefill-token-threshold", "ubatch-size", "microbatch-schedule"),
    "parallel": (
        "tensor-parallel-size",
        "data-parallel-size",
        "pipeline-parallel-size",
        "enable-expert-parallel",
        "all2all-backend",
        "data-parallel-size-local",
        "enable-eplb",
    ),
    "cudagraph": ("enforce-eager", "compilation-config", "cudagraph-capture-sizes", "max-cudagraph-capture-size"),
    "batching": ("max-num-seqs", "max-num-batched-tokens", "max-model-len"),
    # The AFD plugin's settings (role, connector, ranks, port) travel in --additional-config.
    "additional": ("additional-config",),
}
_SHORT_FLAGS = {
    "-tp": "tensor-parallel-size",
    "-dp": "data-parallel-size",
    "-pp": "pipeline-parallel-size",
    "-O": "compilation-config",
}


def parse_flags(argv: list[str]) -> dict[str, str | bool]:
    """`--name value`, `--name=value` and bare `--flag` into {name: value}; positionals are skipped."""
    flags: dict[str, str | bool] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        name = _SHORT_FLAGS.get(arg) or (arg[2:] if arg.startswith("--") else None)
        if name is None:
            i += 1
            continue
        if "=" in name:
            key, value = name.split("=", 1)
            flags[key.replace("_", "-")] = value
        elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            flags[name.replace("_", "-")] = argv[i + 1]
            i += 1
        else:
            flags[name.replace("_", "-")] = True
        i += 1
    return flags


def json_value(text: object) -> object:
    """A flag's JSON value (--additional-config, --compilation-config) parsed; None where it is not
    a string of JSON. Untrusted (a manifest's command line): JSON nested past Python's recursion
    limit is not JSON here either."""
    if not isinstance(text, str):
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def afd_block(argv: list[str]) -> dict[str, object] | None:
    """The `afd` block of a command line's --additional-config (its last, as vLLM's parser takes),
    or None where it passes none."""
    config = json_value(parse_flags(argv).get("additional-config"))
    afd = config.get("afd") if isinstance(config, dict) else None
    return afd if isinstance(afd, dict) else None


def without_env(argv: list[str]) -> list[str]:
    """The command after a leading `env NAME=VALUE ...` (an AFD pair sets NCCL_HOSTID per role so)."""
    if argv and os.path.basename(argv[0]) == "env":
        i = 1
        while i < len(argv) and "=" in argv[i] and not argv[i].startswith("-"):
            i += 1
        return argv[i:]
    return argv


def is_vllm_serve(argv: list[str]) -> bool:
    """`vllm serve ...` or `python -m vllm.entrypoints.openai.api_server ...`, after any `env NAME=VALUE`."""
    argv = without_env(argv)
    if len(argv) >= 2 and os.path.basename(argv[0]) == "vllm" and argv[1] == "serve":
        return True
    return "vllm.entrypoints.openai.api_server" in argv


def serve_settings(argv: list[str]) -> dict[str, dict[str, str | bool]]:
    flags = parse_flags(argv)
    return {group: {k: flags[k] for k in keys if k in flags} for group, keys in SERVE_SETTINGS.items()}


def server_url(argv: list[str]) -> str:
    flags = parse_flags(argv)
    host = flags.get("host")
    host = "127.0.0.1" if host in (None, True, "0.0.0.0", "::", "") else host
    port = flags.get("port", "8000")
    return f"http://{host}:{port}"


def capture_sizes(settings: dict[str, dict[str, str | bool]] | None) -> tuple[int, ...] | None:
    """The CUDA graph capture sizes a `vllm serve` command line names (--compilation-config's
    cudagraph_capture_sizes, or --cudagraph-capture-sizes); None where it names none. Untrusted: only
    whole numbers between 1 and 1,000,000 are kept."""
    group = settings.get("cudagraph") if isinstance(settings, dict) else None
    if not isinstance(group, dict):
        return None
    found: object = None
    parsed = json_value(group.get("compilation-config"))
    if isinstance(parsed, dict):
        found = parsed.get("cudagraph_capture_sizes")
    listed = group.get("cudagraph-capture-sizes")
    if found is None and isinstance(listed, str):
        found = [x for x in re.split(r"[\s,\[\]]+", listed) if x]
    if not isinstance(found, list):
        return None
    sizes = [whole_number(x) for x in found]
    if not all(n is not None and 1 <= n <= 1_000_000 for n in sizes):
        return None
    return tuple(sorted({n for n in sizes if n is not None})) or None


def whole_number(x: object) -> int | None:
    """A whole number as JSON or a command line writes one (7, 7.0, "7"; 18 digits at most as text);
    None for anything else (a fraction, infinity, NaN, a boolean, digits of another script such as
    "²", which str.isdigit takes and int() refuses). Untrusted input's numbers go through it."""
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x
    if isinstance(x, float):
        return int(x) if x.is_integer() else None  # is_integer is False for inf and NaN
    if isinstance(x, str) and x.isascii() and x.isdigit() and len(x) <= 18:
        return int(x)
    return None
