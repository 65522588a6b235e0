"""The report's types: per step, phase, rank and run, what every renderer reads."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable

import numpy as np

from dbo_trace.analysis import classify as c
from dbo_trace.analysis.accounting import Partition, TimeBuckets
from dbo_trace.analysis.steps.attribution import Attribution
from dbo_trace.analysis.steps.microbatched import kernels_microbatched, rank_microbatched
from dbo_trace.analysis.host.capture import Capture
from dbo_trace.analysis.cross_rank.clocks import RankClue
from dbo_trace.analysis.overlap.contention import Contention
from dbo_trace.analysis.afd.effect import SpanParts
from dbo_trace.analysis.host.expensive import ExpensiveCall
from dbo_trace.analysis.overlap.exposure import Exposure
from dbo_trace.analysis.host.gpu_clock import ClockBounds, Incomplete
from dbo_trace.analysis.overlap.held import HeldBack, HeldSummary
from dbo_trace.analysis.host.host_time import HostCauses, HostPieces
from dbo_trace.analysis.overlap.layer_operations import LayerOps, layer_operations
from dbo_trace.analysis.ledger import Ledger, YieldOps
from dbo_trace.analysis.overlap.held_sms import SmEvidence
from dbo_trace.analysis.what_if import NotEstimated, WhatIf
from dbo_trace.analysis.metrics import MetricColumns, RoundTrips, WindowMetrics
from dbo_trace.analysis.overlap.operations import OperationRow
from dbo_trace.analysis.cross_rank.collective_waits import RankComm, WaitSplit
from dbo_trace.analysis.host.python_frames import RankStacks, StepFrame
from dbo_trace.analysis.overlap.queueing import LaunchDelay
from dbo_trace.analysis.cross_rank.side_by_side import CrossRank
from dbo_trace.analysis.afd.role_evidence import RoleCall
from dbo_trace.analysis.afd.roles import RoleMissing, RolesInfo, SharedGpu
from dbo_trace.analysis.afd.round_trips import AfdRoundTrips
from dbo_trace.analysis.afd.dbo_model import Calibration, DboWhatIf, NotPredicted
from dbo_trace.analysis.afd.pipeline import Pipeline
from dbo_trace.analysis.steps.stalls import Behind, Stall
from dbo_trace.analysis.host.summaries import CpuRangeRow, KernelSummary, Spread
from dbo_trace.analysis.compare.unprofiled import Repeat, Unprofiled
from dbo_trace.analysis.afd.verdict_model import AfdShare, RoundTripShares
from dbo_trace.analysis.verdict.evidence_types import HostTest, RankContext
from dbo_trace.analysis.verdict.decision import Label, Verdict
from dbo_trace.lazy import LazyList
from dbo_trace.trace.timeline import Timeline

# A rank's note or a run's warning: typed where analysis states a figure (render/words/notes.py words it),
# a string where it passes on what a reader or a matcher said of its input.
Note = str | Behind | LaunchDelay | RoleMissing | SharedGpu | ClockBounds | Incomplete


@dataclass(frozen=True)
class MarkedPeriod:
    """One steady step by vLLM's annotation: its period (us, to the next annotation's start), phase, tokens."""

    period_us: float
    phase: str | None
    tokens: int | None  # prefill and decode tokens, where the annotation says


@dataclass(frozen=True)
class Options:
    """The user's flags, and nothing else (what the recordings say is the run's Recording)."""

    comm_patterns: tuple[str, ...] = ()
    comm_streams: tuple[int, ...] = ()
    ubatch_patterns: tuple[str, ...] = ()
    layers: int | None = None
    step_marker: str | None = None
    comm_only: bool = False  # comm_patterns replace the built-in communication families
    what_if_round_trip_us: tuple[float, ...] = ()  # --what-if round-trip=X: the model's step with X
    what_if_comm_sms: tuple[int, ...] = ()  # --what-if sms=N: the model's step with N SMs kept for comm
    what_if_dbo: str | None = None  # --what-if dbo=on|off (compare: "other"): DBO's effect from one arm
    calibration: Calibration | None = None  # what the prediction is calibrated on (--calibrate, or the shipped one)


@dataclass(frozen=True)
class Recording:
    """What the recordings' manifests say of the run, read once before any trace (app/pipeline.py
    recording_of): the communication kernels and layer count a bundle declares, its environment's
    facts, its timed repeats and its capture sizes. A trace given without a bundle has the default."""

    comm_kernels: tuple[str, ...] = ()  # regular expressions a manifest declares (emulated traffic)
    layers: int | None = None  # the layer count a manifest declares
    comm_sms: str | None = None  # VLLM_DBO_COMM_SMS in the recording's environment (its manifest's env)
    env_recorded: bool = False  # a manifest kept the recording's environment
    repeats: tuple[Repeat, ...] = ()  # the recording's timed repeats, the profiler off
    # their load's prompts outnumber its concurrency: prefills interleave with the decode steps as
    # requests arrive (TPOT holds them); None: the manifest does not say
    prefills_interleave: bool | None = None
    graph_sizes: tuple[int, ...] | None = None  # the recording's CUDA graph capture sizes (its manifest's command)
    gpu_name: str | None = None  # the recording's first GPU by name
    # A bundle declared an AFD attention server (its manifest or its recorded command line): the run is
    # disaggregated, and the round-trip model (analysis/afd/round_trips.py) applies to a trace of it that
    # no role reached too. An FFN server recorded alone has no round trips of its own, and a role told by
    # a trace's own evidence declares nothing of the other traces.
    disaggregated: bool = False


def comm_patterns_of(options: Options, recording: Recording) -> tuple[str, ...]:
    """The communication patterns in force: the user's, then the recording's (the user's set alone
    with --comm-only, which replaces everything)."""
    return options.comm_patterns if options.comm_only else tuple(dict.fromkeys(options.comm_patterns + recording.comm_kernels))


def layers_of(options: Options, recording: Recording) -> int | None:
    """The layer count in force: the user's, else the recording's."""
    return options.layers or recording.layers


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


# A step's verdict from its figures, host causes and round-trip share: the analysis's
# (analysis/verdict/evidence.py step_verdict, with the rank's context), handed to the steps.
StepJudge = Callable[[WindowMetrics, "HostCauses | None", "AfdShare | None"], Verdict]


class StepReports(LazyList[StepReport]):
    """A rank's steps: its StepTable, and each step's StepReport built when read (with its verdict,
    host causes and figures, tens of microseconds a step: a long run's terminal report reads 20 of
    100,000), STEPS_BUILT_AT_ONCE at a time. Reads as a list of StepReport does. The verdict is
    judge's (the analysis's, given with the rank's context): this type decides nothing."""

    def __init__(
        self,
        table: StepTable,
        pieces: HostPieces,
        judge: StepJudge,
        shares: RoundTripShares | None = None,
        host_frames: list[StepFrame | None] | None = None,
    ) -> None:
        super().__init__(len(table), self._step_alone)
        self.table = table
        self.pieces = pieces  # the host-idle pieces the steps' host causes are read from
        self.judge = judge
        self.shares = shares  # a disaggregated rank's round trips by step: its steps' and phases' shares
        self.host_frames = host_frames
        self._afd_shares: list[AfdShare] | None = None

    @property
    def afd_shares(self) -> list[AfdShare] | None:
        """Each step's round trips' overlapped share (a disaggregated rank's), made once when first read."""
        if self._afd_shares is None and self.shares is not None:
            self._afd_shares = self.shares.by_step()
        return self._afd_shares

    def with_host_frames(self, frames: list[StepFrame | None]) -> StepReports:
        return StepReports(self.table, self.pieces, self.judge, self.shares, frames)

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
        shares = self.afd_shares
        for i, cause in zip(range(a, b), causes):
            figures = m.row(i)
            verdict = self.judge(figures, cause, None if shares is None else shares[i])
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
                host_causes=cause,
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
    per_rank: list[Label] | None = None  # the ranks' verdict labels, where ranks were combined
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
    call_gpu_waited: np.ndarray  # (n_calls,) bool: the GPU waited on the call (metrics.gpu_waited_on_call)
    step_start_us: np.ndarray  # (n_steps,) float64: each step's window, from its CPU start
    step_end_us: np.ndarray  # (n_steps,) float64: to the end of the last GPU work it launched
    operation: np.ndarray  # (n_gpu,) int64: each comm kernel's communication operation (operation_ids), -1 else
    window_us: tuple[float, float]  # the profiled window: the first event's start, the last one's end

    @property
    def microbatched(self) -> bool:
        """The kernels carry microbatches (analysis/steps/microbatched.py)."""
        return kernels_microbatched(self.attribution.source)

    @property
    def has_comm(self) -> bool:
        return bool((self.kernel_kind == c.COMM).any())


