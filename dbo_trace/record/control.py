"""Profiler control by file, for a server that cannot be asked over HTTP.

The AFD plugin's FFN server never opens its HTTP port (its API server waits for a utility call the
FFN's engine loop never answers), so `POST /start_profile` cannot reach it. With DBO_TRACE_CONTROL
set, a daemon thread of the plugin polls that file every 10 ms in every process of the server; a new
command in it calls `Worker.profile(True|False)` in that process, as vLLM's own `/start_profile`
would through its engine, and an acknowledgement is written beside it.

Two facts of the real FFN server shape this (docs/recording.md, "An AFD pair"):
- vLLM freezes the GC heap once the engine has started (`gc.freeze()`), and `gc.get_objects()` skips
  frozen objects. The Worker is found among the objects the live threads' frames reach instead
  (`gc.get_referents` walks frozen objects too); nothing is unfrozen.
- A Worker that runs its own loop (the FFN's `_run_ffn_server_loop`) nearly always has GPU work in
  flight: a receive that waits for the attention side. The torch profiler's start (CUPTI's set-up)
  and stop (a device synchronize) called from another thread then block until that receive ends,
  for minutes when no traffic comes. So the command is handed to the loop and run on the loop's own
  thread at the top of its next iteration, where the previous iteration's work has been synchronized
  and the next receive is not yet posted. The recorder sends traffic until such a command is done.

The command file holds `{"seq": N, "action": "start" | "stop"}`; each process that runs a Worker
answers per seq in `DIR/acks/PID.json`: `{"seq", "action", "state", "ok", "error", "workers",
"where", "queued_ns", "started_ns", "ended_ns"}` (time.time_ns()). `state` is "queued" while a loop
holds the command and "done" once it ran; `where` says which thread ran it ("poller" or "loop").
The recorder writes the command and waits for the acks (`send` and `wait_acks` below, used by
record/peer.py).

Nothing here runs unless the recorder asked for it: no thread, no import of vLLM's worker module.
No exception escapes into vLLM; a failing profile call is reported in the ack.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import sys
import threading
import time
import weakref
from collections import deque
from pathlib import Path
from types import FrameType
from typing import Any, Callable

from dbo_trace.files import replace_file

ENV_CONTROL = "DBO_TRACE_CONTROL"  # the command file's path
POLL_S = 0.01
ACKS_DIR = "acks"
MAX_COMMAND_BYTES = 4096
STATE_QUEUED, STATE_DONE = "queued", "done"
WHERE_POLLER, WHERE_LOOP = "poller", "loop"
# How far the frozen-heap search walks from the threads' frames: the FFN loop's frame holds its Worker
# as `self`; an engine core's busy loop reaches it through executor and worker wrapper (~6 steps).
FIND_MOST_OBJECTS = 300_000

_workers: "weakref.WeakSet[Any]" = weakref.WeakSet()
_thread: threading.Thread | None = None
_lock = threading.Lock()
WORKER_MODULE, WORKER_CLASS = "vllm.v1.worker.gpu_worker", "Worker"
# A Worker that runs its own loop, and the call its loop makes once per iteration before it waits for
# work (the AFD plugin's AFDFFNWorker._run_ffn_server_loop receives its control payload so).
OWN_LOOP_METHOD = "_run_ffn_server_loop"
LOOP_CALL = ("model_runner.connector.control_plane", "recv_dp_metadata_list")


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
    global _thread, _lock, _handoff
    _thread, _lock, _handoff = None, threading.Lock(), _Handoff()
    start()


# -- finding the Workers ------------------------------------------------------------------
def workers() -> list[Any]:
    """The Workers of this process: those kept, else vLLM's class found among the live objects (no
    patch to miss: a worker class made, imported or patched in any order is found; the module is only
    looked up where this process imported it already)."""
    found = list(_workers)
    if found:
        return found
    module = sys.modules.get(WORKER_MODULE)
    cls = getattr(module, WORKER_CLASS, None) if module is not None else None
    if isinstance(cls, type):
        # type(o), not isinstance: isinstance reads o.__class__, which a proxy object may answer by raising
        found = [o for o in gc.get_objects() if issubclass(type(o), cls)]
        if not found and gc.get_freeze_count():
            found = reachable_instances(cls, _thread_frames())
    for worker in found:  # one search per process
        _workers.add(worker)
    return found


def _thread_frames() -> list[FrameType]:
    frames = []
    frame: FrameType | None
    for frame in sys._current_frames().values():
        while frame is not None:
            frames.append(frame)
            frame = frame.f_back
    return frames


def reachable_instances(cls: type, roots: list[Any], most: int = FIND_MOST_OBJECTS) -> list[Any]:
    """Instances of `cls` reachable from `roots` (breadth first, at most `most` objects visited): frozen
    objects included, which `gc.get_objects()` leaves out. Frames contribute their locals."""
    seen: set[int] = set()
    queue: deque[Any] = deque(roots)
    found: list[Any] = []
    atoms = (str, bytes, bytearray, int, float, complex, bool, type(None))
    while queue and len(seen) < most:
        obj = queue.popleft()
        if id(obj) in seen or isinstance(obj, atoms):
            continue
        seen.add(id(obj))
        if issubclass(type(obj), cls):
            found.append(obj)
            continue
        if isinstance(obj, FrameType):
            queue.extend(obj.f_locals.values())
            continue
        queue.extend(gc.get_referents(obj))
    return found


# -- running a command --------------------------------------------------------------------
class _Handoff:
    """The command a Worker's own loop runs at its next iteration (one at a time: the newest wins)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.command: tuple[Path, int, str, list[Any], int] | None = None
        self.hooked: set[type] = set()


