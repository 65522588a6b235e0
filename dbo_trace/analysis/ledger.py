"""The DBO ledger: what DBO's own machinery costs per step (hand-overs between the microbatch
threads, thread start-up, the yield op), how evenly the step was split between the microbatches,
and which layer each communication operation belongs to (docs/analysis.md, "The DBO ledger").

Pure: the event log's records and the rank's arrays in, a Ledger out; one pass over each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dbo_trace import bundle as fmt
from dbo_trace.analysis.intervals import grouped_length, index_groups, intersection, step_thread_cover, union
from dbo_trace.analysis.steps.sources import index_in, log_to_trace_us


SOURCE_LOG = "event log (UBatchContext yields)"
SOURCE_YIELD_OPS = "trace (vllm::manual_dbo_yield CPU ops)"
YIELD_OP = "vllm::manual_dbo_yield"  # the AFD plugin's custom op around dbo_yield()
_TURN = (fmt.EV_RESUME, fmt.EV_UB_RUN)  # a microbatch thread gets its turn: back from a yield, or its first


@dataclass(frozen=True)
class StepLedger:
    number: int  # the step's number (from 1), as the per-step table gives it
    yields: int  # yields the microbatch threads made in the step
    handovers: int  # of them, those the other microbatch's thread took over (a hand-over)
    handover_us: float  # summed hand-over latency
    startup_us: float | None  # thread start-up: the step's begin to the first microbatch's first turn (log)
    share: float | None  # hand-overs and thread start-up as a share of the step's time (_share_of_step)
    tokens: tuple[int, ...] | None  # tokens per microbatch (the log's step_begin)
    compute_us: tuple[float, ...] | None  # compute busy per microbatch (union of its compute kernels)


def _share_of_step(handover_us: float, startup_us: float | None, step_us: float) -> float | None:
    """Hand-overs and thread start-up as a share of the step's time (its window, as the per-step
    table gives it); None where the step took no time."""
    if step_us <= 0:
        return None
    return (handover_us + (startup_us or 0.0)) / step_us


@dataclass(frozen=True)
class LayerHandovers:
    layer: int
    handovers: int
    median_us: float
    p90_us: float
    per_step_us: float  # summed over the steps, divided by the steps with hand-overs


@dataclass(frozen=True)
class YieldOps:
    """The yield's CPU op in the trace (the AFD plugin's manual_dbo_yield): a cost even when it
    does not yield (DBO off), and a wait for the other microbatch when it does."""

    name: str
    calls: int
    median_us: float
    per_step: float  # median calls per step
    per_step_us: float  # median summed duration per step, every thread's added (can exceed the step)
    threads_per_step: float | None = None  # median threads that called it in a step
    wall_per_step_us: float | None = None  # median per step of the time any thread was in it
    wall_share: float | None = None  # median per step of that time / the step's window: at most 1
    thread_per_step_us: float | None = None  # median over (step, thread) of the thread's time in it
    thread_share: float | None = None  # median over (step, thread) of that time / the step's window
    # Its own cost and the wait apart (medians per step): every thread that called it in the step in
    # it at once is the op's own work (with DBO off, one thread: all of it); one thread in it while
    # another runs outside it waits for that microbatch's turn, the other microbatch's work.
    own_per_step_us: float | None = None
    wait_per_step_us: float | None = None


@dataclass(frozen=True)
class Unprofiled:
    """Hand-overs in the event log's steps that the profiler did not see."""

    steps: int
    handovers: int
    median_us: float
    p90_us: float
    per_step_us: float  # median summed hand-over latency per step


@dataclass(frozen=True)
class Ledger:
    source: str | None  # where the hand-overs came from (SOURCE_*); None: no hand-over seen
    handovers: int
    median_us: float | None
    p90_us: float | None
    steps: list[StepLedger]
    layers: list[LayerHandovers]
    unprofiled: Unprofiled | None = None

    def _median(self, values: list[float]) -> float | None:
        return float(np.median(values)) if values else None

    @property
    def yields_per_step(self) -> float | None:
        return self._median([s.yields for s in self.steps if s.yields])

    @property
    def handover_per_step_us(self) -> float | None:
        return self._median([s.handover_us for s in self.steps if s.handovers])

    @property
    def startup_us(self) -> float | None:
        return self._median([s.startup_us for s in self.steps if s.startup_us is not None])

    @property
    def share(self) -> float | None:
        return self._median([x for s in self.steps if s.yields and (x := s.share) is not None])

    @property
    def split_tokens(self) -> tuple[float, ...] | None:
        """Median tokens per microbatch."""
        rows = [s.tokens for s in self.steps if s.tokens]
        return _column_medians(rows)

    @property
    def compute_us(self) -> tuple[float, ...] | None:
        return _column_medians([s.compute_us for s in self.steps if s.compute_us])

    @property
    def imbalance(self) -> float | None:
        """Median over steps of (largest - smallest microbatch compute) / largest."""
        xs = [(max(c) - min(c)) / max(c) for s in self.steps if (c := s.compute_us) and max(c) > 0]
        return self._median(xs)

    @property
    def excess_us(self) -> float | None:
        """The imbalance's cost: median over steps of the longest microbatch compute less the shortest,
        compute the other microbatch has nothing left to cover."""
        return self._median([max(c) - min(c) for s in self.steps if (c := s.compute_us)])