@dataclass(frozen=True, kw_only=True)
class RankAnalysis:
    """What a rank's analysis measured (analysis/rank_analysis.py analyze_rank): everything of its report
    but the verdict, which is decided once every rank is in (analysis/report.py combine)."""

    rank: int
    source: str
    attribution: str  # where the microbatches came from
    step_source: str
    profile_all_threads: bool
    steps: StepReports
    total: WindowMetrics  # over the profiled window
    round_trips: RoundTrips | None
    window: TimeBuckets  # the profiled window by bucket
    in_steps: TimeBuckets  # the union of the step windows by bucket
    host_test: HostTest
    steady: TimeBuckets | None = None  # what the host test measured: the steady steps' windows (or the window less the stalls')
    behind: Behind | None = None  # the step windows overlap: the GPU runs behind the CPU
    launch_delay: LaunchDelay | None = None  # launch call end to start; host idle after the launch (analysis/overlap/queueing.py)
    clocks: ClockBounds | None = None  # the GPU clock's offsets the events allow, the shift applied (analysis/host/gpu_clock.py)
    incomplete: Incomplete | None = None  # the trace lacks GPU work or its launches: host idle is an upper bound
    phases: list[PhaseReport] = field(default_factory=list)
    steps_inferred: bool = False
    contention: Contention | None = None  # what overlap cost; None without two microbatches
    exposure: Exposure | None = None  # why comm was exposed; None without comm
    held_back: HeldSummary | None = None  # comm kernels held past the other microbatch's compute; None without microbatches
    operations: list[OperationRow] = field(default_factory=list)  # per (microbatch, k-th op of a step), with microbatches
    capture: Capture | None = None  # graph captures in the trace (analysis/host/capture.py); None without any
    comm_kernels: list[tuple[str, int]] = field(default_factory=list)  # what counted as communication
    host_causes: HostCauses | None = None  # over what the host test measured (in-step time or the window)
    host_causes_window: HostCauses | None = None  # over the whole window
    kernel_summary: KernelSummary | None = None  # per kernel name: count, total, mean, median, min, max, share
    cpu_ranges: tuple[CpuRangeRow, ...] = ()  # the CPU ranges that explain the most host idle
    top_compute_kernels: list[tuple[str, int, float]] = field(default_factory=list)  # (name, count, total us)
    notes: list[Note] = field(default_factory=list)
    # The comm slowdown over transfer time alone (kernel time less its wait for peer ranks); None: one rank
    comm_transfer_slowdown: float | None = None
    # its comm time apart into waiting for peer ranks and transfer, hidden and exposed; None: one rank
    wait_split: WaitSplit | None = None
    graph_api: str = "CUDA"  # what its graph lines call the graphs: HIP on ROCm traces
    role: str | None = None  # attention / ffn in a disaggregated run (analysis/afd/role_evidence.py)
    role_source: RoleCall | None = None  # where the role came from (the manifest, the command line, the trace)
    expensive_calls: list[ExpensiveCall] = field(default_factory=list)  # analysis/host/expensive.py
    afd: AfdRoundTrips | None = None  # the attention side's round trips (analysis/afd/round_trips.py)
    host_stacks: RankStacks | None = None  # host idle by sampled Python frame (analysis/host/python_frames.py); None: no samples
    yield_ops: YieldOps | None = None  # the AFD yield op's calls, DBO on or off (analysis/ledger.py)
    ledger: Ledger | None = None  # DBO's own cost, the split and the hand-overs (analysis/ledger.py)
    sm_evidence: SmEvidence | None = None  # the launch shape of held-back comm's holder (overlap/held_sms.py)
    span_parts: SpanParts | None = None  # its steady steps' mean period in parts (analysis/afd/effect.py), for compare
    decode_requests: float | None = None  # its steady decode steps' median decode requests (vLLM's annotations)
    # its steady steps' periods by vLLM's execute_* annotations, start to start, each with its phase and
    # tokens: compare times every arm on this one basis where all have it (an event log's steps start at
    # a point of the step that moves with DBO on and off); empty without the annotations
    marked_periods: tuple[MarkedPeriod, ...] = ()
    # what each of its windows (a step, a phase) brings to its evidence besides its figures: its steps
    # and phases are judged with the run's (analysis/report.py)
    window_context: RankContext = field(default=RankContext(False), repr=False, compare=False)
    detail: RankDetail | None = field(default=None, repr=False, compare=False)

    @property
    def dbo_ran(self) -> bool:
        """Two microbatches ran: its source, a step's path (the column: no step's report built) or its
        round trips say so (analysis/steps/microbatched.py)."""
        return rank_microbatched(self.attribution, self.steps.table.path, self.afd is not None and self.afd.microbatched)

    @property
    def operations_by_layer(self) -> list[LayerOps]:
        """Its comm operations per layer, layers alike grouped (analysis/ledger.py)."""
        ops = self.operations
        return layer_operations(
            [o.layer for o in ops], [o.median_us for o in ops], [o.hidden_fraction for o in ops],
            [o.median_exposed_us for o in ops], [o.reason for o in ops], [o.exposed_fraction for o in ops],
        )  # fmt: skip

    def detailed(self) -> RankDetail:
        """The timeline and attribution behind the figures, which pictures need (analyze_rank keeps them)."""
        if self.detail is None:
            raise ValueError(f"rank {self.rank}'s report carries no detail")
        return self.detail


