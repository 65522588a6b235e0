"""The step as a pipeline (AFD): each microbatch's visit to the attention GPU (receive, compute,
send) and to the FFN (the same), with the hop on the wire between them, per step, layer and
microbatch; the three bounds of a layer and the one that held the step; and the step's overlap in
three figures with one meaning each (docs/analysis.md, "The step as a pipeline (AFD)").

Pure functions over the attention rank's round trips (with the FFN's matched kernels where its trace
is there) and its step table; linear in the round trips.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dbo_trace.analysis.afd.round_trips import AfdRoundTrips

# The bound that held a layer (the largest of the three), or "serial" for one microbatch
BOUND_ROUND_TRIP = "round_trip"  # one microbatch's round trip: A + hop out + F + hop back
BOUND_FFN = "ffn_busy"  # the FFN busy with both microbatches: 2 x (F + its NCCL cost per visit)
BOUND_ATTENTION = "attention_busy"  # the attention busy with both: 2 x (A + its NCCL cost per visit)
SERIAL = "serial"  # one microbatch: the roles take turns, A + hop out + F + hop back
BOUNDS = (BOUND_ROUND_TRIP, BOUND_FFN, BOUND_ATTENTION)


@dataclass(frozen=True)
class Visits:
    """One row per round trip, in the round trips' order (us on the attention's clock; NaN: not known,
    an FFN part without the FFN's trace, A on a microbatch's first layer of the step)."""

    step: np.ndarray  # (n,) int64: the attribution's step index
    ubatch: np.ndarray  # (n,) int64: 0 / 1, -1 with one microbatch
    layer: np.ndarray  # (n,) int64: the round trip's place among its microbatch's in the step, from 0
    round_trip_us: np.ndarray  # r1 - s0
    attention_us: np.ndarray  # A: s0 less the end of the microbatch's previous round trip in the step
    hop_out_us: np.ndarray  # f1 - s0: the send's start to the end of the FFN's receive
    ffn_us: np.ndarray  # F: g0 - f1, the FFN's compute and queueing
    hop_back_us: np.ndarray  # r1 - g0
    matched: np.ndarray  # (n,) bool: the FFN's kernels are known
    ffn_waited: np.ndarray  # (n,) bool: the FFN's receive was posted before the send began (f0 <= s0)
    attention_waited: np.ndarray  # (n,) bool: the attention's receive was posted before the FFN sent (r0 <= g0)
    attention_send_us: np.ndarray  # the attention's send kernel
    attention_receive_us: np.ndarray  # its receive kernel
    ffn_send_us: np.ndarray  # the FFN's send kernel (NaN: not matched)
    ffn_receive_us: np.ndarray  # the FFN's receive kernel

    def __len__(self) -> int:
        return len(self.step)


@dataclass(frozen=True)
class StepPipeline:
    """Per step with round trips, as columns (n_steps,), in step order; per-layer figures are the
    medians over the step's visits."""

    index: np.ndarray  # int64: the attribution's step index
    steady: np.ndarray  # bool: not a stall
    period_us: np.ndarray
    loop_us: np.ndarray  # the last receive's end less the first send's start
    attention_us: np.ndarray
    hop_out_us: np.ndarray
    ffn_us: np.ndarray
    hop_back_us: np.ndarray
    round_trip_bound_us: np.ndarray  # per layer: A + hop out + F + hop back
    ffn_busy_us: np.ndarray  # per layer: 2 x (F + the FFN's NCCL cost); NaN with one microbatch
    attention_busy_us: np.ndarray  # per layer: 2 x (A + the attention's NCCL cost); NaN likewise
    bound: tuple[str, ...]  # the bound that held, or SERIAL

    @property
    def outside_us(self) -> np.ndarray:
        """The step's period less its layer loop: the first layer's work before its send, sampling,
        the host between steps."""
        out: np.ndarray = self.period_us - self.loop_us
        return out


