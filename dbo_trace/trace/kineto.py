"""A streaming reader for Kineto (torch profiler) Chrome traces.

Traces reach gigabytes, and a whole-document json.load holds several times the
file in Python objects. This reader decompresses in blocks, cuts the
`traceEvents` array into chunks at element boundaries, decodes each chunk with
msgspec into small typed structs (unknown fields are skipped in C) and appends
what the analyses need to numpy columns. Memory is the columns plus one chunk.

Chunk boundaries are found by a regex for `}` `,` `{` and confirmed by the
decode itself: a chunk that starts at a true element boundary and decodes as a
JSON array of objects also ends at one (a cut inside a string or a nested
value leaves an unterminated string or unbalanced brackets, which fails), so a
failed decode just extends the chunk to the next candidate.

A large trace in Kineto's own layout can be read by several processes at once, each
inflating it and decoding its share of the chunks (_SharedChunks, read_kineto's workers).
"""

from __future__ import annotations

import operator
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from itertools import compress, repeat
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, ClassVar, Iterator, Protocol, Union, cast

import msgspec
import numpy as np

from dbo_trace.trace.errors import InputError

try:  # ISA-L inflates 2-3x as fast as zlib (docs/performance.md); zlib where isal is missing
    from isal import isal_zlib
except ImportError:  # pragma: no cover  (a dependency; an environment without it still reads)
    isal_zlib = None  # type: ignore[assignment]

# isal's stub declares its error an instance; it is the class IsalError (not a zlib.error).
INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error,) + (() if isal_zlib is None else (cast(type, isal_zlib.error),))
_READ_ERRORS: tuple[type[Exception], ...] = (OSError, EOFError, *INFLATE_ERRORS)


def _inflater() -> Any:
    """A gzip inflater (the zlib interface): ISA-L's where isal is installed, else zlib's."""
    return (zlib if isal_zlib is None else isal_zlib).decompressobj(zlib.MAX_WBITS | 16)


if TYPE_CHECKING:
    from multiprocessing.connection import Connection  # imported only where processes share a read: 20 ms

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

# Events are decoded about a megabyte at a time: their Python objects then stay in the CPU's cache
# while they become columns (16 MB at a time ran 1.7x slower end to end; docs/performance.md).
BLOCK = 1 << 20  # bytes decompressed per read, and decoded at once
PARALLEL_BLOCK = 4 << 20  # bytes per read, and per chunk, when processes share a trace
MAX_READ = 16 << 20  # the most read at once while one event is still arriving
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_ARRAY_END = re.compile(rb"\}\s*\]")


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
# later look at a few events' args (event_args.py) decodes only the chunks whose span meets the
# events', not the whole file again (the SM evidence's second pass cost a quarter of a report).
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
# A missing dur is not 0 for these: by category code (np.isin cost a sixth of a millisecond a chunk).
_TIMED = np.isin(np.arange(max(_CATEGORIES.values()) + 1), [CAT_KERNEL, CAT_MEMCPY, CAT_MEMSET, CAT_RUNTIME, CAT_DRIVER])


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
        return EventColumns(**self.filled()), list(self.names)

    def extent_table(self) -> np.ndarray:
        return np.array(self.extents, np.float64).reshape(-1, len(EXTENT_FIELDS))


GZIP_MAGIC = b"\x1f\x8b"