def _column_medians(rows: list[tuple[float, ...]] | list[tuple[int, ...]]) -> tuple[float, ...] | None:
    width = {len(r) for r in rows}
    if len(width) != 1:
        return None
    return tuple(float(x) for x in np.median(np.array(rows, dtype=float), axis=0))


def _med(values: np.ndarray) -> float | None:
    return float(np.median(values)) if len(values) else None


def _p90(values: list[float]) -> float:
    return float(np.percentile(values, 90))


# -- hand-overs from the event log ---------------------------------------------------------------


@dataclass(frozen=True)
class LogHandovers:
    """Per hand-over: its step (index into the rank's steps), layer (-1 unknown), the yielding
    microbatch and latency; per step: yields, start-up and tokens."""

    step: np.ndarray  # (n,) int64: -1 for a step outside the profiled window (the log holds more)
    log_step: np.ndarray  # (n,) int64: the log's own step number
    layer: np.ndarray  # (n,) int64
    ubatch: np.ndarray  # (n,) int64
    latency_us: np.ndarray  # (n,) float64
    yields: dict[int, int]
    startup_us: dict[int, float]
    tokens: dict[int, tuple[int, ...]]


def log_handovers(
    records: list[list[Any]],  # one process's event log records, in time order
    *,
    base_time_ns: int,
    step_start_us: np.ndarray,  # (n_steps,) float64: the rank's steps on the trace clock
    step_end_us: np.ndarray,  # (n_steps,) float64
) -> LogHandovers:
    """A hand-over: one microbatch thread's yield to the other microbatch thread's next turn (its
    resume, or its first run) in the same step. A yield after which its own thread resumes first
    (the other had finished) is no hand-over."""
    begins = [r for r in records if r[1] == fmt.EV_STEP_BEGIN]
    at = index_in(step_start_us, step_end_us, log_to_trace_us(np.array([r[0] for r in begins], np.int64), base_time_ns))
    step_of = {int(r[5]): int(i) for r, i in zip(begins, at.tolist()) if i >= 0}
    begin_ns = {int(r[5]): int(r[0]) for r in begins}
    # A step outside the window that captured a CUDA graph yielded while recording it (warm-up): not
    # a hand-over of a run.
    capture = {int(r[5]) for r in begins if isinstance(r[6], dict) and r[6].get("path") == fmt.PATH_GRAPH_CAPTURE}
    tokens: dict[int, tuple[int, ...]] = {}
    for r in begins:
        detail = r[6]
        i = step_of.get(int(r[5]))
        if i is not None and isinstance(detail, dict):
            tok = detail.get("tokens")
            if isinstance(tok, list) and tok and all(type(t) is int for t in tok):
                tokens[i] = tuple(tok)
    out_step: list[int] = []
    out_log_step: list[int] = []
    out_layer: list[int] = []
    out_ub: list[int] = []
    out_lat: list[float] = []
    yields: dict[int, int] = {}
    startup: dict[int, float] = {}
    pending: dict[int, dict[int, tuple[int, int]]] = {}  # log step -> ub -> (its open yield's time, layer)
    layer_now: dict[tuple[int, int], int] = {}
    for t, kind, _ident, _native, ub, step, detail in records:
        if ub < 0:
            continue
        if step not in begin_ns:
            continue
        i = step_of.get(step, -1)
        if i < 0 and step in capture:
            continue
        key = (step, ub)
        if kind == fmt.EV_LAYER and type(detail) is int:
            layer_now[key] = detail
        elif kind == fmt.EV_YIELD:
            if i >= 0:
                yields[i] = yields.get(i, 0) + 1
            pending.setdefault(step, {})[ub] = (t, layer_now.get(key, -1))
        elif kind in _TURN:
            if kind == fmt.EV_UB_RUN and i >= 0 and i not in startup and step in begin_ns:
                startup[i] = (t - begin_ns[step]) / 1000.0
            open_yields = pending.get(step, {})
            open_yields.pop(ub, None)  # its own yield ended without a hand-over
            if open_yields:  # the other microbatches' open yields (two microbatches: one)
                other, (t_yield, layer) = max(open_yields.items(), key=lambda kv: kv[1][0])
                del open_yields[other]
                out_step.append(i)
                out_log_step.append(step)
                out_layer.append(layer)
                out_ub.append(other)
                out_lat.append((t - t_yield) / 1000.0)
    return LogHandovers(
        step=np.array(out_step, np.int64),
        log_step=np.array(out_log_step, np.int64),
        layer=np.array(out_layer, np.int64),
        ubatch=np.array(out_ub, np.int64),
        latency_us=np.array(out_lat, np.float64),
        yields=yields,
        startup_us=startup,
        tokens=tokens,
    )


