"""The cross-rank view in the document: the ranks on one clock and who waited for whom."""

from __future__ import annotations

from typing import Any, TypeVar

from msgspec import UNSET, UnsetType

from dbo_trace.analysis.cross_rank.clocks import Alignment
from dbo_trace.analysis.cross_rank.collective_waits import GroupWaits, MatchedOp, PeerWaits, RankWaits, WaitSplit
from dbo_trace.analysis.cross_rank.side_by_side import CrossRank, StepAlignment
from dbo_trace.render.document.base import Count, Int, Struct, _r
from dbo_trace.render.document.held import rounded
from dbo_trace.render.words.notes import cross_note_text, cross_rank_summary, op_label, wait_lines


class MostlyAt(Struct):
    ubatch: Int
    index: Int
    wait_us: float | None


# A twin of WaitSplit by its names, kept: a brief of two dataclasses, flat in the JSON (RankWaits's wait,
# share, transfer and whom and where it waited most, with its split's hidden and exposed parts, absent
# before version 5), the significance against the view's threshold. Holding either would change the
# JSON, and the flat keys would still be declared here to read the archives of versions 3 to 10: the
# twin would stay either way (and RankWaits's wait_us is not WaitSplit's, a union of the waits).
class PeerWait(Struct):
    """A rank's waits for its peers in brief, for a headline (analysis/cross_rank/collective_waits.py)."""

    wait_us: float | None
    wait_share: float | None
    transfer_us: float | None
    waited_mostly_for: Int | None
    mostly_at: MostlyAt | None
    significant: bool
    # version 5: its comm time apart into waiting and transfer, each hidden (under its compute) or exposed
    hidden_wait_us: float | None | UnsetType = UNSET
    hidden_transfer_us: float | None | UnsetType = UNSET
    hidden_share_of_transfer: float | None | UnsetType = UNSET  # hidden transfer / transfer: what overlap hid of real comm
    exposed_wait_us: float | None | UnsetType = UNSET
    exposed_transfer_us: float | None | UnsetType = UNSET


# Blocks that are the analysis's dataclasses as they are, rounded (render/document/held.py): a step's
# starts side by side, and how the ranks were put on one clock.
CrossStep = StepAlignment
AlignmentBlock = Alignment


class ByOp(Struct):
    ubatch: Int
    index: Int
    label: str
    wait_us: float | None


class RankWaitsBlock(Struct):
    comm_us: float | None
    matched_us: float | None
    wait_us: float | None
    wait_share: float | None
    transfer_us: float | None
    waited_for_us: dict[str, float | None]
    by_op: list[ByOp]
    by_step_us: dict[str, float | None]
    last_ops: Count
    caused_us: float | None


class StepWaits(Struct):
    step: Int
    operations: Count
    straggler: Int | None
    max_skew_us: float | None
    wait_us: dict[str, float | None]
    last_ops: dict[str, Count]
    caused_us: dict[str, float | None]


class UbatchWaits(Struct):
    ubatch: Int
    operations: Count
    straggler: Int | None
    max_skew_us: float | None
    wait_us: dict[str, float | None]
    last_ops: dict[str, Count]
    caused_us: dict[str, float | None]


class HeldBackMost(Struct):
    rank: Int
    ubatch: Int
    caused_us: float | None
    last_ops: Count
    operations: Count


class OperationRank(Struct):
    arrival_us: float  # from zero_us
    kernel_us: float | None
    wait_us: float | None
    transfer_us: float | None
    ubatch: Int
    step: Int
    op_index: Int


class OperationWaits(Struct):
    channel: str
    position: Int
    last_rank: Int
    skew_us: float | None
    ranks: dict[str, OperationRank]


class WaitsBlock(Struct):
    threshold_us: float
    zero_us: float  # arrivals are microseconds after this instant of the shared clock
    median_end_spread_us: float | None
    held_back_most: HeldBackMost | None
    ranks: dict[str, RankWaitsBlock]
    steps: list[StepWaits]
    ubatches: list[UbatchWaits]
    operations: list[OperationWaits]


# A twin of CrossRank, kept: its summary, notes and lines are words (the analysis holds no sentences)
# amid its figures, in the JSON's order, and its waits a block of their own: no dataclass holds them so.
class CrossRankBlock(Struct):
    ranks: list[Int]
    summary: str
    median_skew_us: float
    max_skew_us: float
    last_counts: dict[str, Count]
    exposed_comm_us: dict[str, float]
    steps: list[CrossStep]
    notes: list[str]
    # version 3
    alignment: AlignmentBlock | None
    straggler_threshold_us: float
    median_step_us: float | None
    late_counts: dict[str, Count]
    lines: list[str]
    waits: WaitsBlock | None


