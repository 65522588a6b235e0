"""The cross-rank view: the k-th step of every rank side by side on one clock.

In DBO with data/expert parallelism every step ends in collectives, so a rank
that starts a step late makes the others wait at their first all-to-all; that
wait shows up on them as exposed communication. Traces of one host share the
clock time.time_ns() (Kineto's ts + baseTimeNanoseconds/1000), so starts are
comparable across processes. Pure: each rank's step starts on that clock in, a CrossRank out.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class RankOnClock:
    """What the cross-rank view needs of a rank."""

    rank: int
    step_starts_us: list[float] | None  # on the shared time.time_ns clock; None: no steps or no clock base
    exposed_comm_us: float


@dataclass
class StepAlignment:
    position: int  # the k-th reported step of each rank
    starts_us: dict[int, float]  # rank -> start on the shared clock (us)
    skew_us: float  # latest start - earliest start
    last_rank: int  # the rank the others wait for


@dataclass
class CrossRank:
    ranks: list[int]
    steps: list[StepAlignment]
    median_skew_us: float
    max_skew_us: float
    last_counts: dict[int, int]  # rank -> steps it started last
    exposed_comm_us: dict[int, float]  # rank -> comm not under compute (where waiting for peers shows)
    notes: list[str] = field(default_factory=list)

    @property
    def summary(self) -> str:
        """One line: who the others wait for, and by how much."""
        rank, times = max(self.last_counts.items(), key=lambda kv: kv[1])
        most_exposed = max(self.exposed_comm_us, key=self.exposed_comm_us.__getitem__)
        return (
            f"rank {rank} started last in {times} of {len(self.steps)} steps (skew median {self.median_skew_us / 1000:.2f} "
            f"ms, max {self.max_skew_us / 1000:.2f} ms): the others wait for it at their first collective; "
            f"most exposed comm on rank {most_exposed} ({self.exposed_comm_us[most_exposed] / 1000:.2f} ms)"
        )


def cross_rank(ranks: list[RankOnClock]) -> CrossRank | None:
    """None with fewer than two ranks, or when a trace has no clock base to align on."""
    usable = [(r.rank, r.step_starts_us, r.exposed_comm_us) for r in ranks if r.step_starts_us]
    if len(usable) < 2:
        return None
    notes = []
    if len(usable) < len(ranks):
        notes.append(f"{len(ranks) - len(usable)} rank(s) left out: no steps or no baseTimeNanoseconds to align on")
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
        steps.append(StepAlignment(k, at, last - first, max(at, key=at.__getitem__)))
    skews = np.array([s.skew_us for s in steps])
    return CrossRank(
        ranks=[rank for rank, _, _ in usable],
        steps=steps,
        median_skew_us=float(np.median(skews)),
        max_skew_us=float(skews.max()),
        last_counts=dict(Counter(s.last_rank for s in steps)),
        exposed_comm_us={rank: exposed for rank, _, exposed in usable},
        notes=notes,
    )
