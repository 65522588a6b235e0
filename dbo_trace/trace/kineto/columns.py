"""A Kineto trace's complete events as columns: the categories kept, the events decoded by phase
(only `X` events' fields), their ids made integers and the growable columns they fill."""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field
from itertools import chain, compress, repeat
from pathlib import Path
from typing import Any, Callable, ClassVar, Union

import msgspec
import numpy as np


# Event categories as small integers (the `cat` column): the ones the timeline uses. Others are not
# kept (their events cost a tenth of a vLLM trace's reading): gpu_user_annotation, the GPU-side
# copy of each user annotation; flows (ac2g); overhead; Trace; ...
CAT_KERNEL, CAT_MEMCPY, CAT_MEMSET = 0, 1, 2
CAT_RUNTIME, CAT_DRIVER = 3, 4
CAT_CPU_OP, CAT_USER_ANNOTATION, CAT_PYTHON = 5, 6, 8
_CATEGORIES = {
    "kernel": CAT_KERNEL,
    "gpu_memcpy": CAT_MEMCPY,
    "gpu_memset": CAT_MEMSET,
    "cuda_runtime": CAT_RUNTIME,
    "cuda_driver": CAT_DRIVER,
    "cpu_op": CAT_CPU_OP,
    "user_annotation": CAT_USER_ANNOTATION,
    "python_function": CAT_PYTHON,
    # Kineto before ~2022 (torch 1.8-1.10) capitalised its categories.
    "Kernel": CAT_KERNEL,
    "Memcpy": CAT_MEMCPY,
    "Memset": CAT_MEMSET,
    "Runtime": CAT_RUNTIME,
    "Driver": CAT_DRIVER,
    "Operator": CAT_CPU_OP,
    "User annotations": CAT_USER_ANNOTATION,
    "user_annotations": CAT_USER_ANNOTATION,
}


class _Args(msgspec.Struct, gc=False):
    # -1 for "absent" keeps the column conversion free of None checks. Only what the analyses use:
    # msgspec skips every other key in C.
    correlation: int = -1
    stream: int | str = -1  # ROCm traces write it as a string ("0x0" or "7")
    # What Kineto (torch >= 2.4) writes on an NCCL kernel, to match collectives across ranks. Typed
    # Any: a value of another type than expected must not fail the chunk's decode. Absent (None) in
    # almost every event, so a chunk without a collective costs one pass that finds none.
    collective: Any = msgspec.field(default=None, name="Collective name")
    group: Any = msgspec.field(default=None, name="Process Group Name")
    nelems: Any = msgspec.field(default=None, name="In msg nelems")
    seq: Any = msgspec.field(default=None, name="Seq")
    # A kernel's launch (Kineto writes it on every kernel), for the SM evidence of held-back comm
    # (analysis/overlap/held_sms.py): kept here so that the report reads the file once. Any, as above.
    grid: Any = None
    block: Any = None
    registers: Any = msgspec.field(default=None, name="registers per thread")
    shared_memory: Any = msgspec.field(default=None, name="shared memory")
    device: Any = None


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float | None = None
    dur: float | None = None  # absent: refused for GPU activity and calls, 0 for instants of CPU ranges
    args: _Args | None = None


class _Complete(msgspec.Struct, tag="X", tag_field="ph", gc=False):
    """A complete event, decoded by its phase: the only phase the columns take."""

    ph: ClassVar[str] = "X"
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float | None = None
    dur: float | None = None
    args: _Args | None = None


def _other_phase(tag: str) -> type:
    """An event of another phase, nothing of it decoded (flows and metadata are half of a vLLM trace's
    events; their strings were a quarter of its decoding time)."""
    return msgspec.defstruct(f"_Phase{ord(tag)}", [], tag=tag, tag_field="ph", gc=False, namespace={"ph": tag, "cat": ""})


# Every phase of the Trace Event Format. Their fields are not decoded, so not type-checked either:
# nothing reads them (an `M` event's name of the wrong type does not refuse the trace).
_PHASES = "B E i I C b n e s t f P N O D M V v R c ( )".split()
OTHER_PHASES = tuple(map(_other_phase, _PHASES))