@dataclass(frozen=True)
class RunFigures:
    """What a rank's run makes of it (analysis/context.py, analysis/report.py): its settled number, its
    microbatch source as the run sees it, its comm as its peers' waits tell it, its round trips and span
    with the FFN's side, its steps and phases judged in the run's context."""

    rank: int
    attribution: str
    exposure: Exposure | None
    operations: list[OperationRow]
    comm_transfer_slowdown: float | None
    wait_split: WaitSplit | None
    round_trips: RoundTrips | None
    afd: AfdRoundTrips | None
    span_parts: SpanParts | None
    steps: StepReports
    phases: list[PhaseReport]


@dataclass(frozen=True, kw_only=True)
class RankReport(RankAnalysis):
    """A rank as its run sees it, with its verdict: built once (in_run) from its measurement, which
    stays as measured, and what its run makes of it."""

    verdict: Verdict

    @classmethod
    def in_run(cls, measured: RankAnalysis, run: RunFigures, judge: Callable[[RankAnalysis], Verdict]) -> RankReport:
        """The measurement's figures with the run's in their place, and its verdict judged over them."""
        values = {f.name: getattr(measured, f.name) for f in fields(RankAnalysis)}
        values.update((f.name, getattr(run, f.name)) for f in fields(RunFigures))
        return cls(**values, verdict=judge(RankAnalysis(**values)))


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
    warnings: list[Note] = field(default_factory=list)
    cross_rank: CrossRank | None = None  # two or more ranks on one clock (analysis/cross_rank/side_by_side.py)
    host_causes: HostCauses | None = None  # the ranks' host-test causes added
    host_test: HostTest | None = None  # what the run's host-bound test measured
    roles: RolesInfo | None = None  # a disaggregated run's roles and whether they shared a GPU
    recording: Recording = Recording()  # what the recordings' manifests said
    # model estimates (analysis/what_if.py), and each asked one the model makes none for, with why
    what_if: list[WhatIf | NotEstimated] = field(default_factory=list)
    unprofiled: Unprofiled | None = None  # the timed repeats against the profiled steps: the profiler's overhead
    pipeline: Pipeline | None = None  # the served attention rank's steps as a pipeline (analysis/afd/pipeline.py)
    # DBO's effect predicted from this arm (analysis/afd/dbo_model.py), or why it is not; None: not asked
    dbo_what_if: DboWhatIf | NotPredicted | None = None

    @property
    def dbo_ran(self) -> bool:
        """DBO ran on some rank (analysis/steps/microbatched.py)."""
        return any(r.dbo_ran for r in self.ranks)


