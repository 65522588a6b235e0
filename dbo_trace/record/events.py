"""The hook event log: one append-only JSON-lines file per process.

Hot path cost is one tuple append (the GIL makes list.append atomic, so the
microbatch threads need no lock); serialisation happens in flush(), at step
boundaries, at exit, or when the buffer reaches its bound.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from dbo_trace.bundle import EVENTS_DIR, EVENTS_FORMAT, EVENTS_VERSION

_MAX_BUFFERED = 200_000  # about 20 MB of tuples before a forced flush


class EventLog:
    def __init__(self, folder: Path, *, extra_header: dict[str, Any] | None = None):
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{socket.gethostname()}-{os.getpid()}.jsonl"
        self._buffer: list[tuple] = []
        self._flush_lock = threading.Lock()
        self.step = 0
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
        atexit.register(self.flush)

    def emit(self, kind: str, ubatch: int = -1, detail: Any = None) -> None:
        self._buffer.append(
            (time.time_ns(), kind, threading.get_ident(), threading.get_native_id(), ubatch, self.step, detail)
        )
        if len(self._buffer) >= _MAX_BUFFERED:
            self.flush()

    def flush(self) -> None:
        with self._flush_lock:
            records, self._buffer = self._buffer, []
            if not records:
                return
            dumps = json.JSONEncoder(separators=(",", ":"), default=str).encode
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write("\n".join(dumps(r) for r in records) + "\n")


_LOG: EventLog | None = None


def open_log(bundle_dir: str | os.PathLike, **header: Any) -> EventLog:
    """The process's event log under BUNDLE/events/ (created once per process)."""
    global _LOG
    if _LOG is None:
        _LOG = EventLog(Path(bundle_dir) / EVENTS_DIR, extra_header=header)
    return _LOG


def current_log() -> EventLog | None:
    return _LOG
