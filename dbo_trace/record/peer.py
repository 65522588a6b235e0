"""A peer server recorded beside the main one: the AFD plugin's FFN server beside its attention server.

Disaggregated DBO has two roles, each a `vllm serve`: the attention server (the one `record` drives
with its load) and the FFN server, which the attention server connects to on the AFD port and
which serves no HTTP (docs/recording.md, "An AFD pair"). The peer starts first, in its own process
group; the main server starts once the peer's process tree listens on the AFD port. Its profiler is
started just before the main server's and stopped after the main server's traces are written,
through record/control.py (a command file the plugin polls in the peer's Worker), so both traces
cover the main server's profiled window on one clock. It is stopped after the main server.

Its files live under `peer/` in the bundle: `peer/server.log`, `peer/traces/` (its Kineto traces),
`peer/events/` (its event logs and counters), `peer/control.json` and `peer/acks/`.

Here too the pair's manifest claims of one GPU and MPS (gpu_sharing, recheck_mps, mps_fields), and
the Nudge that turns the FFN server's loop over while its profiler command waits.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from dbo_trace import serve_args
from dbo_trace.record import control, environment
from dbo_trace.record.child import Child, ChildFailed, http
from dbo_trace.record.plugin import ENV_DIR

PEER_DIR = "peer"
PEER_LOG = "server.log"


@dataclass(frozen=True)
class PeerPlan:
    command: list[str]  # the peer's `vllm serve ...`, as the user gave it
    ready_port: int | None = None  # the port whose listener says the peer is ready (default: its AFD port)
    role: str | None = None  # default: the AFD role in its --additional-config, else "peer"


def afd_config(argv: list[str]) -> dict | None:
    """The `afd` block of a command's --additional-config JSON, or None (read as a report reads it)."""
    return serve_args.afd_block(argv)


def role_of(argv: list[str], default: str) -> str:
    afd = afd_config(argv) or {}
    role = afd.get("role")
    return role if isinstance(role, str) and role.isidentifier() else default


def ready_port(plan: PeerPlan) -> int | None:
    if plan.ready_port:
        return plan.ready_port
    port = (afd_config(plan.command) or {}).get("port")
    return port if isinstance(port, int) and 0 < port < 65536 else None


class Peer:
    """The running peer: started, waited for, profiled on command, stopped."""

    def __init__(self, plan: PeerPlan, bundle: Path, env: dict[str, str], prepare: Callable[[list[str], Path], list[str]]):
        self.plan = plan
        self.folder = bundle / PEER_DIR
        self.traces = self.folder / "traces"
        self.role = plan.role or role_of(plan.command, "peer")
        self.port = ready_port(plan)
        self.control = self.folder / "control.json"
        self.argv = prepare(plan.command, self.traces)
        self.env = dict(env)
        self.env[ENV_DIR] = str(self.folder.resolve())
        self.env[control.ENV_CONTROL] = str(self.control.resolve())
        self.child: Child | None = None
        self._seq = 0
        self._sent_ns: dict[str, int] = {}
        self.last_sent: str | None = None  # the last command sent ("start": its profiler may be running)
        self.acks: dict[str, list[dict]] = {}

    def start(self) -> None:
        if self.port is None:
            raise ChildFailed(
                "the peer command names no AFD port (--additional-config '{\"afd\": {\"port\": P, ...}}'); "
                "give --peer-ready-port PORT: the main server starts once the peer listens there"
            )
        self.traces.mkdir(parents=True)
        (self.folder / "events").mkdir()
        try:
            self.child = Child(self.argv, self.env, self.folder / PEER_LOG)
        except ChildFailed:
            raise ChildFailed(f"{self.argv[0]}: the peer server cannot start; check --peer-command") from None

    def wait_ready(self, timeout_s: float, tick: Callable[[float], None] | None = None) -> float:
        """Seconds until the peer's process tree listens on its port (no connection is made: the AFD
        port is the connector's own)."""
        assert self.child is not None
        start = time.monotonic()
        while True:
            code = self.child.poll()
            if code is not None:
                raise ChildFailed(f"the peer server exited with status {code} before it listened on port {self.port}; {self.child.died()}")
            ours = self.child.listens_on(self.port)  # type: ignore[arg-type]
            if ours is True:
                return time.monotonic() - start
            if ours is False:  # a listener, but not the peer's: the main server would connect to it
                raise ChildFailed(
                    f"port {self.port} is held by a process outside the peer server's process tree (a peer "
                    "left from an earlier run?); stop it, or give the pair another AFD port"
                )
            waited = time.monotonic() - start
            if waited > timeout_s:
                raise ChildFailed(
                    f"the peer server did not listen on port {self.port} after {timeout_s:.0f} s "
                    f"(raise --startup-timeout if it is still loading); its last lines:\n{self.child.tail()}"
                )
            if tick:
                tick(waited)
            time.sleep(0.5)

    def alive(self) -> bool:
        return self.child is not None and self.child.poll() is None

    def profile(self, action: str, timeout_s: float, nudge: Callable[[], None] | None = None) -> dict:
        """Send start/stop to the peer's Workers; what they answered, for the manifest. A Worker that runs
        its own loop takes the command at its next iteration (control.py): `nudge` is called while
        it waits (the recorder sends a request through the main server then)."""
        if action == "stop" and not any(a.get("ok") or control.is_queued(a) for a in self.acks.get("start") or []):
            timeout_s = min(timeout_s, 15.0)  # nothing answered the start: do not wait out a trace that will not come
        self.last_sent = action  # before the wait: a run interrupted inside it still knows to send stop
        self._seq += 1
        self._sent_ns[action] = time.time_ns()
        control.send(self.control, self._seq, action)
        acks = control.wait_acks(self.control, self._seq, timeout_s, self.alive, while_queued=nudge)
        self.acks[action] = acks
        keys = ("pid", "state", "ok", "error", "workers", "where", "queued_ns", "started_ns", "ended_ns")
        return {
            "action": action,
            "sent_ns": self._sent_ns[action],
            "acks": [{k: a.get(k) for k in keys} for a in acks],
            "ok": bool(acks) and all(a.get("ok") for a in acks),
        }

    def manifest(self, bundle: Path) -> dict:
        return {
            "role": self.role,
            "command": self.argv,
            "user_command": self.plan.command,
            "settings": serve_args.serve_settings(self.plan.command),
            "afd": afd_config(self.plan.command),
            "ready_port": self.port,
            "pid": self.child.pid if self.child else None,
            "log": f"{PEER_DIR}/{PEER_LOG}",
        }


