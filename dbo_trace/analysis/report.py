"""Assemble per-rank results into the run's Report: ranks on one clock, their waits, the run's verdict."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Callable

import numpy as np

from dbo_trace.analysis import classify as c
from dbo_trace.analysis.accounting import TimeBuckets
from dbo_trace.analysis.steps.microbatched import rank_microbatched, served_source, source_microbatched
from dbo_trace.analysis.host.capture import Capture
from dbo_trace.analysis.cross_rank.clocks import Alignment, RankClue, align_on_anchor, align_on_epoch
from dbo_trace.analysis.afd.attention_side import (
    pair_part,
    run_pipeline,
    run_what_if,
    time_slicing_of,
    with_ffn_parts,
    with_pair,
)
from dbo_trace.analysis.verdict.evidence import Together, evidence_of, waited_for_most
from dbo_trace.analysis.host.expensive import MOST as MOST_EXPENSIVE
from dbo_trace.analysis.host.expensive import ExpensiveCall
from dbo_trace.analysis.overlap.exposure import CROWDED
from dbo_trace.analysis.host.host_time import HostCauses, combine_causes
from dbo_trace.analysis.intervals import grouped_length
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
from dbo_trace.analysis.metrics import ACROSS, COMM_OPS_PER_ROUND_TRIP, MAX, MEDIAN, SUM, SUM_IF_ALL, RoundTrips, WindowMetrics
from dbo_trace.analysis.metrics import criterion_met
from dbo_trace.analysis.model import (
    CrossPart,
    Note,
    Options,
    PairPart,
    PhaseReport,
    RankAnalysis,
    RankDetail,
    RankReport,
    Recording,
    Report,
    StepTable,
)
from dbo_trace.analysis.overlap.operations import operation_index
from dbo_trace.analysis.cross_rank.collective_waits import SAME_SIZE, PeerWaits, RankComm, match, peer_waits, wait_split
from dbo_trace.analysis.rank_analysis import rank_contention, rank_exposure, rank_layers, rank_operations
from dbo_trace.analysis.cross_rank.side_by_side import CrossRank, RankOnClock, cross_rank, straggler_threshold
from dbo_trace.analysis.afd.roles import ATTENTION, FFN, RolesInfo
from dbo_trace.analysis.steps.periods import marked_periods_of
from dbo_trace.analysis.steps.sources import DECODE, SOURCE_EVENT_LOG
from dbo_trace.analysis.host.summaries import spread
from dbo_trace.analysis.compare.unprofiled import Repeat, Unprofiled, profiled_period, unprofiled_of
from dbo_trace.analysis.verdict.evidence_types import HostBasis, HostTest, RoleHost, host_test_of
from dbo_trace.analysis.verdict.decision import decide


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


def _input_warnings(ranks: list[RankAnalysis], parts: list[CrossPart] | None) -> list[str]:
    """What each trace's reader left out or could not use (events with a negative duration, a
    baseTimeNanoseconds out of range, ...): a rank's notes, and the report's warnings too, which
    the JSON lists and `report` prints on stderr, so nothing is dropped without a word."""
    if parts is not None:
        return list(dict.fromkeys(w for p in parts for w in p.warnings))
    return list(dict.fromkeys(w for r in ranks if r.detail is not None for w in r.detail.timeline.warnings))


def cross_part(r: RankAnalysis) -> CrossPart:
    d = r.detailed()
    return CrossPart(_rank_comm(r), _clue(r), d.attribution.layers, tuple(d.timeline.warnings), pair_part(r))


def with_peer_waits(ranks: list[RankAnalysis], waits: PeerWaits, alignment: Alignment) -> list[RankAnalysis]:
    """Each rank with the exposed comm inside its kernels' waits for a peer so called (needs the detail)."""
    return [_with_peer_waits(r, waits, alignment) for r in ranks]


def served_microbatches(ranks: list[RankAnalysis]) -> list[RankAnalysis]:
    """An AFD FFN rank's microbatches are those of the attention it serves: where an attention rank
    ran two (its attribution's, or its round trips'), the FFN's source says so, as the run's does."""
    if not any(r.role == ATTENTION and source_microbatched(r.attribution) for r in ranks):
        return ranks
    return [replace(r, attribution=served_source(r.attribution)) if r.role == FFN else r for r in ranks]


def combine(
    ranks: list[RankAnalysis],
    options: Options,
    inputs: list[str],
    warnings: list[str],
    parts: list[CrossPart] | None = None,
    refine: Callable[[list[RankAnalysis], PeerWaits, Alignment], list[RankAnalysis]] = with_peer_waits,
    roles: RolesInfo | None = None,
    recording: Recording = Recording(),
) -> Report:
    """All ranks: times and counts add (each rank is its own GPU); the host test is the ranks' own,
    added the same way (in-step where every rank has marker steps). parts and refine: where the
    ranks' details are elsewhere, what the cross-rank step reads of each and how the peer waits
    are given back to them (dbo_trace/app/ray_executor.py); by default both from the details. Roles (an AFD
    attention rank and its FFN rank) are not ranks of one collective: no cross-rank matching between
    them; the FFN's kernels give the attention's round trips their parts. Once every rank's evidence
    is in, each rank's verdict and the run's are decided, the same way."""
    pairs = [p.pair for p in parts] if parts is not None else [pair_part(r) for r in ranks]
    ranks = served_microbatches(with_ffn_parts(ranks, pairs))
    roles = with_pair(roles, ranks, pairs)
    notes: list[Note] = [*warnings, *(roles.notes() if roles is not None else [])]
    if len({r.role for r in ranks}) > 1:  # roles of one run, not DP ranks: their collectives are not one
        view = None
    else:
        view, ranks = across_ranks(ranks, parts, refine)
    slicing = time_slicing_of(ranks, roles)
    pipeline = run_pipeline(ranks, _fingerprint(ranks, pairs))
    overlap = pipeline.overlap if pipeline is not None else None
    decided = [
        RankReport.decided(
            r,
            decide(
                evidence_of(
                    [r], together([r]), view, waited_for=waited_for_most(r.rank, view), time_slicing=slicing, overlap=overlap
                )
            ),
        )
        for r in ranks
    ]
    run = together(ranks)
    unprofiled = run_unprofiled(ranks, recording.repeats, recording.prefills_interleave)
    overhead = unprofiled.profiler_overhead if unprofiled is not None else None
    return Report(
        what_if=_what_if(run.round_trips, ranks, options),
        phases=run.phases,
        inputs=inputs,
        ranks=decided,
        total=run.total,
        round_trips=run.round_trips,
        verdict=decide(
            evidence_of(
                ranks, run, view, time_slicing=slicing, profiler_overhead=overhead, overlap=overlap,
                role_hosts=role_hosts(ranks, roles),
            )  # fmt: skip
        ),
        options=options,
        window=run.window,
        warnings=notes + [w for w in _input_warnings(ranks, parts) if w not in notes],
        cross_rank=view,
        host_causes=run.causes,
        host_test=run.host_test,
        roles=roles,
        recording=recording,
        unprofiled=unprofiled,
        pipeline=pipeline,
        dbo_what_if=run_what_if(pipeline, options, recording),
    )


