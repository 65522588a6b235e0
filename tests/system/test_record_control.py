"""record/control.py, the profiler's command file, in a process of its own (its thread is per process):
the thread answers each command once, reports a failing Worker in its ack, and never dies or raises
on a broken command file, an unwritable acks folder or a Worker that raises anything."""

import json
import subprocess
import sys
import textwrap

from conftest import ROOT

SCRIPT = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from dbo_trace.record import control

    path = Path(sys.argv[1])
    calls = []

    class Good:
        def profile(self, is_start=True):
            calls.append(("good", is_start))

    class Bad:
        def profile(self, is_start=True):
            raise RuntimeError("Profiling is not enabled (planted)")

    assert control.keep_worker(Good()) is None and control._thread is None  # no DBO_TRACE_CONTROL: nothing runs
    os.environ[control.ENV_CONTROL] = str(path)
    good, bad = Good(), Bad()
    control.keep_worker(good)
    control.keep_worker(good)  # kept once, one thread
    thread = control._thread
    out = {}

    def ack(seq, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            acks = control.read_acks(path, seq)
            if acks:
                return acks
            time.sleep(0.02)
        return []

    control.send(path, 1, "start")
    out["start"] = ack(1)
    control.send(path, 1, "stop")  # a seq already answered: ignored
    time.sleep(0.3)
    out["calls_after_repeat"] = list(calls)
    for junk in (b"", b"not json", b"[1, 2]", b'{"seq": "x", "action": "start"}', b'{"seq": 9, "action": "explode"}',
                 b"[" * 100000, b'{"seq": 9, "action": "start", "pad": "' + b"x" * 10000 + b'"}'):
        path.write_bytes(junk)
        time.sleep(0.05)
    out["calls_after_junk"] = list(calls)
    path.unlink()
    time.sleep(0.05)
    control.keep_worker(bad)
    control.send(path, 2, "stop")
    out["bad"] = ack(2)
    acks = path.parent / control.ACKS_DIR
    for f in acks.iterdir():
        f.unlink()
    acks.rmdir()
    acks.write_text("a file where the folder goes: the ack cannot be written")
    control.send(path, 3, "start")
    time.sleep(0.5)
    acks.unlink()
    control.send(path, 4, "stop")
    out["after_unwritable"] = ack(4)
    out["alive"] = thread.is_alive() and control._thread is thread
    print(json.dumps(out))
    """
)


def test_the_control_thread_answers_once_reports_failures_and_never_dies(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "control.json")], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    out = json.loads(proc.stdout)
    (start,) = out["start"]
    assert (start["seq"], start["action"], start["ok"], start["workers"], start["error"]) == (1, "start", True, 1, None)
    assert start["started_ns"] <= start["ended_ns"]
    assert out["calls_after_repeat"] == [["good", True]]  # seq 1 again: not called twice
    assert out["calls_after_junk"] == [["good", True]]  # no junk reached a Worker
    (bad,) = out["bad"]
    assert bad["ok"] is False and bad["workers"] == 2 and "Profiling is not enabled (planted)" in bad["error"]
    (after,) = out["after_unwritable"]
    assert after["seq"] == 4 and after["action"] == "stop"
    assert out["alive"] is True


FORK_SCRIPT = textwrap.dedent(
    """
    import json, os, sys, time, types
    from pathlib import Path
    from dbo_trace.record import control

    path = Path(sys.argv[1])
    os.environ[control.ENV_CONTROL] = str(path)
    module = types.ModuleType(control.WORKER_MODULE)

    class Worker:
        def profile(self, is_start=True):
            pass

    module.Worker = Worker
    sys.modules[control.WORKER_MODULE] = module
    worker = Worker()  # vLLM's class by name, registered nowhere: found among the live objects
    control.start()
    os.register_at_fork(after_in_child=control.after_fork_in_child)
    pid = os.fork()
    if pid == 0:  # the child (vLLM's engine core is forked so): its own thread, its own ack
        time.sleep(3)
        os._exit(0)
    control.send(path, 1, "start")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(control.read_acks(path, 1)) < 2:
        time.sleep(0.05)
    print(json.dumps({"acks": control.read_acks(path, 1), "child": pid, "parent": os.getpid()}))
    os.waitpid(pid, 0)
    """
)


def test_a_forked_child_answers_with_its_own_thread_and_finds_vllms_worker_class(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", FORK_SCRIPT, str(tmp_path / "control.json")], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    out = json.loads(proc.stdout)
    assert sorted(a["pid"] for a in out["acks"]) == sorted([out["child"], out["parent"]])
    assert all(a["ok"] and a["workers"] == 1 and a["action"] == "start" for a in out["acks"])


FROZEN_SCRIPT = textwrap.dedent(
    """
    import gc, json, os, sys, threading, time, types
    from pathlib import Path
    from dbo_trace.record import control

    path = Path(sys.argv[1])
    os.environ[control.ENV_CONTROL] = str(path)
    module = types.ModuleType(control.WORKER_MODULE)
    calls = []

    class Worker:
        def profile(self, is_start=True):
            calls.append(is_start)

    module.Worker = Worker
    sys.modules[control.WORKER_MODULE] = module
    ready = threading.Event()

    def engine_loop():  # the Worker lives in a thread's frame, as vLLM's engine core holds it
        worker = Worker()
        ready.set()
        while True:
            time.sleep(0.05)

    threading.Thread(target=engine_loop, daemon=True).start()
    ready.wait()
    gc.freeze()  # vLLM's freeze_gc_heap() after start-up
    frozen = gc.get_freeze_count()
    listed = sum(type(o) is Worker for o in gc.get_objects())
    control.start()
    control.send(path, 1, "start")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not control.read_acks(path, 1):
        time.sleep(0.02)
    print(json.dumps({"listed": listed, "acks": control.read_acks(path, 1), "calls": calls,
                      "frozen_before": frozen, "frozen_after": gc.get_freeze_count()}))
    """
)


def test_a_worker_in_a_frozen_heap_is_found_and_the_heap_stays_frozen(tmp_path):
    """CPython's gc.get_objects() leaves out what gc.freeze() froze (as vLLM freezes its heap after
    start-up): the Worker is found from the threads' frames, and nothing is unfrozen."""
    proc = subprocess.run(
        [sys.executable, "-c", FROZEN_SCRIPT, str(tmp_path / "control.json")], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    out = json.loads(proc.stdout)
    assert out["listed"] == 0  # the real library's behaviour this guards against
    (ack,) = out["acks"]
    assert (ack["ok"], ack["workers"], ack["where"], ack["state"]) == (True, 1, "poller", "done")
    assert out["calls"] == [True]
    assert out["frozen_before"] > 0 and out["frozen_after"] >= out["frozen_before"]


LOOP_SCRIPT = textwrap.dedent(
    """
    import json, os, queue, sys, threading, time
    from pathlib import Path
    from dbo_trace.record import control

    path = Path(sys.argv[1])
    os.environ[control.ENV_CONTROL] = str(path)
    steps = queue.Queue()
    log = []

    class Plane:
        def recv_dp_metadata_list(self):
            log.append("recv")
            return steps.get()

    class Holder:
        pass

    class FfnWorker:  # AFDFFNWorker's shape
        def __init__(self):
            self.model_runner = Holder()
            self.model_runner.connector = Holder()
            self.model_runner.connector.control_plane = Plane()

        def profile(self, is_start=True):
            log.append(("profile", is_start, threading.current_thread().name))

        def _run_ffn_server_loop(self):
            while True:
                if self.model_runner.connector.control_plane.recv_dp_metadata_list() is None:
                    return
                log.append("step")

    worker = FfnWorker()
    threading.Thread(target=worker._run_ffn_server_loop, name="ffn-loop", daemon=True).start()
    control.keep_worker(worker)

    def acks(seq, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = control.read_acks(path, seq)
            if found and not control.is_queued(found[0]):
                return found
            time.sleep(0.02)
        return control.read_acks(path, seq)

    out = {}
    control.send(path, 1, "start")
    time.sleep(0.5)
    out["queued"] = control.read_acks(path, 1)
    out["before_step"] = list(log)
    steps.put("step 1")  # traffic: the loop turns over and runs the start at its next top
    out["start"] = acks(1)
    control.send(path, 2, "start")
    time.sleep(0.3)
    control.send(path, 3, "stop")  # no traffic between: the queued start is overtaken, never run
    time.sleep(0.3)
    steps.put("step 2")
    out["stop"] = acks(3)
    out["log"] = log
    steps.put(None)
    print(json.dumps(out))
    """
)


def test_a_worker_with_its_own_loop_runs_the_command_on_the_loop_between_iterations(tmp_path):
    """The FFN's loop always has a receive in flight; the profiler must be switched on the loop's own
    thread at the top of an iteration (where nothing is in flight), not from the polling thread."""
    proc = subprocess.run(
        [sys.executable, "-c", LOOP_SCRIPT, str(tmp_path / "control.json")], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    out = json.loads(proc.stdout)
    (queued,) = out["queued"]
    assert (queued["state"], queued["where"], queued["ok"], queued["started_ns"]) == ("queued", "loop", None, None)
    assert out["before_step"] == ["recv"]  # nothing ran while the loop waited for its step
    (start,) = out["start"]
    assert (start["state"], start["ok"], start["where"]) == ("done", True, "loop")
    assert start["queued_ns"] <= start["started_ns"] <= start["ended_ns"]
    (stop,) = out["stop"]
    assert (stop["state"], stop["ok"], stop["action"]) == ("done", True, "stop")
    # Each profile call ran on the loop's thread, after a step and before the next receive.
    log = [tuple(x) if isinstance(x, list) else x for x in out["log"]]
    # (the loop's last receive may come after the log was read)
    assert log[:6] == ["recv", "step", ("profile", True, "ffn-loop"), "recv", "step", ("profile", False, "ffn-loop")]
    assert log[6:] in ([], ["recv"])
