"""The run's Report from its measured ranks: their context built once (analysis/context.py), then every
window judged over it (a step, a phase, a rank, the run) and the ranks' figures taken together."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, replace
from functools import partial

import numpy as np

from dbo_trace.analysis.accounting import TimeBuckets
from dbo_trace.analysis.steps.microbatched import rank_microbatched
from dbo_trace.analysis.host.capture import Capture
from dbo_trace.analysis.afd.attention_side import run_what_if
from dbo_trace.analysis.afd.verdict_model import RoundTripShares
from dbo_trace.analysis.afd.roles import ATTENTION, FFN, RoleFacts, RolesInfo
from dbo_trace.analysis.context import PeerStep, RunContext, run_context
from dbo_trace.analysis.verdict.evidence import Together, evidence_of, step_verdict, waited_for_most
from dbo_trace.analysis.host.expensive import MOST as MOST_EXPENSIVE
from dbo_trace.analysis.host.expensive import ExpensiveCall
from dbo_trace.analysis.overlap.exposure import CROWDED
from dbo_trace.analysis.host.host_time import HostCauses, combine_causes
from dbo_trace.analysis.what_if import (
    NO_ROUND_TRIPS,
    NO_SM_COUNT,
    ONE_MICROBATCH,
    SMS_NOT_FEWER,
    NotEstimated,
    WhatIf,
    not_estimated,
    what_if_comm_sms,
    what_if_no_handovers,
    what_if_round_trip,
)
from dbo_trace.analysis.metrics import ACROSS, MAX, MEDIAN, SUM, SUM_IF_ALL, RoundTrips, WindowMetrics, criterion_met
from dbo_trace.analysis.model import (
    CrossPart,
    Note,
    Options,
    PhaseReport,
    RankAnalysis,
    RankReport,
    Recording,
    Report,
    RunFigures,
    StepReports,
    StepTable,
)
from dbo_trace.analysis.steps.periods import marked_periods_of
from dbo_trace.analysis.steps.sources import DECODE
from dbo_trace.analysis.host.summaries import spread
from dbo_trace.analysis.compare.unprofiled import Repeat, Unprofiled, profiled_period, unprofiled_of
from dbo_trace.analysis.verdict.evidence_types import HostBasis, HostTest, RankContext, RoleHost, gpu_work_of, host_test_of
from dbo_trace.analysis.verdict.decision import Verdict, decide


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


def _input_warnings(ranks: Sequence[RankAnalysis], parts: list[CrossPart] | None) -> list[str]:
    """What each trace's reader left out or could not use (events with a negative duration, a
    baseTimeNanoseconds out of range, ...): a rank's notes, and the report's warnings too, which
    the JSON lists and `report` prints on stderr, so nothing is dropped without a word."""
    if parts is not None:
        return list(dict.fromkeys(w for p in parts for w in p.warnings))
    return list(dict.fromkeys(w for r in ranks if r.detail is not None for w in r.detail.timeline.warnings))


def combine(
    ranks: list[RankAnalysis],
    options: Options,
    inputs: list[str],
    warnings: list[str],
    parts: list[CrossPart] | None = None,
    peer_step: PeerStep | None = None,
    roles: RoleFacts | None = None,
    recording: Recording = Recording(),
    numbers: Sequence[int] | None = None,
) -> Report:
    """All ranks (measured, in rank order): their run's context built once (analysis/context.py), then
    every window judged over it: each rank's steps and phases, each rank, the run. Times and counts
    add (each rank is its own GPU); the host test is the ranks' own, added the same way (in-step where
    every rank has marker steps). numbers: the ranks' settled numbers (default: their own); parts and
    peer_step: where the ranks' details are elsewhere (dbo_trace/app/ray_executor.py), what the
    cross-rank step reads of each and how the peer waits reach them; roles: what the manifests and
    traces say of the roles."""
    context = run_context(ranks, numbers, parts, peer_step, roles)
    view, overlap = context.view, context.pipeline.overlap if context.pipeline is not None else None

    def judge(seen: RankAnalysis) -> Verdict:
        return decide(
            evidence_of(
                [seen], together([seen]), view, waited_for=waited_for_most(seen.rank, view), time_slicing=context.time_slicing,
                overlap=overlap,
            )
        )  # fmt: skip

    reports = [RankReport.in_run(r, run_figures(r, k, context), judge) for k, r in enumerate(ranks)]
    notes: list[Note] = [*warnings, *(context.roles.notes() if context.roles is not None else [])]
    run = together(reports)
    unprofiled = run_unprofiled(reports, recording.repeats, recording.prefills_interleave)
    overhead = unprofiled.profiler_overhead if unprofiled is not None else None
    return Report(
        what_if=_what_if(run.round_trips, reports, options),
        phases=run.phases,
        inputs=inputs,
        ranks=reports,
        total=run.total,
        round_trips=run.round_trips,
        verdict=decide(
            evidence_of(
                reports, run, view, time_slicing=context.time_slicing, profiler_overhead=overhead, overlap=overlap,
                role_hosts=role_hosts(reports, context.roles),
            )  # fmt: skip
        ),
        options=options,
        window=run.window,
        warnings=[*notes, *(w for w in _input_warnings(ranks, parts) if w not in notes), *context.notes],
        cross_rank=view,
        host_causes=run.causes,
        host_test=run.host_test,
        roles=context.roles,
        recording=recording,
        unprofiled=unprofiled,
        pipeline=context.pipeline,
        dbo_what_if=run_what_if(context.pipeline, options, recording),
    )


def run_figures(r: RankAnalysis, k: int, context: RunContext) -> RunFigures:
    """What the run makes of the k-th rank: its number, microbatch source, comm as its peers' waits
    tell it and AFD side from the context; its steps and phases judged with the run's time-slicing."""
    peer, side = context.peers[k], context.afd[k]
    table = r.steps.table
    windows = r.window_context.in_run(context.time_slicing)
    shares = r.steps.shares  # its own round trips (the measurement's): the FFN's parts do not move them
    return RunFigures(
        rank=context.numbers[k],
        attribution=context.attribution[k],
        exposure=peer.exposure if peer is not None else r.exposure,
        operations=peer.operations if peer is not None else r.operations,
        comm_transfer_slowdown=peer.comm_transfer_slowdown if peer is not None else r.comm_transfer_slowdown,
        wait_split=peer.wait_split if peer is not None else r.wait_split,
        round_trips=peer.round_trips if peer is not None else r.round_trips,
        afd=side.round_trips if side is not None else r.afd,
        span_parts=side.span_parts if side is not None else r.span_parts,
        steps=StepReports(table, r.steps.pieces, partial(step_verdict, windows), shares, r.steps.host_frames),
        phases=[judged_phase(p, table, windows, shares) for p in r.phases],
    )


