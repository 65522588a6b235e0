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
"""

from __future__ import annotations

import gzip
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

import msgspec
import numpy as np

from dbo_trace.trace.errors import InputError

# Event categories as small integers (the `cat` column).
CAT_KERNEL, CAT_MEMCPY, CAT_MEMSET = 0, 1, 2
CAT_RUNTIME, CAT_DRIVER = 3, 4
CAT_CPU_OP, CAT_USER_ANNOTATION, CAT_GPU_ANNOTATION, CAT_PYTHON = 5, 6, 7, 8
_CATEGORIES = {
    "kernel": CAT_KERNEL,
    "gpu_memcpy": CAT_MEMCPY,
    "gpu_memset": CAT_MEMSET,
    "cuda_runtime": CAT_RUNTIME,
    "cuda_driver": CAT_DRIVER,
    "cpu_op": CAT_CPU_OP,
    "user_annotation": CAT_USER_ANNOTATION,
    "gpu_user_annotation": CAT_GPU_ANNOTATION,
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
    "gpu_user_annotations": CAT_GPU_ANNOTATION,
}

BLOCK = 16 << 20  # bytes decompressed per read
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_ARRAY_END = re.compile(rb"\}\s*\]")


class _Args(msgspec.Struct):
    # -1 for "absent" keeps the column conversion free of None checks.
    correlation: int = -1
    stream: int | str = -1  # ROCm traces write it as a string ("0x0" or "7")
    device: int | str = -1
    external_id: int = msgspec.field(default=-1, name="External id")
    name: str | None = None  # metadata events: the thread or process name


class _Event(msgspec.Struct):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float | None = None
    dur: float = 0.0
    args: _Args | None = None


_decode_events = msgspec.json.Decoder(list[_Event]).decode
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
    external_id: np.ndarray
    stream: np.ndarray
    device: np.ndarray


@dataclass
class RawTrace:
    path: Path
    events: EventColumns
    names: list[str]
    thread_names: dict[tuple[int, int], str] = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)  # the top-level keys other than traceEvents
    skipped_no_time: int = 0  # 'X' events without ts: ignored, reported as a warning


def _as_int(value: int | str) -> int:
    """An id that may come as a string: "0x1f" (ROCm streams), "stream 7" (old Kineto), "24572"."""
    if isinstance(value, int):
        return value
    hexa = re.search(r"0[xX][0-9a-fA-F]+", value)
    if hexa:
        return int(hexa.group(), 16)
    digits = re.search(r"-?\d+", value)
    return int(digits.group()) if digits else -1


def _ints(values: list) -> np.ndarray:
    """pid/tid columns: ints almost always; Kineto's few string ids ("Spans", "") become their digits or -1."""
    try:
        return np.array(values, np.int64)
    except (TypeError, ValueError):
        return np.array([v if type(v) is int else _as_int(v) for v in values], np.int64)


class _Columns:
    """Growable columns: a list of numpy arrays per chunk, concatenated once at the end."""

    def __init__(self) -> None:
        self.parts: dict[str, list[np.ndarray]] = {k: [] for k in EventColumns.__dataclass_fields__}
        self.names: dict[str, int] = {}
        self.thread_names: dict[tuple[int, int], str] = {}
        self.skipped_no_time = 0

    def add(self, events: list[_Event]) -> None:
        cats = _CATEGORIES
        keep = [e for e in events if e.ph == "X" and e.cat in cats]
        for e in events:
            if e.ph == "M" and e.name == "thread_name" and e.args is not None and e.args.name:
                self.thread_names[(_as_int(e.pid), _as_int(e.tid))] = e.args.name
        timed = [e for e in keep if e.ts is not None]
        self.skipped_no_time += len(keep) - len(timed)
        if not timed:
            return
        intern = self.names
        no = _Args()
        args = [e.args or no for e in timed]
        p = self.parts
        p["cat"].append(np.array([cats[e.cat] for e in timed], np.int8))
        p["name"].append(np.array([intern.setdefault(e.name, len(intern)) for e in timed], np.int32))
        p["pid"].append(_ints([e.pid for e in timed]))
        p["tid"].append(_ints([e.tid for e in timed]))
        p["ts"].append(np.array([e.ts for e in timed], np.float64))
        p["dur"].append(np.array([e.dur for e in timed], np.float64))
        p["correlation"].append(np.array([a.correlation for a in args], np.int64))
        p["external_id"].append(np.array([a.external_id for a in args], np.int64))
        p["stream"].append(_ints([a.stream for a in args]))
        p["device"].append(_ints([a.device for a in args]))

    def finish(self) -> tuple[EventColumns, list[str]]:
        dtypes = {"cat": np.int8, "name": np.int32}
        cols = {
            k: (np.concatenate(v) if v else np.empty(0, dtypes.get(k, np.float64 if k in ("ts", "dur") else np.int64)))
            for k, v in self.parts.items()
        }
        return EventColumns(**cols), list(self.names)


