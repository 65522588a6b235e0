"""What a verdict reads, as types: the host test and its basis, the GPU's work, the findings, the
stalls, the AFD share, and the Evidence that holds them (verdict/evidence.py builds it)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import ClassVar

from dbo_trace.analysis.accounting import TimeBuckets
from dbo_trace.analysis.afd.gpu_sharing import TimeSlicing
from dbo_trace.analysis.afd.round_trips import AfdRoundTrips
from dbo_trace.analysis.afd.pipeline import StepOverlap
from dbo_trace.analysis.cross_rank.collective_waits import WaitSplit
from dbo_trace.analysis.host.capture import Capture
from dbo_trace.analysis.host.expensive import ExpensiveCall
from dbo_trace.analysis.host.host_time import HostCauses, TopItem
from dbo_trace.analysis.host.python_frames import StepFrame
from dbo_trace.analysis.ledger import Ledger, YieldOps
from dbo_trace.analysis.metrics import RoundTrips, WindowMetrics
from dbo_trace.analysis.overlap.queueing import LaunchDelay
from dbo_trace.analysis.steps.stalls import Stall


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


@dataclass(frozen=True)
class AfdShare:
    """A disaggregated rank's step or phase: its own round trips' overlapped share (under the other
    microbatch's compute or beside its round trip; None: no round trip)."""

    share: float | None
    microbatched: bool


@dataclass(frozen=True)
class Evidence:
    """Everything a verdict reads: one window's figures and what was measured beside them. A step
    and a phase give their figures (and, on a disaggregated rank, their round trips' share); a rank
    and the run add the host test, the headline's findings and the next step's facts."""

    metrics: WindowMetrics
    host: HostTest | None = None  # without it, the window of metrics
    microbatched: bool = False  # the DBO lines (other microbatch, round-trip criterion) apply
    round_trips: RoundTrips | None = None
    profile_all_threads: bool = False
    graph_api: str = "CUDA"
    causes: HostCauses | None = None  # what the host did meanwhile (analysis/host/host_time.py)
    findings: Findings | None = None  # None: the label and reasons alone (a step's, a phase's)
    wait_split: WaitSplit | None = None  # comm apart into waiting for a peer and transfer
    afd: AfdRoundTrips | None = None  # a disaggregated rank's (or the run's) round trips
    afd_share: AfdShare | None = None  # a disaggregated step's or phase's own round trips
    overlap: StepOverlap | None = None  # the pipeline's three figures per step (analysis/afd/pipeline.py)
    expensive: tuple[ExpensiveCall, ...] = ()
    capture: Capture | None = None
    capture_idle_us: float = 0.0  # the host-idle time the capture's share is of (the window's)
    stalls: Stalls | None = None
    gpu: GpuWork | None = None
    yield_op: YieldOps | None = None  # the AFD yield op's calls (analysis/ledger.py)
    ledger: Ledger | None = None  # DBO's own costs per step (analysis/ledger.py): a rank's, or the run's
    dbo_ran: bool = False  # the event log says a step took a microbatched path (a graph replay's kernels cannot tell)
    top_kernel: tuple[str, float] | None = None  # the kernel name with the most GPU time: its share of kernel time
    time_slicing: TimeSlicing | None = None  # the roles of an AFD pair time-slice their one GPU (analysis/afd/gpu_sharing.py)
    running_behind: tuple[tuple[int | None, LaunchDelay], ...] = ()  # (rank or None, its delays): the GPU ran behind
    role: str | None = None  # one rank's role in a disaggregated run (analysis/afd/role_evidence.py); None: the run's
    profiler_overhead: float | None = None  # the profiled steps against the unprofiled repeats' TPOT, - 1 (the run's)
    # AFD roles on one GPU: each role's own host idle, the served one first (analysis/report.py
    # role_hosts); empty: the run's figures are one GPU's, or each rank's own GPU's added
    role_hosts: tuple[RoleHost, ...] = ()
    incomplete: bool = False  # a rank's trace lacks GPU work (analysis/host/gpu_clock.py): its host idle is an upper bound


@dataclass(frozen=True)
class RankContext:
    """What every window of one rank (a step, a phase) brings to its evidence besides its own figures:
    whether its steps ran two microbatches, its role in a disaggregated run and its yield op's calls.
    A step's and a phase's evidence are made here, one way."""

    microbatched: bool
    role: str | None = None
    yield_op: YieldOps | None = None

    def evidence(
        self, figures: WindowMetrics, *, causes: HostCauses | None, afd_share: AfdShare | None = None, gpu: GpuWork | None = None
    ) -> Evidence:
        return Evidence(
            figures, microbatched=self.microbatched, causes=causes, gpu=gpu, afd_share=afd_share, role=self.role,
            yield_op=self.yield_op,
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
