"""What overlap costs: kernels run slower beside the other microbatch's kernels (they share SMs,
memory bandwidth and, for NCCL, wait for their peer), so hidden comm is not all time saved.

For every kernel of a known microbatch, the share of its duration during which some kernel of the
other microbatch ran. `alone`: none of it; `overlapped`: at least half of it; in between is left
out. Per kernel name, the median duration in each state; per kind (compute, comm), the extra time
the overlapped kernels took over their names' alone medians, against that alone time. The serial
estimate is a sum: each kernel that ran alone at its own duration, each other one at its name's
mean alone time (a median times a count overstates a skewed name) or its own where the name never
ran alone; about what the same work takes one microbatch after the other. Overlap saved is that
estimate less the GPU's busy time (the kernels' union), within 0 and the kernels' summed time less
their union: overlap cannot save more than the time kernels ran together, nor a negative time, and
where they hardly ran together (within 1%) it saved none. Pure: arrays in, a Contention out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dbo_trace.analysis import classify as c
from dbo_trace.analysis.intervals import covered_within, index_groups, union

OVERLAPPED_AT_LEAST = 0.5  # share of a kernel's time beside the other microbatch to count as overlapped
TOP_KERNELS = 5
RAN_TOGETHER_AT_LEAST = 0.01  # the kernels' summed time over their union, less 1, for any overlap saved


@dataclass(frozen=True)
class KernelCost:
    name: str
    kind: str  # compute | comm
    alone: int
    overlapped: int
    median_alone_us: float
    median_overlapped_us: float
    slowdown: float  # median overlapped / median alone - 1 (_slowdown)

    @property
    def extra_us(self) -> float:
        return self.overlapped * (self.median_overlapped_us - self.median_alone_us)


@dataclass(frozen=True)
class Contention:
    compute_slowdown: float | None  # extra time / alone time of the overlapped compute kernels
    comm_slowdown: float | None
    compute_kernels_overlapped: int  # kernels that entered the figure
    comm_kernels_overlapped: int
    serial_estimate_us: float
    busy_us: float  # the kernels' union
    saved_us: float | None  # saved_us(): overlap's saving; None where nothing ran together
    top: list[KernelCost]  # the names that lost the most time, most first
    kernels_us: float  # the kernels' durations summed


def saved_us(serial_estimate_us: float, busy_us: float, kernels_us: float) -> float | None:
    """The serial estimate less the union, within 0 and the time kernels ran together (their sum less
    their union); None: the kernels' sum is their union within RAN_TOGETHER_AT_LEAST (nothing ran together)."""
    together = kernels_us - busy_us
    if together <= RAN_TOGETHER_AT_LEAST * kernels_us:
        return None
    return min(max(serial_estimate_us - busy_us, 0.0), together)


def _slowdown(alone_us: float, overlapped_us: float) -> float:
    return overlapped_us / alone_us - 1.0 if alone_us > 0 else 0.0


def beside_other_share(start: np.ndarray, end: np.ndarray, ubatch: np.ndarray) -> np.ndarray:
    """Per kernel: the share of its duration during which a kernel of another microbatch ran (NaN: no microbatch)."""
    share = np.full(len(start), np.nan)
    dur = end - start
    for u in np.unique(ubatch[ubatch >= 0]):
        mine = np.flatnonzero(ubatch == u)
        other = (ubatch >= 0) & (ubatch != u)
        o_start, o_end = union(start[other], end[other])
        covered = covered_within(start[mine], end[mine], o_start, o_end)
        share[mine] = np.where(dur[mine] > 0, covered / np.where(dur[mine] > 0, dur[mine], 1.0), 0.0)
    return share


