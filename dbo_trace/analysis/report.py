"""Assemble per-step, per-rank and all-rank results: the Report every renderer reads."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

import numpy as np

from dbo_trace.analysis import classify as c
from dbo_trace.analysis.attribution import Attribution, attribute
from dbo_trace.analysis.metrics import RoundTrips, WindowMetrics, round_trips, window_metrics
from dbo_trace.analysis.verdict import Verdict, decide
from dbo_trace.trace.eventlog import EventLogData
from dbo_trace.trace.timeline import Timeline

if TYPE_CHECKING:
    from dbo_trace.analysis.ranks import CrossRank


@dataclass(frozen=True)
class Options:
    comm_patterns: tuple[str, ...] = ()
    comm_streams: tuple[int, ...] = ()
    ubatch_patterns: tuple[str, ...] = ()
    layers: int | None = None


@dataclass
class StepReport:
    label: str
    path: str | None
    wall_us: float
    comm_ops: int
    comm_ops_from_log: bool  # counted as event-log comm phases, else as comm kernels
    metrics: WindowMetrics
    verdict: Verdict
    index: int = -1  # into the attribution's steps
    start_us: float = 0.0  # the step's window on the trace clock
    end_us: float = 0.0


@dataclass
class RankDetail:
    """What the pictures need beyond the numbers: the timeline and, per activity, its attribution and kind."""

    timeline: Timeline
    attribution: Attribution
    kernel_kind: np.ndarray  # classify.COMPUTE / COMM / COPY per GPU activity
    call_kind: np.ndarray  # classify.CALL_* per CUDA API call
    launch_kind: np.ndarray  # call kind of each GPU activity's launching call, -1 where unknown


@dataclass
class RankReport:
    rank: int
    source: str
    attribution: str
    step_source: str
    profile_all_threads: bool
    steps: list[StepReport]
    total: WindowMetrics
    round_trips: RoundTrips | None
    verdict: Verdict
    notes: list[str] = field(default_factory=list)
    detail: RankDetail | None = field(default=None, repr=False, compare=False)


@dataclass
class Report:
    inputs: list[str]
    ranks: list[RankReport]
    total: WindowMetrics
    round_trips: RoundTrips | None
    verdict: Verdict
    options: Options
    warnings: list[str] = field(default_factory=list)
    cross_rank: "CrossRank | None" = None  # set by session.analyze with two or more ranks


def _profiled_all_threads(tl: Timeline) -> bool:
    """CPU ops on threads other than the main one: the profiler saw the microbatch threads."""
    ops = tl.cpu.lane[~tl.cpu_is_annotation] if len(tl.cpu) else tl.cpu.lane
    return bool(len(ops) and tl.pid is not None and (ops != tl.pid).any())


def analyze_rank(tl: Timeline, logs: list[EventLogData], options: Options) -> RankReport:
    att: Attribution = attribute(tl, logs, list(options.ubatch_patterns), options.layers)
    rules = c.CommRules(extra_patterns=options.comm_patterns, streams=options.comm_streams)
    kinds = c.kernel_kinds(tl.names, tl.gpu.name, tl.gpu_is_copy, tl.gpu.lane, rules)
    call_kind = c.call_kinds(tl.names, tl.calls.name)
    launch_kind = np.where(
        att.gpu_launch_index >= 0, call_kind[np.clip(att.gpu_launch_index, 0, None)] if len(call_kind) else -1, -1
    )
    call_dur = tl.calls.end - tl.calls.start
    all_threads = _profiled_all_threads(tl)

    def metrics(gpu_sel: np.ndarray, call_sel: np.ndarray) -> WindowMetrics:
        return window_metrics(
            tl.gpu.start[gpu_sel],
            tl.gpu.end[gpu_sel],
            kinds[gpu_sel],
            att.gpu_ubatch[gpu_sel],
            att.gpu_launch_start[gpu_sel],
            launch_kind[gpu_sel],
            call_kind[call_sel],
            call_dur[call_sel],
        )

    steps: list[StepReport] = []
    for i in range(len(att.steps)):
        gpu_sel = att.gpu_step == i
        if not gpu_sel.any():
            continue
        m = metrics(gpu_sel, att.call_step == i)
        logged = att.comm_phases[i] if att.comm_phases is not None else -1
        ops = int(logged) if logged >= 0 else m.comm_kernels
        # A step lasts until its last GPU activity ends (a graph replay's CPU window is only the launch).
        step_end = max(float(att.steps.end[i]), float(tl.gpu.end[gpu_sel].max()))
        start = float(att.steps.start[i])
        steps.append(
            StepReport(
                att.steps.label[i], att.steps.path[i], step_end - start, ops, logged >= 0, m, decide(m), i, start, step_end
            )
        )

    # Totals over the steps: between-step time (scheduler, profiler step) is not the step's.
    # With no step holding GPU activity, the whole trace is the window.
    everything = np.ones(len(tl.gpu), bool), np.ones(len(tl.calls), bool)
    total = sum_metrics([s.metrics for s in steps]) if steps else metrics(*everything)
    rt = _round_trips(steps, att.layers)
    notes = list(att.notes) + tl.warnings
    return RankReport(
        rank=tl.rank,
        source=str(tl.source),
        attribution=att.source,
        step_source=att.steps.source,
        profile_all_threads=all_threads,
        steps=steps,
        total=total,
        round_trips=rt,
        verdict=decide(total, rt, all_threads),
        notes=notes,
        detail=RankDetail(tl, att, kinds, call_kind, launch_kind),
    )


def _round_trips(steps: list[StepReport], layers: int | None) -> RoundTrips | None:
    if not steps:
        return None
    from_log = [s.comm_ops_from_log for s in steps]
    if all(from_log):
        source = "comm phases in the event log"
    elif not any(from_log):
        source = "comm kernels (one per operation)"
    else:
        source = "comm phases in the event log, comm kernels where a step had none (graph replay)"
    return round_trips(
        np.array([s.wall_us for s in steps]),
        np.array([s.comm_ops for s in steps], dtype=float),
        np.array([s.metrics.comm_busy_us for s in steps]),
        np.array([s.metrics.compute_busy_us for s in steps]),
        layers,
        source,
    )


def sum_metrics(parts: list[WindowMetrics]) -> WindowMetrics:
    """All-rank totals: times and counts add; medians are the median of the ranks'; maxima the max."""
    out = {}
    for f in fields(WindowMetrics):
        values = [getattr(p, f.name) for p in parts]
        present = [v for v in values if v is not None]
        if f.name.startswith("median_"):
            out[f.name] = float(np.median(present)) if present else None
        elif f.name.startswith("max_"):
            out[f.name] = max(present) if present else None
        elif f.name == "comm_hidden_cross_us":
            out[f.name] = sum(present) if len(present) == len(values) else None
        else:
            out[f.name] = sum(values)
    return WindowMetrics(**out)


def combine(ranks: list[RankReport], options: Options, inputs: list[str], warnings: list[str]) -> Report:
    total = sum_metrics([r.total for r in ranks])
    rt = ranks[0].round_trips if len(ranks) == 1 else _median_round_trips([r.round_trips for r in ranks])
    return Report(
        inputs=inputs,
        ranks=ranks,
        total=total,
        round_trips=rt,
        verdict=decide(total, rt, any(r.profile_all_threads for r in ranks)),
        options=options,
        warnings=warnings,
    )


def _median_round_trips(parts: list[RoundTrips | None]) -> RoundTrips | None:
    present = [p for p in parts if p is not None]
    if not present:
        return None
    med = {
        f.name: float(np.median([getattr(p, f.name) for p in present]))
        for f in fields(RoundTrips)
        if f.name not in ("source", "layers", "per_layer", "ratio")
    }
    comm, compute = med["comm_per_round_trip_us"], med["compute_per_round_trip_us"]
    layers = present[0].layers
    return RoundTrips(
        source=present[0].source,
        layers=layers,
        per_layer=med["per_step"] / layers if layers else None,
        ratio=compute / comm if comm > 0 else None,
        **med,
    )
