"""Who waited for whom: communication kernels matched across ranks, and each one's wait.

A collective (NCCL's, DeepEP's dispatch or combine, an all-to-all) runs on every rank of its group,
and no rank's kernel can finish before the last rank's has started: a rank that arrives first waits
inside its kernel. So, per matched kernel, on the shared clock (analysis/cross_rank/clocks.py):

  arrival   each rank's kernel start
  last      the rank that arrived last
  wait      last arrival - own arrival, at most the rank's own kernel time (0 for the last)
  transfer  kernel time - wait

Kernels are matched by their order on their channel: the process group where Kineto names it (args
"Process Group Name"), else the rank's n-th communication stream (by first use). Where Kineto writes
a sequence number (args "Seq") kernels pair by it. Otherwise the ranks' sequences may start a few
kernels apart (profilers start at slightly different moments): the shift at which the kernel names,
collective names and (for collectives whose size is the same on every rank) message sizes agree,
and the kernels' ends agree best in time, is taken; where none agrees, the channel is refused and a
note says so. Pure: arrays in, a PeerWaits out.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from dbo_trace.analysis import intervals as iv

MAX_SHIFT = 8  # kernels one rank's sequence may start before or after another's
END_TOLERANCE_US = 50.0  # matched kernels' ends agree within this, or a quarter of their duration
END_TOLERANCE_SHARE = 0.25
# Collectives whose message size is the same on every rank (all-to-all-v and send/recv differ).
MAX_CHANNEL_NOTES = 8  # notes on channels that could not be matched, listed; the rest counted
SAME_SIZE = ("all_reduce", "allreduce", "broadcast", "reduce", "all_gather", "allgather", "reduce_scatter", "barrier")


@dataclass(frozen=True)
class RankComm:
    """A rank's communication kernels, in start order, on its own trace clock."""

    rank: int
    gpu_index: np.ndarray  # into the rank's GPU activities
    start: np.ndarray
    end: np.ndarray
    channel: list[str]  # "group <name>" or "stream #<n>" per kernel
    signature: list[str]  # kernel name and collective name: must agree across ranks
    nelems: np.ndarray  # -1 where unknown
    same_size: np.ndarray  # bool: the collective's size must agree across ranks
    seq: np.ndarray  # -1 where unknown
    ubatch: np.ndarray  # -1: unknown
    step: np.ndarray  # position of its step among the rank's reported steps, -1: none
    op_index: np.ndarray  # k-th comm operation of its microbatch in the step, -1: none
    comm_us: float  # all its comm kernel time (matched or not)


@dataclass(frozen=True)
class MatchedOp:
    """One collective seen on several ranks: per rank (in `ranks` order) its figures."""

    channel: str
    position: int  # in the lowest rank's sequence on the channel
    ranks: tuple[int, ...]
    arrival_us: tuple[float, ...]  # shared clock
    kernel_us: tuple[float, ...]
    wait_us: tuple[float, ...]
    ubatch: tuple[int, ...]
    step: tuple[int, ...]
    op_index: tuple[int, ...]
    last_rank: int
    skew_us: float  # last arrival - first arrival


@dataclass(frozen=True)
class RankWaits:
    rank: int
    comm_us: float  # all its comm kernel time
    matched_us: float  # of which in matched kernels
    wait_us: float
    transfer_us: float
    waited_for_us: dict[int, float]  # rank it waited for -> us
    by_op_us: dict[tuple[int, int], float]  # (ubatch, op index in step) -> us waited
    by_step_us: dict[int, float]  # step position -> us waited
    last_ops: int  # matched ops it arrived last at, by more than the threshold
    caused_us: float  # what the others waited for it there
    ops_per_ubatch: int | None = None  # comm operations per microbatch and step (the most seen)

    @property
    def wait_share(self) -> float | None:
        return self.wait_us / self.comm_us if self.comm_us > 0 else None

    @property
    def most_waited_for(self) -> tuple[int, float] | None:
        """The rank it waited for longest, and how long (ties: the first met)."""
        return max(self.waited_for_us.items(), key=lambda kv: kv[1]) if self.waited_for_us else None

    @property
    def others_waited_for(self) -> tuple[int, float]:
        """The ranks it waited for besides the one it waited for longest: how many, and how long in all."""
        top = self.most_waited_for
        return (len(self.waited_for_us) - 1, self.wait_us - top[1]) if top is not None else (0, 0.0)

    @property
    def most_waited_at(self) -> tuple[tuple[int, int], float] | None:
        """The (microbatch, op index) it waited at longest, and how long (ties: the first met)."""
        return max(self.by_op_us.items(), key=lambda kv: kv[1]) if self.by_op_us else None


