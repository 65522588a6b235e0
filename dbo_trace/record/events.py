"""The hook event log: one append-only JSON-lines file per process.

Hot path cost is one tuple append to a deque (append and popleft are atomic,
so the microbatch threads need no lock, and a flush running beside them neither
loses nor repeats a record); serialisation happens in flush(), at step
boundaries, at exit, or when the buffer reaches its bound.
"""

from __future__ import annotations

import atexit
import json  # the header line
import os
import socket
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import msgspec

from dbo_trace.bundle import EVENTS_DIR, EVENTS_FORMAT, EVENTS_VERSION

_MAX_BUFFERED = 200_000  # about 20 MB of tuples before a forced flush
# msgspec encodes a record in well under a microsecond (the json module takes about two);
# anything it does not know (an enum, say) is written as its str().
_ENCODER = msgspec.json.Encoder(enc_hook=str)
_time_ns, _get_ident, _get_native_id = time.time_ns, threading.get_ident, threading.get_native_id


class EventLog:
    def __init__(self, folder: Path, *, extra_header: dict[str, Any] | None = None):
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{socket.gethostname()}-{os.getpid()}.jsonl"
        self._buffer: deque[tuple] = deque()
        self._flush_lock = threading.Lock()
        self.step = 0
        self.pid = os.getpid()
        self._extra_header = dict(extra_header or {})
        header = {
            "format": EVENTS_FORMAT,
            "version": EVENTS_VERSION,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "clock": "time.time_ns",
            "start_ns": time.time_ns(),
            "main_ident": threading.get_ident(),
            "main_native_tid": threading.get_native_id(),
            **(extra_header or {}),
        }
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(header, separators=(",", ":")) + "\n")
        atexit.register(self.flush_at_exit)

    def emit(self, kind: str, ubatch: int = -1, detail: Any = None) -> None:
        buffer = self._buffer
        buffer.append((_time_ns(), kind, _get_ident(), _get_native_id(), ubatch, self.step, detail))
        if len(buffer) >= _MAX_BUFFERED:
            self.flush()

    def _drain(self) -> list[tuple]:
        """Take what is buffered now; records appended meanwhile stay for the next flush."""
        buffer, out = self._buffer, []
        for _ in range(len(buffer)):
            out.append(buffer.popleft())
        return out

    def forked(self) -> "EventLog":
        """In a forked child: a log of its own (PID-named); records buffered at fork stay the parent's."""
        self._buffer = deque()  # the parent writes these; the child must not write them again
        self._flush_lock = threading.Lock()  # may have been held by a parent thread at fork
        header = {k: v for k, v in self._extra_header.items()}
        return EventLog(self.path.parent, extra_header={**header, "forked_from": self.pid})

    def flush_at_exit(self) -> None:
        """atexit: a vanished folder or a full disk must not print a traceback into the host's exit."""
        try:
            self.flush()
        except Exception:
            pass

    def flush(self) -> None:
        with self._flush_lock:
            records = self._drain()
            if not records:
                return
            with open(self.path, "ab") as fh:
                fh.write(_ENCODER.encode_lines(records))


_LOG: EventLog | None = None


def open_log(bundle_dir: str | os.PathLike, **header: Any) -> EventLog:
    """The process's event log under BUNDLE/events/ (created once per process; a forked child gets its own)."""
    global _LOG
    if _LOG is None or _LOG.pid != os.getpid():
        _LOG = EventLog(Path(bundle_dir) / EVENTS_DIR, extra_header=header)
    return _LOG


def reopen_after_fork() -> EventLog | None:
    """Called in a forked child (vLLM forks its engine core from the API server by default)."""
    global _LOG
    if _LOG is not None and _LOG.pid != os.getpid():
        _LOG = _LOG.forked()
    return _LOG
