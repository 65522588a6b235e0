"""The report as a JSON-ready document (schema in docs/report-schema.md). Every renderer reads this.

Only field selection and rounding live here; every figure comes from dbo_trace.analysis.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Callable

from dbo_trace import __version__
from dbo_trace.analysis.accounting import TimeBuckets
from dbo_trace.analysis.contention import Contention
from dbo_trace.analysis.exposure import Exposure
from dbo_trace.analysis.held import HeldSummary
from dbo_trace.analysis.metrics import RoundTrips, WindowMetrics
from dbo_trace.analysis.ranks import op_label
from dbo_trace.analysis.report import HostTest, PhaseReport, RankReport, Report, StepReport
from dbo_trace.analysis.verdict import HOST_BOUND, Verdict, is_host_bound

SCHEMA = "dbo-trace-report"
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
        "verdict": verdict_block(p.verdict)
        if p.verdict is not None
        else {"label": None, "reasons": [], "per_rank": list(p.per_rank or [])},
    }


def verdict_block(v: Verdict) -> dict[str, Any]:
    return {"label": v.label, "reasons": list(v.reasons)}


def step_block(step: StepReport, rank: int) -> dict[str, Any]:
    return {
        "rank": rank,
        "label": step.label,
        "path": step.path,
        "phase": step.phase,
        "context_tokens": step.context_tokens,
        "generation_tokens": step.generation_tokens,
        "start_us": _r(step.start_us),
        "step_us": _r(step.wall_us),
        "comm_ops": step.comm_ops,
        "replayed": step.replayed,
        "verdict": verdict_block(step.verdict),
        **metrics_block(step.metrics),
    }


def graph_step_counts(steps: list[StepReport]) -> dict[str, int]:
    replayed = sum(1 for s in steps if s.replayed)
    return {"steps_replayed": replayed, "steps_eager": len(steps) - replayed}


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
        "round_trips": round_trips_block(r.round_trips),
        "steps": [step_block(s, r.rank) for s in r.steps],
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
