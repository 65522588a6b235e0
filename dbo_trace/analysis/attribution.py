"""Which step, microbatch and phase each CUDA API call and GPU activity belongs to.

Sources, best first:
1. the hook event log: per thread, the phase at every instant (joined by
   thread ident and time, since the next step's threads reuse idents);
2. `dbo:ub<N>:<phase>` record_function ranges written by the hooks (traces
   recorded with profile_all_threads), or the user's --ubatch-pattern ranges:
   joined by time, since only one microbatch thread runs Python at a time;
3. nothing: comm/compute analysis per step only.
GPU activity inherits its launching call's attribution through the correlation id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from dbo_trace import bundle as fmt
from dbo_trace.analysis.intervals import gaps
from dbo_trace.trace.eventlog import EventLogData
from dbo_trace.trace.timeline import Timeline

PHASE_NONE, PHASE_COMPUTE, PHASE_COMM, PHASE_WAIT = 0, 1, 2, 3
_PHASE_OF = {"compute": PHASE_COMPUTE, "comm": PHASE_COMM}

SOURCE_EVENT_LOG = "event log"
SOURCE_HOOK_RANGES = "dbo record_function ranges"
SOURCE_PATTERNS = "--ubatch-pattern ranges"
SOURCE_NONE = "none"

_HOOK_RANGE = re.compile(r"^dbo:ub(\d+):(compute|comm)$")
_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")


@dataclass
class Steps:
    start: np.ndarray  # CPU window on the trace clock (us)
    end: np.ndarray
    label: list[str]
    path: list[str | None]  # UBatchWrapper path, where the event log knows it
    source: str

    def __len__(self) -> int:
        return len(self.start)


@dataclass
class Attribution:
    steps: Steps
    source: str  # SOURCE_*
    call_step: np.ndarray
    call_ubatch: np.ndarray
    call_phase: np.ndarray
    gpu_step: np.ndarray
    gpu_ubatch: np.ndarray
    gpu_phase: np.ndarray
    gpu_launch_start: np.ndarray  # start of the launching API call; NaN where unknown
    gpu_launch_index: np.ndarray  # index into timeline.calls; -1 where unknown
    comm_phases: np.ndarray | None = None  # per step, comm phases the log saw (None: unknown)
    layers: int | None = None
    notes: list[str] = field(default_factory=list)


def log_to_trace_us(t_ns: np.ndarray, base_time_ns: int) -> np.ndarray:
    """time.time_ns() on the recording host -> the trace's microsecond clock."""
    return (np.asarray(t_ns, dtype=np.int64) - np.int64(base_time_ns)) / 1000.0


# -- steps ------------------------------------------------------------------------
def steps_from_log(logs: list[EventLogData], base_time_ns: int) -> Steps | None:
    begins: dict[tuple[int, int], tuple[int, str | None]] = {}
    rows = []
    for log in logs:
        for t, kind, ident, _native, _ub, step, detail in log.records:
            if kind == fmt.EV_STEP_BEGIN:
                begins[(ident, step)] = (t, (detail or {}).get("path") if isinstance(detail, dict) else None)
            elif kind == fmt.EV_STEP_END and (ident, step) in begins:
                t0, path = begins.pop((ident, step))
                rows.append((t0, t, f"step {step}", path))
    if not rows:
        return None
    rows.sort()
    start = log_to_trace_us(np.array([r[0] for r in rows]), base_time_ns)
    end = log_to_trace_us(np.array([r[1] for r in rows]), base_time_ns)
    return Steps(start, end, [r[2] for r in rows], [r[3] for r in rows], SOURCE_EVENT_LOG)


def steps_from_annotations(tl: Timeline) -> Steps | None:
    ann = np.flatnonzero(tl.cpu_is_annotation)
    rows = []
    for i in ann:
        m = _PROFILER_STEP.match(tl.names[tl.cpu.name[i]])
        if m:
            rows.append((tl.cpu.start[i], tl.cpu.end[i], f"ProfilerStep#{m.group(1)}"))
    if not rows:
        return None
    rows.sort()
    return Steps(
        np.array([r[0] for r in rows]),
        np.array([r[1] for r in rows]),
        [r[2] for r in rows],
        [None] * len(rows),
        "ProfilerStep# annotations",
    )


