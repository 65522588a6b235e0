"""Assemble per-step, per-rank and all-rank results: the Report every renderer reads."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from itertools import repeat
from typing import Any, Callable

import numpy as np

from dbo_trace.analysis import classify as c
from dbo_trace.analysis.accounting import B_COMM, B_COMPUTE, B_COPY, B_HOST, Partition, TimeBuckets, partition, window_of
from dbo_trace.analysis.attribution import SOURCE_HOOK_NVTX, SOURCE_HOOK_RANGES, SOURCE_NONE, Attribution, attribute
from dbo_trace.analysis.capture import GRAPH_CAPTURE, Capture, capture_windows, graph_capture, with_capture
from dbo_trace.analysis.clocks import Alignment, RankClue, align_on_anchor, align_on_epoch
from dbo_trace.analysis.contention import Contention, comm_kernel_names, contention, top_kernels
from dbo_trace.analysis.expensive import MOST as MOST_EXPENSIVE
from dbo_trace.analysis.expensive import ExpensiveCall, expensive_calls
from dbo_trace.analysis.exposure import CROWDED, LATE_RECORD, PEER, Exposure, exposure
from dbo_trace.analysis.held import HeldBack, HeldSummary, held_back, summarize
from dbo_trace.analysis.host_time import CAUSE_TEXT, UNTRACED, HostCauses, HostPieces, combine_causes, host_pieces
from dbo_trace.analysis.intervals import difference, grouped_length, union
from dbo_trace.analysis.pystacks import RankStacks, StepFrame, log_natives, rank_host_stacks
from dbo_trace.analysis.ledger import (
    YIELD_OP,
    LayerOps,
    Ledger,
    SmEvidence,
    WhatIf,
    layer_operations,
    ledger,
    operation_places,
    what_if_comm_sms,
    what_if_no_handovers,
    what_if_round_trip,
)
from dbo_trace.analysis.metrics import (
    ACROSS,
    MAX,
    MEDIAN,
    SUM,
    COMM_OPS_PER_ROUND_TRIP,
    SUM_IF_ALL,
    RoundTrips,
    MetricColumns,
    WindowMetrics,
    WindowTime,
    WindowTimes,
    grouped_window_metrics,
    round_trips,
    window_metrics,
)
from dbo_trace.analysis.operations import OperationRow, operation_ids, operation_index, operation_rows
from dbo_trace.analysis.queueing import LaunchDelay, launch_delay
from dbo_trace.analysis.peers import SAME_SIZE, PeerWaits, RankComm, WaitSplit, match, peer_waits, wait_split
from dbo_trace.analysis.ranks import CrossRank, RankOnClock, cross_rank, straggler_threshold
from dbo_trace.analysis.stalls import OUTLIER, Behind, Stall, behind, compile_ranges, find_stalls, in_periods, step_periods, top_compile_names
from dbo_trace.analysis.pair import pair_figures
from dbo_trace.analysis.roles import ATTENTION, FFN, RolesInfo, wall_offset_us
from dbo_trace.analysis.roundtrips import AfdRoundTrips, data_plane, ffn_parts, sendrecv_kernels
from dbo_trace.analysis.roundtrips import round_trips as afd_round_trips
from dbo_trace.analysis.roundtrips import summarize as summarize_round_trips
from dbo_trace.analysis.sharing import time_slicing
from dbo_trace.analysis.steps import PHASES, SOURCE_EVENT_LOG
from dbo_trace.analysis.summaries import CpuRangeRow, KernelSummary, Spread, cpu_range_summary, kernel_summary, spread
from dbo_trace.analysis.unprofiled import Repeat, Unprofiled, profiled_period, unprofiled_of
from dbo_trace.analysis.verdict import (
    HOST_BASIS_IN_STEPS,
    HOST_BASIS_WINDOW,
    LABELS,
    Findings,
    Verdict,
    decide,
    host_test_of,
    qualifiers,
    with_round_trip_share,
    with_round_trips,
    with_wait_split,
)
from dbo_trace.analysis.verdict import HOST_REASON
from dbo_trace.analysis.verdict import HostTest as HostTest  # re-exported: the renderers read it from here
from dbo_trace.bundle import EV_STEP_BEGIN
from dbo_trace.lazy import LazyList
from dbo_trace.trace.eventlog import EventLogData
from dbo_trace.trace.pystacks import StackSamples
from dbo_trace.trace.timeline import Timeline


@dataclass(frozen=True)
class Options:
    comm_patterns: tuple[str, ...] = ()
    comm_streams: tuple[int, ...] = ()
    ubatch_patterns: tuple[str, ...] = ()
    layers: int | None = None
    step_marker: str | None = None
    comm_only: bool = False  # comm_patterns replace the built-in communication families
    afd: bool = False  # a disaggregated (AFD) run: the round-trip model applies (analysis/roundtrips.py)
    roles: tuple[tuple[str, str], ...] = ()  # (trace path, role): the manifest's, its command line's or the trace's own
    role_sources: tuple[tuple[str, str], ...] = ()  # (trace path, where its role came from, in words)
    what_if_round_trip_us: tuple[float, ...] = ()  # --what-if round-trip=X: the model's step with X
    what_if_comm_sms: tuple[int, ...] = ()  # --what-if sms=N: the model's step with N SMs kept for comm
    comm_sms: str | None = None  # VLLM_DBO_COMM_SMS in the recording's environment (its manifest's env)
    env_recorded: bool = False  # a manifest kept the recording's environment
    repeats: tuple[Repeat, ...] = ()  # the recording's timed repeats, the profiler off (its manifest's)


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
    period_us: float = 0.0  # its share of the wall clock: from its start to the next step's start (stalls.py)
    stall: Stall | None = None  # why it is not steady state (compile, capture, outlier); None: steady
    host_frame: StepFrame | None = None  # its host idle's most-sampled Python frame, where sampled (pystacks.py)

    @property
    def step_us(self) -> float:
        """The step's time: its period (windows overlap where the GPU runs behind the CPU)."""
        return self.period_us

    @property
    def replayed(self) -> bool:
        """A graph step: most of its kernels came from CUDA graph replays (docs/analysis.md)."""
        return (self.metrics.replayed_kernel_fraction or 0.0) > REPLAYED_STEP_SHARE


REPLAYED_STEP_SHARE = 0.5


@dataclass(frozen=True)
class StepTable:
    """A rank's reported steps (those with GPU work), in step order, as columns, each (n,): what its
    analyses read of its steps, all at once (StepReports builds a step's StepReport when read)."""

    index: np.ndarray  # int64: into the attribution's steps
    start_us: np.ndarray  # float64: the step's window on the trace clock, from its CPU start
    end_us: np.ndarray  # float64: to the end of the last GPU work it launched
    period_us: np.ndarray  # float64: from its start to the next step's start (stalls.py)
    comm_ops: np.ndarray  # int64
    comm_ops_from_log: np.ndarray  # bool: counted as event-log comm phases, else as runs of comm kernels
    captured_launches: np.ndarray  # int64: launches recorded into a graph during a capture
    metrics: MetricColumns  # its figures
    label: list[str]
    path: list[str | None]
    phase: list[str | None]
    context_tokens: list[int | None]
    generation_tokens: list[int | None]
    stalls: dict[int, Stall]  # by position: the steps that are not steady state (the rest are)

    def __len__(self) -> int:
        return len(self.index)

    @property
    def wall_us(self) -> np.ndarray:
        wall: np.ndarray = self.end_us - self.start_us
        return wall

    @property
    def stalled(self) -> np.ndarray:
        """(n,) bool: the steps that are stalls."""
        out = np.zeros(len(self.index), bool)
        out[list(self.stalls)] = True
        return out

    @property
    def replayed(self) -> np.ndarray:
        """(n,) bool: graph steps (StepReport.replayed)."""
        kernels = self.metrics["kernels"]
        share = self.metrics["replayed_kernels"] / np.maximum(kernels, 1)
        replayed: np.ndarray = (kernels > 0) & (share > REPLAYED_STEP_SHARE)
        return replayed

    def of_phase(self, phase: str | None) -> np.ndarray:
        """The positions of the phase's steps, in order."""
        return np.flatnonzero(np.array(self.phase, object) == phase) if len(self.index) else np.empty(0, np.int64)

    def steady(self, at: np.ndarray) -> np.ndarray:
        """Of the positions `at`, the steady steps' (none where every one stalled)."""
        steady: np.ndarray = at[~self.stalled[at]]
        return steady

    def steady_or_all(self, at: np.ndarray) -> np.ndarray:
        """Of the positions `at` (a phase's steps), the steady ones, or all where every one stalled."""
        steady = self.steady(at)
        return steady if len(steady) else at


STEPS_BUILT_AT_ONCE = 128  # a step read builds its neighbours too: one host-causes sweep for many


