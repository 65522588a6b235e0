"""The report as a JSON-ready document (schema in docs/report-schema.md). Every renderer reads this.

Only field selection and rounding live here; every figure comes from dbo_trace.analysis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Callable

from dbo_trace import __version__
from dbo_trace.analysis.accounting import TimeBuckets
from dbo_trace.analysis.contention import Contention
from dbo_trace.analysis.exposure import Exposure
from dbo_trace.analysis.held import HeldSummary
from dbo_trace.analysis.host_time import CAUSES, HostCauses, host_line
from dbo_trace.analysis.metrics import RoundTrips, WindowMetrics
from dbo_trace.analysis.ranks import op_label
from dbo_trace.analysis.report import HostTest, PhaseReport, RankReport, Report, StepReport
from dbo_trace.analysis.summaries import CpuRangeRow, KernelSummary, Spread
from dbo_trace.analysis.verdict import HOST_BOUND, Verdict, is_host_bound

SCHEMA = "dbo-trace-report"
# 3: verdict.headline, verdict.qualifier, verdict.findings; steps' number; host_causes, kernel_summary,
# cpu_ranges, step_us spread
SCHEMA_VERSION = 3


def _r(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(float(x), digits)


@dataclass(frozen=True)
class Figure:
    """One figure of a window (a step, a rank, the run) as the report shows it."""

    block: str  # the JSON block it sits in: gpu, comm, host, graphs
    key: str
    value: Callable[[WindowMetrics], Any]
    digits: int | None = 3  # rounding; None: a count or a flag, as it is

    @property
    def name(self) -> str:
        return f"{self.block}.{self.key}"


def _figure(block: str, key: str, attribute: str, digits: int | None = 3) -> Figure:
    return Figure(block, key, attrgetter(attribute), digits)


# Every figure of a window, in the report's order. A new figure of WindowMetrics is one line here:
# it then appears in the JSON and in the every-figure tables of the Markdown and HTML reports.
WINDOW_FIGURES: tuple[Figure, ...] = (
    _figure("gpu", "utilization", "utilization", 4),
    _figure("gpu", "busy_us", "gpu_busy_us"),
    _figure("gpu", "span_us", "span_us"),
    _figure("gpu", "compute_busy_us", "compute_busy_us"),
    _figure("gpu", "copy_busy_us", "copy_busy_us"),
    _figure("gpu", "kernels", "kernels", None),
    _figure("comm", "busy_us", "comm_busy_us"),
    _figure("comm", "hidden_us", "comm_hidden_us"),
    _figure("comm", "hidden_fraction", "comm_hidden_fraction", 4),
    _figure("comm", "exposed_us", "comm_exposed_us"),
    _figure("comm", "hidden_under_other_ubatch_us", "comm_hidden_cross_us"),
    _figure("comm", "hidden_under_other_ubatch_fraction", "comm_hidden_cross_fraction", 4),
    _figure("comm", "kernels", "comm_kernels", None),
    Figure("host", "bound", is_host_bound, None),  # a window's own test; a rank's and the run's verdict replace it
    _figure("host", "idle_us", "host_idle_us"),
    _figure("host", "idle_fraction", "host_idle_fraction", 4),
    _figure("host", "idle_gaps", "host_idle_gaps", None),
    _figure("host", "all_idle_gaps", "idle_gaps", None),
    _figure("host", "launches", "launches", None),
    _figure("host", "launch_us", "launch_us"),
    _figure("host", "median_launch_us", "median_launch_us"),
    _figure("host", "median_kernel_us", "median_kernel_us"),
    _figure("host", "median_queue_us", "median_queue_us"),
    _figure("host", "long_graph_launches", "long_graph_launches", None),
    _figure("host", "max_graph_launch_us", "max_graph_launch_us"),
    _figure("graphs", "launches", "graph_launches", None),
    _figure("graphs", "replayed_kernels", "replayed_kernels", None),
    _figure("graphs", "replayed_kernel_fraction", "replayed_kernel_fraction", 4),
    _figure("graphs", "replayed_gpu_fraction", "replayed_gpu_fraction", 4),
)


def metrics_block(m: WindowMetrics) -> dict[str, Any]:
    out: dict[str, dict[str, Any]] = {}
    for f in WINDOW_FIGURES:
        value = f.value(m)
        out.setdefault(f.block, {})[f.key] = value if f.digits is None else _r(value, f.digits)
    return out


def figure_of(block: dict[str, Any], figure: Figure) -> Any:
    """A figure's value in a document's block (a rank's, a step's, the run's)."""
    return block[figure.block][figure.key]


def round_trips_block(rt: RoundTrips | None) -> dict[str, Any] | None:
    if rt is None:
        return None
    return {
        "source": rt.source,
        "per_step": _r(rt.per_step),
        "layers": rt.layers,
        "per_layer": _r(rt.per_layer),
        "step_us": _r(rt.step_us),
        "per_round_trip_us": _r(rt.per_round_trip_us),
        "comm_per_round_trip_us": _r(rt.comm_per_round_trip_us),
        "compute_per_round_trip_us": _r(rt.compute_per_round_trip_us),
        "ratio": _r(rt.ratio, 4),
        "criterion_met": rt.criterion_met,
        "microbatched": rt.microbatched,
    }


def time_block(b: TimeBuckets) -> dict[str, Any]:
    """Where the window's time went; the buckets add up to window_us (docs/analysis.md)."""
    return {
        "window_us": _r(b.window_us),
        "compute_us": _r(b.compute_us),
        "comm_exposed_us": _r(b.comm_exposed_us),
        "copy_us": _r(b.copy_us),
        "host_idle_us": _r(b.host_idle_us),
        "other_idle_us": _r(b.other_idle_us),
    }


def contention_block(x: Contention | None, transfer_slowdown: float | None = None) -> dict[str, Any] | None:
    if x is None:
        return None
    return {
        "compute_slowdown": _r(x.compute_slowdown, 4),
        "comm_slowdown": _r(x.comm_slowdown, 4),
        "compute_kernels_overlapped": x.compute_overlapped,
        "comm_kernels_overlapped": x.comm_overlapped,
        "serial_estimate_us": _r(x.serial_estimate_us),
        "busy_us": _r(x.busy_us),
        "saved_us": _r(x.saved_us),
        "comm_transfer_slowdown": _r(transfer_slowdown, 4),  # version 3: comm_slowdown less the waits for peers
        "top": [
            {
                "name": k.name,
                "kind": k.kind,
                "alone": k.alone,
                "overlapped": k.overlapped,
                "median_alone_us": _r(k.median_alone_us),
                "median_overlapped_us": _r(k.median_overlapped_us),
                "slowdown": _r(k.slowdown, 4),
            }
            for k in x.top
        ],
    }


def exposure_block(x: Exposure | None) -> dict[str, Any] | None:
    if x is None:
        return None
    return {"exposed_us": _r(x.exposed_us), **{f"{reason}_us": _r(t) for reason, t in x.by_reason_us.items()}}


def held_back_block(x: HeldSummary | None) -> dict[str, Any] | None:
    if x is None:
        return None
    late = x.late_record
    return {
        "comm_kernels_examined": x.comm_kernels,
        "kernels": x.kernels,
        "delay_us": _r(x.delay_us),
        "median_delay_us": _r(x.median_delay_us),
        "by_cause": {cause: {"kernels": n, "delay_us": _r(us)} for cause, (n, us) in x.by_cause.items()},
        "holders": [{"name": name, "kernels": n, "delay_us": _r(us)} for name, n, us in x.holders],
        "late_record_example": None
        if late is None
        else {
            "record_call": late.record_call,
            "thread": late.thread,
            "ubatch": late.ubatch,
            "after_holder_launch_us": _r(late.after_holder_launch_us),
            "holder": late.holder,
            "comm_kernel": late.comm_kernel,
            "delay_us": _r(late.delay_us),
        },
    }


def host_causes_block(c: HostCauses | None, line: str | None = None) -> dict[str, Any] | None:
    """What the host did while the GPU waited (docs/analysis.md, "Host time"); the causes add up to host_idle_us."""
    if c is None:
        return None

    def share(us: float) -> float | None:
        return _r(us / c.host_idle_us, 4) if c.host_idle_us > 0 else None

    top = c.top
    largest = c.largest
    return {
        "host_idle_us": _r(c.host_idle_us),
        "causes": {key: {"us": _r(c.by_cause_us[k]), "share": share(c.by_cause_us[k])} for k, key in enumerate(CAUSES)},
        "launch_calls": c.launch_calls,
        "sync_calls": c.sync_calls,
        "named": [{"name": n, "us": _r(t), "share": share(t)} for n, t in c.named],
        "cpu_ops": [{"name": n, "us": _r(t), "share": share(t)} for n, t in c.cpu_ops],
        "largest": None if largest is None else CAUSES[largest],
        "top": None if top is None else {"name": top[0], "us": _r(top[1]), "share": share(top[1])},
        "line": line,
    }


def kernel_summary_block(k: KernelSummary | None) -> dict[str, Any] | None:
    if k is None:
        return None
    return {
        "kernels": k.kernels,
        "names": k.names,
        "total_us": _r(k.total_us),
        "rows": [
            {
                "name": row.name,
                "count": row.count,
                "total_us": _r(row.total_us),
                "mean_us": _r(row.mean_us),
                "median_us": _r(row.median_us),
                "min_us": _r(row.min_us),
                "max_us": _r(row.max_us),
                "share": _r(row.share, 4),
            }
            for row in k.rows
        ],
    }


def cpu_range_block(rows: tuple[CpuRangeRow, ...]) -> list[dict[str, Any]]:
    return [
        {
            "name": row.name,
            "kind": row.kind,
            "count": row.count,
            "total_us": _r(row.total_us),
            "host_idle_us": _r(row.host_idle_us),
            "share": _r(row.share, 4),
        }
        for row in rows
    ]


def spread_block(x: Spread | None) -> dict[str, Any] | None:
    if x is None:
        return None
    return {"median": _r(x.median_us), "p90": _r(x.p90_us), "p99": _r(x.p99_us), "max": _r(x.max_us)}


def step_causes_block(c: HostCauses | None) -> dict[str, Any] | None:
    """A step's causes, compact (one per step): the time of each cause and the largest item."""
    if c is None:
        return None
    top = c.top
    return {
        "host_idle_us": _r(c.host_idle_us),
        "causes_us": {key: _r(c.by_cause_us[k]) for k, key in enumerate(CAUSES)},
        "launch_calls": c.launch_calls,
        "top": None
        if top is None
        else {"name": top[0], "us": _r(top[1]), "share": _r(top[1] / c.host_idle_us, 4) if c.host_idle_us > 0 else None},
    }


def host_test_block(h: HostTest) -> dict[str, Any]:
    return {"fraction": _r(h.fraction, 4), "basis": h.basis}


def phase_block(p: PhaseReport) -> dict[str, Any]:
    m = p.metrics
    return {
        "steps": p.steps,
        "median_step_us": _r(p.median_step_us),
        "gpu_utilization": _r(m.utilization, 4),
        "host_idle_fraction": _r(m.host_idle_fraction, 4),
        "comm_hidden_fraction": _r(m.comm_hidden_fraction, 4),
        "replayed_kernel_fraction": _r(m.replayed_kernel_fraction, 4),
        "graph_launches": m.graph_launches,
        "step_us": spread_block(p.step_spread),
        "host_causes": host_causes_block(
            p.host_causes,
            None
            if p.host_causes is None
            else host_line(p.phase, p.verdict is not None and p.verdict.label == HOST_BOUND, m.host_idle_fraction, p.host_causes),
        ),
        "verdict": verdict_block(p.verdict)
        if p.verdict is not None
        else {
            "label": None,
            "qualifier": None,
            "headline": None,
            "findings": [],
            "reasons": [],
            "per_rank": list(p.per_rank or []),
        },
    }


def verdict_block(v: Verdict) -> dict[str, Any]:
    return {
        "label": v.label,
        "qualifier": None if v.qualifier is None else v.qualifier.key,
        "headline": v.headline,
        "findings": list(v.findings),
        "reasons": list(v.reasons),
    }


def step_block(step: StepReport, rank: int, number: int) -> dict[str, Any]:
    return {
        "rank": rank,
        "number": number,  # the step's row in its rank's per-step table, from 1: what --step takes
        "label": step.label,
        "path": step.path,
        "phase": step.phase,
        "context_tokens": step.context_tokens,
        "generation_tokens": step.generation_tokens,
        "start_us": _r(step.start_us),
        "step_us": _r(step.wall_us),
        "comm_ops": step.comm_ops,
        "replayed": step.replayed,
        "captured_launches": step.captured_launches,
        "verdict": verdict_block(step.verdict),
        **metrics_block(step.metrics),
        "host_causes": step_causes_block(step.host_causes),
    }


def graph_step_counts(steps: list[StepReport]) -> dict[str, int]:
    """Steps by how they reached the GPU: replayed graphs, captured graphs (recorded, not run), eager."""
    replayed = sum(1 for s in steps if s.replayed)
    captured = sum(1 for s in steps if s.captured_launches and not s.replayed)
    return {
        "steps_replayed": replayed,
        "steps_captured": captured,
        "steps_eager": len(steps) - replayed - captured,
        "captured_launches": sum(s.captured_launches for s in steps),
    }


def rank_block(r: RankReport) -> dict[str, Any]:
    block = metrics_block(r.total)
    block["graphs"].update(graph_step_counts(r.steps))
    block["host"]["bound"] = r.verdict.label == HOST_BOUND
    return {
        "rank": r.rank,
        "source": r.source,
        **block,
        "steps_source": r.step_source,
        "steps_inferred": r.steps_inferred,
        "microbatch_source": r.attribution,
        "time": time_block(r.window),
        "time_in_steps": time_block(r.in_steps),
        "host_test": host_test_block(r.host_test),
        "host_causes": host_causes_block(
            r.host_causes,
            None
            if r.host_causes is None
            else host_line(f"rank {r.rank}", r.verdict.label == HOST_BOUND, r.host_test.fraction, r.host_causes),
        ),
        "host_causes_window": host_causes_block(r.host_causes_window),
        "phases": {p.phase: phase_block(p) for p in r.phases},
        "contention": contention_block(r.contention, r.comm_transfer_slowdown),
        "exposed_comm_reasons": exposure_block(r.exposure),
        "held_back_comm": held_back_block(r.held_back),
        "comm_operations": [
            {
                "ubatch": o.ubatch,
                "index": o.index,
                "steps": o.steps,
                "median_us": _r(o.median_us),
                "hidden_fraction": _r(o.hidden_fraction, 4),
                "median_exposed_us": _r(o.median_exposed_us),
                "reason": o.reason,
            }
            for o in r.operations
        ],
        "comm_kernel_names": [{"name": n, "count": k} for n, k in r.comm_kernels],
        "top_compute_kernels": [{"name": n, "count": k, "total_us": _r(t)} for n, k, t in r.top_compute_kernels],
        "kernel_summary": kernel_summary_block(r.kernel_summary),
        "cpu_range_summary": cpu_range_block(r.cpu_ranges),
        "round_trips": round_trips_block(r.round_trips),
        "steps": [step_block(s, r.rank, i + 1) for i, s in enumerate(r.steps)],
        "verdict": verdict_block(r.verdict),
        "attribution": {
            "ubatch_source": r.attribution,
            "step_source": r.step_source,
            "profile_all_threads": r.profile_all_threads,
        },
        "notes": list(r.notes),
    }


def _sources(values: list[str]) -> str:
    unique = list(dict.fromkeys(values))
    return unique[0] if len(unique) == 1 else "; ".join(f"rank {i}: {v}" for i, v in enumerate(values))


def build_document(report: Report) -> dict[str, Any]:
    block = metrics_block(report.total)
    all_steps = [s for r in report.ranks for s in r.steps]
    block["graphs"].update(graph_step_counts(all_steps))
    ranks = [rank_block(r) for r in report.ranks]
    waits = report.cross_rank.waits if report.cross_rank is not None else None
    for r in ranks:  # version 3: what this rank waited for its peers (null: one rank, or none matched)
        mine = waits.ranks.get(r["rank"]) if waits is not None else None
        r["peer_wait"] = None if mine is None else peer_wait_block(mine, report.cross_rank)
    block["host"]["bound"] = report.verdict.label == HOST_BOUND
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "dbo_trace_version": __version__,
        "inputs": report.inputs,
        **block,
        "steps_source": _sources([r.step_source for r in report.ranks]),
        "microbatch_source": _sources([r.attribution for r in report.ranks]),
        "time": time_block(report.window),
        "host_causes": host_causes_block(
            report.host_causes,
            None
            if report.host_causes is None
            else host_line(
                "",
                report.verdict.label == HOST_BOUND,
                report.host_test.fraction if report.host_test is not None else None,
                report.host_causes,
            ),
        ),
        "phases": {p.phase: phase_block(p) for p in report.phases},
        "round_trips": round_trips_block(report.round_trips),
        "steps": [step for rank in ranks for step in rank["steps"]],  # the ranks' own step blocks, built once
        "verdict": verdict_block(report.verdict),
        "options": {
            "comm_kernels": list(report.options.comm_patterns),
            "comm_streams": list(report.options.comm_streams),
            "ubatch_patterns": list(report.options.ubatch_patterns),
            "layers": report.options.layers,
            "step_marker": report.options.step_marker,
            "comm_kernels_only": report.options.comm_only,
        },
        "ranks": ranks,
        "cross_rank": cross_rank_block(report.cross_rank),
        "warnings": list(report.warnings),
    }