# -- hand-overs from the yield op in the trace --------------------------------------------------


def op_handovers(
    *,
    start: np.ndarray,  # (n_ops,) float64: the yield op's CPU ranges, any order
    end: np.ndarray,  # (n_ops,) float64
    lane: np.ndarray,  # (n_ops,) int64: their threads
    step: np.ndarray,  # (n_ops,) int64: the step each starts in, -1 none
) -> tuple[np.ndarray, np.ndarray]:
    """Hand-overs seen in the trace alone: a yield op started while another thread's yield op was
    running (that thread waiting for its turn); that op's end is the other thread's resume.
    Returns (step, latency us) per hand-over."""
    order = np.argsort(start, kind="stable")
    last: dict[int, tuple[float, int]] = {}  # lane -> (end, step) of its latest op
    steps: list[int] = []
    lat: list[float] = []
    for s, e, ln, st in zip(start[order].tolist(), end[order].tolist(), lane[order].tolist(), step[order].tolist()):
        if st >= 0:
            waiting = [(oe, ol) for ol, (oe, ost) in last.items() if ol != ln and ost == st and oe > s]
            if waiting:
                steps.append(st)
                lat.append(min(waiting)[0] - s)
        last[ln] = (e, st)
    return np.array(steps, np.int64), np.array(lat, np.float64)


# -- the ledger ---------------------------------------------------------------------------------


def _layers_by_order(step: np.ndarray, ubatch: np.ndarray, layers: int | None, n_steps: int) -> np.ndarray:
    """Without the log's layer events: the k-th hand-over of a microbatch in its step belongs to
    layer k // (hand-overs per layer), where its hand-overs per step divide evenly by the layers."""
    out = np.full(len(step), -1, np.int64)
    if not layers or not len(step):
        return out
    # One sort by (step, microbatch), time order kept within: each group's place k and size n.
    order = np.lexsort((np.arange(len(step)), ubatch, step))
    s, u = step[order], ubatch[order]
    heads = np.flatnonzero(np.r_[True, (s[1:] != s[:-1]) | (u[1:] != u[:-1])])
    sizes = np.diff(np.r_[heads, len(order)])
    n = np.repeat(sizes, sizes)
    k = np.arange(len(order)) - np.repeat(heads, sizes)
    fits = n % layers == 0
    out[order[fits]] = k[fits] // (n[fits] // layers)
    return out