class StepReports(LazyList[StepReport]):
    """A rank's steps: its StepTable, and each step's StepReport built when read (with its verdict,
    host causes and figures, tens of microseconds a step: a long run's terminal report reads 20 of
    100,000), STEPS_BUILT_AT_ONCE at a time. Reads as a list of StepReport does."""

    def __init__(
        self,
        table: StepTable,
        pieces: HostPieces,
        microbatched: bool,
        round_trip_share: list[float | None] | None = None,
        afd_microbatched: bool = False,
        host_frames: list[StepFrame | None] | None = None,
    ) -> None:
        super().__init__(len(table), self._step_alone)
        self.table = table
        self.pieces = pieces  # the host-idle pieces the steps' host causes are read from
        self.microbatched = microbatched
        self.round_trip_share = round_trip_share  # a disaggregated rank's: each step's round trips' hidden share
        self.afd_microbatched = afd_microbatched
        self.host_frames = host_frames

    def with_round_trip_share(self, share: list[float | None], microbatched: bool) -> StepReports:
        """The steps labelled by their own round trips' hidden share (verdict.with_round_trip_share)."""
        return StepReports(self.table, self.pieces, self.microbatched, share, microbatched, self.host_frames)

    def with_host_frames(self, frames: list[StepFrame | None]) -> StepReports:
        return StepReports(self.table, self.pieces, self.microbatched, self.round_trip_share, self.afd_microbatched, frames)

    def __repr__(self) -> str:
        return f"StepReports({len(self)} steps)"

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)  # what was built is built again

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        LazyList.__init__(self, len(self.table), self._step_alone)

    def _step_alone(self, i: int) -> StepReport:  # never called: _fill builds a chunk
        raise AssertionError(i)

    def _fill(self, i: int) -> None:
        a = i - i % STEPS_BUILT_AT_ONCE
        self._build_steps(a, min(len(self), a + STEPS_BUILT_AT_ONCE))

    def _build_steps(self, a: int, b: int) -> None:
        t, m = self.table, self.table.metrics
        causes = self.pieces.causes_in(t.start_us[a:b], t.end_us[a:b], m["host_idle_us"][a:b], top=3)
        for i, c in zip(range(a, b), causes):
            figures = m.row(i)
            verdict = decide(figures, microbatched=self.microbatched)
            if self.round_trip_share is not None:
                verdict = with_round_trip_share(verdict, self.round_trip_share[i], self.afd_microbatched)
            self._items[i] = StepReport(
                label=t.label[i],
                path=t.path[i],
                wall_us=float(t.end_us[i] - t.start_us[i]),
                comm_ops=int(t.comm_ops[i]),
                comm_ops_from_log=bool(t.comm_ops_from_log[i]),
                metrics=figures,
                verdict=verdict,
                index=int(t.index[i]),
                start_us=float(t.start_us[i]),
                end_us=float(t.end_us[i]),
                phase=t.phase[i],
                context_tokens=t.context_tokens[i],
                generation_tokens=t.generation_tokens[i],
                captured_launches=int(t.captured_launches[i]),
                host_causes=c,
                period_us=float(t.period_us[i]),
                stall=t.stalls.get(i),
                host_frame=None if self.host_frames is None else self.host_frames[i],
            )


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
    step_spread: Spread | None = None  # its steps' periods: median, p90, p99, max (stalls included)
    stalls: int = 0  # its steps that are stalls: its figures and verdict are over the others (where any)


@dataclass(frozen=True)
class RankDetail:
    """A rank's shared state: built once at analyze_rank's start (rank_detail), handed to each of the
    rank's analyses, and kept on its report for the pictures and `combine`. Shapes: n_gpu GPU
    activities, n_calls CUDA API calls, n_steps the attribution's steps."""

    timeline: Timeline
    attribution: Attribution
    kernel_kind: np.ndarray  # (n_gpu,) int8: classify.COMPUTE / COMM / COPY
    call_kind: np.ndarray  # (n_calls,) int8: classify.CALL_*
    launch_kind: np.ndarray  # (n_gpu,) int8: call kind of the launching call, -1 where unknown
    partition: Partition  # the window cut into time buckets
    held: HeldBack | None  # per held-back comm kernel: holder, delay, cause; None without microbatches or comm
    host_pieces: HostPieces  # the host-idle stretches cut by cause
    log_step_begins_ns: np.ndarray | None  # (n_begins,) int64: the event log's step begins (time.time_ns), to align ranks
    launch_lane: np.ndarray  # (n_gpu,) int64: the thread of the launching call, -1 where unknown
    call_us: np.ndarray  # (n_calls,) float64: each CUDA API call's duration
    step_start_us: np.ndarray  # (n_steps,) float64: each step's window, from its CPU start
    step_end_us: np.ndarray  # (n_steps,) float64: to the end of the last GPU work it launched
    operation: np.ndarray  # (n_gpu,) int64: each comm kernel's communication operation (operation_ids), -1 else
    window_us: tuple[float, float]  # the profiled window: the first event's start, the last one's end

    @property
    def microbatched(self) -> bool:
        return self.attribution.source != SOURCE_NONE

    @property
    def has_comm(self) -> bool:
        return bool((self.kernel_kind == c.COMM).any())


@dataclass(frozen=True)
class RankReport:
    rank: int
    source: str
    attribution: str  # where the microbatches came from
    step_source: str
    profile_all_threads: bool
    steps: StepReports
    total: WindowMetrics  # over the profiled window
    round_trips: RoundTrips | None
    verdict: Verdict
    window: TimeBuckets  # the profiled window by bucket
    in_steps: TimeBuckets  # the union of the step windows by bucket
    host_test: HostTest
    steady: TimeBuckets | None = None  # what the host test measured: the steady steps' windows (or the window less the stalls')
    behind: Behind | None = None  # the step windows overlap: the GPU runs behind the CPU
    launch_delay: LaunchDelay | None = None  # launch call end to start; host idle after the launch (analysis/queueing.py)
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
    # The comm slowdown over transfer time alone (kernel time less its wait for peer ranks); None: one rank
    comm_transfer_slowdown: float | None = None
    # its comm time apart into waiting for peer ranks and transfer, hidden and exposed; None: one rank
    wait_split: WaitSplit | None = None
    graph_api: str = "CUDA"  # what its graph lines call the graphs: HIP on ROCm traces
    role: str | None = None  # attention / ffn in a disaggregated run (analysis/role_evidence.py)
    role_source: str | None = None  # where the role came from, in words (the manifest, the command line, the trace)
    expensive_calls: list[ExpensiveCall] = field(default_factory=list)  # analysis/expensive.py
    afd: AfdRoundTrips | None = None  # the attention side's round trips (analysis/roundtrips.py)
    host_stacks: RankStacks | None = None  # host idle by sampled Python frame (analysis/pystacks.py); None: no samples
    ledger: Ledger | None = None  # DBO's own cost, the split and the hand-overs (analysis/ledger.py)
    sm_evidence: SmEvidence | None = None  # the launch shape of held-back comm's holder (pipeline.with_sm_evidence)
    detail: RankDetail | None = field(default=None, repr=False, compare=False)

    @property
    def operations_by_layer(self) -> list[LayerOps]:
        """Its comm operations per layer, layers alike grouped (analysis/ledger.py)."""
        ops = self.operations
        return layer_operations(
            [o.layer for o in ops], [o.median_us for o in ops], [o.hidden_fraction for o in ops],
            [o.median_exposed_us for o in ops], [o.reason for o in ops],
        )  # fmt: skip

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
    roles: RolesInfo | None = None  # a disaggregated run's roles and whether they shared a GPU
    what_if: list[WhatIf] = field(default_factory=list)  # model estimates (analysis/ledger.py)
    unprofiled: Unprofiled | None = None  # the timed repeats against the profiled steps: the profiler's overhead


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
    ids = operation_ids(step=step, lane=lane, launch_start=launch_start, start=start, is_comm=is_comm)
    return operations_per_step(ids, step, n_steps)


def operations_per_step(op_ids: np.ndarray, step: np.ndarray, n_steps: int) -> np.ndarray:
    counted = op_ids >= 0
    if not counted.any():
        return np.zeros(n_steps, np.int64)
    _ids, first = np.unique(op_ids[counted], return_index=True)
    return np.bincount(step[counted][first], minlength=n_steps)


def analyze_rank(
    tl: Timeline, logs: list[EventLogData], options: Options, *, rank: int | None = None, samples: list[StackSamples] | None = None
) -> RankReport:
    """One rank's report: its shared state once (rank_detail), then each analysis over it.
    rank: the rank's number as the caller settled it (trace/load.py settle_ranks); None: the one its
    trace claims. samples: the process's sampled Python stacks (py-spy), if any."""
    d = rank_detail(tl, logs, options)
    capture = graph_capture(
        call_start=tl.calls.start, call_end=tl.calls.end, call_lane=tl.calls.lane, call_kind=d.call_kind, part=d.partition
    )
    steps = step_reports(d, capture)
    table = steps.table
    whole = whole_window(d, table)
    phases = [phase_report(d, table, phase=p, at=at) for p in PHASES if len(at := table.of_phase(p))]
    exposed = rank_exposure(d) if d.has_comm else None
    cost = rank_contention(d) if d.microbatched else None
    all_threads = _profiled_microbatch_threads(tl, d.attribution)
    role = dict(options.roles).get(os.path.normpath(tl.source))
    afd = rank_round_trips(d, table) if role == ATTENTION or (options.afd and role is None) else None
    if afd is not None:  # its steps and phases say what the run says: overlap is the round trips'
        steps, phases = _afd_labels(afd, steps, phases)
    rt = _round_trips(table, d.attribution.layers, d.microbatched, afd)
    api = graph_api(tl)
    expensive = rank_expensive(d, afd is not None and afd.microbatched)
    stacks, stack_notes = (None, []) if not samples else stacks_of(d, samples, logs, whole, phases, table)
    if stacks is not None and len(stacks.steps) == len(steps):
        steps = steps.with_host_frames(list(stacks.steps))
    verdict = decide(
        whole.total,
        rt,
        all_threads,
        host=whole.host_test,
        microbatched=d.microbatched,
        findings=findings(whole.window.window_us, [exposed], [cost], host_cause=host_cause_text(whole.causes)),
        causes=whole.causes,
        graph_api=api,
    )
    late = behind(table.start_us, table.end_us)
    delay = rank_launch_delay(d)
    delay_note = delay.text if delay is not None else None
    verdict = with_running_behind(verdict, delay)
    verdict = with_stall_line(verdict, [(None, steps)])
    return RankReport(
        rank=tl.claimed_rank if rank is None else rank,
        source=str(tl.source),
        attribution=d.attribution.source,
        step_source=d.attribution.steps.source,
        profile_all_threads=all_threads,
        steps=steps,
        total=whole.total,
        round_trips=rt,
        verdict=with_capture(with_expensive(with_round_trips(verdict, afd), expensive), capture, whole.window.host_idle_us),
        graph_api=api,
        role=role,
        role_source=dict(options.role_sources).get(os.path.normpath(tl.source)),
        expensive_calls=expensive,
        afd=afd,
        window=whole.window,
        in_steps=whole.in_steps,
        host_test=whole.host_test,
        steady=whole.steady,
        behind=late,
        launch_delay=delay,
        phases=phases,
        steps_inferred=d.attribution.steps.inferred,
        contention=cost,
        comm_kernels=comm_kernel_names(d.kernel_kind, tl.gpu.name, tl.names),
        host_causes=whole.causes,
        host_causes_window=whole.causes_window,
        kernel_summary=kernel_summary(tl.names, tl.gpu.name, tl.gpu.end - tl.gpu.start, tl.gpu_is_copy),
        cpu_ranges=cpu_range_summary(d.host_pieces, tl.cpu.name, tl.cpu.end - tl.cpu.start, whole.window.host_idle_us),
        top_compute_kernels=top_kernels(d.kernel_kind, tl.gpu.name, tl.gpu.end - tl.gpu.start, tl.names, c.COMPUTE),
        exposure=exposed,
        held_back=held_summary(d),
        operations=rank_operations(d, exposed, _layers(d, afd)) if d.microbatched else [],
        notes=list(d.attribution.notes) + [n for n in (late and late.text, delay_note) if n] + tl.warnings + stack_notes,
        capture=capture if capture.found else None,
        host_stacks=stacks,
        ledger=rank_ledger(d, logs, table, _layers(d, afd)),
        detail=d,
    )