@dataclass(frozen=True)
class GroupWaits:
    """The matched collectives of one step (or one microbatch): who arrived last there, and the waits."""

    key: int  # step position (the lowest rank's), or microbatch
    ops: int
    wait_us: dict[int, float]  # rank -> us it waited
    last_ops: dict[int, int]  # rank -> collectives it arrived last at by more than the threshold
    caused_us: dict[int, float]  # rank -> what the others waited for it there
    max_skew_us: float

    @property
    def straggler(self) -> int | None:
        """The rank that held the others back most here (above the threshold), if any."""
        return max(self.caused_us, key=lambda r: (self.caused_us[r], -r)) if self.caused_us else None


@dataclass(frozen=True)
class PeerWaits:
    ops: list[MatchedOp]
    ranks: dict[int, RankWaits]
    kernel_wait_us: dict[int, tuple[np.ndarray, np.ndarray]]  # rank -> (gpu indices, wait us)
    threshold_us: float  # skews above it are a straggler, not noise
    zero_us: float = 0.0  # arrivals are relative to this instant of the shared clock (float precision)
    # rank -> (start, end, rank waited for) of each wait on the rank's own trace clock, for pictures
    wait_spans: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)
    steps: list[GroupWaits] = field(default_factory=list)  # per step position (the lowest rank's)
    ubatches: list[GroupWaits] = field(default_factory=list)  # per microbatch (the lowest rank's), where known

    @property
    def held_back_most(self) -> tuple[int, int, float, int, int] | None:
        """(rank, microbatch, us the others waited for it, collectives it arrived last at above the
        threshold, that microbatch's collectives): who held the others back most, or None."""
        best: tuple[int, int, float, int, int] | None = None
        for g in self.ubatches:
            for rank, us in g.caused_us.items():
                if best is None or (us, -rank, -g.key) > (best[2], -best[0], -best[1]):
                    best = (rank, g.key, us, g.last_ops[rank], g.ops)
        if best is None:  # microbatches unknown: by rank over all collectives
            for w in sorted(self.ranks.values(), key=lambda x: (-x.caused_us, x.rank)):
                if w.last_ops:
                    return (w.rank, -1, w.caused_us, w.last_ops, len(self.ops))
        return best

    @property
    def median_end_spread_us(self) -> float | None:
        """How far apart the matched kernels' ends are on the shared clock: a check of the alignment
        (NCCL's ends are nearly simultaneous on one host)."""
        if not self.ops:
            return None
        ends = [[a + k for a, k in zip(o.arrival_us, o.kernel_us)] for o in self.ops]
        return float(np.median([max(e) - min(e) for e in ends]))


@dataclass(frozen=True)
class WaitSplit:
    """A rank's comm kernel time apart into waiting for a peer rank and transfer, and each part into
    hidden (under its own compute kernels) and exposed (docs/analysis.md, "Wait and transfer"): a
    kernel's wait is its first part, from its start; the rest of it is transfer."""

    wait_us: float
    transfer_us: float
    hidden_wait_us: float
    hidden_transfer_us: float
    exposed_wait_us: float
    exposed_transfer_us: float
    partial: bool = False  # some comm kernels were not matched: the split is over the matched ones

    @property
    def hidden_share_of_transfer(self) -> float | None:
        return self.hidden_transfer_us / self.transfer_us if self.transfer_us > 0 else None

    def __add__(self, other: WaitSplit) -> WaitSplit:
        w, t, hw, ht, ew, et = (a + b for a, b in zip(_values(self), _values(other)))
        return WaitSplit(w, t, hw, ht, ew, et, partial=self.partial or other.partial)