class _Gunzip:
    """A gzip file's bytes, inflated (by ISA-L, else zlib: the same interface) straight into blocks
    (GzipFile's buffered layers cost a third as much again as the inflating itself). Members are
    read one after another and zero padding after one is skipped, as gzip does."""

    def __init__(self, fh: BinaryIO):
        self.fh = fh
        self.inflate = _inflater()
        self.pending = b""  # compressed bytes not yet given to inflate
        self.in_member = False  # inflate has begun a member that has not ended

    def read(self, size: int) -> bytes:
        """`size` bytes, fewer only at the end: processes that share a trace take turns by block, so
        blocks must be alike in size (short ones went every second time to the same process)."""
        parts, got = [], 0
        while got < size and (out := self._inflate(size - got)):
            parts.append(out)
            got += len(out)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _inflate(self, size: int) -> bytes:
        while True:
            if not self.pending:
                self.pending = self.fh.read(max(1 << 16, size // 8))  # JSON deflates 4-20x: about one read per block
                if not self.in_member:
                    self.pending = self.pending.lstrip(b"\0")
                if not self.pending:
                    if self.in_member:
                        raise EOFError("the file ends inside a gzip member")
                    return b""
            if not self.in_member:
                self.inflate, self.in_member = _inflater(), True
            out: bytes = self.inflate.decompress(self.pending, size)
            if self.inflate.eof:
                self.pending, self.in_member = self.inflate.unused_data.lstrip(b"\0"), False
            else:
                self.pending = self.inflate.unconsumed_tail
            if out:
                return out

    def tell(self) -> int:
        return self.fh.tell()

    def close(self) -> None:
        self.fh.close()


def _read_block(fh: BinaryIO | _Gunzip, path: Path, size: int) -> bytes:
    try:
        return fh.read(size)
    except _READ_ERRORS as exc:
        what = "truncated or corrupt gzip" if isinstance(fh, _Gunzip) else "unreadable"
        raise InputError(f"{path}: {what} ({exc}); re-copy or re-export the trace") from None


def _is_gzip(fh: BinaryIO) -> bool:
    """Whether the open file starts with gzip's magic; its position is left at the start."""
    gzipped = fh.read(2) == GZIP_MAGIC
    fh.seek(0)
    return gzipped


def _open(path: Path) -> BinaryIO | _Gunzip:
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file or directory") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot open ({exc.strerror})") from None
    return _Gunzip(fh) if _is_gzip(fh) else fh


_CATEGORY = re.compile(rb'"cat"\s*:\s*"((?:[^"\\]|\\.){1,64})"')


def categories_seen(path: Path, limit: int = 64 << 20) -> dict[str, int]:
    """Event categories in the first `limit` bytes of a trace and how often each appears: what a trace
    that gave no usable events does hold (a cheap look, for the error message only)."""
    counts: dict[str, int] = {}
    try:
        fh = _open(path)
        try:
            head = fh.read(limit)
        finally:
            fh.close()
    except _READ_ERRORS + (InputError,):
        return counts
    for m in _CATEGORY.finditer(head):
        name = m.group(1).decode("utf-8", "replace")
        counts[name] = counts.get(name, 0) + 1
    return counts


MAX_EVENT_BYTES = 64 << 20  # one event larger than this is refused (docs/performance.md: memory stays bounded)


# Below about this much JSON a worker process's start-up eats what it saves. On the 200 MB marker-less
# trace two processes take `report --json` from 2.7 s to 2.3 s on a quiet 2-core machine; the worker
# is gone before the analysis, but while it reads it is in the process tree's peak: 1.08x the JSON,
# against 0.74x in one process (docs/performance.md).
PARALLEL_MIN_BYTES = 128 << 20


def read_kineto(
    path: Path, progress: Callable[[int], None] | None = None, block: int | None = None, workers: int = 1
) -> RawTrace:
    """Read one Kineto trace. progress(n) is called with the file bytes consumed so far. With
    workers > 1 a large trace is decoded by that many processes (this one and workers - 1 more);
    the result is the same. block: bytes decompressed per read (BLOCK, or PARALLEL_BLOCK with
    workers), and decoded at once."""
    try:
        if workers > 1 and os.path.getsize(path) >= PARALLEL_MIN_BYTES // (8 if _gzipped(path) else 1):
            try:
                return _read_shared(path, progress, block or PARALLEL_BLOCK, workers, piece=block or BLOCK)
            except (_ParallelFallback, OSError):
                pass  # read it again the careful way: the exact error, an odd layout, or workers that could not start
        return _read(path, progress, block or BLOCK)
    except RecursionError:  # msgspec's decoders refuse JSON nested past Python's recursion limit
        raise InputError(
            f"{path}: JSON nested over a thousand levels deep, which no trace is; not a torch profiler trace, or a corrupt one"
        ) from None


def _gzipped(path: Path) -> bool:
    with open(path, "rb") as fh:
        return _is_gzip(fh)


def _read(
    path: Path,
    progress: Callable[[int], None] | None,
    block: int,
    share: "Callable[[_EventStream], _SharedChunks] | None" = None,
    stream: "_EventStream | None" = None,
) -> RawTrace:
    """The file's blocks through its head, its traceEvents and its tail. share: the reader of a
    trace that several processes decode (_read_shared); else this process decodes every event.
    stream: one that hands its decoded events elsewhere (event_args.py), else into the columns."""
    fh = _open(path)
    columns = _Columns()
    stream = stream or _EventStream(path, columns)
    reader: _EventStream | _SharedChunks = stream if share is None else share(stream)
    buf = b""
    state = "head"  # head -> events -> tail
    head = tail = b""
    size = block
    try:
        while block_bytes := _read_block(fh, path, size):
            if progress is not None:
                progress(fh.tell())
            if state == "tail":
                tail += block_bytes
                if len(tail) > MAX_EVENT_BYTES:
                    raise InputError(
                        f"{path}: more than {MAX_EVENT_BYTES >> 20} MB after traceEvents; not a torch profiler trace"
                    )
                continue
            buf += block_bytes
            if state == "head":
                # The array layout first: a document that opens with `[{` is that layout, whatever a
                # `"traceEvents": [` after its end says (data after the array, a second trace).
                match = _ARRAY_FORMAT.match(buf) or _top_level_events(buf)
                if match is None:
                    if len(buf) > 64 << 20:
                        raise InputError(f'{path}: no "traceEvents" array in the first 64 MB; not a torch profiler trace')
                    size = max(block, min(len(buf), MAX_READ))
                    continue
                head, buf, state = buf[: match.start()], buf[match.end() :], "events"
                stream.offset, stream.array_layout = match.end(), not head.strip()
            buf, done = reader.consume(buf, final=False)
            if done is not None:
                tail, state = done, "tail"
            # An event still arriving: read up to as much again as is held, so a giant event is not
            # searched for its end once per megabyte.
            size = max(block, min(len(buf), MAX_READ))
        if state == "head":
            _raise_no_events(path, buf)
        if state == "events":
            buf, done = reader.consume(buf, final=True)
            tail = done or b""
    finally:
        fh.close()
    events, names = columns.finish()
    return RawTrace(
        path=path,
        events=events,
        names=names,
        metadata=_top_level(head, tail, path),
        skipped_no_time=columns.skipped_no_time,
        dropped=dict(columns.dropped),
        extents=columns.extent_table(),
    )


_WHITESPACE = b" \t\r\n"
# The Trace Event Format's other layout, which Kineto wrote until ~2021: the document is the array of
# events itself, with no other keys (so no metadata).
_ARRAY_FORMAT = re.compile(rb"\s*\[\s*(?=\{)")
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[\s*')
_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]]')  # strings (skipped whole) and brackets