def stacks_of(
    d: RankDetail, samples: list[StackSamples], logs: list[EventLogData], whole: WholeWindow, phases: list[PhaseReport],
    steps: StepTable,
) -> tuple[RankStacks | None, list[str]]:
    """Host idle by sampled Python frame (analysis/pystacks.py): over the window and per phase."""
    tl = d.timeline
    by_phase = []
    for p in phases:
        mine = steps.of_phase(p.phase)
        if p.host_causes is not None and len(mine):
            lo = steps.start_us[mine]
            hi = steps.end_us[mine]
            by_phase.append((p.phase, lo, hi, p.host_causes.host_idle_us, p.host_causes.us(UNTRACED)))
    return rank_host_stacks(
        samples=samples, pieces=d.host_pieces, pid=tl.pid, base_time_ns=tl.base_time_ns, names=tl.names,
        call_lane=tl.calls.lane, cpu_start=tl.cpu.start, cpu_end=tl.cpu.end, cpu_name=tl.cpu.name, cpu_lane=tl.cpu.lane,
        cpu_is_annotation=tl.cpu_is_annotation, log_native=log_natives([r for g in logs for r in g.records], [g.header for g in logs]),
        window=d.window_us, host_idle_us=whole.window.host_idle_us, untraced_us=whole.causes_window.us(UNTRACED),
        phases=by_phase, steps=(steps.start_us, steps.end_us),
    )  # fmt: skip


def rank_detail(tl: Timeline, logs: list[EventLogData], options: Options) -> RankDetail:
    """What the rank's analyses share, each computed once: the attribution, every activity's and
    call's kind, the launching threads, the window's partition into time buckets, the step windows,
    the comm operations, the held-back comm and the host-idle pieces."""
    att = attribute(tl, logs, list(options.ubatch_patterns), options.layers, options.step_marker)
    rules = c.CommRules(extra_patterns=options.comm_patterns, streams=options.comm_streams, replace_builtin=options.comm_only)
    kinds = c.kernel_kinds(tl.names, tl.gpu.name, tl.gpu_is_copy, tl.gpu.lane, rules)
    call_kind = c.call_kinds(tl.names, tl.calls.name)
    launched = att.gpu_launch_index >= 0
    li = np.clip(att.gpu_launch_index, 0, None)
    launch_kind = np.where(launched, call_kind[li] if len(call_kind) else -1, -1)
    launch_lane = np.where(launched, tl.calls.lane[li] if len(tl.calls) else -1, -1)
    lo, hi = window_of((tl.gpu.start, tl.gpu.end), (tl.calls.start, tl.calls.end), (tl.cpu.start, tl.cpu.end))
    launch_end = np.where(launched, tl.calls.end[li] if len(tl.calls) else np.nan, np.nan)
    part = partition(
        lo=lo, hi=hi, start=tl.gpu.start, end=tl.gpu.end, kind=kinds, launch_start=att.gpu_launch_start, launch_end=launch_end
    )
    step_start, step_end = _step_windows(tl, att)
    is_comm = kinds == c.COMM
    held = None
    if att.source != SOURCE_NONE and is_comm.any():
        held = held_back(
            gpu_start=tl.gpu.start, gpu_end=tl.gpu.end, gpu_stream=tl.gpu.lane, kinds=kinds, ubatch=att.gpu_ubatch,
            launch_index=att.gpu_launch_index, call_start=tl.calls.start, call_end=tl.calls.end,
            call_thread=tl.calls.lane, call_kind=call_kind,
        )  # fmt: skip
    pieces = host_pieces(
        part=part, names=tl.names, gpu_start=tl.gpu.start, gpu_launch_start=att.gpu_launch_start,
        gpu_launch_index=att.gpu_launch_index, gpu_step=att.gpu_step, call_start=tl.calls.start, call_end=tl.calls.end,
        call_name=tl.calls.name, call_lane=tl.calls.lane, call_kind=call_kind, call_step=att.call_step,
        call_ubatch=att.call_ubatch, cpu_start=tl.cpu.start, cpu_end=tl.cpu.end, cpu_name=tl.cpu.name,
        cpu_lane=tl.cpu.lane, cpu_is_annotation=tl.cpu_is_annotation, step_lo=att.steps.start, step_hi=att.steps.end,
        steps_marked=not att.steps.inferred,
    )  # fmt: skip
    return RankDetail(
        timeline=tl,
        attribution=att,
        kernel_kind=kinds,
        call_kind=call_kind,
        launch_kind=launch_kind,
        partition=part,
        held=held,
        host_pieces=pieces,
        log_step_begins_ns=_log_step_begins(logs),
        launch_lane=launch_lane,
        call_us=tl.calls.end - tl.calls.start,
        step_start_us=step_start,
        step_end_us=step_end,
        operation=operation_ids(
            step=att.gpu_step, lane=launch_lane, launch_start=att.gpu_launch_start, start=tl.gpu.start, is_comm=is_comm
        ),
        window_us=(lo, hi),
    )


def _layers(d: RankDetail, afd: AfdRoundTrips | None) -> int | None:
    """The rank's layers: --layers or the event log's, else a disaggregated rank's (one FFN round trip
    per layer and microbatch), so its comm operations and hand-overs are labelled by layer too."""
    return d.attribution.layers or (afd.layers if afd is not None else None)


def rank_ledger(d: RankDetail, logs: list[EventLogData], steps: StepTable, layers: int | None = None) -> Ledger | None:
    """The ledger over a rank's shared state (report.analyze_rank's one call); layers: as _layers."""
    tl, att = d.timeline, d.attribution
    usable = [log.records for log in logs if log.pid is None or tl.pid is None or log.pid == tl.pid]
    yield_name = [i for i, n in enumerate(tl.names) if n == YIELD_OP]
    return ledger(
        log_records=usable,
        base_time_ns=tl.base_time_ns,
        step_start_us=att.steps.start,
        step_end_us=att.steps.end,
        step_index=steps.index,
        step_us=steps.period_us,
        layers=layers or att.layers,
        cpu_start=tl.cpu.start,
        cpu_end=tl.cpu.end,
        cpu_lane=tl.cpu.lane,
        cpu_is_yield_op=np.isin(tl.cpu.name, yield_name) & ~tl.cpu_is_annotation,
        gpu_start=tl.gpu.start,
        gpu_end=tl.gpu.end,
        gpu_is_compute=d.kernel_kind == c.COMPUTE,
        gpu_step=att.gpu_step,
        gpu_ubatch=att.gpu_ubatch,
    )


def _step_windows(tl: Timeline, att: Attribution) -> tuple[np.ndarray, np.ndarray]:
    """Each step's window: from its CPU start until the last GPU work it launched ends (a graph
    replay's CPU window is only the launch)."""
    own_end = np.full(len(att.steps), -np.inf)
    stepped = att.gpu_step >= 0
    np.maximum.at(own_end, att.gpu_step[stepped], tl.gpu.end[stepped])
    return att.steps.start, np.maximum(att.steps.end, own_end)


def metrics_of(d: RankDetail, *, gpu: np.ndarray, calls: np.ndarray, windows: tuple[np.ndarray, np.ndarray]) -> WindowMetrics:
    """The figures of the selected activities and calls (gpu: (n_gpu,) bool, calls: (n_calls,) bool)
    over the union of the windows (lo, hi)."""
    tl, att = d.timeline, d.attribution
    return window_metrics(
        start=tl.gpu.start[gpu],
        end=tl.gpu.end[gpu],
        kind=d.kernel_kind[gpu],
        ubatch=att.gpu_ubatch[gpu],
        launch_start=att.gpu_launch_start[gpu],
        launch_kind=d.launch_kind[gpu],
        call_kind=d.call_kind[calls],
        call_dur=d.call_us[calls],
        time=window_time(d.partition, *windows),
    )


