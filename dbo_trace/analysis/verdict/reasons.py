"""What a verdict says besides its label, each a typed kind with its figures: the reasons, the
headline's findings (qualifiers) and the next step. Their words are render/words/verdict.py's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from dbo_trace.analysis.afd.pipeline import StepOverlap
from dbo_trace.analysis.afd.gpu_sharing import TimeSlicing
from dbo_trace.analysis.afd.round_trips import AfdRoundTrips
from dbo_trace.analysis.cross_rank.collective_waits import WaitSplit
from dbo_trace.analysis.host.expensive import ExpensiveCall
from dbo_trace.analysis.host.host_time import HostCauses, TopItem
from dbo_trace.analysis.ledger import YieldOps
from dbo_trace.analysis.metrics import RoundTrips
from dbo_trace.analysis.overlap.queueing import LaunchDelay
from dbo_trace.analysis.verdict.evidence_types import Evidence, GpuWork, HostTest, RoleHost, Stalls
from dbo_trace.analysis.verdict.kinds import NextStep as NextStep
from dbo_trace.analysis.verdict.kinds import Qualifier as Qualifier
from dbo_trace.analysis.verdict.kinds import Reason as Reason
from dbo_trace.analysis.verdict.kinds import NextStepKind as NextStepKind
from dbo_trace.analysis.verdict.kinds import QualifierKey as QualifierKey
from dbo_trace.analysis.verdict.kinds import ReasonKind as ReasonKind


# ---- reasons ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class TimeSliced(Reason):
    """The roles' CUDA contexts took turns on their one GPU: every other figure is the slices'."""

    kind: ClassVar[ReasonKind] = "time_slicing"
    slicing: TimeSlicing


@dataclass(frozen=True, kw_only=True)
class RunningBehind(Reason):
    """Launched work waited in GPU idle (the GPU ran behind the host): idle that is not the host's."""

    kind: ClassVar[ReasonKind] = "running_behind"
    rank: int | None  # None: the report has one rank
    delay: LaunchDelay


@dataclass(frozen=True, kw_only=True)
class CaptureReason(Reason):
    kind: ClassVar[ReasonKind] = "graph_capture"
    windows: int
    captured_launches: int
    capture_us: float
    share: float | None  # of the GPU's host-idle time
    dominant: bool  # the label is graph-capture


@dataclass(frozen=True, kw_only=True)
class StallsReason(Reason):
    kind: ClassVar[ReasonKind] = "stalls"
    stalls: Stalls


@dataclass(frozen=True, kw_only=True)
class HostIdle(Reason):
    kind: ClassVar[ReasonKind] = "host_idle"
    fraction: float
    test: HostTest | None
    window_idle_us: float
    gaps: int
    utilization: float | None
    upper_bound: bool = False  # the trace is incomplete: GPU work it lacks may fill the idle
    # AFD roles on one GPU: these figures are the served role's (role), the others' apart, never added
    role: str | None = None
    apart: tuple[RoleHost, ...] = ()