def _values(x: WaitSplit) -> tuple[float, ...]:
    return (x.wait_us, x.transfer_us, x.hidden_wait_us, x.hidden_transfer_us, x.exposed_wait_us, x.exposed_transfer_us)


def wait_split(
    comm: tuple[np.ndarray, np.ndarray], wait_us: np.ndarray, compute: tuple[np.ndarray, np.ndarray], partial: bool = False
) -> WaitSplit:
    """comm: the rank's matched comm kernels (start, end), each with its wait (0: none); compute:
    its compute kernels. Time covered counts once (unions), so the four parts add up to the comm
    kernels' covered time, and hidden (wait + transfer) is their time under compute. partial: the
    rank has comm kernels that were not matched (their wait unknown), left out here."""
    start, end = comm
    waiting = wait_us > 0
    waits = (start[waiting], start[waiting] + wait_us[waiting])
    covered = iv.length(start, end)
    hidden = iv.length(*iv.intersection(comm, compute))
    waited = iv.length(*waits)
    hidden_wait = iv.length(*iv.intersection(waits, compute))
    return WaitSplit(
        wait_us=waited,
        transfer_us=covered - waited,
        hidden_wait_us=hidden_wait,
        hidden_transfer_us=hidden - hidden_wait,
        exposed_wait_us=waited - hidden_wait,
        exposed_transfer_us=covered - hidden - (waited - hidden_wait),
        partial=partial,
    )


def _tolerance(dur: np.ndarray) -> float:
    return max(END_TOLERANCE_US, END_TOLERANCE_SHARE * float(np.median(dur))) if len(dur) else END_TOLERANCE_US


def _agree(a: RankComm, ia: np.ndarray, b: RankComm, ib: np.ndarray, codes: dict[int, np.ndarray]) -> bool:
    if not np.array_equal(codes[a.rank][ia], codes[b.rank][ib]):
        return False
    strict = a.same_size[ia] & b.same_size[ib] & (a.nelems[ia] >= 0) & (b.nelems[ib] >= 0)
    return bool(np.all(a.nelems[ia][strict] == b.nelems[ib][strict]))


