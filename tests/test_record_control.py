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
