"""A Perfetto trace (TrackEvent protobuf, written with the `perfetto` package's builder): the original
kernels and CUDA API calls with their source args (grid, block, registers, bytes, correlation id,
stream, ...) and a flow from each launch call to the GPU work it launched, plus derived tracks a
reviewer reads at a glance: steps with their verdicts, each microbatch's compute and comm on the GPU,
comm under compute, exposed comm, host-caused GPU idle, and graph replays. Open it at ui.perfetto.dev."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from dbo_trace.analysis import classify as c
from dbo_trace.analysis import intervals as iv
from dbo_trace.analysis.steps.attribution import PHASE_COMM, PHASE_COMPUTE
from dbo_trace.analysis.overlap.busy import MICROBATCHES, microbatch_busy
from dbo_trace.analysis.model import RankDetail, RankReport, Report, StepReport
from dbo_trace.analysis.cross_rank.side_by_side import CrossRank
from dbo_trace.analysis.afd.roles import FFN, wall_offset_us
from dbo_trace.render.pictures.step_view import (
    FFN_SPAN,
    LONG_LAUNCH_US,
    afd_phase,
    afd_round_trip_spans,
    afd_waiting_spans,
    ffn_spans,
    held_in_step,
    steps_bands,
)
from dbo_trace.render.base import RenderOptions

SEQUENCE_ID = 7  # one writer sequence for the whole file
DERIVED = "dbo-trace"


class _Writer:
    def __init__(self) -> None:
        from perfetto.trace_builder.proto_builder import TraceProtoBuilder

        self.builder = TraceProtoBuilder()
        # The first packet names the writer (a trace config's session name: metadata, drawn nowhere):
        # a rerun recognises its own trace and replaces it (commands/common.py written_by_dbo_trace).
        self.builder.add_packet().trace_config.unique_session_name = "dbo-trace"
        self._uuid = 0
        self._first = True
        self.shift_us = 0.0  # the current rank's place on the ranks' shared time axis (analysis: CrossRank.shift_us)

    def track(self, name: str, parent: int | None = None, pid: int | None = None) -> int:
        self._uuid += 1
        desc = self.builder.add_packet().track_descriptor
        desc.uuid = self._uuid
        if pid is not None:
            desc.process.pid = pid
            desc.process.process_name = name
        else:
            desc.name = name
        if parent is not None:
            desc.parent_uuid = parent
        return self._uuid

    def slices(
        self,
        track: int,
        starts: Sequence[float] | np.ndarray,
        ends: Sequence[float] | np.ndarray,
        names: Sequence[str] | np.ndarray,
        args: Sequence[dict[str, Any] | None] | None = None,
        flows_out: Sequence[Sequence[int]] | None = None,
        flows_in: Sequence[Sequence[int]] | None = None,
    ) -> None:
        """Non-overlapping slices on one track, times in microseconds. Per slice, optionally: its
        arguments (a dict), the flows it starts (ids) and the flows it ends (ids)."""
        from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent

        n = len(starts)
        extra = zip(args or [None] * n, flows_out or [()] * n, flows_in or [()] * n)
        for s, e, name, (arg, out, into) in sorted(zip(starts, ends, names, extra), key=lambda x: x[0]):
            for ts, kind in ((s, TrackEvent.TYPE_SLICE_BEGIN), (max(e, s), TrackEvent.TYPE_SLICE_END)):
                packet = self.builder.add_packet()
                packet.timestamp = int(round((ts + self.shift_us) * 1000))
                packet.trusted_packet_sequence_id = SEQUENCE_ID
                if self._first:
                    packet.sequence_flags = 1  # SEQ_INCREMENTAL_STATE_CLEARED
                    self._first = False
                packet.track_event.type = kind
                packet.track_event.track_uuid = track
                if kind == TrackEvent.TYPE_SLICE_BEGIN:
                    packet.track_event.name = name
                    packet.track_event.flow_ids.extend(out)
                    packet.track_event.terminating_flow_ids.extend(into)
                    for key, value in (arg or {}).items():
                        _annotate(packet.track_event.debug_annotations.add(), key, value)


def _annotate(annotation: Any, key: str, value: Any) -> None:  # annotation: a DebugAnnotation message
    """One argument as Perfetto shows it: numbers and flags as themselves, lists and the rest as text."""
    annotation.name = str(key)
    if isinstance(value, bool):
        annotation.bool_value = value
    elif isinstance(value, int) and -(1 << 63) <= value < (1 << 63):
        annotation.int_value = value
    elif isinstance(value, float):
        annotation.double_value = value
    elif isinstance(value, str):
        annotation.string_value = value
    else:  # grid and block dims, nested values: as the source writes them
        annotation.string_value = json.dumps(value, separators=(", ", ": "))


def _source_args(rank: RankReport, window: tuple[float, float] | None) -> dict[tuple[bool, float, int], dict[str, Any]]:
    """The source trace's own args of each GPU activity and CUDA call (grid, block, registers, bytes,
    ...): read back from the file, since the timeline keeps only what the analyses use. A source that
    cannot be read again (gone, or not a plain file) leaves the export with the timeline's args."""
    from dbo_trace.trace.event_args import event_args

    try:
        tl = rank.detailed().timeline
        return event_args(tl.source, window, tl.extents)
    except Exception:  # noqa: BLE001 (an export without the extra args beats no export)
        return {}


