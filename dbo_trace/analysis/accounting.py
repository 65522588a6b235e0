"""Where a rank's time went: the profiled window cut into buckets, every microsecond in exactly one.

The window runs from the first event of the trace (CPU range, CUDA call or GPU activity) to the
last one's end. Each instant is:
  compute       some compute kernel runs
  comm_exposed  communication runs and no compute does
  copy          only memcpy/memset run
  host_idle     the GPU is idle and nothing was queued: the activity that ends the idle gap was
                launched after the gap began (or nothing follows: the tail of the window), up to
                LAUNCH_LATENCY_US after that launch call ended
  other_idle    the GPU is idle although its next activity was already launched (a stream waiting
                on an event or a synchronisation, or a GPU running behind: the work queued, or its
                clock offset from the CPU's), or that activity's launch is not in the trace
Totals and per-step figures are measures of these buckets over a window: one timeline, never sums
of per-step spans, so time in which steps overlap (a GPU running behind its CPU) counts once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dbo_trace.analysis import classify as c
from dbo_trace.analysis import intervals as iv

BUCKETS = ("compute", "comm_exposed", "copy", "host_idle", "other_idle")
# An idle GPU starts launched work within this (measured: 2-10 us); the rest of an idle gap after the
# ending work's launch call ended is not the host's: the work was launched and waited.
LAUNCH_LATENCY_US = 20.0
B_COMPUTE, B_COMM, B_COPY, B_HOST, B_OTHER = range(len(BUCKETS))
_IDLE = -1


@dataclass(frozen=True)
class Partition:
    """Elementary segments [bounds[i], bounds[i+1]) with one bucket each, and cumulative time per bucket."""

    bounds: np.ndarray
    bucket: np.ndarray
    cumulative: np.ndarray  # (buckets, len(bounds)): time of each bucket in [bounds[0], bounds[k])
    idle_starts: np.ndarray  # start of every GPU idle gap, sorted
    host_starts: np.ndarray  # start of every host-caused one
    # The parts of host-caused gaps after their ending work had been launched (launch call end +
    # LAUNCH_LATENCY_US), counted other_idle: [queued_start, queued_end), sorted; queued_end is the
    # gap's end, where the work started.
    queued_start: np.ndarray = field(default_factory=lambda: np.empty(0))
    queued_end: np.ndarray = field(default_factory=lambda: np.empty(0))

    def ender_time(self, host_end: np.ndarray) -> np.ndarray:
        """For each host-idle stretch's end, when the activity that ends its gap started: the gap's end
        where the stretch stops short of it (the rest queued), else the stretch's own end."""
        if not len(self.queued_start):
            return host_end
        i = np.clip(np.searchsorted(self.queued_start, host_end), 0, len(self.queued_start) - 1)
        out: np.ndarray = np.where(self.queued_start[i] == host_end, self.queued_end[i], host_end)
        return out

    def spans(self, bucket: int, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
        """The stretches of one bucket inside [lo, hi], merged: what a picture draws for it. Only the
        segments that reach into [lo, hi] are looked at (a search), so a step costs its own segments."""
        first = max(int(np.searchsorted(self.bounds, lo, side="right")) - 1, 0)
        last = min(int(np.searchsorted(self.bounds, hi, side="left")), len(self.bucket))
        seg_lo = np.maximum(self.bounds[first:last], lo)
        seg_hi = np.minimum(self.bounds[first + 1 : last + 1], hi)
        keep = (self.bucket[first:last] == bucket) & (seg_hi > seg_lo)
        s, e = seg_lo[keep], seg_hi[keep]
        if not len(s):
            return s, e
        begins = np.r_[True, s[1:] > e[:-1]]
        ends = np.r_[begins[1:], True]
        return s[begins], e[ends]

    def gaps_in(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per window, (host-caused gaps, all gaps) that begin inside it."""

        def count(starts: np.ndarray) -> np.ndarray:
            inside: np.ndarray = np.searchsorted(starts, hi, side="left") - np.searchsorted(starts, lo, side="left")
            return inside

        return count(self.host_starts), count(self.idle_starts)

    def host_gaps_in(self, lo: np.ndarray, hi: np.ndarray) -> tuple[int, int]:
        """(host-caused gaps, all gaps) that begin inside the windows, together."""
        host, every = self.gaps_in(lo, hi)
        return int(host.sum()), int(every.sum())

    @property
    def lo(self) -> float:
        return float(self.bounds[0])

    @property
    def hi(self) -> float:
        return float(self.bounds[-1])

    def _at(self, t: np.ndarray) -> np.ndarray:
        """Cumulative time per bucket at each time t: (len(t), buckets)."""
        t = np.clip(np.asarray(t, float), self.bounds[0], self.bounds[-1])
        i = np.clip(np.searchsorted(self.bounds, t, side="right") - 1, 0, len(self.bucket) - 1)
        partial = (t - self.bounds[i])[:, None] * (self.bucket[i][:, None] == np.arange(len(BUCKETS))[None, :])
        cumulative: np.ndarray = self.cumulative[:, i].T + partial
        return cumulative

    def measure(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Time of each bucket inside each window [lo, hi]: (windows, buckets)."""
        if not len(self.bucket):
            return np.zeros((len(lo), len(BUCKETS)))
        inside: np.ndarray = self._at(hi) - self._at(lo)
        return inside

    def measure_union(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Time of each bucket inside the union of the windows (overlapping windows count once)."""
        from dbo_trace.analysis.intervals import union

        u_lo, u_hi = union(np.asarray(lo, float), np.asarray(hi, float))
        return self.measure(u_lo, u_hi).sum(axis=0) if len(u_lo) else np.zeros(len(BUCKETS))


def window_of(*event_sets: tuple[np.ndarray, np.ndarray]) -> tuple[float, float]:
    """[first start, last end] over every (start, end) set given."""
    lo = min((float(s.min()) for s, _ in event_sets if len(s)), default=0.0)
    hi = max((float(e.max()) for _, e in event_sets if len(e)), default=0.0)
    return lo, hi


def partition(
    *,
    lo: float,
    hi: float,
    start: np.ndarray,  # (n_gpu,) float64
    end: np.ndarray,  # (n_gpu,) float64
    kind: np.ndarray,  # (n_gpu,) int8: classify.COMPUTE / COMM / COPY
    launch_start: np.ndarray,  # (n_gpu,) float64, NaN unknown
    launch_end: np.ndarray | None = None,  # (n_gpu,) float64, NaN unknown; None: not known at all
) -> Partition:
    """Cut [lo, hi] into buckets. start/end/kind/launch_start/launch_end: every GPU activity of the
    rank (NaN where its launching call is not in the trace)."""
    start = np.clip(start, lo, hi)
    end = np.clip(end, lo, hi)
    # The starts are in time order and the ends nearly so: a stable sort (timsort) merges the runs
    # in about linear time, where np.unique's sort did not (0.15 s to 0.03 s on 800,000 activities).
    times = np.sort(np.concatenate([start, end, [lo, hi]]), kind="stable")
    bounds = times[iv.run_firsts(times)]
    del times  # two values per activity: not held through the sweeps below
    n = len(bounds) - 1
    if n <= 0:
        return Partition(bounds, np.empty(0, np.int8), np.zeros((len(BUCKETS), len(bounds))), np.empty(0), np.empty(0))

    def coverage(sel: np.ndarray) -> np.ndarray:
        """How many activities of the selection cover each elementary segment (a sweep)."""
        opened = np.bincount(np.searchsorted(bounds, start[sel]), minlength=len(bounds))
        closed = np.bincount(np.searchsorted(bounds, end[sel]), minlength=len(bounds))
        return np.cumsum(opened - closed)[:-1] > 0

    compute, comm, copy = coverage(kind == c.COMPUTE), coverage(kind == c.COMM), coverage(kind == c.COPY)
    bucket = np.where(compute, B_COMPUTE, np.where(comm, B_COMM, np.where(copy, B_COPY, _IDLE))).astype(np.int8)
    idle_starts, host, queued_start, queued_end = _label_idle_gaps(bucket, bounds, start, launch_start, launch_end, hi)
    if len(queued_start):  # the queued parts become segments of their own, other_idle
        at = np.searchsorted(bounds, queued_start, side="right")
        bucket = np.insert(bucket, at, bucket[at - 1])
        bounds = np.insert(bounds, at, queued_start)
        n = len(bounds) - 1
        first = np.searchsorted(bounds, queued_start)
        last = np.searchsorted(bounds, queued_end)
        marks = np.zeros(n + 1, np.int64)
        np.add.at(marks, first, 1)
        np.add.at(marks, last, -1)
        bucket[np.cumsum(marks)[:-1] > 0] = B_OTHER
    lengths = np.diff(bounds)
    # Each segment's length in its bucket's row, then running sums in place: one (buckets, n + 1)
    # array, not a mask, a product and a copy of that size (every segment is labelled by now).
    cumulative = np.zeros((len(BUCKETS), n + 1))
    cumulative[bucket, np.arange(1, n + 1)] = lengths
    np.cumsum(cumulative, axis=1, out=cumulative)
    return Partition(bounds, bucket, cumulative, idle_starts, idle_starts[host], queued_start, queued_end)


def _label_idle_gaps(
    bucket: np.ndarray,
    bounds: np.ndarray,
    start: np.ndarray,
    launch_start: np.ndarray,
    launch_end: np.ndarray | None,
    hi: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each maximal idle run becomes host_idle or other_idle, by when the activity that ends it was
    launched. Returns the runs' starts, which of them are host-caused, and the queued parts of those
    (from the ending work's launch call end + LAUNCH_LATENCY_US to the run's end, where that is inside
    the run), which the caller makes other_idle."""
    idle = bucket == _IDLE
    if not idle.any():
        return np.empty(0), np.empty(0, bool), np.empty(0), np.empty(0)
    edges = np.diff(np.r_[0, idle.astype(np.int8), 0])
    run_first, run_last = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) - 1
    gap_start, gap_end = bounds[run_first], bounds[run_last + 1]
    # The earliest launch among the activities that start when the gap ends (NaN: not in the trace).
    order = np.argsort(start, kind="stable")
    s_sorted, l_sorted = start[order], launch_start[order]
    first = np.searchsorted(s_sorted, gap_end, side="left")
    has_next = (first < len(s_sorted)) & (s_sorted[np.clip(first, 0, len(s_sorted) - 1)] == gap_end)
    next_launch = np.full(len(gap_end), np.nan)
    next_launch_end = np.full(len(gap_end), np.nan)
    if len(s_sorted):
        group_first = iv.run_firsts(s_sorted)
        uniq = s_sorted[group_first]
        earliest = np.fmin.reduceat(l_sorted, group_first) if len(group_first) else np.empty(0)
        g = np.clip(np.searchsorted(uniq, gap_end), 0, len(uniq) - 1)
        next_launch = np.where(has_next, earliest[g], np.nan)
        if launch_end is not None and len(group_first):
            earliest_end = np.fmin.reduceat(launch_end[order], group_first)
            next_launch_end = np.where(has_next, earliest_end[g], np.nan)
    host = (next_launch > gap_start) | (~has_next & (gap_end >= hi))  # nothing follows: the tail
    labels = np.where(host, B_HOST, B_OTHER).astype(np.int8)
    bucket[idle] = np.repeat(labels, run_last - run_first + 1)
    # Queued: the work that ends a host-caused gap had been launched (its call ended) well before the
    # gap ended; the GPU ran it late. That part of the gap is not the host's.
    split = next_launch_end + LAUNCH_LATENCY_US
    queued = host & (split > gap_start) & (split < gap_end)  # NaN compares false: no launch known
    return gap_start, host, split[queued], gap_end[queued]


@dataclass(frozen=True)
class TimeBuckets:
    """A window's time by bucket (us); the buckets add up to window_us."""

    window_us: float
    compute_us: float
    comm_exposed_us: float
    copy_us: float
    host_idle_us: float
    other_idle_us: float

    @classmethod
    def from_row(cls, window_us: float, row: np.ndarray) -> "TimeBuckets":
        return cls(window_us, *(float(x) for x in row))

    @property
    def busy_us(self) -> float:
        return self.compute_us + self.comm_exposed_us + self.copy_us
