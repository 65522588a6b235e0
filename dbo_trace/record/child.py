"""The recorded program: started as its own process group, watched, and stopped with escalating signals.

Its own process group, so that a stop reaches every process it made (vLLM's
engine core and workers) and so that the user's Ctrl-C reaches dbo-trace
first, which then stops the program in order and keeps what was collected.
"""

from __future__ import annotations

import http.client as httplib
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)


class ChildFailed(Exception):
    """The program died, hung, or refused something; the message says which and shows its log tail."""


@dataclass
class StopResult:
    returncode: int | None
    signals_sent: list[str]
    outside_group: list[int] = field(default_factory=list)  # descendants that had left the group (setsid)
    survivors: list[int] = field(default_factory=list)  # processes still alive after SIGKILL


TRACK_EVERY_S = 0.25


def _process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, start time) from /proc; empty where there is no /proc."""
    table: dict[int, tuple[int, str]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        fields = data[data.rindex(b")") + 2 :].split()  # after the command name, which may hold spaces
        table[int(name)] = (int(fields[1]), fields[19].decode())  # ppid (field 4), starttime (field 22)
    return table


_TCP_LISTEN = "0A"  # the state column of /proc/net/tcp


def listening_inodes(port: int) -> set[int]:
    """The inodes of the sockets listening on TCP `port` (IPv4 and IPv6) in this network namespace,
    from /proc/net/tcp{,6}; empty where there is no /proc."""
    found: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()  # sl, local address:port (hex), remote, state, ..., inode (10th)
            if len(fields) > 9 and fields[3] == _TCP_LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.add(int(fields[9]))
    return found


def socket_owners(inodes: set[int], pids: list[int]) -> list[int]:
    """Those of pids that hold one of these sockets open (their /proc/PID/fd links name it)."""
    names = {f"socket:[{inode}]" for inode in inodes}
    owners = []
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in names:
                    owners.append(pid)
                    break
            except OSError:
                continue
    return owners


class Child:
    def __init__(self, argv: list[str], env: Mapping[str, str], log_path: Path, cwd: Path | None = None):
        self.argv = argv
        self.log_path = log_path
        # The child writes the log through its own copy of the descriptor; ours is closed at once.
        with open(log_path, "ab") as log:
            try:
                self.proc = subprocess.Popen(
                    argv,
                    env=dict(env),
                    cwd=cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                raise ChildFailed(f"{argv[0]}: cannot start ({exc.strerror}); check the command after --") from None
        self.pgid = self.proc.pid  # start_new_session: the child leads its own group
        # Every descendant seen so far (pid -> start time): a grandchild that calls setsid() leaves
        # the group, and a stop of the group alone would leave it running.
        self.tracked: dict[int, str] = {}
        self._tracked_at = 0.0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        if time.monotonic() - self._tracked_at >= TRACK_EVERY_S:
            self.track()
        return self.proc.poll()

    def track(self) -> None:
        """Add the program's current descendants to self.tracked."""
        self._tracked_at = time.monotonic()
        table = _process_table()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _start) in table.items():
            children.setdefault(ppid, []).append(pid)
        todo = [self.pid] + list(self.tracked)
        while todo:
            for kid in children.get(todo.pop(), []):
                if kid not in self.tracked and kid in table:
                    self.tracked[kid] = table[kid][1]
                    todo.append(kid)

    def escaped(self) -> list[int]:
        """Tracked descendants still alive outside the group (they called setsid)."""
        return self._alive_outside_group()

    def _alive_outside_group(self) -> list[int]:
        table = _process_table()
        out = []
        for pid, start in self.tracked.items():
            if pid in table and table[pid][1] == start:  # the same process, not a reused pid
                try:
                    if os.getpgid(pid) != self.pgid:
                        out.append(pid)
                except ProcessLookupError:
                    continue
        return out

    def listens_on(self, port: int) -> bool | None:
        """Whether the socket listening on TCP `port` belongs to the program or a descendant: True,
        False (only other processes listen there), or None where this cannot be told (no /proc, or no
        listener on the port in this network namespace)."""
        self.track()
        inodes = listening_inodes(port)
        if not inodes:
            return None
        return bool(socket_owners(inodes, [self.pid, *self.tracked]))

    def died(self) -> str:
        """What a server that died at start-up said: its first error (the root cause, where a wrapper's
        traceback repeats below it), then its last lines."""
        tail = self.tail()
        first = root_cause(self.log_path)
        if first is None or first in tail.splitlines()[-3:]:
            return f"its last lines:\n{tail}"
        return f"its first error: {first}\nits last lines:\n{tail}"

    def tail(self, lines: int = 20) -> str:
        """The last lines of the program's output, for error messages."""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(max(0, os.path.getsize(self.log_path) - 64 * 1024))
                kept = deque(fh.read().decode("utf-8", "replace").splitlines(), maxlen=lines)
        except OSError:
            return ""
        return "\n".join(kept)

    def group_alive(self) -> bool:
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        # A zombie leader keeps the group "alive" until reaped; reap it and ask again.
        if self.proc.poll() is not None:
            try:
                os.killpg(self.pgid, 0)
            except ProcessLookupError:
                return False
        return True

    def stop(self, grace_s: float, on_signal: Callable[[str], None] | None = None) -> StopResult:
        """SIGINT, then SIGTERM, then SIGKILL to the whole group, each after grace_s, until nothing is left."""
        sent: list[str] = []
        for sig in STOP_SIGNALS:
            if not self.group_alive():
                break
            try:
                os.killpg(self.pgid, sig)
            except ProcessLookupError:
                break
            sent.append(sig.name)
            if on_signal:
                on_signal(sig.name)
            deadline = time.monotonic() + (grace_s if sig != signal.SIGKILL else 10.0)
            while time.monotonic() < deadline and self.group_alive():
                time.sleep(0.05)
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - a process that survives SIGKILL
            code = None
        outside = self._alive_outside_group()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in outside:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + (min(grace_s, 5.0) if sig == signal.SIGTERM else 5.0)
            while time.monotonic() < deadline and self._alive_outside_group():
                time.sleep(0.05)
            if not self._alive_outside_group():
                break
        return StopResult(code, sent, outside, self._alive_outside_group())