def cross_rank_block(view) -> dict[str, Any] | None:
    if view is None:
        return None
    return {
        "ranks": view.ranks,
        "summary": view.summary,
        "median_skew_us": round(view.median_skew_us, 3),
        "max_skew_us": round(view.max_skew_us, 3),
        "last_counts": {str(k): v for k, v in sorted(view.last_counts.items())},
        "exposed_comm_us": {str(k): round(v, 3) for k, v in sorted(view.exposed_comm_us.items())},
        "steps": [
            {
                "position": s.position,
                "skew_us": round(s.skew_us, 3),
                "last_rank": s.last_rank,
                "starts_us": {str(k): round(v, 3) for k, v in sorted(s.starts_us.items())},
                "straggler": s.straggler,  # version 3
            }
            for s in view.steps
        ],
        "notes": list(view.notes),
        # version 3
        "alignment": alignment_block(view.alignment),
        "straggler_threshold_us": round(view.threshold_us, 3),
        "median_step_us": None if view.median_step_us is None else round(view.median_step_us, 3),
        "late_counts": {str(k): v for k, v in sorted(view.late_counts.items())},
        "lines": view.lines,
        "waits": waits_block(view.waits, view.layers),
    }


def alignment_block(a: Any) -> dict[str, Any] | None:
    if a is None:
        return None
    return {
        "method": a.method,
        "per_rank": {str(k): v for k, v in sorted(a.per_rank.items())},
        "accuracy_us": a.accuracy_us,
        "offset_us": {str(k): round(v, 3) for k, v in sorted(a.offset_us.items())},
        "note": a.note,
    }