def _top_level_events(buf: bytes) -> re.Match[bytes] | None:
    """The `"traceEvents": [` of the document itself, not one nested in another key's value."""
    for match in _EVENTS_KEY.finditer(buf):
        depth = 0
        for token in _TOKENS.finditer(buf, 0, match.start()):
            t = token.group()
            if t in (b"{", b"["):
                depth += 1
            elif t in (b"}", b"]"):
                depth -= 1
        if depth == 1:
            return match
    return None


def _cuts_from_end(buf: bytes, before: int | None = None, window: int = 1 << 12) -> Iterator[int]:
    """Element boundaries (the `}` of `},{`) that start before `before`, last first. Found window by
    window from the end, each twice the last: the last one is almost always the cut, so a block (up
    to MAX_READ while an event is still arriving) is not scanned whole (listing every boundary took
    a tenth of the reading time; listing a first window of 64 kB, not 4 kB, 2%)."""
    hi = len(buf) if before is None else before
    while hi > 0:
        lo = max(0, hi - window)
        # A boundary starting just below hi may end above it: search a little past hi.
        found = [m.start() for m in _BOUNDARY.finditer(buf, lo, min(len(buf), hi + 4096)) if m.start() < hi]
        yield from reversed(found)
        hi, window = lo, window * 2


