"""DBO's effect from one arm (AFD): the step as a pipeline (analysis/afd/pipeline.py) measured on the
arm given, its terms moved to the other arm by ratios calibrated on recorded pairs, and the other
arm's period predicted with an interval (docs/analysis.md, "DBO's effect from one arm").

DBO on, per layer, the largest of: one microbatch's round trip (A' + 2 hop(n/2) + F'), the FFN busy
with both microbatches (2 x (F' + its NCCL cost)), the attention busy with both (2 x (A' + its
NCCL cost)). DBO off, per layer: A + 2 hop(n) + F. The step: the layers' loop plus what lies outside
it. Pure functions over small records; no I/O (the calibration's arms are read by the commands).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dbo_trace.analysis.afd.pipeline import BOUND_ATTENTION, BOUND_FFN, BOUND_ROUND_TRIP, Pipeline

FLOOR_POINTS = 0.03  # no interval is narrower than +-3 points: two recordings of one configuration differ by 3-8
NOISE_POINTS = 0.04  # a recording's own noise against another's, added (in quadrature) to the model's error
WIDEN_GPU = 0.03  # another GPU than the calibration's
WIDEN_NO_FFN = 0.03  # no FFN trace: the hop and the FFN's visit split by the calibration's hop line
WIDEN_OUTSIDE = 0.03  # a load outside the calibrated loads
WIDEN_PADS = 0.10  # a batch or a microbatch padded to a larger graph: misses ran 7-14 points, always too low
DEFAULT_HOP_SLOPE_US = 1.25  # us per token of a hop, where the calibration has one load (NCCL sockets on loopback)

WHAT_ON, WHAT_OFF, WHAT_OTHER = "on", "off", "other"  # --what-if dbo=on|off; compare asks for the other arm

PAYS, COSTS, UNDECIDED = "pays", "costs", "undecided"

# Why there is no prediction (render/words/pipeline.py words each)
NOT_AFD = "not_afd"  # no AFD attention rank whose round trips were paired
ALREADY_ON = "already_on"  # dbo=on of a DBO arm
ALREADY_OFF = "already_off"  # dbo=off of a DBO-off arm
OTHER_MODE = "other_mode"  # the arm ran eager (or graphs) and every calibrated pair the other way
NOT_MEASURED = "not_measured"  # a term the model needs was not measured (no decode tokens, no attention visit)
OWN_PAIR_ONLY = "own_pair_only"  # the calibration holds only this recording's own pair


@dataclass(frozen=True)
class NotPredicted:
    why: str  # one of the codes above


@dataclass(frozen=True)
class ArmTerms:
    """What a calibration keeps of one recorded arm: its pipeline's figures and what it ran on."""

    label: str  # where it came from (untrusted: a path)
    dbo: bool
    tokens: float  # decode tokens per step
    layers: int
    period_us: float
    loop_us: float
    attention_us: float
    ffn_us: float
    hop_us: float  # the wire alone where its receivers waited, else every hop
    round_trip_bound_us: float | None  # DBO arms: the bounds per layer
    ffn_busy_us: float | None
    attention_busy_us: float | None
    ffn_cost_us: float | None  # the FFN's NCCL cost per visit and its gap (DBO arms)
    attention_cost_us: float | None
    gpu: str | None = None
    fingerprint: str | None = None  # the attention trace's clock base: the same recording
    graphs: bool = True  # its steps replayed CUDA graphs (a calibration is of one mode)
    graph_sizes: tuple[int, ...] | None = None  # its recording's CUDA graph capture sizes, where known

    @property
    def outside_us(self) -> float:
        return self.period_us - self.loop_us


@dataclass(frozen=True)
class CalibrationPair:
    off: ArmTerms
    on: ArmTerms


@dataclass(frozen=True)
class Calibration:
    pairs: tuple[CalibrationPair, ...]
    source: str  # in words: what it was measured on
    default: bool = False  # the calibration shipped with dbo-trace


@dataclass(frozen=True)
class Terms:
    """The calibration's terms: how a term of the DBO-off arm becomes the DBO arm's."""

    attention: float  # A' / A: half the tokens, the GPU shared with the other microbatch's FFN
    ffn: float  # F' / F
    hop_slope_us: float  # a hop's cost per token
    hop_intercept_us: float  # a hop at no tokens (used only without the FFN's trace)
    outside_us: float  # what DBO adds outside the layer loop (host before the graph launch)
    ffn_cost: tuple[float, float]  # the FFN's NCCL cost per visit: intercept, per token of a microbatch
    attention_cost: tuple[float, float]
    tokens: tuple[float, float]  # the calibrated loads' range, decode tokens per step
    gpus: tuple[str, ...]
    pairs: int


