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


def _across(rule: str):
    return field(metadata={ACROSS: rule})


@dataclass
class WindowMetrics:
    span_us: float  # the window (or union of windows) measured: WindowTime
    gpu_busy_us: float  # union of all GPU activity
    compute_busy_us: float
    comm_busy_us: float
    copy_busy_us: float
    comm_hidden_us: float  # comm time concurrent with compute
    comm_hidden_cross_us: float | None = _across(SUM_IF_ALL)  # comm of one microbatch under the *other*'s compute
    host_idle_us: float  # GPU idle gaps whose next activity was launched after the gap began
    host_idle_gaps: int
    idle_gaps: int
    kernels: int
    comm_kernels: int
    launches: int
    launch_us: float
    median_launch_us: float | None = _across(MEDIAN)
    median_kernel_us: float | None = _across(MEDIAN)
    median_queue_us: float | None = _across(MEDIAN)  # launch call start -> kernel start
    graph_launches: int
    long_graph_launches: int
    max_graph_launch_us: float | None = _across(MAX)
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


def _median(x: np.ndarray) -> float | None:
    return float(np.median(x)) if len(x) else None


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
    start: np.ndarray,
    end: np.ndarray,
    kind: np.ndarray,
    ubatch: np.ndarray,
    launch_start: np.ndarray,
    launch_kind: np.ndarray,  # call kind of the launching call, -1 where unknown
    call_kind: np.ndarray,  # CUDA API calls in the window
    call_dur: np.ndarray,
    time: WindowTime,
) -> WindowMetrics:
    is_comm, is_compute, is_copy = kind == c.COMM, kind == c.COMPUTE, kind == c.COPY
    comm = (start[is_comm], end[is_comm])
    compute = (start[is_compute], end[is_compute])
    cross = None
    if len(ubatch) and (ubatch >= 0).any():
        cross = 0.0
        for u in np.unique(ubatch[ubatch >= 0]):
            mine = is_comm & (ubatch == u)
            others = is_compute & (ubatch >= 0) & (ubatch != u)
            cross += iv.overlap_length((start[mine], end[mine]), (start[others], end[others]))
    launches = call_kind == c.CALL_LAUNCH
    graph = call_kind == c.CALL_GRAPH_LAUNCH
    replayed = launch_kind == c.CALL_GRAPH_LAUNCH
    kernels = ~is_copy
    dur = end - start
    return WindowMetrics(
        span_us=time.span_us,
        gpu_busy_us=time.gpu_busy_us,
        compute_busy_us=iv.length(*compute),
        comm_busy_us=iv.length(*comm),
        copy_busy_us=iv.length(start[is_copy], end[is_copy]),
        comm_hidden_us=iv.overlap_length(comm, compute),
        comm_hidden_cross_us=cross,
        host_idle_us=time.host_idle_us,
        host_idle_gaps=time.host_idle_gaps,
        idle_gaps=time.idle_gaps,
        kernels=int(kernels.sum()),
        comm_kernels=int(is_comm.sum()),
        launches=int(launches.sum()),
        launch_us=float(call_dur[launches].sum()),
        median_launch_us=_median(call_dur[launches]),
        median_kernel_us=_median(dur[kernels]),
        median_queue_us=_median((start - launch_start)[~np.isnan(launch_start) & ~replayed]),
        graph_launches=int(graph.sum()),
        long_graph_launches=int((call_dur[graph] >= LONG_GRAPH_LAUNCH_US).sum()),
        max_graph_launch_us=float(call_dur[graph].max()) if graph.any() else None,
        replayed_kernels=int((replayed & kernels).sum()),
        replayed_gpu_us=float(dur[replayed & kernels].sum()),
        gpu_us=float(dur[kernels].sum()),
    )


@dataclass
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
