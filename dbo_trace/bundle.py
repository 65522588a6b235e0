"""The bundle format: the only thing recording and analysis share.

A bundle is a folder::

    manifest.json            BUNDLE_FORMAT, version, what was recorded and how
    traces/*.json[.gz]       torch profiler (Kineto) Chrome traces, one per rank/process
    events/*.jsonl           hook event logs, one per process (EVENTS_FORMAT below)

docs/bundle-format.md is the reference; bump a version when a field changes meaning.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dbo_trace.files import replace_file
from dbo_trace.serve_args import afd_block, is_vllm_serve, serve_settings, without_env

BUNDLE_FORMAT = "dbo-trace-bundle"
BUNDLE_VERSION = 1
MANIFEST_NAME = "manifest.json"
TRACES_DIR = "traces"
EVENTS_DIR = "events"

EVENTS_FORMAT = "dbo-trace-events"
EVENTS_VERSION = 1
COUNTERS_FORMAT = "dbo-trace-counters"  # events/HOST-PID.counters.json, beside each log
COUNTERS_VERSION = 1

# Event kinds of the hook log. A record is a JSON array:
#   [t_ns, kind, ident, native_tid, ubatch, step, detail]
# t_ns is time.time_ns(); ident is threading.get_ident(); ubatch is -1 outside a
# microbatch thread; step is the process's step counter; detail is kind-specific.
EV_STEP_BEGIN = "step_begin"  # detail: {"path": PATH, "tokens": [n0, n1, ...]}
EV_STEP_END = "step_end"
EV_UB_WAIT = "ub_wait"  # thread entered UBatchContext, waiting for its turn
EV_UB_RUN = "ub_run"  # thread got its turn (left __enter__)
EV_UB_EXIT = "ub_exit"
EV_YIELD = "yield"  # CPU yield to the other microbatch begins
EV_RESUME = "resume"  # CPU yield ends
EV_STREAM = "stream"  # detail: "comm" | "compute"
EV_GRAPH_CAPTURE = "graph_capture"  # detail: {"mode": ..., "tokens": N}
EV_GRAPH_REPLAY = "graph_replay"  # detail: {"mode": ..., "tokens": N}
EV_HOOK_ERROR = "hook_error"  # detail: a one-line description; the hook is off after it
EV_LAYER = "layer"  # detail: layer index (emitted by workloads that know their layers)

# The paths a step can take through UBatchWrapper.__call__.
PATH_NOT_MICROBATCHED = "not_microbatched"
PATH_EAGER = "eager_microbatched"
PATH_GRAPH_CAPTURE = "graph_capture"
PATH_GRAPH_REPLAY = "graph_replay"


class BundleError(Exception):
    """A bundle on disk is not what it should be; the message names the file."""


# Kineto traces, and Nsight Systems reports and their SQLite exports.
TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".nsys-rep")


def trace_files(folder: Path) -> list[Path]:
    """Trace files in a folder, in a stable order."""
    found = [p for p in folder.iterdir() if p.is_file() and p.name.endswith(TRACE_SUFFIXES) and p.name != MANIFEST_NAME]
    return sorted(found)


def event_files(bundle: Path, suffix: str = ".jsonl") -> list[Path]:
    """A bundle's event logs (or, with suffix ".counters.json", its counters), in a stable order."""
    folder = bundle / EVENTS_DIR
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(suffix))


COUNTERS_SUFFIX = ".counters.json"


MAX_COUNTERS_BYTES = 4 << 20  # a process's counters file is a few KB; past this it is not one


def _small_regular_file(path: Path, cap: int) -> bytes | None:
    """The bytes of a regular file of at most cap bytes, else None, never blocking: opened
    non-blocking (a FIFO does not wait for a writer) and checked on the open descriptor (a symlink
    to /dev/zero is a device, however it was named)."""
    import os
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
            return None
        data = os.read(fd, cap + 1)
        return data if len(data) <= cap else None
    finally:
        os.close(fd)


def _finite_number(value: Any) -> bool:
    import math

    return (type(value) is int and abs(value) < 1 << 63) or (type(value) is float and math.isfinite(value))