def contention(
    *,
    start: np.ndarray,  # (n_gpu,) float64
    end: np.ndarray,  # (n_gpu,) float64
    kind: np.ndarray,  # (n_gpu,) int8: classify.COMPUTE / COMM / COPY
    ubatch: np.ndarray,  # (n_gpu,) int8, -1 unknown
    name: np.ndarray,  # (n_gpu,) int32 into names
    names: list[str],
) -> Contention | None:
    """None without two microbatches' kernels."""
    kernel = kind != c.COPY
    start, end, kind, ubatch, name = start[kernel], end[kernel], kind[kernel], ubatch[kernel], name[kernel]
    if len(np.unique(ubatch[ubatch >= 0])) < 2:
        return None
    share = beside_other_share(start, end, ubatch)
    dur = end - start
    alone = share == 0
    over = share >= OVERLAPPED_AT_LEAST
    costs: list[KernelCost] = []
    alone_mean = {}
    of_name = index_groups(name)  # each name's kernels, rather than a scan of every kernel per name
    for n in np.unique(name[ubatch >= 0]):
        sel = of_name[int(n)]
        a, o = dur[sel[alone[sel]]], dur[sel[over[sel]]]
        if len(a):
            alone_mean[int(n)] = float(np.mean(a))
        if len(a) and len(o):
            k = int(np.bincount(kind[sel]).argmax())
            alone_us, overlapped_us = float(np.median(a)), float(np.median(o))
            extra = _slowdown(alone_us, overlapped_us)
            costs.append(KernelCost(names[n], c.KIND_NAMES[k], len(a), len(o), alone_us, overlapped_us, extra))

    def slowdown(k: str) -> tuple[float | None, int]:
        picked = [x for x in costs if x.kind == k]
        base = sum(x.overlapped * x.median_alone_us for x in picked)
        return (sum(x.extra_us for x in picked) / base if base > 0 else None), sum(x.overlapped for x in picked)

    compute_slowdown, compute_n = slowdown("compute")
    comm_slowdown, comm_n = slowdown("comm")
    # A kernel alone at its own duration; any other at its name's mean alone, else its own duration.
    by_name = np.full(int(name.max()) + 1 if len(name) else 0, np.nan)
    by_name[list(alone_mean)] = list(alone_mean.values())
    alone_at = by_name[name]
    estimate = np.where(alone | np.isnan(alone_at), dur, alone_at)
    serial_us, kernels_us = float(estimate.sum()), float(dur.sum())
    busy_us = float(np.sum(np.diff(np.column_stack(union(start, end)), axis=1))) if len(start) else 0.0
    return Contention(
        compute_slowdown=compute_slowdown,
        comm_slowdown=comm_slowdown,
        compute_kernels_overlapped=compute_n,
        comm_kernels_overlapped=comm_n,
        serial_estimate_us=serial_us,
        busy_us=busy_us,
        saved_us=saved_us(serial_us, busy_us, kernels_us),
        top=sorted(costs, key=lambda x: -x.extra_us)[:TOP_KERNELS],
        kernels_us=kernels_us,
    )


def comm_kernel_names(kind: np.ndarray, name: np.ndarray, names: list[str]) -> list[tuple[str, int]]:
    """The kernels counted as communication, with their counts, most first: the classification at a glance."""
    ids, counts = np.unique(name[kind == c.COMM], return_counts=True)
    return sorted(((names[i], int(n)) for i, n in zip(ids, counts)), key=lambda x: -x[1])


def top_kernels(
    kind: np.ndarray, name: np.ndarray, dur: np.ndarray, names: list[str], of_kind: int, most: int = 5
) -> list[tuple[str, int, float]]:
    """The kernels of one kind that took the most GPU time: (name, count, total us), most first."""
    sel = kind == of_kind
    if not sel.any():
        return []
    ids, inverse = np.unique(name[sel], return_inverse=True)
    totals = np.bincount(inverse, weights=dur[sel])
    counts = np.bincount(inverse)
    order = np.argsort(-totals, kind="stable")[:most]
    return [(names[ids[i]], int(counts[i]), float(totals[i])) for i in order]
