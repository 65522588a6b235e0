"""The timeline model: one process's (rank's) GPU activity, CUDA API calls and CPU ranges as arrays."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from dbo_trace.trace import kineto as k


@dataclass(frozen=True)
class Intervals:
    """Parallel arrays; every field has one entry per interval, sorted by start."""

    start: np.ndarray
    end: np.ndarray
    name: np.ndarray  # index into Timeline.names
    lane: np.ndarray  # GPU: stream; CPU and API calls: thread id as the trace gives it
    correlation: np.ndarray

    def __len__(self) -> int:
        return len(self.start)

    def take(self, keep: np.ndarray | slice) -> Intervals:
        """The intervals at these positions (indices, a mask or a slice), in that order."""
        return Intervals(self.start[keep], self.end[keep], self.name[keep], self.lane[keep], self.correlation[keep])


# Older Kineto wrote ts as microseconds since 1970 with no baseTimeNanoseconds: such a ts is already
# on the time.time_ns() clock. 1.5e15-2.0e15 us is 2017 to 2033; no trace-relative clock gets there.
EPOCH_LO_US, EPOCH_HI_US = 1.5e15, 2.0e15


@dataclass(frozen=True)
class CommArgs:
    """Per GPU activity, what Kineto wrote about the collective an NCCL kernel runs (torch >= 2.4):
    -1 where absent. Names are indices into Timeline.names."""

    collective: np.ndarray
    group: np.ndarray
    nelems: np.ndarray
    seq: np.ndarray

    @staticmethod
    def absent(n: int) -> "CommArgs":
        return CommArgs(np.full(n, -1, np.int32), np.full(n, -1, np.int32), np.full(n, -1, np.int64), np.full(n, -1, np.int64))

    def take(self, keep: np.ndarray | slice) -> CommArgs:
        """The rows of these GPU activities (indices, a mask or a slice), in that order."""
        return CommArgs(self.collective[keep], self.group[keep], self.nelems[keep], self.seq[keep])


@dataclass(frozen=True)
class LaunchArgs:
    """Per GPU activity, its kernel launch as the trace gives it (Kineto's args grid, block,
    registers per thread, shared memory and device; Nsight's kernel columns), for the SM evidence
    of held-back comm (analysis/overlap/held_sms.py): -1 where absent, and the whole row -1 where the
    grid or the block is absent or not 1 to 3 whole numbers in (0, 2**31). A grid or block of fewer
    than 3 dimensions is padded with 0s."""

    grid: np.ndarray  # (n_gpu, 3) int32
    block: np.ndarray  # (n_gpu, 3) int32
    registers: np.ndarray  # (n_gpu,) int32: registers per thread
    shared_memory: np.ndarray  # (n_gpu,) int32: bytes per CTA (static and dynamic)
    device: np.ndarray  # (n_gpu,) int32: the GPU's id (deviceProperties' `id`)

    @staticmethod
    def absent(n: int) -> "LaunchArgs":
        dims, values = np.full((n, 3), -1, np.int32), np.full(n, -1, np.int32)
        return LaunchArgs(dims, dims.copy(), values, values.copy(), values.copy())

    def take(self, keep: np.ndarray | slice) -> "LaunchArgs":
        """The rows of these GPU activities (indices, a mask or a slice), in that order."""
        return LaunchArgs(self.grid[keep], self.block[keep], self.registers[keep], self.shared_memory[keep], self.device[keep])


@dataclass(frozen=True)
class Timeline:
    source: Path
    # The rank its trace claims: distributedInfo's, else the input's position (an Nsight export's
    # processes numbered from it). Only a claim: settle_ranks decides each rank's number, once.
    claimed_rank: int
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
    gpu_args: CommArgs | None = None  # None: the trace was built without them
    extents: np.ndarray | None = None  # the source's chunks (kineto.EXTENT_FIELDS), for reading a few args back
    launch: LaunchArgs | None = None  # None: the trace was built without them

    def with_events(
        self, gpu: Intervals, gpu_keep: np.ndarray | slice, calls: Intervals, cpu: Intervals, cpu_keep: np.ndarray | slice,
        names: bool = True,
    ) -> Timeline:  # fmt: skip
        """This process's timeline with other events: gpu, calls and cpu (its own, taken at gpu_keep and
        cpu_keep (indices, masks, or slice(None): every one, the columns shared, not copied) and maybe
        cut or moved), their per-event columns taken alike; its names kept (names=False: none, where
        the events' names are not read)."""
        return Timeline(
            source=self.source, claimed_rank=self.claimed_rank, pid=self.pid, names=self.names if names else [], gpu=gpu,
            gpu_is_copy=self.gpu_is_copy[gpu_keep], calls=calls, cpu=cpu, cpu_is_annotation=self.cpu_is_annotation[cpu_keep],
            base_time_ns=self.base_time_ns, metadata=self.metadata, warnings=self.warnings,
            gpu_args=self.gpu_args.take(gpu_keep) if self.gpu_args is not None and names else None,
            extents=self.extents, launch=self.launch.take(gpu_keep) if self.launch is not None and names else None,
        )  # fmt: skip

    def shifted_gpu(self, by_us: float) -> Timeline:
        """Every GPU timestamp moved by -by_us (onto the CPU's clock): the timeline on another clock."""
        g = self.gpu
        moved = Intervals(g.start - by_us, g.end - by_us, g.name, g.lane, g.correlation)
        return self.with_events(moved, slice(None), self.calls, self.cpu, slice(None))

    def bounds(self) -> Timeline:
        """Of each kind of event, only its first start and its last end, without names or arguments: what
        settling the ranks and cutting an FFN's trace read (app/ray_executor.py sends this, not the whole)."""

        def ends(iv: Intervals) -> np.ndarray:
            return np.unique([int(iv.start.argmin()), int(iv.end.argmax())]) if len(iv) else np.zeros(0, np.int64)

        g, c = ends(self.gpu), ends(self.cpu)
        return self.with_events(self.gpu.take(g), g, self.calls.take(ends(self.calls)), self.cpu.take(c), c, names=False)

    def comm_args(self) -> CommArgs:
        return self.gpu_args if self.gpu_args is not None else CommArgs.absent(len(self.gpu))

    def launch_args(self) -> LaunchArgs:
        return self.launch if self.launch is not None else LaunchArgs.absent(len(self.gpu))

    def cpu_ranges_named(
        self, match: Callable[[str], Any], annotations_only: bool = False, hint: re.Pattern[str] | None = None
    ) -> list[tuple[float, float, str, Any]]:
        """(start, end, name, what match returned) for each CPU range (each user annotation) whose name
        match() accepts (a truthy result); each distinct name is tested once, not each range. hint:
        as names_hinted's, a pattern every accepted name holds (only the names it finds are tested)."""
        sel, hits = self.cpu_ranges_matching(match, annotations_only, hint)
        return [
            (float(self.cpu.start[i]), float(self.cpu.end[i]), self.names[self.cpu.name[i]], hits[int(self.cpu.name[i])])
            for i in sel.tolist()
        ]

    def cpu_ranges_matching(
        self, match: Callable[[str], Any], annotations_only: bool = False, hint: re.Pattern[str] | None = None
    ) -> tuple[np.ndarray, dict[int, Any]]:
        """The indices of the CPU ranges (user annotations) whose name match() accepts, in time order,
        and per accepted name id what match returned: cpu_ranges_named's selection as arrays, for a
        caller that needs no object per range (a run of 100,000 steps has that many markers)."""
        names = self.names
        hits = {i: m for i in names_to_test(names, self.cpu.name, hint).tolist() if (m := match(names[i]))}
        if not hits:
            return np.empty(0, np.int64), hits
        chosen = np.isin(self.cpu.name, np.fromiter(hits, np.int64, len(hits)))
        return np.flatnonzero(chosen & self.cpu_is_annotation if annotations_only else chosen), hits


def starts_with(prefix: str) -> re.Pattern[str]:
    """names_hinted's hint for a test that accepts only names beginning with prefix: the newline
    before a name and the prefix, a literal that re finds at C speed (`(?m)^` is tried at every
    character)."""
    return re.compile(re.escape("\n" + prefix))


def names_to_test(names: list[str], name_ids: np.ndarray, hint: re.Pattern[str] | None = None) -> np.ndarray:
    """The name ids a per-name test need look at: each name these events use once (used_names), and
    of those only the ones `hint` may be found in, where one is given (names_hinted)."""
    ids = used_names(name_ids, len(names))
    return ids if hint is None else names_hinted(names, ids, hint)


def used_names(name_ids: np.ndarray, n_names: int) -> np.ndarray:
    """The distinct name ids of these events, ascending: np.unique's, by counting (no sort)."""
    if len(name_ids) and name_ids.min() < 0:
        return np.unique(name_ids)
    return np.flatnonzero(np.bincount(name_ids, minlength=n_names))


def names_hinted(names: list[str], ids: np.ndarray, hint: re.Pattern[str]) -> np.ndarray:
    """Of the distinct name ids `ids`, those whose name `hint` may be found in: a superset, with no
    Python step per name. The names are searched as one text, each after a newline, so hint must
    find nothing that spans a newline but the one before a name (starts_with's); a name that holds
    a newline itself may come back too. A case-insensitive hint is written in lowercase: on an ASCII
    text it is looked for in the text lowercased, without the flag (the same finds, 8x faster). A
    caller passes one where its own test accepts only names the hint is found in, and tests what
    comes back: a long run's 100,000 ProfilerStep# names are then searched once in C, not tested one
    by one (the compile-range regex, 11 alternatives tried at every character, took 0.2 s)."""
    if not len(ids):
        return ids
    every = len(ids) == len(names) and ids[0] == 0 and ids[-1] == len(names) - 1  # distinct and ascending: all of them
    chosen = names if every else list(map(names.__getitem__, ids.tolist()))
    lengths = np.fromiter(map(len, chosen), np.int64, len(chosen)) + 1  # each name and the newline before it
    starts = np.concatenate(([0], np.cumsum(lengths[:-1])))
    text = "\n" + "\n".join(chosen)
    if hint.flags & re.IGNORECASE and text.isascii() and hint.pattern == hint.pattern.lower():
        text, hint = text.lower(), re.compile(hint.pattern, hint.flags & ~re.IGNORECASE)
    found = np.fromiter((m.start() for m in hint.finditer(text)), np.int64)
    return ids[np.unique(np.searchsorted(starts, found, "right") - 1)]


_GPU = (k.CAT_KERNEL, k.CAT_MEMCPY, k.CAT_MEMSET)
_CALLS = (k.CAT_RUNTIME, k.CAT_DRIVER)
_CPU = (k.CAT_CPU_OP, k.CAT_USER_ANNOTATION, k.CAT_PYTHON)


def build_timeline(raw: k.RawTrace, rank: int) -> Timeline:
    """The timeline of one trace. It takes raw's columns over (raw.events is left empty) and lets
    each go once it is gathered, so a trace's events are held about once, not twice, at the peak of
    a read (docs/performance.md)."""
    columns = dict(vars(raw.events))
    raw.events = k.EventColumns(**{name: column[:0] for name, column in columns.items()})
    # Each kind's events in time order (stable: ties keep file order), gathered once per column.
    order = np.argsort(columns["ts"], kind="stable")
    cat = columns.pop("cat")
    sorted_cat = cat[order]
    kinds = [order[np.isin(sorted_cat, cats)] for cats in (_GPU, _CALLS, _CPU)]
    del order, sorted_cat
    gpu_at, call_at, cpu_at = kinds
    host = columns.pop("pid")[np.isin(cat, _CALLS + _CPU)]
    pids, counts = np.unique(host, return_counts=True)
    pid = int(pids[counts.argmax()]) if len(pids) else None  # the process that made most host events
    gpu_is_copy, cpu_is_annotation = cat[gpu_at] != k.CAT_KERNEL, cat[cpu_at] == k.CAT_USER_ANNOTATION
    del cat, host

    def take(name: str) -> list[np.ndarray]:
        column = columns.pop(name)
        return [column[at] for at in kinds]

    start = take("ts")
    end = [s + d for s, d in zip(start, take("dur"))]
    name, correlation = take("name"), take("correlation")
    stream = columns.pop("stream")[gpu_at]
    gpu_args = CommArgs(*(columns.pop(key)[gpu_at] for key in ("collective", "group", "nelems", "seq")))
    launch = LaunchArgs(
        *(np.stack([columns.pop(f"{key}_{d}")[gpu_at] for d in "xyz"], axis=1) for key in ("grid", "block")),
        *(columns.pop(key)[gpu_at] for key in ("registers", "shared_memory", "device")),
    )
    tid = take("tid")
    # Kineto gives a GPU event's stream in args.stream and in tid; prefer the former.
    lane = [np.where(stream >= 0, stream, tid[0]), tid[1], tid[2]]
    gpu, calls, cpu = (Intervals(start[i], end[i], name[i], lane[i], correlation[i]) for i in range(3))
    base = raw.metadata.get("baseTimeNanoseconds")
    warnings = []
    if base is not None and not _valid_base_time(base):  # an int64 of nanoseconds, as Kineto writes it
        warnings.append(
            f"{raw.path}: its baseTimeNanoseconds {base!r:.40} is not a time in nanoseconds; the trace is not "
            "aligned with the event log or the other ranks"
        )
        base = None
    if raw.skipped_no_time:
        warnings.append(f"{raw.path}: {raw.skipped_no_time} events without a timestamp were ignored")
    for reason, count in raw.dropped.items():
        warnings.append(f"{raw.path}: {count} events left out: {reason}")
    return Timeline(
        source=raw.path,
        claimed_rank=rank,
        pid=pid,
        names=raw.names,
        gpu=gpu,
        gpu_is_copy=gpu_is_copy,
        calls=calls,
        cpu=cpu,
        cpu_is_annotation=cpu_is_annotation,
        base_time_ns=None if base is None else int(base),
        metadata=raw.metadata,
        warnings=warnings,
        gpu_args=gpu_args,
        extents=raw.extents,
        launch=launch,
    )


def _valid_base_time(value: object) -> bool:
    """A whole number of nanoseconds an int64 holds, also after a microsecond timestamp is added."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    return abs(value) < MAX_BASE_TIME_NS


MAX_BASE_TIME_NS = 1 << 62  # ~146 years of nanoseconds from the epoch; int64 arithmetic never overflows below