def judged_phase(p: PhaseReport, table: StepTable, windows: RankContext, shares: RoundTripShares | None) -> PhaseReport:
    """The phase's report with its verdict over its steady steps (all of them where every one stalled),
    in its rank's context and its run's (a new value: the measured phase, judged)."""
    steady = table.steady_or_all(table.of_phase(p.phase))
    evidence = windows.evidence(
        p.metrics, causes=p.host_causes, gpu=gpu_work_of(p.metrics, p.phase, len(steady)),
        afd_share=shares.of(steady) if shares is not None else None,
    )  # fmt: skip
    return replace(p, verdict=decide(evidence))


def run_unprofiled(
    ranks: Sequence[RankAnalysis], repeats: tuple[Repeat, ...], prefills_interleave: bool | None = None
) -> Unprofiled | None:
    """The recording's repeats against its profiled steps (analysis/compare/unprofiled.py): the served
    side's ranks (an FFN server's steps are not the ones TPOT times)."""
    if not repeats:
        return None
    served = [r for r in ranks if r.role != FFN]
    period, phase, n = profiled_period([r.steps for r in served])
    if served and all(r.marked_periods for r in served):  # vLLM's annotations: compare's basis, one step median
        by_marks = marked_periods_of([r.marked_periods for r in served], DECODE if phase == DECODE else None)
        period, n = (float(np.median(by_marks)), len(by_marks)) if by_marks else (period, n)
    return unprofiled_of("", repeats, period, phase=phase, periods=n, prefills_interleave=prefills_interleave)