@dataclass(frozen=True)
class LayerVisits:
    """One layer of one microbatch (the document's pipeline.layers_detail row): the medians over the
    steady steps' visits (us; None: not measured) and the shares of receives that waited."""

    layer: int
    ubatch: int  # -1 with one microbatch
    visits: int
    attention_us: float | None  # None on layer 0: its attention ran before the step's first send
    hop_out_us: float | None
    ffn_us: float | None
    hop_back_us: float | None
    round_trip_us: float | None
    ffn_receive_waited: float | None  # share of its matched FFN receives posted before the send began (None: none matched)
    attention_receive_waited: float | None


@dataclass(frozen=True)
class StepOverlap:
    """The overlap of a step, one meaning each, per step over the steady span (sum / periods), us."""

    exposed_us: float | None  # the attention GPU running only communication ("comm alone")
    hidden_us: float  # round trips' time under the other microbatch's compute
    beside_us: float  # round trips' time beside the other microbatch's round trips
    round_trip_us: float  # the round trips' time
    periods: int  # the periods the span holds (what each sum was divided by)


@dataclass(frozen=True)
class PipelineFigures:
    """An attention rank's steps as a pipeline: its figures, the medians over the steady steps (the
    visits' over the visits of steady steps); None where nothing was measured. The document's
    pipeline block holds them as they are (render/document/pipeline.py)."""

    layers: int
    microbatched: bool
    has_ffn: bool  # the FFN's trace was matched to the round trips
    tokens: float | None  # decode tokens per steady step (median), from vLLM's step annotations
    period_us: float
    loop_us: float
    outside_us: float  # the median period less the median loop
    attention_us: float | None
    hop_out_us: float | None
    ffn_us: float | None
    hop_back_us: float | None
    round_trip_us: float
    hop_us: float | None  # a hop whose receiver waited for it (the wire alone), both directions; else every hop
    hop_waited: int  # the hops hop_us is the median of where they are the wire alone (0: every hop)
    attention_nccl_us: float | None
    ffn_nccl_us: float | None
    ffn_gap_us: float | None  # the FFN's host between a send's end and its next receive's start
    ffn_waited_share: float | None  # of the matched visits
    attention_waited_share: float | None
    bounds_us: dict[str, float] | None  # per layer, medians over steady steps (None: one microbatch)
    bound: str  # the bound that held most steady steps, or SERIAL
    efficiency: float | None  # the bound that held against the measured layer loop per layer (1: the loop ran at its bound)


@dataclass(frozen=True, kw_only=True)
class Pipeline(PipelineFigures):
    """The pipeline's figures and what they are of: the visits and the steps, the step's overlap, and
    each layer's figures."""

    visits: Visits
    steps: StepPipeline
    overlap: StepOverlap | None
    by_layer: tuple[LayerVisits, ...] | None = None  # rows in layer, then microbatch order
    graphs: bool = False  # most steady steps replayed CUDA graphs (the model is calibrated per mode)
    recording: str | None = None  # the attention trace's clock base: tells one recording from another


def efficiency(
    layers: int, loop_us: float, bounds_us: dict[str, float] | None, bound: str, serial_us: float | None
) -> float | None:
    """The bound that held against the measured layer loop per layer; serial_us: A + hop out + F + hop
    back per layer (medians), one microbatch's layer, the serial step's (the bound without bounds_us)."""
    per_layer = loop_us / layers if layers else None
    if per_layer is None or per_layer <= 0:
        return None
    held = bounds_us.get(bound) if bounds_us is not None else serial_us
    return held / per_layer if held is not None else None


