"""Who is communication, and what a CUDA API call is.

Kernels are communication by name only (docs/analysis.md lists the families);
a side stream is not evidence: real traces run GEMMs on side streams.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from dbo_trace.trace.timeline import names_to_test

# Kernel kinds.
COMPUTE, COMM, COPY = 0, 1, 2
KIND_NAMES = {COMPUTE: "compute", COMM: "comm", COPY: "copy"}

COMM_PATTERNS: dict[str, str] = {
    "NCCL / RCCL": r"^nccl|ncclDevKernel|ncclKernel|rccl",
    "DeepEP": r"deep_?ep|::ep::|\bep::(intranode|internode|internode_ll)|notify_dispatch|notify_combine|cached_notify",
    "pplx": r"pplx|\ball_?to_?all",
    "NVSHMEM": r"nvshmem",
    "custom all-reduce": r"cross_device_reduce|custom_?all_?reduce|\ball_?reduce",
    "all-gather / reduce-scatter": r"all_?gather|reduce_?scatter",
    "dispatch / combine": r"(moe|ep|a2a|all2all)_?(dispatch|combine)|\bdispatch_kernel|\bcombine_kernel",
    "symmetric memory": r"symm_?mem|multimem|two_shot|one_shot_all",
}

# CUDA API calls by what they do to the GPU.
CALL_OTHER, CALL_LAUNCH, CALL_GRAPH_LAUNCH, CALL_SYNC, CALL_COPY = 0, 1, 2, 3, 4
CALL_EVENT_RECORD, CALL_STREAM_WAIT = 5, 6  # the two halves of a cross-stream dependency
CALL_CAPTURE_BEGIN, CALL_CAPTURE_END = 7, 8  # a stream's launches between them are recorded into a graph, not run
_LAUNCH = {
    # ROCm (HIP) traces name their launches hip*
    "hipLaunchKernel",
    "hipExtLaunchKernel",
    "hipModuleLaunchKernel",
    "hipExtModuleLaunchKernel",
    "hipLaunchCooperativeKernel",
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cudaLaunchCooperativeKernel",
    "cudaLaunchCooperativeKernelMultiDevice",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cuLaunchCooperativeKernel",
}
_GRAPH_LAUNCH = {"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"}
_SYNC = {
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventSynchronize",
    "cuStreamSynchronize",
    "cuCtxSynchronize",
    "cuEventSynchronize",
    "hipDeviceSynchronize",
    "hipStreamSynchronize",
    "hipEventSynchronize",
}
_EVENT_RECORD_PREFIXES = ("cudaEventRecord", "cuEventRecord", "hipEventRecord")  # ...WithFlags too
_STREAM_WAIT = {"cudaStreamWaitEvent", "cuStreamWaitEvent", "hipStreamWaitEvent"}
_CAPTURE_BEGIN_PREFIXES = ("cudaStreamBeginCapture", "cuStreamBeginCapture", "hipStreamBeginCapture")  # ...ToGraph too
_CAPTURE_END = {"cudaStreamEndCapture", "cuStreamEndCapture", "hipStreamEndCapture"}
_COPY_PREFIXES = ("cudaMemcpy", "cudaMemset", "cuMemcpy", "cuMemset", "hipMemcpy", "hipMemset")


@dataclass(frozen=True)
class CommRules:
    """The communication definition in force: built-in families plus the user's, or the user's alone."""

    extra_patterns: tuple[str, ...] = ()
    streams: tuple[int, ...] = ()
    builtin: dict[str, str] = field(default_factory=lambda: dict(COMM_PATTERNS))
    replace_builtin: bool = False  # --comm-kernels-only: the user's patterns are the whole set

    def regex(self) -> re.Pattern[str]:
        parts = (() if self.replace_builtin else tuple(self.builtin.values())) + self.extra_patterns
        return comm_regex(tuple(parts))


@functools.lru_cache(maxsize=16)
def comm_regex(parts: tuple[str, ...]) -> re.Pattern[str]:
    """One regular expression of the communication patterns, compiled once per set (every rank of a
    report shares it). The patterns were checked where they came in: the command's checked() for the
    user's, the pipeline for a manifest's."""
    if not parts:
        return re.compile(r"(?!)")  # nothing is communication
    return re.compile("|".join(f"(?:{p})" for p in parts), re.IGNORECASE)


def kernel_kinds(
    names: list[str], name_ids: np.ndarray, is_copy: np.ndarray, streams: np.ndarray, rules: CommRules
) -> np.ndarray:
    """compute / comm / copy for each GPU activity; the names they use are classified once each."""
    rx = rules.regex()
    comm_name = per_name(names, name_ids, lambda n: bool(rx.search(n)))
    kinds = np.where(comm_name[name_ids] if len(names) else False, COMM, COMPUTE).astype(np.int8)
    if rules.streams:
        kinds[np.isin(streams, rules.streams)] = COMM
    kinds[is_copy] = COPY
    return kinds


def call_kinds(names: list[str], name_ids: np.ndarray) -> np.ndarray:
    def kind(n: str) -> int:
        if n in _LAUNCH:
            return CALL_LAUNCH
        if n in _GRAPH_LAUNCH:
            return CALL_GRAPH_LAUNCH
        if n in _SYNC:
            return CALL_SYNC
        if n.startswith(_COPY_PREFIXES):
            return CALL_COPY
        if n.startswith(_EVENT_RECORD_PREFIXES):
            return CALL_EVENT_RECORD
        if n in _STREAM_WAIT:
            return CALL_STREAM_WAIT
        if n.startswith(_CAPTURE_BEGIN_PREFIXES):
            return CALL_CAPTURE_BEGIN
        if n in _CAPTURE_END:
            return CALL_CAPTURE_END
        return CALL_OTHER

    table = per_name(names, name_ids, kind, np.int8, CALL_OTHER)
    return table[name_ids] if len(names) else np.empty(0, np.int8)


def per_name(
    names: list[str],
    name_ids: np.ndarray,
    test: Callable[[str], Any],
    dtype: Any = bool,
    unused: Any = False,
    hint: re.Pattern[str] | None = None,
) -> np.ndarray:
    """test() of each name the events use (name_ids), each name once, as a table over all the names
    (`unused` for the others): index it with the events' name ids. Only the used names, since a
    trace's names also hold every step's annotation (100,000 of them in a long run). hint: a pattern
    (timeline.names_hinted's) that every name test() accepts holds; the names it is not found in
    are `unused` untested."""
    out = np.full(len(names), unused, dtype)
    used = names_to_test(names, name_ids, hint)
    out[used] = np.fromiter((test(names[i]) for i in used.tolist()), dtype, len(used))
    return out
