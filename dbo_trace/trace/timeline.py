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
    def from_columns(cls, ev: k.EventColumns, mask: np.ndarray, lane: np.ndarray) -> "Intervals":
        """The masked events of time-sorted columns."""
        return cls(
            start=ev.ts[mask],
            end=ev.ts[mask] + ev.dur[mask],
            name=ev.name[mask],
            lane=lane[mask],
            correlation=ev.correlation[mask],
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


def _sorted_by_time(ev: k.EventColumns) -> k.EventColumns:
    order = np.argsort(ev.ts, kind="stable")
    return k.EventColumns(**{name: getattr(ev, name)[order] for name in k.EventColumns.__dataclass_fields__})


def build_timeline(raw: k.RawTrace, rank: int) -> Timeline:
    ev = _sorted_by_time(raw.events)
    gpu_mask = np.isin(ev.cat, (k.CAT_KERNEL, k.CAT_MEMCPY, k.CAT_MEMSET))
    call_mask = np.isin(ev.cat, (k.CAT_RUNTIME, k.CAT_DRIVER))
    cpu_mask = np.isin(ev.cat, (k.CAT_CPU_OP, k.CAT_USER_ANNOTATION, k.CAT_PYTHON))
    # Kineto gives a GPU event's stream in args.stream and in tid; prefer the former.
    stream = np.where(ev.stream >= 0, ev.stream, ev.tid)
    pids = ev.pid[cpu_mask | call_mask]
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
        gpu=Intervals.from_columns(ev, gpu_mask, stream),
        gpu_is_copy=ev.cat[gpu_mask] != k.CAT_KERNEL,
        calls=Intervals.from_columns(ev, call_mask, ev.tid),
        cpu=Intervals.from_columns(ev, cpu_mask, ev.tid),
        cpu_is_annotation=ev.cat[cpu_mask] == k.CAT_USER_ANNOTATION,
        base_time_ns=int(base) if isinstance(base, (int, float)) else None,
        metadata=raw.metadata,
        warnings=warnings,
    )
