"""The `args` of a trace's GPU activity and CUDA calls (grid, block, registers, shared memory,
bytes, correlation id, ...), read back for an export that should be as rich as its source (the
Perfetto trace). The timeline keeps only the few args the analyses use (kineto/columns.py), so this is a
second pass over the file, made only on request."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import msgspec
import numpy as np

from dbo_trace.trace import kineto as k
from dbo_trace.trace.errors import InputError
from dbo_trace.trace.nsys import is_nsys

_GPU = {name for name, cat in k._CATEGORIES.items() if cat in (k.CAT_KERNEL, k.CAT_MEMCPY, k.CAT_MEMSET)}
_CALLS = {name for name, cat in k._CATEGORIES.items() if cat in (k.CAT_RUNTIME, k.CAT_DRIVER)}


class _Args(msgspec.Struct, gc=False):
    correlation: Any = -1


class _Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    ts: float | None = None
    dur: float | None = None
    args: msgspec.Raw = msgspec.Raw(b"")  # decoded only for the events asked for


class _Complete(msgspec.Struct, tag="X", tag_field="ph", gc=False):
    """A complete event; the other phases decode to kineto's empty structs, as the first read does, so
    an event this read could refuse is one that read refused too."""

    ph: ClassVar[str] = "X"
    cat: str = ""
    ts: float | None = None
    dur: float | None = None
    args: msgspec.Raw = msgspec.Raw(b"")


EventKey = tuple[bool, float, int]  # (a GPU activity, not a call; its ts as the trace writes it; its correlation)


def event_args(
    path: Path, window: tuple[float, float] | None = None, extents: np.ndarray | None = None
) -> dict[EventKey, dict[str, Any]]:
    """Each complete GPU activity's and CUDA call's args, keyed by what the timeline keeps of it: its
    kind, its start (the trace's own ts) and its correlation id (-1 where it has none). With a window
    (start, end in the trace's us), only the events that overlap it. The file is streamed through
    the trace reader's own cutting (a megabyte at a time: the whole file once held 2.4x its JSON at
    the peak), each chunk's args kept raw until picked. With the extents the first read kept
    (kineto.EXTENT_FIELDS) and a window, only the chunks whose time span meets the window are
    decoded (the file is still inflated up to the last of them). An Nsight Systems export has none
    of these (it is not JSON): none, without reading it."""
    if is_nsys(path):  # before: read whole into memory (a report's export is gigabytes), then refused by the decoder
        return {}
    if window is not None and extents is not None and len(extents):
        meets = (extents[:, 2] < window[1]) & (extents[:, 3] > window[0])
        sink = _Picked(window)
        try:
            _read_chunks(path, extents[meets], sink)
            return sink.out
        except (InputError, msgspec.DecodeError, ValueError):
            pass  # the file is no longer the one read (rewritten since): the whole pass below
    sink = _Picked(window)
    k._read(path, None, k.BLOCK, stream=k._EventStream(path, sink, decode=_decode_events))
    return sink.out


def _read_chunks(path: Path, chunks: np.ndarray, sink: "_Picked") -> None:
    """Decode the file's bytes [start, end) of each chunk (rows of extents, in file order) into the
    sink; the bytes between are inflated and dropped a block at a time."""
    fh = k._open(path)
    at = 0
    try:
        for start, end in chunks[:, :2].astype(np.int64).tolist():
            while at < start:
                skipped = k._read_block(fh, path, min(k.BLOCK, start - at))
                if not skipped:
                    raise ValueError("the file ends before a chunk it had")
                at += len(skipped)
            parts, need = [], end - start
            while need > 0 and (got := k._read_block(fh, path, need)):
                parts.append(got)
                need -= len(got)
            at = end - need
            if need:
                raise ValueError("the file ends inside a chunk it had")
            sink.add(_decode_events(k._as_array(b"".join(parts))))
    finally:
        fh.close()


_decode_events = k.phase_decoder(_Complete, _Event)
_decode_args = msgspec.json.Decoder(dict[str, Any]).decode
_decode_correlation = msgspec.json.Decoder(_Args).decode


class _Picked:
    """The args of the events in the window, as the stream decodes them chunk by chunk."""

    def __init__(self, window: tuple[float, float] | None):
        self.lo, self.hi = window or (-float("inf"), float("inf"))
        self.out: dict[EventKey, dict[str, Any]] = {}

    def add(self, events: list[_Event], at: tuple[int, int] | None = None) -> None:
        lo, hi = self.lo, self.hi
        for e in events:
            if e.ph != "X" or e.ts is None or not e.args or not (e.cat in _GPU or e.cat in _CALLS):
                continue
            if e.ts >= hi or e.ts + (e.dur or 0.0) <= lo:
                continue
            if not bytes(e.args).startswith(b"{"):  # null, or not an object: nothing to keep
                continue
            correlation = _decode_correlation(e.args).correlation
            key = (e.cat in _GPU, e.ts, correlation if isinstance(correlation, int) else -1)
            self.out[key] = _decode_args(e.args)