class _Truncated(Exception):
    """The chunk was cut inside an element: not the file's fault."""


class _Malformed(Exception):
    """The JSON is broken at `at` (chunk offset). past_end: the cut ran past the array's `]` into the
    document's tail, which is the cut's fault, not the file's."""

    def __init__(self, at: int, text: str, past_end: bool):
        super().__init__(text)
        self.at, self.text, self.past_end = at, text, past_end


MAX_TAIL_BYTES = 1 << 20  # the document after traceEvents (traceName, deviceProperties, ...) is small
MAX_TAIL_CHECKS = 16  # `}]` candidates whose tail is parsed before the end is declared lost


# Between two events as Kineto writes them, and as a one-event-per-line file does. No JSON string holds
# a raw newline, so these are structure; a cut inside a nested value fails to decode and falls back.
FAST_BOUNDARIES = (b"\n  },\n  {", b"},\n{")


def _around(at: int, boundary: bytes) -> tuple[int, int]:
    """For one of FAST_BOUNDARIES found at `at`: where the event before it ends (past its `}`) and
    where the next one begins (its `{`)."""
    return at + boundary.index(b"}") + 1, at + len(boundary) - 1


def _last_fast_boundary(buf: bytes) -> tuple[int, bytes]:
    """The last of FAST_BOUNDARIES in buf, (-1, b"") if none: searched in its last 64 kB first,
    since a boundary the file does not use would otherwise be searched for through all of it."""
    for lo in (max(0, len(buf) - (1 << 16)), 0):
        cut, boundary = max((buf.rfind(b, lo), b) for b in FAST_BOUNDARIES)
        if cut >= 0 or lo == 0:
            return cut, boundary
    return -1, b""


class _ParallelFallback(Exception):
    """A chunk cut at a Kineto boundary did not decode on its own: read the file the careful way."""


def _as_array(chunk: bytes | memoryview) -> bytes:
    """The chunk's elements as one JSON array, in a single copy (`+` twice copies it twice)."""
    return b"".join((b"[", chunk, b"]"))


def _next_fast_boundary(buf: bytes, lo: int, end: int) -> tuple[int, bytes] | None:
    """The first of FAST_BOUNDARIES in buf[lo:end], None if none: searched in the next 64 kB first,
    since a boundary the file does not use would otherwise be searched for through the rest of the
    chunk for every piece (a fifth of a shared read's time, in Kineto's layout)."""
    for hi in (min(end, lo + (1 << 16)), end):
        found = [(at, b) for b in FAST_BOUNDARIES if (at := buf.find(b, lo, hi)) >= 0]
        if found:
            return min(found)
    return None


def _pieces(buf: bytes, size: int, end: int) -> Iterator[tuple[int, memoryview]]:
    """buf[:end], whole events, cut at FAST_BOUNDARIES into pieces of about `size` bytes (no copies),
    each with where it starts in buf."""
    view, start = memoryview(buf), 0
    while end - start > size:
        found = _next_fast_boundary(buf, start + size, end)
        if found is None:
            break
        close, nxt = _around(*found)
        yield start, view[start:close]
        start = nxt
    yield start, view[start:end]


def _decode_chunk(buf: bytes, piece: int = BLOCK, end: int | None = None, offset: int = 0) -> "_Columns | None":
    """Whole events' columns of buf[:end], or None where they do not decode cleanly (in a worker, or
    in the reading process). Decoded a piece at a time, so each piece's objects are still in the
    cache when they become columns. offset: where buf starts in the uncompressed file."""
    columns = _Columns()
    try:
        for start, part in _pieces(buf, piece, len(buf) if end is None else end):
            columns.add(_decode_events(_as_array(part)), (offset + start, offset + start + len(part)))
    except (msgspec.DecodeError, InputError):
        return None
    return columns


