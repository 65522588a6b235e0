"""Overlap, host-boundness, graph replay and round trips over one window of GPU activity.

One function, window_metrics, serves a step and a whole trace alike, so the
totals and the per-step figures cannot disagree in definition.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dbo_trace.analysis import classify as c
from dbo_trace.analysis import intervals as iv

LONG_GRAPH_LAUNCH_US = 1000.0  # a cudaGraphLaunch this long is host time worth naming


# How a figure combines across ranks (report.sum_metrics), declared on the field; unmarked fields add.
ACROSS = "across"
SUM, MEDIAN, MAX, SUM_IF_ALL = "sum", "median", "max", "sum_if_all"


@dataclass(frozen=True)
class WindowMetrics:
    span_us: float  # the window (or union of windows) measured: WindowTime
    gpu_busy_us: float  # union of all GPU activity
    compute_busy_us: float
    comm_busy_us: float
    copy_busy_us: float
    comm_hidden_us: float  # comm time concurrent with compute
    # comm of one microbatch under the *other*'s compute
    comm_hidden_cross_us: float | None = field(metadata={ACROSS: SUM_IF_ALL})
    host_idle_us: float  # GPU idle gaps whose next activity was launched after the gap began
    host_idle_gaps: int
    idle_gaps: int
    kernels: int
    comm_kernels: int
    launches: int
    launch_us: float
    median_launch_us: float | None = field(metadata={ACROSS: MEDIAN})
    median_kernel_us: float | None = field(metadata={ACROSS: MEDIAN})
    median_queue_us: float | None = field(metadata={ACROSS: MEDIAN})  # launch call start -> kernel start
    graph_launches: int
    long_graph_launches: int
    max_graph_launch_us: float | None = field(metadata={ACROSS: MAX})
    replayed_kernels: int
    replayed_gpu_us: float
    gpu_us: float  # sum of kernel durations (not a union): the denominator of replayed_gpu_us

    @property
    def utilization(self) -> float | None:
        return self.gpu_busy_us / self.span_us if self.span_us > 0 else None

    @property
    def comm_hidden_fraction(self) -> float | None:
        return self.comm_hidden_us / self.comm_busy_us if self.comm_busy_us > 0 else None

    @property
    def comm_hidden_cross_fraction(self) -> float | None:
        """Share of comm under the other microbatch's compute; None without comm or microbatches."""
        if self.comm_hidden_cross_us is None or self.comm_busy_us <= 0:
            return None
        return self.comm_hidden_cross_us / self.comm_busy_us

    @property
    def replayed_gpu_fraction(self) -> float | None:
        return self.replayed_gpu_us / self.gpu_us if self.gpu_us > 0 else None

    @property
    def comm_exposed_us(self) -> float:
        return self.comm_busy_us - self.comm_hidden_us

    @property
    def host_idle_fraction(self) -> float | None:
        return self.host_idle_us / self.span_us if self.span_us > 0 else None

    @property
    def replayed_kernel_fraction(self) -> float | None:
        return self.replayed_kernels / self.kernels if self.kernels else None


@dataclass(frozen=True)
class WindowTime:
    """A window's time from the rank's one timeline (accounting.Partition): its length, GPU busy time,
    host-caused idle and how many idle gaps (host-caused, all) begin in it."""

    span_us: float
    gpu_busy_us: float
    host_idle_us: float
    host_idle_gaps: int
    idle_gaps: int


def window_metrics(
    *,
    start: np.ndarray,  # (n_gpu,) float64: the window's GPU activities
    end: np.ndarray,  # (n_gpu,) float64
    kind: np.ndarray,  # (n_gpu,) int8: classify.COMPUTE / COMM / COPY
    ubatch: np.ndarray,  # (n_gpu,) int8, -1 unknown
    launch_start: np.ndarray,  # (n_gpu,) float64, NaN unknown
    launch_kind: np.ndarray,  # (n_gpu,) int8: call kind of the launching call, -1 where unknown
    call_kind: np.ndarray,  # (n_calls,) int8: the CUDA API calls in the window
    call_dur: np.ndarray,  # (n_calls,) float64
    time: WindowTime,
) -> WindowMetrics:
    """One window's figures: the grouped computation with everything in group 0."""
    (m,) = grouped_window_metrics(
        group=np.zeros(len(start), np.int64),
        n=1,
        start=start,
        end=end,
        kind=kind,
        ubatch=ubatch,
        launch_start=launch_start,
        launch_kind=launch_kind,
        call_group=np.zeros(len(call_kind), np.int64),
        call_kind=call_kind,
        call_dur=call_dur,
        times=[time],
    )
    return m


