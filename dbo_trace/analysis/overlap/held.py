"""Held-back communication: comm kernels that were ready to run beside the other microbatch's compute
but started only when that compute ended (docs/analysis.md, "Held-back communication").

A comm kernel is ready at the latest of: its launch call's end, the end of the previous activity on
its stream, and the end of the last compute kernel its own microbatch launched before it (DBO's comm
waits on its own microbatch's compute). It is held back when it starts at least MIN_DELAY_US after
that, at the end of a compute kernel of the other microbatch that was running (or starting) when it
became ready (the holder). Why, from the GPU times and the order of the CUDA calls:
  crowded      it started before the holder ended (in its tail, as the holder's last blocks freed
               SMs), or the holder was launched after it (no event it waits on can cover a later
               launch): nothing ordered them, the GPU had no room for it beside the holder (an
               SM-hungry kernel)
  late-record  it started after the holder ended, and its thread recorded an event after the
               holder's launch and then made a stream wait, before launching it: an event recorded
               too late covered the holder, and the comm waited for all of it
  held         it started after the holder ended without that evidence (a dependency the trace
               does not show, crowding to the holder's last block, or the holder's launch unknown)
Measured on the H200 (docs/analysis.md): a late record starts the comm 2-3 us after the holder ends;
crowding starts it 6-120 us before.
Kernels launched by a graph replay are left out: their order is the graph's, not the calls'.
Pure: arrays in, a HeldBack out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dbo_trace.analysis import classify as c
from dbo_trace.analysis.overlap.exposure import CROWDED, HELD, LATE_RECORD
from dbo_trace.analysis.intervals import index_groups

STARTED_BEFORE_END_US = 1.0  # started this much before the holder's end: it did not wait for its end
MIN_DELAY_US = 20.0  # shorter waits are launch latency and scheduling noise
START_SLACK_US = 25.0  # the comm may start this long after the holder ended and still be held by it
TAIL_FRACTION, MIN_TAIL_US = 0.1, 10.0  # ...or this far into the holder's tail, as its last blocks free SMs
CAUSES = (LATE_RECORD, CROWDED, HELD)


@dataclass(frozen=True)
class HeldBack:
    """Per held-back comm kernel, in start order (indices into the rank's GPU activities and calls)."""

    kernel: np.ndarray
    holder: np.ndarray
    ready: np.ndarray  # when it could have started
    delay_us: np.ndarray  # start - ready
    cause: np.ndarray  # index into CAUSES
    record_call: np.ndarray  # the late cudaEventRecord (late-record), -1 otherwise
    comm_kernels: int  # comm kernels examined (launched by a kernel launch, with a microbatch)

    def __len__(self) -> int:
        return len(self.kernel)

    def by_cause(self) -> dict[str, tuple[int, float]]:
        """cause -> (kernels, total delay us), causes with none left out."""
        return {
            name: (int((self.cause == i).sum()), float(self.delay_us[self.cause == i].sum()))
            for i, name in enumerate(CAUSES)
            if (self.cause == i).any()
        }

    def causes(self) -> dict[int, str]:
        """GPU activity index -> its cause, for the held-back kernels."""
        return {int(k): CAUSES[i] for k, i in zip(self.kernel, self.cause)}


@dataclass(frozen=True)
class LateRecord:
    """One late record, as evidence: the call, who made it, and what it covered."""

    record_call: str
    thread: int
    ubatch: int  # the microbatch whose thread made it, -1 where unknown
    after_holder_launch_us: float  # the record came this long after the holder's launch
    holder: str
    comm_kernel: str
    delay_us: float


@dataclass(frozen=True)
class HeldSummary:
    comm_kernels: int  # examined
    kernels: int
    delay_us: float
    median_delay_us: float | None
    by_cause: dict[str, tuple[int, float]]  # cause -> (kernels, delay us)
    holders: list[tuple[str, int, float]]  # (holder kernel name, comm kernels it held, delay us), most delay first
    late_record: LateRecord | None  # the first late record, where there is one


def summarize(
    h: HeldBack,
    *,
    gpu_name: np.ndarray,  # (n_gpu,) int32 into names
    names: list[str],
    call_name: np.ndarray,  # (n_calls,) int32 into names
    call_thread: np.ndarray,  # (n_calls,) int64
    call_ubatch: np.ndarray,  # (n_calls,) int8, -1 unknown
    call_start: np.ndarray,  # (n_calls,) float64
    holder_launch_start: np.ndarray,  # (n_gpu,) float64, NaN unknown
    most: int = 3,
) -> HeldSummary:
    """holder_launch_start: per GPU activity, its launch call's start (NaN where unknown)."""
    holders: dict[str, list[float]] = {}
    for k, d in zip(h.holder, h.delay_us):
        holders.setdefault(names[gpu_name[k]], []).append(float(d))
    ranked = sorted(((n, len(ds), sum(ds)) for n, ds in holders.items()), key=lambda x: -x[2])
    late = np.flatnonzero(h.record_call >= 0)
    example = None
    if len(late):
        i = late[np.argmin(h.ready[late])]
        rec = h.record_call[i]
        example = LateRecord(
            record_call=names[call_name[rec]],
            thread=int(call_thread[rec]),
            ubatch=int(call_ubatch[rec]),
            after_holder_launch_us=float(call_start[rec] - holder_launch_start[h.holder[i]]),
            holder=names[gpu_name[h.holder[i]]],
            comm_kernel=names[gpu_name[h.kernel[i]]],
            delay_us=float(h.delay_us[i]),
        )
    return HeldSummary(
        h.comm_kernels,
        len(h),
        float(h.delay_us.sum()),
        float(np.median(h.delay_us)) if len(h) else None,
        h.by_cause(),
        ranked[:most],
        example,
    )


def _padded(sorted_values: np.ndarray, sentinel: float) -> np.ndarray:
    """The values and one sentinel after them, so that a searchsorted position past the end reads it."""
    return np.append(sorted_values, sentinel)


def held_back(
    *,
    gpu_start: np.ndarray,  # (n_gpu,) float64
    gpu_end: np.ndarray,  # (n_gpu,) float64
    gpu_stream: np.ndarray,  # (n_gpu,) int64
    kinds: np.ndarray,  # (n_gpu,) int8: classify.COMPUTE / COMM / COPY
    ubatch: np.ndarray,  # (n_gpu,) int8, -1 unknown
    launch_index: np.ndarray,  # (n_gpu,) int64 into the calls, -1 unknown
    call_start: np.ndarray,  # (n_calls,) float64
    call_end: np.ndarray,  # (n_calls,) float64
    call_thread: np.ndarray,  # (n_calls,) int64
    call_kind: np.ndarray,  # (n_calls,) int8: classify.CALL_*
) -> HeldBack:
    n = len(gpu_start)
    launched = launch_index >= 0
    li = np.where(launched, launch_index, 0)
    by_launch = launched & (call_kind[li] == c.CALL_LAUNCH if len(call_kind) else False)
    launch_start = np.where(by_launch, call_start[li] if len(call_start) else np.nan, np.nan)
    launch_end = np.where(by_launch, call_end[li] if len(call_end) else np.nan, np.nan)
    comm = np.flatnonzero((kinds == c.COMM) & by_launch & (ubatch >= 0))

    # The previous activity on the same stream, for every activity (stable: start order within a stream).
    order = np.lexsort((gpu_start, gpu_stream))
    prev_end = np.full(n, -np.inf)
    same = gpu_stream[order[1:]] == gpu_stream[order[:-1]]
    prev_end[order[1:][same]] = gpu_end[order[:-1][same]]

    # The last compute kernel of the same microbatch launched before (by launch call start).
    compute = np.flatnonzero((kinds == c.COMPUTE) & by_launch & (ubatch >= 0))
    own_dep_end = np.full(n, -np.inf)
    for u in np.unique(ubatch[comm]):
        mine = compute[ubatch[compute] == u]
        mine = mine[np.argsort(launch_start[mine], kind="stable")]
        ks = comm[ubatch[comm] == u]
        j = np.searchsorted(launch_start[mine], launch_start[ks], side="left") - 1
        has = j >= 0
        own_dep_end[ks[has]] = gpu_end[mine[j[has]]]
    ready = np.maximum.reduce([launch_end[comm], prev_end[comm], own_dep_end[comm]])
    delay = gpu_start[comm] - ready

    # The holder: the first compute kernel (any microbatch) to end at or after START_SLACK_US before the start.
    by_end = np.flatnonzero(kinds == c.COMPUTE)
    by_end = by_end[np.argsort(gpu_end[by_end], kind="stable")]
    holder = _padded(by_end, -1)[np.searchsorted(gpu_end[by_end], gpu_start[comm] - START_SLACK_US, side="left")]
    h = np.maximum(holder, 0)
    tail = np.maximum(MIN_TAIL_US, TAIL_FRACTION * (gpu_end[h] - gpu_start[h]))
    is_held = (
        (holder >= 0)
        & (delay >= MIN_DELAY_US)
        & (ubatch[h] >= 0)
        & (ubatch[h] != ubatch[comm])
        & (gpu_start[h] <= ready + START_SLACK_US)  # it was running (or starting) when the comm became ready
        & (gpu_end[h] > ready)
        & (gpu_end[h] - tail <= gpu_start[comm])  # and the comm started in its tail or just after it
    )
    kernel, holder, ready, delay = comm[is_held], holder[is_held], ready[is_held], delay[is_held]

    holder_launch = launch_start[holder]
    started_while_it_ran = gpu_start[kernel] < gpu_end[holder] - STARTED_BEFORE_END_US
    cause = np.full(len(kernel), CAUSES.index(HELD), np.int8)
    cause[started_while_it_ran | (holder_launch > launch_start[kernel])] = CAUSES.index(CROWDED)
    record_call = np.full(len(kernel), -1, np.int64)
    # Late record: on the comm's thread, an event record after the holder's launch, then a stream wait,
    # both before the comm's launch. Per launching thread (a handful), vectorized within it.
    undecided = np.flatnonzero((cause == CAUSES.index(HELD)) & (holder_launch < launch_start[kernel]))
    threads = call_thread[li[kernel[undecided]]]
    records_of = index_groups(call_thread, np.flatnonzero(call_kind == c.CALL_EVENT_RECORD))  # per thread, by one sort
    waits_of = index_groups(call_thread, np.flatnonzero(call_kind == c.CALL_STREAM_WAIT))
    for thread in np.unique(threads):
        ix = undecided[threads == thread]
        records = records_of.get(int(thread), np.empty(0, np.int64))
        records = records[np.argsort(call_start[records], kind="stable")]
        record_starts = _padded(call_start[records], np.inf)
        wait_starts = _padded(np.sort(call_start[waits_of.get(int(thread), np.empty(0, np.int64))]), np.inf)
        first = np.searchsorted(record_starts, holder_launch[ix], side="right")  # the first record after the holder's launch
        record_start = record_starts[first]
        wait_start = wait_starts[np.searchsorted(wait_starts, record_start, side="right")]  # the first wait after it
        comm_launch = launch_start[kernel[ix]]
        late = (record_start < comm_launch) & (wait_start < comm_launch)
        cause[ix[late]] = CAUSES.index(LATE_RECORD)
        record_call[ix[late]] = records[first[late]]
    return HeldBack(kernel, holder, ready, delay, cause, record_call, len(comm))