def _fingerprint(ranks: list[RankAnalysis], pairs: list[PairPart | None]) -> str | None:
    """The served attention trace's clock base: a recording a calibration may hold (and must not be
    calibrated on when it is the arm predicted)."""
    found = [p.base_time_ns for r, p in zip(ranks, pairs) if r.afd is not None and p is not None and p.base_time_ns]
    return str(found[0]) if len(found) == 1 else None


def run_unprofiled(
    ranks: list[RankAnalysis], repeats: tuple[Repeat, ...], prefills_interleave: bool | None = None
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


def role_hosts(ranks: list[RankAnalysis], roles: RolesInfo | None) -> tuple[RoleHost, ...]:
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


def together(ranks: list[RankAnalysis]) -> Together:
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


def _host_test(ranks: list[RankAnalysis]) -> HostTest:
    """The ranks' host test over their buckets added: in-step where every rank's steps are markers,
    each rank's steady window where its test measured one, else its window."""
    in_steps = TimeBuckets(*(sum(getattr(r.in_steps, f.name) for r in ranks) for f in fields(TimeBuckets)))
    every_in_steps = all(r.host_test.basis == HostBasis.IN_STEPS for r in ranks)
    steady = [r.steady or (r.in_steps if r.host_test.basis == HostBasis.IN_STEPS else r.window) for r in ranks]
    if not every_in_steps:
        steady = [s if r.host_test.basis == HostBasis.WINDOW else r.window for s, r in zip(steady, ranks)]
    steady_sum = TimeBuckets(*(sum(getattr(s, f.name) for s in steady) for f in fields(TimeBuckets)))
    return host_test_of(not every_in_steps, steady_sum, steady_sum if every_in_steps else in_steps)


def _run_expensive(ranks: list[RankAnalysis]) -> list[ExpensiveCall]:
    """The run's expensive calls: one rank's, or each name once (its rank with the largest share)."""
    if len(ranks) == 1:
        return ranks[0].expensive_calls
    best: dict[str, ExpensiveCall] = {}
    for e in (e for r in ranks for e in r.expensive_calls):
        if e.name not in best or (e.step_share or 0.0) > (best[e.name].step_share or 0.0):
            best[e.name] = e
    return sorted(best.values(), key=lambda e: -(e.step_share or 0.0))[:MOST_EXPENSIVE]


def _what_if(rt: RoundTrips | None, ranks: list[RankAnalysis], options: Options) -> list[WhatIf | NotEstimated]:
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


def _sm_count(ranks: list[RankAnalysis]) -> int | None:
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


def across_ranks(
    ranks: list[RankAnalysis],
    parts: list[CrossPart] | None = None,
    refine: Callable[[list[RankAnalysis], PeerWaits, Alignment], list[RankAnalysis]] = with_peer_waits,
) -> tuple[CrossRank | None, list[RankAnalysis]]:
    """The ranks on one clock, their collectives matched and each one's wait (analysis/cross_rank/clocks.py,
    analysis/cross_rank/collective_waits.py); the ranks come back with the exposed comm that was waiting for a peer so called."""
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


def _clue(r: RankAnalysis) -> RankClue:
    d = r.detailed()
    tl = d.timeline
    firsts = [float(a.start.min()) for a in (tl.gpu, tl.calls, tl.cpu) if len(a)]
    steps = d.attribution.steps
    marks = steps.start if steps.source != SOURCE_EVENT_LOG and not steps.inferred else None  # markers only
    return RankClue(r.rank, tl.base_time_ns, min(firsts) if firsts else None, d.log_step_begins_ns, marks)


def _rank_comm(r: RankAnalysis) -> RankComm:
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


def _with_peer_waits(r: RankAnalysis, waits: PeerWaits, alignment: Alignment) -> RankAnalysis:
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
    operations = rank_operations(d, exposed, rank_layers(d, r.afd)) if r.operations else r.operations
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


def _on_clock(r: RankAnalysis, alignment: Alignment) -> RankOnClock:
    offset = alignment.offset_us.get(r.rank)
    starts = (r.steps.table.start_us + offset).tolist() if len(r.steps) and offset is not None else None
    return RankOnClock(r.rank, starts, r.total.comm_exposed_us)


def _combined_phases(ranks: list[RankAnalysis]) -> list[PhaseReport]:
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
