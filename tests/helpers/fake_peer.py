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

--ffn-loop: the engine behaves as the AFD plugin's FFN engine core does on the GPU (seen on the H200,
docs/recording.md): the Worker is vLLM's class, the heap is frozen after start-up (`gc.freeze()`, as
vLLM's `freeze_gc_heap` does, so `gc.get_objects()` no longer lists the Worker), and a thread runs
the Worker's own loop (`_run_ffn_server_loop`): receive a step from the attention side (the stand-in
attention server sends one line per request it serves), compute, answer, synchronize. A receive is
GPU work in flight from the moment it is posted until its data came; Worker.profile() waits, as the
torch profiler's CUPTI set-up and device synchronize do, until no such work is in flight, which from
a thread other than the loop's means until the attention side sends a step or goes away.
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
import types
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
p.add_argument("--ffn-loop", action="store_true", help="a frozen heap and the FFN's own loop, fed by the attention side")
p.add_argument("--api-key", help="ignored (a command line that holds a secret)")
p.add_argument("--enable-dbo", action="store_true", help="vLLM's; ignored (a sweep's dbo-on arm adds it)")
p.add_argument("--note", action="append", help="any text, ignored (an arm's flags)")
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
        self.in_flight = threading.Condition()
        self.pending = False  # GPU work in flight (a posted receive, or a step's compute)
        self.loop_thread: threading.Thread | None = None

    def profile(self, is_start: bool = True) -> None:
        waited = time.monotonic()
        with self.in_flight:  # the profiler's start and stop wait for the GPU work in flight
            self.in_flight.wait_for(lambda: not self.pending)
        waited = time.monotonic() - waited
        on_loop = threading.current_thread() is self.loop_thread
        self.stats["profile_calls"].append({"start": is_start, "unix": time.time(), "on_loop": on_loop, "waited_s": waited})
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


class ControlPlane:
    """The AFD connector's control plane, as the FFN's loop calls it: one step's payload per call."""

    def __init__(self, worker: "FfnWorker") -> None:
        self.worker = worker
        self.conn: socket.socket | None = None
        self.reader = None

    def recv_dp_metadata_list(self) -> bytes:
        w = self.worker
        with w.in_flight:
            w.pending = True  # the receive is posted: in flight until its data comes
        line = self.reader.readline() if self.reader is not None else b""
        if not line:  # the attention side went away: the receive fails, nothing is in flight
            with w.in_flight:
                w.pending = False
                w.in_flight.notify_all()
            raise ConnectionError("the attention side closed the AFD connection")
        return line


class FfnWorker(Worker):
    """AFDFFNWorker's shape: model_runner.connector.control_plane, and its own loop."""

    def __init__(self, stats: dict, save) -> None:
        super().__init__(stats, save)
        self.model_runner = types.SimpleNamespace(connector=types.SimpleNamespace(control_plane=ControlPlane(self)))

    def _run_ffn_server_loop(self) -> None:
        plane = self.model_runner.connector.control_plane
        while True:
            try:
                plane.recv_dp_metadata_list()
            except ConnectionError:
                return
            time.sleep(0.002)  # the step's compute, still in flight
            plane.conn.sendall(b"ok\n")
            with self.in_flight:  # torch.cuda.synchronize(): nothing in flight at the loop's top
                self.pending = False
                self.in_flight.notify_all()
            self.stats["steps"] = self.stats.get("steps", 0) + 1


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

    if args.discover or args.ffn_loop:  # as in vLLM: an instance of vllm.v1.worker.gpu_worker.Worker, registered nowhere
        import gc

        module = types.ModuleType(control.WORKER_MODULE)
        module.Worker = type("Worker", (Worker,), {})  # type: ignore[attr-defined]
        sys.modules[control.WORKER_MODULE] = module
        if args.ffn_loop:  # the AFD plugin's worker subclasses vLLM's
            worker = type("AFDFFNWorker", (FfnWorker, module.Worker), {})(stats, save)
            gc.freeze()  # vLLM's freeze_gc_heap() once the engine has started
        else:
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
            conn, _ = server.accept()  # the attention side connects; a probe just closes
            if not args.ffn_loop or worker.loop_thread is not None:
                conn.close()
                continue
            plane = worker.model_runner.connector.control_plane
            plane.conn, plane.reader = conn, conn.makefile("rb")
            worker.loop_thread = threading.Thread(target=worker._run_ffn_server_loop, daemon=True, name="afd-ffn-worker-loop")
            worker.loop_thread.start()
    finally:
        save()


if args.engine:
    engine()
else:
    api_server()
