"""Longer traces in memory, tiled from a real recording's timeline: the shapes of
benchmarks/bench_report.py (and their pathologies) at any length, without writing or reading JSON.

Each copy of the recording is shifted by its span (plus a gap) in time and, unless asked otherwise,
by the largest correlation id in correlation ids, as bench_report.build shifts the JSON events.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from dbo_trace.trace.timeline import CommArgs, Intervals, LaunchArgs, Timeline

GAP_US = 1000.0  # between copies, as bench_report.build leaves
_PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")


def _tile(iv: Intervals, copies: int, span: float, corr_shift: int | None) -> Intervals:
    k = np.repeat(np.arange(copies), len(iv))
    shift = k * span
    corr = np.tile(iv.correlation, copies)
    if corr_shift is not None:
        corr = np.where(corr >= 0, corr + k * corr_shift, corr)
    return Intervals(
        np.tile(iv.start, copies) + shift,
        np.tile(iv.end, copies) + shift,
        np.tile(iv.name, copies),
        np.tile(iv.lane, copies),
        corr,
    )


def tiled(
    tl: Timeline,
    copies: int,
    *,
    markers: str = "own",
    shift_correlation: bool = True,
    steps_total: int = 10,
    fresh_cpu_threads: bool = False,
) -> Timeline:
    """The timeline repeated `copies` times. markers: "own" keeps the recording's ProfilerStep ranges
    (one step per recorded step), "none" drops them (steps must be inferred), "one" replaces them by a
    single ProfilerStep spanning everything, "few" by steps_total long steps (shape a).
    shift_correlation=False keeps every copy's correlation ids: duplicates, as a broken trace has.
    fresh_cpu_threads=True gives every copy's CPU ranges off the main thread new thread ids, their
    calls keeping the first's (what profile_all_threads records of each step's new microbatch threads)."""
    starts = [a.start.min() for a in (tl.gpu, tl.calls, tl.cpu) if len(a)]
    ends = [a.end.max() for a in (tl.gpu, tl.calls, tl.cpu) if len(a)]
    t0, span = float(min(starts)), float(max(ends)) - float(min(starts)) + GAP_US
    corrs = [a.correlation.max() for a in (tl.gpu, tl.calls) if len(a)]
    corr_shift = int(max(corrs)) + 1 if shift_correlation else None
    names = list(tl.names)
    is_marker_name = np.array([bool(_PROFILER_STEP.match(n)) for n in names] + [False])
    cpu, annotation = tl.cpu, tl.cpu_is_annotation
    if markers != "own":
        keep = ~is_marker_name[cpu.name]
        cpu = Intervals(*(getattr(cpu, f)[keep] for f in ("start", "end", "name", "lane", "correlation")))
        annotation = annotation[keep]
    gpu, calls, cpu_t = (_tile(a, copies, span, corr_shift) for a in (tl.gpu, tl.calls, cpu))
    if fresh_cpu_threads:
        copy = np.repeat(np.arange(copies), len(cpu))
        step = int(max(cpu.lane.max(initial=0), tl.calls.lane.max(initial=0))) + 1
        lane = np.where(cpu_t.lane != tl.pid, cpu_t.lane + copy * step, cpu_t.lane)
        cpu_t = replace(cpu_t, lane=lane)
    annotation = np.tile(annotation, copies)
    if markers in ("one", "few"):
        n = 1 if markers == "one" else max(1, min(steps_total, copies))
        per = -(-copies // n)  # copies per step
        lo = t0 + np.arange(n) * per * span
        hi = np.minimum(lo + per * span, t0 + copies * span) - GAP_US / 2
        first = len(names)
        names += [f"ProfilerStep#{i + 1}" for i in range(n)]
        lane = int(tl.pid) if tl.pid is not None else 0
        extra = Intervals(lo, hi, np.arange(first, first + n), np.full(n, lane), np.full(n, -1))
        cpu_t, order = _merged(cpu_t, extra)
        annotation = np.r_[annotation, np.ones(n, bool)][order]
    gpu_is_copy = np.tile(tl.gpu_is_copy, copies)
    return replace(
        tl, names=names, gpu=gpu, gpu_is_copy=gpu_is_copy, calls=calls, cpu=cpu_t, cpu_is_annotation=annotation, warnings=[],
        launch=_tiled_launch(tl, copies),
    )  # fmt: skip


def _tiled_launch(tl: Timeline, copies: int) -> LaunchArgs | None:
    """The launch columns of each copy's GPU activities (the copies in turn, as _tile lays them out)."""
    return tl.launch.take(np.tile(np.arange(len(tl.gpu)), copies)) if tl.launch is not None else None


def _merged(a: Intervals, b: Intervals) -> tuple[Intervals, np.ndarray]:
    """a and b as one Intervals sorted by start (stable), and the order that sorted them."""
    fields = ("start", "end", "name", "lane", "correlation")
    both = [np.r_[getattr(a, f), getattr(b, f)] for f in fields]
    order = np.argsort(both[0], kind="stable")
    return Intervals(*(x[order] for x in both)), order


def tiled_ranks(timelines: list[Timeline], copies: int) -> list[Timeline]:
    """Several ranks of one run, each repeated `copies` times by ONE span (the run's), so that their
    copies stay on one clock and their collectives keep matching; the comm args are tiled too, each
    copy's sequence numbers after the last copy's (the cross-rank path: matching, waits and the
    wait/transfer split)."""
    starts = [a.start.min() for tl in timelines for a in (tl.gpu, tl.calls, tl.cpu) if len(a)]
    ends = [a.end.max() for tl in timelines for a in (tl.gpu, tl.calls, tl.cpu) if len(a)]
    span = float(max(ends)) - float(min(starts)) + GAP_US
    out = []
    for tl in timelines:
        corr = int(max(a.correlation.max() for a in (tl.gpu, tl.calls) if len(a))) + 1
        gpu, calls, cpu = (_tile(a, copies, span, corr) for a in (tl.gpu, tl.calls, tl.cpu))
        args = tl.comm_args()
        per = int(args.seq.max(initial=0)) + 1
        seq = np.concatenate([np.where(args.seq >= 0, args.seq + k * per, -1) for k in range(copies)])
        tiled_args = CommArgs(np.tile(args.collective, copies), np.tile(args.group, copies), np.tile(args.nelems, copies), seq)
        out.append(
            replace(
                tl, gpu=gpu, calls=calls, cpu=cpu, gpu_is_copy=np.tile(tl.gpu_is_copy, copies),
                cpu_is_annotation=np.tile(tl.cpu_is_annotation, copies), gpu_args=tiled_args, warnings=[],
                launch=_tiled_launch(tl, copies),
            )  # fmt: skip
        )
    return out
