"""Overlap, host-boundness, graph replay and round trips over one window of GPU activity.

One function, window_metrics, serves a step and a whole trace alike, so the
totals and the per-step figures cannot disagree in definition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dbo_trace.analysis import classify as c
from dbo_trace.analysis import intervals as iv

LONG_GRAPH_LAUNCH_US = 1000.0  # a cudaGraphLaunch this long is host time worth naming
# ... where the GPU waited on it: its replayed work started only after the call had run this share of
# its length. A launch that returns late because the queue is full (the GPU running behind) has its
# work start at once and costs nothing on the critical path.
GPU_WAITED_SHARE = 0.5


def gpu_waited_on_call(
    *,
    call_start: np.ndarray,  # (n_calls,) float64
    call_end: np.ndarray,  # (n_calls,) float64
    gpu_start: np.ndarray,  # (n_gpu,) float64
    launch_index: np.ndarray,  # (n_gpu,) int64: each activity's launching call, -1 unknown
) -> np.ndarray:
    """(n_calls,) bool: the first GPU work a call launched started after GPU_WAITED_SHARE of the call
    had run, or the call launched nothing the trace ties to it (unknown: counted, as before)."""
    first = np.full(len(call_start), np.inf)
    known = launch_index >= 0
    np.minimum.at(first, launch_index[known], gpu_start[known])
    waited: np.ndarray = ~np.isfinite(first) | (first >= call_start + GPU_WAITED_SHARE * (call_end - call_start))
    return waited


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


@dataclass(frozen=True)
class WindowTimes:
    """Many windows' WindowTime as columns, each (n,): one row per window."""

    span_us: np.ndarray  # float64
    gpu_busy_us: np.ndarray  # float64
    host_idle_us: np.ndarray  # float64
    host_idle_gaps: np.ndarray  # int64
    idle_gaps: np.ndarray  # int64

    @classmethod
    def of(cls, t: WindowTime) -> WindowTimes:
        return cls(
            np.array([t.span_us]), np.array([t.gpu_busy_us]), np.array([t.host_idle_us]),
            np.array([t.host_idle_gaps], np.int64), np.array([t.idle_gaps], np.int64),
        )  # fmt: skip


# The WindowMetrics fields that may be None, held as NaN in a column
_OPTIONAL = frozenset({"comm_hidden_cross_us", "median_launch_us", "median_kernel_us", "median_queue_us", "max_graph_launch_us"})
_COUNTS = frozenset(
    {"host_idle_gaps", "idle_gaps", "kernels", "comm_kernels", "launches", "graph_launches", "long_graph_launches", "replayed_kernels"}
)


