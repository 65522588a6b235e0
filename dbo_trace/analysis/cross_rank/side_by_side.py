"""The cross-rank view: the k-th step of every rank side by side on one clock, and who waited for whom.

In DBO with data/expert parallelism every step ends in collectives, so a rank
that starts a step late makes the others wait at their first all-to-all; that
wait shows up on them as exposed communication. The ranks are put on one clock
(analysis/cross_rank/clocks.py), their collectives matched and each one's wait measured
(analysis/cross_rank/collective_waits.py). A skew counts as a straggler only above a threshold: a share
of the step time and a multiple of the alignment's accuracy. Pure: each rank's
step starts on that clock in, a CrossRank out.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from dbo_trace.analysis.cross_rank.clocks import Alignment
from dbo_trace.analysis.cross_rank.collective_waits import PeerWaits, RankWaits

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
    skew_us: float  # latest start - earliest start
    last_rank: int  # the rank the others wait for
    starts_us: dict[int, float]  # rank -> start on the shared clock (us)
    straggler: bool = False  # the skew is above the threshold: a straggler, not noise


@dataclass(frozen=True)
class RanksLeftOut:
    """Ranks left out of the view: no steps, or no clock to align them on."""

    count: int


@dataclass(frozen=True)
class StepCounts:
    """The ranks reported different step counts: the first `aligned` of each are set side by side."""

    counts: tuple[int, ...]  # each usable rank's, in rank order
    aligned: int


@dataclass(frozen=True)
class TooFewRanks:
    """Fewer than two ranks have reported steps: none can be set side by side."""


# A note of the view: typed where it states the view's own figures (render/words/notes.py words it), a
# string where it passes on what the clocks or the collectives' matching said.
CrossNote = str | RanksLeftOut | StepCounts | TooFewRanks


@dataclass(frozen=True)
class CrossRank:
    ranks: list[int]
    steps: list[StepAlignment]
    median_skew_us: float
    max_skew_us: float
    last_counts: dict[int, int]  # rank -> steps it started last
    exposed_comm_us: dict[int, float]  # rank -> comm not under compute (where waiting for peers shows)
    notes: list[CrossNote] = field(default_factory=list)
    alignment: Alignment | None = None
    threshold_us: float = 0.0  # skews above it are a straggler
    median_step_us: float | None = None
    late_counts: dict[int, int] = field(default_factory=dict)  # rank -> steps it started last by more than the threshold
    waits: PeerWaits | None = None  # matched collectives and their waits; None: none matched
    layers: int | None = None  # to name comm operations dispatch and combine

    def shift_us(self, rank: int) -> float:
        """What to add to a rank's trace clock to draw every rank on one time axis (the shared clock
        less its earliest offset, so the numbers stay small); 0 where the ranks are not aligned."""
        a = self.alignment
        if a is None or not a.offset_us or rank not in a.offset_us:
            return 0.0
        return a.offset_us[rank] - min(a.offset_us.values())


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
    said: list[CrossNote] = list(notes or [])
    if len(ranks) < 2:
        return None
    if len(usable) < 2:  # said, never a silent null
        if alignment is not None and alignment.note and alignment.note not in said:
            said.insert(0, alignment.note)
        if not said:
            said.append(TooFewRanks())
        return CrossRank([r.rank for r in ranks], [], 0.0, 0.0, {}, {r.rank: r.exposed_comm_us for r in ranks}, said,
                         alignment, 0.0, None, {}, waits, layers)  # fmt: skip
    if len(usable) < len(ranks):
        said.append(RanksLeftOut(len(ranks) - len(usable)))
    count = min(len(starts) for _, starts, _ in usable)
    if any(len(starts) != count for _, starts, _ in usable):
        said.append(StepCounts(tuple(len(starts) for _, starts, _ in usable), count))
    steps = []
    for k in range(count):
        at = {rank: starts[k] for rank, starts, _ in usable}
        first, last = min(at.values()), max(at.values())
        steps.append(StepAlignment(k, last - first, max(at, key=at.__getitem__), at, straggler=last - first > threshold_us))
    skews = np.array([s.skew_us for s in steps])
    return CrossRank(
        ranks=[rank for rank, _, _ in usable],
        steps=steps,
        median_skew_us=float(np.median(skews)),
        max_skew_us=float(skews.max()),
        last_counts=dict(Counter(s.last_rank for s in steps)),
        exposed_comm_us={rank: exposed for rank, _, exposed in usable},
        notes=said,
        alignment=alignment,
        threshold_us=threshold_us,
        median_step_us=median_step_us,
        late_counts=dict(Counter(s.last_rank for s in steps if s.straggler)),
        waits=waits,
        layers=layers,
    )


OUTSIDE, DISPATCH, COMBINE, OP = "outside", "dispatch", "combine", "op"


def op_place(index: int, layers: int | None, ops_per_ubatch: int | None) -> tuple[str, int]:
    """A comm operation's place in the step: with DBO, (DISPATCH or COMBINE, its layer) where the
    microbatch ran two per layer, else (OP, its number from 1); (OUTSIDE, -1) outside steps."""
    if index < 0:
        return OUTSIDE, -1
    if layers and ops_per_ubatch == 2 * layers:
        return (DISPATCH if index % 2 == 0 else COMBINE), index // 2
    return OP, index + 1


MAX_WAIT_LINES = 4  # ranks that waited most, one line each


@dataclass(frozen=True)
class WaitingRanks:
    """The ranks that waited for a peer: the MAX_WAIT_LINES that waited most (in rank order), and
    the others together (how many, their waits added, the longest)."""

    shown: list[RankWaits]
    rest: int
    rest_us: float
    rest_max_us: float


def waiting_ranks(w: PeerWaits) -> WaitingRanks:
    waiting = [r for r in w.ranks.values() if r.wait_us > 0 and r.waited_for_us]
    shown = sorted(sorted(waiting, key=lambda x: (-x.wait_us, x.rank))[:MAX_WAIT_LINES], key=lambda x: x.rank)
    rest = [r for r in waiting if r not in shown]
    return WaitingRanks(shown, len(rest), sum(r.wait_us for r in rest), max(r.wait_us for r in rest) if rest else 0.0)
