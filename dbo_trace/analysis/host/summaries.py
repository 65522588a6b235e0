"""The summary tables people expect from Nsight Systems and HTA (docs/analysis.md, "Summaries"):
kernels by name, CPU ranges by name with the host-idle time they explain, step-time spread."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dbo_trace.analysis.host.host_time import CPU_OP, NAMED, HostPieces
from dbo_trace.analysis.intervals import grouped_median

KERNEL_ROWS = 50  # kernel names kept per rank (the JSON); text outputs show fewer
CPU_RANGE_ROWS = 20


@dataclass(frozen=True)
class KernelRow:
    name: str
    count: int
    total_us: float
    mean_us: float
    median_us: float
    min_us: float
    max_us: float
    share: float  # of the summed time of every kernel (copies apart), as Nsight's "Time (%)"


@dataclass(frozen=True)
class KernelSummary:
    kernels: int  # every kernel of the rank
    names: int  # distinct names
    total_us: float  # summed kernel time
    rows: tuple[KernelRow, ...]  # the largest total first, KERNEL_ROWS at most


def kernel_summary(
    names: list[str], name_ids: np.ndarray, dur: np.ndarray, is_copy: np.ndarray, top: int = KERNEL_ROWS
) -> KernelSummary:
    """Per kernel name (memcpy and memset left out): count, total, mean, median, min, max, share."""
    keep = ~is_copy
    ids, d = name_ids[keep], dur[keep]
    if not len(ids):
        return KernelSummary(0, 0, 0.0, ())
    uniq, group = np.unique(ids, return_inverse=True)
    n = len(uniq)
    count = np.bincount(group, minlength=n)
    total = np.bincount(group, weights=d, minlength=n)
    lo = np.full(n, np.inf)
    hi = np.full(n, -np.inf)
    np.minimum.at(lo, group, d)
    np.maximum.at(hi, group, d)
    median = grouped_median(group, n, d)
    everything = float(d.sum())
    order = np.lexsort((uniq, -total))[:top]  # ties: by name id, stable across runs
    rows = tuple(
        KernelRow(
            names[int(uniq[i])],
            int(count[i]),
            float(total[i]),
            float(total[i] / count[i]),
            float(median[i]),
            float(lo[i]),
            float(hi[i]),
            float(total[i] / everything) if everything > 0 else 0.0,
        )
        for i in order.tolist()
    )
    return KernelSummary(int(len(ids)), n, everything, rows)


@dataclass(frozen=True)
class CpuRangeRow:
    name: str
    kind: str  # "named" (annotations, model-runner phases) or "cpu op"
    count: int  # ranges of that name, on every thread
    total_us: float  # their summed duration (nested ones each counted)
    host_idle_us: float  # host-caused GPU idle attributed to it (docs "Host time": outermost, on a followed thread)
    share: float | None  # of the host-caused GPU idle


def cpu_range_summary(
    pieces: HostPieces, cpu_name: np.ndarray, cpu_dur: np.ndarray, host_idle_us: float, top: int = CPU_RANGE_ROWS
) -> tuple[CpuRangeRow, ...]:
    """The CPU ranges and operators that explain the most host idle, with their count and time."""
    n_names = len(pieces.names)
    if not n_names or not len(pieces.lo):
        return ()
    length = pieces.hi - pieces.lo
    rows = []
    for kind, text in ((NAMED, "named"), (CPU_OP, "cpu op")):
        sel = pieces.cause == kind
        idle = np.bincount(pieces.name[sel], weights=length[sel], minlength=n_names)
        rows += [(int(i), text, float(idle[i])) for i in np.flatnonzero(idle > 0).tolist()]
    rows.sort(key=lambda r: (-r[2], r[0]))
    rows = rows[:top]
    count = np.bincount(cpu_name, minlength=n_names) if len(cpu_name) else np.zeros(n_names, np.int64)
    total = np.bincount(cpu_name, weights=cpu_dur, minlength=n_names) if len(cpu_name) else np.zeros(n_names)
    return tuple(
        CpuRangeRow(
            pieces.names[i], text, int(count[i]), float(total[i]), idle, idle / host_idle_us if host_idle_us > 0 else None
        )
        for i, text, idle in rows
    )


@dataclass(frozen=True)
class Spread:
    """Step times of a phase: the middle and the tail (numpy's linear percentiles)."""

    median_us: float
    p90_us: float
    p99_us: float
    max_us: float


def spread(values: list[float] | np.ndarray) -> Spread | None:
    v = np.asarray(values, float)
    if not len(v):
        return None
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return Spread(float(p50), float(p90), float(p99), float(v.max()))