STEP_GAP_MIN_US = 1000.0  # a GPU idle gap this long (and >= 20x the median gap) separates steps
STEP_GAP_FACTOR = 20.0


def steps_from_gaps(tl: Timeline) -> Steps | None:
    """No markers: split the GPU timeline at idle gaps far longer than the usual one."""
    g_start, g_end = gaps(tl.gpu.start, tl.gpu.end)
    if not len(g_start):
        return None
    length = g_end - g_start
    cut = length >= max(STEP_GAP_MIN_US, STEP_GAP_FACTOR * float(np.median(length)))
    if not cut.any():
        return None
    # Windows tile the timeline: each runs from the previous gap's start to the next one's,
    # so a step's launch calls, which precede its kernels, fall inside it.
    lo = min(tl.gpu.start.min(), tl.calls.start.min(initial=np.inf))
    bounds = np.r_[lo, g_start[cut], tl.gpu.end.max()]
    n = len(bounds) - 1
    return Steps(bounds[:-1], bounds[1:], [f"segment {i + 1}" for i in range(n)], [None] * n, "GPU idle gaps (no step markers)")


def whole_trace_step(tl: Timeline) -> Steps:
    lo = min(tl.gpu.start.min(initial=np.inf), tl.calls.start.min(initial=np.inf))
    hi = max(tl.gpu.end.max(initial=-np.inf), tl.calls.end.max(initial=-np.inf))
    return Steps(np.array([lo]), np.array([hi]), ["whole trace"], [None], "whole trace (no step markers)")


def _inside_trace(steps: Steps, tl: Timeline) -> Steps | None:
    """The steps that the profiler window saw (the log also holds warm-up and unprofiled steps)."""
    if not len(tl.calls):
        return None
    hits = _index_in(steps.start, steps.end, tl.calls.start)
    inside = np.isin(np.arange(len(steps)), hits[hits >= 0])
    if not inside.any():
        return None
    keep = np.flatnonzero(inside)
    return Steps(steps.start[keep], steps.end[keep], [steps.label[i] for i in keep], [steps.path[i] for i in keep], steps.source)