def visits_of(afd: AfdRoundTrips) -> Visits:
    """Each round trip's visit figures (docs/analysis.md, "Per visit")."""
    rows = afd.rows
    n = len(rows)
    s0, s1, r0, r1 = rows.send_start, rows.send_end, rows.recv_start, rows.recv_end
    kernels = afd.parts.ffn_kernels if afd.parts is not None else None
    f0, f1, g0, g1 = kernels.T if kernels is not None else np.full((4, n), np.nan)
    matched = np.isfinite(f1) & np.isfinite(g0)
    key = rows.step * 3 + (rows.ubatch + 1)  # one sequence per step and microbatch
    order = np.lexsort((s0, key))
    same = key[order][1:] == key[order][:-1]
    attention = np.full(n, np.nan)
    attention[order[1:][same]] = s0[order][1:][same] - r1[order][:-1][same]
    layer = np.zeros(n, np.int64)
    if n:
        starts = np.r_[True, ~same]
        run_start = np.maximum.accumulate(np.where(starts, np.arange(n), 0))
        layer[order] = np.arange(n) - run_start
    with np.errstate(invalid="ignore"):
        ffn_waited = matched & (f0 <= s0)
        attention_waited = matched & (r0 <= g0)
    return Visits(
        step=rows.step,
        ubatch=rows.ubatch,
        layer=layer,
        round_trip_us=r1 - s0,
        attention_us=attention,
        hop_out_us=np.where(matched, f1 - s0, np.nan),
        ffn_us=np.where(matched, g0 - f1, np.nan),
        hop_back_us=np.where(matched, r1 - g0, np.nan),
        matched=matched,
        ffn_waited=ffn_waited,
        attention_waited=attention_waited,
        attention_send_us=s1 - s0,
        attention_receive_us=r1 - r0,
        ffn_send_us=np.where(matched, g1 - g0, np.nan),
        ffn_receive_us=np.where(matched, f1 - f0, np.nan),
    )


def _median(x: np.ndarray) -> float | None:
    x = x[np.isfinite(x)]
    return float(np.median(x)) if len(x) else None


def _ffn_gaps(v: Visits, f0: np.ndarray, g1: np.ndarray) -> np.ndarray:
    """(m,) The FFN's host between a send's end and its next receive's start, within a step."""
    ok = np.flatnonzero(v.matched)
    ok = ok[np.lexsort((f0[ok], v.step[ok]))]
    if len(ok) < 2:
        return np.zeros(0)
    same = v.step[ok][1:] == v.step[ok][:-1]
    gap = f0[ok][1:] - g1[ok][:-1]
    out: np.ndarray = gap[same & (gap >= 0)]
    return out


