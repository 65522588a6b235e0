"""The cross-rank view: the k-th step of every rank side by side on one clock, and who waited for whom.

In DBO with data/expert parallelism every step ends in collectives, so a rank
that starts a step late makes the others wait at their first all-to-all; that
wait shows up on them as exposed communication. The ranks are put on one clock
(analysis/clocks.py), their collectives matched and each one's wait measured
(analysis/peers.py). A skew counts as a straggler only above a threshold: a share
of the step time and a multiple of the alignment's accuracy. Pure: each rank's
step starts on that clock in, a CrossRank out.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from dbo_trace.analysis.clocks import Alignment
from dbo_trace.analysis.peers import GroupWaits, PeerWaits

STRAGGLER_STEP_SHARE = 0.02  # a skew under 2% of the median step is not a straggler
STRAGGLER_ACCURACY_TIMES = 3.0  # nor one under 3x what the clocks can tell apart


def straggler_threshold(median_step_us: float | None, accuracy_us: float | None) -> float:
    return max(STRAGGLER_STEP_SHARE * (median_step_us or 0.0), STRAGGLER_ACCURACY_TIMES * (accuracy_us or 0.0))


@dataclass(frozen=True)
class RankOnClock:
    """What the cross-rank view needs of a rank."""

    rank: int
    step_starts_us: list[float] | None  # on the shared clock; None: no steps or no clock
    exposed_comm_us: float


@dataclass(frozen=True)
class StepAlignment:
    position: int  # the k-th reported step of each rank
    starts_us: dict[int, float]  # rank -> start on the shared clock (us)
    skew_us: float  # latest start - earliest start
    last_rank: int  # the rank the others wait for
    straggler: bool = False  # the skew is above the threshold: a straggler, not noise


@dataclass(frozen=True)
class CrossRank:
    ranks: list[int]
    steps: list[StepAlignment]
    median_skew_us: float
    max_skew_us: float
    last_counts: dict[int, int]  # rank -> steps it started last
    exposed_comm_us: dict[int, float]  # rank -> comm not under compute (where waiting for peers shows)
    notes: list[str] = field(default_factory=list)
    alignment: Alignment | None = None
    threshold_us: float = 0.0  # skews above it are a straggler
    median_step_us: float | None = None
    late_counts: dict[int, int] = field(default_factory=dict)  # rank -> steps it started last by more than the threshold
    waits: PeerWaits | None = None  # matched collectives and their waits; None: none matched
    layers: int | None = None  # to name comm operations dispatch and combine

    @property
    def lines(self) -> list[str]:
        return wait_lines(self, self.layers)

    def shift_us(self, rank: int) -> float:
        """What to add to a rank's trace clock to draw every rank on one time axis (the shared clock
        less its earliest offset, so the numbers stay small); 0 where the ranks are not aligned."""
        a = self.alignment
        if a is None or not a.offset_us or rank not in a.offset_us:
            return 0.0
        return a.offset_us[rank] - min(a.offset_us.values())

    @property
    def summary(self) -> str:
        """One line: who the others wait for, and by how much (a straggler only above the threshold)."""
        if not self.steps:
            return "ranks not set side by side: " + (self.notes[0] if self.notes else "no steps on a shared clock")
        skew = f"skew median {self.median_skew_us / 1000:.2f} ms, max {self.max_skew_us / 1000:.2f} ms"
        most_exposed = max(self.exposed_comm_us, key=self.exposed_comm_us.__getitem__)
        exposed = f"most exposed comm on rank {most_exposed} ({self.exposed_comm_us[most_exposed] / 1000:.2f} ms)"
        if not self.late_counts:
            return (
                f"no straggler: the ranks started every step within {self.max_skew_us / 1000:.2f} ms of each other, "
                f"under the {self.threshold_us / 1000:.2f} ms threshold ({threshold_basis(self)}); {exposed}"
            )
        rank, times = max(self.late_counts.items(), key=lambda kv: kv[1])
        return (
            f"rank {rank} started last by more than {self.threshold_us / 1000:.2f} ms in {times} of {len(self.steps)} "
            f"steps ({skew}): the others wait for it at their first collective; {exposed}"
        )


def threshold_basis(view: CrossRank) -> str:
    accuracy = view.alignment.accuracy_us if view.alignment is not None else None
    parts = []
    if view.median_step_us:
        parts.append(f"{STRAGGLER_STEP_SHARE:.0%} of the {view.median_step_us / 1000:.2f} ms median step")
    if accuracy:
        parts.append(f"{STRAGGLER_ACCURACY_TIMES:g}x the clocks' {accuracy:g} us accuracy")
    return "the larger of " + " and ".join(parts) if len(parts) > 1 else (parts[0] if parts else "none")


def cross_rank(
    ranks: list[RankOnClock],
    alignment: Alignment | None = None,
    waits: PeerWaits | None = None,
    notes: list[str] | None = None,
    layers: int | None = None,
    *,
    median_step_us: float | None = None,
    threshold_us: float = 0.0,
) -> CrossRank | None:
    """None with fewer than two ranks or steps on too few ranks; notes say why ranks were left out.
    median_step_us: of every rank's steps; threshold_us: straggler_threshold of it and the alignment's
    accuracy, the one the collectives' waits were measured against (report.across_ranks)."""
    usable = [(r.rank, r.step_starts_us, r.exposed_comm_us) for r in ranks if r.step_starts_us]
    notes = list(notes or [])
    if len(ranks) < 2:
        return None
    if len(usable) < 2:  # said, never a silent null
        if alignment is not None and alignment.note and alignment.note not in notes:
            notes.insert(0, alignment.note)
        if not notes:
            notes.append("fewer than two ranks have reported steps: their steps cannot be set side by side")
        return CrossRank([r.rank for r in ranks], [], 0.0, 0.0, {}, {r.rank: r.exposed_comm_us for r in ranks}, notes,
                         alignment, 0.0, None, {}, waits, layers)  # fmt: skip
    if len(usable) < len(ranks):
        notes.append(f"{len(ranks) - len(usable)} rank(s) left out: no steps or no clock to align them on")
    count = min(len(starts) for _, starts, _ in usable)
    if any(len(starts) != count for _, starts, _ in usable):
        notes.append(
            f"ranks reported different step counts ({', '.join(str(len(starts)) for _, starts, _ in usable)}); "
            f"the first {count} of each are aligned"
        )
    steps = []
    for k in range(count):
        at = {rank: starts[k] for rank, starts, _ in usable}
        first, last = min(at.values()), max(at.values())
        steps.append(StepAlignment(k, at, last - first, max(at, key=at.__getitem__), straggler=last - first > threshold_us))
    skews = np.array([s.skew_us for s in steps])
    return CrossRank(
        ranks=[rank for rank, _, _ in usable],
        steps=steps,
        median_skew_us=float(np.median(skews)),
        max_skew_us=float(skews.max()),
        last_counts=dict(Counter(s.last_rank for s in steps)),
        exposed_comm_us={rank: exposed for rank, _, exposed in usable},
        notes=notes,
        alignment=alignment,
        threshold_us=threshold_us,
        median_step_us=median_step_us,
        late_counts=dict(Counter(s.last_rank for s in steps if s.straggler)),
        waits=waits,
        layers=layers,
    )