def _index_in(start: np.ndarray, end: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each time, the index of the (sorted, disjoint) window containing it, or -1."""
    i = np.searchsorted(start, t, side="right") - 1
    ok = (i >= 0) & (t <= end[np.clip(i, 0, None)]) if len(start) else np.zeros(len(t), bool)
    return np.where(ok, i, -1)


# -- microbatch and phase ------------------------------------------------------------
def _thread_states(logs: list[EventLogData], base_time_ns: int):
    """Per thread ident: change-point times and the (ubatch, phase) from each point on."""
    per_ident: dict[int, list[tuple[int, int, int]]] = {}
    tids_of: dict[int, set[int]] = {}
    stream_phase: dict[tuple[int, int], int] = {}
    for log in logs:
        for t, kind, ident, native, ub, _step, detail in log.records:
            if ub < 0:
                continue
            key = (ident, native)
            if kind == fmt.EV_UB_WAIT:
                stream_phase[key] = PHASE_COMPUTE
                state = (ub, PHASE_WAIT)
            elif kind == fmt.EV_STREAM:
                stream_phase[key] = _PHASE_OF.get(detail, PHASE_COMPUTE)
                state = (ub, stream_phase[key])
            elif kind in (fmt.EV_UB_RUN, fmt.EV_RESUME):
                state = (ub, stream_phase.get(key, PHASE_COMPUTE))
            elif kind == fmt.EV_YIELD:
                state = (ub, PHASE_WAIT)
            elif kind == fmt.EV_UB_EXIT:
                state = (-1, PHASE_NONE)
            else:
                continue
            per_ident.setdefault(ident, []).append((t, *state))
            # Stock profiler: the low 32 bits of the ident. profile_all_threads: a native id.
            tids_of.setdefault(ident, set()).update({ident & 0xFFFFFFFF, native})
    out = {}
    for ident, rows in per_ident.items():
        rows.sort()
        arr = np.array(rows, dtype=np.int64)
        out[ident] = (log_to_trace_us(arr[:, 0], base_time_ns), arr[:, 1].astype(np.int8), arr[:, 2].astype(np.int8))
    return out, tids_of


def _learn_tids(calls_tid: np.ndarray, calls_start: np.ndarray, states, tids_of, main_tids: set[int]) -> dict[int, set[int]]:
    """Trace thread ids -> thread ident, where the ids match neither the ident's low 32 bits nor a
    native id (seen with torch 2.11's stock profiler): each call votes for the microbatch thread
    that was running Python when it was made (only one runs at a time); the majority wins."""
    known = set().union(*tids_of.values()) if tids_of else set()
    unknown = [t for t in np.unique(calls_tid) if t not in known and t not in main_tids]
    if not unknown:
        return tids_of
    spans = []  # (start, end, ident) where that thread was running (compute or comm)
    for ident, (times, _ubs, phases) in states.items():
        running = np.isin(phases, (PHASE_COMPUTE, PHASE_COMM))
        ends = np.r_[times[1:], np.inf]
        spans += [(s, e, ident) for s, e in zip(times[running], ends[running])]
    if not spans:
        return tids_of
    spans.sort()
    starts = np.array([s for s, _, _ in spans])
    ends = np.array([e for _, e, _ in spans])
    idents = np.array([i for _, _, i in spans], dtype=np.int64)
    learned = {ident: set(tids) for ident, tids in tids_of.items()}
    for tid in unknown:
        t = calls_start[calls_tid == tid]
        j = np.searchsorted(starts, t, side="right") - 1
        inside = (j >= 0) & (t < ends[np.clip(j, 0, None)])
        if inside.sum() * 2 > len(t):  # a clear majority of this thread's calls
            votes = idents[j[inside]]
            values, counts = np.unique(votes, return_counts=True)
            learned[int(values[counts.argmax()])].add(int(tid))
    return learned


def _from_log(tl: Timeline, logs: list[EventLogData], ubatch: np.ndarray, phase: np.ndarray) -> None:
    states, tids_of = _thread_states(logs, tl.base_time_ns)
    calls = tl.calls
    main_tids = {log.header.get("main_native_tid") for log in logs} | {tl.pid}
    tids_of = _learn_tids(calls.lane, calls.start, states, tids_of, main_tids)
    for ident, (times, ubs, phases) in states.items():
        mask = np.isin(calls.lane, list(tids_of[ident]))
        if not mask.any():
            continue
        i = np.searchsorted(times, calls.start[mask], side="right") - 1
        ok = i >= 0
        idx = np.flatnonzero(mask)[ok]
        ubatch[idx] = ubs[i[ok]]
        phase[idx] = phases[i[ok]]


def _from_ranges(tl: Timeline, ranges: list[tuple[float, float, int, int]], ubatch: np.ndarray, phase: np.ndarray) -> None:
    """Assign calls inside [start, end] of a range; later-starting (inner) ranges win."""
    for start, end, ub, ph in sorted(ranges):
        lo, hi = np.searchsorted(tl.calls.start, [start, end], side="left")
        ubatch[lo:hi] = ub
        phase[lo:hi] = ph


def hook_ranges(tl: Timeline) -> list[tuple[float, float, int, int]]:
    out = []
    for i in np.flatnonzero(tl.cpu_is_annotation):
        m = _HOOK_RANGE.match(tl.names[tl.cpu.name[i]])
        if m:
            out.append((tl.cpu.start[i], tl.cpu.end[i], int(m.group(1)), _PHASE_OF[m.group(2)]))
    return out


def pattern_ranges(tl: Timeline, patterns: list[str]) -> list[tuple[float, float, int, int]]:
    """--ubatch-pattern: the Nth pattern marks microbatch N's CPU ranges."""
    compiled = [re.compile(p) for p in patterns]
    matches = {}
    for name_id, name in enumerate(tl.names):
        for ub, rx in enumerate(compiled):
            if rx.search(name):
                matches[name_id] = ub
                break
    out = []
    if not matches:
        return out
    for i in np.flatnonzero(np.isin(tl.cpu.name, list(matches))):
        out.append((tl.cpu.start[i], tl.cpu.end[i], matches[int(tl.cpu.name[i])], PHASE_NONE))
    return out


def attribute(
    tl: Timeline,
    logs: list[EventLogData],
    ubatch_patterns: list[str] | None = None,
    layers: int | None = None,
) -> Attribution:
    notes: list[str] = []
    usable_logs = [log for log in logs if log.pid is None or tl.pid is None or log.pid == tl.pid]
    if logs and not usable_logs:
        notes.append("the event logs belong to other processes than this trace; not used")
    if usable_logs and tl.base_time_ns is None:
        notes.append("the trace has no baseTimeNanoseconds, so the event log cannot be aligned; not used")
        usable_logs = []

    steps = steps_from_log(usable_logs, tl.base_time_ns) if usable_logs else None
    steps = _inside_trace(steps, tl) if steps else None
    steps = steps or steps_from_annotations(tl) or steps_from_gaps(tl) or whole_trace_step(tl)

    n_calls = len(tl.calls)
    ubatch = np.full(n_calls, -1, np.int8)
    phase = np.zeros(n_calls, np.int8)
    source = SOURCE_NONE
    if usable_logs:
        _from_log(tl, usable_logs, ubatch, phase)
        source = SOURCE_EVENT_LOG
    elif ranges := hook_ranges(tl):
        _from_ranges(tl, ranges, ubatch, phase)
        source = SOURCE_HOOK_RANGES
    elif ubatch_patterns and (ranges := pattern_ranges(tl, ubatch_patterns)):
        _from_ranges(tl, ranges, ubatch, phase)
        source = SOURCE_PATTERNS
    elif ubatch_patterns:
        notes.append("no CPU range matched --ubatch-pattern")
    if source == SOURCE_NONE:
        notes.append("microbatches unknown (no event log, no dbo ranges): comm/compute analysis per step only")

    call_step = _index_in(steps.start, steps.end, tl.calls.start)

    # GPU activity -> its launching call, by correlation id.
    gpu = tl.gpu
    launch_index = np.full(len(gpu), -1, np.int64)
    has_corr = tl.calls.correlation >= 0
    if has_corr.any() and len(gpu):
        corr_idx = np.flatnonzero(has_corr)
        order = corr_idx[np.argsort(tl.calls.correlation[corr_idx], kind="stable")]
        sorted_corr = tl.calls.correlation[order]
        pos = np.clip(np.searchsorted(sorted_corr, gpu.correlation), 0, len(order) - 1)
        hit = (sorted_corr[pos] == gpu.correlation) & (gpu.correlation >= 0)
        launch_index[hit] = order[pos[hit]]
    known = launch_index >= 0
    gpu_step = np.where(
        known, call_step[np.clip(launch_index, 0, None)] if n_calls else -1, _index_in(steps.start, steps.end, gpu.start)
    )
    gpu_ubatch = np.where(known, ubatch[np.clip(launch_index, 0, None)] if n_calls else -1, -1).astype(np.int8)
    gpu_phase = np.where(known, phase[np.clip(launch_index, 0, None)] if n_calls else 0, 0).astype(np.int8)
    launch_start = np.where(known, tl.calls.start[np.clip(launch_index, 0, None)] if n_calls else np.nan, np.nan)

    comm_phases, log_layers = _log_counts(usable_logs, steps) if usable_logs else (None, None)
    return Attribution(
        steps=steps,
        source=source,
        call_step=call_step,
        call_ubatch=ubatch,
        call_phase=phase,
        gpu_step=gpu_step,
        gpu_ubatch=gpu_ubatch,
        gpu_phase=gpu_phase,
        gpu_launch_start=launch_start,
        gpu_launch_index=launch_index,
        comm_phases=comm_phases,
        layers=layers or log_layers,
        notes=notes,
    )


def _log_counts(logs: list[EventLogData], steps: Steps) -> tuple[np.ndarray | None, int | None]:
    """Comm phases per step (-1 where the log saw no microbatch activity, e.g. graph replays) and layers."""
    if steps.source != SOURCE_EVENT_LOG:
        return None, None
    by_label = {label: i for i, label in enumerate(steps.label)}
    counts = np.full(len(steps), -1, np.int64)
    layers = -1
    for log in logs:
        for _t, kind, _ident, _native, ub, step, detail in log.records:
            i = by_label.get(f"step {step}")
            if i is None or ub < 0:
                continue
            if counts[i] < 0:
                counts[i] = 0
            if kind == fmt.EV_STREAM and detail == "comm":
                counts[i] += 1
            elif kind == fmt.EV_LAYER and isinstance(detail, int):
                layers = max(layers, detail + 1)
    return counts, (layers if layers > 0 else None)
