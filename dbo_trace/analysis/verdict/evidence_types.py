"""What a verdict reads, as types: the host test and its basis, the GPU's work, the findings, the
stalls, the overlap model the verdict asks, and the Evidence that holds them (verdict/evidence.py
builds it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import ClassVar, Literal, Protocol

from dbo_trace.analysis.accounting import TimeBuckets
from dbo_trace.analysis.afd.gpu_sharing import TimeSlicing
from dbo_trace.analysis.cross_rank.collective_waits import WaitSplit
from dbo_trace.analysis.host.capture import Capture
from dbo_trace.analysis.host.expensive import ExpensiveCall
from dbo_trace.analysis.host.host_time import HostCauses, TopItem
from dbo_trace.analysis.host.python_frames import StepFrame
from dbo_trace.analysis.ledger import Ledger, YieldOps
from dbo_trace.analysis.metrics import RoundTrips, WindowMetrics
from dbo_trace.analysis.overlap.queueing import LaunchDelay
from dbo_trace.analysis.steps.stalls import Stall
from dbo_trace.analysis.verdict.kinds import NextStep, Qualifier, Reason


class _Word(str, Enum):
    """A str-valued Enum that formats as its value on every Python the project supports (3.10 has no
    enum.StrEnum; from 3.11 a (str, Enum) mixin formats as its member's name without these)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class HostBasis(_Word):
    """What the host test divided by: in-step host idle over the time in steps (steps from
    markers), or host idle over the profiled window (steps inferred). Its words are render's."""

    IN_STEPS = "in_steps"
    WINDOW = "window"


# ---- evidence -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostTest:
    """What the host-bound verdict measured: in-step host idle where steps are real markers,
    the whole window where they were inferred."""

    fraction: float | None
    basis: HostBasis
    host_idle_us: float | None = None  # the fraction's numerator and denominator, which its reason quotes
    measured_us: float | None = None


def host_test_of(steps_inferred: bool, window: TimeBuckets, in_steps: TimeBuckets) -> HostTest:
    """The host test of a rank, or of ranks whose buckets are added: in-step host idle over time in
    steps, where steps are markers (for ranks: every rank's) and took time; else over the window."""
    if steps_inferred or in_steps.window_us <= 0:
        frac = window.host_idle_us / window.window_us if window.window_us > 0 else None
        return HostTest(frac, HostBasis.WINDOW, window.host_idle_us, window.window_us)
    return HostTest(in_steps.host_idle_us / in_steps.window_us, HostBasis.IN_STEPS, in_steps.host_idle_us, in_steps.window_us)


@dataclass(frozen=True)
class GpuWork:
    """How much of its time a stretch of steady steps kept the GPU working: busy, exposed comm left
    out (a GPU waiting on communication is not computing). A rank's or the run's is its main phase's
    (the phase whose steady steps took the most time), a phase's or a step's its own."""

    phase: str | None  # None: steps without vLLM's phase annotation, or a step or phase of its own
    steps: int  # the steady steps measured (a step: 1)
    working_us: float  # GPU busy less exposed comm
    span_us: float  # the union of their windows
    comm_exposed_us: float = 0.0  # the busy time left out

    @property
    def share(self) -> float | None:
        return self.working_us / self.span_us if self.span_us > 0 else None


def gpu_work_of(m: WindowMetrics, phase: str | None = None, steps: int = 1) -> GpuWork:
    return GpuWork(phase, steps, max(m.gpu_busy_us - m.comm_exposed_us, 0.0), m.span_us, m.comm_exposed_us)


@dataclass(frozen=True)
class Findings:
    """What the headline may name, from the same figures the report prints (a rank's, or the ranks'
    added: each rank is its own GPU). None: not measured here (no microbatches, one rank, ...)."""

    window_us: float = 0.0  # the profiled window (all ranks' windows added)
    late_record_us: float = 0.0  # exposed comm whose kernel waited on a late event record (exposure)
    crowded_us: float = 0.0  # exposed comm whose kernel found no free SMs (exposure)
    saved_us: float | None = None  # overlap's saving (contention; a rank where nothing ran together adds 0)
    serial_estimate_us: float | None = None
    peer_wait_us: float | None = None  # time this rank (or the run) waited for a peer rank
    peer_rank: int | None = None  # the rank waited for
    exposed_by_reason_us: tuple[tuple[str, float], ...] = ()  # exposed comm by reason (exposure), largest first
    crowding_kernel: str | None = None  # the compute kernel that held back most crowded comm (SM evidence)


@dataclass(frozen=True)
class StalledStep:
    """A step left out of the verdict, as the stalls reason names it."""

    rank: int | None  # None: the report has one rank
    number: int  # its row in the rank's per-step table, from 1
    phase: str | None
    period_us: float
    stall: Stall
    host_cause: tuple[TopItem, float] | None = None  # an outlier's: its top host cause, of its host idle (us)
    frame: StepFrame | None = None  # its host idle's most-sampled Python frame


@dataclass(frozen=True)
class Stalls:
    """The steps that are not steady state (analysis/steps/stalls.py), largest first."""

    stalled: int
    steps: int  # of all the steps reported
    extra_us: float  # their periods beyond their phases' steady medians
    named: tuple[StalledStep, ...]  # the largest STALLS_NAMED
    STALLS_NAMED: ClassVar[int] = 3


HiddenOf = Literal["round_trips", "comm"]  # what DBO's hidden time is of (the document writes it as it is)
HIDDEN_ROUND_TRIPS: HiddenOf = "round_trips"  # an AFD rank's round trips' time under the other microbatch's compute
HIDDEN_COMM: HiddenOf = "comm"  # comm kernel time under the other microbatch's compute (or any compute, not told apart)


@dataclass(frozen=True)
class HiddenPerStep:
    """What the other microbatch hid per step, by the overlap model (Pays' figures)."""

    hidden_us: float | None
    of: HiddenOf
    beside_us: float | None = None  # round trips: their time beside the other microbatch's round trips
    exposed_us: float | None = None  # round trips: the attention GPU's comm alone


class OverlapModel(Protocol):
    """How a window's communication could overlap, as the verdict asks it: the comm kernels' overlap
    with compute (analysis/overlap/kernel_model.py), or an AFD rank's round trips between the roles
    (analysis/afd/verdict_model.py). The evidence carries it (None: the kernels'); decide() asks it
    and never knows which it is."""

    @property
    def serves(self) -> bool:
        """The rank serves another rank's microbatches (an FFN server): whether DBO ran and paid is
        that rank's to say, so its verdict is never single-batch and answers no `pays`."""
        ...

    def label_share(self, e: Evidence) -> float | None:
        """The share that decides overlapped or not (>= the line: overlapped)."""
        ...

    def comm_reason(self, e: Evidence, near_line: Callable[[float | None], bool]) -> Reason:
        """The communication's reason (comm busy > 0); near_line: a share decided the label near its line."""
        ...

    def criterion(self, e: Evidence, host_bound: bool) -> Reason | None:
        """The round-trip criterion's reason, where it was measured."""
        ...

    def finding(self, e: Evidence) -> Qualifier | None:
        """The headline's finding of its own (after the peer wait), where it has one."""
        ...

    def exposed_finding(self, e: Evidence, gpu: GpuWork, per_step_us: float) -> Qualifier | None:
        """A single-batch verdict's finding: the exposed comm per steady step, where the model's is that."""
        ...

    def hidden(self, e: Evidence) -> HiddenPerStep:
        """What the other microbatch hid per step (a microbatched run's or rank's `pays`)."""
        ...

    def criterion_missed(self, e: Evidence) -> NextStep | None:
        """The next step where one microbatch's compute covers less than the other's round trip."""
        ...

    def own_step(self, e: Evidence) -> NextStep | None:
        """A next step of its own, before the findings' (a server's), where it has one."""
        ...

    def one_microbatch(self, e: Evidence, exposed_per_step_us: float | None) -> NextStep:
        """A single-batch verdict's next step."""
        ...


@dataclass(frozen=True)
class Evidence:
    """Everything a verdict reads: one window's figures and what was measured beside them. A step
    and a phase give their figures (and the overlap model that asks them); a rank and the run add
    the host test, the headline's findings and the next step's facts."""

    metrics: WindowMetrics
    host: HostTest | None = None  # without it, the window of metrics
    microbatched: bool = False  # the DBO lines (other microbatch, round-trip criterion) apply
    round_trips: RoundTrips | None = None
    profile_all_threads: bool = False
    graph_api: str = "CUDA"
    causes: HostCauses | None = None  # what the host did meanwhile (analysis/host/host_time.py)
    findings: Findings | None = None  # None: the label and reasons alone (a step's, a phase's)
    wait_split: WaitSplit | None = None  # comm apart into waiting for a peer and transfer
    # how its comm could overlap (OverlapModel): None, the kernels' (analysis/overlap/kernel_model.py);
    # an AFD rank's round trips, or a server's (analysis/afd/verdict_model.py)
    overlap_model: OverlapModel | None = None
    expensive: tuple[ExpensiveCall, ...] = ()
    capture: Capture | None = None
    capture_idle_us: float = 0.0  # the host-idle time the capture's share is of (the window's)
    stalls: Stalls | None = None
    gpu: GpuWork | None = None
    yield_op: YieldOps | None = None  # the AFD yield op's calls (analysis/ledger.py)
    ledger: Ledger | None = None  # DBO's own costs per step (analysis/ledger.py): a rank's, or the run's
    # two microbatches ran, by any evidence: the kernels', a step's path (a graph replay's kernels cannot
    # tell), the round trips' or the attention's served (analysis/steps/microbatched.py)
    dbo_ran: bool = False
    top_kernel: tuple[str, float] | None = None  # the kernel name with the most GPU time: its share of kernel time
    time_slicing: TimeSlicing | None = None  # the roles of an AFD pair time-slice their one GPU (analysis/afd/gpu_sharing.py)
    running_behind: tuple[tuple[int | None, LaunchDelay], ...] = ()  # (rank or None, its delays): the GPU ran behind
    profiler_overhead: float | None = None  # the profiled steps against the unprofiled repeats' TPOT, - 1 (the run's)
    # AFD roles on one GPU: each role's own host idle, the served one first (analysis/report.py
    # role_hosts); empty: the run's figures are one GPU's, or each rank's own GPU's added
    role_hosts: tuple[RoleHost, ...] = ()
    incomplete: bool = False  # a rank's trace lacks GPU work (analysis/host/gpu_clock.py): its host idle is an upper bound


@dataclass(frozen=True)
class RankContext:
    """What every window of one rank (a step, a phase) brings to its evidence besides its own figures:
    whether its steps ran two microbatches (the DBO lines apply: its kernels' or a step's path), whether
    DBO ran by any evidence, its yield op's calls and its windows' overlap model (a server's; None:
    the kernels'). verdict/evidence.py rank_context makes it; a step's and a phase's evidence are
    made here, one way, with the window's own model where it has one (its round trips' share)."""

    microbatched: bool
    yield_op: YieldOps | None = None
    dbo_ran: bool = False
    model: OverlapModel | None = None
    time_slicing: TimeSlicing | None = None  # the run's: the roles took turns on their one GPU (analysis/context.py)

    def in_run(self, time_slicing: TimeSlicing | None) -> RankContext:
        """The rank's windows' context with its run's time-slicing (analysis/report.py run_figures)."""
        return RankContext(self.microbatched, self.yield_op, self.dbo_ran, self.model, time_slicing)

    def evidence(
        self, figures: WindowMetrics, *, causes: HostCauses | None, afd_share: OverlapModel | None = None,
        gpu: GpuWork | None = None,
    ) -> Evidence:
        return Evidence(
            figures, microbatched=self.microbatched, causes=causes, gpu=gpu, yield_op=self.yield_op, dbo_ran=self.dbo_ran,
            overlap_model=afd_share if afd_share is not None else self.model, time_slicing=self.time_slicing,
        )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class RoleHost:
    """One AFD role's own host-idle figures, where the roles share one GPU (added, they would be one
    GPU's time counted twice)."""

    role: str
    fraction: float | None
    test: HostTest | None
    window_idle_us: float
    gaps: int
    utilization: float | None
