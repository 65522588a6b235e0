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