def ledger(
    *,
    log_records: list[list[list[Any]]],  # each usable event log's records
    base_time_ns: int | None,
    step_start_us: np.ndarray,  # (n_steps,) float64
    step_end_us: np.ndarray,  # (n_steps,) float64
    step_index: np.ndarray,  # (n_reported,) int64: the reported steps' indices into step_start_us
    step_us: np.ndarray,  # (n_reported,) float64: their times as the per-step table gives them
    layers: int | None,
    yield_calls: YieldOpCalls | None,  # the yield op's calls (yield_op_calls): its hand-overs where the log has none
    gpu_start: np.ndarray,  # (n_gpu,) float64
    gpu_end: np.ndarray,  # (n_gpu,) float64
    gpu_is_compute: np.ndarray,  # (n_gpu,) bool
    gpu_step: np.ndarray,  # (n_gpu,) int64, -1 none
    gpu_ubatch: np.ndarray,  # (n_gpu,) int8, -1 unknown
) -> Ledger | None:
    """The rank's DBO ledger; None where neither the log nor the trace shows a microbatch thread
    yielding, no tokens split and no microbatch compute (nothing to say)."""
    n_steps = len(step_start_us)
    parts = [
        log_handovers(recs, base_time_ns=base_time_ns, step_start_us=step_start_us, step_end_us=step_end_us)
        for recs in log_records
        if base_time_ns is not None
    ]
    unprofiled = _unprofiled(parts)
    inside = [p.step >= 0 for p in parts]
    h_step = np.concatenate([p.step[k] for p, k in zip(parts, inside)]) if parts else np.zeros(0, np.int64)
    h_layer = np.concatenate([p.layer[k] for p, k in zip(parts, inside)]) if parts else np.zeros(0, np.int64)
    h_ub = np.concatenate([p.ubatch[k] for p, k in zip(parts, inside)]) if parts else np.zeros(0, np.int64)
    h_lat = np.concatenate([p.latency_us[k] for p, k in zip(parts, inside)]) if parts else np.zeros(0)
    yields: dict[int, int] = {}
    startup: dict[int, float] = {}
    tokens: dict[int, tuple[int, ...]] = {}
    for p in parts:
        for k, v in p.yields.items():
            yields[k] = yields.get(k, 0) + v
        startup.update(p.startup_us)
        tokens.update(p.tokens)
    source: str | None = SOURCE_LOG if len(h_lat) else None
    if (h_layer < 0).all():
        h_layer = _layers_by_order(h_step, h_ub, layers, n_steps)

    y = yield_calls
    if y is not None and source is None:
        o_step, o_lat = op_handovers(start=y.start, end=y.end, lane=y.lane, step=y.step)
        if len(o_lat):
            source = SOURCE_YIELD_OPS
            h_step, h_lat = o_step, o_lat
            h_layer = np.full(len(o_step), -1, np.int64)
            yields = {int(s): int(n) for s, n in enumerate(y.per_step.tolist()) if n}

    # Compute busy per microbatch per step.
    ubs = sorted(int(u) for u in np.unique(gpu_ubatch[(gpu_ubatch >= 0) & (gpu_step >= 0)]).tolist())
    compute: dict[int, np.ndarray] = {}
    for u in ubs:
        sel = (gpu_ubatch == u) & (gpu_step >= 0) & gpu_is_compute
        compute[u] = grouped_length(gpu_step[sel], n_steps, gpu_start[sel], gpu_end[sel])

    if source is None and not tokens and len(ubs) < 2:
        return None
    counted = h_step >= 0
    n_handovers = np.bincount(h_step[counted], minlength=n_steps)
    handover_us = np.bincount(h_step[counted], weights=h_lat[counted], minlength=n_steps)
    step_rows = []
    for place, i in enumerate(step_index.tolist()):
        c = tuple(float(compute[u][i]) for u in ubs) if len(ubs) >= 2 else None
        if c is not None and not any(c):
            c = None
        step_rows.append(
            StepLedger(
                number=place + 1,
                yields=yields.get(i, 0),
                handovers=int(n_handovers[i]),
                handover_us=float(handover_us[i]),
                startup_us=startup.get(i),
                share=_share_of_step(float(handover_us[i]), startup.get(i), float(step_us[place])),
                tokens=tokens.get(i),
                compute_us=c,
            )
        )
    return Ledger(
        source=source,
        handovers=int(len(h_lat)),
        median_us=float(np.median(h_lat)) if len(h_lat) else None,
        p90_us=_p90(h_lat.tolist()) if len(h_lat) else None,
        steps=step_rows,
        layers=_layer_rows(h_layer, h_lat, h_step),
        unprofiled=unprofiled,
    )


@dataclass(frozen=True)
class YieldOpCalls:
    """The yield op's calls: each call's step (-1 none), start, end and thread, its calls per step,
    and its figures."""

    step: np.ndarray  # (n,) int64
    start: np.ndarray  # (n,) float64
    end: np.ndarray  # (n,) float64
    lane: np.ndarray  # (n,) int64
    per_step: np.ndarray  # (n_steps,) int64
    figures: YieldOps


def yield_op_calls(
    *,
    step_start_us: np.ndarray,  # (n_steps,) float64
    step_end_us: np.ndarray,  # (n_steps,) float64
    cpu_start: np.ndarray,  # (n_cpu,) float64: CPU ranges
    cpu_end: np.ndarray,  # (n_cpu,) float64
    cpu_lane: np.ndarray,  # (n_cpu,) int64
    cpu_is_yield_op: np.ndarray,  # (n_cpu,) bool: named YIELD_OP
) -> YieldOpCalls | None:
    """The yield op's calls, with DBO on or off: the AFD plugin calls it at every layer either way, so
    its cost is the step's whatever the microbatches do. None where it never ran."""
    ys = np.flatnonzero(cpu_is_yield_op)
    if not len(ys):
        return None
    step = index_in(step_start_us, step_end_us, cpu_start[ys])
    start, end, lane = cpu_start[ys], cpu_end[ys], cpu_lane[ys]
    figures, per_step = _yield_ops(step, start, end, lane, step_start_us, step_end_us)
    return YieldOpCalls(step=step, start=start, end=end, lane=lane, per_step=per_step, figures=figures)


