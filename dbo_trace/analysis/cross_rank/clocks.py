"""Putting the ranks' traces on one clock, from what they have, in this order:

1. `baseTimeNanoseconds`: Kineto's ts + baseTimeNanoseconds / 1000 is time.time_ns() / 1000;
2. ts already on that clock (older Kineto wrote epoch microseconds, ~1.6e15-1.9e15);
3. the event log's time_ns: its step begins paired with the trace's own steps (markers);
4. a shared anchor: the end of the first collective matched across ranks, which NCCL makes nearly
   simultaneous on every rank.

The first three put every rank on the epoch clock (and may be mixed, rank by rank); the anchor is
used for all ranks when any rank has none of them. Pure: clues in, an Alignment out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dbo_trace.trace.timeline import EPOCH_HI_US, EPOCH_LO_US

BASE_TIME = "baseTimeNanoseconds"
EPOCH_TS = "ts on the epoch clock"
EVENT_LOG = "event log time_ns"
ANCHOR = "first matched collective's end"

# Expected accuracy of each method (us). One host's processes share time.time_ns(), and CUPTI maps
# GPU timestamps onto that clock to within about a microsecond; a few for good measure. Ranks on
# different hosts are only as aligned as the hosts' clocks (NTP: 0.1-10 ms), which no trace says.
CLOCK_ACCURACY_US = 5.0
ANCHOR_ACCURACY_US = 10.0  # NCCL's ends on the ranks of one collective: within ~10 us on one host

LOG_MIN_STEPS = 2
LOG_MAX_SPREAD_US = 200.0  # paired step begins that scatter more than this are not a clock


@dataclass(frozen=True)
class RankClue:
    """What a rank's trace offers for its clock."""

    rank: int
    base_time_ns: int | None
    first_ts_us: float | None  # the earliest event's ts (trace clock)
    log_step_begins_ns: np.ndarray | None = None  # the event log's step_begin times (time.time_ns)
    marker_step_starts_us: np.ndarray | None = None  # the trace's own steps (markers), trace clock


@dataclass(frozen=True)
class Alignment:
    method: str | None  # None: not aligned (note says why); "mixed" names each rank's in per_rank
    per_rank: dict[int, str]  # rank -> method
    accuracy_us: float | None  # expected error of one rank against another
    offset_us: dict[int, float]  # rank -> add to its trace clock for the shared clock
    note: str | None = None

    @property
    def aligned(self) -> bool:
        return self.method is not None


def epoch_offset(clue: RankClue) -> tuple[str, float, float] | None:
    """(method, offset, accuracy) putting this rank on the epoch clock by itself, or None."""
    if clue.base_time_ns is not None:
        return BASE_TIME, clue.base_time_ns / 1000.0, CLOCK_ACCURACY_US
    if clue.first_ts_us is not None and EPOCH_LO_US <= clue.first_ts_us <= EPOCH_HI_US:
        return EPOCH_TS, 0.0, CLOCK_ACCURACY_US
    log, marks = clue.log_step_begins_ns, clue.marker_step_starts_us
    if log is not None and marks is not None and min(len(log), len(marks)) >= LOG_MIN_STEPS:
        found = log_offset(np.sort(log) / 1000.0, np.sort(marks))
        if found is not None:
            return EVENT_LOG, found[0], max(CLOCK_ACCURACY_US, found[1])
    return None


def log_offset(log_us: np.ndarray, marks_us: np.ndarray) -> tuple[float, float] | None:
    """(offset, spread): the log's step begins (epoch us) paired with the trace's marker steps, the
    marks being a run of consecutive logged steps (the profiler saw some of them): of every way to
    line them up, the one whose differences scatter least (median absolute deviation). None where
    even that scatters more than LOG_MAX_SPREAD_US."""
    n = min(len(log_us), len(marks_us))
    best: tuple[float, float] | None = None
    for shift in range(len(log_us) - n + 1):
        for start in range(len(marks_us) - n + 1):
            diff = log_us[shift : shift + n] - marks_us[start : start + n]
            offset = float(np.median(diff))
            spread = float(np.median(np.abs(diff - offset)))
            if best is None or spread < best[1]:
                best = (offset, spread)
    return best if best is not None and best[1] <= LOG_MAX_SPREAD_US else None


def align_on_epoch(clues: list[RankClue]) -> tuple[Alignment | None, list[int]]:
    """Every rank on the epoch clock by its own means, or None and the ranks that have none."""
    found = {c.rank: epoch_offset(c) for c in clues}
    missing = [r for r, f in found.items() if f is None]
    if missing:
        return None, missing
    per = {r: f[0] for r, f in found.items() if f is not None}
    methods = set(per.values())
    return (
        Alignment(
            method=methods.pop() if len(methods) == 1 else "mixed",
            offset_us={r: f[1] for r, f in found.items() if f is not None},
            accuracy_us=max(f[2] for f in found.values() if f is not None),
            per_rank=per,
        ),
        [],
    )


def align_on_anchor(first_end_us: dict[int, float], missing: list[int]) -> Alignment:
    """The last resort: each rank's first matched collective ends at the same instant as rank 0's
    (the lowest rank's). first_end_us: rank -> that end on its own trace clock."""
    if len(first_end_us) < 2:
        return Alignment(
            None,
            {},
            None,
            {},
            note=f"rank(s) {', '.join(map(str, missing))} have no baseTimeNanoseconds, no epoch ts and no event log "
            "to align on, and no collective could be matched across ranks to anchor them; ranks not aligned",
        )
    ref = min(first_end_us)
    return Alignment(
        method=ANCHOR,
        offset_us={r: first_end_us[ref] - t for r, t in first_end_us.items()},
        accuracy_us=ANCHOR_ACCURACY_US,
        per_rank={r: ANCHOR for r in first_end_us},
        note=f"rank(s) {', '.join(map(str, missing))} have no clock base (baseTimeNanoseconds, epoch ts, event log): "
        "all ranks aligned on the end of their first matched collective",
    )