@dataclass(frozen=True)
class Ratios:
    """The terms, and how each arm's measured loop per layer fits what they predict of it."""

    terms: Terms
    on_fit: float  # the DBO arm's measured loop per layer against its predicted bound
    off_fit: float  # the DBO-off arm's against its predicted serial layer


@dataclass(frozen=True)
class Predicted:
    """The other arm's step, term by term (us)."""

    attention_us: float
    ffn_us: float
    hop_us: float
    bounds_us: dict[str, float] | None  # DBO on: the three bounds per layer
    layer_us: float  # the loop per layer (its step's period is DboWhatIf.period_us: other_period)


@dataclass(frozen=True)
class Padding:
    """A batch (DBO off) or a microbatch (DBO on) whose tokens pad to a larger CUDA graph."""

    microbatch: bool
    tokens: int
    graph: int


@dataclass(frozen=True)
class Caveats:
    """What widened the interval (render/words/pipeline.py words each)."""

    no_ffn: bool = False  # no FFN trace: its visit and the hops split by the calibration's hop line
    gpu: str | None = None  # the arm's GPU, where the calibration's is another
    calibrated_gpus: tuple[str, ...] = ()
    outside: tuple[float, float, float] | None = None  # the arm's tokens a step, the calibrated low and high
    pads: tuple[Padding, ...] = ()  # the given or the predicted arm's shape pads

    def __bool__(self) -> bool:
        return self.no_ffn or self.gpu is not None or self.outside is not None or bool(self.pads)


@dataclass(frozen=True)
class DboWhatIf:
    """DBO's effect predicted from one arm (JSON `dbo_what_if`)."""

    given: str  # "off" or "on": the arm measured
    period_us: float  # the other arm's predicted step period
    measured_period_us: float  # the given arm's
    change: float  # DBO on against off, as compare signs it (+: DBO slower)
    low: float
    high: float
    call: str  # PAYS, COSTS (the interval excludes 0) or UNDECIDED
    source: str  # what the calibration was measured on, as it says (untrusted where given)
    pairs: int  # the calibration's pairs used
    loo_max: float | None  # each pair predicted from the others: the largest miss (fraction); None with one pair
    caveats: Caveats
    predicted: Predicted
    excluded_own: bool = False  # the calibration held this recording's own pair, left out


def _line(x: list[float], y: list[float], fallback_slope: float) -> tuple[float, float]:
    """Least squares y = a + b x where x has two distinct values or more, else a + fallback_slope x
    through the mean."""
    xs, ys = np.array(x, float), np.array(y, float)
    if len(np.unique(xs)) >= 2:
        b, a = np.polyfit(xs, ys, 1)
        return float(a), float(b)
    return float(ys.mean() - fallback_slope * xs.mean()), fallback_slope


def ratios_of(pairs: tuple[CalibrationPair, ...]) -> Ratios:
    """The terms from recorded pairs: medians of their ratios; lines over their loads."""
    # the hop against the tokens it carries: n on the DBO-off arm, n/2 on the DBO arm
    hop_a, hop_b = _line(
        [p.off.tokens for p in pairs] + [p.on.tokens / 2 for p in pairs],
        [p.off.hop_us for p in pairs] + [p.on.hop_us for p in pairs],
        DEFAULT_HOP_SLOPE_US,
    )
    if hop_b <= 0:
        hop_b = DEFAULT_HOP_SLOPE_US
    half = [p.on.tokens / 2 for p in pairs]
    ffn_cost = _line(half, [p.on.ffn_cost_us or 0.0 for p in pairs], 0.0)
    att_cost = _line(half, [p.on.attention_cost_us or 0.0 for p in pairs], 0.0)
    terms = Terms(
        attention=float(np.median([p.on.attention_us / p.off.attention_us for p in pairs])),
        ffn=float(np.median([p.on.ffn_us / p.off.ffn_us for p in pairs])),
        hop_slope_us=hop_b,
        hop_intercept_us=hop_a,
        outside_us=float(np.median([p.on.outside_us - p.off.outside_us for p in pairs])),
        ffn_cost=ffn_cost,
        attention_cost=att_cost,
        tokens=(min(p.off.tokens for p in pairs), max(p.off.tokens for p in pairs)),
        gpus=tuple(sorted({g for p in pairs for g in (p.off.gpu, p.on.gpu) if g})),
        pairs=len(pairs),
    )
    # each arm's measured loop per layer against what the terms predict of it from its partner
    on_fit = [p.on.loop_us / p.on.layers / _on_from_off(p.off, terms, 1.0).layer_us for p in pairs]
    off_fit = [p.off.loop_us / p.off.layers / _off_from_on(p.on, terms, 1.0).layer_us for p in pairs]
    return Ratios(terms, float(np.median(on_fit)), float(np.median(off_fit)))