def pair(
    ref: RankComm,
    ref_at: np.ndarray,
    other: RankComm,
    other_at: np.ndarray,
    offsets: dict[int, float] | None,
    codes: dict[int, np.ndarray],
) -> tuple[np.ndarray, np.ndarray] | str:
    """Pairs (indices into ref_at, into other_at) of one channel's kernels, or why they do not pair.
    codes: per rank, each kernel's signature as a number shared by all ranks."""
    n, m = len(ref_at), len(other_at)
    if (ref.seq[ref_at] >= 0).all() and (other.seq[other_at] >= 0).all():
        common, ia, ib = np.intersect1d(ref.seq[ref_at], other.seq[other_at], return_indices=True)
        if len(common) and _agree(ref, ref_at[ia], other, other_at[ib], codes):
            return ia, ib
        return "their sequence numbers (Seq) name different collectives"
    best: tuple[float, int] | None = None
    for d in range(-MAX_SHIFT, MAX_SHIFT + 1):
        lo, hi = max(0, -d), min(n, m - d)
        if hi - lo < max(1, min(n, m) // 2):
            continue
        ia = np.arange(lo, hi)
        ib = ia + d
        if not _agree(ref, ref_at[ia], other, other_at[ib], codes):
            continue
        if offsets is None:  # no clock yet (the anchor): only the plain order, complete
            if d == 0 and n == m:
                return ia, ib
            continue
        ends_a = ref.end[ref_at[ia]] + offsets[ref.rank]
        ends_b = other.end[other_at[ib]] + offsets[other.rank]
        spread = float(np.median(np.abs(ends_a - ends_b)))
        dur = np.r_[ref.end[ref_at[ia]] - ref.start[ref_at[ia]], other.end[other_at[ib]] - other.start[other_at[ib]]]
        if spread <= _tolerance(dur) and (best is None or spread < best[0]):
            best = (spread, d)
    if best is None:
        if offsets is None:
            return f"their {n} and {m} kernels do not line up in order (names, collectives or sizes disagree)"
        return (
            f"their {n} and {m} kernels do not line up at any shift with their ends agreeing in time (names, "
            "collectives or sizes disagree, or the clocks do: ranks on different hosts, a sampled trace?)"
        )
    d = best[1]
    ia = np.arange(max(0, -d), min(n, m - d))
    return ia, ia + d


def channel_positions(r: RankComm) -> dict[str, np.ndarray]:
    out: dict[str, list[int]] = {}
    for i, ch in enumerate(r.channel):
        out.setdefault(ch, []).append(i)
    return {ch: np.array(v, np.int64) for ch, v in out.items()}


def match(ranks: list[RankComm], offsets: dict[int, float] | None) -> tuple[list[tuple[str, dict[int, np.ndarray]]], list[str]]:
    """Per channel, per rank, the indices of its kernels that form the matched collectives (aligned
    columns: the k-th entry of every rank is one collective), and notes on what was refused."""
    notes: list[str] = []
    positions = {r.rank: channel_positions(r) for r in ranks}
    table: dict[str, int] = {}
    codes = {r.rank: np.array([table.setdefault(x, len(table)) for x in r.signature], np.int64) for r in ranks}
    by_rank = {r.rank: r for r in ranks}
    channels = sorted({ch for p in positions.values() for ch in p})
    out = []
    for ch in channels:
        present = [r for r in sorted(by_rank) if ch in positions[r]]
        if len(present) < 2:
            if len(by_rank) > 1:
                n = len(positions[present[0]][ch])
                notes.append(f"{ch} is on rank {present[0]} only of the ranks given: its {n} kernels have no partner")
            continue
        ref = present[0]
        ref_at = positions[ref][ch]
        keep = np.ones(len(ref_at), bool)
        pairs: dict[int, np.ndarray] = {}
        for other in present[1:]:
            found = pair(by_rank[ref], ref_at, by_rank[other], positions[other][ch], offsets, codes)
            if isinstance(found, str):
                notes.append(f"{ch}: rank {other}'s collectives not matched with rank {ref}'s: {found}")
                continue
            ia, ib = found
            col = np.full(len(ref_at), -1, np.int64)
            col[ia] = positions[other][ch][ib]
            pairs[other] = col
            keep &= col >= 0
        if not pairs or not keep.any():
            continue
        dropped = int((~keep).sum())
        if dropped:
            notes.append(f"{ch}: {dropped} of rank {ref}'s {len(ref_at)} kernels have no partner on every rank (left out)")
        columns = {ref: ref_at[keep]} | {o: col[keep] for o, col in pairs.items()}
        out.append((ch, columns))
    if len(notes) > MAX_CHANNEL_NOTES:  # a trace's thousands of group names are not thousands of lines
        more = len(notes) - MAX_CHANNEL_NOTES
        notes = notes[:MAX_CHANNEL_NOTES] + [f"and {more} more channels with unmatched kernels (not listed)"]
    return out, notes


def peer_waits(
    ranks: list[RankComm],
    offsets: dict[int, float],
    threshold_us: float,
    matched: list[tuple[str, dict[int, np.ndarray]]],
    zero_us: float = 0.0,
) -> PeerWaits:
    """The waits of every matched collective, and their sums per rank, step and microbatch (see the
    module's docstring). offsets: relative to zero_us, so that arrivals keep the nanosecond."""
    by_rank = {r.rank: r for r in ranks}
    ops: list[MatchedOp] = []
    kernel_wait: dict[int, tuple[list[np.ndarray], list[np.ndarray]]] = {r.rank: ([], []) for r in ranks}
    spans: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {r.rank: [] for r in ranks}
    for ch, columns in matched:
        order = sorted(columns)
        arrival = np.vstack([by_rank[r].start[columns[r]] + offsets[r] for r in order])  # ranks x ops
        kernel = np.vstack([by_rank[r].end[columns[r]] - by_rank[r].start[columns[r]] for r in order])
        last = np.argmax(arrival, axis=0)
        wait = np.clip(arrival.max(axis=0) - arrival, 0.0, kernel)
        skew = arrival.max(axis=0) - arrival.min(axis=0)
        last_rank = np.array(order)[last]
        for row, r in enumerate(order):
            kernel_wait[r][0].append(by_rank[r].gpu_index[columns[r]])
            kernel_wait[r][1].append(wait[row])
            waited = wait[row] > 0
            begin = by_rank[r].start[columns[r]][waited]
            spans[r].append((begin, begin + wait[row][waited], last_rank[waited]))
        labels = [(by_rank[r].ubatch[columns[r]], by_rank[r].step[columns[r]], by_rank[r].op_index[columns[r]]) for r in order]
        for k in range(arrival.shape[1]):
            ops.append(
                MatchedOp(
                    channel=ch,
                    position=int(k),
                    ranks=tuple(order),
                    arrival_us=tuple(arrival[:, k].tolist()),
                    kernel_us=tuple(kernel[:, k].tolist()),
                    wait_us=tuple(wait[:, k].tolist()),
                    ubatch=tuple(int(lab[0][k]) for lab in labels),
                    step=tuple(int(lab[1][k]) for lab in labels),
                    op_index=tuple(int(lab[2][k]) for lab in labels),
                    last_rank=order[int(last[k])],
                    skew_us=float(skew[k]),
                )
            )
    ops.sort(key=lambda o: min(o.arrival_us))
    totals = {r.rank: _rank_waits(r, ops, threshold_us) for r in ranks}
    kw = {
        r: (np.concatenate(ix) if ix else np.empty(0, np.int64), np.concatenate(w) if w else np.empty(0))
        for r, (ix, w) in kernel_wait.items()
    }
    steps = _groups(ops, [o.step[0] for o in ops], threshold_us)
    ubatches = _groups(ops, [o.ubatch[0] for o in ops], threshold_us)
    wait_spans = {
        r: (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts]))
        for r, parts in spans.items()
        if parts
    }
    return PeerWaits(ops, totals, kw, threshold_us, zero_us, wait_spans, steps, ubatches)


