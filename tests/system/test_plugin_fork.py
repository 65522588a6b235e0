"""vLLM forks its engine core from the API server (VLLM_WORKER_MULTIPROC_METHOD=fork by default), after the
plugin registered in the parent. Seen on vLLM 0.26: the child wrote into the parent's PID-named log and
counters, the parent overwrote the counters at exit with its own zero, and the model's graph replays were lost.
The child must get its own log and counters; records buffered at fork are written once, by the parent;
a child ended with os._exit (as multiprocessing ends forked workers, skipping atexit) still leaves counters."""

import json
import os
import subprocess
import sys

from conftest import ROOT

SCRIPT = r"""
import os, sys, time
from dbo_trace.record import plugin
plugin.register()
ins = plugin.installed()
ins.log.emit("parent_before_fork")          # buffered at fork: the parent's alone
ins.graph_event("graph_replay", "FULL", 8)  # a parent counter the child must not inherit
pid = os.fork()
if pid == 0:
    for _ in range(3):
        ins.graph_event("graph_replay", "FULL", 16)
    ins.log.emit("child_record")
    ins.log.flush()
    os._exit(0)                             # what multiprocessing does: atexit does not run
os.waitpid(pid, 0)
print(pid)
"""


def test_forked_child_writes_its_own_log_and_counters(tmp_path):
    env = {**os.environ, "DBO_TRACE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    child = int(proc.stdout.split()[-1])
    events = tmp_path / "events"
    logs = {p.stem.rsplit("-", 1)[1]: p.read_text().splitlines() for p in events.glob("*.jsonl")}
    assert set(logs) == {str(proc_pid) for proc_pid in (child, _parent_pid(logs, child))}
    child_log = logs[str(child)]
    parent_log = next(v for k, v in logs.items() if k != str(child))
    assert json.loads(child_log[0])["forked_from"] == json.loads(parent_log[0])["pid"]
    text_child, text_parent = "\n".join(child_log[1:]), "\n".join(parent_log[1:])
    assert "parent_before_fork" in text_parent and "parent_before_fork" not in text_child
    assert "child_record" in text_child and "child_record" not in text_parent
    counters = {json.loads(p.read_text())["pid"]: json.loads(p.read_text()) for p in events.glob("*.counters.json")}
    # The child's first graph event wrote its counters (periodic write); it counted its own replays only.
    assert counters[child]["counters"].get("graph_replay/FULL/8") is None
    assert counters[child]["counters"]["graph_replay/FULL/16"] >= 1
    parent = next(c for pid, c in counters.items() if pid != child)
    assert parent["reason"] == "exit" and parent["counters"] == {"graph_replay/FULL/8": 1}


def _parent_pid(logs, child):
    return next(int(k) for k in logs if k != str(child))
