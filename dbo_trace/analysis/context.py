"""The run's context (docs/architecture.md, "The flow"): what the ranks tell together, built once from
their measurements (analysis/rank_analysis.py analyze_rank, never changed afterwards) before anything is
judged. Ranks of one collective on one clock and each one's waits for its peers; an AFD pair read
together (the FFN's parts of the attention's round trips, whether the roles took turns on one GPU, the
pair's figures, the served microbatches); the run's pipeline. analysis/report.py judges every window
(step, phase, rank, run) over it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from dbo_trace.analysis import classify as c
from dbo_trace.analysis.afd.attention_side import AfdSide, afd_sides, pair_of, pair_part, run_pipeline
from dbo_trace.analysis.afd.gpu_sharing import TimeSlicing
from dbo_trace.analysis.afd.pipeline import Pipeline
from dbo_trace.analysis.afd.roles import ATTENTION, FFN, RoleFacts, RolesInfo, roles_info
from dbo_trace.analysis.cross_rank.clocks import Alignment, RankClue, align_on_anchor, align_on_epoch
from dbo_trace.analysis.cross_rank.collective_waits import SAME_SIZE, PeerWaits, RankComm, WaitSplit, match, peer_waits, wait_split
from dbo_trace.analysis.cross_rank.side_by_side import CrossRank, RankOnClock, cross_rank, straggler_threshold
from dbo_trace.analysis.intervals import grouped_length
from dbo_trace.analysis.metrics import COMM_OPS_PER_ROUND_TRIP, RoundTrips
from dbo_trace.analysis.model import CrossPart, PairPart, RankAnalysis, RankDetail, StepTable
from dbo_trace.analysis.overlap.exposure import Exposure
from dbo_trace.analysis.overlap.operations import OperationRow, operation_index
from dbo_trace.analysis.rank_analysis import rank_contention, rank_exposure, rank_layers, rank_operations
from dbo_trace.analysis.steps.microbatched import served_source, source_microbatched
from dbo_trace.analysis.steps.sources import SOURCE_EVENT_LOG


@dataclass(frozen=True)
class PeerFigures:
    """A rank's comm as its peers' waits tell it (peer_figures): the exposed comm inside its kernels'
    waits for a peer so called (reason PEER), its operations and contention over the transfer alone,
    its comm time apart into waiting and transfer, and its round trip's split likewise."""

    exposure: Exposure
    operations: list[OperationRow]
    comm_transfer_slowdown: float | None
    wait_split: WaitSplit
    round_trips: RoundTrips | None


# How the peer waits reach the ranks: given the ranks, their settled numbers, the waits and the clocks,
# each waiting rank's PeerFigures by its number, and notes on those it could not give. Here from the
# details (peers_here); with Ray, on the node that holds each rank's detail (app/ray_executor.py).
PeerStep = Callable[
    [Sequence[RankAnalysis], Sequence[int], PeerWaits, Alignment], tuple[dict[int, PeerFigures], list[str]]
]


@dataclass(frozen=True)
class RunContext:
    """What the ranks tell together, per rank in the ranks' order and for the run."""

    numbers: tuple[int, ...]  # each rank's settled number
    attribution: tuple[str, ...]  # each rank's microbatch source as the run sees it (an FFN's: its attention's)
    peers: tuple[PeerFigures | None, ...]  # each rank's comm as its peers' waits tell it; None: not measured
    afd: tuple[AfdSide | None, ...]  # each attention rank's round trips and span with the FFN's side
    view: CrossRank | None  # the ranks of one collective on one clock (None: one rank, or AFD roles)
    roles: RolesInfo | None  # the roles, with what the pair tells together
    time_slicing: TimeSlicing | None  # the roles took turns on their one GPU (the verdicts' first reason)
    pipeline: Pipeline | None  # the served attention rank's steps as a pipeline
    notes: tuple[str, ...] = ()  # what the peer step could not do (a Ray task that failed)