def _rank(w: _Writer, rank: RankReport, window: tuple[float, float] | None, cross: CrossRank | None = None) -> None:
    d = rank.detailed()
    tl, att = d.timeline, d.attribution
    proc = w.track(f"rank {rank.rank} ({tl.source.name})", pid=tl.pid or 100000 + rank.rank)
    lo, hi = window or (-np.inf, np.inf)
    keep_gpu = (tl.gpu.end > lo) & (tl.gpu.start < hi)
    keep_calls = (tl.calls.end > lo) & (tl.calls.start < hi)
    steps = [s for s in rank.steps if s.end_us > lo and s.start_us < hi]

    # The original activity: one track per GPU stream and per CPU thread, each slice with its source
    # args (and the analysis's microbatch and class for GPU work), a flow from each launch to its work.
    source = _source_args(rank, window)
    launch = att.gpu_launch_index
    flow_base = (rank.rank + 1) << 40  # flow ids unique across ranks: a rank's GPU activity index below
    flows_from: dict[int, list[int]] = {}
    for g in np.flatnonzero(keep_gpu & (launch >= 0)).tolist():
        if keep_calls[launch[g]]:
            flows_from.setdefault(int(launch[g]), []).append(flow_base + g)

    def gpu_args(g: int) -> dict[str, Any]:
        corr = int(tl.gpu.correlation[g])
        derived = {
            "correlation": corr,
            "stream": int(tl.gpu.lane[g]),
            "dbo-trace class": c.KIND_NAMES.get(int(d.kernel_kind[g]), "?"),
            "dbo-trace microbatch": int(att.gpu_ubatch[g]),
            "dbo-trace step": int(att.gpu_step[g]),
        }
        return {**source.get((True, float(tl.gpu.start[g]), corr), {}), **derived}

    def call_args(i: int) -> dict[str, Any]:
        corr = int(tl.calls.correlation[i])
        return {**source.get((False, float(tl.calls.start[i]), corr), {}), "correlation": corr, "thread": int(tl.calls.lane[i])}

    # Each lane's events grouped once (a mask per lane cost lanes x events where a replay forks onto many streams).
    for sid, at in iv.index_groups(tl.gpu.lane, np.flatnonzero(keep_gpu)).items():
        sel = at.tolist()
        w.slices(
            w.track(f"GPU stream {sid}", proc),
            tl.gpu.start[sel],
            tl.gpu.end[sel],
            [tl.names[n] for n in tl.gpu.name[sel]],
            args=[gpu_args(g) for g in sel],
            flows_in=[(flow_base + g,) if launch[g] >= 0 and keep_calls[launch[g]] else () for g in sel],
        )
    for tid, at in iv.index_groups(tl.calls.lane, np.flatnonzero(keep_calls)).items():
        sel = at.tolist()
        w.slices(
            w.track(f"CPU thread {tid}: CUDA API", proc),
            tl.calls.start[sel],
            tl.calls.end[sel],
            [tl.names[n] for n in tl.calls.name[sel]],
            args=[call_args(i) for i in sel],
            flows_out=[flows_from.get(i, ()) for i in sel],
        )

    _derived_tracks(w, proc, rank, d, steps, (lo, hi), keep_gpu, keep_calls, cross)


