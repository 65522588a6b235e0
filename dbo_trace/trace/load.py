"""From paths the user gave to timelines: a trace file, a folder of traces, or a bundle.

Discovery is one type for every executor: Found, a list of Input (each trace with the node that holds
it, its size and time, the path given it came from and what its bundle claims of its role) with the
manifests, event logs and Python samples beside them. discover() finds them on this machine; on a Ray
node, app/ray_executor.py find() calls it under the paths asked of that node, and merged() joins what
the nodes found."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from dbo_trace import bundle as fmt
from dbo_trace.files import resolved
from dbo_trace.trace.errors import InputError
from dbo_trace.trace.eventlog import EventLogData, read_event_log
from dbo_trace.trace.kineto import SqliteFile, categories_seen, read_kineto
from dbo_trace.trace.nsys import NSYS_REP_SUFFIX, read_nsys
from dbo_trace.trace.pystacks import StackSamples, read_pystacks
from dbo_trace.trace.timeline import EPOCH_HI_US, EPOCH_LO_US, Timeline, build_timeline


@dataclass(frozen=True)
class Input:
    """One trace to read. Its role is known once it is read (app/pipeline.py Shared.role_call, by the
    one rule of analysis/afd/role_evidence.py): here is what its bundle claims of it, the role's source
    before the trace's own evidence."""

    path: Path
    given: int  # the index of the path the user gave that led to it
    node: str | None = None  # the Ray node that holds it (its id); None: this machine
    size: int | None = None  # bytes and modification time (ns) where known: one file on a shared
    mtime_ns: int | None = None  # filesystem is one path, size and time on every node that sees it
    claims: fmt.RoleClaims | None = None  # what its bundle says of its role (manifest, command line); None: nothing


@dataclass
class Found:
    """What the user's paths hold, before any trace is read: the traces (Input), the bundles' manifests,
    the event logs and Python stack samples, and what discovery said. The logs and samples are read
    beside the traces' discovery where the files are (read_logs_and_samples: on a Ray node; here, when
    the pipeline prepares): logs and pystacks are the files not read yet, event_logs, samples and
    read_warnings what reading them gave."""

    inputs: list[Input] = field(default_factory=list)
    manifests: list[fmt.Manifest] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # what discovery said
    logs: list[Path] = field(default_factory=list)  # event logs, to read
    pystacks: list[fmt.SampleEntry] = field(default_factory=list)  # Python stack samples (py-spy), to read
    event_logs: list[EventLogData] = field(default_factory=list)
    samples: list[StackSamples] = field(default_factory=list)
    read_warnings: list[str] = field(default_factory=list)  # the event logs and samples that could not be read

    @property
    def traces(self) -> list[Path]:
        """The traces' paths, in the order found."""
        return [i.path for i in self.inputs]

    def claims(self) -> dict[str, fmt.RoleClaims]:
        """os.path.normpath(trace) -> what its bundle says of its role, for each trace that has a claim."""
        return {os.path.normpath(i.path): i.claims for i in self.inputs if i.claims is not None}


def _input(path: Path, given: int, node: str | None, claims: fmt.RoleClaims | None = None) -> Input:
    try:
        st = os.stat(path)
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror})") from None
    return Input(path, given, node, st.st_size, st.st_mtime_ns, claims)


def _discover(path: Path, given: int, node: str | None, found: Found) -> None:
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    if path.is_file():
        found.inputs.append(_input(path, given, node))
        return
    if not path.is_dir():
        raise InputError(f"{path}: not a regular file or folder (a pipe or device?); give a trace file, a folder or a bundle")
    if not os.access(path, os.R_OK | os.X_OK):
        raise InputError(f"{path}: the folder cannot be listed (permission denied)")
    if fmt.is_bundle(path):
        try:
            bundle = fmt.read_bundle(path)
        except fmt.BundleError as exc:
            raise InputError(str(exc)) from None
        found.manifests.append(bundle.manifest)
        found.inputs += [_input(t, given, node, bundle.role_claims.get(os.path.normpath(t))) for t in bundle.traces]
        found.logs += bundle.logs
        found.pystacks += bundle.pystacks
        found.warnings += bundle.warnings
        return
    traces = fmt.trace_files(path)
    if not traces:
        raise InputError(
            f"{path}: no traces in this folder (expected *.json or *.json.gz, e.g. vLLM's *.pt.trace.json.gz, "
            "or Nsight Systems' *.nsys-rep / *.sqlite)"
        )
    found.inputs += [_input(t, given, node) for t in traces]