def role_hosts(ranks: Sequence[RankAnalysis], roles: RolesInfo | None) -> tuple[RoleHost, ...]:
    """Each AFD role's own host idle where the roles share one GPU, the served (attention) role
    first: added over the ranks they would be one GPU's time counted twice. Empty otherwise."""
    sharing = roles.sharing if roles is not None else None
    present = [role for role in (ATTENTION, FFN) if any(r.role == role for r in ranks)]
    if sharing is None or not sharing.shared_gpu or len(present) < 2:
        return ()
    out = []
    for role in present:
        t = together([r for r in ranks if r.role == role])
        m = t.total
        out.append(
            RoleHost(
                role=role, fraction=t.host_test.fraction, test=t.host_test, window_idle_us=m.host_idle_us,
                gaps=m.host_idle_gaps, utilization=m.utilization,
            )
        )  # fmt: skip
    return tuple(out)


def together(ranks: Sequence[RankAnalysis]) -> Together:
    """One rank's figures as they are, or several ranks' combined (each rank is its own GPU)."""
    afd = [r.afd for r in ranks if r.afd is not None]  # a disaggregated run's round trips are the attention's
    # the DBO lines apply: the ranks' sources or round trips (a step's path alone leaves the kernels' figures unknown)
    microbatched = any(rank_microbatched(r.attribution, afd_microbatched=r.afd is not None and r.afd.microbatched) for r in ranks)
    if len(ranks) == 1:
        r = ranks[0]
        return Together(
            r.total, r.window, r.host_test, r.round_trips, r.host_causes, r.phases, microbatched, r.wait_split,
            r.expensive_calls, r.capture, r.afd, r.graph_api, r.profile_all_threads,
        )  # fmt: skip
    window = TimeBuckets(*(sum(getattr(r.window, f.name) for r in ranks) for f in fields(TimeBuckets)))
    splits = [r.wait_split for r in ranks if r.wait_split is not None]
    apis = {r.graph_api for r in ranks}
    return Together(
        total=sum_metrics([r.total for r in ranks]),
        window=window,
        host_test=_host_test(ranks),
        round_trips=_median_round_trips([r.round_trips for r in ([r for r in ranks if r.afd is not None] or ranks)]),
        causes=_combined_causes([r.host_causes for r in ranks]),
        phases=_combined_phases(ranks),
        microbatched=microbatched,
        wait_split=sum(splits[1:], splits[0]) if splits and len(splits) == len(ranks) else None,
        expensive=_run_expensive(ranks),
        capture=_summed_capture([r.capture for r in ranks]),
        afd=afd[0] if len(afd) == 1 else None,
        graph_api=apis.pop() if len(apis) == 1 else "CUDA",
        profile_all_threads=any(r.profile_all_threads for r in ranks),
    )


def _host_test(ranks: Sequence[RankAnalysis]) -> HostTest:
    """The ranks' host test over their buckets added: in-step where every rank's steps are markers,
    each rank's steady window where its test measured one, else its window."""
    in_steps = TimeBuckets(*(sum(getattr(r.in_steps, f.name) for r in ranks) for f in fields(TimeBuckets)))
    every_in_steps = all(r.host_test.basis == HostBasis.IN_STEPS for r in ranks)
    steady = [r.steady or (r.in_steps if r.host_test.basis == HostBasis.IN_STEPS else r.window) for r in ranks]
    if not every_in_steps:
        steady = [s if r.host_test.basis == HostBasis.WINDOW else r.window for s, r in zip(steady, ranks)]
    steady_sum = TimeBuckets(*(sum(getattr(s, f.name) for s in steady) for f in fields(TimeBuckets)))
    return host_test_of(not every_in_steps, steady_sum, steady_sum if every_in_steps else in_steps)


def _run_expensive(ranks: Sequence[RankAnalysis]) -> list[ExpensiveCall]:
    """The run's expensive calls: one rank's, or each name once (its rank with the largest share)."""
    if len(ranks) == 1:
        return ranks[0].expensive_calls
    best: dict[str, ExpensiveCall] = {}
    for e in (e for r in ranks for e in r.expensive_calls):
        if e.name not in best or (e.step_share or 0.0) > (best[e.name].step_share or 0.0):
            best[e.name] = e
    return sorted(best.values(), key=lambda e: -(e.step_share or 0.0))[:MOST_EXPENSIVE]