def step_reports(d: RankDetail, capture: Capture) -> StepReports:
    """Every step with GPU activity: its figures as columns, of all steps at once over sorted arrays
    (the cost grows with events, not events x steps); its verdict and host causes when it is read."""
    tl, att = d.timeline, d.attribution
    n_steps = len(att.steps)
    step_lo, step_hi = d.step_start_us, d.step_end_us
    per_step = grouped_window_metrics(
        group=att.gpu_step,
        n=n_steps,
        start=tl.gpu.start,
        end=tl.gpu.end,
        kind=d.kernel_kind,
        ubatch=att.gpu_ubatch,
        launch_start=att.gpu_launch_start,
        launch_kind=d.launch_kind,
        call_group=att.call_step,
        call_kind=d.call_kind,
        call_dur=d.call_us,
        times=window_times(d.partition, step_lo, step_hi),
    )
    ops = operations_per_step(d.operation, att.gpu_step, n_steps)
    captured_launch = capture.call_captured & np.isin(d.call_kind, (c.CALL_LAUNCH, c.CALL_GRAPH_LAUNCH)) & (att.call_step >= 0)
    captured_per_step = np.bincount(att.call_step[captured_launch], minlength=n_steps)
    has_gpu = np.bincount(att.gpu_step[att.gpu_step >= 0], minlength=n_steps) > 0
    shown = np.flatnonzero(has_gpu)
    logged = np.asarray(att.comm_phases)[shown] if att.comm_phases is not None else np.full(len(shown), -1)
    picked = shown.tolist()
    lo, hi = step_lo[shown], step_hi[shown]
    table = StepTable(
        index=shown.astype(np.int64),
        start_us=lo,
        end_us=hi,
        period_us=step_periods(lo, hi),
        comm_ops=np.where(logged >= 0, logged, ops[shown]).astype(np.int64),
        comm_ops_from_log=logged >= 0,
        captured_launches=captured_per_step[shown].astype(np.int64),
        metrics=MetricColumns({k: v[shown] for k, v in per_step.columns.items()}),
        label=[att.steps.label[i] for i in picked],
        path=[att.steps.path[i] for i in picked],
        phase=[att.steps.phase[i] for i in picked],
        context_tokens=[att.steps.context_tokens[i] for i in picked],
        generation_tokens=[att.steps.generation_tokens[i] for i in picked],
        stalls={},
    )
    return StepReports(replace(table, stalls=step_stalls(d, table)), d.host_pieces, d.microbatched)


def step_stalls(d: RankDetail, steps: StepTable) -> dict[int, Stall]:
    """The steps' stalls by position (analysis/stalls.py): compile/JIT ranges and graph captures
    inside a step's period, and periods that are outliers against their phase."""
    if not len(steps):
        return {}
    tl = d.timeline
    lo, hi = steps.start_us, steps.end_us
    jit = compile_ranges(tl.names, tl.cpu.name)
    c_start, c_end = tl.cpu.start[jit], tl.cpu.end[jit]
    w_start, w_end, _lanes = capture_windows(tl.calls.start, tl.calls.end, tl.calls.lane, d.call_kind)
    return find_stalls(
        period_us=steps.period_us,
        phase=steps.phase,
        compile_us=in_periods(lo, hi, c_start, c_end),
        capture_us=in_periods(lo, hi, w_start, w_end),
        compile_names=top_compile_names(lo, hi, c_start, c_end, tl.cpu.name[jit], tl.names),
    )


@dataclass(frozen=True)
class WholeWindow:
    """A rank's figures over its profiled window and over its steps' union, and the host test between them."""

    total: WindowMetrics
    window: TimeBuckets
    in_steps: TimeBuckets
    host_test: HostTest
    causes: HostCauses  # over what the host test measured
    causes_window: HostCauses
    steady: TimeBuckets  # what the host test measured: the steady steps' union, or the window less the stalls'


def whole_window(d: RankDetail, steps: StepTable) -> WholeWindow:
    tl = d.timeline
    lo, hi = d.window_us
    whole = (np.array([lo]), np.array([hi]))
    total = metrics_of(d, gpu=np.ones(len(tl.gpu), bool), calls=np.ones(len(tl.calls), bool), windows=whole)
    part = d.partition
    window = TimeBuckets.from_row(hi - lo, part.measure(*whole)[0])
    reported = steps.index
    steps_union = union(d.step_start_us[reported], d.step_end_us[reported]) if len(reported) else (np.empty(0), np.empty(0))
    in_steps = _buckets_over(part, steps_union)
    # The host test and its causes over the steady state: the stalls' windows left out
    stalled = steps.stalled
    steady_steps = steps.steady_or_all(np.arange(len(steps)))
    if d.attribution.steps.inferred or in_steps.window_us <= 0:
        stall_union = union(steps.start_us[stalled], steps.end_us[stalled])
        region = difference(whole, stall_union) if stalled.any() else whole
        steady_window = _buckets_over(part, region)
        steady = steady_window
    else:
        region = union(steps.start_us[steady_steps], steps.end_us[steady_steps])
        steady = _buckets_over(part, region)
        steady_window = window
    host_test = host_test_of(d.attribution.steps.inferred, steady_window, steady)
    causes_window = d.host_pieces.causes_in(*whole, np.array([window.host_idle_us]))[0]
    causes = (
        causes_window
        if not stalled.any() and host_test.basis == HOST_BASIS_WINDOW
        else d.host_pieces.causes_in_union(region[0], region[1], steady.host_idle_us)
    )
    return WholeWindow(total, window, in_steps, host_test, causes, causes_window, steady)


def _buckets_over(part: Partition, region: tuple[np.ndarray, np.ndarray]) -> TimeBuckets:
    """The buckets over a union of windows (disjoint, sorted, or any: they are merged)."""
    u = union(*region) if len(region[0]) else region
    return TimeBuckets.from_row(float((u[1] - u[0]).sum()), part.measure_union(*u) if len(u[0]) else np.zeros(5))


def rank_launch_delay(d: RankDetail) -> LaunchDelay | None:
    """Launch-to-start delays and the host idle after the ending work's launch (analysis/queueing.py)."""
    tl, att = d.timeline, d.attribution
    li = att.gpu_launch_index
    launch_end = np.where(li >= 0, tl.calls.end[np.clip(li, 0, None)] if len(tl.calls) else np.nan, np.nan)
    part = d.partition
    return launch_delay(
        gpu_start=tl.gpu.start,
        launch_end=launch_end,
        replayed=d.launch_kind == c.CALL_GRAPH_LAUNCH,
        queued_start=part.queued_start,
        queued_end=part.queued_end,
        host_idle_us=float(part.measure(np.array([part.lo]), np.array([part.hi]))[0, B_HOST]) if len(part.bounds) else 0.0,
        window_us=part.hi - part.lo,
    )


def held_summary(d: RankDetail) -> HeldSummary | None:
    if d.held is None:
        return None
    tl, att = d.timeline, d.attribution
    return summarize(
        d.held, gpu_name=tl.gpu.name, names=tl.names, call_name=tl.calls.name, call_thread=tl.calls.lane,
        call_ubatch=att.call_ubatch, call_start=tl.calls.start, holder_launch_start=att.gpu_launch_start,
    )  # fmt: skip


def rank_exposure(d: RankDetail, *, peer_until: np.ndarray | None = None) -> Exposure:
    """Why the rank's comm was exposed (analysis/exposure.py); peer_until: (n_gpu,) float64, where a
    comm kernel waited for a peer rank, until when (NaN: it did not)."""
    tl, att = d.timeline, d.attribution
    lo, hi = d.window_us
    seg_start, seg_end = d.partition.spans(B_COMM, lo, hi)
    return exposure(
        seg_start=seg_start,
        seg_end=seg_end,
        start=tl.gpu.start,
        end=tl.gpu.end,
        kind=d.kernel_kind,
        ubatch=att.gpu_ubatch,
        step=att.gpu_step,
        launch_start=att.gpu_launch_start,
        held={} if d.held is None else d.held.causes(),
        peer_until=peer_until,
    )


def rank_contention(d: RankDetail, *, comm_wait_us: np.ndarray | None = None) -> Contention | None:
    """What overlap cost (analysis/contention.py); comm_wait_us: (n_gpu,) float64, each comm kernel's
    wait for its peer ranks, taken off its end (what slower transfers alone cost)."""
    tl = d.timeline
    end = tl.gpu.end if comm_wait_us is None else tl.gpu.end - comm_wait_us
    return contention(
        start=tl.gpu.start, end=end, kind=d.kernel_kind, ubatch=d.attribution.gpu_ubatch, name=tl.gpu.name, names=tl.names
    )


def rank_operations(d: RankDetail, exposed: Exposure | None, layers: int | None = None) -> list[OperationRow]:
    """The comm operations per (microbatch, place in the step), each with its layer and role where the
    layers (as _layers: --layers, the log's, a disaggregated rank's) divide them."""
    tl, att = d.timeline, d.attribution
    rows = operation_rows(
        start=tl.gpu.start, end=tl.gpu.end, kind=d.kernel_kind, ubatch=att.gpu_ubatch, step=att.gpu_step, op=d.operation,
        exposure=exposed,
    )  # fmt: skip
    # Point-to-point: every comm kernel a SendRecv, none of a named collective but send/recv (an
    # NCCL all-to-all runs SendRecv kernels too; torch names it all_to_allv, vLLM's PyNccl names none).
    is_comm = d.kernel_kind == c.COMM
    comm_names = [tl.names[i] for i in np.unique(tl.gpu.name[is_comm]).tolist()]
    named = tl.comm_args().collective
    named = named[is_comm] if len(named) == len(is_comm) else np.zeros(0, np.int32)  # a timeline built without args
    collectives = {tl.names[i] for i in np.unique(named).tolist() if i >= 0}
    sendrecv = bool(comm_names) and all("SendRecv" in n for n in comm_names) and collectives <= {"send", "recv"}
    places = operation_places([r.ubatch for r in rows], [r.index for r in rows], layers or att.layers, sendrecv)
    return [replace(r, layer=layer, role=role) for r, (layer, role) in zip(rows, places)]