# -- the pair on its GPUs, and its loop turned over ------------------------------------------
def gpu_sharing(main_env: dict[str, str], peer: Peer) -> dict:
    """Whether the two roles ran on one GPU (the same CUDA_VISIBLE_DEVICES, or none set on a one-GPU
    host) and under MPS: one-GPU figures must never pass for two-GPU ones (docs/recording.md)."""

    def visible(env: dict[str, str], argv: list[str]) -> str | None:
        for arg in argv[1:] if argv and os.path.basename(argv[0]) == "env" else []:
            if arg.startswith("CUDA_VISIBLE_DEVICES="):
                return arg.split("=", 1)[1]
        return env.get("CUDA_VISIBLE_DEVICES")

    ours, theirs = visible(main_env, []), visible(peer.env, peer.plan.command)
    gpus = environment.gpus().get("names") or []
    shared = (ours == theirs and ours is not None and "," not in ours) or (ours is None and theirs is None and len(gpus) == 1)
    return {
        "shared_gpu": shared,
        "visible_devices": {"main": ours, "peer": theirs},
        **mps_fields(environment.mps_status(main_env)),
    }


def mps_fields(status: dict) -> dict:
    """The manifest's MPS claim: `mps` is true only where the control daemon answered (and, once the
    roles' processes were asked after, both were its clients); false where it did not answer; null
    where nothing could tell (no control tool)."""
    daemon = status.get("daemon")
    roles = status.get("roles_as_clients")
    mps = None if daemon == "unknown" else daemon == "answered" and (roles is None or all(roles.values()))
    return {"mps": mps, "mps_daemon": daemon, "mps_check": status}


def recheck_mps(manifest: dict, child: Child, peer: Peer) -> None:
    """With both servers up: is each role's CUDA context an MPS client? (A daemon that answered before
    they started may have refused them, or been stopped since.)"""
    sharing = manifest.get("gpu_sharing")
    if not isinstance(sharing, dict) or sharing.get("mps_daemon") != "answered" or peer.child is None:
        return
    child.track()
    peer.child.track()
    main_role = next((role for role, body in (manifest.get("roles") or {}).items() if not body.get("peer")), "main")
    pids = {main_role: [child.pid, *child.tracked], peer.role: [peer.child.pid, *peer.child.tracked]}
    sharing.update(mps_fields(environment.mps_status(peer.env, pids)))


class Nudge:
    """One small request at a time through the main server, so that a peer's loop holding a profiler
    command turns over (control.py): the FFN iterates only when the attention side sends it work."""

    PROMPT = "dbo-trace: one step so that the FFN server's loop turns over"

    def __init__(self, base_url: str, model: str, timeout_s: float):
        self.base_url, self.model, self.timeout_s = base_url, model, timeout_s
        self.sent = 0
        self._thread: threading.Thread | None = None

    def __call__(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self.sent += 1
        body = {"model": self.model, "prompt": self.PROMPT, "max_tokens": 2}
        self._thread = threading.Thread(
            target=http, args=("POST", f"{self.base_url}/v1/completions", body, self.timeout_s), daemon=True, name="dbo-trace-nudge"
        )
        self._thread.start()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join(self.timeout_s)