def pipeline_of(
    afd: AfdRoundTrips,
    *,
    step_index: np.ndarray,
    period_us: np.ndarray,
    steady: np.ndarray,
    generation_tokens: list[int | None],
    span: tuple[float, float, int] | None,
    exposed_us: float | None,
    recording: str | None = None,
    marked_period_us: np.ndarray | None = None,
    replayed: np.ndarray | None = None,
) -> Pipeline | None:
    """The rank's pipeline. step_index, period_us, steady, generation_tokens: the step table's columns
    (its steps in order); span: the steady span (start, end, periods) the overlap is summed over
    (analysis/afd/effect.py span_of), exposed_us: its comm alone per step; marked_period_us: the steady
    steps' periods by vLLM's annotations where the steps are another source's (compare's basis, one
    step median for every output). None without round trips in a reported step or without layers."""
    v = visits_of(afd)
    layers = afd.layers or 0
    kernels = afd.parts.ffn_kernels if afd.parts is not None else None
    f0, _, _, g1 = kernels.T if kernels is not None else np.full((4, len(v)), np.nan)
    gaps = _ffn_gaps(v, f0, g1)
    gap = float(np.median(gaps)) if len(gaps) else None
    position = {int(ix): k for k, ix in enumerate(step_index.tolist())}
    rows = afd.rows
    # the visits by step, each step's visits contiguous
    at = np.array([position.get(int(s), -1) for s in v.step.tolist()], np.int64)
    keep = np.flatnonzero(at >= 0)
    if not len(keep) or not layers:
        return None
    keep = keep[np.argsort(at[keep], kind="stable")]
    groups = np.split(keep, np.flatnonzero(np.diff(at[keep])) + 1)
    cols: dict[str, list[float]] = {k: [] for k in ("period", "loop", "a", "ho", "f", "hb", "rt", "fb", "ab")}
    index, is_steady, bound = [], [], []
    att_nccl = _nccl_cost(v.attention_send_us, v.attention_receive_us[v.matched & ~v.attention_waited])
    ffn_nccl = _nccl_cost(v.ffn_send_us, v.ffn_receive_us[v.matched & ~v.ffn_waited])
    ffn_cost = ffn_nccl + (gap or 0.0) if ffn_nccl is not None else None
    for g in groups:
        k = int(at[g[0]])
        index.append(int(step_index[k]))
        is_steady.append(bool(steady[k]))
        cols["period"].append(float(period_us[k]))
        cols["loop"].append(float(rows.recv_end[g].max() - rows.send_start[g].min()))
        a, ho, f, hb = (_median(x[g]) for x in (v.attention_us, v.hop_out_us, v.ffn_us, v.hop_back_us))
        for key, x in zip(("a", "ho", "f", "hb"), (a, ho, f, hb)):
            cols[key].append(np.nan if x is None else x)
        two = bool((v.ubatch[g] >= 0).any())
        rt = (a or 0.0) + (ho or 0.0) + (f or 0.0) + (hb or 0.0) if None not in (a, ho, f, hb) else np.nan
        fb = 2.0 * (f + ffn_cost) if two and f is not None and ffn_cost is not None else np.nan
        ab = 2.0 * (a + att_nccl) if two and a is not None and att_nccl is not None else np.nan
        cols["rt"].append(rt)
        cols["fb"].append(fb)
        cols["ab"].append(ab)
        bound.append(_held(rt, fb, ab) if two else SERIAL)
    steps = StepPipeline(
        index=np.array(index, np.int64), steady=np.array(is_steady, bool), period_us=np.array(cols["period"]),
        loop_us=np.array(cols["loop"]), attention_us=np.array(cols["a"]), hop_out_us=np.array(cols["ho"]),
        ffn_us=np.array(cols["f"]), hop_back_us=np.array(cols["hb"]), round_trip_bound_us=np.array(cols["rt"]),
        ffn_busy_us=np.array(cols["fb"]), attention_busy_us=np.array(cols["ab"]), bound=tuple(bound),
    )  # fmt: skip
    chosen = steps.steady if steps.steady.any() else np.ones(len(steps.index), bool)
    # the period's basis is compare's (analysis/steps/periods.py): steady steps with a next start
    timed = chosen & (steps.index != step_index[-1]) if len(step_index) else chosen
    timed = timed if timed.any() else chosen
    marked = marked_period_us if marked_period_us is not None and len(marked_period_us) else steps.period_us[timed]
    period = float(np.median(marked))
    loop = float(np.median(steps.loop_us[chosen]))
    in_chosen = np.isin(v.step, steps.index[chosen])
    tokens = [t for t, s in zip(generation_tokens, steady.tolist()) if s and t]
    bounds = None
    if afd.microbatched:
        found = {b: _median(x[chosen]) for b, x in zip(BOUNDS, (steps.round_trip_bound_us, steps.ffn_busy_us, steps.attention_busy_us))}
        bounds = {b: x for b, x in found.items() if x is not None} or None
    held = [b for b, s in zip(steps.bound, chosen.tolist()) if s]
    pure = np.r_[v.hop_out_us[in_chosen & v.ffn_waited], v.hop_back_us[in_chosen & v.attention_waited]]
    every = np.r_[v.hop_out_us[in_chosen], v.hop_back_us[in_chosen]]
    enough = len(pure) >= max(10, 0.05 * len(every))
    matched = v.matched[in_chosen]
    a, ho, f, hb = parts = [_median(x[in_chosen]) for x in (v.attention_us, v.hop_out_us, v.ffn_us, v.hop_back_us)]
    serial = None if any(x is None for x in parts) else float(sum(x for x in parts if x is not None))  # one microbatch's layer
    bound_held = max(set(held), key=held.count) if held else SERIAL
    return Pipeline(
        visits=v,
        steps=steps,
        layers=layers,
        microbatched=afd.microbatched,
        has_ffn=bool(v.matched.any()),
        tokens=float(np.median(tokens)) if tokens else None,
        period_us=period,
        loop_us=loop,
        outside_us=period - loop,
        attention_us=a,
        hop_out_us=ho,
        ffn_us=f,
        hop_back_us=hb,
        round_trip_us=float(np.median(v.round_trip_us[in_chosen])),
        hop_us=_median(pure if enough else every),
        hop_waited=len(pure) if enough else 0,
        attention_nccl_us=att_nccl,
        ffn_nccl_us=ffn_nccl,
        ffn_gap_us=gap,
        ffn_waited_share=float(v.ffn_waited[in_chosen][matched].mean()) if matched.any() else None,
        attention_waited_share=float(v.attention_waited[in_chosen][matched].mean()) if matched.any() else None,
        bounds_us=bounds,
        bound=bound_held,
        efficiency=efficiency(layers, loop, bounds, bound_held, serial),
        overlap=_overlap(afd, span, exposed_us),
        by_layer=_by_layer(v, in_chosen),
        graphs=bool(replayed[steady].mean() > 0.5) if replayed is not None and steady.any() else False,
        recording=recording,
    )