def _groups(ops: list[MatchedOp], keys: list[int], threshold_us: float) -> list[GroupWaits]:
    """The collectives grouped by key (steps or microbatches; -1, none, left out)."""
    members: dict[int, list[MatchedOp]] = {}
    for o, k in zip(ops, keys):
        if k >= 0:
            members.setdefault(k, []).append(o)
    out = []
    for k, group in sorted(members.items()):
        wait: Counter[int] = Counter()
        last: Counter[int] = Counter()
        caused: Counter[int] = Counter()
        for o in group:
            for r, w in zip(o.ranks, o.wait_us):
                wait[r] += w  # type: ignore[assignment]  # us, not counts
            if o.skew_us > threshold_us:
                last[o.last_rank] += 1
                caused[o.last_rank] += sum(o.wait_us)  # type: ignore[assignment]
        out.append(GroupWaits(k, len(group), dict(wait), dict(last), dict(caused), max(o.skew_us for o in group)))
    return out


def _rank_waits(r: RankComm, ops: list[MatchedOp], threshold_us: float) -> RankWaits:
    matched = wait = 0.0
    waited_for: Counter[int] = Counter()
    by_op: Counter[tuple[int, int]] = Counter()
    by_step: Counter[int] = Counter()
    last_ops, caused = 0, 0.0
    for o in ops:
        if r.rank not in o.ranks:
            continue
        i = o.ranks.index(r.rank)
        matched += o.kernel_us[i]
        w = o.wait_us[i]
        wait += w
        if w > 0:
            waited_for[o.last_rank] += w  # type: ignore[assignment]  # us, not counts
            by_op[(o.ubatch[i], o.op_index[i])] += w  # type: ignore[assignment]
            by_step[o.step[i]] += w  # type: ignore[assignment]
        if o.last_rank == r.rank and o.skew_us > threshold_us:
            last_ops += 1
            caused += sum(o.wait_us)
    return RankWaits(
        rank=r.rank,
        comm_us=r.comm_us,
        matched_us=matched,
        wait_us=wait,
        transfer_us=matched - wait,
        waited_for_us=dict(waited_for),
        by_op_us=dict(by_op),
        by_step_us=dict(by_step),
        last_ops=last_ops,
        caused_us=caused,
        ops_per_ubatch=int(r.op_index.max()) + 1 if len(r.op_index) and r.op_index.max() >= 0 else None,
    )