def run_context(
    ranks: Sequence[RankAnalysis],
    numbers: Sequence[int] | None = None,
    parts: Sequence[CrossPart] | None = None,
    peer_step: PeerStep | None = None,
    role_facts: RoleFacts | None = None,
) -> RunContext:
    """The context of the measured ranks (in rank order), once. numbers: their settled numbers (default:
    each one's own); parts and peer_step: where the ranks' details are elsewhere (Ray), what the
    cross-rank step reads of each and how the peer waits reach them; role_facts: what the manifests and
    traces say of the roles (None: no roles)."""
    numbers = tuple(numbers) if numbers is not None else tuple(r.rank for r in ranks)
    pairs = [p.pair for p in parts] if parts is not None else [pair_part(r) for r in ranks]
    sides = afd_sides(ranks, pairs)
    afds = [s.round_trips if s is not None else r.afd for r, s in zip(ranks, sides)]
    slicing, figures = pair_of(ranks, afds, pairs, role_facts.sharing if role_facts is not None else None)
    roles = roles_info(role_facts, [r.role for r in ranks if r.role is not None], time_slicing=slicing, pair=figures)
    served = any(r.role == ATTENTION and source_microbatched(r.attribution) for r in ranks)
    peers: list[PeerFigures | None] = [None] * len(ranks)
    view, notes = None, list[str]()
    if len({r.role for r in ranks}) <= 1:  # roles of one run, not DP ranks: their collectives are not one
        view, found, notes = across_ranks(ranks, numbers, parts, peer_step or peers_here)
        peers = [found.get(n) for n in numbers]
    return RunContext(
        numbers=numbers,
        attribution=tuple(served_source(r.attribution) if served and r.role == FFN else r.attribution for r in ranks),
        peers=tuple(peers),
        afd=tuple(sides),
        view=view,
        roles=roles,
        time_slicing=slicing if slicing is not None and slicing.sliced and slicing.ratio is not None else None,
        pipeline=run_pipeline(ranks, afds, sides, _fingerprint(ranks, pairs)),
        notes=tuple(notes),
    )


def _fingerprint(ranks: Sequence[RankAnalysis], pairs: Sequence[PairPart | None]) -> str | None:
    """The served attention trace's clock base: a recording a calibration may hold (and must not be
    calibrated on when it is the arm predicted)."""
    found = [p.base_time_ns for r, p in zip(ranks, pairs) if r.afd is not None and p is not None and p.base_time_ns]
    return str(found[0]) if len(found) == 1 else None


# ---- ranks of one collective on one clock ----------------------------------------------------------


def cross_part(r: RankAnalysis, rank: int | None = None) -> CrossPart:
    """What the cross-rank step reads of a rank's detail, under its settled number (default: its own)."""
    d = r.detailed()
    number = r.rank if rank is None else rank
    return CrossPart(_rank_comm(r, number), _clue(r, number), d.attribution.layers, tuple(d.timeline.warnings), pair_part(r))


def across_ranks(
    ranks: Sequence[RankAnalysis], numbers: Sequence[int], parts: Sequence[CrossPart] | None, peer_step: PeerStep
) -> tuple[CrossRank | None, dict[int, PeerFigures], list[str]]:
    """The ranks on one clock, their collectives matched and each one's wait (analysis/cross_rank/clocks.py,
    analysis/cross_rank/collective_waits.py); with each waiting rank's comm as its waits tell it, and
    the peer step's notes."""
    if len(ranks) < 2 or (parts is None and any(r.detail is None for r in ranks)):
        return None, {}, []
    parts = parts if parts is not None else [cross_part(r, n) for r, n in zip(ranks, numbers)]
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
    found: dict[int, PeerFigures] = {}
    step_notes: list[str] = []
    if alignment.aligned:
        zero = min(alignment.offset_us.values())  # epoch microseconds lose the nanosecond in a float: relative
        relative = {r: off - zero for r, off in alignment.offset_us.items()}
        on_the_clock = [c for c in comms if c.rank in relative]  # an anchor may have placed only some ranks
        matched, match_notes = match(on_the_clock, relative)
        notes += match_notes
        if matched:
            waits = peer_waits(on_the_clock, relative, threshold, matched, zero)
            found, step_notes = peer_step(ranks, numbers, waits, alignment)
        elif not match_notes and any(len(c.start) for c in comms):
            notes.append("no communication channel is shared by two ranks: no collective matched")
    on_clock = [_on_clock(r, n, alignment) for r, n in zip(ranks, numbers)]
    layers = next((p.layers for p in parts if p.layers), None)
    view = cross_rank(on_clock, alignment, waits, notes, layers, median_step_us=median_step, threshold_us=threshold)
    return view, found, step_notes


