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
        i_s, i_e = iv.intersection((a0, a1), (b0, b1))
        assert (i_e - i_s).sum() == (ga & gb).sum()
        s, e = iv.union(a0, a1)
        assert (np.diff(s) > 0).all() and (s[1:] > e[:-1]).all()
        gs, ge = iv.gaps(a0, a1)
        assert (ge - gs).sum() == (0 if n == 0 else (~ga[int(s.min()) : int(e.max())]).sum())


def test_grouped_figures_equal_one_group_at_a_time():
    """The per-step arithmetic done for all steps at once agrees with doing each step alone, on
    overlapping, nested and empty groups at the magnitudes of real trace clocks."""
    rng = np.random.default_rng(7)
    for trial in range(200):
        n, m = int(rng.integers(1, 9)), int(rng.integers(0, 80))
        g = rng.integers(-1, n, m)
        s = rng.uniform(0, 500, m) + (5.1e12 if trial % 2 else 0.0)
        e = s + rng.uniform(0, 60, m)
        want = [iv.length(s[g == k], e[g == k]) for k in range(n)]
        assert np.allclose(iv.grouped_length(g, n, s, e), want, rtol=0, atol=1e-6)
        v = rng.uniform(0, 10, m)
        want_median = [np.median(v[g == k]) if (g == k).any() else np.nan for k in range(n)]
        assert np.array_equal(iv.grouped_median(g, n, v), want_median, equal_nan=True)


def test_grouped_median_by_sorting_and_by_selection_equals_the_statistics_module(monkeypatch):
    """Both ways grouped_median takes (one sort of every value; a selection per group, for few large
    groups) give each group's median exactly as the standard library does."""
    import statistics

    rng = np.random.default_rng(11)
    for trial in range(60):
        n, m = int(rng.integers(1, 40)), int(rng.integers(0, 3000))
        g = rng.integers(-1, n, m)
        v = np.round(rng.lognormal(1, 1, m), int(rng.integers(0, 4)))  # with ties
        want = [statistics.median(v[g == k].tolist()) if (g == k).any() else np.nan for k in range(n)]
        for per_group_below in (0.0, float("inf")):
            monkeypatch.setattr(iv, "SELECT_PER_GROUP_BELOW", per_group_below)
            assert np.array_equal(iv.grouped_median(g, n, v), want, equal_nan=True), (trial, per_group_below)


def test_covered_within_against_a_grid():
    rng = np.random.default_rng(11)
    for _ in range(200):
        n, q = rng.integers(0, 12), rng.integers(1, 8)
        a0 = rng.integers(0, 180, n).astype(float)
        a1 = a0 + rng.integers(1, 30, n)
        lo = rng.integers(0, 200, q).astype(float)
        hi = lo + rng.integers(0, 50, q)
        covered = _grid(a0, a1)
        u0, u1 = iv.union(a0, a1)
        got = iv.covered_within(lo, hi, u0, u1)
        assert got.tolist() == [float(covered[int(a) : int(b)].sum()) for a, b in zip(lo, hi)]


def test_grouped_union_and_sum_are_union_and_np_sum_of_each_group_to_the_bit():
    """The operations' busy time: the same floats as intervals.length on each operation alone."""
    rng = np.random.default_rng(5)
    for _ in range(100):
        n = int(rng.integers(1, 300))
        group = rng.integers(0, 12, n)
        start = rng.random(n) * 1e7 + 5e12  # trace-clock magnitudes: the sums round
        end = start + rng.random(n) * rng.choice([10.0, 1e4])
        g, s, e = iv.grouped_union(group, start, end)
        heads = iv.run_firsts(g)
        sums = iv.grouped_sum(heads, e - s)
        for k, key in enumerate(g[heads]):
            mine = group == key
            u0, u1 = iv.union(start[mine], end[mine])
            part = slice(heads[k], heads[k + 1] if k + 1 < len(heads) else len(g))
            assert s[part].tolist() == u0.tolist() and e[part].tolist() == u1.tolist()
            assert sums[k] == iv.length(start[mine], end[mine])


def test_index_groups_are_the_masks():
    keys = np.array([3, 1, 3, 2, 1, 3])
    among = np.array([0, 2, 3, 5])
    assert {k: v.tolist() for k, v in iv.index_groups(keys).items()} == {1: [1, 4], 2: [3], 3: [0, 2, 5]}
    assert {k: v.tolist() for k, v in iv.index_groups(keys, among).items()} == {2: [3], 3: [0, 2, 5]}
    assert iv.index_groups(np.empty(0, np.int64)) == {}