def rank_waits_block(r: Any, layers: int | None = None) -> dict[str, Any]:
    return {
        "comm_us": _r(r.comm_us),
        "matched_us": _r(r.matched_us),
        "wait_us": _r(r.wait_us),
        "wait_share": _r(r.wait_share, 4),
        "transfer_us": _r(r.transfer_us),
        "waited_for_us": {str(k): _r(v) for k, v in sorted(r.waited_for_us.items())},
        "by_op": [
            {"ubatch": ub, "index": k, "label": op_label(ub, k, layers, r.ops_per_ubatch), "wait_us": _r(us)}
            for (ub, k), us in sorted(r.by_op_us.items(), key=lambda kv: (-kv[1], kv[0]))
        ],
        "by_step_us": {str(k): _r(v) for k, v in sorted(r.by_step_us.items())},
        "last_ops": r.last_ops,
        "caused_us": _r(r.caused_us),
    }


def peer_wait_block(r: Any, view: Any) -> dict[str, Any]:
    """A rank's waits for its peers in brief, for a headline (analysis/peers.py)."""
    top = max(r.waited_for_us.items(), key=lambda kv: kv[1]) if r.waited_for_us else None
    mostly = max(r.by_op_us.items(), key=lambda kv: kv[1]) if r.by_op_us else None
    return {
        "wait_us": _r(r.wait_us),
        "wait_share": _r(r.wait_share, 4),
        "transfer_us": _r(r.transfer_us),
        "waited_mostly_for": None if top is None else top[0],
        "mostly_at": None if mostly is None else {"ubatch": mostly[0][0], "index": mostly[0][1], "wait_us": _r(mostly[1])},
        "significant": r.wait_us > view.threshold_us,
    }


