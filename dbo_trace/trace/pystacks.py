"""Reading sampled Python stacks: py-spy's Chrome trace (`py-spy record --format chrometrace`), as a
bundle's `pystacks/<role>.json` holds it (docs/bundle-format.md, "pystacks").

The file is one JSON array of events `{"args": {"filename", "line"}, "cat": "py-spy", "name",
"ph": "B" | "E", "pid", "tid", "ts"}`: per thread, a `B` opens a frame (outermost first) and an `E`
closes the innermost one; consecutive identical samples are one B/E span; `ts` is microseconds since
py-spy started; `tid` is the thread's pthread id (`threading.get_ident()`). So each thread's events
replay its sampled stack over time. Here they become:

- a **tree of stacks** (`node_parent`, `node_frame`): node 0 is the empty stack, every other node a
  stack, its parent the stack without the innermost frame, so a stack is stored once however often
  it was sampled;
- **segments**: per thread, maximal stretches in which the stack stayed one node (`seg_*`).

Bounded: at most MAX_FILE_BYTES of JSON (gzip: of inflated JSON), MAX_EVENTS events, stacks
MAX_DEPTH deep, names MAX_NAME characters (longer ones cut), decoded MAX_CHUNK at a time. A file
over a bound, or not py-spy's layout, is one line (InputError) naming it and what to do; a file cut
short keeps its whole events and says so in `warnings`.
"""

from __future__ import annotations

import gzip
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterator

import msgspec
import numpy as np

from dbo_trace.bundle import SampleEntry
from dbo_trace.trace.errors import InputError

MAX_FILE_BYTES = 1 << 30
MAX_EVENTS = 20_000_000
MAX_DEPTH = 1024
MAX_NAME = 1024
MAX_CHUNK = 4 << 20  # bytes decoded at once
MAX_EVENT_BYTES = 16 << 20  # one event (its strings) beyond this is not py-spy's

# py-spy's pseudo-frame at the root of a stack: `--threads` puts the thread outermost, as a frame
# with an empty filename.
_THREAD_FRAME = re.compile(r"^thread \((0x[0-9a-fA-F]+|\d+)\)(?:: (.*))?$", re.S)


class _Args(msgspec.Struct):
    filename: str = ""
    line: int | None = None


class _Event(msgspec.Struct):
    ph: str
    pid: int
    tid: int
    ts: int
    name: str = ""
    args: _Args | None = None


@dataclass(frozen=True)
class StackSamples:
    """One py-spy file: its stacks as a tree, and per thread the stretches of one stack.
    Times are microseconds on py-spy's clock (its own start); `started_unix_ns` (from the
    manifest) places that start on the time.time_ns() clock to within py-spy's start-up."""

    path: str
    role: str | None
    rate_hz: float | None
    started_unix_ns: int | None
    frames: list[tuple[str, str, int]]  # (function, filename, line; -1 unknown), by frame id
    node_parent: np.ndarray  # (n_nodes,) int32; node 0 is the empty stack (its own parent)
    node_frame: np.ndarray  # (n_nodes,) int32 into frames; -1 for node 0
    seg_start: np.ndarray  # (n_seg,) float64 us, py-spy's clock; sorted by (thread, start)
    seg_end: np.ndarray  # (n_seg,) float64
    seg_thread: np.ndarray  # (n_seg,) int64 into threads
    seg_node: np.ndarray  # (n_seg,) int32: the stack (innermost frame's node)
    threads: list[tuple[int, int]]  # (pid, tid): tid is py-spy's, the pthread id
    native: dict[int, int] = field(default_factory=dict)  # thread index -> native id, where `--threads` gave it
    thread_names: dict[int, str] = field(default_factory=dict)  # thread index -> its name (`--threads`)
    end_us: float = 0.0  # the last event's ts
    events: int = 0
    warnings: tuple[str, ...] = ()

    def pids(self) -> set[int]:
        return {p for p, _ in self.threads}