_handoff = _Handoff()


def _loop_owner(worker: Any) -> tuple[type, str] | None:
    """The class and method to hook where `worker` runs its own loop, else None."""
    if not callable(getattr(worker, OWN_LOOP_METHOD, None)):
        return None
    holder: Any = worker
    for part in LOOP_CALL[0].split("."):
        holder = getattr(holder, part, None)
        if holder is None:
            return None
    cls = type(holder)
    return (cls, LOOP_CALL[1]) if callable(getattr(cls, LOOP_CALL[1], None)) else None


def _hook_loop(cls: type, name: str) -> None:
    """Run a handed-over command before each call of cls.name (once per class)."""
    with _handoff.lock:
        if cls in _handoff.hooked:
            return
        _handoff.hooked.add(cls)
        original = getattr(cls, name)

        @functools.wraps(original)
        def at_iteration_top(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                _run_handed_over()
            except Exception:  # never into the loop
                pass
            return original(self, *args, **kwargs)

        setattr(cls, name, at_iteration_top)


def _run_handed_over() -> None:
    with _handoff.lock:
        command, _handoff.command = _handoff.command, None
    if command is not None:
        path, seq, action, found, queued = command
        _profile(path, seq, action, found, WHERE_LOOP, queued)


def _answer(path: Path, seq: int, action: str) -> None:
    """Profile this process's Workers and acknowledge; a process without one (the API server) stays
    silent, so that the recorder waits for the process that runs the model."""
    queued = time.time_ns()
    found = workers()
    if not found:
        return
    owners = [owner for owner in map(_loop_owner, found) if owner is not None]
    if not owners:
        _profile(path, seq, action, found, WHERE_POLLER, queued)
        return
    with _handoff.lock:  # a command the loop has not run yet (no traffic came) is overtaken by this one
        _handoff.command = (path, seq, action, found, queued)
    for cls, name in owners:
        _hook_loop(cls, name)
    _write_ack(path, _ack(seq, action, STATE_QUEUED, None, len(found), WHERE_LOOP, queued, None, None))


def _profile(path: Path, seq: int, action: str, found: list[Any], where: str, queued: int) -> None:
    started = time.time_ns()
    error = None
    for worker in found:
        try:
            worker.profile(action == "start")
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"[:500]
    _write_ack(path, _ack(seq, action, STATE_DONE, error, len(found), where, queued, started, time.time_ns()))


def _ack(seq: int, action: str, state: str, error: str | None, n_workers: int, where: str,
         queued: int, started: int | None, ended: int | None) -> dict:  # fmt: skip
    return {
        "seq": seq,
        "action": action,
        "state": state,
        "ok": error is None if state == STATE_DONE else None,
        "error": error,
        "workers": n_workers,
        "where": where,
        "pid": os.getpid(),
        "queued_ns": queued,
        "started_ns": started,
        "ended_ns": ended,
    }


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
                _write_ack(path, {"seq": done, "state": STATE_DONE, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:500], "pid": os.getpid()})
            except Exception:
                pass


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


def is_queued(ack: dict) -> bool:
    """A loop holds this command; it runs at the loop's next iteration (traffic makes one)."""
    return ack.get("state") == STATE_QUEUED


def wait_acks(
    path: Path,
    seq: int,
    timeout_s: float,
    alive: Callable[[], bool],
    settle_s: float = 0.5,
    while_queued: Callable[[], None] | None = None,
) -> list[dict]:
    """The acks of command `seq`: returns `settle_s` after the first arrived (other processes of the
    server answer within the same poll) and none is still queued, or at `timeout_s` / when `alive()`
    turns false with what came. While an ack says queued, `while_queued()` is called each round (the
    recorder sends a request then, so that the loop turns over)."""
    deadline = time.monotonic() + timeout_s
    first = None
    while time.monotonic() < deadline and alive():
        acks = read_acks(path, seq)
        if acks and first is None:
            first = time.monotonic()
        queued = any(is_queued(a) for a in acks)
        if first is not None and not queued and time.monotonic() - first >= settle_s:
            return acks
        if queued and while_queued is not None:
            while_queued()
        time.sleep(0.05)
    return read_acks(path, seq)
