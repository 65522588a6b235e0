"""One rank's GPU clock against its CPU's, and whether its trace holds all of its GPU work
(docs/analysis.md, "The GPU's clock" and "Incomplete traces").

The profiler puts GPU timestamps on the CPU's clock; the events themselves bound how far off that
can be. Let offset be how far the GPU's timestamps run ahead of the CPU's (GPU ts - offset is CPU
time):

- no activity starts before its own launch call began: offset <= min(start - launch call start),
  the *upper* bound, from every launched activity;
- a blocking call returns only after the GPU work it waits on has ended: offset >= max(end - call
  end), the *lower* bound, from synchronous copies to the host (their own copy; one from the host
  may return once the data is staged, before the copy ends), device synchronisation (all work
  launched before it) and a stream synchronisation right after a copy on its thread (that copy:
  PyTorch's .item()).

Where the interval excludes 0 the skew is proven and the GPU's events are shifted by the nearest
offset it allows; where it is wide the host idle is given at both ends. The lag of launched work
beyond the upper bound is a queue (the GPU behind), not the clocks.

Pure: arrays in, figures out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dbo_trace.analysis import classify as c

SKEW_MIN_US = 5.0  # the interval must miss 0 by this much: the profiler's own accuracy (analysis/cross_rank/clocks.py)
WIDE_US = 100.0  # an interval this wide leaves the host idle uncertain: give it at both ends
HOST_IDLE_RANGE_US = 100.0  # ... where the ends' host idle differ by this much
LAG_GROWS_US = 500.0  # the launch-to-start lag grew this much from the first launched activity to the last
LAG_GROWS_SHARE = 0.5  # ... and by this share of the first's: a queue that builds, not a constant offset

# Incomplete traces: far below complete is a sampled or sliced trace. A complete recording ties
# every kernel to its launch call but those launched from untraced threads (NCCL's proxy, say):
# the samples and the public traces here are at 0.95 or more.
COVERAGE_COMPLETE = 0.5
CORRELATION_COMPLETE = 0.02  # of the correlation ids' span: 3.5x under the least complete trace measured (0.07)
MIN_CALLS = 100
HEAD_WAIT_US = 1000.0  # the first launched work started this long after its launch, the GPU idle in the trace meanwhile

# the blocking calls, by what they wait for
_BLOCKING_COPIES = frozenset(
    {"cudaMemcpy", "hipMemcpy", "hipMemcpyWithStream", "cuMemcpyDtoH", "cuMemcpyDtoH_v2", "cuMemcpyHtoD", "cuMemcpyHtoD_v2"}
)
_DEVICE_SYNCS = frozenset({"cudaDeviceSynchronize", "hipDeviceSynchronize", "cuCtxSynchronize"})
_STREAM_SYNCS = frozenset({"cudaStreamSynchronize", "hipStreamSynchronize", "cuStreamSynchronize"})
BLOCK_NONE, BLOCK_COPY, BLOCK_DEVICE, BLOCK_STREAM = 0, 1, 2, 3


def blocking_kinds(names: list[str], name_ids: np.ndarray) -> np.ndarray:
    """(n_calls,) int8: each call's BLOCK_* kind."""

    def kind(n: str) -> int:
        if n in _BLOCKING_COPIES:
            return BLOCK_COPY
        if n in _DEVICE_SYNCS:
            return BLOCK_DEVICE
        if n in _STREAM_SYNCS:
            return BLOCK_STREAM
        return BLOCK_NONE

    table = c.per_name(names, name_ids, kind, np.int8, BLOCK_NONE)
    out: np.ndarray = table[name_ids] if len(names) else np.empty(0, np.int8)
    return out