def group_waits_block(g: Any, key: str) -> dict[str, Any]:
    return {
        key: g.key,
        "operations": g.ops,
        "straggler": g.straggler,
        "max_skew_us": _r(g.max_skew_us),
        "wait_us": {str(k): _r(v) for k, v in sorted(g.wait_us.items())},
        "last_ops": {str(k): v for k, v in sorted(g.last_ops.items())},
        "caused_us": {str(k): _r(v) for k, v in sorted(g.caused_us.items())},
    }


def held_back_most_block(most: tuple[int, int, float, int, int] | None) -> dict[str, Any] | None:
    if most is None:
        return None
    rank, ubatch, us, last_ops, ops = most
    return {"rank": rank, "ubatch": ubatch, "caused_us": _r(us), "last_ops": last_ops, "operations": ops}


def waits_block(w: Any, layers: int | None = None) -> dict[str, Any] | None:
    if w is None:
        return None
    return {
        "threshold_us": round(w.threshold_us, 3),
        "zero_us": w.zero_us,  # arrivals are microseconds after this instant of the shared clock
        "median_end_spread_us": _r(w.median_end_spread_us),
        "held_back_most": held_back_most_block(w.held_back_most),
        "ranks": {str(k): rank_waits_block(r, layers) for k, r in sorted(w.ranks.items())},
        "steps": [group_waits_block(g, "step") for g in w.steps],
        "ubatches": [group_waits_block(g, "ubatch") for g in w.ubatches],
        "operations": [
            {
                "channel": o.channel,
                "position": o.position,
                "last_rank": o.last_rank,
                "skew_us": _r(o.skew_us),
                "ranks": {
                    str(r): {
                        "arrival_us": round(o.arrival_us[i], 3),  # from zero_us
                        "kernel_us": _r(o.kernel_us[i]),
                        "wait_us": _r(o.wait_us[i]),
                        "transfer_us": _r(o.kernel_us[i] - o.wait_us[i]),
                        "ubatch": o.ubatch[i],
                        "step": o.step[i],
                        "op_index": o.op_index[i],
                    }
                    for i, r in enumerate(o.ranks)
                },
            }
            for o in w.ops
        ],
    }