def phase_decoder(complete: type, general: type) -> Callable[[bytes], list[Any]]:
    """A decoder of a JSON array of events, by phase: `complete` for each `X` event, OTHER_PHASES' for
    the rest. A chunk with a phase the format lacks (or an event with none) fails it and is decoded
    again as a list of `general`, which also words every error as before. The reader and
    event_args.py decode with one each, so the two reads accept the same files."""
    by_phase = msgspec.json.Decoder(list[Union[(complete, *OTHER_PHASES)]]).decode  # type: ignore[valid-type]
    any_phase = msgspec.json.Decoder(list[general]).decode  # type: ignore[valid-type]

    def decode(data: bytes) -> list[Any]:
        try:
            events: list[Any] = by_phase(data)
        except msgspec.DecodeError:
            events = any_phase(data)
        return events

    return decode


_decode_events = phase_decoder(_Complete, _Event)


_TS, _DUR, _CAT, _NAME, _PID, _TID, _ARGS = map(operator.attrgetter, ("ts", "dur", "cat", "name", "pid", "tid", "args"))
_CORRELATION, _STREAM, _COLLECTIVE, _GROUP, _NELEMS, _SEQ = map(
    operator.attrgetter, ("correlation", "stream", "collective", "group", "nelems", "seq")
)
_GRID, _BLOCK, _REGISTERS, _SHARED_MEMORY, _DEVICE = map(
    operator.attrgetter, ("grid", "block", "registers", "shared_memory", "device")
)
_NO_ARGS = _Args()
_decode_any = msgspec.json.Decoder().decode


@dataclass
class EventColumns:
    """Every complete ('X') event of the categories above, as parallel arrays."""

    cat: np.ndarray
    name: np.ndarray  # index into RawTrace.names
    pid: np.ndarray
    tid: np.ndarray
    ts: np.ndarray  # microseconds, trace clock
    dur: np.ndarray
    correlation: np.ndarray  # -1 where absent
    stream: np.ndarray
    collective: np.ndarray  # args "Collective name": index into RawTrace.names, -1 where absent
    group: np.ndarray  # args "Process Group Name": index into RawTrace.names, -1 where absent
    nelems: np.ndarray  # args "In msg nelems", -1 where absent
    seq: np.ndarray  # args "Seq" (a collective's sequence number on its group), -1 where absent
    # A kernel's launch (LAUNCH_COLUMNS; timeline.LaunchArgs): args grid and block, one column per
    # dimension (0 past the dimensions given), "registers per thread", "shared memory" and device;
    # -1 where absent, and the row -1 where the grid or the block is not 1 to 3 whole numbers in (0, 2**31)
    grid_x: np.ndarray
    grid_y: np.ndarray
    grid_z: np.ndarray
    block_x: np.ndarray
    block_y: np.ndarray
    block_z: np.ndarray
    registers: np.ndarray
    shared_memory: np.ndarray
    device: np.ndarray


@dataclass
class RawTrace:
    path: Path
    events: EventColumns
    names: list[str]
    metadata: dict[str, Any] = field(default_factory=dict)  # the top-level keys other than traceEvents
    skipped_no_time: int = 0  # 'X' events without ts: ignored, reported as a warning
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> events left out (warned)
    extents: np.ndarray | None = None  # EXTENT_FIELDS per decoded chunk; None where the reader kept none


# Where each decoded chunk of events lies in the uncompressed file and the time its kept events
# span, a row per chunk: (first byte, byte after its last event, earliest ts, latest ts + dur). A
# later look at a few events' args (event_args.py, the Perfetto export's) decodes only the chunks
# whose span meets the events', not the whole file again.
EXTENT_FIELDS = ("start", "end", "ts_lo", "ts_hi")