@dataclass(frozen=True, kw_only=True)
class ClockBounds:
    """The offsets of the GPU's clock against the CPU's that the events allow, and the lag of
    launched work (launch call start to activity start) beside them. Shift is what was applied."""

    lower_us: float | None  # None: no blocking call bounds it
    upper_us: float | None  # None: no activity's launch call is in the trace
    blocking_calls: int  # the blocking calls that gave the lower bound a value
    launched: int  # the launched activities that gave the upper bound
    shift_us: float = 0.0  # subtracted from every GPU timestamp: the proven skew, 0 where none
    host_idle_low_us: float | None = None  # the host idle at the end of the interval giving the least
    host_idle_high_us: float | None = None  # ... and the most; None: the interval is not wide
    lag_first_us: float | None  # the first launched activity's lag (not a graph replay's)
    lag_last_us: float | None  # the last one's
    lag_median_us: float | None
    gpu_behind: bool  # lag_grows(first, last): a queue building, not a constant offset

    @property
    def consistent(self) -> bool:
        """The bounds agree (lower <= upper); they may not where a clock drifts within the trace."""
        return self.lower_us is None or self.upper_us is None or self.lower_us <= self.upper_us + SKEW_MIN_US

    @property
    def skew_us(self) -> float | None:
        """The smallest offset the events force, where they exclude 0 (the skew proven); else None."""
        if not self.consistent:
            return None
        if self.lower_us is not None and self.lower_us > SKEW_MIN_US:
            return self.lower_us
        if self.upper_us is not None and self.upper_us < -SKEW_MIN_US:
            return self.upper_us
        return None

    @property
    def room_us(self) -> float | None:
        """How far ahead of the CPU's clock the GPU's may still run, past the lower bound (or past 0,
        the profiler's claim, where no blocking call bounds it or the skew was shifted away)."""
        if self.upper_us is None or not self.consistent:
            return None
        return self.upper_us - max(self.lower_us if self.lower_us is not None else 0.0, 0.0)

    @property
    def wide(self) -> bool:
        """The launches leave the GPU's clock WIDE_US or more of room: no launched activity started
        soon after its launch call, which an idle GPU does, so the clocks are not pinned."""
        return self.room_us is not None and self.room_us >= WIDE_US

    @property
    def queued_us(self) -> float | None:
        """The median lag beyond what any allowed offset explains: launched work waiting (a queue)."""
        if self.lag_median_us is None or self.upper_us is None:
            return None
        return max(0.0, self.lag_median_us - max(self.upper_us, 0.0))

    @property
    def host_idle_uncertain(self) -> bool:
        """The host idle at the interval's ends differs by HOST_IDLE_RANGE_US or more."""
        low, high = self.host_idle_low_us, self.host_idle_high_us
        return low is not None and high is not None and high - low >= HOST_IDLE_RANGE_US

    @property
    def noted(self) -> bool:
        """Worth a rank's note: a shift, clocks that disagree, an uncertain host idle, or a lag the
        clocks cannot tell from a queue."""
        return self.shift_us != 0.0 or not self.consistent or self.host_idle_uncertain or (self.wide and self.gpu_behind)


def lag_grows(lag_first_us: float | None, lag_last_us: float | None) -> bool:
    """The lag grew over the trace (a queue building: the GPU behind), not a constant offset."""
    if lag_first_us is None or lag_last_us is None:
        return False
    grew = lag_last_us - lag_first_us
    return grew >= LAG_GROWS_US and grew >= LAG_GROWS_SHARE * max(lag_first_us, 0.0)


def clock_bounds(
    *,
    gpu_start: np.ndarray,  # (n_gpu,) float64
    gpu_end: np.ndarray,  # (n_gpu,) float64
    launch_index: np.ndarray,  # (n_gpu,) int64: each activity's launching call, -1 unknown
    replayed: np.ndarray,  # (n_gpu,) bool: a graph replay's (its lag is the graph's order, not the queue's)
    to_host: np.ndarray,  # (n_gpu,) bool: a copy from the device to the host
    call_start: np.ndarray,  # (n_calls,) float64
    call_end: np.ndarray,  # (n_calls,) float64
    call_lane: np.ndarray,  # (n_calls,) int64: thread
    call_kind: np.ndarray,  # (n_calls,) int8: classify.CALL_*
    call_blocking: np.ndarray,  # (n_calls,) int8: BLOCK_*
) -> ClockBounds:
    linked = launch_index >= 0
    li = launch_index[linked]
    upper = float((gpu_start[linked] - call_start[li]).min()) if linked.any() else None
    lows: list[float] = []
    used = 0
    # a synchronous copy to the host: its own copy ended before it returned; a stream sync right
    # after a copy on its thread: that copy did
    own_end = np.full(len(call_start), -np.inf)
    np.maximum.at(own_end, li, gpu_end[linked])
    own_to_host = np.zeros(len(call_start), bool)
    own_to_host[launch_index[linked & to_host]] = True
    copies = (call_blocking == BLOCK_COPY) & own_to_host & np.isfinite(own_end)
    if copies.any():
        lows.append(float((own_end[copies] - call_end[copies]).max()))
        used += int(copies.sum())
    launching = np.isin(call_kind, (c.CALL_LAUNCH, c.CALL_GRAPH_LAUNCH, c.CALL_COPY)) | (call_blocking == BLOCK_COPY)
    syncs = np.flatnonzero(call_blocking == BLOCK_STREAM)
    for lane in np.unique(call_lane[syncs]).tolist():  # a thread at a time (a few), its syncs at once
        mine = syncs[call_lane[syncs] == lane]
        cand = np.flatnonzero(launching & (call_lane == lane))
        cand = cand[np.argsort(call_end[cand], kind="stable")]
        at = np.searchsorted(call_end[cand], call_start[mine], side="right") - 1  # the last to end before
        ok = at >= 0
        prev, sync = cand[at[ok]], mine[ok]
        copy = (call_kind[prev] == c.CALL_COPY) & np.isfinite(own_end[prev])
        if copy.any():
            lows.append(float((own_end[prev[copy]] - call_end[sync[copy]]).max()))
            used += int(copy.sum())
    # a device synchronisation: all the work launched before it began had ended when it returned
    device = np.flatnonzero(call_blocking == BLOCK_DEVICE)
    if len(device) and linked.any():
        order = np.argsort(call_end[li], kind="stable")
        launched_by = call_end[li][order]
        ends_so_far = np.maximum.accumulate(gpu_end[linked][order])
        upto = np.searchsorted(launched_by, call_start[device], side="right")
        has = upto > 0
        if has.any():
            lows.append(float((ends_so_far[upto[has] - 1] - call_end[device][has]).max()))
            used += int(has.sum())
    lag_first = lag_last = lag_median = None
    own = linked & ~replayed
    if own.any():
        lag = gpu_start[own] - call_start[launch_index[own]]
        order = np.argsort(gpu_start[own], kind="stable")
        lag_first, lag_last, lag_median = float(lag[order[0]]), float(lag[order[-1]]), float(np.median(lag))
    return ClockBounds(
        lower_us=max(lows) if lows else None,
        upper_us=upper,
        blocking_calls=used,
        launched=int(linked.sum()),
        lag_first_us=lag_first,
        lag_last_us=lag_last,
        lag_median_us=lag_median,
        gpu_behind=lag_grows(lag_first, lag_last),
    )