class _SharedChunks:
    """The reader of a trace that `count` processes decode together. Every process inflates the
    whole file itself and cuts the traceEvents array at FAST_BOUNDARIES the same way (same blocks,
    same byte search), so all of them see the same numbered chunks without sending bytes to each
    other; chunk i is decoded by process i % count. Inflating costs each process about a third of
    what decoding its share saves, and handing the bytes over pipes cost more (docs/performance.md).
    A buffer past MAX_READ without a boundary, or a chunk that does not decode alone, ends the shared
    read (_ParallelFallback): the file is read again sequentially, so errors and odd layouts are
    handled exactly as there. The array's last events,
    its `]` and the document's tail are read by process 0 alone."""

    def __init__(self, stream: "_EventStream", index: int, count: int, piece: int):
        self.stream, self.index, self.count, self.piece = stream, index, count, piece
        self.chunks = 0

    def consume(self, buf: bytes, final: bool) -> tuple[bytes, bytes | None]:
        if final or buf.lstrip(_WHITESPACE).startswith(b"]"):
            return self.end(buf, final)
        cut, boundary = _last_fast_boundary(buf)
        if cut < 0:
            if len(buf) > MAX_READ:
                raise _ParallelFallback()  # no Kineto layout, or a giant event: the sequential reader's case
            return buf, None  # an event longer than the block: every process waits for more alike
        close, nxt = _around(cut, boundary)
        owner = self.chunks % self.count
        self.chunks += 1
        self.chunk(owner, _decode_chunk(buf, self.piece, close, self.stream.offset) if owner == self.index else None)
        self.stream.offset += nxt
        return buf[nxt:], None

    def chunk(self, owner: int, part: "_Columns | None") -> None:
        """A chunk's columns (decoded here where owner is this process, else None)."""
        raise NotImplementedError

    def end(self, buf: bytes, final: bool) -> tuple[bytes, bytes | None]:
        raise NotImplementedError


class _SharedMain(_SharedChunks):
    """Process 0: merges the chunks in file order, its own and those the workers send."""

    def __init__(self, stream: "_EventStream", count: int, piece: int, inboxes: list[Connection]):
        super().__init__(stream, 0, count, piece)
        self.inboxes = inboxes  # per worker (index 1..count-1 at 0..count-2): the pipe its chunks' columns come on
        self.pending: list[tuple[int, _Columns | None]] = []  # (owner, columns where owner is 0), in file order

    def chunk(self, owner: int, part: "_Columns | None") -> None:
        if owner == 0 and part is None:
            raise _ParallelFallback()
        self.pending.append((owner, part))
        self._merge(wait=False)

    def end(self, buf: bytes, final: bool) -> tuple[bytes, bytes | None]:
        self._merge(wait=True)
        return self.stream.consume(buf, final)

    def _merge(self, wait: bool) -> None:
        while self.pending:
            owner, part = self.pending[0]
            if owner:
                inbox = self.inboxes[owner - 1]
                if not wait and not inbox.poll():
                    return
                try:
                    part = inbox.recv()
                except (EOFError, OSError):
                    part = None  # the worker died
                if part is None:  # the worker failed, or its chunk did not decode alone
                    raise _ParallelFallback()
            self.pending.pop(0)
            columns = self.stream.columns
            assert isinstance(columns, _Columns)  # a shared read fills the columns, no other sink
            columns.merge(part)  # type: ignore[arg-type]  # not None: checked above


class _SharedWorker(_SharedChunks):
    """Process 1..count-1: sends its chunks' columns to process 0, in order."""

    def __init__(self, stream: "_EventStream", index: int, count: int, piece: int, send: Callable[[_Columns | None], None]):
        super().__init__(stream, index, count, piece)
        self.send = send

    def chunk(self, owner: int, part: "_Columns | None") -> None:
        if owner == self.index:
            self.send(part)
            if part is None:
                raise _WorkerDone()

    def end(self, buf: bytes, final: bool) -> tuple[bytes, bytes | None]:
        raise _WorkerDone()


class _WorkerDone(Exception):
    """A worker has sent its last chunk (or a failure)."""


