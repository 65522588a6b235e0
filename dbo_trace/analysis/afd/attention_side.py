"""A disaggregated (AFD) run: the attention rank's round trips, their shares by step and the FFN's parts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from dbo_trace.analysis import classify as c
from dbo_trace.analysis.afd.effect import SpanParts
from dbo_trace.analysis.afd.effect import ffn_parts as ffn_span_parts
from dbo_trace.analysis.model import Options, Recording, PairPart, RankAnalysis, RankDetail, StepTable
from dbo_trace.analysis.afd.dbo_model import (
    ALREADY_OFF,
    ALREADY_ON,
    NOT_AFD,
    WHAT_ON,
    WHAT_OTHER,
    DboWhatIf,
    NotPredicted,
    Padding,
    predict,
)
from dbo_trace.analysis.afd.pipeline import Pipeline, pipeline_of
from dbo_trace.analysis.afd.pair_compute import pair_figures
from dbo_trace.analysis.afd.roles import ATTENTION, FFN
from dbo_trace.analysis.afd.round_trips import AfdRoundTrips, data_plane, ffn_parts, sendrecv_kernels
from dbo_trace.analysis.afd.round_trips import round_trips as afd_round_trips
from dbo_trace.analysis.afd.round_trips import summarize as summarize_round_trips
from dbo_trace.analysis.afd.gpu_sharing import GpuSharing, TimeSlicing, time_slicing
from dbo_trace.analysis.afd.pair_compute import PairFigures


def rank_round_trips(d: RankDetail, steps: StepTable) -> AfdRoundTrips | None:
    """The disaggregated round trips of an attention rank (analysis/afd/round_trips.py)."""
    tl, att = d.timeline, d.attribution
    p2p = sendrecv_kernels(tl.names, tl.gpu.name, d.kernel_kind)
    data = data_plane(is_p2p=p2p, kind=d.kernel_kind, stream=tl.gpu.lane, replayed=d.launch_kind == c.CALL_GRAPH_LAUNCH)
    rows, told, unpaired, told_ub = afd_round_trips(
        start=tl.gpu.start, end=tl.gpu.end, kind=d.kernel_kind, data=data, step=att.gpu_step, ubatch=att.gpu_ubatch,
        launch_start=att.gpu_launch_start,
    )
    in_step = data & (att.gpu_step >= 0)
    kernels_per_step = np.unique(att.gpu_step[in_step], return_counts=True)[1]
    lag_op = _lag_op(
        rows.send_end, rows.send_end + rows.lag_us, cpu_start=tl.cpu.start, cpu_end=tl.cpu.end, cpu_name=tl.cpu.name,
        cpu_is_op=~tl.cpu_is_annotation, names=tl.names,
    ) if len(rows) else None  # fmt: skip
    return summarize_round_trips(
        rows, told, unpaired, data_kernels=int(data.sum()), control_kernels=int((p2p & ~data).sum()),
        step_compute_us=dict(zip(steps.index.tolist(), steps.metrics["compute_busy_us"].tolist())), layers=att.layers,
        kernels_per_step=kernels_per_step, kernel_ubatch=told_ub, lag_op=lag_op,
    )  # fmt: skip


LAG_NAMED = 0.05  # the host's lag is worth naming its op where it is this share of the round trips' time
LAG_SAMPLE = 2000  # round trips whose lag is searched for its op (this many with a lag, spread over the run)
OP_HOLDS = 0.5  # an op held the lag where it covered at least this share of it
OP_LONGEST = 4.0  # an op this many times the lag or longer encloses it (a step's range), not what ran through it


def _lag_op(
    lo: np.ndarray, hi: np.ndarray, *, cpu_start: np.ndarray, cpu_end: np.ndarray, cpu_name: np.ndarray,
    cpu_is_op: np.ndarray, names: list[str],
) -> tuple[str, float] | None:
    """The CPU operator that ran through the host's lag: per lag [lo, hi], the shortest op (not an
    annotation) covering at least OP_HOLDS of it, the innermost of those that span it (a step's
    enclosing range spans it too; the other microbatch's ops are short and cover little of it); of
    all the lags' time, the name that covered most, with its share. Threads are not matched: the
    trace's runtime events keep a microbatch thread's first id when vLLM starts new threads each
    step, so a launch call's thread is not the CPU op's. None without a lag or an op."""
    lagged = np.flatnonzero(hi - lo > 0)
    if not len(lagged):
        return None
    lagged = lagged[np.unique(np.linspace(0, len(lagged) - 1, min(len(lagged), LAG_SAMPLE)).astype(np.int64))]  # spread over the run
    ops = np.flatnonzero(cpu_is_op)
    ops = ops[np.argsort(cpu_start[ops], kind="stable")]
    starts = cpu_start[ops]
    covered: dict[int, float] = {}
    total = float((hi[lagged] - lo[lagged]).sum())
    for i in lagged.tolist():
        a, b = float(lo[i]), float(hi[i])
        # ops that started before the lag ended, and no longer than OP_LONGEST lags (an enclosing range
        # is never the innermost where an op spans it; bounding it keeps each lookup to a few ops)
        before = ops[int(np.searchsorted(starts, a - OP_LONGEST * (b - a))) : int(np.searchsorted(starts, b))]
        before = before[cpu_end[before] - cpu_start[before] <= OP_LONGEST * (b - a)]
        held = before[np.minimum(cpu_end[before], b) - np.maximum(cpu_start[before], a) >= OP_HOLDS * (b - a)]
        if not len(held):
            continue
        k = held[np.argmin(cpu_end[held] - cpu_start[held])]
        covered[int(cpu_name[k])] = covered.get(int(cpu_name[k]), 0.0) + float(min(cpu_end[k], b) - max(cpu_start[k], a))
    if not covered or total <= 0:
        return None
    name, us = max(covered.items(), key=lambda kv: kv[1])
    return names[name], us / total


def pair_part(r: RankAnalysis) -> PairPart | None:
    """An AFD role's intervals, from its detail, as the pair's figures read them."""
    if r.role not in (ATTENTION, FFN) or r.detail is None:
        return None
    d = r.detail
    tl = d.timeline
    data = data_plane(
        is_p2p=sendrecv_kernels(tl.names, tl.gpu.name, d.kernel_kind),
        kind=d.kernel_kind,
        stream=tl.gpu.lane,
        replayed=d.launch_kind == c.CALL_GRAPH_LAUNCH,
    )
    idx = np.flatnonzero(data)
    idx = idx[np.argsort(tl.gpu.start[idx], kind="stable")]
    compute = d.kernel_kind == c.COMPUTE
    return PairPart(
        tl.base_time_ns, (tl.gpu.start, tl.gpu.end), (tl.gpu.start[idx], tl.gpu.end[idx]),
        (tl.gpu.start[compute], tl.gpu.end[compute]),
    )  # fmt: skip


def _offset_us(part: PairPart, reference: PairPart) -> float | None:
    """What to add to part's ts to put it on reference's clock (both from baseTimeNanoseconds)."""
    if part.base_time_ns is None or reference.base_time_ns is None:
        return None
    return (part.base_time_ns - reference.base_time_ns) / 1000.0


@dataclass(frozen=True)
class AfdSide:
    """An attention rank's round trips and span as the pair reads them: each round trip's parts from
    the FFN's data-plane kernels, and the FFN's GPU over the span (new values: the measured ones matched
    to the other side)."""

    round_trips: AfdRoundTrips
    span_parts: SpanParts | None


def afd_sides(ranks: Sequence[RankAnalysis], pairs: Sequence[PairPart | None]) -> list[AfdSide | None]:
    """Per rank, an attention rank's AfdSide where an FFN's trace is there and both clocks are known
    (baseTimeNanoseconds: one host's time.time_ns), put on the attention's clock; None elsewhere."""
    ffn = next((p for r, p in zip(ranks, pairs) if r.role == FFN and p is not None), None)
    out: list[AfdSide | None] = []
    for r, mine in zip(ranks, pairs):
        offset = _offset_us(ffn, mine) if ffn is not None and r.afd is not None and mine is not None else None
        if ffn is None or r.afd is None or offset is None:
            out.append(None)
            continue
        compute = (ffn.compute[0] + offset, ffn.compute[1] + offset)
        parts = ffn_parts(r.afd.rows, ffn.data[0] + offset, ffn.data[1] + offset, compute)
        span = r.span_parts
        if span is not None:  # the FFN's GPU over the attention's span: DBO's effect on it (analysis/afd/effect.py)
            lo = span.start_us
            on_ffn = ffn_span_parts(lo, lo + span.span_us, span.periods, (ffn.gpu[0] + offset, ffn.gpu[1] + offset), compute)
            span = replace(span, ffn=on_ffn)
        out.append(AfdSide(replace(r.afd, parts=parts, ffn_matched=int(parts.matched.sum())), span))
    return out


def pair_of(
    ranks: Sequence[RankAnalysis], afds: Sequence[AfdRoundTrips | None], pairs: Sequence[PairPart | None],
    sharing: GpuSharing | None,
) -> tuple[TimeSlicing | None, PairFigures | None]:  # fmt: skip
    """What the two sides tell together, from the first attention rank with round trips (afds: each
    rank's, with the FFN's parts where afd_sides gave them): whether they time-slice the GPU (its
    round trips against their transfer, analysis/afd/gpu_sharing.py; the verdict's first reason where
    it holds) and, with the FFN's trace, its compute per step and per round trip and each side's GPU
    busy over the attention's steps (analysis/afd/pair_compute.py)."""
    at = next((k for k, a in enumerate(afds) if a is not None and pairs[k] is not None), None)
    if at is None or not any(r.role is not None for r in ranks):
        return None, None
    afd, mine = afds[at], pairs[at]
    assert afd is not None and mine is not None
    rows, parts = afd.rows, afd.parts
    sliced = time_slicing(
        send_us=rows.send_end - rows.send_start, receive_us=rows.recv_end - rows.recv_start,
        round_trip_us=rows.round_trip_us, ffn_compute_us=parts.compute_us if parts is not None else None,
        sharing=sharing, ubatch=rows.ubatch,
    )  # fmt: skip
    ffn = next((p for r, p in zip(ranks, pairs) if r.role == FFN and p is not None), None)
    offset = _offset_us(ffn, mine) if ffn is not None else None
    if ffn is None or offset is None:
        return sliced, None
    table = ranks[at].steps.table
    pair = pair_figures(
        step_start=table.start_us, step_end=table.start_us + table.period_us, attention=mine.gpu,
        ffn=(ffn.gpu[0] + offset, ffn.gpu[1] + offset), ffn_compute=(ffn.compute[0] + offset, ffn.compute[1] + offset),
        round_trip_compute_us=parts.compute_us if parts is not None else None,
        round_trip_queue_us=parts.queue_us if parts is not None else None, round_trips_per_step=afd.per_step,
    )  # fmt: skip
    return sliced, pair


def run_pipeline(
    ranks: Sequence[RankAnalysis], afds: Sequence[AfdRoundTrips | None], sides: Sequence[AfdSide | None],
    recording: str | None = None,
) -> Pipeline | None:  # fmt: skip
    """The served attention rank's steps as a pipeline (analysis/afd/pipeline.py), with the FFN's parts
    where afd_sides gave them (afds, sides: each rank's); None without such a rank, or with several
    (one pipeline is one pair)."""
    attention = [k for k, r in enumerate(ranks) if afds[k] is not None and r.role != FFN]
    if len(attention) != 1:
        return None
    k = attention[0]
    r, afd, side = ranks[k], afds[k], sides[k]
    assert afd is not None
    table, sp = r.steps.table, side.span_parts if side is not None else r.span_parts
    if recording is not None and len(afd.rows):  # the clock's base is the host's: the first send tells runs apart
        recording = f"{recording}+{int(afd.rows.send_start.min())}"
    return pipeline_of(
        afd, step_index=table.index, period_us=table.period_us, steady=~table.stalled,
        generation_tokens=table.generation_tokens,
        span=(sp.start_us, sp.start_us + sp.span_us, sp.periods) if sp is not None else None,
        exposed_us=sp.comm_alone_us if sp is not None else None, recording=recording,
        marked_period_us=np.array([m.period_us for m in r.marked_periods], float) if r.marked_periods else None,
        replayed=table.replayed,
    )  # fmt: skip


def graph_padding(tokens: float | None, sizes: tuple[int, ...] | None) -> tuple[Padding, ...]:
    """Where a step's batch (DBO off) or a microbatch of it (DBO on) pads to a larger CUDA graph than
    its tokens: the given arm's and the predicted arm's shapes. Empty: neither pads, or the capture
    sizes or the tokens are not known."""
    if tokens is None or not sizes:
        return ()
    n = int(round(tokens))
    found = []
    for microbatch, t in ((False, n), (True, (n + 1) // 2)):
        larger = [s for s in sorted(sizes) if s >= t]
        if larger and larger[0] != t:
            found.append(Padding(microbatch, t, larger[0]))
    return tuple(found)


def run_what_if(pipeline: Pipeline | None, options: Options, recording: Recording) -> DboWhatIf | NotPredicted | None:
    """DBO's effect from this arm (analysis/afd/dbo_model.py), where asked: the prediction, or why
    there is none; None where not asked (or compare's question does not apply: no AFD pipeline)."""
    asked = options.what_if_dbo
    if asked is None or options.calibration is None:
        return None
    if pipeline is None:
        return None if asked == WHAT_OTHER else NotPredicted(NOT_AFD)
    if asked != WHAT_OTHER and (asked == WHAT_ON) == pipeline.microbatched:
        return NotPredicted(ALREADY_ON if pipeline.microbatched else ALREADY_OFF)
    pads = graph_padding(pipeline.tokens, recording.graph_sizes)
    found = predict(pipeline, options.calibration, gpu=recording.gpu_name, fingerprint=pipeline.recording, pads=pads)
    if isinstance(found, NotPredicted) and asked == WHAT_OTHER:
        return None  # compare shows predictions where the model applies, and says nothing of the others
    return found
