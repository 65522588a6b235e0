"""CUDA/HIP graph capture: launches made while a stream is being captured are recorded into a graph
and do not run, so a trace of a capture (vLLM's start-up, a warm-up) is not a host-bound run whose
work failed to reach the GPU (docs/analysis.md, "Graph capture")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dbo_trace.analysis import classify as c
from dbo_trace.analysis.accounting import B_HOST, Partition
from dbo_trace.analysis.intervals import index_groups, union


@dataclass(frozen=True)
class Capture:
    windows: int  # BeginCapture .. EndCapture pairs
    captured_launches: int  # kernel and graph launches inside them, on the capturing thread
    capture_us: float  # the union of the capture windows
    host_idle_us: float  # host-idle GPU time inside them
    call_captured: np.ndarray  # per CUDA API call: made while its thread was capturing

    @property
    def found(self) -> bool:
        return self.windows > 0


def _calls_of(call_lane: np.ndarray, lanes: np.ndarray) -> dict[int, np.ndarray]:
    """The indices (in time order) of these threads' calls, by one sort of theirs alone: a look-up
    per capturing thread, not a pass over every call for each, and nothing sorted where none captured."""
    return index_groups(call_lane, np.flatnonzero(np.isin(call_lane, lanes)))


def capture_windows(
    call_start: np.ndarray, call_end: np.ndarray, call_lane: np.ndarray, call_kind: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, lane) of each capture window of a thread: from a BeginCapture while none of its
    captures is open to the EndCapture that closes the last (one thread may capture several streams
    at once); a capture still open at the end of the trace runs to the thread's last call. The marks
    are few (one pair per captured graph): a plain walk over them."""
    marks = np.flatnonzero(np.isin(call_kind, (c.CALL_CAPTURE_BEGIN, c.CALL_CAPTURE_END)))
    starts: list[float] = []
    ends: list[float] = []
    lanes: list[int] = []
    depth: dict[int, int] = {}
    opened: dict[int, float] = {}
    for i in marks[np.argsort(call_start[marks], kind="stable")]:
        lane = int(call_lane[i])
        if call_kind[i] == c.CALL_CAPTURE_BEGIN:
            if depth.get(lane, 0) == 0:
                opened[lane] = float(call_start[i])
            depth[lane] = depth.get(lane, 0) + 1
        elif depth.get(lane, 0) > 0:  # an end without its begin (the capture began before the trace) is ignored
            depth[lane] -= 1
            if depth[lane] == 0:
                starts.append(opened.pop(lane))
                ends.append(float(call_end[i]))
                lanes.append(lane)
    if opened:
        calls_of = _calls_of(call_lane, np.array(list(opened), np.int64))
        for lane, t in opened.items():
            starts.append(t)
            ends.append(float(call_end[calls_of[lane]].max()))
            lanes.append(lane)
    order = np.argsort(starts, kind="stable")
    return np.array(starts, float)[order], np.array(ends, float)[order], np.array(lanes, np.int64)[order]


def graph_capture(
    *,
    call_start: np.ndarray,  # (n_calls,) float64
    call_end: np.ndarray,  # (n_calls,) float64
    call_lane: np.ndarray,  # (n_calls,) int64
    call_kind: np.ndarray,  # (n_calls,) int8: classify.CALL_*
    part: Partition,
) -> Capture:
    w_start, w_end, w_lane = capture_windows(call_start, call_end, call_lane, call_kind)
    captured = np.zeros(len(call_start), bool)
    calls_of = _calls_of(call_lane, w_lane)
    for lane, w in index_groups(w_lane).items():  # threads that captured: few, but not in a hostile trace
        mine = calls_of[lane]
        ws, we = w_start[w], w_end[w]
        k = np.searchsorted(ws, call_start[mine], side="right") - 1
        inside = (k >= 0) & (call_start[mine] <= we[np.clip(k, 0, None)])
        captured[mine[inside]] = True
    launches = np.isin(call_kind, (c.CALL_LAUNCH, c.CALL_GRAPH_LAUNCH)) & captured
    if len(w_start):
        u_start, u_end = union(w_start, w_end)
        capture_us = float((u_end - u_start).sum())
        host_idle = float(part.measure_union(u_start, u_end)[B_HOST])
    else:
        capture_us = host_idle = 0.0
    return Capture(len(w_start), int(launches.sum()), capture_us, host_idle, captured)
