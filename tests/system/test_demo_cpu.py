"""`dbo-trace demo`'s orchestration on the CPU (stand-in streams): threads, ping-pong order, recording,
and the multi-process launch over gloo. Verdicts need a GPU and are checked on the H200 (docs/demo.md)."""

import json
import os
import subprocess
import sys

import pytest
from conftest import require_module, run_cli

require_module("torch")

from dbo_trace.demo.run import sweep_verdicts  # noqa: E402
from dbo_trace.trace.eventlog import read_event_log  # noqa: E402

LAYERS = 2
SMALL = ("--hidden", "64", "--tokens", "128", "--layers", str(LAYERS), "--steps", "2")


def logs_of(bundle):
    return [read_event_log(p) for p in sorted((bundle / "events").glob("*.jsonl"))]


def one_step(log, step):
    return [(r[1], r[4], r[6]) for r in log.records if r[5] == step and r[4] >= 0]


@pytest.fixture(scope="module")
def demo_all(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "run"
    proc = run_cli("demo", "--device", "cpu", "--mode", "all", *SMALL, "-o", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


def test_demo_cpu_records_every_mode_it_can_run(demo_all):
    out, proc = demo_all
    cpu_modes = ["hostbound", "late", "overlap", "serial", "smhungry"]  # no CUDA graphs on a CPU
    assert sorted(p.name for p in out.iterdir()) == cpu_modes
    for mode in cpu_modes:
        m = json.loads((out / mode / "manifest.json").read_text())
        assert m["status"] == "complete" and m["created_by"] == "dbo-trace demo"
        assert m["workload"]["mode"] == mode and m["comm_kernels"] == ["spin_kernel"]
        assert len(m["traces"]) == 1 and len(m["events"]) == 1
    assert "ran (CPU: not diagnosed)" in proc.stdout


def test_overlap_mode_yields_at_every_switch_in_turn(demo_all):
    out, _ = demo_all
    (log,) = logs_of(out / "overlap")
    step = max(r[5] for r in log.records)
    records = one_step(log, step)
    yields = [u for kind, u, _ in records if kind == "yield"]
    # Four switches per layer, each a yield, and the two microbatches hand the CPU back and forth.
    assert yields.count(0) == yields.count(1) == 4 * LAYERS
    assert all(a != b for a, b in zip(yields, yields[1:]))
    layers = [(u, d) for kind, u, d in records if kind == "layer"]
    assert sorted(layers) == [(u, layer) for u in (0, 1) for layer in range(LAYERS)]


def test_serial_mode_runs_one_microbatch_after_the_other(demo_all):
    out, _ = demo_all
    (log,) = logs_of(out / "serial")
    step = max(r[5] for r in log.records)
    records = one_step(log, step)
    assert not [r for r in records if r[0] == "yield"]
    kinds = [(kind, u) for kind, u, _ in records]
    assert kinds.index(("ub_exit", 0)) < kinds.index(("ub_run", 1))
    streams = [d for kind, u, d in records if kind == "stream" and u == 0]
    assert streams == ["comm", "compute"] * 2 * LAYERS


def test_two_ranks_over_gloo_record_a_trace_and_a_log_each(tmp_path):
    out = tmp_path / "run"
    proc = run_cli("demo", "--device", "cpu", "--mode", "overlap", "--nproc", "2", *SMALL, "-o", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    bundle = out / "overlap"
    m = json.loads((bundle / "manifest.json").read_text())
    assert m["workload"]["comm"]["kind"] == "all_to_all" and m["workload"]["comm"]["backend"] == "gloo"
    assert m["workload"]["nproc"] == 2 and m["comm_kernels"] == []
    assert sorted(t.split("/")[1].split(".")[0] for t in m["traces"]) == ["rank0", "rank1"]
    logs = logs_of(bundle)
    assert len(logs) == 2 and logs[0].pid != logs[1].pid
    # Both ranks hand over in the same order: their collectives pair up.
    orders = [[(k, u) for k, u, _ in one_step(log, max(r[5] for r in log.records)) if k in ("yield", "resume")] for log in logs]
    assert orders[0] == orders[1] and len(orders[0]) == 2 * 2 * 4 * LAYERS


def test_builtin_ubatching_behaves_like_vllms(tmp_path):
    env = {**os.environ, "DBO_TRACE_DIR": str(tmp_path)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dbo_trace.demo.worker",
            "--device",
            "cpu",
            "--mode",
            "overlap",
            "--ubatching",
            "builtin",
            *SMALL,
            "--warmup",
            "1",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((tmp_path / "workload.json").read_text())["ubatching"] == "built-in"
    (log,) = logs_of(tmp_path)
    records = one_step(log, max(r[5] for r in log.records))
    yields = [u for kind, u, _ in records if kind == "yield"]
    assert yields.count(0) == yields.count(1) == 4 * LAYERS and all(a != b for a, b in zip(yields, yields[1:]))


def test_demo_without_a_gpu_says_so_and_fails(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    proc = run_cli("demo", "--mode", "overlap", "-o", str(tmp_path / "x"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "dbo-trace: error: no CUDA GPU is visible: dbo-trace demo runs its workload on a GPU (`dbo-trace report` runs anywhere)"
    )
    assert not (tmp_path / "x").exists()


def test_sweep_verdicts_compare_the_gain_with_the_criterion():
    pays = {"serial_step_us": 1000.0, "dbo_step_us": 800.0, "ratio": 1.5}
    assert sweep_verdicts(pays) == {"gain": pytest.approx(0.2), "pays": True, "predicted": True, "agree": True}
    noise = {"serial_step_us": 1000.0, "dbo_step_us": 990.0, "ratio": 1.2}
    assert sweep_verdicts(noise)["pays"] is False and sweep_verdicts(noise)["agree"] is False
    slower = {"serial_step_us": 1000.0, "dbo_step_us": 1300.0, "ratio": 0.4}
    assert sweep_verdicts(slower)["agree"] is True
    unknown = {"serial_step_us": 1000.0, "dbo_step_us": 900.0, "ratio": None}
    assert sweep_verdicts(unknown)["predicted"] is None and sweep_verdicts(unknown)["agree"] is None


def test_all_to_all_over_one_process_is_refused(tmp_path):
    proc = run_cli("demo", "--device", "cpu", "--comm", "all_to_all", "-o", str(tmp_path / "x"))
    assert proc.returncode == 2 and "--comm all_to_all needs --nproc 2 or more" in proc.stderr
    assert not (tmp_path / "x").exists()


def test_a_failing_sweep_worker_is_one_error_line(tmp_path, monkeypatch):
    """The worker (a process of its own) fails importing a torch that raises: one line, its error."""
    import os

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "torch.py").write_text("raise ValueError('a broken torch')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(broken), os.environ.get("PYTHONPATH", "")]))
    proc = run_cli("demo", "--device", "cpu", "--sweep", "--sweep-compute-us", "100", "--sweep-comm-us", "100", "-o", str(tmp_path / "x"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "the sweep worker failed (exit 1): ValueError: a broken torch" in proc.stderr


def test_a_sweep_grid_that_is_not_lengths_is_refused_before_any_run(tmp_path):
    proc = run_cli("demo", "--device", "cpu", "--sweep", "--sweep-compute-us", "fast", "-o", str(tmp_path / "x"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "--sweep-compute-us 'fast': 'fast' is not a length from 1 to 10000000 us" in proc.stderr


def test_the_demo_says_when_dbo_did_not_pay_against_serial():
    """Two H200s over NCCL (the demo's run of 2026-11-29): overlapped 39%, yet 36.2 ms against 31.5 ms
    serial. Overlap is not success by itself; the demo's summary says whether DBO paid."""
    from pathlib import Path

    from dbo_trace.demo.output import demo_table
    from dbo_trace.demo.run import ModeResult

    def result(mode, step_us):
        return ModeResult(mode, "-", Path("b"), workload={"unprofiled_step_us": {"median": step_us}})

    text = demo_table([result("serial", 31_500.0), result("overlap", 36_200.0), result("graph", 28_000.0)])
    assert "overlap: 36.20 ms against 31.50 ms serial (+15%), DBO did NOT pay" in text
    assert "graph: 28.00 ms against 31.50 ms serial (-11%), DBO paid" in text


def test_live_counters_and_their_series_in_the_recording(demo_all):
    """The plugin's counters agree with its own log, record keeps their series, and `top` reads them:
    every step microbatched, 8 yields per layer and step (4 switches x 2 microbatches), both waited."""
    out, _ = demo_all
    bundle = out / "overlap"
    m = json.loads((bundle / "manifest.json").read_text())
    (log,) = logs_of(bundle)
    steps = sum(1 for r in log.records if r[1] == "step_begin")
    assert m["counters"]["steps.eager_microbatched"] == steps
    assert m["counters"]["ubatch.yields"] == 8 * LAYERS * steps
    assert m["counters"]["ubatch.0.wait_us"] > 0 and m["counters"]["ubatch.1.wait_us"] > 0
    series = [json.loads(line) for line in (bundle / m["counters_series"]).read_text().splitlines()]
    assert series and series[-1]["counters"] == m["counters"]
    assert [s["t_s"] for s in series] == sorted(s["t_s"] for s in series)
    proc = run_cli("top", str(bundle), "--once")
    assert proc.returncode == 0, proc.stderr
    assert "100%" in proc.stdout and f"{8 * LAYERS:.1f}" in proc.stdout and "ub0" in proc.stdout


def test_top_follows_a_running_demo(tmp_path):
    """`dbo-trace top` on a recording while its program runs: the step count grows between two looks
    taken before the program exits (the plugin rewrites its counters every second)."""
    import re
    import time

    out = tmp_path / "live"
    demo = subprocess.Popen(
        [sys.executable, "-m", "dbo_trace.cli", "demo", "--device", "cpu", "--mode", "overlap", *SMALL[:-2],
         "--steps", "300", "-o", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    seen = []
    try:
        deadline = time.monotonic() + 120
        while demo.poll() is None and time.monotonic() < deadline and len(set(seen)) < 2:
            if (out / "overlap").is_dir():
                shown = run_cli("top", str(out / "overlap"), "--once").stdout
                row = re.search(r"pid: \d+; steps: (\d+);", shown)  # piped: plain lines
                if row and demo.poll() is None:
                    seen.append(int(row.group(1)))
            time.sleep(0.5)
    finally:
        demo.wait(timeout=180)
    assert len(set(seen)) >= 2 and seen == sorted(seen), seen
    assert demo.returncode == 0
