"""A stand-in for the AFD plugin's FFN server, for the `record --peer-command` tests.

    python fake_peer.py serve MODEL --additional-config '{"afd": {"role": "ffn", "port": P}}'
        [--profiler-config JSON] [--behaviour normal|never-listen|die-at-start|die-on-start|ignore-sigint]
        [--pidfile F] [--stats F] [--trace T] [--plugin]

Like the real one it serves no HTTP: its "API server" (this process) starts an "engine" process
(this file again, with --engine) that listens on the AFD port and holds the one vLLM Worker,
registered with dbo_trace.record.control.keep_worker (--discover: an instance of a class named as
vLLM's, vllm.v1.worker.gpu_worker.Worker, that the control thread finds among the live objects, as
it finds vLLM's own) (with --plugin, after the plugin's register(),
which writes its event log and counters under $DBO_TRACE_DIR). A strong reference to the Worker is
kept here, as vLLM's worker process keeps its own. Worker.profile(True) marks the start;
Worker.profile(False) copies --trace (a real Kineto trace) into $DBO_TRACE_DIR/traces, as vLLM's
profiler writes its trace on stop. The API server exits when its engine does.

--pidfile gets both pids (API server, engine); --stats (written by the engine at each profile call
and at exit) what it was asked and when it listened.

Behaviours: never-listen (the engine never opens the port), die-at-start (exits 2 before
listening), die-on-start (the engine exits 3 once it has answered the profiler's start),
ignore-sigint (both processes ignore SIGINT).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

p = argparse.ArgumentParser()
p.add_argument("serve")
p.add_argument("model")
p.add_argument("--additional-config", required=True)
p.add_argument("--profiler-config")
p.add_argument("--behaviour", default="normal")
p.add_argument("--pidfile")
p.add_argument("--stats")
p.add_argument("--trace")
p.add_argument("--plugin", action="store_true")
p.add_argument("--discover", action="store_true", help="the Worker is vLLM's class, found by the control thread (gc)")
p.add_argument("--api-key", help="ignored (a command line that holds a secret)")
p.add_argument("--engine", action="store_true", help="internal: run as the engine process")
args = p.parse_args()
port = json.loads(args.additional_config)["afd"]["port"]

if args.behaviour == "ignore-sigint":
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def api_server() -> None:
    print("INFO fake AFD FFN server starting (no HTTP)", flush=True)
    if args.behaviour == "die-at-start":
        print("ERROR the FFN server failed to start (fake)", flush=True)
        sys.exit(2)
    engine = subprocess.Popen([sys.executable, *sys.argv, "--engine"])
    if args.pidfile:
        Path(args.pidfile).write_text(f"{os.getpid()}\n{engine.pid}\n")

    def on_signal(signum, frame):  # the group's signal reaches the engine too: wait for it to end
        pass

    signal.signal(signal.SIGTERM, on_signal)
    if args.behaviour != "ignore-sigint":
        signal.signal(signal.SIGINT, on_signal)
    code = engine.wait()
    print(f"INFO engine exited with status {code}", flush=True)
    sys.exit(code)


class Worker:
    """The part of vLLM's gpu_worker.Worker that record/control.py calls."""

    def __init__(self, stats: dict, save) -> None:
        self.stats, self.save = stats, save

    def profile(self, is_start: bool = True) -> None:
        self.stats["profile_calls"].append({"start": is_start, "unix": time.time()})
        if is_start:
            self.stats["profiling"] = True
            if args.behaviour == "die-on-start":
                threading.Timer(0.3, lambda: os._exit(3)).start()  # after the ack is written
        else:
            self.stats["profiling"] = False
            if args.trace:
                traces = Path(os.environ["DBO_TRACE_DIR"]) / "traces"
                traces.mkdir(parents=True, exist_ok=True)
                shutil.copy(args.trace, traces / "ffn_rank0.pt.trace.json.gz")
        self.save()


def engine() -> None:
    stats: dict = {"pid": os.getpid(), "listening_unix": None, "profile_calls": [], "signals": [], "profiling": False}

    def save() -> None:
        if args.stats:
            tmp = Path(args.stats + ".tmp")
            tmp.write_text(json.dumps(stats))
            os.replace(tmp, args.stats)

    def on_signal(signum, frame):
        stats["signals"].append(signal.Signals(signum).name)
        save()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_signal)
    if args.behaviour != "ignore-sigint":
        signal.signal(signal.SIGINT, on_signal)
    if args.plugin and os.environ.get("DBO_TRACE_DIR"):
        from dbo_trace.record.plugin import register

        register()
    from dbo_trace.record import control

    if args.discover:  # as in vLLM: an instance of vllm.v1.worker.gpu_worker.Worker, registered nowhere
        import types

        module = types.ModuleType(control.WORKER_MODULE)
        module.Worker = type("Worker", (Worker,), {})  # type: ignore[attr-defined]
        sys.modules[control.WORKER_MODULE] = module
        worker = module.Worker(stats, save)
        control.start()  # what the plugin's register() does where DBO_TRACE_CONTROL is set
    else:
        worker = Worker(stats, save)  # held here for the process's life, as vLLM holds its Worker
        control.keep_worker(worker)
    if args.behaviour == "never-listen":
        while True:
            time.sleep(1)
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(8)
    stats["listening_unix"] = time.time()
    save()
    print(f"INFO AFD connector listening on 127.0.0.1:{port}", flush=True)
    try:
        while True:
            conn, _ = server.accept()  # the attention side would connect; a probe just closes
            conn.close()
    finally:
        save()


if args.engine:
    engine()
else:
    api_server()