# -- HTTP to the server (the standard library: nothing to install) ----------------------
def http(method: str, url: str, body: dict | None = None, timeout: float = 10.0) -> tuple[int, bytes]:
    """(status, body); status 0 when nothing usable answered within `timeout` seconds of wall-clock
    time. A socket time-out restarts on every read, so a server trickling a byte a second would hold
    a plain request forever: a timer shuts the socket at the deadline, and a reply the timer cut is
    status 0 whatever was read of it (http.client takes the end of file after a status line for the
    end of the headers, so a /health that never finished its headers looked like a 200). A garbage
    status line, a reply cut short of its Content-Length, or anything else malformed is status 0 as
    well: a reply counts only when its status, headers and body all arrived within the deadline."""
    parts = urllib.parse.urlsplit(url)
    conn_cls = httplib.HTTPSConnection if parts.scheme == "https" else httplib.HTTPConnection
    conn = conn_cls(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
    data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query

    lock = threading.Lock()
    state = {"read": False, "cut": False}

    def cut() -> None:
        with lock:  # a reply read in full just before the deadline stays read
            if state["read"]:
                return
            state["cut"] = True
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    timer = threading.Timer(timeout, cut)
    timer.daemon = True
    timer.start()
    try:
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        payload = resp.read(MAX_REPLY_BYTES + 1)
        with lock:
            state["read"] = True
            if state["cut"]:
                return 0, b""  # the deadline came first: what was read is not the whole reply
        promised = resp.getheader("Content-Length")
        if len(payload) > MAX_REPLY_BYTES or (promised and promised.isdigit() and len(payload) < int(promised)):
            return 0, b""  # too much, or cut short of what it promised
        return resp.status, payload
    except (OSError, httplib.HTTPException, ValueError):
        return 0, b""
    finally:
        timer.cancel()
        conn.close()


MAX_REPLY_BYTES = 16 << 20  # a completion or health reply is small; more is a broken server


def wait_healthy(child: Child, base_url: str, timeout_s: float, tick: Callable[[float], None] | None = None) -> float:
    """Seconds until GET /health answered 200; ChildFailed if the program dies or the time runs out
    (a deadline on the wall clock: each probe is cut at its own deadline too)."""
    start = time.monotonic()
    while True:
        code = child.poll()
        if code is not None:
            raise ChildFailed(f"the server exited with status {code} before it was healthy; {child.died()}")
        left = timeout_s - (time.monotonic() - start)
        status, _ = http("GET", f"{base_url}/health", timeout=max(0.1, min(2.0, left)))
        waited = time.monotonic() - start
        if status == 200:
            return waited
        if waited > timeout_s:
            raise ChildFailed(
                f"the server was not healthy at {base_url}/health after {timeout_s:.0f} s "
                f"(raise --startup-timeout if it is still loading); its last lines:\n{child.tail()}"
            )
        if tick:
            tick(waited)
        time.sleep(0.5)


# An exception line of a Python traceback ("RuntimeError: ...", "torch.AcceleratorError: CUDA error: ..."),
# with or without a logger's prefix; and the wrappers' lines that only point up at the root cause.
_EXCEPTION = re.compile(r"(?:^|\] |\) )((?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Exit)(?:: .*)?)$")
_POINTS_UP = re.compile(r"see root cause above|initialization failed|died unexpectedly|Engine core .* failed", re.IGNORECASE)
ROOT_CAUSE_BYTES = 1 << 20  # a start-up log's last MiB: bounded, and where a failed start's tracebacks are


def root_cause(log_path: str | os.PathLike[str]) -> str | None:
    """The first exception line in a log's last MiB that is not a wrapper's pointer to another (vLLM's
    "Engine core initialization failed. See root cause above" ends 40 lines below the CUDA error that
    caused it); None where the log holds none."""
    try:
        with open(log_path, "rb") as fh:
            fh.seek(max(0, os.path.getsize(log_path) - ROOT_CAUSE_BYTES))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    for line in text.splitlines():
        m = _EXCEPTION.search(line.strip())
        if m is not None and not _POINTS_UP.search(m.group(1)):
            return m.group(1)[:400]
    return None
