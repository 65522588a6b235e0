"""Which step, microbatch and phase each CUDA API call and GPU activity belongs to.

Sources, best first:
1. the hook event log: per thread, the phase at every instant (joined by
   thread ident and time, since the next step's threads reuse idents);
2. `dbo:ub<N>:<phase>` record_function ranges written by the hooks (traces
   recorded with profile_all_threads): joined by time, since only one
   microbatch thread runs Python at a time;
3. the user's --ubatch-pattern ranges, likewise;
4. launching threads: the stock profiler drops the microbatch threads' CPU ops but keeps their
   launch calls, so two non-main threads launching in one step are the two microbatches;
5. nothing: comm/compute analysis per step only.
GPU activity inherits its launching call's attribution through the correlation id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from dbo_trace import bundle as fmt
from dbo_trace.analysis import classify as c
from dbo_trace.analysis.intervals import index_groups
from dbo_trace.analysis.steps.microbatched import SOURCE_NONE, kernels_microbatched
from dbo_trace.analysis.steps.sources import SOURCE_EVENT_LOG as STEPS_FROM_LOG
from dbo_trace.analysis.steps.sources import SOURCE_MARKER as STEPS_FROM_MARKER
from dbo_trace.analysis.steps.sources import Steps, find_steps, index_in, log_to_trace_us
from dbo_trace.trace.eventlog import EventLogData
from dbo_trace.trace.timeline import Timeline, names_to_test, starts_with

PHASE_NONE, PHASE_COMPUTE, PHASE_COMM, PHASE_WAIT = 0, 1, 2, 3
_PHASE_OF = {"compute": PHASE_COMPUTE, "comm": PHASE_COMM}

SOURCE_EVENT_LOG = "event log"
SOURCE_HOOK_RANGES = "dbo record_function ranges"
SOURCE_HOOK_NVTX = "dbo NVTX ranges"  # the same ranges, seen by Nsight Systems
SOURCE_PATTERNS = "--ubatch-pattern ranges"
SOURCE_SGLANG = "SGLang two-batch overlap a<i>/b<i> ranges"
SOURCE_THREADS = "launching threads (no event log: two non-main threads launching in a step)"

_HOOK_RANGE = re.compile(r"^dbo:ub(\d+):(compute|comm)$")
_HOOK_RANGE_HINT = starts_with("dbo:ub")  # timeline.names_hinted
THREAD_MIN_LAUNCHES = 2  # each microbatch thread launches at least this many kernels in a step
THREAD_BALANCE = 4.0  # and the two launch counts are within this factor (microbatches are balanced)


@dataclass(frozen=True)
class Attribution:
    steps: Steps
    source: str  # SOURCE_* (SOURCE_NONE, none found: analysis/steps/microbatched.py)
    call_step: np.ndarray
    call_ubatch: np.ndarray
    gpu_step: np.ndarray  # -1: in no step (between steps, or launched before the profiler started)
    gpu_ubatch: np.ndarray
    gpu_phase: np.ndarray
    gpu_launch_start: np.ndarray  # start of the launching API call; NaN where unknown
    gpu_launch_index: np.ndarray  # index into timeline.calls; -1 where unknown
    comm_phases: np.ndarray | None = None  # per step, comm phases the log saw (None: unknown)
    layers: int | None = None
    launched_before_profiling: int = 0  # GPU activities whose launch predates the trace
    notes: list[str] = field(default_factory=list)
    # why no kernel has a microbatch, apart from notes: an AFD attention rank's round trips may tell
    # two microbatches all the same, and then there is nothing to say
    no_microbatch: str | None = None


# -- microbatch and phase ------------------------------------------------------------
ThreadStates = dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]  # ident -> (times, ubatch, phase) change points


def _thread_states(logs: list[EventLogData], base_time_ns: int) -> tuple[ThreadStates, dict[int, set[int]]]:
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
                stream_phase[key] = _PHASE_OF.get(detail, PHASE_COMPUTE) if isinstance(detail, str) else PHASE_COMPUTE
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
    out: ThreadStates = {}
    for ident, rows in per_ident.items():
        rows.sort()
        arr = np.array(rows, dtype=np.int64)
        out[ident] = (log_to_trace_us(arr[:, 0], base_time_ns), arr[:, 1].astype(np.int8), arr[:, 2].astype(np.int8))
    return out, tids_of


def _learn_tids(
    calls_tid: np.ndarray, calls_start: np.ndarray, states: ThreadStates, tids_of: dict[int, set[int]], main_tids: set[int]
) -> dict[int, set[int]]:
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
    calls_of = index_groups(calls_tid)
    for tid in unknown:
        t = calls_start[calls_of[int(tid)]]
        j = np.searchsorted(starts, t, side="right") - 1
        inside = (j >= 0) & (t < ends[np.clip(j, 0, None)])
        if inside.sum() * 2 > len(t):  # a clear majority of this thread's calls
            votes = idents[j[inside]]
            values, counts = np.unique(votes, return_counts=True)
            learned[int(values[counts.argmax()])].add(int(tid))
    return learned


def _from_log(tl: Timeline, logs: list[EventLogData], ubatch: np.ndarray, phase: np.ndarray) -> bool:
    """True when the log attributed at least one call of this trace."""
    assert tl.base_time_ns is not None  # attribute() uses no log where the trace cannot be aligned with it
    states, tids_of = _thread_states(logs, tl.base_time_ns)
    calls = tl.calls
    main_tids = {t for t in [log.header.get("main_native_tid") for log in logs] + [tl.pid] if isinstance(t, int)}
    tids_of = _learn_tids(calls.lane, calls.start, states, tids_of, main_tids)
    calls_of = index_groups(calls.lane)
    for ident, (times, ubs, phases) in states.items():
        mine = [calls_of[t] for t in tids_of[ident] if t in calls_of]
        if not mine:
            continue
        at = np.sort(np.concatenate(mine))  # the calls of this ident's threads, in call order
        i = np.searchsorted(times, calls.start[at], side="right") - 1
        ok = i >= 0
        idx = at[ok]
        ubatch[idx] = ubs[i[ok]]
        phase[idx] = phases[i[ok]]
    return bool((ubatch >= 0).any())


@dataclass(frozen=True)
class CpuRanges:
    """CPU ranges that name a microbatch (and phase): parallel arrays."""

    start: np.ndarray
    end: np.ndarray
    ubatch: np.ndarray
    phase: np.ndarray

    def __len__(self) -> int:
        return len(self.start)


def _from_ranges(tl: Timeline, ranges: CpuRanges, ubatch: np.ndarray, phase: np.ndarray) -> None:
    """Assign calls inside [start, end] of a range; later-starting (inner) ranges win."""
    order = np.lexsort((ranges.phase, ranges.ubatch, ranges.end, ranges.start))
    lo = np.searchsorted(tl.calls.start, ranges.start[order], side="left")
    hi = np.searchsorted(tl.calls.start, ranges.end[order], side="left")
    ubs, phases = ranges.ubatch[order], ranges.phase[order]
    if (lo[1:] >= hi[:-1]).all():  # disjoint, as the plugin's ranges are: one vectorized assignment
        lengths = np.maximum(hi - lo, 0)
        idx = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths) + np.repeat(lo, lengths)
        ubatch[idx] = np.repeat(ubs, lengths)
        phase[idx] = np.repeat(phases, lengths)
        return
    for a, b, ub, ph in zip(lo.tolist(), hi.tolist(), ubs.tolist(), phases.tolist()):  # nested: in order, inner last
        ubatch[a:b] = ub
        phase[a:b] = ph


def hook_ranges(tl: Timeline) -> CpuRanges:
    """The plugin's NVTX ranges (annotations), each distinct name matched once, as arrays."""
    ub_of = np.full(len(tl.names), -1, np.int64)
    phase_of = np.zeros(len(tl.names), np.int64)
    for i in names_to_test(tl.names, tl.cpu.name[tl.cpu_is_annotation], _HOOK_RANGE_HINT).tolist():
        if m := _HOOK_RANGE.match(tl.names[i]):
            ub_of[i], phase_of[i] = int(m.group(1)), _PHASE_OF[m.group(2)]
    sel = np.flatnonzero(tl.cpu_is_annotation & (ub_of[tl.cpu.name] >= 0)) if len(tl.names) else np.empty(0, np.int64)
    names = tl.cpu.name[sel]
    return CpuRanges(tl.cpu.start[sel], tl.cpu.end[sel], ub_of[names], phase_of[names])