def _as_int(value: int | str) -> int:
    """An id that may come as a string: "0x1f" (ROCm streams), "stream 7" (old Kineto), "24572"."""
    if isinstance(value, int):
        return value
    hexa = re.search(r"0[xX][0-9a-fA-F]+", value)
    if hexa:
        return int(hexa.group(), 16)
    digits = re.search(r"-?\d+", value)
    return int(digits.group()) if digits else -1


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _ints(items: list[Any], field: Callable[[Any], Any]) -> np.ndarray:
    """An id column, field of each item: ints almost always; Kineto's few string ids ("Spans", "",
    "0x1f") become their number or -1, and so does an integer beyond 64 bits (no real id is)."""
    try:
        return np.fromiter(map(field, items), np.int64, len(items))
    except (TypeError, ValueError, OverflowError):
        out = [v if type(v) is int else _as_int(v) for v in map(field, items)]
        return np.array([v if _INT64[0] <= v <= _INT64[1] else -1 for v in out], np.int64)


def _interned(items: list[Any], field: Callable[[Any], Any], intern: dict[str, int]) -> np.ndarray:
    """A string field of each item as its index in the name table, -1 where absent (almost all
    events: only NCCL kernels and their CPU ops carry these)."""
    values = list(map(field, items))
    if values.count(None) == len(values):
        return np.full(len(values), -1, np.int32)
    for v in dict.fromkeys(values):
        if isinstance(v, str):
            intern.setdefault(v, len(intern))
    return np.array([intern[v] if isinstance(v, str) else -1 for v in values], np.int32)


def _counts(items: list[Any], field: Callable[[Any], Any]) -> np.ndarray:
    """A whole-number field of each item, -1 where absent or of another kind."""
    values = list(map(field, items))
    if values.count(None) == len(values):
        return np.full(len(values), -1, np.int64)
    return np.array([v if type(v) is int and 0 <= v <= _INT64[1] else -1 for v in values], np.int64)


MAX_ABS_TS_US = 1e17  # ~3,000 years of microseconds: beyond it a timestamp is corrupt
MAX_DUR_US = 1e11  # ~28 hours for one event
# A name is read up to this many characters, by every reader (nsys.py too): no tool writes longer ones (a C++
# template kernel's demangled name is a few kB), and a hostile trace's megabyte names would cost every
# renderer's pass over a name's characters minutes (a fuzzing pass: 20 names of 10 MB, 98 s).
MAX_NAME_CHARS = 1 << 16
# A missing dur is not 0 for these: by category code (np.isin cost a sixth of a millisecond a chunk).
_TIMED = np.isin(np.arange(max(_CATEGORIES.values()) + 1), [CAT_KERNEL, CAT_MEMCPY, CAT_MEMSET, CAT_RUNTIME, CAT_DRIVER])


LAUNCH_COLUMNS = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers", "shared_memory", "device")
_INT32_END = 1 << 31


def _dims(values: list[Any]) -> np.ndarray:
    """Each launch's grid or block as (k, 3) int32: 1 to 3 whole numbers in (0, 2**31), padded with
    0s; a row of -1 where it is anything else. Kineto's lists of three ints are taken in C."""
    if set(map(type, values)) == {list} and set(map(len, values)) == {3}:
        flat = list(chain.from_iterable(values))
        if set(map(type, flat)) == {int}:  # bools are not ints here
            try:
                dims = np.array(flat, np.int64).reshape(-1, 3)
            except OverflowError:
                pass
            else:
                dims[((dims <= 0) | (dims >= _INT32_END)).any(axis=1)] = -1
                return dims.astype(np.int32)
    rows = [
        list(v) + [0] * (3 - len(v))
        if type(v) is list and 0 < len(v) <= 3 and all(type(x) is int and 0 < x < _INT32_END for x in v)
        else [-1, -1, -1]
        for v in values
    ]
    return np.array(rows, np.int32).reshape(-1, 3)


def _int32s(values: list[Any]) -> np.ndarray:
    """A whole-number field of each launch, in [0, 2**31); -1 where absent or anything else."""
    if set(map(type, values)) == {int}:
        try:
            out = np.array(values, np.int64)
        except OverflowError:
            pass
        else:
            out[(out < 0) | (out >= _INT32_END)] = -1
            return out.astype(np.int32)
    return np.array([v if type(v) is int and 0 <= v < _INT32_END else -1 for v in values], np.int32)


