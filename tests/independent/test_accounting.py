"""The accounting model on the worked example of docs/analysis.md, computed by hand there."""

import numpy as np
import pytest

from dbo_trace.analysis import classify as c
from dbo_trace.analysis.accounting import B_COMM, B_COMPUTE, B_HOST, partition

MS = 1000.0
# compute 2-4 ms (launched 0.5), comm 3-5 ms (launched 1), compute 8-9 ms (launched 7); window 0-10 ms.
START = np.array([2, 3, 8]) * MS
END = np.array([4, 5, 9]) * MS
KIND = np.array([c.COMPUTE, c.COMM, c.COMPUTE])
LAUNCH = np.array([0.5, 1, 7]) * MS


def test_worked_example_buckets():
    part = partition(lo=0.0, hi=10 * MS, start=START, end=END, kind=KIND, launch_start=LAUNCH)
    row = part.measure(np.array([0.0]), np.array([10 * MS]))[0]
    assert row.tolist() == pytest.approx([3 * MS, 1 * MS, 0, 6 * MS, 0])
    step = part.measure(np.array([0.0]), np.array([6 * MS]))[0]
    assert step[B_HOST] / (6 * MS) == pytest.approx(0.5)
    assert part.host_gaps_in(np.array([0.0]), np.array([10 * MS])) == (3, 3)
    hs, he = part.spans(B_HOST, 0.0, 10 * MS)
    assert list(zip(hs / MS, he / MS)) == [(0, 2), (5, 8), (9, 10)]


def test_queued_work_is_not_host_idle():
    """The 8 ms kernel launched at 4.5 ms, before the GPU went idle at 5: waiting on a dependency."""
    part = partition(lo=0.0, hi=9 * MS, start=START, end=END, kind=KIND, launch_start=np.array([0.5, 1, 4.5]) * MS)
    row = part.measure(np.array([0.0]), np.array([9 * MS]))[0]
    assert row[B_HOST] == pytest.approx(2 * MS) and row[4] == pytest.approx(3 * MS)


def test_unions_count_overlapping_windows_once():
    part = partition(lo=0.0, hi=10 * MS, start=START, end=END, kind=KIND, launch_start=LAUNCH)
    both = part.measure_union(np.array([0.0, 1 * MS]), np.array([4 * MS, 6 * MS]))
    assert both.sum() == pytest.approx(6 * MS)
    assert both[B_COMPUTE] == pytest.approx(2 * MS) and both[B_COMM] == pytest.approx(1 * MS)