def _open_regular(path: Path) -> IO[bytes]:
    """The file, opened without blocking on a FIFO and checked to be a regular file within the bound."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise InputError(f"{path}: cannot read the Python stack samples ({exc.strerror})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise InputError(f"{path}: the Python stack samples are not a regular file (a pipe or device?)")
    if st.st_size > MAX_FILE_BYTES:
        os.close(fd)
        raise InputError(
            f"{path}: the Python stack samples are {st.st_size / (1 << 30):.1f} GiB, over the "
            f"{MAX_FILE_BYTES >> 30} GiB dbo-trace reads; sample a shorter window or at a lower --rate"
        )
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _blocks(path: Path) -> Iterator[bytes]:
    """The file's bytes, inflated where gzipped, in pieces, never more than MAX_FILE_BYTES in all."""
    raw = _open_regular(path)
    with raw:
        head = raw.read(2)
        raw.seek(0)
        stream: IO[bytes] = gzip.GzipFile(fileobj=raw) if head == b"\x1f\x8b" else raw  # type: ignore[assignment]
        total = 0
        try:
            while True:
                block = stream.read(MAX_CHUNK)
                if not block:
                    return
                total += len(block)
                if total > MAX_FILE_BYTES:
                    raise InputError(
                        f"{path}: the Python stack samples inflate past the {MAX_FILE_BYTES >> 30} GiB dbo-trace "
                        "reads; sample a shorter window or at a lower --rate"
                    )
                yield block
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            if isinstance(exc, InputError):
                raise
            raise InputError(f"{path}: the gzipped Python stack samples are damaged ({exc})") from None


def _event_chunks(path: Path) -> Iterator[tuple[bytes, bool]]:
    """Whole events as JSON arrays, a few MB at a time, and whether the file ended inside the array.
    Events are cut at `},{"`, which only occurs between objects: inside a JSON string a `"` is
    escaped, so `{"` never is."""
    buf = b""
    started = False
    for block in _blocks(path):
        buf += block
        if not started:
            stripped = buf.lstrip()
            if not stripped:
                continue
            if not stripped.startswith(b"["):
                raise InputError(f"{path}: not py-spy's Chrome trace (a JSON array of events); record with --format chrometrace")
            buf = stripped[1:]
            started = True
        cut = buf.rfind(b'},{"')
        if cut < 0:
            if len(buf) > MAX_EVENT_BYTES:
                raise InputError(f"{path}: an event of the Python stack samples is over {MAX_EVENT_BYTES >> 20} MB: not py-spy's")
            continue
        yield b"[" + buf[: cut + 1] + b"]", False
        buf = buf[cut + 2 :]
    if not started:
        raise InputError(f"{path}: the Python stack samples are empty (py-spy was stopped before it wrote them?)")
    tail = buf.rstrip()
    if tail.endswith(b"]"):
        body = tail[:-1].rstrip()
        if body:
            yield b"[" + body + b"]", False
        return
    # Cut short: keep the whole events before the cut.
    end = tail.rfind(b"}")
    while end >= 0:
        try:
            msgspec.json.decode(b"[" + tail[: end + 1] + b"]")
            yield b"[" + tail[: end + 1] + b"]", True
            return
        except msgspec.DecodeError:
            end = tail.rfind(b"}", 0, end)
    raise InputError(f"{path}: the Python stack samples end before their first whole event (cut short, or not JSON); re-record them")