def grouped_window_metrics(
    *,
    group: np.ndarray,  # (n_gpu,) int64: each GPU activity's window (step) 0..n-1, -1 in none
    n: int,
    start: np.ndarray,  # (n_gpu,) float64
    end: np.ndarray,  # (n_gpu,) float64
    kind: np.ndarray,  # (n_gpu,) int8: classify.COMPUTE / COMM / COPY
    ubatch: np.ndarray,  # (n_gpu,) int8, -1 unknown
    launch_start: np.ndarray,  # (n_gpu,) float64, NaN unknown
    launch_kind: np.ndarray,  # (n_gpu,) int8: call kind of the launching call, -1 where unknown
    call_group: np.ndarray,  # (n_calls,) int64: each CUDA API call's window, -1 in none
    call_kind: np.ndarray,  # (n_calls,) int8: classify.CALL_*
    call_dur: np.ndarray,  # (n_calls,) float64
    times: list[WindowTime],  # (n,): each window's time from the partition
) -> list[WindowMetrics]:
    """Every window's figures at once, over sorted arrays (no Python loop over windows): a trace with
    thousands of steps costs what its events cost (docs/performance.md)."""
    is_comm, is_compute, is_copy = kind == c.COMM, kind == c.COMPUTE, kind == c.COPY
    kernels = ~is_copy
    dur = end - start
    replayed = launch_kind == c.CALL_GRAPH_LAUNCH

    def only(mask: np.ndarray, g: np.ndarray = group) -> np.ndarray:
        return np.where(mask, g, -1)

    def count(mask: np.ndarray, g: np.ndarray = group) -> np.ndarray:
        sel = mask & (g >= 0)
        return np.bincount(g[sel], minlength=n)

    def total(mask: np.ndarray, values: np.ndarray, g: np.ndarray = group) -> np.ndarray:
        sel = mask & (g >= 0)
        return np.bincount(g[sel], weights=values[sel], minlength=n)

    def busy(mask: np.ndarray) -> np.ndarray:
        """Per window, the time the selected activities cover."""
        return iv.grouped_length(only(mask), n, start, end)

    def overlap(a: np.ndarray, b: np.ndarray, a_busy: np.ndarray, b_busy: np.ndarray) -> np.ndarray:
        """Per window, the time covered by both of two disjoint selections: |A| + |B| - |A or B|,
        from lengths already known and one union."""
        both: np.ndarray = a_busy + b_busy - busy(a | b)
        return both

    compute_busy, comm_busy, copy_busy = busy(is_compute), busy(is_comm), busy(is_copy)
    hidden = overlap(is_comm, is_compute, comm_busy, compute_busy)
    has_ubatch = count(ubatch >= 0) > 0
    cross = np.zeros(n)
    for u in np.unique(ubatch[ubatch >= 0]):
        mine, others = is_comm & (ubatch == u), is_compute & (ubatch >= 0) & (ubatch != u)
        cross += overlap(mine, others, busy(mine), busy(others))
    launches = call_kind == c.CALL_LAUNCH
    graph = call_kind == c.CALL_GRAPH_LAUNCH
    max_graph = np.full(n, -np.inf)
    sel = graph & (call_group >= 0)
    np.maximum.at(max_graph, call_group[sel], call_dur[sel])
    median_launch = iv.grouped_median(only(launches, call_group), n, call_dur)
    median_kernel = iv.grouped_median(only(kernels), n, dur)
    median_queue = iv.grouped_median(only(~np.isnan(launch_start) & ~replayed), n, start - launch_start)
    columns = {
        "kernels": count(kernels),
        "comm_kernels": count(is_comm),
        "launches": count(launches, call_group),
        "launch_us": total(launches, call_dur, call_group),
        "graph_launches": count(graph, call_group),
        "long_graph_launches": count(graph & (call_dur >= LONG_GRAPH_LAUNCH_US), call_group),
        "replayed_kernels": count(replayed & kernels),
        "replayed_gpu_us": total(replayed & kernels, dur),
        "gpu_us": total(kernels, dur),
    }

    def maybe(x: float) -> float | None:
        return None if np.isnan(x) else float(x)

    return [
        WindowMetrics(
            span_us=times[i].span_us,
            gpu_busy_us=times[i].gpu_busy_us,
            compute_busy_us=float(compute_busy[i]),
            comm_busy_us=float(comm_busy[i]),
            copy_busy_us=float(copy_busy[i]),
            comm_hidden_us=float(hidden[i]),
            comm_hidden_cross_us=float(cross[i]) if has_ubatch[i] else None,
            host_idle_us=times[i].host_idle_us,
            host_idle_gaps=times[i].host_idle_gaps,
            idle_gaps=times[i].idle_gaps,
            kernels=int(columns["kernels"][i]),
            comm_kernels=int(columns["comm_kernels"][i]),
            launches=int(columns["launches"][i]),
            launch_us=float(columns["launch_us"][i]),
            median_launch_us=maybe(median_launch[i]),
            median_kernel_us=maybe(median_kernel[i]),
            median_queue_us=maybe(median_queue[i]),
            graph_launches=int(columns["graph_launches"][i]),
            long_graph_launches=int(columns["long_graph_launches"][i]),
            max_graph_launch_us=float(max_graph[i]) if np.isfinite(max_graph[i]) else None,
            replayed_kernels=int(columns["replayed_kernels"][i]),
            replayed_gpu_us=float(columns["replayed_gpu_us"][i]),
            gpu_us=float(columns["gpu_us"][i]),
        )
        for i in range(n)
    ]