def _yield_ops(
    step: np.ndarray, start: np.ndarray, end: np.ndarray, lane: np.ndarray, step_start_us: np.ndarray, step_end_us: np.ndarray
) -> tuple[YieldOps, np.ndarray]:
    """The yield op's calls (each (n,): its step, -1 none; start, end, thread) and its calls per step
    ((n_steps,) int64). Two microbatch threads are in it at once: its wall time per step and each
    thread's, never their sum."""
    n_steps = len(step_start_us)
    dur = end - start
    counted = step >= 0
    per_step = np.bincount(step[counted], minlength=n_steps)
    per_step_us = np.bincount(step[counted], weights=dur[counted], minlength=n_steps)
    had = per_step > 0
    wall, pair_step, cover = step_thread_cover(step, lane, start, end, step_start_us, step_end_us)
    own = _all_threads_in(step, lane, start, end, step_start_us, step_end_us)
    window = step_end_us - step_start_us
    ops = YieldOps(
        name=YIELD_OP,
        calls=int(len(step)),
        median_us=float(np.median(dur)),
        per_step=float(np.median(per_step[had])) if had.any() else 0.0,
        per_step_us=float(np.median(per_step_us[had])) if had.any() else 0.0,
        threads_per_step=_med(np.bincount(pair_step, minlength=n_steps)[had]),
        wall_per_step_us=_med(wall[had]),
        wall_share=_med((wall / np.where(window > 0, window, np.inf))[had]),
        thread_per_step_us=_med(cover),
        thread_share=_med(cover / np.where(window > 0, window, np.inf)[pair_step]),
        own_per_step_us=_med(own[had]),
        wait_per_step_us=_med((wall - own)[had]),
    )
    return ops, per_step


def _all_threads_in(
    step: np.ndarray, lane: np.ndarray, start: np.ndarray, end: np.ndarray, step_lo: np.ndarray, step_hi: np.ndarray
) -> np.ndarray:
    """Per step ((n_steps,)): the time every thread that made a call in the step was in one at once,
    calls clipped to the step's window (one thread: its time in them)."""
    own = np.zeros(len(step_lo))
    for k, sel in index_groups(step, among=np.flatnonzero(step >= 0)).items():
        s, e = np.maximum(start[sel], step_lo[k]), np.minimum(end[sel], step_hi[k])
        ln = lane[sel]
        common: tuple[np.ndarray, np.ndarray] | None = None
        for t in np.unique(ln):
            mine = (s[ln == t], e[ln == t])
            common = mine if common is None else intersection(common, mine)
        if common is not None:
            cs, ce = common if len(np.unique(ln)) > 1 else union(*common)
            own[k] = float(np.maximum(ce - cs, 0.0).sum())
    return own


def _layer_rows(layer: np.ndarray, latency_us: np.ndarray, step: np.ndarray) -> list[LayerHandovers]:
    """The hand-overs per layer (each hand-over's layer, -1 unknown; its latency; its step)."""
    out = []
    for k, sel in sorted(index_groups(layer, among=np.flatnonzero(layer >= 0)).items()):
        lat = latency_us[sel].tolist()
        out.append(
            LayerHandovers(
                layer=int(k),
                handovers=len(lat),
                median_us=float(np.median(lat)),
                p90_us=_p90(lat),
                per_step_us=float(sum(lat) / max(1, len(np.unique(step[sel])))),
            )
        )
    return out


def _unprofiled(parts: list[LogHandovers]) -> Unprofiled | None:
    """The hand-overs of the log's steps outside the profiled window: the same measure without the
    profiler's own cost (profile_all_threads slows every thread's CPU ops)."""
    lat = [p.latency_us[p.step < 0] for p in parts]
    totals = [np.bincount(np.unique(p.log_step[p.step < 0], return_inverse=True)[1], weights=x) for p, x in zip(parts, lat)]
    every = np.concatenate(lat) if lat else np.zeros(0)
    if not len(every):
        return None
    per_step = np.concatenate(totals)
    return Unprofiled(
        steps=int(len(per_step)),
        handovers=int(len(every)),
        median_us=float(np.median(every)),
        p90_us=_p90(every.tolist()),
        per_step_us=float(np.median(per_step)),
    )