def _decode_share(path: Path, index: int, count: int, block: int, piece: int, conn: Connection) -> None:
    """A worker process: read the file as process 0 does, decode every count-th chunk, send each."""
    from dbo_trace.trace.workers import prepare_worker

    prepare_worker()
    try:
        _read(path, None, block, lambda stream: _SharedWorker(stream, index, count, piece, conn.send))
    except _WorkerDone:
        pass
    except Exception:  # anything at all: process 0 reads the file again sequentially
        conn.send(None)
    finally:
        conn.close()


def _read_shared(path: Path, progress: Callable[[int], None] | None, block: int, count: int, piece: int) -> RawTrace:
    """Read one trace with `count` processes: this one and count - 1 spawned workers (_SharedChunks).
    Raises _ParallelFallback or OSError where the sequential read should do it instead."""
    from multiprocessing import Pipe

    from dbo_trace.trace.workers import sigterm_interrupts, spawn

    workers, inboxes = [], []
    try:
        with sigterm_interrupts():  # SIGTERM, like Ctrl-C, reaches the finally below: the shares' workers are stopped
            for index in range(1, count):
                receive, send = Pipe(duplex=False)
                _widen(receive)
                workers.append(spawn(_decode_share, (path, index, count, block, piece, send)))
                send.close()
                inboxes.append(receive)
            # Results are taken off the pipes by this thread when it merges, not by a receiving thread:
            # each partial read would wait for the GIL while this thread decodes (5 ms a time).
            return _read(path, progress, block, lambda stream: _SharedMain(stream, count, piece, inboxes))
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.terminate()
            worker.join()
        for inbox in inboxes:
            inbox.close()


_F_SETPIPE_SZ = 1031  # Linux's fcntl


def _widen(conn: Connection) -> None:
    """A pipe that holds a chunk's columns (about 1 MB), so a worker does not wait for this process
    to reach that chunk before it goes on; Linux only, best effort."""
    try:
        import fcntl

        fcntl.fcntl(conn.fileno(), _F_SETPIPE_SZ, 1 << 20)
    except (ImportError, OSError):
        pass


class _Sink(Protocol):
    """Where an event stream puts each decoded chunk of events."""

    def add(self, events: list[Any], at: tuple[int, int] | None = None) -> None: ...


