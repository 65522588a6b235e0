"""Expensive calls: a CPU operator or range that costs far more per call than the GPU work launched
from inside it (docs/analysis.md, "Expensive calls"). Such a call is a cost on the host, not a wait
for the GPU: AFD's `vllm::manual_dbo_yield` took 1.43 ms per call with DBO off. Pure, linear."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dbo_trace.analysis.intervals import covered_within, step_thread_cover, union
from dbo_trace.analysis.steps.sources import index_in

EXPENSIVE_US = 200.0  # a median call at least this long ...
KERNEL_RATIO = 10.0  # ... and this many times the GPU time it launched per call
MOST = 3
LEAST_SHARE = 0.05  # of the marker steps' time: less is not worth a line
NESTED = 0.9  # a name whose calls lie this much inside another reported name's is left out
SKIP_PREFIXES = ("execute_", "ProfilerStep#", "dbo:", "gpu_model_runner:", "Optimizer.")


@dataclass(frozen=True)
class ExpensiveCall:
    name: str
    annotation: bool  # a named range (record_function) rather than a CPU operator
    calls: int
    median_us: float  # per call
    calls_per_step: float | None  # None without marker steps
    step_share: float | None  # the steps' wall time any thread was in one of its calls / the steps' time
    kernel_us_per_call: float  # GPU time launched from inside it, per call
    microbatched: bool = False  # the rank ran microbatches: a yield's call holds the other's turn
    threads_per_step: float | None = None  # median threads that called it in a step
    thread_share: float | None = None  # median over (step, thread) of that thread's time in it / the step's

    @property
    def yields(self) -> bool:
        return self.microbatched and "yield" in self.name.lower()


def expensive_calls(
    *,
    names: list[str],
    cpu_start: np.ndarray,
    cpu_end: np.ndarray,
    cpu_name: np.ndarray,
    cpu_lane: np.ndarray,
    cpu_is_annotation: np.ndarray,
    launch_start: np.ndarray,
    launch_lane: np.ndarray,
    gpu_us: np.ndarray,
    step_start: np.ndarray,
    step_end: np.ndarray,
    skip: tuple[str, ...] = SKIP_PREFIXES,
    microbatched: bool = False,
) -> list[ExpensiveCall]:
    """The CPU operators and ranges (by name) whose median call is >= EXPENSIVE_US and >= KERNEL_RATIO
    times the GPU time launched from inside their calls (a GPU activity whose launching call started
    inside a call, on its thread), called at least once per marker step (twice without) and >= 5% of the steps' time, largest
    share of the steps first; a name whose calls lie (90%) inside a reported name's calls is left out. cpu_*: (n_cpu,); launch_start,
    launch_lane, gpu_us: (n_gpu,) per GPU activity (-1 lane: launch unknown); step_*: (n_steps,)
    marker steps' CPU windows (empty: none). skip: prefixes of names never reported (step markers
    and phases: they mark where the question is asked, not a call). microbatched: the rank ran
    microbatches (each call's ExpensiveCall.microbatched)."""
    if not len(cpu_start):
        return []
    dur = cpu_end - cpu_start
    order = np.argsort(cpu_name, kind="stable")
    bounds = np.flatnonzero(np.diff(cpu_name[order])) + 1
    steps_us = float((step_end - step_start).sum()) if len(step_start) else 0.0
    out = []
    groups: dict[str, np.ndarray] = {}
    least = max(len(step_start), 2)  # a per-step cost: at least a call per step (a compile is once)
    steps = union(step_start, step_end)
    first, stop = np.r_[0, bounds], np.r_[bounds, len(order)]
    # the cheap test first, on all names at once: a trace of many steps has a name per step marker,
    # each called once
    often = np.flatnonzero(stop - first >= least)
    for a, b in zip(first[often].tolist(), stop[often].tolist()):
        group = order[a:b]
        name = names[int(cpu_name[group[0]])]
        if name.startswith(skip):
            continue
        median = float(np.median(dur[group]))
        if median < EXPENSIVE_US:
            continue
        kernel = 0.0
        for lane in np.unique(cpu_lane[group]).tolist():
            mine = group[cpu_lane[group] == lane]
            lo, hi = cpu_start[mine], cpu_end[mine]
            on = np.flatnonzero(launch_lane == lane)
            # a launch inside any call of the name on this thread (calls of one name may nest)
            idx = np.searchsorted(np.sort(lo), launch_start[on], side="right") - 1
            his = np.maximum.accumulate(hi[np.argsort(lo, kind="stable")])
            inside = (idx >= 0) & (launch_start[on] < his[np.clip(idx, 0, None)])
            kernel += float(gpu_us[on][inside].sum())
        per_call = kernel / len(group)
        if median < KERNEL_RATIO * per_call:
            continue
        in_steps = 0.0
        threads = thread_share = None
        if len(step_start):  # the wall time inside the steps that some call covers: threads at once count once
            u_lo, u_hi = union(cpu_start[group], cpu_end[group])
            in_steps = float(covered_within(u_lo, u_hi, *steps).sum())
            at = index_in(step_start, step_end, cpu_start[group])
            _, pair_step, cover = step_thread_cover(at, cpu_lane[group], cpu_start[group], cpu_end[group], step_start, step_end)
            if len(pair_step):
                threads = float(np.median(np.bincount(pair_step)[np.unique(pair_step)]))
                thread_share = float(np.median(cover / (step_end - step_start)[pair_step]))
        share = in_steps / steps_us if steps_us > 0 else None
        if share is not None and share < LEAST_SHARE:
            continue
        groups[name] = group
        out.append(
            ExpensiveCall(
                name=name,
                annotation=bool(cpu_is_annotation[group[0]]),
                calls=len(group),
                median_us=median,
                calls_per_step=len(group) / len(step_start) if len(step_start) else None,
                step_share=share,
                kernel_us_per_call=per_call,
                threads_per_step=threads,
                thread_share=thread_share,
                microbatched=microbatched,
            )
        )
    out.sort(key=lambda e: -(e.step_share or 0.0) * 1e12 - e.median_us * e.calls)
    # a call nested in another named one (a compiled region inside vllm::moe_forward) is its cost
    kept: list[tuple[ExpensiveCall, np.ndarray]] = []
    for e in out:
        mine = groups[e.name]
        if not any(_nested_share(mine, other, cpu_start, cpu_end, cpu_lane) >= NESTED for _, other in kept):
            kept.append((e, mine))
    return [e for e, _ in kept[:MOST]]


def _nested_share(inner: np.ndarray, outer: np.ndarray, start: np.ndarray, end: np.ndarray, lane: np.ndarray) -> float:
    """Share of the inner calls that lie inside an outer call on the same thread."""
    inside = 0
    for lane_id in np.unique(lane[inner]).tolist():
        o = outer[lane[outer] == lane_id]
        if not len(o):
            continue
        o = o[np.argsort(start[o], kind="stable")]
        o_hi = np.maximum.accumulate(end[o])
        i = inner[lane[inner] == lane_id]
        at = np.searchsorted(start[o], start[i], side="right") - 1
        inside += int(((at >= 0) & (end[i] <= o_hi[np.clip(at, 0, None)])).sum())
    return inside / len(inner)
