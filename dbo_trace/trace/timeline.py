"""The timeline model: one process's (rank's) GPU activity, CUDA API calls and CPU ranges as arrays."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from dbo_trace.trace import kineto as k


@dataclass
class Intervals:
    """Parallel arrays; every field has one entry per interval, sorted by start."""

    start: np.ndarray
    end: np.ndarray
    name: np.ndarray  # index into Timeline.names
    lane: np.ndarray  # GPU: stream; CPU and API calls: thread id as the trace gives it
    correlation: np.ndarray

    @classmethod
    def from_columns(cls, ev: k.EventColumns, index: np.ndarray, lane: np.ndarray) -> "Intervals":
        """The events at `index` (positions in time order) of the columns."""
        start = ev.ts[index]
        return cls(
            start=start,
            end=start + ev.dur[index],
            name=ev.name[index],
            lane=lane[index],
            correlation=ev.correlation[index],
        )

    def __len__(self) -> int:
        return len(self.start)


@dataclass
class Timeline:
    source: Path
    rank: int
    pid: int | None  # the host process, where the trace says
    names: list[str]
    gpu: Intervals  # kernels, memcpy, memset
    gpu_is_copy: np.ndarray
    calls: Intervals  # CUDA runtime and driver API calls
    cpu: Intervals  # cpu ops, user annotations, python functions
    cpu_is_annotation: np.ndarray
    base_time_ns: int | None  # trace ts + base_time_ns/1000 is the time.time_ns()/1000 clock
    metadata: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def cpu_ranges_named(
        self, match: Callable[[str], Any], annotations_only: bool = False
    ) -> list[tuple[float, float, str, Any]]:
        """(start, end, name, what match returned) for each CPU range (each user annotation) whose name
        match() accepts (a truthy result); each distinct name is tested once, not each range."""
        hits = {i: m for i, name in enumerate(self.names) if (m := match(name))}
        if not hits:
            return []
        chosen = np.isin(self.cpu.name, list(hits))
        sel = np.flatnonzero(chosen & self.cpu_is_annotation if annotations_only else chosen)
        return [
            (float(self.cpu.start[i]), float(self.cpu.end[i]), self.names[self.cpu.name[i]], hits[int(self.cpu.name[i])])
            for i in sel
        ]


def build_timeline(raw: k.RawTrace, rank: int) -> Timeline:
    ev = raw.events
    # Each kind's events in time order (stable: ties keep file order), gathered once per column they
    # use: sorting every column first and then selecting gathered each twice.
    order = np.argsort(ev.ts, kind="stable")
    cat = ev.cat[order]
    gpu_at = order[np.isin(cat, (k.CAT_KERNEL, k.CAT_MEMCPY, k.CAT_MEMSET))]
    call_at = order[np.isin(cat, (k.CAT_RUNTIME, k.CAT_DRIVER))]
    cpu_at = order[np.isin(cat, (k.CAT_CPU_OP, k.CAT_USER_ANNOTATION, k.CAT_PYTHON))]
    # Kineto gives a GPU event's stream in args.stream and in tid; prefer the former.
    stream = np.where(ev.stream >= 0, ev.stream, ev.tid)
    pids = ev.pid[np.isin(ev.cat, (k.CAT_RUNTIME, k.CAT_DRIVER, k.CAT_CPU_OP, k.CAT_USER_ANNOTATION, k.CAT_PYTHON))]
    pid = int(np.bincount(pids - pids.min()).argmax() + pids.min()) if len(pids) else None
    base = raw.metadata.get("baseTimeNanoseconds")
    warnings = []
    if raw.skipped_no_time:
        warnings.append(f"{raw.path}: {raw.skipped_no_time} events without a timestamp were ignored")
    for reason, count in raw.dropped.items():
        warnings.append(f"{raw.path}: {count} events left out: {reason}")
    return Timeline(
        source=raw.path,
        rank=rank,
        pid=pid,
        names=raw.names,
        gpu=Intervals.from_columns(ev, gpu_at, stream),
        gpu_is_copy=ev.cat[gpu_at] != k.CAT_KERNEL,
        calls=Intervals.from_columns(ev, call_at, ev.tid),
        cpu=Intervals.from_columns(ev, cpu_at, ev.tid),
        cpu_is_annotation=ev.cat[cpu_at] == k.CAT_USER_ANNOTATION,
        base_time_ns=int(base) if isinstance(base, (int, float)) else None,
        metadata=raw.metadata,
        warnings=warnings,
    )