def _launches(args_s: list[_Args]) -> dict[str, np.ndarray]:
    """LAUNCH_COLUMNS of a chunk's events: filled for the kernels whose grid and block are valid."""
    n = len(args_s)
    out = {key: np.full(n, -1, np.int32) for key in LAUNCH_COLUMNS}
    at = np.flatnonzero(np.fromiter(map(operator.is_not, map(_GRID, args_s), repeat(None)), bool, n))
    if not len(at):
        return out
    launched = list(map(args_s.__getitem__, at.tolist()))
    grid, block = _dims(list(map(_GRID, launched))), _dims(list(map(_BLOCK, launched)))
    valid = (grid[:, 0] > 0) & (block[:, 0] > 0)
    rows = at[valid]
    for d, axis in enumerate("xyz"):
        out[f"grid_{axis}"][rows] = grid[valid, d]
        out[f"block_{axis}"][rows] = block[valid, d]
    for key, field_of in (("registers", _REGISTERS), ("shared_memory", _SHARED_MEMORY), ("device", _DEVICE)):
        out[key][rows] = _int32s(list(map(field_of, launched)))[valid]
    return out


_DTYPES = {
    "cat": np.int8,
    "name": np.int32,
    "pid": np.int64,
    "tid": np.int64,
    "ts": np.float64,
    "dur": np.float64,
    "correlation": np.int64,
    "stream": np.int64,
    "collective": np.int32,
    "group": np.int32,
    "nelems": np.int64,
    "seq": np.int64,
    **dict.fromkeys(LAUNCH_COLUMNS, np.int32),
}


