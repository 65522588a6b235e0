"""A load sweep's folder (`dbo-trace sweep`, docs/bundle-format.md "A load sweep"), read as untrusted
input: sweep.json and a bundle per arm and load.

    OUT/sweep.json       SWEEP_FORMAT, version, the arms, the loads, and each run's status
    OUT/ARM/LOAD/        a bundle as `record` writes it, its manifest with "sweep": {"arm", "load"}

sweep.json is decoded into typed Structs (msgspec) with its size bounded: a damaged one is one line
naming the file (SweepError). A run is read only as far as the summary needs (its manifest's
settings, load, timed repeats and GPU sharing, and whether it holds traces); a run whose bundle is
missing, failed or damaged is kept with why, never fatal to the rest.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from dbo_trace.bundle import BUNDLE_FORMAT, BUNDLE_VERSION, MANIFEST_NAME, MAX_MANIFEST_BYTES, TRACES_DIR, read_bounded, trace_files
from dbo_trace.files import resolved

SWEEP_FORMAT = "dbo-trace-sweep"
SWEEP_VERSION = 1
SWEEP_NAME = "sweep.json"
MAX_SWEEP_BYTES = 4 << 20  # a sweep.json lists a few arms and loads: a few KB
MOST_ARMS, MOST_LOADS = 64, 256

COMPLETE, FAILED, INCOMPLETE, SKIPPED, PENDING = "complete", "failed", "incomplete", "skipped", "pending"
Status = Literal["complete", "failed", "incomplete", "skipped", "pending"]

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=1000)]
Arg = Annotated[str, msgspec.Meta(max_length=100_000)]
Positive = Annotated[int, msgspec.Meta(ge=1, le=1 << 40)]


class SweepError(Exception):
    """A sweep folder that cannot be read: the message names the file and what to do."""


class NotASweep(SweepError):
    """sweep.json holds JSON, but not an object: no sweep's document."""


class ArmSpec(msgspec.Struct, frozen=True):
    name: Name
    args: list[Arg] = []


class LoadSpec(msgspec.Struct, frozen=True):
    name: Name
    concurrency: Positive
    num_prompts: Positive
    input_len: Positive
    output_len: Positive


class RunEntry(msgspec.Struct, frozen=True):
    arm: Name
    load: Name
    bundle: Annotated[str, msgspec.Meta(min_length=1, max_length=1000)]
    status: Status
    reason: Annotated[str, msgspec.Meta(max_length=100_000)] | None = None


class SweepFile(msgspec.Struct, frozen=True):
    """sweep.json: keys a later writer adds within version 1 are ignored."""

    format: str
    version: int
    created: Annotated[str, msgspec.Meta(max_length=100)]
    command: list[Arg]
    arms: Annotated[list[ArmSpec], msgspec.Meta(min_length=1, max_length=MOST_ARMS)]
    loads: Annotated[list[LoadSpec], msgspec.Meta(min_length=1, max_length=MOST_LOADS)]
    repeats: Annotated[int, msgspec.Meta(ge=0, le=1000)]
    profile: bool
    runs: Annotated[list[RunEntry], msgspec.Meta(max_length=MOST_ARMS * MOST_LOADS)]
    peer_command: list[Arg] | None = None


class _Head(msgspec.Struct):
    format: Any = None
    version: Any = None


class ManifestLoad(msgspec.Struct, frozen=True):
    concurrency: int | None = None
    num_prompts: int | None = None
    input_len: int | None = None
    output_len: int | None = None


class ManifestSweep(msgspec.Struct, frozen=True):
    arm: str
    load: str


class RunManifest(msgspec.Struct, frozen=True):
    """The part of a run's manifest the summary reads; every other key is left as it is."""

    format: str
    version: int
    status: str | None = None  # record's own: complete, failed, incomplete, no_traces, recording
    settings: dict[str, Any] | None = None
    load: ManifestLoad | None = None
    repeats: list[dict[str, Any]] = []  # each repeat's numbers are checked where read (analysis/compare/unprofiled.py repeats_of)
    gpu_sharing: dict[str, Any] | None = None
    sweep: ManifestSweep | None = None


