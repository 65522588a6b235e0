"""Profiler control by file, for a server that cannot be asked over HTTP.

The AFD plugin's FFN server never opens its HTTP port (its API server waits for a utility call the
FFN's engine loop never answers), so `POST /start_profile` cannot reach it. With DBO_TRACE_CONTROL
set, a daemon thread of the plugin polls that file every 10 ms in every process of the server; a new command in it calls `Worker.profile(True|False)` in that process, as vLLM's own
`/start_profile` would through its engine, and an acknowledgement is written beside it.

The thread starts where the plugin loads (and again in each forked child); when a command comes it
looks for this process's Workers among the live objects (gc), so no patch order matters.
The command file holds `{"seq": N, "action": "start" | "stop"}`; each process that runs a Worker
answers once per seq in `DIR/acks/PID.json`: `{"seq", "action", "ok", "error", "workers",
"started_ns", "ended_ns"}` (time.time_ns()). The recorder writes the command and waits for the acks
(`send` and `wait_acks` below, used by record/peer.py).

Nothing here runs unless the recorder asked for it: no thread, no import of vLLM's worker module.
The thread never raises into vLLM; a failing profile call is reported in the ack.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable

from dbo_trace.files import replace_file

ENV_CONTROL = "DBO_TRACE_CONTROL"  # the command file's path
POLL_S = 0.01
ACKS_DIR = "acks"
MAX_COMMAND_BYTES = 4096

_workers: "weakref.WeakSet[Any]" = weakref.WeakSet()
_thread: threading.Thread | None = None
_lock = threading.Lock()
WORKER_MODULE, WORKER_CLASS = "vllm.v1.worker.gpu_worker", "Worker"


def command_path() -> Path | None:
    value = os.environ.get(ENV_CONTROL)
    return Path(value) if value else None


def keep_worker(worker: Any) -> None:
    """Remember a Worker (weakly) and start this process's polling thread (tests, and workers made
    outside vLLM's class)."""
    _workers.add(worker)
    start()


def start() -> None:
    """This process's polling thread, once (again in a forked child: threads do not survive a fork)."""
    global _thread
    path = command_path()
    if path is None:
        return
    with _lock:
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_poll, args=(path,), daemon=True, name="dbo-trace-control")
            _thread.start()


def after_fork_in_child() -> None:
    global _thread, _lock
    _thread, _lock = None, threading.Lock()
    start()


def workers() -> list[Any]:
    """The Workers of this process: those kept, and vLLM's found among the live objects when a command
    comes (no patch to miss: a worker class made, imported or patched in any order is found; the
    module is only looked up where this process imported it already)."""
    found = list(_workers)
    if found:
        return found
    module = sys.modules.get(WORKER_MODULE)
    cls = getattr(module, WORKER_CLASS, None) if module is not None else None
    if isinstance(cls, type):
        seen = {id(w) for w in found}
        # type(o), not isinstance: isinstance reads o.__class__, which a proxy object may answer by raising
        found += [o for o in gc.get_objects() if issubclass(type(o), cls) and id(o) not in seen]
    for worker in found:  # one scan per process
        _workers.add(worker)
    return found


def _read_command(path: Path) -> tuple[int, str] | None:
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_COMMAND_BYTES + 1)
        if len(raw) > MAX_COMMAND_BYTES:
            return None
        body = json.loads(raw)
        seq, action = body["seq"], body["action"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    if isinstance(seq, int) and action in ("start", "stop"):
        return seq, action
    return None


def _poll(path: Path) -> None:
    done = -1
    while True:
        time.sleep(POLL_S)
        try:
            command = _read_command(path)
            if command is None or command[0] <= done:
                continue
            done = command[0]
            _answer(path, *command)
        except Exception as exc:  # never into vLLM; the recorder is told why, where it can be
            try:
                _write_ack(path, {"seq": done, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:500], "pid": os.getpid()})
            except Exception:
                pass


def _answer(path: Path, seq: int, action: str) -> None:
    """Profile this process's Workers and acknowledge; a process without one (the API server) stays
    silent, so that the recorder waits for the process that runs the model."""
    started = time.time_ns()
    error = None
    found = workers()
    if not found:
        return
    for worker in found:
        try:
            worker.profile(action == "start")
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"[:500]
    ack = {
        "seq": seq,
        "action": action,
        "ok": error is None,
        "error": error,
        "workers": len(found),
        "pid": os.getpid(),
        "started_ns": started,
        "ended_ns": time.time_ns(),
    }
    _write_ack(path, ack)


def _write_ack(path: Path, ack: dict) -> None:
    folder = path.parent / ACKS_DIR
    folder.mkdir(exist_ok=True)
    replace_file(folder / f"{os.getpid()}.json", json.dumps(ack).encode())


# -- the recorder's side ------------------------------------------------------------
def send(path: Path, seq: int, action: str) -> None:
    replace_file(path, json.dumps({"seq": seq, "action": action}).encode())


def read_acks(path: Path, seq: int) -> list[dict]:
    folder = path.parent / ACKS_DIR
    found: list[dict] = []
    if not folder.is_dir():
        return found
    for ack_path in sorted(folder.glob("*.json")):
        try:
            body = json.loads(ack_path.read_bytes()[:MAX_COMMAND_BYTES])
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(body, dict) and body.get("seq") == seq:
            found.append(body)
    return found


def wait_acks(path: Path, seq: int, timeout_s: float, alive: Callable[[], bool], settle_s: float = 0.5) -> list[dict]:
    """The acks of command `seq`: returns `settle_s` after the first arrived (other processes of the
    server answer within the same poll), or at `timeout_s` / when `alive()` turns false with what came."""
    deadline = time.monotonic() + timeout_s
    first = None
    while time.monotonic() < deadline and alive():
        acks = read_acks(path, seq)
        if acks and first is None:
            first = time.monotonic()
        if first is not None and time.monotonic() - first >= settle_s:
            return acks
        time.sleep(0.05)
    return read_acks(path, seq)
