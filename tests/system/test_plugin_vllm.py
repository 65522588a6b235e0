"""The plugin against vLLM 0.33's real classes, on the CPU (CI installs CPU torch and vLLM without its deps).

Each case runs tests/helpers/vllm_pingpong.py in a fresh process: vLLM's own
load_general_plugins() must find and activate the plugin, and vLLM's own
UBatchContext drives the two microbatch threads. The threads write down what
really happened (who ran, on which stream, when); the event log must agree.
"""

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT, require_module

require_module("vllm")
require_module("torch")

from dbo_trace.trace.eventlog import read_event_log  # noqa: E402

LAYERS = 3
SCRIPT = ROOT / "tests" / "helpers" / "vllm_pingpong.py"


def run_pingpong(env_dir):
    env = {k: v for k, v in os.environ.items() if k != "DBO_TRACE_DIR"}
    if env_dir is not None:
        env["DBO_TRACE_DIR"] = str(env_dir)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(LAYERS)], capture_output=True, text=True, env=env, cwd=env_dir or ROOT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bundle")
    out = run_pingpong(folder)
    return folder, out, read_event_log(next((folder / "events").glob("*.jsonl")))


def test_vllm_loader_finds_and_activates_the_plugin(traced):
    _, out, log = traced
    assert out["enter_is_wrapped"]
    for name in (
        "UBatchContext.__enter__",
        "UBatchContext.__exit__",
        "UBatchContext._cpu_yield",
        "UBatchContext.update_stream",
        "UBatchWrapper.__call__",
        "CUDAGraphWrapper.__call__",
        "TorchProfilerWrapper.__init__",
        "WorkerProfiler.stop",
    ):
        assert any(p.endswith(name) for p in out["patched"]), name
    assert log.header["vllm"] == "0.33.0"


def test_vllm_profiler_gets_profile_all_threads(traced):
    _, out, _ = traced
    assert out["profiler_experimental_config"] == "_ExperimentalConfig"


def test_nothing_is_patched_without_dbo_trace_dir(tmp_path):
    out = run_pingpong(None)
    assert out["patched"] == [] and not out["enter_is_wrapped"] and out["log"] is None
    assert out["profiler_experimental_config"] is None  # vLLM's own profiler, untouched
    assert out["wrapper_result"] == "ran" and len(out["truth"]) == 2 * 4 * LAYERS


def test_every_record_names_the_thread_that_really_ran(traced):
    _, out, log = traced
    threads = {op["ubatch"]: (op["ident"], op["native"]) for op in out["truth"]}
    assert len(threads) == 2
    ub_records = [r for r in log.records if r[4] >= 0]
    assert ub_records
    for _, kind, ident, native, ubatch, _, _ in ub_records:
        assert (ident, native) == threads[ubatch], (kind, ubatch)


def test_exactly_one_microbatch_holds_the_cpu_at_any_record(traced):
    _, _, log = traced
    running = None  # the microbatch holding the CPU; None during a hand-over
    for _, kind, _, _, ubatch, _, _ in log.records:
        if ubatch < 0 or kind == "ub_wait":
            continue
        if kind in ("ub_run", "resume"):
            assert running is None, (kind, ubatch)
            running = ubatch
        else:
            assert running == ubatch, (kind, ubatch)
            if kind in ("yield", "ub_exit"):
                running = None
    kinds = [(r[1], r[4]) for r in log.records]
    for u in (0, 1):
        assert kinds.count(("yield", u)) == kinds.count(("resume", u)) == 4 * LAYERS
        assert kinds.count(("ub_run", u)) == kinds.count(("ub_exit", u)) == 1


def test_phase_from_the_log_matches_the_stream_each_operation_ran_on(traced):
    _, out, log = traced
    for op in out["truth"]:
        phase = "compute"  # UBatchContext starts each microbatch on the compute stream
        for t_ns, kind, _, _, ubatch, _, detail in log.records:
            if t_ns > op["t_ns"]:
                break
            if kind == "stream" and ubatch == op["ubatch"]:
                phase = detail
        assert phase == op["stream"], op


def test_the_ubatch_wrapper_step_is_logged_with_its_path(traced):
    _, out, log = traced
    assert out["wrapper_result"] == "ran"  # vLLM's own branch ran, untouched
    steps = [(r[1], r[6]) for r in log.records if r[1] in ("step_begin", "step_end")]
    assert steps == [("step_begin", {"path": "not_microbatched", "tokens": None}), ("step_end", None)]


def test_counters_are_written_at_exit(traced):
    folder, out, _ = traced
    assert out["counters_at_profiler_stop"] == "profiler_stop"
    (path,) = (folder / "events").glob("*.counters.json")
    body = json.loads(path.read_text())
    # Written at the profiler's stop, then replaced at exit.
    assert body["format"] == "dbo-trace-counters" and body["reason"] == "exit" and body["hooks_enabled"]
    assert body["counters"]["ubatch.yields"] == 2 * 4 * LAYERS
    assert body["counters"]["steps.not_microbatched"] == 1