def _nccl_cost(send_us: np.ndarray, found_receive_us: np.ndarray) -> float | None:
    """A role's NCCL cost per visit: its median send kernel plus its median receive kernel of those
    posted after the peer's send began (a receive that finds its data); None where none did."""
    send, receive = _median(send_us), _median(found_receive_us)
    return None if send is None or receive is None else send + receive


def _by_layer(v: Visits, chosen: np.ndarray) -> tuple[LayerVisits, ...]:
    """The visits of the chosen (steady) steps by layer and microbatch."""
    sel = np.flatnonzero(chosen)
    key = v.layer[sel] * 3 + (v.ubatch[sel] + 1)
    order = sel[np.argsort(key, kind="stable")]
    keys = v.layer[order] * 3 + (v.ubatch[order] + 1)
    groups = np.split(order, np.flatnonzero(np.diff(keys)) + 1) if len(order) else []
    rows = []
    for g in groups:
        m = v.matched[g]
        rows.append(
            LayerVisits(
                layer=int(v.layer[g[0]]), ubatch=int(v.ubatch[g[0]]), visits=len(g), attention_us=_median(v.attention_us[g]),
                hop_out_us=_median(v.hop_out_us[g]), ffn_us=_median(v.ffn_us[g]), hop_back_us=_median(v.hop_back_us[g]),
                round_trip_us=_median(v.round_trip_us[g]),
                ffn_receive_waited=float(v.ffn_waited[g][m].mean()) if m.any() else None,
                attention_receive_waited=float(v.attention_waited[g][m].mean()) if m.any() else None,
            )
        )  # fmt: skip
    return tuple(rows)


def _held(round_trip: float, ffn: float, attention: float) -> str:
    values = [(x, b) for x, b in zip((round_trip, ffn, attention), BOUNDS) if np.isfinite(x)]
    return max(values)[1] if values else SERIAL


def _overlap(afd: AfdRoundTrips, span: tuple[float, float, int] | None, exposed_us: float | None) -> StepOverlap | None:
    """The three figures over the steady span: the round trips that start in it, per period."""
    if span is None:
        return None
    lo, hi, periods = span
    rows = afd.rows
    inside = (rows.send_start >= lo) & (rows.send_start < hi)
    per = float(periods)
    return StepOverlap(
        exposed_us=exposed_us,
        hidden_us=float(rows.hidden_us[inside].sum()) / per,
        beside_us=float(rows.beside[inside].sum()) / per,
        round_trip_us=float(rows.round_trip_us[inside].sum()) / per,
        periods=periods,
    )