class _EventStream:
    """Cuts the traceEvents array into chunks of whole events and decodes them.

    Mid-stream a chunk ends at a `}` `,` `{` candidate. A cut inside a string or a nested value
    leaves the chunk truncated: the cut moves to the previous candidate once, then waits for more
    data. Broken JSON at byte q rules out every cut after q at once. So a bad event costs a decode
    or two, never a walk back through the buffer. At the end of the file the array's `]` is the
    last `}]` after which the rest parses as the document's tail. A type error is the file's fault
    and is reported with its byte offset; so is broken JSON that is not the array's end.
    """

    def __init__(self, path: Path, columns: "_Columns | _Sink", decode: Callable[[Any], list[Any]] | None = None):
        self.path, self.columns = path, columns
        self.decode_events = decode or _decode_events  # its own event type (event_args.py keeps args raw)
        self.offset = 0  # uncompressed bytes before the buffer's first byte
        self.array_layout = False  # the document is the array of events itself (nothing may follow it)

    def consume(self, buf: bytes, final: bool) -> tuple[bytes, bytes | None]:
        """Decode whole events from the front of buf. Returns (rest, the bytes after the array or None)."""
        stripped = buf.lstrip(_WHITESPACE)
        self.offset += len(buf) - len(stripped)
        buf = stripped
        if buf.startswith(b"]"):
            return b"", buf[1:]
        if final:
            return self._to_the_end(buf)
        rest, broken = self._whole_events(buf)
        if rest is not buf:
            return rest, None
        if broken is not None:
            raise self._error(broken)
        if len(buf) > MAX_EVENT_BYTES + MAX_READ:
            raise InputError(
                f"{self.path}: an event at byte {self.offset} is larger than {MAX_EVENT_BYTES >> 20} MB "
                "(a corrupt or hostile trace); not read"
            )
        return buf, None

    def _error(self, broken: _Malformed) -> InputError:
        return InputError(
            f"{self.path}: invalid JSON in traceEvents at byte {self.offset + broken.at} ({broken.text}); "
            "the file may be truncated or corrupt: re-export it"
        )

    def _to_the_end(self, buf: bytes) -> tuple[bytes, bytes | None]:
        """The rest of the file: whole events, the array's `]`, the document's tail."""
        checks = 0
        for m in reversed(list(_ARRAY_END.finditer(buf, max(0, len(buf) - MAX_TAIL_BYTES)))):
            tail = buf[m.end() :].strip(_WHITESPACE)
            if tail not in (b"", b"}") and not (tail.startswith(b",") and tail.endswith(b"}")):
                continue  # a `}]` inside a string: what follows is no tail
            checks += 1
            if checks > MAX_TAIL_CHECKS:
                break
            try:
                _decode_any(b"{" + tail[1:].strip(_WHITESPACE)) if tail.startswith(b",") else None
            except msgspec.DecodeError:
                continue
            try:
                events = self._decode(buf, m.start() + 1)
            except _Truncated:
                continue
            except _Malformed as exc:
                if exc.past_end:
                    continue
                raise self._error(exc) from None
            self.columns.add(events, (self.offset, self.offset + m.start() + 1))
            return b"", buf[m.end() :]
        raise self._no_end(buf)

    def _no_end(self, buf: bytes) -> InputError:
        """What is wrong where no `}]` closes the events: a comma after the last event, data after
        the array (the array layout), else a file cut inside the events. On the error path only: at
        most two more decodes, each of events that are checked to be whole."""
        comma = _last(_TRAILING_COMMA, buf)
        if comma is not None and self._whole(buf, comma.start() + 1):
            return InputError(
                f"{self.path}: a comma after the last trace event, before the closing `]` (byte "
                f"{self.offset + comma.start(1)}), which JSON does not allow; delete it or re-export the trace"
            )
        end = _last(_ARRAY_END, buf)
        if self.array_layout and end is not None and self._whole(buf, end.start() + 1):
            after = self.offset + len(buf) - len(buf[end.end() :].lstrip(_WHITESPACE))
            return InputError(
                f"{self.path}: data after the array of trace events (from byte {after}); "
                "the file may be two traces joined, or corrupt: keep one trace per file or re-export it"
            )
        return InputError(f"{self.path}: invalid JSON in traceEvents: the file ends inside it (truncated?); re-export it")

    def _whole(self, buf: bytes, end: int) -> bool:
        """Whether buf[:end] decodes as whole events (a type error in them is raised as such)."""
        try:
            self._decode(buf, end)
        except (_Truncated, _Malformed):
            return False
        return True

    def _whole_events(self, buf: bytes) -> tuple[bytes, _Malformed | None]:
        """Decode up to the last cut that holds whole elements; (rest, a genuine malformation that stopped it)."""
        cuts = _cuts_from_end(buf)
        broken = None
        truncated = 0
        while (pos := next(cuts, None)) is not None:
            try:
                events = self._decode(buf, pos + 1)
            except _Truncated:
                truncated += 1
                if truncated >= 2:
                    break  # the last element is still arriving: wait for more data
                continue
            except _Malformed as exc:
                broken = None if exc.past_end else exc
                cuts = _cuts_from_end(buf, exc.at)  # every cut past the break fails the same way
                continue
            self.columns.add(events, (self.offset, self.offset + pos + 1))
            rest = buf[pos + 1 :].lstrip(_WHITESPACE)
            # Past the comma, whitespace too: else the next block's consume() copies it all to strip it.
            rest = rest[1:].lstrip(_WHITESPACE) if rest.startswith(b",") else rest
            self.offset += len(buf) - len(rest)
            return rest, None
        return buf, broken

    def _decode(self, buf: bytes, end: int) -> list[_Event]:
        """Decode buf[:end], copied once (into the array's brackets), not twice."""
        try:
            return self.decode_events(_as_array(memoryview(buf)[:end]))
        except msgspec.ValidationError as exc:
            chunk = buf[:end]
            where = re.search(r"\$\[(\d+)\]\.?(\S*?)`?$", str(exc))
            index = int(where.group(1)) if where else 0
            field_name = where.group(2) if where and where.group(2) else "an event"
            problem = str(exc).split(" - at ")[0]
            raise InputError(
                f"{self.path}: the event at byte {self.offset + _element_offset(chunk, index)} has a `{field_name}` of the "
                f"wrong type ({problem}); not a torch profiler trace, or a corrupt one"
            ) from None
        except msgspec.DecodeError as exc:
            chunk = buf[:end]
            text = str(exc)
            at = re.search(r"\(byte (\d+)\)", text)
            if "truncated" in text or at is None or int(at.group(1)) > len(chunk):
                raise _Truncated() from None
            q = max(0, int(at.group(1)) - 1)  # in the chunk, without the leading "["
            # msgspec points just past the offending byte: a cut past the array's end fails on the `,`
            # after its `]` (trailing characters), so what precedes the error, less that `,`, ends in `]`.
            before = chunk[:q].rstrip(_WHITESPACE)
            past_end = (before[:-1].rstrip(_WHITESPACE) if before.endswith(b",") else before).endswith(b"]")
            raise _Malformed(q, text, past_end) from None