def peers_here(
    ranks: Sequence[RankAnalysis], numbers: Sequence[int], waits: PeerWaits, alignment: Alignment
) -> tuple[dict[int, PeerFigures], list[str]]:
    """Each waiting rank's PeerFigures from its detail, by its number."""
    out = {}
    for r, n in zip(ranks, numbers):
        found = peer_figures(r, n, waits, alignment)
        if found is not None:
            out[n] = found
    return out, []


def _clue(r: RankAnalysis, rank: int) -> RankClue:
    d = r.detailed()
    tl = d.timeline
    firsts = [float(a.start.min()) for a in (tl.gpu, tl.calls, tl.cpu) if len(a)]
    steps = d.attribution.steps
    marks = steps.start if steps.source != SOURCE_EVENT_LOG and not steps.inferred else None  # markers only
    return RankClue(rank, tl.base_time_ns, min(firsts) if firsts else None, d.log_step_begins_ns, marks)


def _rank_comm(r: RankAnalysis, rank: int) -> RankComm:
    """The rank's comm kernels in start order with what matching and the wait sums need; each channel's
    and signature's text one string object (pickle sends it once where ranks travel: Ray)."""
    d = r.detailed()
    tl, att, names = d.timeline, d.attribution, d.timeline.names
    args = tl.comm_args()
    comm = np.flatnonzero(d.kernel_kind == c.COMM)
    comm = comm[np.argsort(tl.gpu.start[comm], kind="stable")]
    lanes = tl.gpu.lane[comm]
    ordinal = {lane: n for n, lane in enumerate(dict.fromkeys(lanes.tolist()))}  # streams by first use
    texts: dict[str, str] = {}
    channel = [
        texts.setdefault(x, x)
        for x in (
            f"group {_inert(names[g])}" if g >= 0 else f"stream #{ordinal[lane]}"
            for g, lane in zip(args.group[comm].tolist(), lanes.tolist())
        )
    ]
    collective = [names[x] if x >= 0 else "" for x in args.collective[comm].tolist()]
    signature = [texts.setdefault(x, x) for x in (f"{names[n]}|{col}" for n, col in zip(tl.gpu.name[comm].tolist(), collective))]
    position = dict(zip(r.steps.table.index.tolist(), range(len(r.steps))))
    step = np.array([position.get(int(x), -1) for x in att.gpu_step[comm]], np.int64)
    return RankComm(
        rank=rank,
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


def peer_figures(r: RankAnalysis, rank: int, waits: PeerWaits, alignment: Alignment) -> PeerFigures | None:
    """The rank's comm as its waits for peers tell it (PeerFigures), from its detail; None where it
    has no exposure or no matched kernel. Waits within the clocks' accuracy are not told apart from
    none for the reason PEER. rank: its settled number, the waits' key."""
    d = r.detailed()
    index, wait = waits.kernel_wait_us.get(rank, (np.empty(0, np.int64), np.empty(0)))
    if r.exposure is None or not len(index):
        return None
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
    return PeerFigures(exposed, operations, transfer_slowdown, split, rt)


def _round_trip_waits(
    rt: RoundTrips | None, steps: StepTable, d: RankDetail, index: np.ndarray, wait: np.ndarray
) -> RoundTrips | None:
    """The round trip with its comm apart into waiting for peer ranks and transfer (a new value: the
    round trip as the waits tell it): per step the time its comm kernels' waits cover (once, where
    kernels overlap) and the rest of its comm busy time, each over its round trips; medians over the
    steps the arithmetic used. index, wait: the matched comm kernels and each one's wait."""
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


def _on_clock(r: RankAnalysis, rank: int, alignment: Alignment) -> RankOnClock:
    offset = alignment.offset_us.get(rank)
    starts = (r.steps.table.start_us + offset).tolist() if len(r.steps) and offset is not None else None
    return RankOnClock(rank, starts, r.total.comm_exposed_us)
