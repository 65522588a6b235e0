"""A Perfetto trace (TrackEvent protobuf, written with the `perfetto` package's builder): the original
kernels and CUDA API calls, plus derived tracks a reviewer reads at a glance: steps with their verdicts,
each microbatch's compute and comm on the GPU, comm under compute, exposed comm, host-caused GPU idle,
and graph replays. Open it at ui.perfetto.dev."""

from __future__ import annotations

import numpy as np

from dbo_trace.analysis import classify as c
from dbo_trace.analysis import intervals as iv
from dbo_trace.analysis.attribution import PHASE_COMM, PHASE_COMPUTE
from dbo_trace.analysis.metrics import host_idle_gaps
from dbo_trace.analysis.report import RankReport, Report

SEQUENCE_ID = 7  # one writer sequence for the whole file
DERIVED = "dbo-trace"


class _Writer:
    def __init__(self) -> None:
        from perfetto.trace_builder.proto_builder import TraceProtoBuilder

        self.builder = TraceProtoBuilder()
        self._uuid = 0
        self._first = True

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

    def slices(self, track: int, starts, ends, names) -> None:
        """Non-overlapping slices on one track, times in microseconds."""
        from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent

        for s, e, name in sorted(zip(starts, ends, names), key=lambda x: x[0]):
            for ts, kind in ((s, TrackEvent.TYPE_SLICE_BEGIN), (max(e, s), TrackEvent.TYPE_SLICE_END)):
                packet = self.builder.add_packet()
                packet.timestamp = int(round(ts * 1000))
                packet.trusted_packet_sequence_id = SEQUENCE_ID
                if self._first:
                    packet.sequence_flags = 1  # SEQ_INCREMENTAL_STATE_CLEARED
                    self._first = False
                packet.track_event.type = kind
                packet.track_event.track_uuid = track
                if kind == TrackEvent.TYPE_SLICE_BEGIN:
                    packet.track_event.name = name


def _rank(w: _Writer, rank: RankReport, window: tuple[float, float] | None) -> None:
    d = rank.detail
    tl, att = d.timeline, d.attribution
    proc = w.track(f"rank {rank.rank} ({tl.source.name})", pid=tl.pid or 100000 + rank.rank)
    lo, hi = window or (-np.inf, np.inf)
    keep_gpu = (tl.gpu.end > lo) & (tl.gpu.start < hi)
    keep_calls = (tl.calls.end > lo) & (tl.calls.start < hi)
    in_steps = (att.gpu_step >= 0) & keep_gpu
    steps = [s for s in rank.steps if s.end_us > lo and s.start_us < hi]

    # The original activity: one track per GPU stream and per CPU thread.
    for sid in np.unique(tl.gpu.lane[keep_gpu]):
        sel = keep_gpu & (tl.gpu.lane == sid)
        w.slices(w.track(f"GPU stream {sid}", proc), tl.gpu.start[sel], tl.gpu.end[sel], [tl.names[n] for n in tl.gpu.name[sel]])
    for tid in np.unique(tl.calls.lane[keep_calls]):
        sel = keep_calls & (tl.calls.lane == tid)
        w.slices(
            w.track(f"CPU thread {tid}: CUDA API", proc),
            tl.calls.start[sel],
            tl.calls.end[sel],
            [tl.names[n] for n in tl.calls.name[sel]],
        )

    # Derived tracks.
    root = w.track(f"{DERIVED}: rank {rank.rank}", proc)
    w.slices(
        w.track("steps (verdict)", root),
        [s.start_us for s in steps],
        [s.end_us for s in steps],
        [f"{s.label}: {s.verdict.label} ({s.wall_us / 1000:.2f} ms)" for s in steps],
    )
    for u in (0, 1):
        for phase, label in ((PHASE_COMPUTE, "compute"), (PHASE_COMM, "comm")):
            sel = in_steps & (att.gpu_ubatch == u) & (att.gpu_phase == phase)
            s, e = iv.union(tl.gpu.start[sel], tl.gpu.end[sel])
            w.slices(w.track(f"microbatch {u} {label} (GPU)", root), s, e, [f"ub{u} {label}"] * len(s))
    comm = in_steps & (d.kernel_kind == c.COMM)
    compute = in_steps & (d.kernel_kind == c.COMPUTE)
    comm_iv, compute_iv = (tl.gpu.start[comm], tl.gpu.end[comm]), (tl.gpu.start[compute], tl.gpu.end[compute])
    s, e = iv.intersection(comm_iv, compute_iv)
    w.slices(w.track("comm under compute", root), s, e, ["hidden comm"] * len(s))
    s, e = iv.difference(comm_iv, compute_iv)
    w.slices(w.track("exposed comm", root), s, e, ["exposed comm"] * len(s))
    gs, ge = [], []
    for step in steps:  # per step, as the metrics count it
        sel = att.gpu_step == step.index
        a, b, _ = host_idle_gaps(tl.gpu.start[sel], tl.gpu.end[sel], att.gpu_launch_start[sel])
        gs += list(a)
        ge += list(b)
    w.slices(w.track("GPU idle, host-caused", root), gs, ge, ["host-caused idle"] * len(gs))
    graph = np.flatnonzero(keep_calls & (c.call_kinds(tl.names, tl.calls.name) == c.CALL_GRAPH_LAUNCH))
    w.slices(
        w.track("graph replays (cudaGraphLaunch)", root),
        tl.calls.start[graph],
        tl.calls.end[graph],
        ["cudaGraphLaunch"] * len(graph),
    )


def write_perfetto(report: Report, windows: dict[int, tuple[float, float]] | None = None) -> bytes:
    """The whole trace, or per rank only what overlaps windows[rank] (trace clock, us)."""
    w = _Writer()
    for rank in report.ranks:
        if rank.detail is not None and (windows is None or rank.rank in windows):
            _rank(w, rank, None if windows is None else windows[rank.rank])
    return w.builder.serialize()