def findings(
    window_us: float,
    exposures: list[Exposure | None],
    costs: list[Contention | None],
    peers: CrossRank | None = None,
    host_cause: str | None = None,
    waited_for: int | None = None,
) -> Findings:
    """What the headline may name (analysis/verdict.py), from the figures the report prints: a rank's,
    or every rank's added (each rank is its own GPU). host_cause: the host-time attribution's largest
    item in words. The peer wait is the exposed comm that was waiting for a peer rank (exposure's
    `peer` reason, set where the ranks' collectives were matched), and the rank waited for: a rank's
    own (waited_for), or for the run the rank that held the others back most (analysis/peers.py)."""
    measured = [x for x in costs if x is not None]

    def exposed_by(reason: str) -> float:
        return float(sum(x.by_reason_us.get(reason, 0.0) for x in exposures if x is not None))

    held = peers.waits.held_back_most if peers is not None and peers.waits is not None else None
    peer_wait = exposed_by(PEER)
    return Findings(
        window_us=window_us,
        late_record_us=exposed_by(LATE_RECORD),
        crowded_us=exposed_by(CROWDED),
        saved_us=float(sum(x.saved_us for x in measured)) if measured else None,
        serial_estimate_us=float(sum(x.serial_estimate_us for x in measured)) if measured else None,
        host_cause=host_cause,
        peer_wait_us=peer_wait if peer_wait > 0 else None,
        peer_rank=waited_for if waited_for is not None else (held[0] if held else None),
    )


def _with_peer_headline(r: RankReport, view: CrossRank | None) -> RankReport:
    """A rank's headline once the ranks' waits are known: its exposed comm that waited for a peer may
    now be the dominant finding (analysis/verdict.py's order). The label and reasons stay."""
    waits = view.waits.ranks.get(r.rank) if view is not None and view.waits is not None else None
    if waits is None or r.verdict.label not in LABELS:
        return r
    most = max(waits.waited_for_us.items(), key=lambda kv: (kv[1], -kv[0]), default=None)
    f = findings(
        r.window.window_us, [r.exposure], [r.contention], view, host_cause_text(r.host_causes), most[0] if most else None
    )
    found = qualifiers(r.verdict.label, r.host_test.fraction, f)
    return replace(r, verdict=replace(r.verdict, qualifier=found[0] if found else None, findings=[q.key for q in found]))


def _log_step_begins(logs: list[EventLogData]) -> np.ndarray | None:
    begins = [r[0] for log in logs for r in log.records if r[1] == EV_STEP_BEGIN]
    return np.sort(np.array(begins, np.int64)) if begins else None


def window_times(part: Partition, lo: np.ndarray, hi: np.ndarray) -> WindowTimes:
    """Each window's time on its own (windows may overlap each other), all at once: as
    _window_time's, a column each."""
    rows = part.measure(lo, hi)
    host_gaps, all_gaps = part.gaps_in(lo, hi)
    busy = rows[:, B_COMPUTE] + rows[:, B_COMM] + rows[:, B_COPY]  # TimeBuckets.busy_us, in its order
    return WindowTimes(hi - lo, busy, rows[:, B_HOST].copy(), host_gaps.astype(np.int64), all_gaps.astype(np.int64))


def window_time(part: Partition, lo: np.ndarray, hi: np.ndarray) -> WindowTime:
    """Span, busy time and host-caused idle of a window (or a union of windows) from the rank's one timeline."""
    u_lo, u_hi = union(np.asarray(lo, float), np.asarray(hi, float))
    row = part.measure(u_lo, u_hi).sum(axis=0) if len(u_lo) else np.zeros(5)
    return _window_time(float((u_hi - u_lo).sum()), row, *part.host_gaps_in(u_lo, u_hi))


def _window_time(span_us: float, row: np.ndarray, host_gaps: int, all_gaps: int) -> WindowTime:
    buckets = TimeBuckets.from_row(span_us, row)
    return WindowTime(span_us, buckets.busy_us, buckets.host_idle_us, host_gaps, all_gaps)


def phase_report(d: RankDetail, steps: StepTable, *, phase: str, at: np.ndarray) -> PhaseReport:
    """A phase's figures and verdict over its steady steps (all of them where every one stalled);
    its step-time spread over all its steps' periods, stalls included. at: its steps' positions."""
    att = d.attribution
    steady = steps.steady_or_all(at)
    idx = steps.index[steady]
    windows = (steps.start_us[steady], steps.end_us[steady])
    m = metrics_of(d, gpu=np.isin(att.gpu_step, idx), calls=np.isin(att.call_step, idx), windows=windows)
    causes = d.host_pieces.causes_in_union(windows[0], windows[1], m.host_idle_us)
    return PhaseReport(
        phase=phase,
        steps=len(at),
        median_step_us=float(np.median(steps.period_us[steady])),
        metrics=m,
        verdict=decide(m, microbatched=d.microbatched, causes=causes),
        host_causes=causes,
        step_spread=spread(steps.period_us[at]),
        stalls=int(steps.stalled[at].sum()),
    )


def rank_expensive(d: RankDetail, afd_microbatched: bool = False) -> list[ExpensiveCall]:
    """The CPU operators and ranges that cost far more per call than their GPU work (analysis/expensive.py)."""
    tl, att = d.timeline, d.attribution
    marked = not att.steps.inferred
    microbatched = d.microbatched or afd_microbatched
    calls = expensive_calls(
        names=tl.names, cpu_start=tl.cpu.start, cpu_end=tl.cpu.end, cpu_name=tl.cpu.name, cpu_lane=tl.cpu.lane,
        cpu_is_annotation=tl.cpu_is_annotation, launch_start=att.gpu_launch_start, launch_lane=d.launch_lane,
        gpu_us=tl.gpu.end - tl.gpu.start, step_start=att.steps.start if marked else np.empty(0),
        step_end=att.steps.end if marked else np.empty(0),
    )  # fmt: skip
    return [replace(e, microbatched=microbatched) for e in calls]


def with_running_behind(v: Verdict, delay: LaunchDelay | None, rank: int | None = None) -> Verdict:
    """The GPU running behind the host, named beside the host time: the idle it explains is not the host's."""
    text = delay.behind_text if delay is not None else None
    if text is None:
        return v
    if rank is not None:
        text = f"rank {rank}: {text}"
    reasons = list(v.reasons)
    at = next((i + 1 for i, r in enumerate(reasons) if r.startswith(HOST_REASON)), 0)
    reasons.insert(at, text)
    return replace(v, reasons=reasons)


def with_expensive(v: Verdict, calls: list[ExpensiveCall]) -> Verdict:
    """The expensive calls as one reason beside the host time: a cost per call, not a wait."""
    if not calls:
        return v
    text = "expensive calls (far more per call than the GPU work they launch): " + "; ".join(e.text() for e in calls)
    reasons = list(v.reasons)
    at = next((i for i, r in enumerate(reasons) if r.startswith(HOST_REASON)), None)
    if at is None:
        reasons.insert(0, text)
    else:  # the host-time line says it: a cost per call, beside the idle it caused
        reasons[at] = f"{reasons[at]}; {text}"
    return replace(v, reasons=reasons)


def rank_round_trips(d: RankDetail, steps: StepTable) -> AfdRoundTrips | None:
    """The disaggregated round trips of an attention rank (analysis/roundtrips.py)."""
    tl, att = d.timeline, d.attribution
    p2p = sendrecv_kernels(tl.names, tl.gpu.name, d.kernel_kind)
    data = data_plane(is_p2p=p2p, kind=d.kernel_kind, stream=tl.gpu.lane, replayed=d.launch_kind == c.CALL_GRAPH_LAUNCH)
    rows, told, unpaired, told_ub = afd_round_trips(
        start=tl.gpu.start, end=tl.gpu.end, kind=d.kernel_kind, data=data, step=att.gpu_step, ubatch=att.gpu_ubatch
    )
    in_step = data & (att.gpu_step >= 0)
    kernels_per_step = np.unique(att.gpu_step[in_step], return_counts=True)[1]
    found = summarize_round_trips(
        rows, told, unpaired, data_kernels=int(data.sum()), control_kernels=int((p2p & ~data).sum()),
        step_compute_us=dict(zip(steps.index.tolist(), steps.metrics["compute_busy_us"].tolist())), layers=att.layers,
        kernels_per_step=kernels_per_step,
    )  # fmt: skip
    return None if found is None else replace(found, kernel_ubatch=told_ub)


def _afd_labels(afd: AfdRoundTrips, steps: StepReports, phases: list[PhaseReport]) -> tuple[StepReports, list[PhaseReport]]:
    """A disaggregated rank's steps and phases labelled as its run is (verdict.with_round_trip_share):
    by the share of their own round trips' time under the other microbatch's compute, not by kernel
    overlap, which the sends and receives on the compute stream make 0% by construction."""
    rows = afd.rows
    rt = rows.round_trip_us
    table = steps.table
    n = int(table.index.max()) + 1 if len(table) else 0
    ok = (rows.step >= 0) & (rows.step < n)
    total = np.bincount(rows.step[ok], weights=rt[ok], minlength=n)
    hidden = np.bincount(rows.step[ok], weights=rows.hidden_us[ok], minlength=n)

    def share(ix: list[int]) -> float | None:
        t = float(total[ix].sum()) if ix else 0.0
        return float(hidden[ix].sum()) / t if t > 0 else None

    steps = steps.with_round_trip_share([share([i]) for i in table.index.tolist()], afd.microbatched)
    phases = [
        p if p.verdict is None else replace(
            p,
            verdict=with_round_trip_share(
                p.verdict, share(table.index[table.steady_or_all(table.of_phase(p.phase))].tolist()), afd.microbatched
            ),
        )
        for p in phases
    ]  # fmt: skip
    return steps, phases