@dataclass(frozen=True)
class MetricColumns:
    """Many windows' figures as columns: per WindowMetrics field one (n,) array (float64, NaN where
    the figure is None; int64 for counts). row(i) is window i's WindowMetrics, built when asked."""

    columns: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.columns["span_us"])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def row(self, i: int) -> WindowMetrics:
        values: dict[str, Any] = {}
        for name, col in self.columns.items():
            x = col[i]
            if name in _COUNTS:
                values[name] = int(x)
            elif name in _OPTIONAL and np.isnan(x):
                values[name] = None
            else:
                values[name] = float(x)
        return WindowMetrics(**values)


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
    call_waited: np.ndarray,  # (n_calls,) bool: gpu_waited_on_call
    time: WindowTime,
    untold_cross_us: float | None = None,
    served: bool = False,
) -> WindowMetrics:
    """One window's figures: the grouped computation with everything in group 0. untold_cross_us,
    served: the comm under the other microbatch's compute where no activity's microbatch is known
    (grouped_window_metrics)."""
    m = grouped_window_metrics(
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
        call_waited=call_waited,
        times=WindowTimes.of(time),
        untold_cross_us=None if untold_cross_us is None else np.array([untold_cross_us]),
        served=served,
    ).row(0)
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
    call_waited: np.ndarray,  # (n_calls,) bool: the GPU waited on the call (gpu_waited_on_call)
    times: WindowTimes,  # (n,): each window's time from the partition
    untold_cross_us: np.ndarray | None = None,  # (n,) float64: comm_hidden_cross_us where no microbatch is known (NaN: none)
    served: bool = False,  # an FFN server's: comm none of which ran under compute ran under no microbatch's (0)
) -> MetricColumns:
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
    untold = np.full(n, np.nan) if untold_cross_us is None else untold_cross_us
    if served:
        untold = np.where((comm_busy > 0) & (hidden == 0), 0.0, untold)
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
        "long_graph_launches": count(graph & (call_dur >= LONG_GRAPH_LAUNCH_US) & call_waited, call_group),
        "replayed_kernels": count(replayed & kernels),
        "replayed_gpu_us": total(replayed & kernels, dur),
        "gpu_us": total(kernels, dur),
    }

    return MetricColumns(
        {
            "span_us": times.span_us,
            "gpu_busy_us": times.gpu_busy_us,
            "compute_busy_us": compute_busy,
            "comm_busy_us": comm_busy,
            "copy_busy_us": copy_busy,
            "comm_hidden_us": hidden,
            "comm_hidden_cross_us": np.where(has_ubatch, cross, untold),
            "host_idle_us": times.host_idle_us,
            "host_idle_gaps": times.host_idle_gaps,
            "idle_gaps": times.idle_gaps,
            "kernels": columns["kernels"],
            "comm_kernels": columns["comm_kernels"],
            "launches": columns["launches"],
            "launch_us": columns["launch_us"],
            "median_launch_us": median_launch,
            "median_kernel_us": median_kernel,
            "median_queue_us": median_queue,
            "graph_launches": columns["graph_launches"],
            "long_graph_launches": columns["long_graph_launches"],
            "max_graph_launch_us": np.where(np.isfinite(max_graph), max_graph, np.nan),
            "replayed_kernels": columns["replayed_kernels"],
            "replayed_gpu_us": columns["replayed_gpu_us"],
            "gpu_us": columns["gpu_us"],
        }
    )


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
    criterion_met: bool | None  # criterion_met(ratio, microbatched): the DBO criterion, where it speaks
    microbatched: bool = True  # the DBO criterion speaks only where there are microbatches
    # where the ranks' collectives were matched: the comm per round trip apart into waiting for a
    # peer rank and transfer (medians over steps, so they need not add up to comm_per_round_trip_us)
    wait_per_round_trip_us: float | None = None
    transfer_per_round_trip_us: float | None = None


def criterion_met(ratio: float | None, microbatched: bool) -> bool | None:
    """The DBO criterion: the compute per round trip covers its comm (ratio >= 1); None without a
    ratio, or with one microbatch (the criterion speaks only where there are microbatches)."""
    return None if ratio is None or not microbatched else ratio >= 1.0


COMM_OPS_PER_ROUND_TRIP = 2  # a dispatch and a combine


def round_trips(
    step_us: np.ndarray,
    comm_ops: np.ndarray,
    comm_busy_us: np.ndarray,
    compute_busy_us: np.ndarray,
    layers: int | None,
    source: str,
    microbatched: bool = True,
    exposed_us: float | None = None,
) -> RoundTrips | None:
    """Medians over steps. comm_ops: communication operations per step. exposed_us: the comm per
    round trip where it is not its kernels' busy time (a disaggregated round trip's exposed time)."""
    ok = comm_ops > 0
    if not ok.any():
        return None
    rt = comm_ops[ok] / COMM_OPS_PER_ROUND_TRIP
    per_step = float(np.median(rt))
    comm = float(np.median(comm_busy_us[ok] / rt)) if exposed_us is None else exposed_us
    compute = float(np.median(compute_busy_us[ok] / rt))
    ratio = compute / comm if comm > 0 else None
    return RoundTrips(
        source=source,
        per_step=per_step,
        layers=layers,
        per_layer=per_step / layers if layers else None,
        step_us=float(np.median(step_us[ok])),
        per_round_trip_us=float(np.median(step_us[ok] / rt)),
        comm_per_round_trip_us=comm,
        compute_per_round_trip_us=compute,
        ratio=ratio,
        criterion_met=criterion_met(ratio, microbatched),
        microbatched=microbatched,
    )
