"""The step as a pipeline in the document (version 9): the overlap's three figures, the pipeline's
terms and bounds, and DBO's effect predicted from one arm (docs/analysis.md, "The step as a
pipeline (AFD)" and "DBO's effect from one arm"). Figures are rounded and put in the units the
schema names (ms per step for the overlap, us per layer for the pipeline); no arithmetic beyond."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from dbo_trace.analysis.afd.dbo_model import DboWhatIf, Predicted
from dbo_trace.analysis.afd.pipeline import LayerVisits, Pipeline, PipelineFigures, StepOverlap
from dbo_trace.render.document.base import Int, Struct, _r
from dbo_trace.render.document.held import rounded
from dbo_trace.render.words.pipeline import calibration_text, caveat_texts


class OverlapBlock(Struct):
    """Per step over the steady span: one meaning each (docs/analysis.md)."""

    exposed_per_step_ms: float | None  # the attention GPU running only communication ("comm alone")
    hidden_per_step_ms: float  # round trips' time under the other microbatch's compute
    beside_round_trip_per_step_ms: float  # round trips' time beside the other microbatch's round trips
    round_trips_per_step_ms: float  # the round trips' time, summed
    periods: Int  # the step periods the span holds


# One layer of one microbatch (us; null: not measured): the analysis's own row, rounded (render/document/held.py).
PipelineLayerBlock = LayerVisits


@dataclass(frozen=True, kw_only=True)
class PipelineBlock(PipelineFigures):
    """The analysis's pipeline figures as they are, rounded (render/document/held.py; us, per layer
    where named), and its layers' rows after them."""

    layers_detail: list[LayerVisits]  # per layer and microbatch


# The other arm's terms (us): the analysis's own, rounded (render/document/held.py).
PredictedBlock = Predicted


class DboWhatIfBlock(Struct):
    """DBO's effect predicted from one arm (top level `dbo_what_if`)."""

    given: str  # off or on: the arm measured
    period_ms: float  # the other arm's predicted step period
    measured_period_ms: float  # the given arm's median steady period
    change: float  # DBO on against off as a fraction (+: DBO slower), as compare signs it
    interval: list[float]  # [low, high], fractions
    call: str  # pays, costs or undecided (the interval holds 0)
    calibration: str
    caveats: list[str]  # what widened the interval
    predicted: PredictedBlock  # the other arm's terms


def overlap_block(o: StepOverlap | None) -> OverlapBlock | None:
    if o is None:
        return None
    return OverlapBlock(
        exposed_per_step_ms=_r(o.exposed_us / 1000.0, 4) if o.exposed_us is not None else None,
        hidden_per_step_ms=round(o.hidden_us / 1000.0, 4),
        beside_round_trip_per_step_ms=round(o.beside_us / 1000.0, 4),
        round_trips_per_step_ms=round(o.round_trip_us / 1000.0, 4),
        periods=o.periods,
    )


_US = ("period_us", "loop_us", "outside_us", "attention_us", "hop_out_us", "ffn_us", "hop_back_us", "round_trip_us", "hop_us")
# tokens: a median of whole tokens (a half at most), as it is at 3 decimals
_FIGURE_DIGITS = dict.fromkeys((*_US, "attention_nccl_us", "ffn_nccl_us", "ffn_gap_us"), 2) | dict.fromkeys(
    ("ffn_waited_share", "attention_waited_share", "efficiency"), 4
)


def pipeline_block(p: Pipeline | None) -> PipelineBlock | None:
    if p is None:
        return None
    bounds = {k: round(v, 2) for k, v in p.bounds_us.items()} if p.bounds_us is not None else None
    figures = rounded(PipelineFigures(**{f.name: getattr(p, f.name) for f in fields(PipelineFigures)}), **_FIGURE_DIGITS)
    held = {f.name: getattr(figures, f.name) for f in fields(PipelineFigures)}
    return PipelineBlock(**(held | {"bounds_us": bounds}), layers_detail=_layer_blocks(p))


_LAYER_DIGITS = dict.fromkeys(("attention_us", "hop_out_us", "ffn_us", "hop_back_us", "round_trip_us"), 2) | dict.fromkeys(
    ("ffn_receive_waited", "attention_receive_waited"), 4
)


def _layer_blocks(p: Pipeline) -> list[LayerVisits]:
    return [rounded(row, **_LAYER_DIGITS) for row in p.by_layer or ()]


def dbo_what_if_block(w: DboWhatIf | None) -> DboWhatIfBlock | None:
    if w is None:
        return None
    x = w.predicted
    return DboWhatIfBlock(
        given=w.given, period_ms=round(w.period_us / 1000.0, 4), measured_period_ms=round(w.measured_period_us / 1000.0, 4),
        change=round(w.change, 4), interval=[round(w.low, 4), round(w.high, 4)], call=w.call,
        calibration=calibration_text(w), caveats=caveat_texts(w.caveats),
        predicted=rounded(
            replace(x, bounds_us={k: round(v, 2) for k, v in x.bounds_us.items()} if x.bounds_us is not None else None),
            attention_us=2, ffn_us=2, hop_us=2, layer_us=2,
        ),
    )  # fmt: skip
