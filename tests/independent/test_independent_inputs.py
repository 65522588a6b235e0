"""The report against figures computed independently (tests/references/nsys_reference.py, written from
docs/analysis.md and docs/report-schema.md alone, never from the package's code):

1. two real Nsight Systems exports: window, GPU busy, utilization, host idle, kernels, launches;
2. two public training traces with their ProfilerStep# removed: the iterations found from the
   Optimizer.step# annotations and where each begins;
3. a real vLLM eager decode trace with stream captures written around the first third of its steps
   and the captured kernels deleted: captured launches, per step and in all, and the verdict.
"""

import gzip
import json
import sqlite3

import nsys_reference as ref
import pytest
from conftest import ROOT, report_json, sample_trace

PUBLIC = ROOT / "tests" / "data" / "public"


def close_time(got: float, want: float) -> bool:
    """Times: 0.01 us absolute or 1e-6 relative."""
    return abs(got - want) <= max(0.01, 1e-6 * abs(want))


# --- 1. Nsight Systems exports ----------------------------------------------------------------

NSYS = ["nsys-saxpy-mpi-cuda-rank0.sqlite", "nsys-cloverleaf-cuda.sqlite"]


@pytest.mark.parametrize("name", NSYS)
def test_nsys_export_figures(name):
    path = PUBLIC / name
    mine = ref.nsys_ranks(path)
    doc = report_json(str(path))
    assert len(doc["ranks"]) == len(mine) == 1, "each export holds one process that ran GPU work"
    (want,) = mine.values()
    for block in (doc, doc["ranks"][0]):
        time, gpu, host = block["time"], block["gpu"], block["host"]
        assert close_time(time["window_us"], want["window_us"]), (time["window_us"], want["window_us"])
        assert close_time(gpu["span_us"], want["window_us"])
        assert close_time(gpu["busy_us"], want["busy_us"]), (gpu["busy_us"], want["busy_us"])
        assert close_time(time["host_idle_us"], want["host_idle_us"]), (time["host_idle_us"], want["host_idle_us"])
        assert close_time(time["other_idle_us"], want["other_idle_us"])
        assert abs(gpu["utilization"] - want["utilization"]) <= 1e-4
        assert abs(host["idle_fraction"] - want["host_idle_fraction"]) <= 1e-4
        assert gpu["kernels"] == want["kernels"]
        assert host["launches"] == want["launches"]


def test_nsys_duplicate_call_records_count_once():
    """The saxpy export records every cudaLaunchKernel twice (the entry point around
    cudaLaunchKernel_v7000, one correlation id): a plain count of launch rows would be twice the
    report's. Checked here so that the figure above is known to tell the two apart."""
    db = sqlite3.connect(f"file:{PUBLIC / NSYS[0]}?mode=ro", uri=True)
    rows = db.execute(
        "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId"
        " WHERE s.value LIKE 'cudaLaunchKernel%'"
    ).fetchone()[0]
    db.close()
    (mine,) = ref.nsys_ranks(PUBLIC / NSYS[0]).values()
    assert rows == 2 * mine["launches"] == 10


# --- 2. Training iterations from Optimizer.step# ----------------------------------------------

TRAINING = ["hta-training-2rank-nccl.json.gz", "hta-training-16rank-nccl-graphs.json.gz"]


@pytest.mark.parametrize("name", TRAINING)
def test_training_iterations_without_profiler_steps(name, tmp_path):
    doc = ref.load_kineto(PUBLIC / name)
    profiler_steps = [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]
    stripped = tmp_path / name
    with gzip.open(stripped, "wt") as f:
        json.dump(doc, f)
    iterations = ref.training_iterations(doc["traceEvents"])
    # as many iterations as the profiler had steps (docs: checked on public traces)
    assert len(iterations) == len([e for e in profiler_steps if e.get("cat") == "user_annotation"])
    report = report_json(str(stripped))
    assert report["steps_source"] == "Optimizer.step# annotations (training iterations)"
    steps = report["steps"]
    assert len(steps) == len(iterations)
    for step, (start, _end) in zip(steps, iterations):
        assert abs(step["start_us"] - start) <= 1e-3, (step["label"], step["start_us"], start)


# --- 3. Graph capture -------------------------------------------------------------------------