def pattern_ranges(tl: Timeline, patterns: list[str], hint: re.Pattern[str] | None = None) -> CpuRanges:
    """--ubatch-pattern: the Nth pattern marks microbatch N's CPU ranges. hint: text every name the
    patterns find holds (timeline.names_hinted)."""
    compiled = [re.compile(p) for p in patterns]

    def first_pattern(name: str) -> tuple[int] | None:  # a tuple, so that microbatch 0 counts as a match
        return next(((ub,) for ub, rx in enumerate(compiled) if rx.search(name)), None)

    found = tl.cpu_ranges_named(first_pattern, hint=hint)
    return CpuRanges(
        np.array([r[0] for r in found], float),
        np.array([r[1] for r in found], float),
        np.array([r[3][0] for r in found], np.int64),
        np.full(len(found), PHASE_NONE, np.int64),
    )


_SGLANG_STAGE = (r"^a\d+$", r"^b\d+$")  # SGLANG_OPERATIONS_ENABLE_PROFILE=1 names each stage of batch a and b
_SGLANG_HINT = re.compile(r"\n[ab]")  # where those begin (timeline.names_hinted)


def sglang_ranges(tl: Timeline) -> CpuRanges:
    """SGLang's two-batch overlap runs both microbatches in one thread, stage by stage, and with its
    operations profile on wraps each stage in a range `a<i>` or `b<i>`. Taken only where both
    batches have stages, about as many each (a lone range named `a1` is not a microbatch)."""
    found = pattern_ranges(tl, list(_SGLANG_STAGE), _SGLANG_HINT)
    counts = np.bincount(found.ubatch, minlength=2) if len(found) else np.zeros(2, np.int64)
    if counts.min() < 2 or counts.max() > THREAD_BALANCE * counts.min():
        return CpuRanges(np.empty(0), np.empty(0), np.empty(0, np.int64), np.empty(0, np.int64))
    return found


