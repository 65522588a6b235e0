"""Steady state and stalls: each step's period, and the steps that are not the run's steady state
(docs/analysis.md, "Steady state and stalls").

A step's **period** is its share of the wall clock: from its start to the next step's start.
Periods never count time twice where windows overlap (a GPU running behind its CPU); a step
followed by an idle server has a long one, and is a stall (an outlier) for it.

A **stall** is a step that holds compile or JIT work (torch.compile's dynamo and inductor ranges,
Triton autotuning, a graph capture) or whose period is a robust outlier against its phase's steps
(median and MAD). The verdicts and headlines are decided over the other steps, the steady state;
the stalls are reported apart with their cause and cost.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import numpy as np

from dbo_trace.analysis.classify import per_name
from dbo_trace.analysis.intervals import covered_within, union

# CPU ranges of compile and JIT work, never of running compiled code: torch.compile writes
# `dynamo`, `entire_frame_compile`, `backend_compile`, `inductor_compile`, `async_compile.*` and
# many `... (dynamo_timed)` ranges while it compiles; Triton's autotuner benchmarks configurations.
# Not matched: `TorchDynamo Cache Lookup`, `Torch-Compiled Region`, `## Call CompiledFxGraph ##`
# and `triton_poi_fused_...` launches, which every step of a compiled model runs.
COMPILE_RANGE = re.compile(
    r"^dynamo$|\(dynamo_timed\)$|entire_frame_compile|backend_compile|inductor_compile|compile_fx"
    r"|async_compile|autotun|benchmark_all_configs|triton[._ ]compile|compile_inner",
    re.I,
)
# Text every name COMPILE_RANGE finds holds (each alternative has one of these): the names are
# searched for it first, at once (timeline.names_hinted), and only those it finds are tested.
COMPILE_HINT = re.compile(r"dynamo|compile|autotun|benchmark_all_configs", re.I)
COMPILE_MIN_US = 1000.0  # a step holds compile work when it has at least this much of it ...
COMPILE_MIN_SHARE = 0.05  # ... and at least this share of its period
OUTLIER_MADS = 3.5  # a period beyond the phase median + this many scaled MADs ...
OUTLIER_RATIO = 2.0  # ... and beyond twice the median is an outlier
MAD_SCALE = 1.4826  # MAD x this estimates the standard deviation of normal data
MIN_OUTLIER_STEPS = 4  # fewer steps in a phase: no MAD test (a median of 3 says little) ...
FAR_OUTLIER_RATIO = 10.0  # ... only a step this many times the median of its phase's other steps (2 or 3 of them)

StallCause = Literal["compile", "graph capture", "outlier"]  # the document writes it as it is
COMPILE: StallCause = "compile"
CAPTURE: StallCause = "graph capture"
OUTLIER: StallCause = "outlier"


@dataclass(frozen=True)
class CompileRange:
    """Compile ranges of one name that start in a step's period: their summed time."""

    name: str
    us: float


@dataclass(frozen=True)
class Stall:
    """Why a step is not steady state, and what it cost."""

    cause: StallCause
    extra_us: float | None  # its period less its phase's steady median (None: no steady step in the phase)
    compile_us: float  # compile/JIT ranges inside its period (their union)
    capture_us: float  # graph capture inside its period
    compile_ranges: tuple[CompileRange, ...]  # the outermost compile ranges by time, largest first (3)
    phase_median_us: float | None  # the steady median it is measured against


