"""`read_kineto`: one Kineto trace read through its head, its traceEvents and its tail, in this process
or, where it is large, by several processes together (each inflating it and decoding every n-th
chunk, process 0 merging them in order)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Callable

from dbo_trace.trace.errors import InputError
from dbo_trace.trace.kineto.blocks import _Gunzip, _open, _read_block, _rewound
from dbo_trace.trace.kineto.columns import RawTrace, _Columns
from dbo_trace.trace.kineto.stream import (
    BLOCK,
    MAX_EVENT_BYTES,
    MAX_READ,
    _ARRAY_FORMAT,
    _EventStream,
    _ParallelFallback,
    _WHITESPACE,
    _around,
    _decode_chunk,
    _last_fast_boundary,
    _raise_no_events,
    _top_level,
    _top_level_events,
)


if TYPE_CHECKING:
    from multiprocessing.connection import Connection  # imported only where processes share a read: 20 ms
PARALLEL_BLOCK = 4 << 20  # bytes per read, and per chunk, when processes share a trace


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
    workers), and decoded at once. The file is opened once here (a shared read that falls back
    reads it again from the start through the same handle; the workers open their own)."""
    fh = _open(path)
    try:
        if workers > 1 and os.path.getsize(path) >= PARALLEL_MIN_BYTES // (8 if isinstance(fh, _Gunzip) else 1):
            try:
                return _read_shared(path, progress, block or PARALLEL_BLOCK, workers, piece=block or BLOCK, fh=fh)
            except (_ParallelFallback, OSError):
                # read it again the careful way: the exact error, an odd layout, or workers that could not start
                fh = _rewound(fh, path)
        return _read(path, progress, block or BLOCK, fh=fh)
    except RecursionError:  # msgspec's decoders refuse JSON nested past Python's recursion limit
        raise InputError(
            f"{path}: JSON nested over a thousand levels deep, which no trace is; not a torch profiler trace, or a corrupt one"
        ) from None
    finally:
        fh.close()


def _read(
    path: Path,
    progress: Callable[[int], None] | None,
    block: int,
    share: "Callable[[_EventStream], _SharedChunks] | None" = None,
    stream: "_EventStream | None" = None,
    fh: "BinaryIO | _Gunzip | None" = None,
) -> RawTrace:
    """The file's blocks through its head, its traceEvents and its tail. share: the reader of a
    trace that several processes decode (_read_shared); else this process decodes every event.
    stream: one that hands its decoded events elsewhere (event_args.py), else into the columns.
    fh: the file already open (read_kineto's, which closes it), else opened and closed here."""
    own = fh is None
    fh = _open(path) if fh is None else fh
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
        if own:
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


def _read_shared(
    path: Path, progress: Callable[[int], None] | None, block: int, count: int, piece: int, fh: "BinaryIO | _Gunzip | None" = None
) -> RawTrace:
    """Read one trace with `count` processes: this one (through fh, where given) and count - 1 spawned
    workers (_SharedChunks). Raises _ParallelFallback or OSError where the sequential read should do it instead."""
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
            return _read(path, progress, block, lambda stream: _SharedMain(stream, count, piece, inboxes), fh=fh)
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