def _cost(line: tuple[float, float], tokens: float, r: Terms) -> float:
    """A role's NCCL cost per visit at a microbatch's tokens, held inside the calibrated loads (the
    cost saturates: 34, 46 and 53 us at 8, 16 and 32 tokens on the H200 pair)."""
    t = min(max(tokens, r.tokens[0] / 2), r.tokens[1] / 2)
    return max(0.0, line[0] + line[1] * t)


def _on_from_off(off: ArmTerms, r: Terms, fit: float) -> Predicted:
    """The DBO arm from the DBO-off arm; fit: Ratios.on_fit (1: the terms' bound as it is)."""
    n = off.tokens
    a, f = r.attention * off.attention_us, r.ffn * off.ffn_us
    hop = max(0.0, off.hop_us - r.hop_slope_us * n / 2)
    bounds = {
        BOUND_ROUND_TRIP: a + 2 * hop + f,
        BOUND_FFN: 2 * (f + _cost(r.ffn_cost, n / 2, r)),
        BOUND_ATTENTION: 2 * (a + _cost(r.attention_cost, n / 2, r)),
    }
    layer = max(bounds.values()) * fit
    return Predicted(a, f, hop, bounds, layer)


def _off_from_on(on: ArmTerms, r: Terms, fit: float) -> Predicted:
    """The DBO-off arm from the DBO arm; fit: Ratios.off_fit (1: the terms' serial layer as it is)."""
    n = on.tokens
    a, f = on.attention_us / r.attention, on.ffn_us / r.ffn
    hop = on.hop_us + r.hop_slope_us * n / 2
    layer = (a + 2 * hop + f) * fit
    return Predicted(a, f, hop, None, layer)


def other_period(given: ArmTerms, predicted: Predicted, r: Terms) -> float:
    """The other arm's step period: the given arm's, its layers' loop at the predicted layer, and the
    outside of the loop DBO adds (on from off) or takes away (off from on)."""
    outside = -r.outside_us if given.dbo else r.outside_us
    return given.period_us - given.loop_us + given.layers * predicted.layer_us + outside


def terms_of(p: Pipeline, label: str, gpu: str | None = None, fingerprint: str | None = None) -> ArmTerms | None:
    """What the model reads of an arm's pipeline; None where a term was not measured (no tokens, no A)."""
    if p.tokens is None or p.attention_us is None:
        return None
    if p.ffn_us is None or p.hop_us is None:  # no FFN trace: the round trip not split
        return None
    b = p.bounds_us or {}
    return ArmTerms(
        label=label, dbo=p.microbatched, tokens=p.tokens, layers=p.layers, period_us=p.period_us,
        loop_us=p.loop_us, attention_us=p.attention_us, ffn_us=p.ffn_us, hop_us=p.hop_us,
        round_trip_bound_us=b.get(BOUND_ROUND_TRIP), ffn_busy_us=b.get(BOUND_FFN),
        attention_busy_us=b.get(BOUND_ATTENTION),
        ffn_cost_us=(p.ffn_nccl_us or 0.0) + (p.ffn_gap_us or 0.0) if p.ffn_nccl_us is not None else None,
        attention_cost_us=p.attention_nccl_us, gpu=gpu, fingerprint=fingerprint, graphs=p.graphs,
    )  # fmt: skip


def _split_without_ffn(p: Pipeline, r: Terms) -> ArmTerms | None:
    """An arm without the FFN's trace: its round trip split into two hops (the calibration's line at its
    tokens per hop) and the FFN's visit (the rest)."""
    if p.tokens is None or p.attention_us is None:
        return None
    per_hop = p.tokens / 2 if p.microbatched else p.tokens
    hop = r.hop_intercept_us + r.hop_slope_us * per_hop
    return ArmTerms(
        label="", dbo=p.microbatched, tokens=p.tokens, layers=p.layers, period_us=p.period_us, loop_us=p.loop_us,
        attention_us=p.attention_us, ffn_us=max(1.0, p.round_trip_us - 2 * hop), hop_us=hop,
        round_trip_bound_us=None, ffn_busy_us=None, attention_busy_us=None, ffn_cost_us=None, attention_cost_us=None,
    )  # fmt: skip