def _captured_trace(tmp_path, share_of_steps):
    """The eager decode trace with cudaStreamBeginCapture/EndCapture written inside each of the
    first `share_of_steps` of its execute_* steps (on the annotation's thread, 1 us after its start
    and 3 us before its end, where the thread makes no other CUDA call for 20 us either side), and
    the kernels those steps launched deleted (a capture records them; they do not run)."""
    trace = sample_trace("vllm-eager-decode")
    doc = ref.load_kineto(trace)
    events = doc["traceEvents"]
    annotations = sorted(
        (e for e in events if e.get("cat") == "user_annotation" and e.get("name", "").startswith("execute_")),
        key=lambda e: float(e["ts"]),
    )
    chosen = annotations[: int(len(annotations) * share_of_steps)]
    corr = max(e["args"]["correlation"] for e in events if "correlation" in e.get("args", {}))
    added = []
    for a in chosen:
        for call, ts in (
            ("cudaStreamBeginCapture", float(a["ts"]) + 1.0),
            ("cudaStreamEndCapture", float(a["ts"]) + float(a["dur"]) - 3.0),
        ):
            corr += 1
            added.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": call,
                    "pid": a["pid"],
                    "tid": a["tid"],
                    "ts": ts,
                    "dur": 2.0,
                    "args": {"correlation": corr},
                }
            )
    events = events + added
    captured = ref.kineto_capture(events)["captured_correlations"]
    events = [
        e
        for e in events
        if not (e.get("cat") == "kernel" and e.get("args", {}).get("correlation") in captured)
        and not (e.get("cat") == "ac2g" and e.get("id") in captured)
    ]
    doc["traceEvents"] = events
    path = tmp_path / "captured.pt.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(doc, f)
    return path, events, chosen


@pytest.mark.parametrize("share_of_steps", [1 / 3, 1 / 6])
def test_graph_capture_counts_and_verdict(tmp_path, share_of_steps):
    path, events, chosen = _captured_trace(tmp_path, share_of_steps)
    mine = ref.kineto_capture(events)
    assert len(mine["windows"]) == len(chosen)
    # the edges are unambiguous: the capturing thread makes no other CUDA call near them
    threads = {thread for thread, _, _ in mine["windows"]}
    calls = [
        (round(float(e["ts"]) * 1000), round((float(e["ts"]) + float(e["dur"])) * 1000), e["name"])
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver")
        and (e.get("pid"), e.get("tid")) in threads
        and "Capture" not in e["name"]
    ]
    edges = sorted(edge for _, begin, end in mine["windows"] for edge in (begin, end))
    for lo, hi, name in calls:
        near = [edge for edge in edges if lo - 20_000 <= edge <= hi + 20_000]
        assert not near, (name, lo, near)
    report = report_json(str(path))
    graphs = report["graphs"]
    assert graphs["captured_launches"] == mine["captured_launches"] > 0
    assert report["ranks"][0]["graphs"]["captured_launches"] == mine["captured_launches"]
    # per step: the launches made inside the step's annotation while it was capturing
    by_start = {float(a["ts"]): a for a in chosen}
    starts = mine["captured_launch_starts"]
    for step in report["steps"]:
        a = by_start.get(step["start_us"])
        want = 0
        if a is not None:
            lo, hi = round(float(a["ts"]) * 1000), round((float(a["ts"]) + float(a["dur"])) * 1000)
            want = sum(1 for t in starts if lo <= t <= hi)
        assert step["captured_launches"] == want, (step["label"], step["start_us"])
    assert graphs["steps_captured"] == len(chosen)  # no graph replays in the trace
    # "at least half of the window's host-idle GPU time lies inside capture windows"
    graph_capture = mine["capture_share"] >= 0.5
    assert (report["verdict"]["label"] == "graph-capture") == graph_capture, mine["capture_share"]
    # the shares are far enough from the threshold that the test says which side each is on
    assert abs(mine["capture_share"] - 0.5) > 0.02
    assert graph_capture == (share_of_steps == 1 / 3)
    # either way the captures are named with their count ("one reason line with their counts")
    (line,) = [r["text"] for r in report["verdict"]["reasons"] if r["kind"] == "graph_capture"]
    assert str(mine["captured_launches"]) in line


def test_no_capture_in_the_untouched_trace():
    trace = sample_trace("vllm-eager-decode")
    mine = ref.kineto_capture(ref.load_kineto(trace)["traceEvents"])
    report = report_json(str(trace))
    assert mine["captured_launches"] == report["graphs"]["captured_launches"] == 0
    assert report["verdict"]["label"] != "graph-capture"