def _what_if(rt: RoundTrips | None, ranks: Sequence[RankAnalysis], options: Options) -> list[WhatIf | NotEstimated]:
    """The model's estimates over the run's DBO arithmetic (medians over ranks): each asked round
    trip, and the step without the hand-overs (the ranks' median per step) where they were measured;
    an asked one the model cannot make, with why."""
    if rt is None or not rt.microbatched:
        return not_estimated(
            NO_ROUND_TRIPS if rt is None else ONE_MICROBATCH,
            round_trips_us=options.what_if_round_trip_us,
            sms=options.what_if_comm_sms,
            step_us=rt.step_us if rt is not None else None,
            afd=any(r.afd is not None for r in ranks),
            dbo_given=options.what_if_dbo is not None,
        )  # fmt: skip
    out: list[WhatIf | NotEstimated] = [
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
            out.append(
                x if x is not None
                else NotEstimated(why=_sms_why(n, sms), sms_reserved=n, sms=sms, step_us=rt.step_us)
            )  # fmt: skip
    handovers = [h for r in ranks if r.ledger is not None and (h := r.ledger.handover_per_step_us) is not None]
    if handovers:
        out.append(what_if_no_handovers(step_us=rt.step_us, handover_us=float(np.median(handovers))))
    return out


def _sms_why(n: int, sms: int | None) -> str:
    """Why sms=N has no estimate: the SM count unknown, N not fewer than it, or no steps to share over."""
    return NO_SM_COUNT if not sms else SMS_NOT_FEWER if n >= sms else NO_ROUND_TRIPS


def _sm_count(ranks: Sequence[RankAnalysis]) -> int | None:
    """The GPU's SM count, from the first rank's trace (Kineto's deviceProperties numSms)."""
    for r in ranks:
        devices = r.detail.timeline.metadata.get("deviceProperties") if r.detail is not None else None
        if isinstance(devices, list) and devices and isinstance(devices[0], dict):
            n = devices[0].get("numSms")
            if type(n) is int and 0 < n < 1 << 20:
                return n
    return None


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


def _combined_phases(ranks: Sequence[RankAnalysis]) -> list[PhaseReport]:
    """Per phase, the ranks' steps together: figures add (one GPU each), the step time is the median
    over every rank's steps of that phase, and each rank keeps its own verdict."""
    out = []
    for name in dict.fromkeys(p.phase for r in ranks for p in r.phases):
        parts = [p for r in ranks for p in r.phases if p.phase == name]
        tables = [r.steps.table for r in ranks]
        walls = [x for t in tables for x in t.period_us[t.of_phase(name)].tolist()]
        steady = [x for t in tables for x in t.period_us[t.steady(t.of_phase(name))].tolist()] or walls
        marked = [r.marked_periods for r in ranks if r.steps.table.of_phase(name).size]
        if marked and all(marked):  # vLLM's annotations beside another step source: compare's basis
            steady = walls = marked_periods_of(marked, name) or steady
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
        if f.name not in ("source", "layers", "per_layer", "ratio", "criterion_met", "microbatched", *_SPLIT)
    }
    split: dict[str, float | None] = {}
    for name in _SPLIT:  # where every rank has it
        values = [getattr(p, name) for p in present]
        split[name] = float(np.median(values)) if all(v is not None for v in values) else None
    comm, compute = med["comm_per_round_trip_us"], med["compute_per_round_trip_us"]
    layers = present[0].layers
    ratio, microbatched = compute / comm if comm > 0 else None, any(p.microbatched for p in present)
    return RoundTrips(
        source=present[0].source,
        layers=layers,
        per_layer=med["per_step"] / layers if layers else None,
        ratio=ratio,
        criterion_met=criterion_met(ratio, microbatched),
        microbatched=microbatched,
        wait_per_round_trip_us=split["wait_per_round_trip_us"],
        transfer_per_round_trip_us=split["transfer_per_round_trip_us"],
        **med,
    )