_decode_raw = msgspec.json.Decoder(list[msgspec.Raw]).decode
_TRAILING_COMMA = re.compile(rb"\}\s*(,)\s*\]")


def _last(pattern: re.Pattern[bytes], buf: bytes) -> re.Match[bytes] | None:
    """The last match of pattern in buf's last MAX_TAIL_BYTES."""
    matches = list(pattern.finditer(buf, max(0, len(buf) - MAX_TAIL_BYTES)))
    return matches[-1] if matches else None


def _element_offset(chunk: bytes, index: int) -> int:
    """Byte offset of the index-th element of a chunk of whole, well-formed elements."""
    try:
        parts = _decode_raw(_as_array(chunk))
        target = bytes(parts[index])
    except Exception:
        return 0
    pos = chunk.find(target)
    return max(pos, 0)


def _raise_no_events(path: Path, buf: bytes) -> None:
    if not buf.strip():
        raise InputError(f"{path}: the file is empty; re-export the trace")
    if buf[257:262] == b"ustar":  # a tar header's magic
        raise InputError(
            f"{path}: a tar archive, not a trace (nor a review archive `dbo-trace archive` wrote); unpack it and "
            "give its traces or bundle folder"
        )
    try:
        doc = _decode_any(buf)
    except msgspec.DecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc}); is it a torch profiler trace?") from None
    if isinstance(doc, dict) and "traceEvents" in doc:
        raise InputError(f'{path}: "traceEvents" is not a list; not a torch profiler trace')
    if doc == []:  # the array layout with nothing in it
        raise InputError(f"{path}: the trace holds no events (an empty JSON array); profile at least one step and re-export it")
    raise InputError(f'{path}: JSON without a "traceEvents" list; not a torch profiler (Chrome) trace')


def _top_level(head: bytes, tail: bytes, path: Path) -> dict[str, Any]:
    """The document's other top-level keys, from the bytes before and after traceEvents."""
    head = head.strip()
    tail = tail.strip()
    if not head:  # the JSON Array format: the events were the whole document
        if tail:
            raise InputError(f"{path}: unexpected data after the array of trace events; the file may be corrupt")
        return {}
    pieces = []
    if head.startswith(b"{"):
        inner = head[1:].strip().rstrip(b",").strip()
        if inner:
            pieces.append(inner)
    else:
        raise InputError(f"{path}: the trace is not a JSON object; not a torch profiler trace")
    if tail:
        if not tail.endswith(b"}"):
            raise InputError(f"{path}: the trace ends early (no closing brace); the file may be truncated: re-export it")
        inner = tail[:-1].strip().lstrip(b",").strip()
        if inner:
            pieces.append(inner)
    else:
        raise InputError(f"{path}: the trace ends inside traceEvents; the file is truncated: re-export it")
    try:
        meta = _decode_any(b"{" + b",".join(pieces) + b"}")
    except msgspec.DecodeError as exc:
        raise InputError(f"{path}: invalid JSON outside traceEvents ({exc})") from None
    return meta if isinstance(meta, dict) else {}
