"""Assemble per-step, per-rank and all-rank results: the Report every renderer reads."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Callable

import numpy as np

from dbo_trace.analysis import classify as c
from dbo_trace.analysis.accounting import B_COMM, Partition, TimeBuckets, partition, window_of
from dbo_trace.analysis.attribution import SOURCE_HOOK_NVTX, SOURCE_HOOK_RANGES, SOURCE_NONE, Attribution, attribute
from dbo_trace.analysis.capture import Capture, graph_capture, with_capture
from dbo_trace.analysis.contention import Contention, comm_kernel_names, contention, top_kernels
from dbo_trace.analysis.exposure import CROWDED, LATE_RECORD, Exposure, exposure
from dbo_trace.analysis.held import HeldBack, HeldSummary, held_back, summarize
from dbo_trace.analysis.host_time import CAUSE_TEXT, HostCauses, HostPieces, combine_causes, host_pieces
from dbo_trace.analysis.intervals import union
from dbo_trace.analysis.metrics import (
    ACROSS,
    MAX,
    MEDIAN,
    SUM,
    SUM_IF_ALL,
    RoundTrips,
    WindowMetrics,
    WindowTime,
    grouped_window_metrics,
    round_trips,
    window_metrics,
)
from dbo_trace.analysis.operations import OperationRow, operation_ids, operation_rows
from dbo_trace.analysis.ranks import CrossRank, RankOnClock, cross_rank
from dbo_trace.analysis.steps import PHASES
from dbo_trace.analysis.summaries import CpuRangeRow, KernelSummary, Spread, cpu_range_summary, kernel_summary, spread
from dbo_trace.analysis.verdict import Findings, Verdict, decide
from dbo_trace.trace.eventlog import EventLogData
from dbo_trace.trace.timeline import Timeline


@dataclass(frozen=True)
class Options:
    comm_patterns: tuple[str, ...] = ()
    comm_streams: tuple[int, ...] = ()
    ubatch_patterns: tuple[str, ...] = ()
    layers: int | None = None
    step_marker: str | None = None
    comm_only: bool = False  # comm_patterns replace the built-in communication families


@dataclass(frozen=True)
class StepReport:
    label: str
    path: str | None
    wall_us: float  # from the step's CPU start to the end of the last GPU work it launched
    comm_ops: int
    comm_ops_from_log: bool  # counted as event-log comm phases, else as runs of comm kernels
    metrics: WindowMetrics
    verdict: Verdict
    index: int = -1  # into the attribution's steps
    start_us: float = 0.0  # the step's window on the trace clock
    end_us: float = 0.0
    phase: str | None = None  # prefill / decode / mixed, where vLLM's annotation says
    context_tokens: int | None = None
    generation_tokens: int | None = None
    captured_launches: int = 0  # launches recorded into a graph during a capture (they did not run)
    host_causes: HostCauses | None = None  # what the host did while the GPU waited, in the step's window

    @property
    def replayed(self) -> bool:
        """A graph step: most of its kernels came from CUDA graph replays (docs/analysis.md)."""
        return (self.metrics.replayed_kernel_fraction or 0.0) > REPLAYED_STEP_SHARE


REPLAYED_STEP_SHARE = 0.5


@dataclass(frozen=True)
class PhaseReport:
    """The steps of one phase (prefill, decode, mixed) taken together: unions over their windows."""

    phase: str
    steps: int
    median_step_us: float
    metrics: WindowMetrics  # over the phase's own GPU work; span and host idle over its step windows
    verdict: Verdict | None  # None over several ranks: per_rank holds theirs
    per_rank: list[str] | None = None  # the ranks' verdict labels, where ranks were combined
    host_causes: HostCauses | None = None  # over the union of its steps' windows
    step_spread: Spread | None = None  # its steps' times: median, p90, p99, max


@dataclass(frozen=True)
class HostTest:
    """What the host-bound verdict measured: in-step host idle where steps are real markers,
    the whole window where they were inferred."""

    fraction: float | None
    basis: str


@dataclass(frozen=True)
class RankDetail:
    """What the pictures need beyond the numbers: the timeline and, per activity, its attribution and kind."""

    timeline: Timeline
    attribution: Attribution
    kernel_kind: np.ndarray  # classify.COMPUTE / COMM / COPY per GPU activity
    call_kind: np.ndarray  # classify.CALL_* per CUDA API call
    launch_kind: np.ndarray  # call kind of each GPU activity's launching call, -1 where unknown
    partition: Partition  # the window cut into time buckets
    held: HeldBack | None = None  # per held-back comm kernel: holder, delay, cause
    host_pieces: HostPieces | None = None  # the host-idle stretches cut by cause


@dataclass(frozen=True)
class RankReport:
    rank: int
    source: str
    attribution: str  # where the microbatches came from
    step_source: str
    profile_all_threads: bool
    steps: list[StepReport]
    total: WindowMetrics  # over the profiled window
    round_trips: RoundTrips | None
    verdict: Verdict
    window: TimeBuckets  # the profiled window by bucket
    in_steps: TimeBuckets  # the union of the step windows by bucket
    host_test: HostTest
    phases: list[PhaseReport] = field(default_factory=list)
    steps_inferred: bool = False
    contention: Contention | None = None  # what overlap cost; None without two microbatches
    exposure: Exposure | None = None  # why comm was exposed; None without comm
    held_back: HeldSummary | None = None  # comm kernels held past the other microbatch's compute; None without microbatches
    operations: list[OperationRow] = field(default_factory=list)  # per (microbatch, k-th op of a step), with microbatches
    capture: Capture | None = None  # graph captures in the trace (analysis/capture.py); None without any
    comm_kernels: list[tuple[str, int]] = field(default_factory=list)  # what counted as communication
    host_causes: HostCauses | None = None  # over what the host test measured (in-step time or the window)
    host_causes_window: HostCauses | None = None  # over the whole window
    kernel_summary: KernelSummary | None = None  # per kernel name: count, total, mean, median, min, max, share
    cpu_ranges: tuple[CpuRangeRow, ...] = ()  # the CPU ranges that explain the most host idle
    top_compute_kernels: list[tuple[str, int, float]] = field(default_factory=list)  # (name, count, total us)
    notes: list[str] = field(default_factory=list)
    detail: RankDetail | None = field(default=None, repr=False, compare=False)

    def detailed(self) -> RankDetail:
        """The timeline and attribution behind the figures, which pictures need (analyze_rank keeps them)."""
        if self.detail is None:
            raise ValueError(f"rank {self.rank}'s report carries no detail")
        return self.detail


@dataclass(frozen=True)
class Report:
    inputs: list[str]
    ranks: list[RankReport]
    total: WindowMetrics
    round_trips: RoundTrips | None
    verdict: Verdict
    options: Options
    window: TimeBuckets  # all ranks' windows by bucket, added (one GPU each)
    phases: list[PhaseReport] = field(default_factory=list)  # over all ranks
    warnings: list[str] = field(default_factory=list)
    cross_rank: CrossRank | None = None  # two or more ranks on one clock (analysis/ranks.py)
    host_causes: HostCauses | None = None  # the ranks' host-test causes added
    host_test: HostTest | None = None  # what the run's host-bound test measured


def _profiled_microbatch_threads(tl: Timeline, att: Attribution) -> bool:
    """The profiler saw a microbatch thread's CPU ops (profile_all_threads): only then can its own
    cost be blamed for host time. A worker thread of another kind (autograd, say) is no evidence."""
    if att.source == SOURCE_NONE or not len(tl.cpu):
        return False
    lanes = set(np.unique(tl.calls.lane[att.call_ubatch >= 0]).tolist())
    if att.source in (SOURCE_HOOK_RANGES, SOURCE_HOOK_NVTX):
        return True  # the dbo ranges are CPU ranges of the microbatch threads
    ops = tl.cpu.lane[~tl.cpu_is_annotation]
    return bool(lanes and np.isin(ops, list(lanes - {tl.pid})).any())


def comm_operations(
    step: np.ndarray, lane: np.ndarray, launch_start: np.ndarray, start: np.ndarray, is_comm: np.ndarray, n_steps: int
) -> np.ndarray:
    """Communication operations per step: a run of comm kernels launched back to back by one thread
    (no compute launched between them) is one operation (DeepEP's notify + dispatch, NCCL's pieces).
    Replayed kernels share one launch and are ordered by when they ran."""
    return operations_per_step(operation_ids(step, lane, launch_start, start, is_comm), step, n_steps)


def operations_per_step(op_ids: np.ndarray, step: np.ndarray, n_steps: int) -> np.ndarray:
    counted = op_ids >= 0
    if not counted.any():
        return np.zeros(n_steps, np.int64)
    _ids, first = np.unique(op_ids[counted], return_index=True)
    return np.bincount(step[counted][first], minlength=n_steps)


def analyze_rank(tl: Timeline, logs: list[EventLogData], options: Options) -> RankReport:
    att: Attribution = attribute(tl, logs, list(options.ubatch_patterns), options.layers, options.step_marker)
    rules = c.CommRules(extra_patterns=options.comm_patterns, streams=options.comm_streams, replace_builtin=options.comm_only)
    kinds = c.kernel_kinds(tl.names, tl.gpu.name, tl.gpu_is_copy, tl.gpu.lane, rules)
    call_kind = c.call_kinds(tl.names, tl.calls.name)
    launched = att.gpu_launch_index >= 0
    li = np.clip(att.gpu_launch_index, 0, None)
    launch_kind = np.where(launched, call_kind[li] if len(call_kind) else -1, -1)
    launch_lane = np.where(launched, tl.calls.lane[li] if len(tl.calls) else -1, -1)
    call_dur = tl.calls.end - tl.calls.start
    microbatched = att.source != SOURCE_NONE

    lo, hi = window_of((tl.gpu.start, tl.gpu.end), (tl.calls.start, tl.calls.end), (tl.cpu.start, tl.cpu.end))
    part = partition(lo, hi, tl.gpu.start, tl.gpu.end, kinds, att.gpu_launch_start)
    capture = graph_capture(tl.calls.start, tl.calls.end, tl.calls.lane, call_kind, part)
    captured_launch = capture.call_captured & np.isin(call_kind, (c.CALL_LAUNCH, c.CALL_GRAPH_LAUNCH)) & (att.call_step >= 0)
    captured_per_step = np.bincount(att.call_step[captured_launch], minlength=len(att.steps))

    def metrics(gpu_sel: np.ndarray, call_sel: np.ndarray, windows: tuple[np.ndarray, np.ndarray]) -> WindowMetrics:
        return window_metrics(
            tl.gpu.start[gpu_sel],
            tl.gpu.end[gpu_sel],
            kinds[gpu_sel],
            att.gpu_ubatch[gpu_sel],
            att.gpu_launch_start[gpu_sel],
            launch_kind[gpu_sel],
            call_kind[call_sel],
            call_dur[call_sel],
            window_time(part, *windows),
        )

    pieces = host_pieces(
        part, tl.names, tl.gpu.start, att.gpu_launch_start, att.gpu_launch_index, att.gpu_step,
        tl.calls.start, tl.calls.end, tl.calls.name, tl.calls.lane, call_kind, att.call_step, att.call_ubatch,
        tl.cpu.start, tl.cpu.end, tl.cpu.name, tl.cpu.lane, tl.cpu_is_annotation,
        att.steps.start, att.steps.end, not att.steps.inferred,
    )  # fmt: skip
    n_steps = len(att.steps)
    own_end = np.full(n_steps, -np.inf)
    stepped = att.gpu_step >= 0
    np.maximum.at(own_end, att.gpu_step[stepped], tl.gpu.end[stepped])
    # A step lasts until the last GPU work it launched ends (a graph replay's CPU window is only the launch).
    step_lo = att.steps.start
    step_hi = np.maximum(att.steps.end, own_end)
    op_ids = operation_ids(att.gpu_step, launch_lane, att.gpu_launch_start, tl.gpu.start, kinds == c.COMM)
    ops = operations_per_step(op_ids, att.gpu_step, n_steps)

    # Every step's figures at once over sorted arrays: the cost grows with events, not events x steps.
    per_step = grouped_window_metrics(
        att.gpu_step, n_steps, tl.gpu.start, tl.gpu.end, kinds, att.gpu_ubatch, att.gpu_launch_start, launch_kind,
        att.call_step, call_kind, call_dur, window_times(part, step_lo, step_hi),
    )  # fmt: skip
    has_gpu = np.bincount(att.gpu_step[att.gpu_step >= 0], minlength=n_steps) > 0
    shown = np.flatnonzero(has_gpu)
    step_causes = pieces.causes_in(
        step_lo[shown], step_hi[shown], np.array([per_step[i].host_idle_us for i in shown.tolist()]), top=3
    )
    steps: list[StepReport] = []
    for i, causes in zip(map(int, shown), step_causes):
        m = per_step[i]
        logged = att.comm_phases[i] if att.comm_phases is not None else -1
        n_ops = int(logged) if logged >= 0 else int(ops[i])
        steps.append(
            StepReport(
                att.steps.label[i],
                att.steps.path[i],
                float(step_hi[i] - step_lo[i]),
                n_ops,
                logged >= 0,
                m,
                decide(m, microbatched=microbatched),
                i,
                float(step_lo[i]),
                float(step_hi[i]),
                att.steps.phase[i],
                att.steps.context_tokens[i],
                att.steps.generation_tokens[i],
                int(captured_per_step[i]),
                causes,
            )
        )

    everything = np.ones(len(tl.gpu), bool), np.ones(len(tl.calls), bool)
    total = metrics(*everything, (np.array([lo]), np.array([hi])))
    window = TimeBuckets.from_row(hi - lo, part.measure(np.array([lo]), np.array([hi]))[0])
    reported = np.array([s.index for s in steps], np.int64)
    steps_union = union(step_lo[reported], step_hi[reported]) if len(reported) else (np.empty(0), np.empty(0))
    in_steps = TimeBuckets.from_row(
        float((steps_union[1] - steps_union[0]).sum()), part.measure_union(*steps_union) if len(reported) else np.zeros(5)
    )
    host_test = _host_test(att.steps.inferred, window, in_steps)
    causes_window = pieces.causes_in(np.array([lo]), np.array([hi]), np.array([window.host_idle_us]))[0]
    causes = (
        causes_window
        if host_test.basis == HOST_BASIS_WINDOW
        else pieces.causes_in_union(steps_union[0], steps_union[1], in_steps.host_idle_us)
    )
    all_threads = _profiled_microbatch_threads(tl, att)
    rt = _round_trips(steps, att.layers, microbatched)
    phases = [
        _phase_report(p, [s for s in steps if s.phase == p], att, metrics, microbatched, pieces)
        for p in PHASES
        if any(s.phase == p for s in steps)
    ]
    notes = list(att.notes) + tl.warnings
    held = _held_back(tl, kinds, att, call_kind) if microbatched and (kinds == c.COMM).any() else None
    held_summary = (
        None
        if held is None
        else summarize(
            held, tl.gpu.name, tl.names, tl.calls.name, tl.calls.lane, att.call_ubatch, tl.calls.start, att.gpu_launch_start
        )
    )
    exposed = _exposure(part, tl, kinds, att, lo, hi, held) if (kinds == c.COMM).any() else None
    cost = contention(tl.gpu.start, tl.gpu.end, kinds, att.gpu_ubatch, tl.gpu.name, tl.names) if microbatched else None
    found = findings(window.window_us, [exposed], [cost], host_cause=host_cause_text(causes))
    return RankReport(
        rank=tl.rank,
        source=str(tl.source),
        attribution=att.source,
        step_source=att.steps.source,
        profile_all_threads=all_threads,
        steps=steps,
        total=total,
        round_trips=rt,
        verdict=with_capture(
            decide(
                total,
                rt,
                all_threads,
                host=host_test,
                microbatched=microbatched,
                findings=found,
                causes=causes,
                graph_api=graph_api(tl),
            ),
            capture,
            window.host_idle_us,
        ),
        window=window,
        in_steps=in_steps,
        host_test=host_test,
        phases=phases,
        steps_inferred=att.steps.inferred,
        contention=cost,
        comm_kernels=comm_kernel_names(kinds, tl.gpu.name, tl.names),
        host_causes=causes,
        host_causes_window=causes_window,
        kernel_summary=kernel_summary(tl.names, tl.gpu.name, tl.gpu.end - tl.gpu.start, tl.gpu_is_copy),
        cpu_ranges=cpu_range_summary(pieces, tl.cpu.name, tl.cpu.end - tl.cpu.start, window.host_idle_us),
        top_compute_kernels=top_kernels(kinds, tl.gpu.name, tl.gpu.end - tl.gpu.start, tl.names, c.COMPUTE),
        exposure=exposed,
        held_back=held_summary,
        operations=operation_rows(tl.gpu.start, tl.gpu.end, kinds, att.gpu_ubatch, att.gpu_step, op_ids, exposed)
        if microbatched
        else [],
        notes=notes,
        capture=capture if capture.found else None,
        detail=RankDetail(tl, att, kinds, call_kind, launch_kind, part, held, pieces),
    )


def findings(
    window_us: float,
    exposures: list[Exposure | None],
    costs: list[Contention | None],
    peers: CrossRank | None = None,
    host_cause: str | None = None,
) -> Findings:
    """What the headline may name (analysis/verdict.py), from the figures the report prints: a rank's,
    or every rank's added (each rank is its own GPU). The host cause (host-time attribution) and the
    peer wait (cross-rank waits) are slots: host_cause is the attribution's dominant cause in words;
    the peer wait is read from the cross-rank view's `peer_wait_us` and `peer_wait_rank` where that
    view has them. Absent, they stay None and the headline does not name them."""
    measured = [x for x in costs if x is not None]
    peer_wait = getattr(peers, "peer_wait_us", None)
    peer_rank = getattr(peers, "peer_wait_rank", None)

    def exposed_by(reason: str) -> float:
        return float(sum(x.by_reason_us.get(reason, 0.0) for x in exposures if x is not None))

    return Findings(
        window_us=window_us,
        late_record_us=exposed_by(LATE_RECORD),
        crowded_us=exposed_by(CROWDED),
        saved_us=float(sum(x.saved_us for x in measured)) if measured else None,
        serial_estimate_us=float(sum(x.serial_estimate_us for x in measured)) if measured else None,
        host_cause=host_cause,
        peer_wait_us=float(peer_wait) if isinstance(peer_wait, (int, float)) else None,
        peer_rank=int(peer_rank) if isinstance(peer_rank, int) else None,
    )


def _held_back(tl: Timeline, kinds: np.ndarray, att: Attribution, call_kind: np.ndarray) -> HeldBack:
    g, calls = tl.gpu, tl.calls
    launched_by = att.gpu_launch_index
    return held_back(g.start, g.end, g.lane, kinds, att.gpu_ubatch, launched_by, calls.start, calls.end, calls.lane, call_kind)


def _exposure(
    part: Partition, tl: Timeline, kinds: np.ndarray, att: Attribution, lo: float, hi: float, held: HeldBack | None
) -> Exposure:
    seg_start, seg_end = part.spans(B_COMM, lo, hi)
    causes = {} if held is None else held.causes()
    return exposure(
        seg_start, seg_end, tl.gpu.start, tl.gpu.end, kinds, att.gpu_ubatch, att.gpu_step, att.gpu_launch_start, causes
    )


def window_times(part: Partition, lo: np.ndarray, hi: np.ndarray) -> list[WindowTime]:
    """Each window's time on its own (windows may overlap each other), all at once."""
    rows = part.measure(lo, hi)
    host_gaps, all_gaps = part.gaps_in(lo, hi)
    return [_window_time(float(hi[i] - lo[i]), rows[i], int(host_gaps[i]), int(all_gaps[i])) for i in range(len(lo))]