def _change(given: ArmTerms, period_us: float) -> float:
    """period_us: the other arm's."""
    on, off = (given.period_us, period_us) if given.dbo else (period_us, given.period_us)
    return on / off - 1.0


def loo_errors(pairs: tuple[CalibrationPair, ...]) -> list[float]:
    """Each pair predicted, both ways, from the others alone: the prediction's change less the measured
    (points as fractions). Empty with fewer than two pairs."""
    if len(pairs) < 2:
        return []
    out = []
    for k, p in enumerate(pairs):
        r = ratios_of(pairs[:k] + pairs[k + 1 :])
        measured = p.on.period_us / p.off.period_us - 1.0
        out.append(_change(p.off, other_period(p.off, _on_from_off(p.off, r.terms, r.on_fit), r.terms)) - measured)
        out.append(_change(p.on, other_period(p.on, _off_from_on(p.on, r.terms, r.off_fit), r.terms)) - measured)
    return out


def predict(
    p: Pipeline,
    calibration: Calibration,
    *,
    gpu: str | None = None,
    fingerprint: str | None = None,
    pads: tuple[Padding, ...] = (),
) -> DboWhatIf | NotPredicted:
    """The other arm from this one. pads: where the given or the predicted arm's batch (or a
    microbatch of it) pads to a larger CUDA graph. The calibration's pair that holds this recording
    (its fingerprint) is left out; only pairs of the arm's cudagraph mode are used."""
    same_mode = tuple(c for c in calibration.pairs if c.on.graphs == p.graphs)
    if not same_mode:
        return NotPredicted(OTHER_MODE)
    pairs = tuple(c for c in same_mode if fingerprint is None or fingerprint not in (c.on.fingerprint, c.off.fingerprint))
    if not pairs:
        return NotPredicted(OWN_PAIR_ONLY)
    given = terms_of(p, "", gpu, fingerprint)
    no_ffn = given is None
    if given is None:
        given = _split_without_ffn(p, ratios_of(pairs).terms)
        if given is None:
            return NotPredicted(NOT_MEASURED)
    kept = Calibration(pairs, calibration.source, calibration.default)
    return prediction_of(given, kept, no_ffn=no_ffn, gpu=gpu, pads=pads, excluded_own=len(pairs) < len(same_mode))


def prediction_of(
    given: ArmTerms,
    calibration: Calibration,
    *,
    no_ffn: bool = False,
    gpu: str | None = None,
    pads: tuple[Padding, ...] = (),
    excluded_own: bool = False,
) -> DboWhatIf:
    """The other arm predicted from the given arm's terms; the interval from the calibration's own
    misses (each pair from the others), a recording's noise, and what widens it."""
    pairs = calibration.pairs
    r = ratios_of(pairs)
    lo_t, hi_t = r.terms.tokens
    caveats = Caveats(
        no_ffn=no_ffn,
        gpu=gpu if gpu and r.terms.gpus and gpu not in r.terms.gpus else None,
        calibrated_gpus=r.terms.gpus,
        outside=None if lo_t <= given.tokens <= hi_t else (given.tokens, lo_t, hi_t),
        pads=pads,
    )
    widen = (WIDEN_NO_FFN if caveats.no_ffn else 0.0) + (WIDEN_GPU if caveats.gpu else 0.0)
    widen += WIDEN_OUTSIDE if caveats.outside is not None else 0.0
    predicted = _on_from_off(given, r.terms, r.on_fit) if not given.dbo else _off_from_on(given, r.terms, r.off_fit)
    period = other_period(given, predicted, r.terms)
    change = _change(given, period)
    errors = loo_errors(pairs)
    model = float(np.sqrt(np.mean(np.square(errors)))) if errors else NOISE_POINTS
    half = max(FLOOR_POINTS, float(np.hypot(model, NOISE_POINTS))) + widen
    low, high = change - half, change + half + (WIDEN_PADS if pads else 0.0)  # padded loads ran above the model
    call = PAYS if high < 0 else COSTS if low > 0 else UNDECIDED
    return DboWhatIf(
        given="on" if given.dbo else "off", period_us=period, measured_period_us=given.period_us,
        change=change, low=low, high=high, call=call, source=calibration.source, pairs=len(pairs),
        loo_max=max(abs(e) for e in errors) if errors else None, caveats=caveats, predicted=predicted,
        excluded_own=excluded_own,
    )  # fmt: skip