def read_counters(folder: Path) -> list[tuple[Path, dict[str, Any], float]]:
    """Every process's counters under a DBO_TRACE_DIR (or its events/ folder): (path, body, age in
    seconds). A file being replaced or half-written is skipped this time round, and so is one that
    is not a counters file: not a regular file (a FIFO, a device), over MAX_COUNTERS_BYTES, not a
    JSON object of the format, nested too deeply. Of a body's counters only the finite numbers are
    kept, and a pid that is not a whole number becomes -1."""
    import time

    paths = event_files(folder, COUNTERS_SUFFIX) or (
        sorted(p for p in folder.iterdir() if p.name.endswith(COUNTERS_SUFFIX)) if folder.is_dir() else []
    )
    out = []
    for path in paths:
        try:
            data = _small_regular_file(path, MAX_COUNTERS_BYTES)
            body = json.loads(data) if data is not None else None
            age = time.time() - path.stat().st_mtime
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(body, dict) and body.get("format") == COUNTERS_FORMAT:
            counters = body.get("counters")
            counters = counters if isinstance(counters, dict) else {}
            body["counters"] = {str(k): v for k, v in counters.items() if _finite_number(v)}
            if not (type(body.get("pid")) is int and _finite_number(body["pid"])):
                body["pid"] = -1
            out.append((path, body, age))
    return out


MAX_MANIFEST_BYTES = 16 << 20  # a manifest is 20-30 KB; past this it is not one


def read_bounded(path: Path, cap: int) -> bytes:
    """A regular file's bytes, at most cap (opened non-blocking: a FIFO does not wait for a writer;
    checked on the open descriptor: a link to /dev/zero is a device). OSError naming why otherwise."""
    import os
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(0, "not a regular file")
        if st.st_size > cap:
            raise OSError(0, f"{st.st_size} bytes, more than the {cap >> 20} MiB a file of this kind can be")
        data = os.read(fd, cap + 1)
        if len(data) > cap:
            raise OSError(0, f"more than the {cap >> 20} MiB a file of this kind can be")
        return data
    finally:
        os.close(fd)


def is_bundle(path: Path) -> bool:
    return path.is_dir() and (path / MANIFEST_NAME).is_file()