def _round_trips(
    steps: StepTable, layers: int | None, microbatched: bool, afd: AfdRoundTrips | None = None
) -> RoundTrips | None:
    if not len(steps):
        return None
    comm_busy, compute_busy = steps.metrics["comm_busy_us"], steps.metrics["compute_busy_us"]
    if afd is not None:  # a send and its receive are one round trip: two comm operations
        counts = dict(zip(*np.unique(afd.rows.step, return_counts=True)))
        rt = round_trips(
            steps.period_us,
            np.array([2.0 * counts.get(i, 0) for i in steps.index.tolist()]),
            comm_busy,
            compute_busy,
            afd.layers,
            "disaggregated round trips (a data-plane send and its receive; comm per round trip: its exposed time)"
            + ("; layers: a microbatch's round trips per step" if afd.layers_inferred else ""),
            afd.microbatched,
        )
        # the SendRecv kernels' busy time is not what must hide: the round trip's exposed time is
        exposed = afd.median_exposed_us
        return None if rt is None else replace(
            rt, comm_per_round_trip_us=exposed, ratio=rt.compute_per_round_trip_us / exposed if exposed > 0 else None
        )
    from_log = steps.comm_ops_from_log
    if from_log.all():
        source = "comm phases in the event log"
    elif not from_log.any():
        source = "comm operations (runs of comm kernels launched back to back)"
    else:
        source = "comm phases in the event log, comm operations where a step had none (graph replay)"
    return round_trips(
        steps.period_us,
        steps.comm_ops.astype(float),
        comm_busy,
        compute_busy,
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


def _input_warnings(ranks: list[RankReport], parts: list[CrossPart] | None) -> list[str]:
    """What each trace's reader left out or could not use (events with a negative duration, a
    baseTimeNanoseconds out of range, ...): a rank's notes, and the report's warnings too, which
    the JSON lists and `report` prints on stderr, so nothing is dropped without a word."""
    if parts is not None:
        return list(dict.fromkeys(w for p in parts for w in p.warnings))
    return list(dict.fromkeys(w for r in ranks if r.detail is not None for w in r.detail.timeline.warnings))


@dataclass(frozen=True)
class CrossPart:
    """What the cross-rank step reads of a rank's detail: its comm kernels, its clock's clues, its
    layer count and its reader's warnings. Kilobytes where the detail is the whole timeline: ranks
    analysed on other machines send only this (dbo_trace/scale.py); combine makes it from the detail
    where none is given."""

    comm: RankComm
    clue: RankClue
    layers: int | None
    warnings: tuple[str, ...]

    def numbered(self, rank: int) -> CrossPart:
        return replace(self, comm=replace(self.comm, rank=rank), clue=replace(self.clue, rank=rank))


def cross_part(r: RankReport) -> CrossPart:
    d = r.detailed()
    return CrossPart(_rank_comm(r), _clue(r), d.attribution.layers, tuple(d.timeline.warnings))


def with_peer_waits(ranks: list[RankReport], waits: PeerWaits, alignment: Alignment) -> list[RankReport]:
    """Each rank with the exposed comm inside its kernels' waits for a peer so called (needs the detail)."""
    return [_with_peer_waits(r, waits, alignment) for r in ranks]


def combine(
    ranks: list[RankReport],
    options: Options,
    inputs: list[str],
    warnings: list[str],
    parts: list[CrossPart] | None = None,
    refine: Callable[[list[RankReport], PeerWaits, Alignment], list[RankReport]] = with_peer_waits,
    roles: RolesInfo | None = None,
) -> Report:
    """All ranks: times and counts add (each rank is its own GPU); the host test is the ranks' own,
    added the same way (in-step where every rank has marker steps). parts and refine: where the
    ranks' details are elsewhere, what the cross-rank step reads of each and how the peer waits
    are given back to them (dbo_trace/scale.py); by default both from the details. Roles (an AFD
    attention rank and its FFN rank) are not ranks of one collective: no cross-rank matching between
    them; the FFN's kernels give the attention's round trips their parts."""
    ranks = with_ffn_parts(ranks)
    roles = with_pair(roles, ranks)
    if roles is not None:
        warnings = warnings + roles.notes()
    total = sum_metrics([r.total for r in ranks])
    window = TimeBuckets(*(sum(getattr(r.window, f.name) for r in ranks) for f in fields(TimeBuckets)))
    in_steps = TimeBuckets(*(sum(getattr(r.in_steps, f.name) for r in ranks) for f in fields(TimeBuckets)))
    # one rank's own test, or the ranks' buckets added: in-step where every rank's steps are markers
    every_in_steps = all(r.host_test.basis == HOST_BASIS_IN_STEPS for r in ranks)
    steady = [r.steady or (r.in_steps if r.host_test.basis == HOST_BASIS_IN_STEPS else r.window) for r in ranks]
    if not every_in_steps:  # a rank's steady window where its test measured one, else its window
        steady = [s if r.host_test.basis == HOST_BASIS_WINDOW else r.window for s, r in zip(steady, ranks)]
    steady_sum = TimeBuckets(*(sum(getattr(s, f.name) for s in steady) for f in fields(TimeBuckets)))
    host = (
        ranks[0].host_test
        if len(ranks) == 1
        else host_test_of(not every_in_steps, steady_sum, steady_sum if every_in_steps else in_steps)
    )
    microbatched = any(r.attribution != SOURCE_NONE or (r.afd is not None and r.afd.microbatched) for r in ranks)
    if len({r.role for r in ranks}) > 1:  # roles of one run, not DP ranks: their collectives are not one
        view = None
    else:
        view, ranks = across_ranks(ranks, parts, refine)
    ranks = [_with_peer_headline(r, view) for r in ranks]
    afd_ranks = [r for r in ranks if r.afd is not None]  # a disaggregated run's round trips are the attention's
    rt = (
        ranks[0].round_trips
        if len(ranks) == 1
        else _median_round_trips([r.round_trips for r in (afd_ranks or ranks)])
    )
    splits = [r.wait_split for r in ranks if r.wait_split is not None]
    run_split = sum(splits[1:], splits[0]) if splits and len(splits) == len(ranks) else None
    causes = ranks[0].host_causes if len(ranks) == 1 else _combined_causes([r.host_causes for r in ranks])
    decided = decide(
        total,
        rt,
        any(r.profile_all_threads for r in ranks),
        host=host,
        microbatched=microbatched,
        findings=findings(
            window.window_us, [r.exposure for r in ranks], [r.contention for r in ranks], view, host_cause_text(causes)
        ),
        causes=causes,
        graph_api=_ranks_graph_api(ranks),
    )
    verdict = with_capture(
        with_expensive(_run_round_trips(with_wait_split(decided, run_split, rt), ranks), _run_expensive(ranks)),
        _summed_capture([r.capture for r in ranks]),
        window.host_idle_us,
    )
    for r in reversed(ranks):  # each rank whose GPU ran behind, in rank order, named
        verdict = with_running_behind(verdict, r.launch_delay, None if len(ranks) == 1 else r.rank)
    numbered = [(r.rank if len(ranks) > 1 else None, r.steps) for r in ranks]
    sliced = roles.time_slicing.text() if roles is not None and roles.time_slicing is not None else None
    if sliced:  # what dominates every other figure of the run: said first
        verdict = replace(verdict, reasons=[sliced] + list(verdict.reasons))
    return Report(
        what_if=_what_if(rt, ranks, options),
        phases=ranks[0].phases if len(ranks) == 1 else _combined_phases(ranks),
        inputs=inputs,
        ranks=ranks,
        total=total,
        round_trips=rt,
        # a trace that is mostly capture says so first: its "stalls" are the capture itself
        verdict=verdict if verdict.label == GRAPH_CAPTURE else with_stall_line(verdict, numbered),
        options=options,
        window=window,
        warnings=warnings + [w for w in _input_warnings(ranks, parts) if w not in warnings],
        cross_rank=view,
        host_causes=causes,
        host_test=host,
        roles=roles,
        unprofiled=run_unprofiled(ranks, options.repeats),
    )


def run_unprofiled(ranks: list[RankReport], repeats: tuple[Repeat, ...]) -> Unprofiled | None:
    """The recording's repeats against its profiled steps (analysis/unprofiled.py): the served
    side's ranks (an FFN server's steps are not the ones TPOT times)."""
    if not repeats:
        return None
    period, phase, n = profiled_period([r.steps for r in ranks if r.role != FFN])
    return unprofiled_of("", repeats, period, phase=phase, periods=n)


STALLS_NAMED = 3  # stalls named in the line; the rest counted


def stall_line(numbered: list[tuple[int | None, StepReports]]) -> str | None:
    """The stalls in one line (numbered: (rank or None, its steps) in row order): how many, what they
    cost beyond their phases' steady medians, and each of the largest with its cause."""
    stalled = [(r, k, steps) for r, steps in numbered for k in sorted(steps.table.stalls)]
    if not stalled:
        return None
    extra = sum(max(steps.table.stalls[k].extra_us or 0.0, 0.0) for _r, k, steps in stalled)
    stalled.sort(key=lambda x: -x[2].table.period_us[x[1]])
    parts = []
    for rank, k, steps in stalled[:STALLS_NAMED]:
        step, number = steps[k], k + 1
        st = step.stall
        assert st is not None
        where = f"rank {rank} step {number}" if rank is not None else f"step {number}"
        cost = f", +{st.extra_us / 1000:.2f} ms" if st.extra_us is not None and st.extra_us > 0 else ""
        host = host_cause_text(step.host_causes) if st.cause == OUTLIER else None
        frame = step.host_frame
        python = (
            f"; Python sampled there: {frame.us / frame.sampled_us:.0%} in {frame.project}"
            if frame is not None and frame.project and frame.sampled_us > 0
            else ""
        )
        parts.append(
            f"{where} ({step.phase or 'step'}, {step.period_us / 1000:.2f} ms{cost}): {st.text}"
            + (f", GPU idle for the host: {host}" if host else "")
            + python
        )
    more = f"; {len(stalled) - STALLS_NAMED} more" if len(stalled) > STALLS_NAMED else ""
    n_steps = sum(len(s) for _r, s in numbered)
    return (
        f"stalls, left out of the verdict: {len(stalled)} of {n_steps} {'step' if n_steps == 1 else 'steps'} "
        f"({extra / 1000:.2f} ms beyond their phases' steady medians): " + "; ".join(parts) + more
    )


def with_stall_line(verdict: Verdict, numbered: list[tuple[int | None, StepReports]]) -> Verdict:
    """The verdict with the stalls' line first among its reasons (its figures are the steady state's)."""
    line = stall_line(numbered)
    return verdict if line is None else replace(verdict, reasons=[line] + list(verdict.reasons))


def _run_expensive(ranks: list[RankReport]) -> list[ExpensiveCall]:
    """The run's expensive calls: one rank's, or each name once (its rank with the largest share)."""
    if len(ranks) == 1:
        return ranks[0].expensive_calls
    best: dict[str, ExpensiveCall] = {}
    for e in (e for r in ranks for e in r.expensive_calls):
        if e.name not in best or (e.step_share or 0.0) > (best[e.name].step_share or 0.0):
            best[e.name] = e
    return sorted(best.values(), key=lambda e: -(e.step_share or 0.0))[:MOST_EXPENSIVE]


def _run_round_trips(v: Verdict, ranks: list[RankReport]) -> Verdict:
    """The run's verdict speaks of the round trips where one attention rank measured them."""
    afd = [r.afd for r in ranks if r.afd is not None]
    return with_round_trips(v, afd[0]) if len(afd) == 1 else v


def with_ffn_parts(ranks: list[RankReport]) -> list[RankReport]:
    """The attention ranks' round trips with their parts from the FFN rank's data-plane kernels, put
    on the attention's clock (both traces' baseTimeNanoseconds: one host's time.time_ns)."""
    ffn = next((r for r in ranks if r.role == FFN and r.detail is not None), None)
    if ffn is None:
        return ranks
    fd = ffn.detailed()
    ftl = fd.timeline
    data = data_plane(
        is_p2p=sendrecv_kernels(ftl.names, ftl.gpu.name, fd.kernel_kind),
        kind=fd.kernel_kind,
        stream=ftl.gpu.lane,
        replayed=fd.launch_kind == c.CALL_GRAPH_LAUNCH,
    )
    out = []
    for r in ranks:
        offset = wall_offset_us(ftl, r.detail.timeline) if r.afd is not None and r.detail is not None else None
        if r.afd is None or offset is None:
            out.append(r)
            continue
        idx = np.flatnonzero(data)
        idx = idx[np.argsort(ftl.gpu.start[idx], kind="stable")]
        compute = fd.kernel_kind == c.COMPUTE
        parts = ffn_parts(
            r.afd.rows, ftl.gpu.start[idx] + offset, ftl.gpu.end[idx] + offset,
            (ftl.gpu.start[compute] + offset, ftl.gpu.end[compute] + offset),
        )  # fmt: skip
        out.append(replace(r, afd=replace(r.afd, parts=parts, ffn_matched=int(parts.matched.sum()))))
    return out


def with_pair(roles: RolesInfo | None, ranks: list[RankReport]) -> RolesInfo | None:
    """The roles with what the two sides tell together: whether they time-slice the GPU (the attention's
    round trips against their transfer, analysis/sharing.py) and, with the FFN's trace, its compute per
    step and per round trip and each side's GPU busy over the attention's steps (analysis/pair.py)."""
    att = next((r for r in ranks if r.afd is not None and r.detail is not None), None)
    if roles is None or att is None or att.afd is None or att.detail is None:
        return roles
    rows, parts, tl = att.afd.rows, att.afd.parts, att.detail.timeline
    sliced = time_slicing(
        send_us=rows.send_end - rows.send_start, receive_us=rows.recv_end - rows.recv_start,
        round_trip_us=rows.round_trip_us, ffn_compute_us=parts.compute_us if parts is not None else None,
        sharing=roles.sharing,
    )  # fmt: skip
    ffn = next((r for r in ranks if r.role == FFN and r.detail is not None), None)
    offset = wall_offset_us(ffn.detail.timeline, tl) if ffn is not None and ffn.detail is not None else None
    if ffn is None or ffn.detail is None or offset is None:
        return replace(roles, time_slicing=sliced)
    ftl, table = ffn.detail.timeline, att.steps.table
    compute = ffn.detail.kernel_kind == c.COMPUTE
    pair = pair_figures(
        step_start=table.start_us, step_end=table.start_us + table.period_us, attention=(tl.gpu.start, tl.gpu.end),
        ffn=(ftl.gpu.start + offset, ftl.gpu.end + offset),
        ffn_compute=(ftl.gpu.start[compute] + offset, ftl.gpu.end[compute] + offset),
        round_trip_compute_us=parts.compute_us if parts is not None else None,
        round_trip_queue_us=parts.queue_us if parts is not None else None, round_trips_per_step=att.afd.per_step,
    )  # fmt: skip
    return replace(roles, time_slicing=sliced, pair=pair)


def _what_if(rt: RoundTrips | None, ranks: list[RankReport], options: Options) -> list[WhatIf]:
    """The model's estimates over the run's DBO arithmetic (medians over ranks): each asked round
    trip, and the step without the hand-overs (the ranks' median per step) where they were measured."""
    if rt is None or not rt.microbatched:
        return []
    out = [
        what_if_round_trip(
            step_us=rt.step_us,
            round_trips=rt.per_step,
            compute_us=rt.compute_per_round_trip_us,
            comm_us=rt.comm_per_round_trip_us,
            round_trip_us=x,
        )  # fmt: skip
        for x in options.what_if_round_trip_us
    ]
    if options.what_if_comm_sms:
        steps = sum(len(r.steps) for r in ranks)
        crowded = sum(r.exposure.by_reason_us.get(CROWDED, 0.0) for r in ranks if r.exposure is not None)
        sms = _sm_count(ranks)
        for n in options.what_if_comm_sms:
            x = (
                what_if_comm_sms(
                    step_us=rt.step_us,
                    sms_reserved=n,
                    sms=sms,
                    crowded_us=crowded / steps,
                    compute_us=rt.compute_per_round_trip_us * rt.per_step,
                )  # fmt: skip
                if sms and steps
                else None
            )
            if x is not None:
                out.append(x)
    handovers = [h for r in ranks if r.ledger is not None and (h := r.ledger.handover_per_step_us) is not None]
    if handovers:
        out.append(what_if_no_handovers(step_us=rt.step_us, handover_us=float(np.median(handovers))))
    return out


def _sm_count(ranks: list[RankReport]) -> int | None:
    """The GPU's SM count, from the first rank's trace (Kineto's deviceProperties numSms)."""
    for r in ranks:
        devices = r.detail.timeline.metadata.get("deviceProperties") if r.detail is not None else None
        if isinstance(devices, list) and devices and isinstance(devices[0], dict):
            n = devices[0].get("numSms")
            if type(n) is int and 0 < n < 1 << 20:
                return n
    return None


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
    return "HIP" if any(map(str.startswith, tl.names, repeat("hipGraphLaunch"))) else "CUDA"  # in C: 100,000 step names


def _ranks_graph_api(ranks: list[RankReport]) -> str:
    apis = {r.graph_api for r in ranks}
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


def across_ranks(
    ranks: list[RankReport],
    parts: list[CrossPart] | None = None,
    refine: Callable[[list[RankReport], PeerWaits, Alignment], list[RankReport]] = with_peer_waits,
) -> tuple[CrossRank | None, list[RankReport]]:
    """The ranks on one clock, their collectives matched and each one's wait (analysis/clocks.py,
    analysis/peers.py); the ranks come back with the exposed comm that was waiting for a peer so called."""
    if len(ranks) < 2 or (parts is None and any(r.detail is None for r in ranks)):
        return None, ranks
    parts = parts if parts is not None else [cross_part(r) for r in ranks]
    comms = [p.comm for p in parts]
    alignment, missing = align_on_epoch([p.clue for p in parts])
    notes: list[str] = []
    if alignment is None:
        first, first_notes = match(comms, None)
        by_rank = {c.rank: c for c in comms}
        if first:  # the channel whose matched collectives begin earliest on the lowest rank
            ch, columns = min(first, key=lambda m: by_rank[min(m[1])].start[m[1][min(m[1])][0]])
            alignment = align_on_anchor({r: float(by_rank[r].end[ix[0]]) for r, ix in columns.items()}, missing)
        else:
            alignment = align_on_anchor({}, missing)
            notes += first_notes
    if alignment.note:
        notes.append(alignment.note)
    walls = np.concatenate([r.steps.table.wall_us for r in ranks])  # the threshold is a scale: the windows, as docs say
    median_step = float(np.median(walls)) if len(walls) else None
    threshold = straggler_threshold(median_step, alignment.accuracy_us)  # one for the waits and the view
    waits: PeerWaits | None = None
    if alignment.aligned:
        zero = min(alignment.offset_us.values())  # epoch microseconds lose the nanosecond in a float: relative
        relative = {r: off - zero for r, off in alignment.offset_us.items()}
        on_the_clock = [c for c in comms if c.rank in relative]  # an anchor may have placed only some ranks
        matched, match_notes = match(on_the_clock, relative)
        notes += match_notes
        if matched:
            waits = peer_waits(on_the_clock, relative, threshold, matched, zero)
            ranks = refine(ranks, waits, alignment)
        elif not match_notes and any(len(c.start) for c in comms):
            notes.append("no communication channel is shared by two ranks: no collective matched")
    on_clock = [_on_clock(r, alignment) for r in ranks]
    layers = next((p.layers for p in parts if p.layers), None)
    return cross_rank(on_clock, alignment, waits, notes, layers, median_step_us=median_step, threshold_us=threshold), ranks


def _clue(r: RankReport) -> RankClue:
    d = r.detailed()
    tl = d.timeline
    firsts = [float(a.start.min()) for a in (tl.gpu, tl.calls, tl.cpu) if len(a)]
    steps = d.attribution.steps
    marks = steps.start if steps.source != SOURCE_EVENT_LOG and not steps.inferred else None  # markers only
    return RankClue(r.rank, tl.base_time_ns, min(firsts) if firsts else None, d.log_step_begins_ns, marks)


def _rank_comm(r: RankReport) -> RankComm:
    """The rank's comm kernels in start order with what matching and the wait sums need."""
    d = r.detailed()
    tl, att, names = d.timeline, d.attribution, d.timeline.names
    args = tl.comm_args()
    comm = np.flatnonzero(d.kernel_kind == c.COMM)
    comm = comm[np.argsort(tl.gpu.start[comm], kind="stable")]
    lanes = tl.gpu.lane[comm]
    ordinal = {lane: n for n, lane in enumerate(dict.fromkeys(lanes.tolist()))}  # streams by first use
    channel = [
        f"group {_inert(names[g])}" if g >= 0 else f"stream #{ordinal[lane]}"
        for g, lane in zip(args.group[comm].tolist(), lanes.tolist())
    ]
    collective = [names[x] if x >= 0 else "" for x in args.collective[comm].tolist()]
    signature = [f"{names[n]}|{col}" for n, col in zip(tl.gpu.name[comm].tolist(), collective)]
    position = dict(zip(r.steps.table.index.tolist(), range(len(r.steps))))
    step = np.array([position.get(int(x), -1) for x in att.gpu_step[comm]], np.int64)
    return RankComm(
        rank=r.rank,
        gpu_index=comm,
        start=tl.gpu.start[comm],
        end=tl.gpu.end[comm],
        channel=channel,
        signature=signature,
        nelems=args.nelems[comm],
        same_size=np.array([col.lower() in SAME_SIZE for col in collective], bool),
        seq=args.seq[comm],
        ubatch=att.gpu_ubatch[comm].astype(np.int64),
        step=step,
        op_index=operation_index(op=d.operation, step=att.gpu_step, ubatch=att.gpu_ubatch, start=tl.gpu.start)[comm],
        comm_us=float((tl.gpu.end[comm] - tl.gpu.start[comm]).sum()),
    )


def _inert(name: str, most: int = 40) -> str:
    """A process group's name from the trace as it may appear in a note: printable, short."""
    shown = "".join(ch if ch.isprintable() else "?" for ch in name[:most])
    return shown + ("..." if len(name) > most else "")


def _with_peer_waits(r: RankReport, waits: PeerWaits, alignment: Alignment) -> RankReport:
    """The rank with the exposed comm inside its kernels' waits for a peer so called (reason PEER),
    its comm time and round trip apart into waiting and transfer, and its verdict's sentences saying
    so. Waits within the clocks' accuracy are not told apart from none for the reason PEER."""
    d = r.detailed()
    index, wait = waits.kernel_wait_us.get(r.rank, (np.empty(0, np.int64), np.empty(0)))
    if r.exposure is None or not len(index):
        return r
    tl = d.timeline
    until = np.full(len(tl.gpu), np.nan)
    real = wait > (alignment.accuracy_us or 0.0)
    until[index[real]] = tl.gpu.start[index[real]] + wait[real]
    exposed = rank_exposure(d, peer_until=until)
    operations = rank_operations(d, exposed, _layers(d, r.afd)) if r.operations else r.operations
    waited = np.zeros(len(tl.gpu))
    waited[index] = wait
    transfer_slowdown = None
    if r.contention is not None:
        # The same measure with each comm kernel's wait taken off its end: what slower transfers cost
        again = rank_contention(d, comm_wait_us=waited)
        transfer_slowdown = again.comm_slowdown if again is not None else None
    # The split over the matched collectives only: an unmatched kernel's wait is unknown, not zero.
    compute = d.kernel_kind == c.COMPUTE
    comm_all = d.kernel_kind == c.COMM
    split = wait_split(
        (tl.gpu.start[index], tl.gpu.end[index]), wait, (tl.gpu.start[compute], tl.gpu.end[compute]),
        partial=len(index) < int(comm_all.sum()),
    )  # fmt: skip
    rt = r.round_trips if r.afd is not None else _round_trip_waits(r.round_trips, r.steps.table, d, index, wait)
    return replace(
        r,
        exposure=exposed,
        operations=operations,
        comm_transfer_slowdown=transfer_slowdown,
        wait_split=split,
        round_trips=rt,
        verdict=with_wait_split(r.verdict, split, rt),
    )


def _round_trip_waits(
    rt: RoundTrips | None, steps: StepTable, d: RankDetail, index: np.ndarray, wait: np.ndarray
) -> RoundTrips | None:
    """The round trip's comm apart into waiting for peer ranks and transfer: per step the time its
    comm kernels' waits cover (once, where kernels overlap) and the rest of its comm busy time, each
    over its round trips; medians over the steps the arithmetic used. index, wait: the matched comm
    kernels and each one's wait."""
    if rt is None:
        return None
    ops = steps.comm_ops.astype(float)
    ok = ops > 0
    if not ok.any():
        return rt
    position = np.full(int(steps.index.max()) + 1, -1, np.int64)
    position[steps.index] = np.arange(len(steps))
    step = d.attribution.gpu_step[index]
    at = np.where((step >= 0) & (step < len(position)), position[np.clip(step, 0, max(len(position) - 1, 0))], -1)
    start = d.timeline.gpu.start[index]
    covered = grouped_length(np.where(wait > 0, at, -1), len(steps), start, start + wait)
    trips = ops[ok] / COMM_OPS_PER_ROUND_TRIP
    wait = covered[ok]
    busy = steps.metrics["comm_busy_us"][ok]
    return replace(
        rt,
        wait_per_round_trip_us=float(np.median(wait / trips)),
        transfer_per_round_trip_us=float(np.median((busy - wait) / trips)),
    )


def _on_clock(r: RankReport, alignment: Alignment) -> RankOnClock:
    offset = alignment.offset_us.get(r.rank)
    starts = (r.steps.table.start_us + offset).tolist() if len(r.steps) and offset is not None else None
    return RankOnClock(r.rank, starts, r.total.comm_exposed_us)


def _combined_phases(ranks: list[RankReport]) -> list[PhaseReport]:
    """Per phase, the ranks' steps together: figures add (one GPU each), the step time is the median
    over every rank's steps of that phase, and each rank keeps its own verdict."""
    out = []
    for name in dict.fromkeys(p.phase for r in ranks for p in r.phases):
        parts = [p for r in ranks for p in r.phases if p.phase == name]
        tables = [r.steps.table for r in ranks]
        walls = [x for t in tables for x in t.period_us[t.of_phase(name)].tolist()]
        steady = [x for t in tables for x in t.period_us[t.steady(t.of_phase(name))].tolist()] or walls
        out.append(
            PhaseReport(
                phase=name,
                steps=sum(p.steps for p in parts),
                stalls=sum(p.stalls for p in parts),
                median_step_us=float(np.median(steady)),
                metrics=sum_metrics([p.metrics for p in parts]),
                verdict=None,
                per_rank=[p.verdict.label for p in parts if p.verdict is not None],
                host_causes=_combined_causes([p.host_causes for p in parts]),
                step_spread=spread(walls),
            )
        )
    return out


_SPLIT = ("wait_per_round_trip_us", "transfer_per_round_trip_us")


def _median_round_trips(parts: list[RoundTrips | None]) -> RoundTrips | None:
    present = [p for p in parts if p is not None]
    if not present:
        return None
    med = {
        f.name: float(np.median([getattr(p, f.name) for p in present]))
        for f in fields(RoundTrips)
        if f.name not in ("source", "layers", "per_layer", "ratio", "microbatched", *_SPLIT)
    }
    split: dict[str, float | None] = {}
    for name in _SPLIT:  # where every rank has it
        values = [getattr(p, name) for p in present]
        split[name] = float(np.median(values)) if all(v is not None for v in values) else None
    comm, compute = med["comm_per_round_trip_us"], med["compute_per_round_trip_us"]
    layers = present[0].layers
    return RoundTrips(
        source=present[0].source,
        layers=layers,
        per_layer=med["per_step"] / layers if layers else None,
        ratio=compute / comm if comm > 0 else None,
        microbatched=any(p.microbatched for p in present),
        wait_per_round_trip_us=split["wait_per_round_trip_us"],
        transfer_per_round_trip_us=split["transfer_per_round_trip_us"],
        **med,
    )
