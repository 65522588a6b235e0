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


def overlap_length(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    """Time covered by both sets: |A| + |B| - |A u B|."""
    both_s = np.concatenate([a[0], b[0]])
    both_e = np.concatenate([a[1], b[1]])
    return length(*a) + length(*b) - length(both_s, both_e)


def clip(start: np.ndarray, end: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """The parts of the intervals inside [lo, hi)."""
    s, e = np.maximum(start, lo), np.minimum(end, hi)
    keep = e > s
    return s[keep], e[keep]


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
    # Every pair's overlap; both lists are disjoint and sorted, so the pairs that overlap are few.
    i = np.searchsorted(b_e, a_s, side="right")
    j = np.searchsorted(b_s, a_e, side="left")
    starts, ends = [], []
    for k in range(len(a_s)):
        for m in range(i[k], j[k]):
            s, e = max(a_s[k], b_s[m]), min(a_e[k], b_e[m])
            if e > s:
                starts.append(s)
                ends.append(e)
    return np.array(starts, float), np.array(ends, float)


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