def read_manifest(bundle: Path) -> dict[str, Any]:
    path = bundle / MANIFEST_NAME
    try:
        manifest = json.loads(read_bounded(path, MAX_MANIFEST_BYTES))
    except (OSError, ValueError, RecursionError) as exc:
        why: object = exc
        if isinstance(exc, RecursionError):
            why = "nested too deeply"
        elif isinstance(exc, OSError) and exc.errno == 0:  # read_bounded's own refusal: its words alone
            why = exc.strerror
        raise BundleError(f"{path}: cannot read the bundle manifest ({why})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
        raise BundleError(f'{path}: not a dbo-trace manifest (no "format": "{BUNDLE_FORMAT}")')
    version = manifest.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise BundleError(f"{path}: the manifest has no valid version ({version!r}); it is damaged: re-record or fix it")
    if version > BUNDLE_VERSION:
        raise BundleError(
            f"{path}: bundle version {version!r} is newer than this dbo-trace reads ({BUNDLE_VERSION}); upgrade dbo-trace"
        )
    return manifest


def write_manifest(bundle: Path, manifest: dict[str, Any]) -> Path:
    """Write manifest.json atomically, so an interrupted write leaves the old one."""
    bundle.mkdir(parents=True, exist_ok=True)
    body = {"format": BUNDLE_FORMAT, "version": BUNDLE_VERSION, **manifest}
    path = bundle / MANIFEST_NAME
    replace_file(path, (json.dumps(body, indent=2, sort_keys=True, default=str) + "\n").encode())
    return path


def amend_manifest(bundle: Path, fields: dict[str, Any]) -> Path:
    """The bundle's manifest with these keys set (or replaced), written back atomically: a writer's
    read (the demo completes the manifest `record` wrote), not a reader's."""
    manifest = read_manifest(bundle)
    manifest.update(fields)
    manifest.pop("format", None)
    manifest.pop("version", None)
    return write_manifest(bundle, manifest)


def archived_manifest(bundle: Path) -> bytes:
    """The manifest as a review archive holds it: every key, with the redaction rules applied again
    (older bundles, edited ones), as indented JSON with sorted keys. BundleError where it cannot be used."""
    # Imported here, not with the module: `report` imports the bundle reader, and the rules' regexes
    # were a third of its regex compiling (issue 55: start-up).
    from dbo_trace.redact import redact_argv, redact_env, redact_json

    out = redact_json(read_manifest(bundle))
    for key in ("command", "user_command"):
        if isinstance(out.get(key), list):
            out[key] = redact_argv([str(a) for a in out[key]])
    if isinstance(out.get("env"), dict):
        out["env"] = redact_env({str(k): str(v) for k, v in out["env"].items()})
    return (json.dumps(out, indent=2, sort_keys=True) + "\n").encode()


# ---- the manifest, typed ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RoleEntry:
    """One role of a manifest's `roles`: its traces (relative paths; None where not a list), whether
    the peer server wrote them, and the command and settings it ran with (None where absent)."""

    traces: tuple[str, ...] | None
    peer: bool
    command: tuple[str, ...] | None
    settings: dict[str, Any] | None


@dataclass(frozen=True)
class Manifest:
    """A bundle's manifest.json decoded once, by the bundle reader (docs/bundle-format.md): what the
    report, compare and top read of it, each field of the type its readers take (None, or left out of
    a tuple or mapping, where the manifest holds something else). What a reader checks as input and
    says why it refuses (comm_kernels, layers, repeats, pystacks) stays as written. The archive packs
    the whole manifest, redacted, through archived_manifest; the demo amends it (amend_manifest)."""

    version: int
    status: str | None  # record's: recording, then complete, no_traces, incomplete or failed; None: absent
    ended: str | None  # times.ended: when the recording ended (ISO 8601), where written
    command: tuple[str, ...] | None  # the main command as run
    settings: dict[str, Any] | None  # the `vllm serve` settings recorded (serve_args.SERVE_SETTINGS's groups)
    load: dict[str, Any] | None
    env: dict[str, Any] | None  # the recording's environment, where kept
    roles: dict[str, RoleEntry]  # an AFD pair's roles by name; empty: none declared
    afd: dict[str, Any] | None  # the main command's `afd` block (its --additional-config's)
    gpu_sharing: dict[str, Any] | None
    gpu_count: int | None  # the host's GPUs (`gpus.names`); None: not listed
    gpu_name: str | None  # the first of them by name, where a printable string (cut to 80 characters)
    comm_kernels: object  # checked where read (pipeline.options_from_manifests): a list of patterns
    layers: object  # likewise: a positive whole number
    repeats: object  # analysis.unprofiled.repeats_of reads it
    pystacks: object  # sample_entries reads it
    bundle: Path | None = None  # the bundle folder it was read from (to name it in an error)

    @property
    def named(self) -> str:
        """The manifest as an error line names it: its path, where read from a bundle."""
        return str(self.bundle / MANIFEST_NAME) if self.bundle is not None else "a bundle manifest"

    @property
    def afd_or_command_afd(self) -> dict[str, Any] | None:
        """The `afd` block, else the one the recorded command line passed (an older recorder's)."""
        return self.afd if self.afd is not None else command_afd(list(self.command) if self.command else None)


def _dict(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def _argv(value: Any) -> tuple[str, ...] | None:
    return tuple(value) if isinstance(value, list) and all(isinstance(a, str) for a in value) else None


def _role_entry(entry: Any) -> RoleEntry:
    entry = entry if isinstance(entry, dict) else {}
    traces = entry.get("traces")
    return RoleEntry(
        traces=tuple(t for t in traces if isinstance(t, str)) if isinstance(traces, list) else None,
        peer=entry.get("peer") is True,
        command=_argv(entry.get("command")),
        settings=_dict(entry.get("settings")),
    )


def manifest_of(raw: dict[str, Any], bundle: Path | None = None) -> Manifest:
    """A checked manifest (read_manifest's) typed: once, by the bundle reader."""
    roles = raw.get("roles")
    names = raw.get("gpus", {}).get("names") if isinstance(raw.get("gpus"), dict) else None
    first = names[0] if isinstance(names, list) and names and isinstance(names[0], str) else None
    status, times = raw.get("status"), _dict(raw.get("times"))
    ended = times.get("ended") if times is not None else None
    return Manifest(
        version=int(raw["version"]),
        status=status if isinstance(status, str) else None,
        ended=ended if isinstance(ended, str) else None,
        command=_argv(raw.get("command")),
        settings=_dict(raw.get("settings")),
        load=_dict(raw.get("load")),
        env=_dict(raw.get("env")),
        roles={k: _role_entry(v) for k, v in roles.items() if isinstance(k, str)} if isinstance(roles, dict) else {},
        afd=_dict(raw.get("afd")),
        gpu_sharing=_dict(raw.get("gpu_sharing")),
        gpu_count=len(names) if isinstance(names, list) else None,
        gpu_name=first[:80] if first and first.isprintable() else None,
        comm_kernels=raw.get("comm_kernels", []),
        layers=raw.get("layers"),
        repeats=raw.get("repeats"),
        pystacks=raw.get("pystacks"),
        bundle=bundle,
    )


def read_bundle_manifest(bundle: Path) -> Manifest:
    """The bundle's manifest, checked and typed (BundleError where it cannot be used)."""
    return manifest_of(read_manifest(bundle), bundle)


def served_settings(manifest: Manifest) -> dict[str, Any] | None:
    """The `vllm serve` settings a manifest records (the served side's: an AFD pair's attention
    server), or parsed from its command line where an older manifest has only that; None where
    neither says."""
    attention = manifest.roles.get("attention")
    for settings in (manifest.settings, attention.settings if attention else None):
        if settings:
            return settings
    for command in (manifest.command, attention.command if attention else None):
        if command is not None and is_vllm_serve(list(command)):
            return serve_settings(without_env(list(command)))
    return None


# ---- a recording read once -----------------------------------------------------------------------


@dataclass(frozen=True)
class RoleClaims:
    """What a recording says of one trace's role, as it says it (analysis/afd/role_evidence.py
    resolve_role decides): its manifest's (the `roles` block, else the `afd` block's role) and its
    recorded command line's (`--additional-config '{"afd": {"role": ...}}'`)."""

    manifest: str | None = None
    command: str | None = None


@dataclass(frozen=True)
class Bundle:
    """A recording read once: its manifest, its traces (the manifest's roles give some of them a
    role: an AFD attention server and its FFN server), its event logs and its Python stack samples,
    and what in it could not be used."""

    path: Path
    manifest: Manifest
    traces: tuple[Path, ...]  # traces/ and the traces the manifest's roles name (the FFN's under peer/traces/)
    role_claims: dict[str, RoleClaims]  # os.path.normpath(trace) -> what the recording says of its role
    logs: tuple[Path, ...]  # events/, and with roles the peer's events/ (each log joined to its process)
    pystacks: tuple[SampleEntry, ...]
    warnings: tuple[str, ...]


def read_bundle(path: Path) -> Bundle:
    """The bundle at path (BundleError where its manifest cannot be used or it holds no trace)."""
    manifest = read_bundle_manifest(path)
    traces_dir = path / TRACES_DIR
    traces = trace_files(traces_dir) if traces_dir.is_dir() else []
    named = manifest_roles(manifest)
    claims: dict[str, RoleClaims] = {}
    if not named:  # an older recorder's bundle: its afd block, or its command line, names its traces' role
        afd = manifest.afd
        own = RoleClaims(
            str(afd["role"]) if afd is not None and afd.get("role") in AFD_ROLES else None,
            command_role(list(manifest.command) if manifest.command is not None else None),
        )
        if own != RoleClaims():
            claims = {os.path.normpath(t): own for t in traces}
    for rel, role in named.items():
        p = path / rel
        if ".." in Path(rel).parts or not p.is_file():
            continue
        if p not in traces:
            traces.append(p)
        claims[os.path.normpath(p)] = RoleClaims(manifest=role)
    if not traces:
        raise BundleError(
            f"{path}: the bundle has no traces under {TRACES_DIR}/ (was the recording stopped before the profiler wrote them?)"
        )
    logs = event_files(path) + (event_files(path / "peer") if named else [])
    entries, warnings = sample_entries(path, manifest)
    return Bundle(path, manifest, tuple(traces), claims, tuple(logs), tuple(entries), tuple(warnings))


ROLE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}")  # attention, ffn: a role is a short name, else ignored
ROLE_FROM_MANIFEST = "manifest"  # the manifest's `roles` (or its `afd` block's role)
ROLE_FROM_COMMAND = "command line"  # the recorded command's --additional-config '{"afd": {"role": ...}}'
AFD_ROLES = ("attention", "ffn")


def manifest_roles(manifest: Manifest) -> dict[str, str]:
    """{trace path relative to the bundle: role} from a manifest's `roles` (docs/bundle-format.md);
    an entry that is not a list of strings is left out (a role is only a label of its traces)."""
    out: dict[str, str] = {}
    for role, entry in manifest.roles.items():
        if ROLE_NAME.fullmatch(role) and entry.traces is not None:
            out.update({t: role for t in entry.traces})
    return out


def command_afd(command: Any) -> dict[str, Any] | None:
    """The `afd` block a server command line passed in `--additional-config '{"afd": {...}}'` (also
    `--additional-config=...`; its last, as vLLM takes it); None where it passed none."""
    if not isinstance(command, list) or not all(isinstance(a, str) for a in command):
        return None
    return afd_block(command)


def command_role(command: Any) -> str | None:
    """The AFD role a server command line asked for (one of AFD_ROLES), else None."""
    afd = command_afd(command)
    role = afd.get("role") if afd is not None else None
    return str(role) if role in AFD_ROLES else None


@dataclass(frozen=True)
class SampleEntry:
    """A manifest's `pystacks` entry, checked."""

    path: Path
    role: str | None
    pid: int | None
    rate_hz: float | None
    started_unix_ns: int | None
    note: str | None


def _whole(value: Any) -> bool:
    return type(value) is int and 0 <= value < 1 << 63


def sample_entries(bundle: Path, manifest: Manifest) -> tuple[list[SampleEntry], list[str]]:
    """The manifest's `pystacks` entries that name a file in the bundle, checked; a warning for
    each one that is damaged or says why it has no file."""
    listed = manifest.pystacks
    if listed is None:
        return [], []
    if not isinstance(listed, list):
        return [], [f"{bundle}: the manifest's pystacks is not a list; its Python stack samples are not read"]
    out, warnings = [], []
    for i, item in enumerate(listed[:64]):
        where = f"{bundle}: the manifest's pystacks[{i}]"
        if not isinstance(item, dict):
            warnings.append(f"{where} is not an object; skipped")
            continue
        rel = item.get("path")
        note = item.get("note")
        if rel is None:
            if isinstance(note, str):
                warnings.append(f"{where}: no Python stack samples ({note[:300]})")
            continue
        if not isinstance(rel, str) or rel.startswith("/") or ".." in Path(rel).parts or "\x00" in rel:
            warnings.append(f"{where}: its path is not a file inside the bundle; skipped")
            continue
        rate = item.get("rate_hz")
        started = item.get("started_unix_ns")
        role = item.get("role")
        pid = item.get("pid")
        path = bundle / rel
        if not path.exists():
            warnings.append(f"{where}: {rel} is missing" + (f" ({note[:300]})" if isinstance(note, str) else ""))
            continue
        out.append(
            SampleEntry(
                path=path,
                role=role[:200] if isinstance(role, str) else None,
                pid=pid if _whole(pid) else None,
                rate_hz=float(rate) if isinstance(rate, (int, float)) and not isinstance(rate, bool) and 0 < rate <= 100_000 else None,
                started_unix_ns=started if _whole(started) else None,
                note=note[:300] if isinstance(note, str) else None,
            )
        )
    return out, warnings