def _derived_tracks(
    w: _Writer,
    proc: int,
    rank: RankReport,
    d: RankDetail,
    steps: list[StepReport],
    window: tuple[float, float],
    keep_gpu: np.ndarray,
    keep_calls: np.ndarray,
    cross: CrossRank | None,
) -> None:
    """A rank's tracks of what the analysis derived (steps, microbatches' busy stretches, round trips,
    bands, waits, Python stacks, graph replays), under its process track."""
    tl, att = d.timeline, d.attribution
    lo, hi = window
    in_steps = (att.gpu_step >= 0) & keep_gpu
    root = w.track(f"{DERIVED}: rank {rank.rank}", proc)
    w.slices(
        w.track("steps (verdict)", root),
        [s.start_us for s in steps],
        [s.end_us for s in steps],
        [f"{s.label}: {s.verdict.label} ({s.wall_us / 1000:.2f} ms)" for s in steps],
    )
    afd = rank.afd
    ubatch, phases = att.gpu_ubatch, att.gpu_phase
    if afd is not None and afd.kernel_ubatch is not None:  # by the microbatch its round trips told them (replays too)
        ubatch, phases = afd.kernel_ubatch, afd_phase(d.kernel_kind)
    busy = microbatch_busy(start=tl.gpu.start, end=tl.gpu.end, ubatch=ubatch, phase=phases, selected=in_steps)
    for u in MICROBATCHES:
        for phase, label in ((PHASE_COMPUTE, "compute"), (PHASE_COMM, "comm")):
            s, e = busy[(u, phase)]
            w.slices(w.track(f"microbatch {u} {label} (GPU)", root), s, e, [f"ub{u} {label}"] * len(s))
    if afd is not None:  # each round trip from its send's start to its receive's end, and its hidden part
        for track, (s, e, names) in afd_round_trip_spans(rank, lo, hi).items():
            w.slices(w.track(track, root), s, e, names)
        _, (ws, we) = afd_waiting_spans(rank, max(lo, float(tl.gpu.start.min())), min(hi, float(tl.gpu.end.max())))
        waiting = w.track("attention GPU idle, a round trip in flight (waiting for the FFN)", root)
        w.slices(waiting, ws, we, ["waiting for the FFN"] * len(ws))
    if rank.role == FFN:  # its compute between two of its sends/receives: one span per round trip
        at = np.flatnonzero(keep_gpu)
        per_trip = [x for x in ffn_spans(tl.gpu.start[at], tl.gpu.end[at], d.kernel_kind[at]) if x[3] == FFN_SPAN]
        w.slices(
            w.track("FFN compute per round trip (its kernels between a receive and a send)", root),
            [x[0] for x in per_trip], [x[1] for x in per_trip], [f"FFN compute ({x[2]} kernels)" for x in per_trip],
        )  # fmt: skip
    bands = steps_bands(rank, steps)  # per step, as the metrics count them
    for track, name, field in (
        ("comm under compute", "hidden comm", "hidden_comm"),
        ("exposed comm", "exposed comm", "exposed_comm"),
        ("GPU idle, host-caused", "host-caused idle", "host_idle"),
    ):
        s = np.concatenate([getattr(b, field)[0] for b in bands]) if bands else np.empty(0)
        e = np.concatenate([getattr(b, field)[1] for b in bands]) if bands else np.empty(0)
        w.slices(w.track(track, root), s, e, [name] * len(s))
    _held_back(w, root, d, steps)
    spans = cross.waits.wait_spans.get(rank.rank) if cross is not None and cross.waits is not None else None
    if spans is not None:  # each comm kernel's wait for the last rank of its collective
        keep = (spans[1] > lo) & (spans[0] < hi)
        w.slices(
            w.track("waiting for a peer rank (in comm kernels)", root),
            spans[0][keep],
            spans[1][keep],
            [f"waiting for rank {int(r)}" for r in spans[2][keep]],
        )
    if rank.host_stacks is not None:  # the sampled Python stacks of the threads the trace's map to
        for t in rank.host_stacks.tracks:
            keep = (t.hi > lo) & (t.lo < hi)
            w.slices(
                w.track(f"Python stacks (py-spy), {t.thread}", root),
                t.lo[keep],
                t.hi[keep],
                [n for n, k in zip(t.names, keep.tolist()) if k],
            )
    graph = np.flatnonzero(keep_calls & (d.call_kind == c.CALL_GRAPH_LAUNCH))
    w.slices(
        w.track("graph replays (cudaGraphLaunch)", root),
        tl.calls.start[graph],
        tl.calls.end[graph],
        [
            "cudaGraphLaunch" if d.call_gpu_waited[i] or d.call_us[i] < LONG_LAUNCH_US
            else "cudaGraphLaunch (returned late: a full queue, its GPU work began at once)"
            for i in graph.tolist()
        ],  # fmt: skip
    )