def window_time(part: Partition, lo: np.ndarray, hi: np.ndarray) -> WindowTime:
    """Span, busy time and host-caused idle of a window (or a union of windows) from the rank's one timeline."""
    u_lo, u_hi = union(np.asarray(lo, float), np.asarray(hi, float))
    row = part.measure(u_lo, u_hi).sum(axis=0) if len(u_lo) else np.zeros(5)
    return _window_time(float((u_hi - u_lo).sum()), row, *part.host_gaps_in(u_lo, u_hi))


def _window_time(span_us: float, row: np.ndarray, host_gaps: int, all_gaps: int) -> WindowTime:
    buckets = TimeBuckets.from_row(span_us, row)
    return WindowTime(span_us, buckets.busy_us, buckets.host_idle_us, host_gaps, all_gaps)


HOST_BASIS_IN_STEPS = "in-step host idle / time in steps (steps from markers)"
HOST_BASIS_WINDOW = "host idle / profiled window (steps inferred)"


def _host_test(inferred: bool, window: TimeBuckets, in_steps: TimeBuckets) -> HostTest:
    if inferred or in_steps.window_us <= 0:
        frac = window.host_idle_us / window.window_us if window.window_us > 0 else None
        return HostTest(frac, HOST_BASIS_WINDOW)
    return HostTest(in_steps.host_idle_us / in_steps.window_us, HOST_BASIS_IN_STEPS)


