"""Interval arithmetic on numpy arrays of [start, end) pairs (microseconds)."""

from __future__ import annotations

import numpy as np


def union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge possibly overlapping intervals into sorted disjoint ones."""
    if len(start) == 0:
        return np.empty(0), np.empty(0)
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    running_end = np.maximum.accumulate(e)
    # A new merged interval begins where the start lies beyond every earlier end.
    begins = np.empty(len(s), bool)
    begins[0] = True
    begins[1:] = s[1:] > running_end[:-1]
    idx = np.flatnonzero(begins)
    ends = running_end[np.r_[idx[1:] - 1, len(s) - 1]]
    return s[idx], ends


def length(start: np.ndarray, end: np.ndarray) -> float:
    """Total time covered (overlaps counted once)."""
    s, e = union(start, end)
    return float(np.sum(e - s))


def gaps(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Idle gaps between the merged intervals (not before the first or after the last)."""
    s, e = union(start, end)
    return e[:-1], s[1:]


def intersection(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint intervals covered by both sets."""
    a_s, a_e = union(*a)
    b_s, b_e = union(*b)
    if not len(a_s) or not len(b_s):
        return np.empty(0), np.empty(0)
    # Every pair's overlap; both lists are disjoint and sorted, so the pairs that overlap are few (at
    # most len(a) + len(b)): a's k-th interval meets b's i[k] to j[k], listed k by k, then m by m.
    i = np.searchsorted(b_e, a_s, side="right")
    j = np.searchsorted(b_s, a_e, side="left")
    count = np.maximum(j - i, 0)
    k = np.repeat(np.arange(len(a_s)), count)
    m = np.arange(len(k)) - np.repeat(np.cumsum(count) - count - i, count)
    # Python's max and min, as a loop over the pairs took them: the second only where it is strictly
    # larger (smaller), so a tie keeps the first's value (its sign, where 0.0 meets -0.0)
    s = np.where(b_s[m] > a_s[k], b_s[m], a_s[k])
    e = np.where(b_e[m] < a_e[k], b_e[m], a_e[k])
    keep = e > s
    return s[keep].astype(float), e[keep].astype(float)


def difference(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint intervals covered by a and not by b."""
    a_s, a_e = union(*a)
    b_s, b_e = union(*b)
    starts, ends = [], []
    j = 0
    for s, e in zip(a_s, a_e):
        while j < len(b_s) and b_e[j] <= s:
            j += 1
        cursor, k = s, j
        while k < len(b_s) and b_s[k] < e:
            if b_s[k] > cursor:
                starts.append(cursor)
                ends.append(b_s[k])
            cursor = max(cursor, b_e[k])
            k += 1
        if cursor < e:
            starts.append(cursor)
            ends.append(e)
    return np.array(starts, float), np.array(ends, float)


def run_firsts(ascending: np.ndarray) -> np.ndarray:
    """Where each run of equal values of a sorted array begins: np.unique's return_index, without
    its sort (ascending[run_firsts(ascending)] are the distinct values)."""
    if not len(ascending):
        return np.empty(0, np.intp)
    return np.flatnonzero(np.r_[True, ascending[1:] != ascending[:-1]])


def index_groups(keys: np.ndarray, among: np.ndarray | None = None) -> dict[int, np.ndarray]:
    """Key -> the positions (ascending) holding it, among the ascending positions `among` (all where
    None): one stable sort, instead of a mask over every position per key."""
    at = np.arange(len(keys)) if among is None else among
    order = at[np.argsort(keys[at], kind="stable")]
    sorted_keys = keys[order]
    heads = run_firsts(sorted_keys)
    return {int(k): part for k, part in zip(sorted_keys[heads].tolist(), np.split(order, heads[1:]))}


# -- the same arithmetic for many groups at once (per step), without a Python loop over groups ----------
def covered_within(lo: np.ndarray, hi: np.ndarray, u_start: np.ndarray, u_end: np.ndarray) -> np.ndarray:
    """For each [lo, hi], the time covered by the disjoint sorted intervals (u_start, u_end): by prefix
    sums of covered length, so that many queries against one union cost a search each, not a scan."""
    if not len(u_start):
        return np.zeros(len(lo))
    cum = np.r_[0.0, np.cumsum(u_end - u_start)]

    def upto(t: np.ndarray) -> np.ndarray:  # covered time in (-inf, t]
        i = np.searchsorted(u_start, t, side="right")  # intervals starting at or before t
        full = cum[np.maximum(i - 1, 0)]
        last = np.where(i > 0, np.minimum(t, u_end[np.maximum(i - 1, 0)]) - u_start[np.maximum(i - 1, 0)], 0.0)
        covered: np.ndarray = np.where(i > 0, full + np.maximum(last, 0.0), 0.0)
        return covered

    inside: np.ndarray = upto(hi) - upto(lo)
    return inside


def grouped_union(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group, union() of its intervals, for every group at once: (group, start, end) of the merged
    intervals, sorted by group then start. The same values as union() on each group alone (no
    shifting): the running maximum of the ends restarts at each group by working on the ends' ranks,
    offset per group, which are integers."""
    if not len(group):
        return np.empty(0, np.int64), np.empty(0), np.empty(0)
    order = np.lexsort((start, group))  # stable: ties keep index order, as union's argsort does
    g, s, e = group[order], start[order], end[order]
    heads = run_firsts(g)
    which = np.repeat(np.arange(len(heads), dtype=np.int64), np.diff(np.r_[heads, len(g)]))
    ends_sorted = np.sort(e)
    offset = which * len(e)
    running_end = ends_sorted[np.maximum.accumulate(np.searchsorted(ends_sorted, e) + offset) - offset]
    begins = np.r_[True, s[1:] > running_end[:-1]]
    begins[heads] = True
    idx = np.flatnonzero(begins)
    return g[idx], s[idx], running_end[np.r_[idx[1:] - 1, len(s) - 1]]


NP_SUM_SEQUENTIAL_BELOW = 8  # np.sum adds fewer values one after the other; more, pairwise in blocks


def grouped_sum(heads: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Each group's np.sum, to the last bit (groups: the runs of values starting at heads). bincount
    adds in order, as np.sum does below 8 values; longer groups, rare, are summed by np.sum itself."""
    sizes = np.diff(np.r_[heads, len(values)])
    out: np.ndarray = np.bincount(np.repeat(np.arange(len(heads)), sizes), weights=values, minlength=len(heads))
    for k in np.flatnonzero(sizes >= NP_SUM_SEQUENTIAL_BELOW):
        out[k] = np.sum(values[heads[k] : heads[k] + sizes[k]])
    return out


def grouped_length(group: np.ndarray, n: int, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per group 0..n-1, the time its intervals cover (overlaps within a group counted once; group -1
    is left out). Each group is shifted past the previous group's last end, so one running maximum
    merges every group's intervals and never merges across groups."""
    keep = group >= 0
    g, s, e = group[keep], start[keep], end[keep]
    out = np.zeros(n)
    if not len(g):
        return out
    order = np.lexsort((s, g))
    g, s, e = g[order], s[order], e[order]
    base = s[0]
    s, e = s - base, e - base  # exact (same magnitude), and the shifts below stay small against them
    heads = run_firsts(g)
    group_lo = s[heads]
    group_hi = np.maximum.reduceat(e, heads)
    # Past the latest end of every earlier group (not just the previous one), so shifts only grow.
    latest = np.maximum.accumulate(group_hi)
    push = np.r_[0.0, np.maximum(0.0, latest[:-1] - group_lo[1:] + 1.0)]
    shift = np.repeat(np.cumsum(push), np.diff(np.r_[heads, len(g)]))
    s, e = s + shift, e + shift
    running_end = np.maximum.accumulate(e)
    begins = np.r_[True, s[1:] > running_end[:-1]]
    idx = np.flatnonzero(begins)
    lengths = running_end[np.r_[idx[1:] - 1, len(s) - 1]] - s[idx]
    return np.bincount(g[idx], weights=lengths, minlength=n)


def step_thread_cover(
    step: np.ndarray, lane: np.ndarray, start: np.ndarray, end: np.ndarray, step_lo: np.ndarray, step_hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Whose time calls take inside their steps: each call clipped to its step's window [step_lo,
    step_hi], then per step the time any thread was in one (wall, never more than the step) and per
    (step, thread) the time that thread was (overlaps on a thread counted once). step: (n,) int64, each
    call's step (-1: none, left out); lane: (n,) its thread. Returns (wall (n_steps,), the pairs' steps
    (k,) int64, the pairs' covered time (k,))."""
    n_steps = len(step_lo)
    ok = step >= 0
    st = step[ok]
    s = np.maximum(start[ok], step_lo[st])
    e = np.minimum(end[ok], step_hi[st])
    keep = e > s
    st, s, e, ln = st[keep], s[keep], e[keep], lane[ok][keep]
    wall = grouped_length(st, n_steps, s, e)
    lanes, lane_of = np.unique(ln, return_inverse=True)
    pairs, pair_of = np.unique(st * max(1, len(lanes)) + lane_of, return_inverse=True)
    cover = grouped_length(pair_of.astype(np.int64), len(pairs), s, e)
    return wall, pairs // max(1, len(lanes)), cover


# Few groups of many values: each group's median by selection (np.median) is faster than sorting
# every value; about 15 us a group against 0.2 us a value sorted (a 1 GB trace of 10 steps: 0.4 s
# to 0.05 s for its six medians).
SELECT_PER_GROUP_BELOW = 1 / 64  # groups per value


def grouped_median(group: np.ndarray, n: int, values: np.ndarray) -> np.ndarray:
    """Per group: the median of its values (NaN where it has none), as np.median computes it."""
    keep = group >= 0
    g, v = group[keep], values[keep]
    counts = np.bincount(g, minlength=n)
    present = np.flatnonzero(counts)
    if len(present) < SELECT_PER_GROUP_BELOW * len(v):
        v = v[np.argsort(g, kind="stable")]
        bounds = np.r_[0, np.cumsum(counts)]
        selected = np.full(n, np.nan)
        for k in present:
            selected[k] = np.median(v[bounds[k] : bounds[k + 1]])
        return selected
    order = np.lexsort((v, g))
    g, v = g[order], v[order]
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    out = np.full(n, np.nan)
    has = counts > 0
    lo = (starts + (counts - 1) // 2)[has]
    hi = (starts + counts // 2)[has]
    out[has] = (v[lo] + v[hi]) / 2
    return out
