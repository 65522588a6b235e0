"""Launch-to-start delay and the host idle that came after the next work was launched (docs/analysis.md,
"Launch-to-start delay"), against a plain computation over the raw traces (tests/reference_queueing.py)."""

import pytest
import reference_queueing
from conftest import ROOT, SAMPLES, report_json

PUBLIC = ROOT / "tests" / "data" / "public"

CASES = [
    PUBLIC / "hta-training-16rank-nccl-graphs.json.gz",
    *sorted((PUBLIC / "hta-sampled-job").glob("*.json*")),
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
    assert bool(noted) is (ref["low"] >= 1000 or ref["queued"] >= 0.05 * ref["host_idle"])


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