# The shape of a stored document, as far as the renderers read it (render_document): what an
# archive's report.json must hold before it is shown. A dict spec lists required keys (others are
# allowed; a key ending in `?` may be absent); [spec] is a list of it; Nullable(spec) also allows null; MapOf(spec) is a dict of
# any keys whose values have the shape; OneOf(...) a string among those. NUMBER is an int or a
# finite float (not a bool), within the range a float holds.
class Nullable:
    def __init__(self, spec: Any):
        self.spec = spec


class MapOf:
    def __init__(self, spec: Any):
        self.spec = spec


class OneOf:
    def __init__(self, *values: str):
        self.values = values


NUMBER, INT, TEXT, FLAG = "number", "whole number", "string", "true or false"
_NUM = Nullable(NUMBER)
_VERDICT = {"label": TEXT, "reasons": [TEXT], "headline?": Nullable(TEXT), "qualifier?": Nullable(TEXT), "findings?": [TEXT]}


def _figure_blocks() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for f in WINDOW_FIGURES:
        out.setdefault(f.block, {})[f.key] = Nullable(FLAG) if f.key == "bound" else _NUM
    return out


def _with_figures(spec: dict[str, Any]) -> dict[str, Any]:
    merged = {**spec}
    for block, keys in _figure_blocks().items():
        merged[block] = {**keys, **spec.get(block, {})}
    return merged


