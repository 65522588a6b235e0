"""An AFD pair read as one run: with the FFN's trace on the attention's clock (one host's
time.time_ns, baseTimeNanoseconds), the FFN's compute per attention step and per round trip, and
each role's GPU busy over the attention's steps (docs/analysis.md, "Both roles"). Pure: interval
arrays in, a PairFigures out; linear in the kernels but for one sort per interval set.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dbo_trace.analysis import intervals as iv


@dataclass(frozen=True)
class PairFigures:
    steps: int  # the attention's steps the figures are over
    ffn_compute_per_step_us: float | None  # median over those steps of the FFN's compute busy in each
    ffn_compute_per_round_trip_us: float | None  # median over matched round trips of the FFN's compute inside
    ffn_queue_per_round_trip_us: float | None  # ... and of the FFN's time inside it not computing
    round_trips_per_step: float | None
    attention_busy: float | None  # share of the steps' time each GPU side was busy (any kernel)
    ffn_busy: float | None
    both_busy: float | None  # both at once: on one GPU without MPS this is time-sliced, not concurrent


def _share(covered: float, total: float) -> float | None:
    return covered / total if total > 0 else None


def pair_figures(
    *,
    step_start: np.ndarray,
    step_end: np.ndarray,
    attention: tuple[np.ndarray, np.ndarray],
    ffn: tuple[np.ndarray, np.ndarray],
    ffn_compute: tuple[np.ndarray, np.ndarray],
    round_trip_compute_us: np.ndarray | None,
    round_trip_queue_us: np.ndarray | None,
    round_trips_per_step: float | None,
) -> PairFigures | None:
    """step_start, step_end: the attention's steps (start to the next step's start), attention: its
    GPU activities, ffn: the FFN's, ffn_compute: the FFN's compute kernels, all on the attention's
    clock; round_trip_*_us: the round trips' FFN parts (NaN where unmatched), None without them."""
    if not len(step_start):
        return None
    cu_s, cu_e = iv.union(*ffn_compute)
    per_step = iv.covered_within(step_start, step_end, cu_s, cu_e)
    windows = iv.union(step_start, step_end)
    total = iv.length(*windows)
    a = iv.intersection(attention, windows)
    f = iv.intersection(ffn, windows)

    def median(x: np.ndarray | None) -> float | None:
        return float(np.nanmedian(x)) if x is not None and np.isfinite(x).any() else None

    per_rt = median(round_trip_compute_us)
    if per_rt is None and round_trips_per_step:
        per_rt = float(np.median(per_step)) / round_trips_per_step
    return PairFigures(
        steps=len(step_start),
        ffn_compute_per_step_us=float(np.median(per_step)),
        ffn_compute_per_round_trip_us=per_rt,
        ffn_queue_per_round_trip_us=median(round_trip_queue_us),
        round_trips_per_step=round_trips_per_step,
        attention_busy=_share(iv.length(*a), total),
        ffn_busy=_share(iv.length(*f), total),
        both_busy=_share(iv.length(*iv.intersection(a, f)), total),
    )