@dataclass(frozen=True, kw_only=True)
class Incomplete:
    """The trace lacks GPU work or its launches: a sampled trace, or a slice of a longer profile.
    The host idle it measures is then an upper bound (untraced work may fill the gaps)."""

    sampled: bool  # launches or API calls missing (launch_coverage, correlation_coverage below complete)
    sliced: bool  # the first launched work waited behind work not in the trace (head_wait_us)
    launch_coverage: float  # the share of GPU activities whose launch call is in the trace
    correlation_coverage: float | None  # the API calls held / the span of their correlation ids
    activities: int
    head_wait_us: float | None  # the first launched work waited this long behind work not in the trace


def correlation_coverage(correlation: np.ndarray) -> float | None:
    """The calls' distinct correlation ids over the span of them (None under MIN_CALLS calls: too few
    to tell). CUPTI and roctracer number the process's API calls in order; a complete trace holds
    0.07 or more of the span (the profiler leaves out the calls it does not trace: cudaGetDevice),
    HolisticTraceAnalysis's sampled trace 0.005."""
    ids = np.unique(correlation[correlation > 0])
    if len(ids) < MIN_CALLS:
        return None
    return float(len(ids) / (ids[-1] - ids[0] + 1))


def incomplete(
    *,
    gpu_start: np.ndarray,  # (n_gpu,) float64, sorted
    launch_index: np.ndarray,  # (n_gpu,) int64
    call_end: np.ndarray,  # (n_calls,) float64
    call_correlation: np.ndarray,  # (n_calls,) int64: the calls' correlation ids, <= 0 unknown
    clocks: ClockBounds,
) -> Incomplete | None:
    """An Incomplete where the trace is far from complete (few kernels' launches in it, or few of
    the API calls it numbered) or its first GPU work waited behind work launched before the window
    (a queue, not an offset of the clocks: the lag grew, or the clocks allow less than half of it);
    None where it looks whole."""
    n = len(gpu_start)
    if not n:
        return None
    linked = launch_index >= 0
    head = None
    if linked.any():
        first = int(np.flatnonzero(linked)[0])
        launched_at = float(call_end[launch_index[first]])
        wait = float(gpu_start[first]) - launched_at
        queue = clocks.gpu_behind or (clocks.upper_us is not None and clocks.upper_us < wait / 2)
        # nothing of the trace ran on the GPU between its launch and its start: what it waited behind
        # is not in the trace
        if wait >= HEAD_WAIT_US and queue and not ((gpu_start >= launched_at) & (gpu_start < gpu_start[first])).any():
            head = wait
    launched, calls = float(linked.mean()), correlation_coverage(call_correlation)
    found = Incomplete(
        sampled=launched < COVERAGE_COMPLETE or (calls is not None and calls < CORRELATION_COMPLETE),
        sliced=head is not None,
        launch_coverage=launched,
        correlation_coverage=calls,
        activities=n,
        head_wait_us=head,
    )
    return found if found.sampled or found.sliced else None