def _blocks(fh: BinaryIO, path: Path, size: int) -> Iterator[bytes]:
    try:
        while True:
            block = fh.read(size)
            if not block:
                return
            yield block
    except (OSError, EOFError, zlib.error) as exc:
        what = "truncated or corrupt gzip" if path.name.endswith(".gz") else "unreadable"
        raise InputError(f"{path}: {what} ({exc}); re-copy or re-export the trace") from None


def _open(path: Path) -> BinaryIO:
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file or directory") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot open ({exc.strerror})") from None
    magic = fh.read(2)
    fh.seek(0)
    return gzip.GzipFile(fileobj=fh) if magic == b"\x1f\x8b" else fh


def read_kineto(path: Path, progress: Callable[[int], None] | None = None, block: int = BLOCK) -> RawTrace:
    """Read one Kineto trace. progress(n) is called with the file bytes consumed so far."""
    fh = _open(path)
    raw = fh.fileobj if isinstance(fh, gzip.GzipFile) else fh
    columns = _Columns()
    buf = b""
    state = "head"  # head -> events -> tail
    head = tail = b""
    try:
        for block_bytes in _blocks(fh, path, block):
            buf += block_bytes
            if progress is not None:
                progress(raw.tell())
            if state == "head":
                match = re.search(rb'"traceEvents"\s*:\s*\[\s*', buf)
                if match is None:
                    if len(buf) > 64 << 20:
                        raise InputError(f'{path}: no "traceEvents" array in the first 64 MB; not a torch profiler trace')
                    continue
                head, buf, state = buf[: match.start()], buf[match.end() :], "events"
            if state == "events":
                buf, done = _consume(buf, columns, path, final=False)
                if done is not None:
                    tail, state = done, "tail"
            elif state == "tail":
                tail += block_bytes
        if state == "head":
            _raise_no_events(path, buf)
        if state == "events":
            buf, done = _consume(buf, columns, path, final=True)
            tail = done or b""
    finally:
        fh.close()
    events, names = columns.finish()
    return RawTrace(
        path=path,
        events=events,
        names=names,
        thread_names=columns.thread_names,
        metadata=_top_level(head, tail, path),
        skipped_no_time=columns.skipped_no_time,
    )


def _decode_chunk(chunk: bytes) -> list[_Event] | None:
    try:
        return _decode_events(b"[" + chunk + b"]")
    except msgspec.DecodeError:
        return None


def _consume(buf: bytes, columns: _Columns, path: Path, final: bool) -> tuple[bytes, bytes | None]:
    """Decode whole elements from the front of buf. Returns (rest, tail-after-array or None)."""
    if buf.startswith(b"]"):
        return b"", buf[1:]
    end = _ARRAY_END.search(buf)
    if end is not None:
        # Candidate end of the array: everything before it may be the last elements.
        events = _decode_chunk(buf[: end.start() + 1])
        if events is not None:
            columns.add(events)
            return b"", buf[end.end() :]
    # Decode up to the last boundary candidate; extend backwards on failure.
    cut = len(buf)
    while True:
        candidates = [m.start() for m in _BOUNDARY.finditer(buf, max(0, cut - (1 << 20)), cut)]
        if not candidates:
            if final:
                _raise_bad_events(path, buf)
            return buf, None
        pos = candidates[-1]
        events = _decode_chunk(buf[: pos + 1])
        if events is not None:
            columns.add(events)
            rest = buf[pos + 1 :].lstrip()
            return rest[1:].lstrip() if rest.startswith(b",") else rest, None
        cut = pos
        if final and cut == 0:
            _raise_bad_events(path, buf)


def _raise_bad_events(path: Path, chunk: bytes) -> None:
    try:
        _decode_events(b"[" + chunk)
    except msgspec.ValidationError as exc:
        # msgspec's location ("$[12].ts") counts within the chunk, not the file: name the field only.
        where = re.search(r"\$\[\d+\]\.?(\S*)`?$", str(exc))
        field_name = where.group(1).rstrip("`") if where and where.group(1) else "an event"
        problem = str(exc).split(" - at ")[0]
        raise InputError(
            f"{path}: an event's `{field_name}` has the wrong type ({problem}); not a torch profiler trace"
        ) from None
    except msgspec.DecodeError as exc:
        raise InputError(f"{path}: invalid JSON in traceEvents ({exc}); the file may be truncated: re-export it") from None
    raise InputError(f"{path}: invalid JSON in traceEvents; the file may be truncated: re-export it")


def _raise_no_events(path: Path, buf: bytes) -> None:
    if not buf.strip():
        raise InputError(f"{path}: the file is empty; re-export the trace")
    try:
        doc = _decode_any(buf)
    except msgspec.DecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc}); is it a torch profiler trace?") from None
    if isinstance(doc, dict) and "traceEvents" in doc:
        raise InputError(f'{path}: "traceEvents" is not a list; not a torch profiler trace')
    raise InputError(f'{path}: JSON without a "traceEvents" list; not a torch profiler (Chrome) trace')


def _top_level(head: bytes, tail: bytes, path: Path) -> dict:
    """The document's other top-level keys, from the bytes before and after traceEvents."""
    head = head.strip()
    tail = tail.strip()
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