def step_periods(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """(n,) float64: each step's period (start, end: (n,), one rank's step windows): from its start to
    the next step's start (the last step: its window). The time between steps (the scheduler,
    sampling, Python) is the step's too; a window that runs past the next start is not counted twice.
    They add up to the wall clock from the first step's start to the last one's end."""
    if not len(start):
        return np.empty(0)
    nxt = next_starts(start)
    periods: np.ndarray = np.where(np.isinf(nxt), end - start, nxt - start)
    return periods


def next_starts(start: np.ndarray) -> np.ndarray:
    """(n,) float64: the next step's start after each step (in start order; the last: inf)."""
    out = np.empty(len(start))
    if not len(start):
        return out
    order = np.argsort(start, kind="stable")
    out[order] = np.r_[start[order][1:], np.inf]
    return out


def in_periods(
    start: np.ndarray, end: np.ndarray, r_start: np.ndarray, r_end: np.ndarray
) -> np.ndarray:
    """(n,) float64: per step, the time of the ranges (r_start, r_end; any, overlapping) inside its
    period's stretch of its window: [start, min(next start, end))."""
    if not len(start) or not len(r_start):
        return np.zeros(len(start))
    u_lo, u_hi = union(r_start.astype(float), r_end.astype(float))
    stop = np.minimum(next_starts(start), end)
    return covered_within(start, np.maximum(stop, start), u_lo, u_hi)


def compile_ranges(names: list[str], cpu_name: np.ndarray) -> np.ndarray:
    """(n_cpu,) bool: the CPU ranges that are compile or JIT work (by name)."""
    compiling: np.ndarray = per_name(names, cpu_name, lambda n: bool(COMPILE_RANGE.search(n)), hint=COMPILE_HINT)[cpu_name]
    return compiling


def top_compile_names(
    start: np.ndarray, end: np.ndarray, r_start: np.ndarray, r_end: np.ndarray, r_name: np.ndarray, names: list[str], top: int = 3
) -> list[tuple[CompileRange, ...]]:
    """Per step, the outermost compile ranges that start inside its period's stretch, by name and
    summed time, largest first (a range inside another of them is left out: it is in the outer one)."""
    out: list[tuple[CompileRange, ...]] = []
    if not len(r_start):
        return [() for _ in range(len(start))]
    order = np.lexsort((-(r_end - r_start), r_start))
    rs, re_, rn = r_start[order], r_end[order], r_name[order]
    outer = np.r_[True, rs[1:] >= np.maximum.accumulate(re_)[:-1]]
    rs, re_, rn = rs[outer], re_[outer], rn[outer]
    stop = np.minimum(next_starts(start), end)
    first, last = np.searchsorted(rs, start, side="left"), np.searchsorted(rs, stop, side="left")
    out = [()] * len(start)
    for i in np.flatnonzero(last > first).tolist():  # only the steps a range starts in: few
        hi = float(stop[i])
        totals: dict[str, float] = {}
        for k in range(int(first[i]), int(last[i])):
            n = names[int(rn[k])]
            totals[n] = totals.get(n, 0.0) + float(min(re_[k], hi) - rs[k])
        out[i] = tuple(CompileRange(n, us) for n, us in sorted(totals.items(), key=lambda x: (-x[1], x[0]))[:top])
    return out


def find_stalls(
    *,
    period_us: np.ndarray,  # (n,) float64: each step's period
    phase: list[str | None],  # each step's phase (None: no phase; its steps are one group)
    compile_us: np.ndarray,  # (n,) float64: compile/JIT ranges inside its period
    capture_us: np.ndarray,  # (n,) float64: graph capture inside its period
    compile_names: list[tuple[CompileRange, ...]],
) -> dict[int, Stall]:
    """Each stalled step's Stall by position; the steps not in it are steady state. Per phase:
    compile or capture steps first, then outliers among the rest (median and MAD of the rest); the
    cost is measured against the median of the phase's steady steps."""
    n = len(period_us)
    steady_kind, compile_kind, capture_kind, outlier_kind = range(4)
    causes: dict[int, StallCause] = {compile_kind: COMPILE, capture_kind: CAPTURE, outlier_kind: OUTLIER}
    floor = np.fmax(COMPILE_MIN_US, COMPILE_MIN_SHARE * period_us)  # fmax: as max(), a NaN period gets the floor
    kind = np.where(compile_us >= floor, compile_kind, np.where(capture_us >= floor, capture_kind, steady_kind))
    names = list(dict.fromkeys(phase))
    code = np.array([names.index(p) for p in phase], np.int64) if len(names) > 1 else np.zeros(n, np.int64)
    median = np.zeros(n)  # each step's phase's steady median, where it has one
    has_median = np.zeros(n, bool)
    for k in range(len(names)):
        mine = code == k
        idx = np.flatnonzero(mine & (kind == steady_kind))
        if len(idx) >= MIN_OUTLIER_STEPS:
            x = period_us[idx]
            med = float(np.median(x))
            mad = float(np.median(np.abs(x - med))) * MAD_SCALE
            kind[idx[(x > med + OUTLIER_MADS * mad) & (x > OUTLIER_RATIO * med)]] = outlier_kind
        elif len(idx) >= 3:  # a few steps: each against the median of the others, far beyond it only
            for i in idx.tolist():
                others = float(np.median([period_us[j] for j in idx.tolist() if j != i]))
                if period_us[i] > FAR_OUTLIER_RATIO * others:
                    kind[i] = outlier_kind
        steady = period_us[mine & (kind == steady_kind)]
        if len(steady):
            median[mine], has_median[mine] = float(np.median(steady)), True
    out: dict[int, Stall] = {}
    for i in np.flatnonzero(kind != steady_kind).tolist():
        base = float(median[i]) if has_median[i] else None
        out[i] = Stall(
            cause=causes[int(kind[i])],
            extra_us=None if base is None else float(period_us[i] - base),
            compile_us=float(compile_us[i]),
            capture_us=float(capture_us[i]),
            compile_ranges=compile_names[i],
            phase_median_us=base,
        )
    return out


BEHIND_SHARE = 0.05  # the step windows add up to this much more than the wall clock they cover: say so


@dataclass(frozen=True)
class Behind:
    """Step windows that overlap: a step's kernels still ran when the next step started (the GPU
    runs behind the CPU), so a window is not the step's share of the wall clock."""

    steps: int
    overlapping: int  # steps whose window runs past the next step's start
    windows_us: float  # the step windows added
    wall_us: float  # the wall clock they cover (their union)
    median_overlap_us: float  # how far past the next start, over the overlapping steps


def behind(start: np.ndarray, end: np.ndarray) -> Behind | None:
    """The overlap of one rank's step windows (start, end: (n,)), where it matters (BEHIND_SHARE)."""
    if len(start) < 2:
        return None
    u_lo, u_hi = union(start.astype(float), end.astype(float))
    wall = float((u_hi - u_lo).sum())
    windows = float((end - start).sum())
    if wall <= 0 or windows < (1 + BEHIND_SHARE) * wall:
        return None
    past = end - np.minimum(next_starts(start), end)
    over = past[past > 0]
    return Behind(len(start), len(over), windows, wall, float(np.median(over)) if len(over) else 0.0)