def main_thread_ids(tl: Timeline, logs: list[EventLogData]) -> set[int]:
    """The process's main thread as the trace names it (Linux: its native id is the pid)."""
    return {t for t in [tl.pid, *(log.header.get("main_native_tid") for log in logs)] if isinstance(t, int)}


def _from_threads(tl: Timeline, call_step: np.ndarray, main: set[int], ubatch: np.ndarray) -> bool:
    """No log, no ranges: in each step where two non-main threads launched kernels (DBO's
    microbatch threads; the stock profiler keeps their launch calls), they are ub0 and ub1 in order
    of first launch. A lone worker thread (an autograd thread, say) is not a microbatch."""
    kinds = c.call_kinds(tl.names, tl.calls.name)
    launch = np.isin(kinds, (c.CALL_LAUNCH, c.CALL_GRAPH_LAUNCH)) & (call_step >= 0) & ~np.isin(tl.calls.lane, list(main))
    if not launch.any():
        return False
    # Per (step, lane) group of launch calls, grouped numpy (a step at a time cost a np.unique per
    # step: 0.3 s of 3,245 inferred steps): each lane's launch count and the position of its first
    # launch in the step's time order.
    idx = np.flatnonzero(launch)
    idx = idx[np.lexsort((tl.calls.start[idx], call_step[idx]))]  # by step, then time (as ub order is decided)
    step, lane = call_step[idx], tl.calls.lane[idx]
    by_lane = np.lexsort((lane, step))  # stable: within a (step, lane) group, time order stays
    step, lane = step[by_lane], lane[by_lane]
    heads = np.flatnonzero(np.r_[True, (np.diff(step) != 0) | (np.diff(lane) != 0)])
    counts = np.diff(np.r_[heads, len(step)])
    first = np.minimum.reduceat(by_lane, heads)  # the lane's first launch, as a position in time order
    ok = counts >= THREAD_MIN_LAUNCHES
    g_step, g_lane, g_count, g_first = step[heads][ok], lane[heads][ok], counts[ok], first[ok]
    # Steps with exactly two such lanes whose counts are within THREAD_BALANCE of each other.
    s_heads = np.flatnonzero(np.r_[True, np.diff(g_step) != 0])
    per_step = np.diff(np.r_[s_heads, len(g_step)])
    two = s_heads[per_step == 2]  # the first of the step's two lanes; the second follows it
    hi, lo = np.maximum(g_count[two], g_count[two + 1]), np.minimum(g_count[two], g_count[two + 1])
    two = two[~(hi > THREAD_BALANCE * lo)]
    if not len(two):
        return False
    swap = g_first[two + 1] < g_first[two]  # ub0 is the lane that launched first in the step
    lane0 = np.where(swap, g_lane[two + 1], g_lane[two])
    lane1 = np.where(swap, g_lane[two], g_lane[two + 1])
    steps = g_step[two]
    # Every call (not only launches) of those lanes in those steps.
    at = np.searchsorted(steps, call_step).clip(0, len(steps) - 1)
    chosen = (call_step >= 0) & (steps[at] == call_step)
    calls_lane = tl.calls.lane
    ubatch[chosen & (calls_lane == lane0[at])] = 0
    ubatch[chosen & (calls_lane == lane1[at])] = 1
    return True