def discover(paths: list[Path], first: int = 0, node: str | None = None) -> Found:
    """What the paths hold on this machine; first: the index of paths[0] among the paths the user gave;
    node: this machine's Ray node id, where a Ray node discovers (app/ray_executor.py find)."""
    found = Found()
    seen: set[Path] = set()
    for given, p in enumerate(paths, first):
        try:
            key = resolved(p)
        except OSError:
            raise InputError(f"{p}: cannot be followed (a symlink loop?); give the file or folder itself") from None
        if key in seen:  # the same run twice would be two identical ranks, every total doubled
            found.warnings.append(f"{p}: given more than once; read once")
            continue
        seen.add(key)
        _discover(p, given, node, found)
    once: dict[Path, Input] = {}
    for i in found.inputs:  # a file given beside the folder that holds it: its first place, its bundle's claim
        kept = once.setdefault(i.path, i)
        if kept.claims is None and i.claims is not None:
            once[i.path] = replace(kept, claims=i.claims)
    if len(once) < len(found.inputs):
        found.warnings.append("a trace was given both by itself and inside a folder or bundle; read once")
    found.inputs, found.logs = list(once.values()), list(dict.fromkeys(found.logs))
    return found


def merged(founds: Sequence[Found], name: Callable[[str], str] = str) -> Found:
    """What several nodes found, as one Found: each trace once, as a local run orders them (by the path
    given, then by its path); a file that several nodes found at one path with one size and time is one
    file on a shared filesystem, read by whichever of them has the fewest traces so far (ties: by name
    of the node). The rest in the order given."""
    holders: dict[tuple[int, Path, int | None, int | None], list[Input]] = {}
    for f in founds:
        for i in f.inputs:
            holders.setdefault((i.given, i.path, i.size, i.mtime_ns), []).append(i)
    load: dict[str | None, int] = {}
    out = Found()
    for _key, copies in sorted(holders.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or 0, kv[0][3] or 0)):
        chosen = min(copies, key=lambda i: (load.get(i.node, 0), name(i.node) if i.node is not None else ""))
        load[chosen.node] = load.get(chosen.node, 0) + 1
        out.inputs.append(chosen)
    for f in founds:
        out.manifests += f.manifests
        out.warnings += f.warnings
        out.logs += f.logs
        out.pystacks += f.pystacks
        out.event_logs += f.event_logs
        out.samples += f.samples
        out.read_warnings += f.read_warnings
    return out


def total_bytes(found: Found) -> int:
    return sum(i.size if i.size is not None else os.path.getsize(i.path) for i in found.inputs)


def read_timeline(trace: Path, index: int, progress: Callable[[int], None] | None = None, workers: int = 1) -> Timeline:
    """One trace as a timeline; the rank it claims from distributedInfo, else its position among the inputs.
    workers > 1: a large trace is decoded in that many processes (trace/kineto/read.py)."""
    raw = read_kineto(trace, progress=progress, workers=workers)
    info = raw.metadata.get("distributedInfo")
    rank: int = info["rank"] if isinstance(info, dict) and isinstance(info.get("rank"), int) else index
    tl = build_timeline(raw, rank)
    if not len(tl.gpu):
        raise InputError(f"{trace}: {_without_gpu_activity(trace, tl)}")
    return tl


_OTHER_DEVICE = ("mtia", "xpu", "hpu", "npu", "tpu", "mlu")  # accelerators whose traces dbo-trace cannot read


def _without_gpu_activity(trace: Path, tl: Timeline) -> str:
    """Why a trace gave no GPU activity, from what it does hold."""
    seen = categories_seen(trace)
    other = sorted((c for c in seen if c.lower().startswith(_OTHER_DEVICE)), key=lambda c: -seen[c])
    if other:
        held = ", ".join(f"{c} ({seen[c]})" for c in other[:4])
        return (
            f"no CUDA or HIP GPU activity: the trace holds another accelerator's events ({held}); "
            "dbo-trace reads NVIDIA (CUDA) and AMD (ROCm) traces"
        )
    if not len(tl.calls) and len(tl.cpu):
        return "only CPU events, no GPU activity (was the profiler run without CUDA activities, ProfilerActivity.CUDA?)"
    return "no GPU activity in the trace (was the profiler run without CUDA activities?)"


def read_timelines(trace: Path, index: int, progress: Callable[[int], None] | None = None, workers: int = 1) -> list[Timeline]:
    """The timelines of one input file: a Kineto trace is one; an Nsight Systems export is one per
    process that ran GPU work (claiming ranks from index on; settle_ranks numbers clashing claims).
    Each file is opened once: an export that is not a .nsys-rep is told by the first bytes the
    Kineto reader's open reads (SqliteFile), then read by SQLite."""
    if trace.name.endswith(NSYS_REP_SUFFIX):
        return read_nsys(trace, index)
    try:
        return [read_timeline(trace, index, progress, workers)]
    except SqliteFile:
        return read_nsys(trace, index)