def peer_wait_block(r: RankWaits, view: CrossRank, split: WaitSplit | None = None) -> PeerWait:
    top, mostly = r.most_waited_for, r.most_waited_at
    return PeerWait(
        hidden_wait_us=None if split is None else _r(split.hidden_wait_us),
        hidden_transfer_us=None if split is None else _r(split.hidden_transfer_us),
        hidden_share_of_transfer=None if split is None else _r(split.hidden_share_of_transfer, 4),
        exposed_wait_us=None if split is None else _r(split.exposed_wait_us),
        exposed_transfer_us=None if split is None else _r(split.exposed_transfer_us),
        wait_us=_r(r.wait_us),
        wait_share=_r(r.wait_share, 4),
        transfer_us=_r(r.transfer_us),
        waited_mostly_for=None if top is None else top[0],
        mostly_at=None if mostly is None else MostlyAt(ubatch=mostly[0][0], index=mostly[0][1], wait_us=_r(mostly[1])),
        significant=r.wait_us > view.threshold_us,
    )


def _keyed(values: dict[int, Any], digits: int | None = None) -> dict[str, Any]:
    """A dict by rank (or step) as the JSON holds it: keys as strings, in order, values rounded."""
    return {str(k): v if digits is None else round(v, digits) for k, v in sorted(values.items())}


def cross_rank_block(view: CrossRank | None) -> CrossRankBlock | None:
    if view is None:
        return None
    return CrossRankBlock(
        ranks=view.ranks,
        summary=cross_rank_summary(view),
        median_skew_us=round(view.median_skew_us, 3),
        max_skew_us=round(view.max_skew_us, 3),
        last_counts=_keyed(view.last_counts),
        exposed_comm_us=_keyed(view.exposed_comm_us, 3),
        steps=[rounded(s) for s in view.steps],
        notes=[cross_note_text(n) for n in view.notes],
        alignment=alignment_block(view.alignment),
        straggler_threshold_us=round(view.threshold_us, 3),
        median_step_us=None if view.median_step_us is None else round(view.median_step_us, 3),
        late_counts=_keyed(view.late_counts),
        lines=wait_lines(view),
        waits=waits_block(view.waits, view.layers),
    )


def alignment_block(a: Alignment | None) -> Alignment | None:
    return None if a is None else rounded(a)


def _rounded(values: dict[int, float]) -> dict[str, float | None]:
    return {str(k): _r(v) for k, v in sorted(values.items())}


def rank_waits_block(r: RankWaits, layers: int | None = None) -> RankWaitsBlock:
    return RankWaitsBlock(
        comm_us=_r(r.comm_us),
        matched_us=_r(r.matched_us),
        wait_us=_r(r.wait_us),
        wait_share=_r(r.wait_share, 4),
        transfer_us=_r(r.transfer_us),
        waited_for_us=_rounded(r.waited_for_us),
        by_op=[
            ByOp(ubatch=ub, index=k, label=op_label(ub, k, layers, r.ops_per_ubatch), wait_us=_r(us))
            for (ub, k), us in sorted(r.by_op_us.items(), key=lambda kv: (-kv[1], kv[0]))
        ],
        by_step_us=_rounded(r.by_step_us),
        last_ops=r.last_ops,
        caused_us=_r(r.caused_us),
    )


G = TypeVar("G", StepWaits, UbatchWaits)


def group_waits_block(cls: type[G], g: GroupWaits) -> G:
    return cls(
        g.key,
        operations=g.ops,
        straggler=g.straggler,
        max_skew_us=_r(g.max_skew_us),
        wait_us=_rounded(g.wait_us),
        last_ops=_keyed(g.last_ops),
        caused_us=_rounded(g.caused_us),
    )


def held_back_most_block(most: tuple[int, int, float, int, int] | None) -> HeldBackMost | None:
    if most is None:
        return None
    rank, ubatch, us, last_ops, ops = most
    return HeldBackMost(rank=rank, ubatch=ubatch, caused_us=_r(us), last_ops=last_ops, operations=ops)


def operation_waits_block(o: MatchedOp) -> OperationWaits:
    return OperationWaits(
        channel=o.channel,
        position=o.position,
        last_rank=o.last_rank,
        skew_us=_r(o.skew_us),
        ranks={
            str(r): OperationRank(
                arrival_us=round(o.arrival_us[i], 3),
                kernel_us=_r(o.kernel_us[i]),
                wait_us=_r(o.wait_us[i]),
                transfer_us=_r(o.kernel_us[i] - o.wait_us[i]),
                ubatch=o.ubatch[i],
                step=o.step[i],
                op_index=o.op_index[i],
            )
            for i, r in enumerate(o.ranks)
        },
    )


def waits_block(w: PeerWaits | None, layers: int | None = None) -> WaitsBlock | None:
    if w is None:
        return None
    return WaitsBlock(
        threshold_us=round(w.threshold_us, 3),
        zero_us=w.zero_us,
        median_end_spread_us=_r(w.median_end_spread_us),
        held_back_most=held_back_most_block(w.held_back_most),
        ranks={str(k): rank_waits_block(r, layers) for k, r in sorted(w.ranks.items())},
        steps=[group_waits_block(StepWaits, g) for g in w.steps],
        ubatches=[group_waits_block(UbatchWaits, g) for g in w.ubatches],
        operations=[operation_waits_block(o) for o in w.ops],
    )