def attribute(
    tl: Timeline,
    logs: list[EventLogData],
    ubatch_patterns: list[str] | None = None,
    layers: int | None = None,
    step_marker: str | None = None,
    partner: Steps | None = None,
) -> Attribution:
    notes: list[str] = []
    usable_logs = [log for log in logs if log.pid is None or tl.pid is None or log.pid == tl.pid]
    if logs and not usable_logs:
        notes.append("the event logs belong to other processes than this trace; not used")
    if usable_logs and tl.base_time_ns is None:
        notes.append("the trace has no baseTimeNanoseconds, so the event log cannot be aligned; not used")
        usable_logs = []

    steps = find_steps(tl, usable_logs, step_marker, partner)
    if step_marker and steps.source != STEPS_FROM_MARKER:
        notes.append(f"no CPU range matched --step-marker {step_marker!r}; steps from {steps.source}")
    call_step = index_in(steps.start, steps.end, tl.calls.start)

    n_calls = len(tl.calls)
    ubatch = np.full(n_calls, -1, np.int8)
    phase = np.zeros(n_calls, np.int8)
    source = SOURCE_NONE
    if usable_logs and _from_log(tl, usable_logs, ubatch, phase):
        source = SOURCE_EVENT_LOG
    elif len(ranges := hook_ranges(tl)):
        _from_ranges(tl, ranges, ubatch, phase)
        source = SOURCE_HOOK_NVTX if tl.metadata.get("format") == "nsys-sqlite" else SOURCE_HOOK_RANGES
    elif ubatch_patterns and len(ranges := pattern_ranges(tl, ubatch_patterns)):
        _from_ranges(tl, ranges, ubatch, phase)
        source = SOURCE_PATTERNS
    elif not ubatch_patterns and len(ranges := sglang_ranges(tl)):
        _from_ranges(tl, ranges, ubatch, phase)
        source = SOURCE_SGLANG
    else:
        if ubatch_patterns:
            notes.append("no CPU range matched --ubatch-pattern")
        # The thread that holds the step markers runs the step: it is not a microbatch thread (the
        # trace may not name the main thread: Kineto before ~2021 gave pthread ids, not native ones).
        # Old traces give ProfilerStep# as an op, not an annotation; the log's and inferred steps start
        # at no CPU range.
        marking = np.isin(tl.cpu.start, steps.start) if not steps.inferred else np.zeros(len(tl.cpu), bool)
        main = main_thread_ids(tl, usable_logs) | set(np.unique(tl.cpu.lane[marking]).tolist())
        if _from_threads(tl, call_step, main, ubatch):
            source = SOURCE_THREADS
    no_microbatch = None
    if not kernels_microbatched(source):
        note = no_microbatch_note(bool(logs), bool(usable_logs), steps.path)
        if graph_replayed(steps.path):  # microbatched, its kernels not told apart: what is left out stays said
            notes.append(note)
        else:
            no_microbatch = note

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
    li = np.clip(launch_index, 0, None)
    # Correlation ids grow with every launch: an id below the trace's first call's was launched
    # before the profiler started, and belongs to no step of this trace.
    first_corr = tl.calls.correlation[has_corr].min() if has_corr.any() else None
    before = (
        ~known & (gpu.correlation >= 0) & (gpu.correlation < first_corr) if first_corr is not None else np.zeros(len(gpu), bool)
    )
    by_time = index_in(steps.start, steps.end, gpu.start)
    gpu_step = np.where(known, call_step[li] if n_calls else -1, np.where(before, -1, by_time))
    if steps.partner:
        # an FFN's work runs when the attention's data reaches it, whenever it was launched (a graph
        # may be launched a step ahead, its first receive waiting from then): its step is where it ended
        gpu_step = index_in(steps.start, steps.end, gpu.end)
    gpu_ubatch = np.where(known, ubatch[li] if n_calls else -1, -1).astype(np.int8)
    gpu_phase = np.where(known, phase[li] if n_calls else 0, 0).astype(np.int8)
    launch_start = np.where(known, tl.calls.start[li] if n_calls else np.nan, np.nan)
    if before.any():
        notes.append(f"{int(before.sum())} GPU activities were launched before the profiler started: in no step")

    comm_phases, log_layers = _log_counts(usable_logs, steps) if source == SOURCE_EVENT_LOG else (None, None)
    return Attribution(
        steps=steps,
        source=source,
        call_step=call_step,
        call_ubatch=ubatch,
        gpu_step=gpu_step,
        gpu_ubatch=gpu_ubatch,
        gpu_phase=gpu_phase,
        gpu_launch_start=launch_start,
        gpu_launch_index=launch_index,
        comm_phases=comm_phases,
        layers=layers or log_layers,
        launched_before_profiling=int(before.sum()),
        notes=notes,
        no_microbatch=no_microbatch,
    )