def read_logs_and_samples(found: Found) -> Found:
    """Found with its event logs and Python samples read (those not read yet), and a warning for each
    unreadable file (the report goes on without it). Where the files are: a Ray node reads its own."""
    logs, log_warnings = read_logs(found.logs)
    samples, sample_warnings = read_samples(found.pystacks)
    return replace(
        found, logs=[], pystacks=[], event_logs=found.event_logs + logs, samples=found.samples + samples,
        read_warnings=found.read_warnings + log_warnings + sample_warnings,
    )  # fmt: skip


def read_logs(paths: Sequence[Path]) -> tuple[list[EventLogData], list[str]]:
    """The event logs, and a warning for each unreadable one."""
    logs, warnings = [], []
    for path in paths:
        try:
            logs.append(read_event_log(path))
        except InputError as exc:
            warnings.append(f"skipped: {exc}")
    return logs, warnings


def read_samples(entries: Sequence[fmt.SampleEntry]) -> tuple[list[StackSamples], list[str]]:
    """The sampled Python stacks, and a warning for each unreadable file (the report goes on without it)."""
    samples, warnings = [], []
    for entry in entries:
        try:
            read = read_pystacks(entry.path, entry)
        except InputError as exc:
            warnings.append(f"skipped: {exc}")
            continue
        samples.append(read)
        warnings += read.warnings
    return samples, warnings


def settle_ranks(timelines: list[Timeline], errors: list[str]) -> tuple[list[int], list[str]]:
    """Each timeline's rank number, in the order given: the rank its trace claims, or, where claims
    clash (several processes without distributedInfo), its place among the traces by name. Checks
    that they are one run; errors of the others become warnings (all failed is an error). Returns
    the numbers and the warnings. The one place a rank's number is decided: the timelines are not
    changed, the caller carries the number into the rank's report (analyze_rank's rank)."""
    if not timelines:
        raise InputError(errors[0] if len(errors) == 1 else f"{errors[0]} (and {len(errors) - 1} more traces failed)")
    numbers = [t.claimed_rank for t in timelines]
    if len(set(numbers)) != len(numbers):  # several processes without distributedInfo: number them
        by_name = sorted(range(len(timelines)), key=lambda i: str(timelines[i].source))
        for number, i in enumerate(by_name):
            numbers[i] = number
    _check_one_run([timelines[i] for i in rank_order(numbers)])
    return numbers, [f"skipped: {e}" for e in errors]


def rank_order(numbers: list[int]) -> list[int]:
    """The positions of the rank numbers, lowest number first."""
    return sorted(range(len(numbers)), key=numbers.__getitem__)


def _wall_window(tl: Timeline) -> tuple[float, float] | None:
    """The trace's events on the shared time.time_ns clock (us), where the trace has a clock base
    or its ts is already on that clock (epoch microseconds)."""
    starts = [a.start.min() for a in (tl.gpu, tl.calls, tl.cpu) if len(a)]
    ends = [a.end.max() for a in (tl.gpu, tl.calls, tl.cpu) if len(a)]
    if tl.base_time_ns is None:
        if not starts or not EPOCH_LO_US <= min(starts) <= EPOCH_HI_US:
            return None
        return float(min(starts)), float(max(ends))
    base = tl.base_time_ns / 1000.0
    return base + float(min(starts)), base + float(max(ends))


def _check_one_run(timelines: list[Timeline]) -> None:
    """Traces given together are ranks of one run: their profiled windows overlap in time and they
    agree on the world size. Two separate runs are refused (compare them instead)."""
    if len(timelines) < 2:
        return
    sizes = {
        t.metadata["distributedInfo"].get("world_size") for t in timelines if isinstance(t.metadata.get("distributedInfo"), dict)
    }
    sizes.discard(None)
    hint = "they are not ranks of one run; to set runs side by side use `dbo-trace compare A B`"
    if len(sizes) > 1:
        raise InputError(f"the traces report different world sizes ({', '.join(map(str, sorted(sizes)))}): {hint}")
    windows = [(t, w) for t in timelines if (w := _wall_window(t)) is not None]
    for t, (lo, hi) in windows:
        others = [w for u, w in windows if u is not t]
        if others and not any(lo <= o_hi and o_lo <= hi for o_lo, o_hi in others):
            gap = min(max(o_lo - hi, lo - o_hi) for o_lo, o_hi in others) / 1e6
            raise InputError(f"{t.source}: its profiled window is {gap:.1f} s away from every other trace's: {hint}")