@dataclass(frozen=True)
class RoundTrips:
    """The DBO profitability arithmetic (docs/analysis.md)."""

    source: str  # where the comm operation count came from
    per_step: float  # round trips (dispatch + combine) per step
    layers: int | None
    per_layer: float | None
    step_us: float
    per_round_trip_us: float  # step time / round trips (the ablation tables' column)
    comm_per_round_trip_us: float  # comm busy time per round trip: the latency to hide
    compute_per_round_trip_us: float  # compute per microbatch segment that could hide one
    ratio: float | None  # compute / comm per round trip; >= 1: the round trip can hide entirely (docs/analysis.md)
    microbatched: bool = True  # the DBO criterion speaks only where there are microbatches
    # where the ranks' collectives were matched: the comm per round trip apart into waiting for a
    # peer rank and transfer (medians over steps, so they need not add up to comm_per_round_trip_us)
    wait_per_round_trip_us: float | None = None
    transfer_per_round_trip_us: float | None = None

    @property
    def criterion_met(self) -> bool | None:
        return None if self.ratio is None or not self.microbatched else self.ratio >= 1.0


COMM_OPS_PER_ROUND_TRIP = 2  # a dispatch and a combine


def round_trips(
    step_us: np.ndarray,
    comm_ops: np.ndarray,
    comm_busy_us: np.ndarray,
    compute_busy_us: np.ndarray,
    layers: int | None,
    source: str,
    microbatched: bool = True,
) -> RoundTrips | None:
    """Medians over steps. comm_ops: communication operations per step."""
    ok = comm_ops > 0
    if not ok.any():
        return None
    rt = comm_ops[ok] / COMM_OPS_PER_ROUND_TRIP
    per_step = float(np.median(rt))
    comm = float(np.median(comm_busy_us[ok] / rt))
    compute = float(np.median(compute_busy_us[ok] / rt))
    return RoundTrips(
        source=source,
        per_step=per_step,
        layers=layers,
        per_layer=per_step / layers if layers else None,
        step_us=float(np.median(step_us[ok])),
        per_round_trip_us=float(np.median(step_us[ok] / rt)),
        comm_per_round_trip_us=comm,
        compute_per_round_trip_us=compute,
        ratio=compute / comm if comm > 0 else None,
        microbatched=microbatched,
    )