@dataclass(frozen=True)
class SweepRun:
    """One arm at one load: sweep.json's entry, and its bundle as far as it could be read."""

    arm: str
    load: str
    status: str  # sweep.json's, or PENDING for a pair sweep.json does not list
    reason: str | None  # sweep.json's reason, or why the bundle cannot be used
    bundle: Path | None  # the bundle folder, where it is inside the sweep and holds a manifest
    manifest: RunManifest | None  # None: no usable manifest (reason says why)
    profiled: bool  # the bundle holds traces: its profiled window can be analysed

    @property
    def usable(self) -> bool:
        return self.status == COMPLETE and self.manifest is not None


@dataclass(frozen=True)
class Sweep:
    path: Path
    spec: SweepFile
    runs: tuple[SweepRun, ...]  # every arm at every load, in the loads' order, then the arms'
    warnings: tuple[str, ...]

    def run(self, arm: str, load: str) -> SweepRun:
        return next(r for r in self.runs if r.arm == arm and r.load == load)


def is_sweep(path: Path) -> bool:
    return path.is_dir() and (path / SWEEP_NAME).is_file()


def _why(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


_FIX = "re-run `dbo-trace sweep` with the same --out to rewrite it, or fix it"


def read_sweep_bytes(folder: Path) -> bytes:
    """sweep.json's bytes: the one read of it, at most MAX_SWEEP_BYTES (a regular file, opened without
    blocking, its size checked before the read and the read itself of at most one byte more), else
    SweepError naming the file."""
    path = folder / SWEEP_NAME
    try:
        return read_bounded(path, MAX_SWEEP_BYTES)
    except OSError as exc:
        raise SweepError(f"{path}: cannot read the sweep's summary ({_why(exc)}); {_FIX}") from None


def read_sweep_document(folder: Path) -> dict[str, Any]:
    """sweep.json as a JSON object, read by read_sweep_bytes (SweepError where it is not one): for
    what takes the document as a whole, the recorder resuming the sweep (record/sweep.py read_state,
    which checks its plan) and the archive copying it, redacted, after read_spec checked it."""
    path = folder / SWEEP_NAME
    data = read_sweep_bytes(folder)
    try:
        body = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise SweepError(f"{path}: cannot read the sweep's summary ({_why(exc)}); {_FIX}") from None
    if not isinstance(body, dict):
        raise NotASweep(f'{path}: not a dbo-trace sweep (no "format": "{SWEEP_FORMAT}")')
    return body


def read_spec(folder: Path) -> SweepFile:
    """sweep.json, checked: its format and version, its types, names unique, every run naming an arm
    and a load it lists once, every bundle a path inside the folder."""
    path = folder / SWEEP_NAME
    fix = _FIX
    data = read_sweep_bytes(folder)
    try:
        head = msgspec.json.decode(data, type=_Head)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise SweepError(f"{path}: cannot read the sweep's summary ({_why(exc)}); {fix}") from None
    if head.format != SWEEP_FORMAT:
        raise SweepError(f'{path}: not a dbo-trace sweep (no "format": "{SWEEP_FORMAT}")')
    if type(head.version) is not int or head.version < 1:
        raise SweepError(f"{path}: the sweep has no valid version ({head.version!r}); it is damaged: {fix}")
    if head.version > SWEEP_VERSION:
        raise SweepError(
            f"{path}: sweep version {head.version} is newer than this dbo-trace reads ({SWEEP_VERSION}); upgrade dbo-trace"
        )
    try:
        spec = msgspec.json.decode(data, type=SweepFile)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise SweepError(f"{path}: damaged ({_why(exc)}); {fix}") from None
    for kind, names in (("arm", [a.name for a in spec.arms]), ("load", [x.name for x in spec.loads])):
        twice = next((n for n in names if names.count(n) > 1), None)
        if twice is not None:
            raise SweepError(f"{path}: damaged (the {kind} {twice!r} is listed twice); {fix}")
    arms, loads = {a.name for a in spec.arms}, {x.name for x in spec.loads}
    seen: set[tuple[str, str]] = set()
    for i, run in enumerate(spec.runs):
        where = f"{path}: damaged (runs[{i}]"
        if run.arm not in arms or run.load not in loads:
            raise SweepError(f"{where} names arm {run.arm!r} and load {run.load!r}, which the sweep does not list); {fix}")
        if (run.arm, run.load) in seen:
            raise SweepError(f"{where}: arm {run.arm!r} at load {run.load!r} is listed twice); {fix}")
        seen.add((run.arm, run.load))
        parts = Path(run.bundle).parts
        if run.bundle.startswith("/") or "\\" in run.bundle or ".." in parts or "\x00" in run.bundle:
            raise SweepError(f"{where}: its bundle {run.bundle!r} is not a folder inside the sweep); {fix}")
    return spec


def read_run_manifest(bundle: Path) -> RunManifest:
    """A run's manifest, bounded and typed (ValueError naming the file where it cannot be used). Read
    with the standard parser, as the bundle reader reads it (a repeat's NaN stays a number, left out
    where read), then its types checked."""
    path = bundle / MANIFEST_NAME
    try:
        raw = json.loads(read_bounded(path, MAX_MANIFEST_BYTES))
        manifest = msgspec.convert(raw, RunManifest)
    except (OSError, ValueError, RecursionError, msgspec.ValidationError) as exc:
        raise ValueError(f"{path}: its manifest cannot be used ({_why(exc)})") from None
    if manifest.format != BUNDLE_FORMAT or not 1 <= manifest.version <= BUNDLE_VERSION:
        raise ValueError(
            f"{path}: not a dbo-trace manifest this version reads (format {manifest.format!r}, version {manifest.version})"
        )
    return manifest


def _run(folder: Path, entry: RunEntry | None, arm: str, load: str) -> SweepRun:
    if entry is None:
        return SweepRun(arm, load, PENDING, "not in the sweep's runs", None, None, False)
    bundle = folder / entry.bundle
    try:
        inside = resolved(bundle).is_relative_to(resolved(folder))
    except OSError:  # a symlink loop
        why = f"its bundle {entry.bundle} cannot be followed (a symlink loop?)" if entry.status == COMPLETE else entry.reason
        return SweepRun(arm, load, entry.status, why, None, None, False)
    if not inside or not (bundle / MANIFEST_NAME).is_file():
        why = entry.reason
        if entry.status == COMPLETE:
            why = f"its bundle {entry.bundle} is missing" if inside else f"its bundle {entry.bundle} leads outside the sweep"
        return SweepRun(arm, load, entry.status, why, None, None, False)
    try:
        manifest = read_run_manifest(bundle)
    except ValueError as exc:
        return SweepRun(arm, load, entry.status, entry.reason if entry.status != COMPLETE else str(exc), bundle, None, False)
    reason = entry.reason
    if entry.status == COMPLETE and manifest.status not in (None, COMPLETE, "no_traces"):
        said = f"its manifest's status is {manifest.status[:40]!r}, not complete; not used"
        return SweepRun(arm, load, INCOMPLETE, said, bundle, None, False)
    if manifest.sweep is not None and (manifest.sweep.arm, manifest.sweep.load) != (arm, load):
        said = f"arm {manifest.sweep.arm!r} at load {manifest.sweep.load!r}"
        return SweepRun(arm, load, entry.status, f"its manifest says it is {said}; not used", bundle, None, False)
    traces = bundle / TRACES_DIR
    profiled = traces.is_dir() and bool(trace_files(traces))
    return SweepRun(arm, load, entry.status, reason, bundle, manifest, profiled)


def read_sweep(folder: Path) -> Sweep:
    """The sweep folder: sweep.json (SweepError where it cannot be used) and every arm at every load."""
    spec = read_spec(folder)
    entries = {(r.arm, r.load): r for r in spec.runs}
    runs, warnings = [], []
    for load in spec.loads:
        for arm in spec.arms:
            run = _run(folder, entries.get((arm.name, load.name)), arm.name, load.name)
            m = run.manifest
            if m is not None and m.load is not None and m.load.concurrency not in (None, load.concurrency):
                warnings.append(
                    f"{run.bundle}: its manifest's load has {m.load.concurrency} requests in flight where the sweep "
                    f"lists {load.concurrency} for load {load.name!r}; the sweep's figure is used"
                )
            runs.append(run)
    return Sweep(folder, spec, tuple(runs), tuple(warnings))