def _document_shape() -> dict[str, Any]:
    from dbo_trace.analysis.exposure import REASON_SHORT, REASON_TEXT

    time = {k: NUMBER for k in ("window_us", "compute_us", "comm_exposed_us", "copy_us", "host_idle_us", "other_idle_us")}
    step = _with_figures(
        {
            "rank": INT,
            "label": TEXT,
            "path": Nullable(TEXT),
            "phase": Nullable(TEXT),
            "step_us": _NUM,
            "replayed": FLAG,
            "number?": Nullable(INT),
            "captured_launches?": INT,
            "verdict": _VERDICT,
        }
    )
    host_causes = Nullable(
        {
            "host_idle_us?": _NUM,
            "line": Nullable(TEXT),
            "top?": Nullable({"name": TEXT, "us": _NUM, "share": _NUM}),
            "causes?": MapOf({"us": _NUM, "share": _NUM}),
        }
    )
    spread = Nullable({k: _NUM for k in ("median", "p90", "p99", "max")})
    phase = {
        "host_causes?": host_causes,
        "step_us?": spread,
        "steps": INT,
        **{k: _NUM for k in ("median_step_us", "gpu_utilization", "host_idle_fraction", "comm_hidden_fraction")},
        "replayed_kernel_fraction": _NUM,
        "verdict": {"label": Nullable(TEXT), "reasons": [TEXT], "per_rank?": [Nullable(TEXT)]},
    }
    round_trips = Nullable(
        {
            "source": TEXT,
            "layers": Nullable(INT),
            "criterion_met": Nullable(FLAG),
            **{
                k: _NUM
                for k in ("step_us", "per_step", "per_layer", "per_round_trip_us", "comm_per_round_trip_us")
                + ("compute_per_round_trip_us", "ratio")
            },
        }
    )
    causes = {"kernels": INT, "delay_us": _NUM}
    held = Nullable(
        {
            "comm_kernels_examined": INT,
            "kernels": INT,
            "delay_us": _NUM,
            "median_delay_us": _NUM,
            "by_cause": MapOf(causes),
            "holders": [{"name": TEXT, "kernels": INT}],
            "late_record_example": Nullable(
                {"record_call": TEXT, "thread": INT, "ubatch": INT, "after_holder_launch_us": _NUM, "holder": TEXT}
            ),
        }
    )
    rank = _with_figures(
        {
            "rank": INT,
            "steps": [step],
            "verdict": _VERDICT,
            "notes": [TEXT],
            "time": time,
            "host_test": {"fraction": _NUM, "basis": TEXT},
            "contention": Nullable(
                {
                    "compute_slowdown": _NUM,
                    "comm_slowdown": _NUM,
                    "compute_kernels_overlapped": Nullable(INT),
                    "comm_kernels_overlapped": Nullable(INT),
                    "serial_estimate_us": _NUM,
                    "busy_us": _NUM,
                    "saved_us": _NUM,
                    "comm_transfer_slowdown?": _NUM,
                }
            ),
            "exposed_comm_reasons": Nullable({"exposed_us": _NUM, **{f"{r}_us?": _NUM for r in REASON_TEXT}}),
            "held_back_comm": held,
            "comm_operations": [
                {
                    "ubatch": INT,
                    "index": INT,
                    "steps": INT,
                    "median_us": _NUM,
                    "hidden_fraction": _NUM,
                    "median_exposed_us": _NUM,
                    "reason": Nullable(OneOf(*REASON_SHORT)),
                }
            ],
            "comm_kernel_names": [{"name": TEXT, "count": INT}],
            "top_compute_kernels": [{"name": TEXT, "count": INT, "total_us": _NUM}],
            "host_causes?": host_causes,
            "kernel_summary?": Nullable(
                {
                    "kernels": INT,
                    "names": INT,
                    "total_us": _NUM,
                    "rows": [
                        {
                            "name": TEXT,
                            "count": INT,
                            **{k: _NUM for k in ("total_us", "mean_us", "median_us", "min_us")},
                            "max_us": _NUM,
                            "share": _NUM,
                        }
                    ],
                }
            ),  # fmt: skip
            "cpu_range_summary?": [
                {"name": TEXT, "kind": TEXT, "count": INT, "total_us": _NUM, "host_idle_us": _NUM, "share": _NUM}
            ],
            "peer_wait?": Nullable(
                {"wait_us": _NUM, "wait_share": _NUM, "transfer_us?": _NUM, "waited_mostly_for?": Nullable(INT)}
            ),
        }
    )
    return _with_figures(
        {
            "dbo_trace_version": TEXT,
            "inputs": [TEXT],
            "steps_source": TEXT,
            "microbatch_source": TEXT,
            "phases": MapOf(phase),
            "round_trips": round_trips,
            "steps": [step],
            "verdict": _VERDICT,
            "ranks": [rank],
            "cross_rank": Nullable(
                {
                    "summary": TEXT,
                    "notes": [TEXT],
                    "lines?": [TEXT],
                    "alignment?": Nullable({"method": Nullable(TEXT), "accuracy_us": _NUM}),
                }
            ),
            "host_causes?": host_causes,
            "warnings": [TEXT],
        }
    )


