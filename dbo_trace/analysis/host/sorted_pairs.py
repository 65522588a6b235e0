"""Sorted, disjoint interval lists met with one another by binary search: every overlapping pair,
with its length, and what one list leaves uncovered of the other (host_time.py cuts the host-idle
stretches with them)."""

from __future__ import annotations

import numpy as np


def _window_pairs(p_lo: np.ndarray, p_hi: np.ndarray, w_lo: np.ndarray, w_hi: np.ndarray) -> tuple[np.ndarray, ...]:
    """Every (window, piece) pair that overlaps, with the overlap's length: the pieces are sorted
    and disjoint, so each window's pieces are one contiguous run found by two binary searches."""
    first = np.searchsorted(p_hi, w_lo, side="right")
    last = np.searchsorted(p_lo, w_hi, side="left")
    counts = np.maximum(last - first, 0)
    win = np.repeat(np.arange(len(w_lo)), counts)
    piece = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(first, counts)
    length = np.minimum(p_hi[piece], w_hi[win]) - np.maximum(p_lo[piece], w_lo[win])
    keep = length > 0
    return win[keep], piece[keep], length[keep]


def _intersect(
    a_lo: np.ndarray, a_hi: np.ndarray, b_lo: np.ndarray, b_hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Two sorted disjoint interval lists: every overlap (lo, hi, index in a, index in b), in order."""
    first, last = _meeting(a_lo, a_hi, b_lo, b_hi)
    ia, ib = _pairs(first, last)
    lo = np.maximum(a_lo[ia], b_lo[ib])
    hi = np.minimum(a_hi[ia], b_hi[ib])
    keep = hi > lo
    return lo[keep], hi[keep], ia[keep], ib[keep]


def _meeting(a_lo: np.ndarray, a_hi: np.ndarray, b_lo: np.ndarray, b_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per a: the first b ending after it starts (how many end at or before) and one past the last
    b starting before it ends (how many start before), both sorted. The searches cost a log per
    query: where b is the shorter list, b's ends are looked up in a instead and counted up."""
    if len(b_lo) >= len(a_lo):
        return np.searchsorted(b_hi, a_lo, side="right"), np.searchsorted(b_lo, a_hi, side="left")
    n = len(a_lo)
    # b_hi[j] <= a_lo[i] exactly where fewer than i + 1 of a's starts lie below b_hi[j];
    # b_lo[j] < a_hi[i] exactly where at most i of a's ends lie at or below b_lo[j].
    first = np.cumsum(np.bincount(np.searchsorted(a_lo, b_hi, side="left"), minlength=n + 1)[:n])
    last = np.cumsum(np.bincount(np.searchsorted(a_hi, b_lo, side="right"), minlength=n + 1)[:n])
    return first, last


def _subtract(
    a_lo: np.ndarray, a_hi: np.ndarray, b_lo: np.ndarray, b_hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What b does not cover of a (both sorted, disjoint, a finite): (lo, hi, index in a), in order.
    The overlaps of a with b's gaps (-inf, b_lo[0]), (b_hi[0], b_lo[1]), ..., (b_hi[-1], inf),
    without building the gaps: gap j runs from b_hi[j - 1] (-inf for j = 0) to b_lo[j] (inf past the last)."""
    if not len(b_lo):
        return a_lo, a_hi, np.arange(len(a_lo))
    first = np.searchsorted(b_lo, a_lo, side="right")
    last = np.searchsorted(b_hi, a_hi, side="left") + 1
    return _in_gaps(a_lo, a_hi, b_lo, b_hi, first, last)


def _in_gaps(
    a_lo: np.ndarray, a_hi: np.ndarray, b_lo: np.ndarray, b_hi: np.ndarray, first: np.ndarray, last: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ia, gap = _pairs(first, last)
    lo = a_lo[ia]
    after = gap > 0
    lo[after] = np.maximum(lo[after], b_hi[gap[after] - 1])
    hi = a_hi[ia]
    before = gap < len(b_lo)
    hi[before] = np.minimum(hi[before], b_lo[gap[before]])
    keep = hi > lo
    return lo[keep], hi[keep], ia[keep]


def _split(
    a_lo: np.ndarray, a_hi: np.ndarray, b_lo: np.ndarray, b_hi: np.ndarray
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """`_intersect` and `_subtract` of the same lists from one pair of binary searches. Where every
    b has a length, the gaps meeting a[i] follow from the b meeting it: the first gap is the one
    before b[first] unless b[first] starts at or before a[i]; the last is the one after b[last - 1]
    unless that ends at or after a[i]'s end."""
    nb = len(b_lo)
    if not nb:
        return _intersect(a_lo, a_hi, b_lo, b_hi), (a_lo, a_hi, np.arange(len(a_lo)))
    if not (b_hi > b_lo).all():  # a point would split a's remainder: count the gaps exactly
        return _intersect(a_lo, a_hi, b_lo, b_hi), _subtract(a_lo, a_hi, b_lo, b_hi)
    first, last = _meeting(a_lo, a_hi, b_lo, b_hi)
    ia, ib = _pairs(first, last)
    lo = np.maximum(a_lo[ia], b_lo[ib])
    hi = np.minimum(a_hi[ia], b_hi[ib])
    keep = hi > lo
    met = (lo[keep], hi[keep], ia[keep], ib[keep])
    del lo, hi, keep, ia, ib
    first += (first < nb) & (b_lo[np.minimum(first, nb - 1)] <= a_lo)  # now the first gap met
    last += 1
    last -= (last > 1) & (b_hi[np.maximum(last - 2, 0)] >= a_hi)  # now one past the last gap met
    return met, _in_gaps(a_lo, a_hi, b_lo, b_hi, first, last)


def _pairs(first: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Item i of a meets items first[i] .. last[i] - 1 of b: every (i, j), in order."""
    counts = last - first
    np.maximum(counts, 0, out=counts)
    if counts.max(initial=0) <= 1:  # the common case: no repeats to spell out
        ia = np.flatnonzero(counts)
        return ia, first[ia]
    ia = np.repeat(np.arange(len(first)), counts)
    ib = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(first, counts)
    return ia, ib
