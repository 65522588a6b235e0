"""The traceEvents array cut into chunks of whole events and decoded, with the document's other
top-level keys, and a broken file named at its byte."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol

import msgspec

from dbo_trace.trace.errors import InputError
from dbo_trace.trace.kineto.columns import _Columns, _Event, _decode_any, _decode_events


# Events are decoded about a megabyte at a time: their Python objects then stay in the CPU's cache
# while they become columns (16 MB at a time ran 1.7x slower end to end; docs/performance.md).
BLOCK = 1 << 20  # bytes decompressed per read, and decoded at once
MAX_READ = 16 << 20  # the most read at once while one event is still arriving
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_ARRAY_END = re.compile(rb"\}\s*\]")


MAX_EVENT_BYTES = 64 << 20  # one event larger than this is refused (docs/performance.md: memory stays bounded)


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
        # No `}]` closes them: a file cut inside the events, or an array that holds something else
        # (`[1, 2]`: no object ends in it); the reader cannot tell which without reading it all again.
        return InputError(
            f"{self.path}: invalid JSON in traceEvents: the file ends inside it (truncated?), or it holds "
            "something other than event objects; re-export it"
        )

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