MetricsOf = Callable[[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]], WindowMetrics]


def _phase_report(
    phase: str, steps: list[StepReport], att: Attribution, metrics: MetricsOf, microbatched: bool, pieces: HostPieces
) -> PhaseReport:
    idx = np.array([s.index for s in steps], np.int64)
    gpu_sel = np.isin(att.gpu_step, idx)
    call_sel = np.isin(att.call_step, idx)
    windows = (np.array([s.start_us for s in steps]), np.array([s.end_us for s in steps]))
    m = metrics(gpu_sel, call_sel, windows)
    causes = pieces.causes_in_union(windows[0], windows[1], m.host_idle_us)
    return PhaseReport(
        phase=phase,
        steps=len(steps),
        median_step_us=float(np.median([s.wall_us for s in steps])),
        metrics=m,
        verdict=decide(m, microbatched=microbatched, causes=causes),
        host_causes=causes,
        step_spread=spread([s.wall_us for s in steps]),
    )


def _round_trips(steps: list[StepReport], layers: int | None, microbatched: bool) -> RoundTrips | None:
    if not steps:
        return None
    from_log = [s.comm_ops_from_log for s in steps]
    if all(from_log):
        source = "comm phases in the event log"
    elif not any(from_log):
        source = "comm operations (runs of comm kernels launched back to back)"
    else:
        source = "comm phases in the event log, comm operations where a step had none (graph replay)"
    return round_trips(
        np.array([s.wall_us for s in steps]),
        np.array([s.comm_ops for s in steps], dtype=float),
        np.array([s.metrics.comm_busy_us for s in steps]),
        np.array([s.metrics.compute_busy_us for s in steps]),
        layers,
        source,
        microbatched,
    )


