"""What a verdict reads. A rank's and the run's: one path for both (analysis/report.py combine calls
it with one rank for a rank's verdict and with every rank for the run's). A step's and a phase's:
their figures with their rank's context (evidence_types.RankContext). Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dbo_trace.analysis.afd.pipeline import StepOverlap
from dbo_trace.analysis.accounting import TimeBuckets
from dbo_trace.analysis.host.capture import Capture
from dbo_trace.analysis.overlap.contention import Contention
from dbo_trace.analysis.host.expensive import ExpensiveCall
from dbo_trace.analysis.overlap.exposure import CROWDED, LATE_RECORD, PEER, Exposure
from dbo_trace.analysis.host.host_time import HostCauses
from dbo_trace.analysis.ledger import Ledger, YieldOps
from dbo_trace.analysis.metrics import RoundTrips, WindowMetrics
from dbo_trace.analysis.model import PhaseReport, RankAnalysis
from dbo_trace.analysis.cross_rank.collective_waits import WaitSplit
from dbo_trace.analysis.cross_rank.side_by_side import CrossRank
from dbo_trace.analysis.afd.round_trips import AfdRoundTrips
from dbo_trace.analysis.afd.verdict_model import AfdShare, overlap_model
from dbo_trace.analysis.steps.microbatched import rank_microbatched
from dbo_trace.analysis.steps.stalls import OUTLIER
from dbo_trace.analysis.afd.gpu_sharing import TimeSlicing
from dbo_trace.analysis.verdict.decision import Verdict, decide
from dbo_trace.analysis.verdict.evidence_types import (
    Evidence,
    Findings,
    GpuWork,
    HostTest,
    RankContext,
    RoleHost,
    StalledStep,
    Stalls,
    gpu_work_of,
)


@dataclass(frozen=True)
class Together:
    """One rank's figures, or several ranks' combined (each rank its own GPU: times add, the host test
    over the ranks' buckets added, round trips the median of the ranks'): what the report shows at
    its top and what its verdict reads (analysis/report.py together)."""

    total: WindowMetrics
    window: TimeBuckets
    host_test: HostTest
    round_trips: RoundTrips | None
    causes: HostCauses | None
    phases: list[PhaseReport]
    microbatched: bool
    wait_split: WaitSplit | None
    expensive: list[ExpensiveCall]
    capture: Capture | None
    afd: AfdRoundTrips | None  # a disaggregated run's: its one attention rank's
    graph_api: str
    profile_all_threads: bool


def findings(
    window_us: float,
    exposures: list[Exposure | None],
    costs: list[Contention | None],
    peers: CrossRank | None = None,
    waited_for: int | None = None,
    crowding_kernel: str | None = None,
) -> Findings:
    """What the headline may name (analysis/verdict/decision.py), from the figures the report prints: a rank's,
    or every rank's added (each rank is its own GPU). The peer wait is the exposed comm that was
    waiting for a peer rank (exposure's `peer` reason, set where the ranks' collectives were
    matched), and the rank waited for: a rank's own (waited_for), or for the run the rank that held
    the others back most (analysis/cross_rank/collective_waits.py)."""
    measured = [x for x in costs if x is not None]
    by_reason: dict[str, float] = {}
    for x in exposures:
        for reason, us in x.by_reason_us.items() if x is not None else ():
            by_reason[reason] = by_reason.get(reason, 0.0) + us
    held = peers.waits.held_back_most if peers is not None and peers.waits is not None else None
    peer_wait = by_reason.get(PEER, 0.0)
    return Findings(
        window_us=window_us,
        late_record_us=by_reason.get(LATE_RECORD, 0.0),
        crowded_us=by_reason.get(CROWDED, 0.0),
        saved_us=float(sum(x.saved_us or 0.0 for x in measured)) if measured else None,
        serial_estimate_us=float(sum(x.serial_estimate_us for x in measured)) if measured else None,
        peer_wait_us=peer_wait if peer_wait > 0 else None,
        peer_rank=waited_for if waited_for is not None else (held[0] if held else None),
        exposed_by_reason_us=tuple(sorted(((r, t) for r, t in by_reason.items() if t > 0), key=lambda x: -x[1])),
        crowding_kernel=crowding_kernel,
    )


def stalls_of(ranks: Sequence[RankAnalysis], numbered: bool) -> Stalls | None:
    """The steps left out of the verdict (analysis/steps/stalls.py), the largest first; numbered: each
    named with its rank (several ranks)."""
    stalled = [(r, k) for r in ranks for k in sorted(r.steps.table.stalls)]
    if not stalled:
        return None
    extra = sum(max(r.steps.table.stalls[k].extra_us or 0.0, 0.0) for r, k in stalled)
    stalled.sort(key=lambda x: -x[0].steps.table.period_us[x[1]])
    named = []
    for r, k in stalled[: Stalls.STALLS_NAMED]:
        step = r.steps[k]
        assert step.stall is not None
        top = step.host_causes.top if step.host_causes is not None and step.stall.cause == OUTLIER else None
        named.append(
            StalledStep(
                rank=r.rank if numbered else None, number=k + 1, phase=step.phase, period_us=step.period_us, stall=step.stall,
                host_cause=(top, step.host_causes.host_idle_us) if top and step.host_causes is not None else None,
                frame=step.host_frame,
            )
        )  # fmt: skip
    return Stalls(len(stalled), sum(len(r.steps) for r in ranks), extra, tuple(named))


def main_work(phases: list[PhaseReport], ranks: Sequence[RankAnalysis]) -> GpuWork:
    """How much the GPU worked in the main phase: the phase whose steady steps took the most time (a
    phase whose every step stalled only where no phase has a steady step); without phases, the
    steady steps (or the window less the stalls) of every rank."""
    if phases:
        steady = [p for p in phases if p.steps > p.stalls] or phases
        main = max(steady, key=lambda p: p.metrics.span_us)
        return gpu_work_of(main.metrics, main.phase, main.steps - main.stalls or main.steps)
    buckets = [r.steady or r.window for r in ranks]
    steps = sum(len(r.steps) - len(r.steps.table.stalls) for r in ranks)
    return GpuWork(
        None, steps, float(sum(b.compute_us + b.copy_us for b in buckets)), float(sum(b.window_us for b in buckets)),
        float(sum(b.comm_exposed_us for b in buckets)),
    )  # fmt: skip


def top_kernel(ranks: Sequence[RankAnalysis]) -> tuple[str, float] | None:
    """The kernel name with the most GPU time over the ranks, and its share of their summed kernel
    time (copies apart, as the kernel summary counts it)."""
    by_name: dict[str, float] = {}
    for r in ranks:
        for row in r.kernel_summary.rows if r.kernel_summary is not None else ():
            by_name[row.name] = by_name.get(row.name, 0.0) + row.total_us
    total = sum(r.kernel_summary.total_us for r in ranks if r.kernel_summary is not None)
    if not by_name or total <= 0:
        return None
    name, us = max(by_name.items(), key=lambda kv: kv[1])
    return name, us / total


def _ledger(ranks: Sequence[RankAnalysis]) -> Ledger | None:
    """DBO's own costs: the rank's ledger with the most hand-overs (one rank: its own)."""
    held = [r.ledger for r in ranks if r.ledger is not None]
    return max(held, key=lambda led: led.handovers) if held else None


def evidence_of(
    ranks: Sequence[RankAnalysis],
    t: Together,
    view: CrossRank | None,
    *,
    waited_for: int | None = None,
    time_slicing: TimeSlicing | None = None,
    profiler_overhead: float | None = None,
    overlap: StepOverlap | None = None,
    role_hosts: tuple[RoleHost, ...] = (),
) -> Evidence:
    """Everything decide() reads of one rank (a rank's verdict) or of every rank (the run's; with
    the timed repeats, the profiler's overhead; role_hosts: each AFD role's own host idle where the
    roles share one GPU)."""
    sm = next((r.sm_evidence for r in ranks if r.sm_evidence is not None), None)
    yield_ops = [r.yield_ops for r in ranks if r.yield_ops is not None]
    return Evidence(
        t.total,
        host=t.host_test,
        microbatched=t.microbatched,
        round_trips=t.round_trips,
        profile_all_threads=t.profile_all_threads,
        graph_api=t.graph_api,
        causes=t.causes,
        findings=findings(
            t.window.window_us, [r.exposure for r in ranks], [r.contention for r in ranks], view, waited_for,
            sm.holder.name if sm is not None else None,
        ),  # fmt: skip
        wait_split=t.wait_split,
        overlap_model=overlap_model(t.afd, ranks[0].role if len(ranks) == 1 else None, overlap),
        expensive=tuple(t.expensive),
        capture=t.capture,
        capture_idle_us=t.window.host_idle_us,
        stalls=stalls_of(ranks, numbered=len(ranks) > 1),
        gpu=main_work(t.phases, ranks),
        yield_op=max(yield_ops, key=lambda y: y.per_step_us) if yield_ops else None,
        ledger=_ledger(ranks),
        dbo_ran=any(r.dbo_ran for r in ranks),
        top_kernel=top_kernel(ranks),
        time_slicing=time_slicing,
        running_behind=tuple(
            (r.rank if len(ranks) > 1 else None, r.launch_delay)
            for r in ranks
            if r.launch_delay is not None and r.launch_delay.running_behind
        ),
        profiler_overhead=profiler_overhead,
        incomplete=any(r.incomplete is not None for r in ranks),
        role_hosts=role_hosts,
    )


def waited_for_most(rank: int, view: CrossRank | None) -> int | None:
    """The peer rank this rank waited for most (ties: the lower rank), where the waits were measured."""
    waits = view.waits.ranks.get(rank) if view is not None and view.waits is not None else None
    if waits is None:
        return None
    most = max(waits.waited_for_us.items(), key=lambda kv: (kv[1], -kv[0]), default=None)
    return most[0] if most else None


def rank_context(
    source: str, paths: Sequence[str | None], afd: AfdRoundTrips | None, role: str | None, yield_op: YieldOps | None,
    time_slicing: TimeSlicing | None = None,
) -> RankContext:
    """What a rank's steps and phases bring to their evidence: the DBO lines apply where its kernels or
    a step's path say two microbatches ran; DBO ran where those or its round trips say so
    (analysis/steps/microbatched.py); its windows' overlap model (an FFN server's, else the kernels',
    where a window's round trips do not give their own)."""
    return RankContext(
        rank_microbatched(source, paths), yield_op, rank_microbatched(source, paths, afd is not None and afd.microbatched),
        overlap_model(None, role), time_slicing,
    )


def step_verdict(context: RankContext, figures: WindowMetrics, causes: HostCauses | None, afd_share: AfdShare | None) -> Verdict:
    """A step's verdict (model.StepReports builds a step when read and asks this, the rank's context given)."""
    return decide(context.evidence(figures, causes=causes, afd_share=afd_share))