def host_idle_of(e: Evidence, fraction: float, near_line: Callable[[float], bool]) -> HostIdle:
    """The run's host idle; where AFD roles share one GPU, the served role's own, the others' apart
    (added, they would count one GPU's time twice). near_line: a fraction near the host-bound line."""
    m = e.metrics
    if not e.role_hosts:
        return HostIdle(
            fraction=fraction, test=e.host, window_idle_us=m.host_idle_us, gaps=m.host_idle_gaps,
            utilization=m.utilization, borderline=near_line(fraction), upper_bound=e.incomplete,
        )  # fmt: skip
    served, *rest = e.role_hosts
    frac = served.fraction or 0.0
    return HostIdle(
        fraction=frac, test=served.test, window_idle_us=served.window_idle_us, gaps=served.gaps,
        utilization=served.utilization, borderline=near_line(frac), upper_bound=e.incomplete,
        role=served.role, apart=tuple(rest),
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ExpensiveCalls(Reason):
    kind: ClassVar[ReasonKind] = "expensive_calls"
    calls: tuple[ExpensiveCall, ...]


@dataclass(frozen=True, kw_only=True)
class LaunchCost(Reason):
    kind: ClassVar[ReasonKind] = "launch"
    median_launch_us: float
    median_kernel_us: float
    launches: int
    launch_us: float
    causes: HostCauses | None  # the launch calls' share of the host-caused idle, where split


@dataclass(frozen=True, kw_only=True)
class ProfiledThreads(Reason):
    kind: ClassVar[ReasonKind] = "profiled_threads"


@dataclass(frozen=True, kw_only=True)
class ProfilerOverhead(Reason):
    """The profiler stretched each step by OVERHEAD_LARGE or more against the unprofiled repeats: the
    host time the verdict reads may be partly the profiler's own."""

    kind: ClassVar[ReasonKind] = "profiler_overhead"
    overhead: float  # profiled step period / unprofiled TPOT - 1
    host_bound: bool  # the verdict it qualifies is host-bound


@dataclass(frozen=True, kw_only=True)
class GpuBusy(Reason):
    kind: ClassVar[ReasonKind] = "gpu_busy"
    work: GpuWork


@dataclass(frozen=True, kw_only=True)
class NoComm(Reason):
    kind: ClassVar[ReasonKind] = "no_comm"


@dataclass(frozen=True, kw_only=True)
class CommOverlap(Reason):
    kind: ClassVar[ReasonKind] = "comm_overlap"
    hidden: float | None
    hidden_us: float
    busy_us: float
    exposed_us: float
    cross: float | None  # under the other microbatch's compute (microbatched)
    split: WaitSplit | None  # where peers were matched: the hidden time apart into waiting and transfer


@dataclass(frozen=True, kw_only=True)
class RoundTripsHidden(Reason):
    kind: ClassVar[ReasonKind] = "afd_round_trips"
    afd: AfdRoundTrips
    overlap: StepOverlap | None = None  # the pipeline's three figures per step, where measured


@dataclass(frozen=True, kw_only=True)
class StepRoundTrips(Reason):
    kind: ClassVar[ReasonKind] = "afd_step_round_trips"
    share: float


@dataclass(frozen=True, kw_only=True)
class LongGraphLaunches(Reason):
    kind: ClassVar[ReasonKind] = "long_graph_launches"
    api: str
    count: int
    longest_us: float


@dataclass(frozen=True, kw_only=True)
class GraphReplays(Reason):
    kind: ClassVar[ReasonKind] = "graph_replays"
    api: str
    launches: int
    replayed: float | None


@dataclass(frozen=True, kw_only=True)
class Criterion(Reason):
    """The DBO round-trip criterion: what the other microbatch's compute could hide, against what did."""

    kind: ClassVar[ReasonKind] = "criterion"
    round_trips: RoundTrips
    host_bound: bool  # moot while the step is host-bound
    hidden: float | None  # the comm share that was hidden
    peers_split: bool  # the round trip's comm apart into transfer and waiting for a peer (medians)


@dataclass(frozen=True, kw_only=True)
class AfdCriterion(Reason):
    kind: ClassVar[ReasonKind] = "afd_criterion"
    afd: AfdRoundTrips


# ---- the headline's findings ----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CaptureFinding(Qualifier):
    key: ClassVar[QualifierKey] = "graph_capture"
    share: float | None


@dataclass(frozen=True, kw_only=True)
class HostBoundFinding(Qualifier):
    key: ClassVar[QualifierKey] = "host_bound"
    fraction: float | None
    causes: HostCauses | None


@dataclass(frozen=True, kw_only=True)
class GpuBoundFinding(Qualifier):
    key: ClassVar[QualifierKey] = "gpu_bound"
    work: GpuWork


@dataclass(frozen=True, kw_only=True)
class LateRecordFinding(Qualifier):
    key: ClassVar[QualifierKey] = "late_record"
    exposed_us: float


@dataclass(frozen=True, kw_only=True)
class PeerWaitFinding(Qualifier):
    key: ClassVar[QualifierKey] = "peer_wait"
    wait_us: float
    rank: int | None


@dataclass(frozen=True, kw_only=True)
class RoundTripFinding(Qualifier):
    key: ClassVar[QualifierKey] = "round_trip"
    afd: AfdRoundTrips
    overlap: StepOverlap | None = None  # the pipeline's three figures per step, where measured


@dataclass(frozen=True, kw_only=True)
class DidNotPayFinding(Qualifier):
    key: ClassVar[QualifierKey] = "did_not_pay"
    saved_us: float
    serial_estimate_us: float


@dataclass(frozen=True, kw_only=True)
class CrowdedFinding(Qualifier):
    key: ClassVar[QualifierKey] = "crowded"
    exposed_us: float


@dataclass(frozen=True, kw_only=True)
class ExposedCommFinding(Qualifier):
    """A single-batch run's comm: exposed per steady step, and its share of the step."""

    key: ClassVar[QualifierKey] = "exposed_comm"
    per_step_us: float
    share: float | None  # of the steady steps' time


# The order the headline looks for findings in: the first that holds is named.
QUALIFIERS = tuple(
    q.key
    for q in (
        CaptureFinding,  # the trace is mostly the host capturing graphs: profile the run itself
        HostBoundFinding,  # the label is host-bound: how much, and why
        GpuBoundFinding,  # the GPU is the bottleneck: overlap or the host cannot shorten the step
        LateRecordFinding,  # a bug in the code under study: comm waited on an event recorded too late
        PeerWaitFinding,  # the time went waiting for another rank
        RoundTripFinding,  # a disaggregated (AFD) run: how much of the FFN round trip the other microbatch hid
        DidNotPayFinding,  # overlapped, yet overlap saved little against the serial estimate
        CrowdedFinding,  # comm ready beside the other microbatch's compute, with no free SMs
        ExposedCommFinding,  # single-batch: the comm nothing overlaps, per step
    )
)


# ---- the next step ------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ProfileAfterStartup(NextStep):
    kind: ClassVar[NextStepKind] = "profile_after_startup"
    finding: CaptureFinding  # its share: of the GPU's host-idle time, inside graph captures


@dataclass(frozen=True, kw_only=True)
class StartMps(NextStep):
    kind: ClassVar[NextStepKind] = "start_mps"
    slicing: TimeSlicing


@dataclass(frozen=True, kw_only=True)
class YieldOpCost(NextStep):
    kind: ClassVar[NextStepKind] = "yield_op_cost"
    ops: YieldOps
    share: float | None  # of the host-caused GPU idle
    microbatched: bool  # DBO on: a call also waits for the other microbatch's turn; off: its cost is all overhead


@dataclass(frozen=True, kw_only=True)
class EnableGraphs(NextStep):
    """Host-bound, no graph replayed, and most of the host's time is what a replay skips."""

    kind: ClassVar[NextStepKind] = "enable_graphs"
    host_fraction: float
    skipped: float  # the host-caused idle's share in launch calls, other CUDA calls, CPU operators, thread start-up
    graph_api: str


@dataclass(frozen=True, kw_only=True)
class HostCause(NextStep):
    kind: ClassVar[NextStepKind] = "host_cause"
    host_fraction: float
    host_idle_us: float  # the host-caused idle split
    largest: TopItem | None  # its largest item (HostCauses.top); None: not split
    replayed: float | None  # the share of kernels from graph replays (None: none ran)
    untraced_leads: bool  # the largest part is time the profiler recorded nothing for (Python it does not see)


@dataclass(frozen=True, kw_only=True)
class GpuBottleneck(NextStep):
    kind: ClassVar[NextStepKind] = "gpu_bottleneck"
    work: GpuWork
    top_kernel: tuple[str, float] | None


@dataclass(frozen=True, kw_only=True)
class NothingToOverlap(NextStep):
    kind: ClassVar[NextStepKind] = "nothing_to_overlap"
    work: GpuWork | None


@dataclass(frozen=True, kw_only=True)
class FixLateRecord(NextStep):
    kind: ClassVar[NextStepKind] = "late_record"
    finding: LateRecordFinding  # the finding it acts on, its figures with it


@dataclass(frozen=True, kw_only=True)
class Straggler(NextStep):
    kind: ClassVar[NextStepKind] = "straggler"
    finding: PeerWaitFinding


@dataclass(frozen=True, kw_only=True)
class MeasurePays(NextStep):
    """One microbatch's compute covers less than the other's round trip, and one arm cannot say
    whether what it hides outweighs what DBO costs: the same load with DBO off settles it. The ratio
    bounds what can hide; it never says DBO cannot pay (the round trip and the compute grow apart
    with the batch, docs/analysis.md "Does DBO pay")."""

    kind: ClassVar[NextStepKind] = "measure_pays"
    compute_us: float  # per microbatch, per round trip (an AFD rank's: per layer)
    round_trip_us: float  # what must hide: comm per round trip, or an AFD round trip's exposed time
    ratio: float  # compute / round trip: one microbatch's compute covers at most this share of it
    disaggregated: bool  # round_trip_us is an FFN round trip's exposed time (else comm busy per round trip)


@dataclass(frozen=True, kw_only=True)
class CommCrowded(NextStep):
    kind: ClassVar[NextStepKind] = "crowded"
    finding: CrowdedFinding
    holder: str | None  # the compute kernel that held most of it back


@dataclass(frozen=True, kw_only=True)
class DidNotPay(NextStep):
    kind: ClassVar[NextStepKind] = "did_not_pay"
    finding: DidNotPayFinding


@dataclass(frozen=True, kw_only=True)
class OverlapMissing(NextStep):
    kind: ClassVar[NextStepKind] = "overlap_missing"
    hidden: float | None
    exposed_us: float


@dataclass(frozen=True, kw_only=True)
class OneMicrobatch(NextStep):
    kind: ClassVar[NextStepKind] = "one_microbatch"
    exposed_us: float
    span_us: float
    exposed_per_step_us: float | None  # the exposed comm per step (median round trips per step x round trip)
    afd: AfdRoundTrips | None


@dataclass(frozen=True, kw_only=True)
class FfnServer(NextStep):
    """An FFN server's rank: its comm is the attention's requests and its answers, a receive running
    until the next request comes, not a microbatch's comm that overlap could hide."""

    kind: ClassVar[NextStepKind] = "ffn_server"
    exposed_us: float
    span_us: float


@dataclass(frozen=True, kw_only=True)
class OverlapWorks(NextStep):
    kind: ClassVar[NextStepKind] = "overlap_works"
    hidden: float | None
    largest_exposed: tuple[str, float] | None  # exposed comm's largest reason (exposure) and its time