class _Columns:
    """Growable columns: one array per column, grown in place (realloc) to twice its size when
    full. Growing in place, not keeping a part per chunk and concatenating at the end, holds the
    events once instead of twice at the end of a read; the capacity never written is never
    resident."""

    def __init__(self) -> None:
        self.arrays = {key: np.empty(0, dtype) for key, dtype in _DTYPES.items()}
        self.size = 0
        self.names: dict[str, int] = {}
        self.skipped_no_time = 0
        self.dropped: dict[str, int] = {}
        self.extents: list[tuple[float, float, float, float]] = []

    def add(self, events: list[_Event], at: tuple[int, int] | None = None) -> None:
        """The chunk's events; at: its bytes' (start, end) in the uncompressed file, kept as its extent."""
        # Fields are pulled with map(attrgetter) straight into arrays (np.fromiter) and looked up with
        # map(dict.__getitem__), all in C, and whole-column checks replace per-event tests: what
        # remains per event in Python is the one filter below.
        if events and isinstance(events[0], _Event):  # a chunk decoded the general way (phase_decoder)
            complete = [e for e in events if e.ph == "X"]
        else:  # the phase decoded as the type: a test in C, not an attribute per event
            complete = list(compress(events, map(isinstance, events, repeat(_Complete))))
        cat = np.fromiter(map(_CATEGORIES.get, map(_CAT, complete), repeat(-1)), np.int8, len(complete))
        known = cat >= 0
        keep = complete if known.all() else list(compress(complete, known.tolist()))
        cat = cat[known]
        # A missing ts or dur (None) reads as NaN, which JSON cannot write: NaN is "absent".
        ts = np.fromiter(map(_TS, keep), np.float64, len(keep))
        absent = np.isnan(ts)
        if absent.any():
            timed = [e for e, a in zip(keep, absent.tolist()) if not a]
            ts, cat = ts[~absent], cat[~absent]
        else:
            timed = keep
        self.skipped_no_time += len(keep) - len(timed)
        if not timed:
            return
        dur = np.fromiter(map(_DUR, timed), np.float64, len(timed))
        no_dur = np.isnan(dur)
        dur[no_dur] = 0.0
        # Values that would flip a verdict if computed: left out, counted, and said (load.py warns).
        bad = {
            "GPU activity or CUDA call without a duration": no_dur & _TIMED[cat],
            "negative duration": dur < 0,
            "timestamp or duration out of range (corrupt)": ~np.isfinite(ts)
            | (np.abs(ts) > MAX_ABS_TS_US)
            | ~np.isfinite(dur)
            | (dur > MAX_DUR_US),
        }
        ok = np.ones(len(timed), bool)
        for reason, mask in bad.items():
            mask &= ok
            if mask.any():
                self.dropped[reason] = self.dropped.get(reason, 0) + int(mask.sum())
                ok &= ~mask
        if not ok.all():
            timed = [timed[i] for i in np.flatnonzero(ok).tolist()]
            cat, ts, dur = cat[ok], ts[ok], dur[ok]
            if not timed:
                return
        intern = self.names
        name_s = list(map(_NAME, timed))
        for name in dict.fromkeys(name_s):  # the chunk's distinct names, in order of first appearance
            intern.setdefault(name, len(intern))
        args_s = list(map(_ARGS, timed))
        if None in args_s:
            args_s = [a or _NO_ARGS for a in args_s]
        n = len(timed)
        if at is not None:
            self.extents.append((at[0], at[1], float(ts.min()), float((ts + dur).max())))
        comm = any(map(_COLLECTIVE, args_s))  # in C, stops at the first; Kineto writes Seq, group and size beside it
        launches = _launches(args_s) if any(map(_GRID, args_s)) else {key: np.full(n, -1, np.int32) for key in LAUNCH_COLUMNS}
        self._append(
            {
                "cat": cat,
                "name": np.fromiter(map(intern.__getitem__, name_s), np.int32, len(name_s)),
                "pid": _ints(timed, _PID),
                "tid": _ints(timed, _TID),
                "ts": ts,
                "dur": dur,
                "correlation": _ints(args_s, _CORRELATION),
                "stream": _ints(args_s, _STREAM),
                "collective": _interned(args_s, _COLLECTIVE, intern) if comm else np.full(n, -1, np.int32),
                "group": _interned(args_s, _GROUP, intern) if comm else np.full(n, -1, np.int32),
                "nelems": _counts(args_s, _NELEMS) if comm else np.full(n, -1, np.int64),
                "seq": _counts(args_s, _SEQ) if comm else np.full(n, -1, np.int64),
                **launches,
            }
        )

    def _append(self, values: dict[str, np.ndarray]) -> None:
        end = self.size + len(values["ts"])
        if end > len(self.arrays["ts"]):
            capacity = max(end, 2 * len(self.arrays["ts"]), 1 << 12)
            for array in self.arrays.values():
                array.resize(capacity, refcheck=False)  # no views of it exist before finish()
        for key, array in self.arrays.items():
            array[self.size : end] = values[key]
        self.size = end

    def __getstate__(self) -> dict[str, Any]:
        """Sent back from a worker: the columns' filled part only."""
        return dict(self.__dict__, arrays=self.filled())

    def filled(self) -> dict[str, np.ndarray]:
        return {key: array[: self.size] for key, array in self.arrays.items()}

    def merge(self, other: "_Columns") -> None:
        """Append another chunk's columns (decoded in a worker), re-interning its names in their order
        of first appearance, so the name table is the one a sequential read builds."""
        lookup = np.array([self.names.setdefault(n, len(self.names)) for n in other.names], np.int32)
        values = other.filled()
        if len(values["name"]):
            values["name"] = lookup[values["name"]]
            for key in ("collective", "group"):
                named = values[key] >= 0
                if named.any():
                    values[key] = np.where(named, lookup[np.clip(values[key], 0, None)], -1).astype(np.int32)
        self._append(values)
        self.skipped_no_time += other.skipped_no_time
        self.extents += other.extents
        for reason, count in other.dropped.items():
            self.dropped[reason] = self.dropped.get(reason, 0) + count

    def finish(self) -> tuple[EventColumns, list[str]]:
        """The columns and the name table, each name cut to MAX_NAME_CHARS (above)."""
        return EventColumns(**self.filled()), [n if len(n) <= MAX_NAME_CHARS else n[:MAX_NAME_CHARS] for n in self.names]

    def extent_table(self) -> np.ndarray:
        return np.array(self.extents, np.float64).reshape(-1, len(EXTENT_FIELDS))
