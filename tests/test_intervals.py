"""Interval arithmetic against brute force on a fine grid."""

import numpy as np

from dbo_trace.analysis import intervals as iv


def _grid(start, end, lo=0, hi=256):
    t = np.arange(lo, hi) + 0.5
    return ((t[:, None] >= start) & (t[:, None] < end)).any(axis=1)


def test_random_sets_against_a_grid():
    rng = np.random.default_rng(7)
    for _ in range(200):
        n, m = rng.integers(0, 12, size=2)
        a0 = rng.integers(0, 180, n).astype(float)
        a1 = a0 + rng.integers(1, 30, n)
        b0 = rng.integers(0, 180, m).astype(float)
        b1 = b0 + rng.integers(1, 30, m)
        ga, gb = _grid(a0, a1), _grid(b0, b1)
        assert iv.length(a0, a1) == ga.sum()
        assert iv.overlap_length((a0, a1), (b0, b1)) == (ga & gb).sum()
        s, e = iv.union(a0, a1)
        assert (np.diff(s) > 0).all() and (s[1:] > e[:-1]).all()
        gs, ge = iv.gaps(a0, a1)
        assert (ge - gs).sum() == (0 if n == 0 else (~ga[int(s.min()) : int(e.max())]).sum())


def test_clip():
    s, e = iv.clip(np.array([0.0, 5, 20]), np.array([10.0, 8, 30]), 6, 25)
    assert s.tolist() == [6, 6, 20] and e.tolist() == [10, 8, 25]
