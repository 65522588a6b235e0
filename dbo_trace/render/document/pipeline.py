"""The step as a pipeline in the document (version 9): the overlap's three figures, the pipeline's
terms and bounds, and DBO's effect predicted from one arm (docs/analysis.md, "The step as a
pipeline (AFD)" and "DBO's effect from one arm"). Figures are rounded and put in the units the
schema names (ms per step for the overlap, us per layer for the pipeline); no arithmetic beyond."""

from __future__ import annotations

from dataclasses import replace

from dbo_trace.analysis.afd.dbo_model import DboWhatIf, Predicted
from dbo_trace.analysis.afd.pipeline import LayerVisits, Pipeline, StepOverlap
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


class PipelineBlock(Struct):
    """Medians over the steady steps (us); per layer where named."""

    layers: Int
    microbatched: bool
    has_ffn: bool
    tokens: float | None  # decode tokens per step
    period_us: float
    loop_us: float  # the layers' loop: first send's start to last receive's end
    outside_us: float  # the period less the loop
    attention_us: float | None  # A: a microbatch's attention visit (its receive's end to its next send's start)
    hop_out_us: float | None  # a send's start to the end of the FFN's receive
    ffn_us: float | None  # F: the FFN's receive's end to its send's start
    hop_back_us: float | None
    round_trip_us: float
    hop_us: float | None  # the wire alone where the receivers waited (hop_waited of them), else every hop
    hop_waited: Int
    attention_nccl_us: float | None  # the attention's send and a receive that found its answer sent
    ffn_nccl_us: float | None  # the FFN's send and a receive posted after the send began
    ffn_gap_us: float | None  # the FFN's host between a send and its next receive
    ffn_waited_share: float | None  # FFN receives posted before the send began
    attention_waited_share: float | None
    bounds_us: dict[str, float] | None  # per layer: round_trip, ffn_busy, attention_busy
    bound: str  # the bound that held most steady steps, or serial
    efficiency: float | None  # the bound that held against the loop per layer
    layers_detail: list[PipelineLayerBlock]  # per layer and microbatch


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


def pipeline_block(p: Pipeline | None) -> PipelineBlock | None:
    if p is None:
        return None
    return PipelineBlock(
        layers=p.layers, microbatched=p.microbatched, has_ffn=p.has_ffn, tokens=p.tokens,
        period_us=round(p.period_us, 2), loop_us=round(p.loop_us, 2), outside_us=round(p.outside_us, 2),
        attention_us=_r(p.attention_us, 2), hop_out_us=_r(p.hop_out_us, 2), ffn_us=_r(p.ffn_us, 2),
        hop_back_us=_r(p.hop_back_us, 2), round_trip_us=round(p.round_trip_us, 2), hop_us=_r(p.hop_us, 2),
        hop_waited=p.hop_waited, attention_nccl_us=_r(p.attention_nccl_us, 2), ffn_nccl_us=_r(p.ffn_nccl_us, 2),
        ffn_gap_us=_r(p.ffn_gap_us, 2), ffn_waited_share=_r(p.ffn_waited_share, 4),
        attention_waited_share=_r(p.attention_waited_share, 4),
        bounds_us={k: round(v, 2) for k, v in p.bounds_us.items()} if p.bounds_us is not None else None,
        bound=p.bound, efficiency=_r(p.efficiency, 4), layers_detail=_layer_blocks(p),
    )  # fmt: skip


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
