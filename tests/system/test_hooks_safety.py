"""The hooks never hurt their host: no record lost or repeated under a concurrent flush, a broken
context object turns the hooks off instead of raising into vLLM, and exit stays quiet when the
events folder is gone."""

import json
import os
import shutil
import subprocess
import sys
import threading

from conftest import ROOT

from dbo_trace.record.events import EventLog


def test_concurrent_emit_and_flush_lose_and_repeat_nothing(tmp_path):
    log = EventLog(tmp_path / "events")
    n_threads, per_thread = 4, 20_000
    stop = threading.Event()

    def emitter(k):
        for i in range(per_thread):
            log.emit("x", k, i)

    def flusher():
        while not stop.is_set():
            log.flush()

    f = threading.Thread(target=flusher)
    f.start()
    workers = [threading.Thread(target=emitter, args=(k,)) for k in range(n_threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    f.join()
    log.flush()
    lines = log.path.read_text().splitlines()[1:]  # after the header
    seen = [tuple(json.loads(line)[4:7:2]) for line in lines]  # (ubatch, detail)
    assert len(seen) == n_threads * per_thread
    assert set(seen) == {(k, i) for k in range(n_threads) for i in range(per_thread)}


SCRIPT = r"""
import sys, types
mod = types.ModuleType("standin_ubatching")
class UBatchContext:
    exited = 0
    def __enter__(self): return self
    def __exit__(self, *exc):
        UBatchContext.exited += 1
        return False
    def _cpu_yield(self): return "yielded"
    def update_stream(self, stream): return None
    @property
    def id(self): raise RuntimeError("no id here")
mod.UBatchContext = UBatchContext
sys.modules["standin_ubatching"] = mod
from dbo_trace.record import plugin
from dbo_trace.record.vllm_targets import context_targets
plugin.register(extra_targets=context_targets("standin_ubatching"))
ins = plugin.installed()
ctx = UBatchContext()
with ctx:
    assert ctx._cpu_yield() == "yielded"
with ctx:
    pass
print(UBatchContext.exited, ins.enabled)
"""


def test_a_context_whose_id_raises_turns_the_hooks_off_and_the_host_runs_on(tmp_path):
    env = {**os.environ, "DBO_TRACE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["2", "False"]  # both original __exit__ ran; hooks off
    (log,) = (tmp_path / "events").glob("*.jsonl")
    assert "no id here" in log.read_text()  # the failure is written down once, for the report


def test_exit_is_quiet_when_the_events_folder_is_gone(tmp_path):
    script = (
        "import shutil, sys\n"
        "from dbo_trace.record import plugin\n"
        "plugin.register()\n"
        "ins = plugin.installed()\n"
        "ins.log.emit('x')\n"
        "shutil.rmtree(sys.argv[1])\n"
    )
    env = {**os.environ, "DBO_TRACE_DIR": str(tmp_path / "b"), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "b")], capture_output=True, text=True, env=env)
    assert proc.returncode == 0
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    shutil.rmtree(tmp_path, ignore_errors=True)


GRAPH_MANAGER = r"""
import json, sys, types
mod = types.ModuleType("standin_cudagraph_utils")
class Desc:
    num_tokens = 64
class CudaGraphManager:  # vLLM's V2 model runner: FULL graphs replay here, not in CUDAGraphWrapper
    replays = 0
    def run_fullgraph(self, desc):
        CudaGraphManager.replays += 1
        return "hidden"
class ModelCudaGraphManager(CudaGraphManager):
    def run_fullgraph(self, desc):
        return super().run_fullgraph(desc)
mod.CudaGraphManager = CudaGraphManager
sys.modules["standin_cudagraph_utils"] = mod
from dbo_trace.record import plugin
from dbo_trace.record.vllm_targets import graph_manager_targets
plugin.register(extra_targets=graph_manager_targets("standin_cudagraph_utils"))
ins = plugin.installed()
m = ModelCudaGraphManager()
results = [m.run_fullgraph(Desc()) for _ in range(3)] + [m.run_fullgraph(object())]  # a descriptor without tokens
ins.write_counters("test")
print(json.dumps({"results": results, "replays": CudaGraphManager.replays, "counters": ins.counters, "on": ins.enabled}))
"""


def test_the_v2_model_runners_full_graph_replays_are_counted_once_each(tmp_path):
    """vLLM's V2 model runner (DeepSeek-V2 on 0.26) replays FULL graphs through
    CudaGraphManager.run_fullgraph; a subclass's override that calls super() is one replay, not two,
    and a descriptor without a token count is still a replay."""
    env = {**os.environ, "DBO_TRACE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", GRAPH_MANAGER], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["results"] == ["hidden"] * 4 and out["replays"] == 4 and out["on"]
    replays = {k: v for k, v in out["counters"].items() if k.startswith("graph_replay/")}
    assert replays == {"graph_replay/FULL/64": 3, "graph_replay/FULL/None": 1}
    (log,) = (tmp_path / "events").glob("*.jsonl")
    assert log.read_text().count('"graph_replay"') == 4
