"""The `args` of a trace's GPU activity and CUDA calls (grid, block, registers, shared memory,
bytes, correlation id, ...), read back for an export that should be as rich as its source (the
Perfetto trace). The timeline keeps only the few args the analyses use (kineto.py), so this is a
second pass over the file, made only on request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from dbo_trace.trace import kineto as k
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


class _File(msgspec.Struct, gc=False):
    traceEvents: list[_Event] = []  # noqa: N815 (the format's name)


EventKey = tuple[bool, float, int]  # (a GPU activity, not a call; its ts as the trace writes it; its correlation)


def event_args(path: Path, window: tuple[float, float] | None = None) -> dict[EventKey, dict[str, Any]]:
    """Each complete GPU activity's and CUDA call's args, keyed by what the timeline keeps of it: its
    kind, its start (the trace's own ts) and its correlation id (-1 where it has none). With a window
    (start, end in the trace's us), only the events that overlap it: the file is still read whole
    (its decompressed JSON is held once while the args are picked out), the args kept are few. An
    Nsight Systems export has none of these (it is not JSON): none, without reading it."""
    if is_nsys(path):  # before: read whole into memory (a report's export is gigabytes), then refused by the decoder
        return {}
    fh = k._open(path)
    try:
        parts = []
        while part := fh.read(k.BLOCK):
            parts.append(part)
    finally:
        fh.close()
    data = b"".join(parts)
    del parts
    events = msgspec.json.decode(data, type=_File).traceEvents
    out: dict[EventKey, dict[str, Any]] = {}
    decode_args = msgspec.json.Decoder(dict[str, Any]).decode
    decode_correlation = msgspec.json.Decoder(_Args).decode
    lo, hi = window or (-float("inf"), float("inf"))
    for e in events:
        if e.ph != "X" or e.ts is None or not e.args or not (e.cat in _GPU or e.cat in _CALLS):
            continue
        if e.ts >= hi or e.ts + (e.dur or 0.0) <= lo:
            continue
        if not bytes(e.args).startswith(b"{"):  # null, or not an object: nothing to keep
            continue
        correlation = decode_correlation(e.args).correlation
        key = (e.cat in _GPU, e.ts, correlation if isinstance(correlation, int) else -1)
        out[key] = decode_args(e.args)
    return out