_MAX_FLOAT_INT = 1 << 1000  # an int beyond a float's range cannot be formatted as a time


def _problem(value: Any, spec: Any, where: str) -> str | None:
    if isinstance(spec, Nullable):
        return None if value is None else _problem(value, spec.spec, where)
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return f"{where} is not an object"
        for key, inner in spec.items():
            key, may_be_absent = (key[:-1], True) if key.endswith("?") else (key, False)
            if key not in value:
                if may_be_absent:
                    continue
                return f"{where}.{key} is missing"
            found = _problem(value[key], inner, f"{where}.{key}")
            if found:
                return found
        return None
    if isinstance(spec, list):
        if not isinstance(value, list):
            return f"{where} is not a list"
        return next((p for i, v in enumerate(value) if (p := _problem(v, spec[0], f"{where}[{i}]"))), None)
    if isinstance(spec, MapOf):
        if not isinstance(value, dict):
            return f"{where} is not an object"
        return next((p for k, v in value.items() if (p := _problem(v, spec.spec, f"{where}.{k}"))), None)
    if isinstance(spec, OneOf):
        return None if value in spec.values else f"{where} is not one of {', '.join(spec.values)}"
    ok = {
        TEXT: isinstance(value, str),
        FLAG: isinstance(value, bool),
        INT: type(value) is int and abs(value) < _MAX_FLOAT_INT,
        NUMBER: (type(value) is int and abs(value) < _MAX_FLOAT_INT) or (type(value) is float and math.isfinite(value)),
    }[spec]
    return None if ok else f"{where} is not a {spec}"


def _depth(value: Any, limit: int) -> bool:
    """Whether the value nests deeper than limit (iteratively: no recursion to exhaust)."""
    level: list[Any] = [value]
    for _ in range(limit):
        level = [v for c in level if isinstance(c, (dict, list)) for v in (c.values() if isinstance(c, dict) else c)]
        if not level:
            return False
    return any(isinstance(c, (dict, list)) for c in level)


def document_problem(document: Any, max_depth: int = 32) -> str | None:
    """Why a stored document cannot be shown (the first problem found, naming its place, e.g.
    `ranks[0].verdict.label is missing`), or None: nested no deeper than max_depth, and every field
    the renderers read there with its type."""
    if _depth(document, max_depth):
        return f"nested more than {max_depth} deep"
    found = _problem(document, _document_shape(), "report")
    if found:
        return found
    for i, rank in enumerate(document["ranks"]):  # a late record is shown with its example
        held = rank["held_back_comm"]
        if held and "late_record" in held["by_cause"] and held["late_record_example"] is None:
            return f"report.ranks[{i}].held_back_comm.late_record_example is missing"
    return None