def sum_metrics(parts: list[WindowMetrics]) -> WindowMetrics:
    """All-rank (or all-phase) totals, each field by the rule declared on it (metrics.ACROSS):
    times and counts add; medians are the median of the parts'; maxima the max."""
    out = {}
    for f in fields(WindowMetrics):
        values = [getattr(p, f.name) for p in parts]
        present = [v for v in values if v is not None]
        rule = f.metadata.get(ACROSS, SUM)
        if rule == MEDIAN:
            out[f.name] = float(np.median(present)) if present else None
        elif rule == MAX:
            out[f.name] = max(present) if present else None
        elif rule == SUM_IF_ALL:
            out[f.name] = sum(present) if len(present) == len(values) else None
        else:
            out[f.name] = sum(values)
    return WindowMetrics(**out)  # type: ignore[arg-type]  # each field's value, combined by its rule


def _input_warnings(ranks: list[RankReport]) -> list[str]:
    """What each trace's reader left out or could not use (events with a negative duration, a
    baseTimeNanoseconds out of range, ...): a rank's notes, and the report's warnings too, which
    the JSON lists and `report` prints on stderr, so nothing is dropped without a word."""
    return list(dict.fromkeys(w for r in ranks if r.detail is not None for w in r.detail.timeline.warnings))