GRAPH_PATHS = (fmt.PATH_GRAPH_REPLAY, fmt.PATH_GRAPH_CAPTURE)


def graph_replayed(paths: list[str | None]) -> bool:
    """The event log says every step it named took the microbatched CUDA graph path."""
    taken = {p for p in paths if p}
    return bool(taken) and taken <= set(GRAPH_PATHS)


def no_microbatch_note(had_logs: bool, usable_logs: bool, paths: list[str | None]) -> str:
    """Why no kernel has a microbatch, from what was looked at: the event log (present, this
    process's, what path its steps took), the dbo ranges and the launching threads."""
    taken = sorted({p for p in paths if p})
    if graph_replayed(paths):
        return (
            f"microbatches not told apart: the event log says the steps took the microbatched CUDA graph path "
            f"({', '.join(taken)}), and a replay launches both microbatches' kernels in one call; the figures that "
            "need each kernel's microbatch (under the other microbatch, overlap cost, held-back comm, comm operations) "
            "are left out"
        )
    if not had_logs:
        log = "no event log"
    elif not usable_logs:
        log = "no usable event log of this process"
    elif taken == [fmt.PATH_NOT_MICROBATCHED]:
        log = f"the event log says the steps were not microbatched ({fmt.PATH_NOT_MICROBATCHED})"
    else:
        log = "the event log records no microbatch thread in this trace"
    return f"no microbatches ({log}, no dbo ranges, no step launched from two worker threads)"


def _log_counts(logs: list[EventLogData], steps: Steps) -> tuple[np.ndarray | None, int | None]:
    """Comm phases per step (-1 where the log saw no microbatch activity, e.g. graph replays) and layers."""
    if steps.source != STEPS_FROM_LOG:
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