def read_pystacks(path: Path, entry: SampleEntry | None = None) -> StackSamples:
    """One py-spy Chrome trace as stacks and segments (module docstring)."""
    decode = msgspec.json.Decoder(list[_Event]).decode
    frame_ids: dict[tuple[str, str, int], int] = {}
    frames: list[tuple[str, str, int]] = []
    children: dict[tuple[int, int], int] = {}
    parent: list[int] = [0]
    frame_of: list[int] = [-1]
    depth: list[int] = [0]
    thread_ids: dict[tuple[int, int], int] = {}
    node_now: list[int] = []  # per thread: its stack now
    since: list[int] = []  # per thread: since when
    seg_t: list[int] = []
    seg_a: list[int] = []
    seg_b: list[int] = []
    seg_n: list[int] = []
    native: dict[int, int] = {}
    names: dict[int, str] = {}
    last_ts = 0
    events = 0
    truncated = False
    other = 0
    for chunk, cut in _event_chunks(path):
        truncated = truncated or cut
        try:
            batch = decode(chunk)
        except msgspec.ValidationError as exc:
            raise InputError(f"{path}: not py-spy's Chrome trace ({exc}); record with --format chrometrace") from None
        except (msgspec.DecodeError, RecursionError):
            raise InputError(f"{path}: the Python stack samples are not valid JSON; re-record them") from None
        events += len(batch)
        if events > MAX_EVENTS:
            raise InputError(
                f"{path}: over {MAX_EVENTS:,} events of Python stack samples, more than dbo-trace reads; "
                "sample a shorter window or at a lower --rate"
            )
        for ev in batch:
            ph = ev.ph
            if ph != "B" and ph != "E":
                other += 1
                continue
            ts = ev.ts
            if ts < last_ts or ts >= 1 << 53:
                raise InputError(
                    f"{path}: the Python stack samples' times go backwards or out of range at ts {ts}: not py-spy's output"
                )
            last_ts = ts
            key = (ev.pid, ev.tid)
            th = thread_ids.get(key)
            if th is None:
                th = thread_ids[key] = len(thread_ids)
                node_now.append(0)
                since.append(ts)
            node = node_now[th]
            if ts > since[th]:
                if node:
                    seg_t.append(th)
                    seg_a.append(since[th])
                    seg_b.append(ts)
                    seg_n.append(node)
                since[th] = ts
            args = ev.args
            fkey = (ev.name[:MAX_NAME], args.filename[:MAX_NAME] if args else "", args.line if args and args.line is not None else -1)
            f = frame_ids.get(fkey)
            if f is None:
                f = frame_ids[fkey] = len(frames)
                frames.append(fkey)
                if not fkey[1]:
                    _thread_frame(fkey[0], th, native, names)
            if ph == "B":
                child = children.get((node, f))
                if child is None:
                    if depth[node] >= MAX_DEPTH:
                        raise InputError(f"{path}: a sampled stack deeper than {MAX_DEPTH} frames: not py-spy's output")
                    child = children[(node, f)] = len(parent)
                    parent.append(node)
                    frame_of.append(f)
                    depth.append(depth[node] + 1)
                node_now[th] = child
            else:
                if node == 0 or frame_of[node] != f:
                    raise InputError(
                        f"{path}: the Python stack samples close a frame that is not open (at ts {ts}): "
                        "not py-spy's output, or damaged"
                    )
                node_now[th] = parent[node]
    warnings = []
    if truncated:
        warnings.append(f"{path}: the Python stack samples end early (cut short?); read the {events:,} whole events before the cut")
    for th, node in enumerate(node_now):  # frames left open (a file cut short) end at the last event
        if node and last_ts > since[th]:
            seg_t.append(th)
            seg_a.append(since[th])
            seg_b.append(last_ts)
            seg_n.append(node)
    t = np.asarray(seg_t, np.int64)
    a = np.asarray(seg_a, np.float64)
    order = np.lexsort((a, t))
    e = entry
    return StackSamples(
        path=str(path),
        role=e.role if e else None,
        rate_hz=e.rate_hz if e else None,
        started_unix_ns=e.started_unix_ns if e else None,
        frames=frames,
        node_parent=np.asarray(parent, np.int32),
        node_frame=np.asarray(frame_of, np.int32),
        seg_start=a[order],
        seg_end=np.asarray(seg_b, np.float64)[order],
        seg_thread=t[order],
        seg_node=np.asarray(seg_n, np.int32)[order],
        threads=list(thread_ids),
        native=native,
        thread_names=names,
        end_us=float(last_ts),
        events=events,
        warnings=tuple(warnings),
    )


def _thread_frame(name: str, th: int, native: dict[int, int], names: dict[int, str]) -> None:
    """`--threads`' pseudo-frame `thread (<native id>): <name>` names its thread's native id and name."""
    m = _THREAD_FRAME.match(name)
    if m and not m.group(1).startswith("0x") and len(m.group(1)) < 19:
        native[th] = int(m.group(1))
        if m.group(2):
            names[th] = m.group(2)[:MAX_NAME]