@dataclass(frozen=True)
class PairPart:
    """What reading an AFD pair together takes of a rank's detail (analysis/afd/attention_side.py): its
    clock's base and its GPU work as intervals, each (start, end) in start order on its own clock."""

    base_time_ns: int | None
    gpu: tuple[np.ndarray, np.ndarray]  # every GPU activity
    data: tuple[np.ndarray, np.ndarray]  # its data-plane SendRecv kernels
    compute: tuple[np.ndarray, np.ndarray]  # its compute kernels


@dataclass(frozen=True)
class CrossPart:
    """What the cross-rank step reads of a rank's detail: its comm kernels, its clock's clues, its
    layer count and its reader's warnings. Kilobytes where the detail is the whole timeline: ranks
    analysed on other machines send only this (dbo_trace/app/ray_executor.py); combine makes it from the detail
    where none is given."""

    comm: RankComm
    clue: RankClue
    layers: int | None
    warnings: tuple[str, ...]
    pair: PairPart | None = None  # an AFD role's (attention or FFN)

    def numbered(self, rank: int) -> CrossPart:
        """The part under its rank's settled number (a trace analysed on another machine claims one
        before the run settles them: app/pipeline.py finish)."""
        if self.comm.rank == rank and self.clue.rank == rank:
            return self
        return replace(self, comm=replace(self.comm, rank=rank), clue=replace(self.clue, rank=rank))