def combine(ranks: list[RankReport], options: Options, inputs: list[str], warnings: list[str]) -> Report:
    """All ranks: times and counts add (each rank is its own GPU); the host test is the ranks' own,
    added the same way (in-step where every rank has marker steps)."""
    total = sum_metrics([r.total for r in ranks])
    rt = ranks[0].round_trips if len(ranks) == 1 else _median_round_trips([r.round_trips for r in ranks])
    window = TimeBuckets(*(sum(getattr(r.window, f.name) for r in ranks) for f in fields(TimeBuckets)))
    if len(ranks) == 1:
        host = ranks[0].host_test
    elif all(r.host_test.basis == HOST_BASIS_IN_STEPS for r in ranks):
        span = sum(r.in_steps.window_us for r in ranks)
        host = HostTest(sum(r.in_steps.host_idle_us for r in ranks) / span if span > 0 else None, HOST_BASIS_IN_STEPS)
    else:
        host = HostTest(window.host_idle_us / window.window_us if window.window_us > 0 else None, HOST_BASIS_WINDOW)
    microbatched = any(r.attribution != SOURCE_NONE for r in ranks)
    peers = cross_rank([_on_clock(r) for r in ranks])
    causes = ranks[0].host_causes if len(ranks) == 1 else _combined_causes([r.host_causes for r in ranks])
    return Report(
        phases=ranks[0].phases if len(ranks) == 1 else _combined_phases(ranks),
        inputs=inputs,
        ranks=ranks,
        total=total,
        round_trips=rt,
        verdict=with_capture(
            decide(
                total,
                rt,
                any(r.profile_all_threads for r in ranks),
                host=host,
                microbatched=microbatched,
                findings=findings(
                    window.window_us, [r.exposure for r in ranks], [r.contention for r in ranks], peers, host_cause_text(causes)
                ),
                causes=causes,
                graph_api=_ranks_graph_api(ranks),
            ),
            _summed_capture([r.capture for r in ranks]),
            window.host_idle_us,
        ),
        options=options,
        window=window,
        warnings=warnings + [w for w in _input_warnings(ranks) if w not in warnings],
        cross_rank=peers,
        host_causes=causes,
        host_test=host,
    )