def _held_back(w: _Writer, root: int, d: RankDetail, steps: list[StepReport]) -> None:
    """Each held-back comm kernel of the steps, from when it was ready to when it started."""
    if d.held is None:
        return
    tl, att = d.timeline, d.attribution
    kernels = set(np.flatnonzero(np.isin(att.gpu_step, [s.index for s in steps])).tolist())
    held = held_in_step(d.held, kernels)
    for u in sorted({int(att.gpu_ubatch[k]) for k, _, _ in held}):  # one microbatch's waits never overlap
        mine = [(k, ready, cause) for k, ready, cause in held if att.gpu_ubatch[k] == u]
        w.slices(
            w.track(f"microbatch {u} comm held back (ready, not started)", root),
            [ready for _, ready, _ in mine],
            [float(tl.gpu.start[k]) for k, _, _ in mine],
            [f"held back: {cause}" for _, _, cause in mine],
        )


class PerfettoRenderer:
    name, suffixes, binary = "perfetto", (".pftrace", ".perfetto-trace"), True

    def render(self, report: Report, options: RenderOptions = RenderOptions()) -> bytes:
        return write_perfetto(report, options.windows)


def write_perfetto(report: Report, windows: dict[int, tuple[float, float]] | None = None) -> bytes:
    """The whole trace, or per rank only what overlaps windows[rank] (trace clock, us). Several ranks:
    one process each, all on one time axis where the ranks could be aligned (docs/analysis.md)."""
    w = _Writer()
    cross = report.cross_rank
    # An AFD pair's FFN on its attention side's clock (one host's baseTimeNanoseconds): its round
    # trips' far ends then line up with the attention's sends and receives.
    attention = next((r for r in report.ranks if r.afd is not None and r.detail is not None), None)
    for rank in report.ranks:
        if rank.detail is not None and (windows is None or rank.rank in windows):
            w.shift_us = cross.shift_us(rank.rank) if cross is not None else 0.0
            if rank.role == FFN and attention is not None:
                w.shift_us = wall_offset_us(rank.detailed().timeline, attention.detailed().timeline) or 0.0
            _rank(w, rank, None if windows is None else windows[rank.rank], cross)
    data: bytes = w.builder.serialize()
    return data