def _share(x: float) -> str:
    return "under 1%" if 0 < x < 0.005 else f"{x:.0%}"


def op_label(ubatch: int, index: int, layers: int | None, ops_per_ubatch: int | None) -> str:
    """A comm operation by microbatch and place in the step: with DBO, dispatch and combine per layer."""
    who = f"microbatch {ubatch}'s " if ubatch >= 0 else ""
    if index < 0:
        return f"{who}comm outside steps"
    if layers and ops_per_ubatch == 2 * layers:
        return f"{who}{'dispatch' if index % 2 == 0 else 'combine'} of layer {index // 2}"
    return f"{who}comm op {index + 1} of the step"


def wait_lines(view: CrossRank, layers: int | None = None) -> list[str]:
    """Who waited for whom, per rank, and who arrived last (docs/analysis.md, "Across ranks")."""
    w = view.waits
    if w is None:
        return []
    out = []
    waiting = [r for r in w.ranks.values() if r.wait_us > 0 and r.waited_for_us]
    shown = sorted(sorted(waiting, key=lambda x: (-x.wait_us, x.rank))[:MAX_WAIT_LINES], key=lambda x: x.rank)
    for r in shown:
        top, top_at = r.most_waited_for, r.most_waited_at
        assert top is not None and top_at is not None  # a wait is counted under both
        (peer, us), ((ub, k), at) = top, top_at
        share = f" ({_share(r.wait_share)} of its comm time)" if r.wait_share is not None else ""
        n_others = len(r.waited_for_us) - 1
        whom = f"for rank {peer}"
        if n_others:
            whom = f"for peers: rank {peer} {us / 1000:.2f} ms, {n_others} other rank(s) {(r.wait_us - us) / 1000:.2f} ms in all"
        out.append(
            f"rank {r.rank} waited {r.wait_us / 1000:.2f} ms{share} {whom}, "
            f"mostly at {op_label(ub, k, layers, r.ops_per_ubatch)} ({at / 1000:.2f} ms); transfer {r.transfer_us / 1000:.2f} ms"
        )
    if len(waiting) > len(shown):
        rest = [r for r in waiting if r not in shown]
        out.append(
            f"{len(rest)} more rank(s) waited {sum(r.wait_us for r in rest) / 1000:.2f} ms in all, at most "
            f"{max(r.wait_us for r in rest) / 1000:.2f} ms (the JSON lists every rank)"
        )
    late = sorted((r for r in w.ranks.values() if r.last_ops), key=lambda r: (-r.last_ops, r.rank))
    if late:
        parts = [
            f"rank {r.rank} at {r.last_ops} of {len(w.ops)} collectives (the others waited {r.caused_us / 1000:.2f} ms there)"
            for r in late
        ]
        out.append(f"arrived last by more than {w.threshold_us / 1000:.2f} ms: " + ", ".join(parts))
        most = w.held_back_most
        if most is not None:
            rank, ub, us, n, of = most
            who = f"rank {rank}'s microbatch {ub}" if ub >= 0 else f"rank {rank}"
            out.append(
                f"held the others back most: {who}, last above the threshold at {n} of its {of} collectives, "
                f"the others waiting {us / 1000:.2f} ms for it there"
            )
        title = "per step (numbered from 1 in report order), who arrived last (what the others waited for it)"
        out += _group_lines(w.steps, title, lambda k: f"step {k + 1}", MAX_STEP_GROUPS)
        out += _group_lines(w.ubatches, "per microbatch, likewise", lambda k: f"microbatch {k}", MAX_STEP_GROUPS)
    else:
        out.append(
            f"no rank arrived last at any of {len(w.ops)} matched collectives by more than "
            f"{w.threshold_us / 1000:.2f} ms (the threshold)"
        )
    return out


MAX_STEP_GROUPS = 8
MAX_WAIT_LINES = 4  # ranks that waited most, one line each


def _group_lines(groups: list[GroupWaits], title: str, name: Callable[[int], str], most: int) -> list[str]:
    """Who held the others back in each step or microbatch (above the threshold), most first."""
    parts = []
    for g in groups:
        ranked = sorted(g.caused_us, key=lambda r: (-g.caused_us[r], r))
        if not ranked:
            parts.append(f"{name(g.key)}: none")
            continue
        who = ", ".join(f"rank {r} at {g.last_ops[r]} of {g.ops} ({g.caused_us[r] / 1000:.2f} ms)" for r in ranked)
        parts.append(f"{name(g.key)}: {who}")
    if not parts or all(p.endswith(": none") for p in parts):
        return []
    more = f"; {len(parts) - most} more in the JSON" if len(parts) > most else ""
    return [f"{title}: " + "; ".join(parts[:most]) + more]