def host_cause_text(causes: HostCauses | None) -> str | None:
    """The host-bound headline's cause: the largest item of the host-time split, with its share
    ("61% of it in gpu_model_runner: preprocess", "4% of it launch calls"). Names are cut: a
    compiled graph's operator name runs to hundreds of characters."""
    top = causes.top if causes is not None else None
    if causes is None or top is None or causes.host_idle_us <= 0:
        return None
    name, us = top
    where = name if name in CAUSE_TEXT.values() else f"in {name if len(name) <= 48 else name[:45] + '...'}"
    return f"{100 * us / causes.host_idle_us:.0f}% of it {where}"


def graph_api(tl: Timeline) -> str:
    """HIP on ROCm traces (hipGraphLaunch), else CUDA: what the graph lines call the graphs."""
    return "HIP" if any(n.startswith("hipGraphLaunch") for n in tl.names) else "CUDA"


def _ranks_graph_api(ranks: list[RankReport]) -> str:
    apis = {graph_api(r.detail.timeline) for r in ranks if r.detail is not None}
    return apis.pop() if len(apis) == 1 else "CUDA"


def _summed_capture(parts: list[Capture | None]) -> Capture:
    present = [p for p in parts if p is not None]
    return Capture(
        sum(p.windows for p in present),
        sum(p.captured_launches for p in present),
        sum(p.capture_us for p in present),
        sum(p.host_idle_us for p in present),
        np.zeros(0, bool),
    )


