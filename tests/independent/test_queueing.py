"""Launch-to-start delay and the host idle that came after the next work was launched (docs/analysis.md,
"Launch-to-start delay"), against a plain computation over the raw traces (tests/references/queueing_reference.py)."""

import pytest
import queueing_reference as reference_queueing
from conftest import ROOT, SAMPLES, report_json

PUBLIC = ROOT / "tests" / "data" / "public"

CASES = [
    PUBLIC / "hta-training-16rank-nccl-graphs.json.gz",
    *sorted((PUBLIC / "hta-sampled-job").glob("*.json*")),
    PUBLIC / "tracelens-vllm-piecewise-rocm.json.gz",
    SAMPLES / "hostbound" / "traces",
    SAMPLES / "dsv2lite-graphs-decode" / "traces",
]


def _trace(path):
    return path if path.is_file() else next(p for p in sorted(path.iterdir()) if ".json" in p.name)


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.name if p.is_file() else p.parent.name)
def test_launch_delay_and_queued_host_idle_match_the_plain_computation(path):
    trace = _trace(path)
    ref = reference_queueing.queueing(trace)
    doc = report_json(str(trace))
    rank = doc["ranks"][0]
    got = rank["launch_delay"]
    assert got["activities"] == ref["n"]
    assert got["median_us"] == pytest.approx(ref["median"], abs=0.01)
    assert (got["min_us"], got["max_us"]) == pytest.approx((ref["low"], ref["high"]), abs=0.01)
    assert rank["time"]["host_idle_us"] == pytest.approx(ref["host_idle"], abs=0.5)
    assert got["queued_in_host_idle_us"] == pytest.approx(ref["queued"], abs=0.5)
    assert got["clock_offset_suspect"] is (ref["low"] >= 1000)
    noted = [n for n in rank["notes"] if "launch call had ended" in n or "launch call ended" in n]
    assert bool(noted) is (ref["low"] >= 1000 or ref["queued"] >= 0.05 * (ref["host_idle"] + ref["queued"]))


def test_a_training_trace_whose_gpu_runs_behind_says_so():
    """HTA's 16-rank training sample: each iteration's kernels run long after its CPU range, so the step
    windows overlap; the step times are periods, start to start, which never count that time twice."""
    doc = report_json(str(PUBLIC / "hta-training-16rank-nccl-graphs.json.gz"))
    rank = doc["ranks"][0]
    behind = rank["behind"]
    assert behind is not None and behind["overlapping"] >= 1
    assert behind["windows_us"] > 1.05 * behind["wall_us"]
    steps = sorted(rank["steps"], key=lambda s: s["start_us"])
    for a, b in zip(steps, steps[1:]):
        assert a["step_us"] == pytest.approx(b["start_us"] - a["start_us"], abs=0.01)
    assert steps[-1]["step_us"] == pytest.approx(steps[-1]["window_us"], abs=0.01)
    assert sum(s["step_us"] for s in steps) < sum(s["window_us"] for s in steps)
    assert any(n.startswith("the GPU runs behind the CPU") for n in rank["notes"])


def test_a_gpu_running_behind_its_launches_is_named_and_not_blamed_on_the_host():
    """TraceLens's vLLM piecewise ROCm step: the host launched every kernel in the step's first 26 ms;
    the GPU started the first 149 ms after its launch and the last 281 ms after. The idle before the
    first kernel was not the host's (it was 49% of the window): host idle at most 20% of the window,
    and the verdict names the GPU running behind, with the lag counted here from the raw trace."""
    import gzip
    import json

    path = PUBLIC / "tracelens-vllm-piecewise-rocm.json.gz"
    events = [e for e in json.load(gzip.open(path))["traceEvents"] if e.get("ph") == "X"]
    calls = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    lo, hi = min(e["ts"] for e in events), max(e["ts"] + e["dur"] for e in events)
    lags = []  # (start, launch call end to start) of every activity launched by a call other than a graph launch
    launched_by = []
    for e in sorted((e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")), key=lambda e: e["ts"]):
        call = calls.get(e["args"].get("correlation"))
        if call is not None:
            launched_by.append(call["ts"] + call["dur"] - lo)
            if call["name"] != "hipGraphLaunch":
                lags.append(e["ts"] - (call["ts"] + call["dur"]))
    assert max(launched_by) < 27_000 and lags[0] > 140_000 and lags[-1] > 280_000  # the trace's shape
    doc = report_json(str(path))
    rank = doc["ranks"][0]
    assert rank["time"]["host_idle_us"] <= 0.2 * (hi - lo)
    assert rank["launch_delay"]["first_us"] == pytest.approx(lags[0], abs=0.01)
    (behind,) = [r for r in doc["verdict"]["reasons"] if r["kind"] == "running_behind"]
    reasons = " ".join(r["text"] for r in doc["verdict"]["reasons"])
    assert "the GPU ran behind the host" in behind["text"]
    assert f"grew from {lags[0] / 1000:.2f} ms to {lags[-1] / 1000:.2f} ms" in reasons
    assert "waiting for the host" not in reasons.replace("not counted as waiting for the host", "")
