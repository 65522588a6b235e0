"""Cross-rank matching on hostile Kineto args: process-group names by the thousand (each a channel
on one rank only) give a bounded number of notes, not a line per name."""

import numpy as np

from dbo_trace.analysis.cross_rank.collective_waits import RankComm, match


def _rank(rank, channels):
    n = len(channels)
    start = np.arange(n) * 100.0
    ones = np.full(n, -1, np.int64)
    return RankComm(
        rank, np.arange(n), start, start + 50, channels, ["nccl x"] * n, ones, np.zeros(n, bool), ones, ones, ones, ones, 50.0 * n
    )


def test_thousands_of_unmatched_group_names_give_a_bounded_list_of_notes():
    ranks = [_rank(r, [f"group pg{r}-{k}" for k in range(5_000)]) for r in (0, 1)]
    matched, notes = match(ranks, None)
    assert matched == []
    assert len(notes) <= 10
    assert notes[-1].startswith("and 9992 more channels")
    assert "group pg0-0 is on rank 0 only" in notes[0]


def test_a_few_unmatched_channels_are_all_listed():
    ranks = [_rank(0, ["group a", "group b"]), _rank(1, ["group c"])]
    _matched, notes = match(ranks, None)
    assert len(notes) == 3 and all("only of the ranks given" in n for n in notes)