def _combined_causes(parts: list[HostCauses | None]) -> HostCauses | None:
    present = [p for p in parts if p is not None]
    return combine_causes(present) if present else None


def _on_clock(r: RankReport) -> RankOnClock:
    base = r.detail.timeline.base_time_ns if r.detail is not None else None
    starts = [s.start_us + base / 1000.0 for s in r.steps] if r.steps and base is not None else None
    return RankOnClock(r.rank, starts, r.total.comm_exposed_us)


def _combined_phases(ranks: list[RankReport]) -> list[PhaseReport]:
    """Per phase, the ranks' steps together: figures add (one GPU each), the step time is the median
    over every rank's steps of that phase, and each rank keeps its own verdict."""
    out = []
    for name in dict.fromkeys(p.phase for r in ranks for p in r.phases):
        parts = [p for r in ranks for p in r.phases if p.phase == name]
        walls = [s.wall_us for r in ranks for s in r.steps if s.phase == name]
        out.append(
            PhaseReport(
                phase=name,
                steps=sum(p.steps for p in parts),
                median_step_us=float(np.median(walls)),
                metrics=sum_metrics([p.metrics for p in parts]),
                verdict=None,
                per_rank=[p.verdict.label for p in parts if p.verdict is not None],
                host_causes=_combined_causes([p.host_causes for p in parts]),
                step_spread=spread(walls),
            )
        )
    return out


def _median_round_trips(parts: list[RoundTrips | None]) -> RoundTrips | None:
    present = [p for p in parts if p is not None]
    if not present:
        return None
    med = {
        f.name: float(np.median([getattr(p, f.name) for p in present]))
        for f in fields(RoundTrips)
        if f.name not in ("source", "layers", "per_layer", "ratio", "microbatched")
    }
    comm, compute = med["comm_per_round_trip_us"], med["compute_per_round_trip_us"]
    layers = present[0].layers
    return RoundTrips(
        source=present[0].source,
        layers=layers,
        per_layer=med["per_step"] / layers if layers else None,
        ratio=compute / comm if comm > 0 else None,
        microbatched=any(p.microbatched for p in present),
        **med,
    )
