"""Real traces from other projects (tests/data/README.md): every headline figure against the
independent computation in tests/references/headline_reference.py, counts exact, verdicts as the numbers say."""

import pytest
from conftest import ROOT, reason_texts, report_json, run_cli
from headline_reference import headline
from traces import events_of, read_trace, rewrite_trace, write_trace

from dbo_trace.analysis.classify import CommRules

PUBLIC = ROOT / "tests" / "data" / "public"
COMM = CommRules().regex().pattern  # the built-in families, as documented in docs/analysis.md

# name -> (verdict, steps source): what the numbers of each trace say (docs/analysis.md thresholds).
CASES = {
    # Training, GPU behind the CPU: busy 36%, 63% of the window idle with work already queued
    # (waiting on NCCL and events), 1% host idle: communication mostly exposed, and no microbatches
    # to ask the overlap question of (single-batch).
    "hta-training-16rank-nccl-graphs.json.gz": ("single-batch", "ProfilerStep# annotations"),
    "hta-training-2rank-nccl.json.gz": ("host-bound", "ProfilerStep# annotations"),
    "hta-rocm-mi250.json.gz": ("host-bound", "ProfilerStep# annotations"),
    "kineto-2021-v100.json.gz": ("host-bound", "ProfilerStep# annotations"),  # an Operator-category range in 2021
    # Kineto's 2020 JSON Array format; forward on the main thread, backward on autograd's (not microbatches).
    "kineto-2020-array-resnet50.json.gz": ("no-communication", "ProfilerStep# annotations"),
    # vLLM on ROCm, PIECEWISE HIP graphs, one step: the GPU ran 149-281 ms behind the launches, so
    # its idle was not the host's (docs/analysis.md, "Launch-to-start delay").
    "tracelens-vllm-piecewise-rocm.json.gz": ("no-communication", "vLLM execute_* annotations"),
}


@pytest.fixture(scope="module")
def reports():
    return {name: (report_json(str(PUBLIC / name)), headline(PUBLIC / name, COMM)) for name in CASES}


@pytest.mark.parametrize("name", CASES)
def test_figures_match_an_independent_union_computation(reports, name):
    doc, ref = reports[name]
    assert doc["time"]["window_us"] == pytest.approx(ref["window"], rel=1e-9, abs=0.01)
    assert doc["gpu"]["busy_us"] == pytest.approx(ref["busy"], rel=1e-6, abs=0.01)
    assert doc["gpu"]["utilization"] == pytest.approx(ref["busy"] / ref["window"], abs=1e-4)
    assert doc["host"]["idle_fraction"] == pytest.approx(ref["host_idle"] / ref["window"], abs=1e-4)
    if ref["comm"]:
        assert doc["comm"]["hidden_fraction"] == pytest.approx(ref["hidden"] / ref["comm"], abs=1e-4)
    else:
        assert doc["comm"]["hidden_fraction"] is None
    assert doc["gpu"]["kernels"] == ref["kernels"]
    assert doc["comm"]["kernels"] == ref["comm_kernels"]
    assert doc["graphs"]["launches"] == ref["graph_launches"]
    if ref["kernels"]:
        assert doc["graphs"]["replayed_kernel_fraction"] == pytest.approx(ref["replayed"] / ref["kernels"], abs=1e-4)


@pytest.mark.parametrize("name", CASES)
def test_buckets_add_up_to_the_window(reports, name):
    t = reports[name][0]["time"]
    parts = t["compute_us"] + t["comm_exposed_us"] + t["copy_us"] + t["host_idle_us"] + t["other_idle_us"]
    assert parts == pytest.approx(t["window_us"], rel=1e-6)


@pytest.mark.parametrize("name", CASES)
def test_steps_and_verdict(reports, name):
    doc, ref = reports[name]
    label, source = CASES[name]
    assert doc["steps_source"] == source
    if source.startswith("ProfilerStep"):
        assert len(doc["steps"]) == ref["steps"]
        rank = doc["ranks"][0]
        assert rank["host_test"]["fraction"] == pytest.approx(ref["host_idle_in_steady"] / ref["in_steady"], abs=1e-4)
    assert doc["verdict"]["label"] == label


def test_not_dbo_so_no_dbo_lines(reports):
    """Training traces have no microbatches: no 'other microbatch' wording, no round-trip criterion."""
    for name in CASES:
        doc = reports[name][0]
        assert doc["microbatch_source"] == "none"
        text = " ".join(reason_texts(doc["verdict"]))
        assert "other microbatch" not in text and "round trip" not in text
        if doc["round_trips"]:
            assert doc["round_trips"]["criterion_met"] is None


def test_profile_all_threads_is_not_blamed_without_microbatch_threads(reports):
    """An autograd or worker thread with CPU ops is not the profiler's own host cost."""
    for name in CASES:
        assert not any(r["kind"] == "profiled_threads" for r in reports[name][0]["verdict"]["reasons"])


def test_rocm_launches_are_launches(reports):
    doc, _ = reports["hta-rocm-mi250.json.gz"]
    assert doc["host"]["launches"] == 14  # 12 hipLaunchKernel + 2 hipExtModuleLaunchKernel, one per kernel


def test_graph_replays_counted_on_a_training_trace(reports):
    doc, ref = reports["hta-training-16rank-nccl-graphs.json.gz"]
    assert doc["graphs"]["launches"] == 70 == ref["graph_launches"]


def test_two_ranks_of_one_job_are_read_together():
    doc = report_json(str(PUBLIC / "hta-sampled-job"))
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    for r, name in zip(doc["ranks"], ("rank-0.json.gz", "rank-1.json.gz")):
        ref = headline(PUBLIC / "hta-sampled-job" / name, COMM)
        assert r["gpu"]["utilization"] == pytest.approx(ref["busy"] / ref["window"], abs=1e-4)
        assert r["comm"]["hidden_fraction"] == pytest.approx(ref["hidden"] / ref["comm"], abs=1e-4)


def test_the_json_array_format_reads_as_the_object_format(tmp_path):
    """Kineto's 2020 layout (the document is the array of events) gives the figures the same events
    give wrapped in {"traceEvents": ...}."""
    import json

    array = PUBLIC / "kineto-2020-array-resnet50.json.gz"
    events = read_trace(array)
    assert isinstance(events, list)
    wrapped = write_trace({"traceEvents": events}, tmp_path / "wrapped.json")
    a, b = report_json(str(array)), report_json(str(wrapped))
    for doc in (a, b):
        doc.pop("inputs")
        for r in doc["ranks"]:
            r.pop("source", None)
    assert json.dumps(a, sort_keys=True).replace(str(array), "") == json.dumps(b, sort_keys=True).replace(str(wrapped), "")


def test_an_array_with_data_after_it_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('[{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1}] {"x": 1}')
    proc = run_cli("report", str(bad))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "data after the array of trace events" in proc.stderr


@pytest.mark.parametrize(
    "name", ["hta-training-16rank-nccl-graphs.json.gz", "hta-training-2rank-nccl.json.gz", "hta-sampled-job/rank-0.json.gz"]
)
def test_training_iterations_without_profiler_steps_are_the_optimizer_steps(tmp_path, name):
    """With torch's ProfilerStep# removed, the iterations come from Optimizer.step#: as many as the
    profiler's steps, each after the previous one's optimizer step, which ran inside its ProfilerStep."""
    doc = read_trace(PUBLIC / name)
    marks = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in events_of(doc, "user_annotation")
        if str(e.get("name", "")).startswith("ProfilerStep#")
    )
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]
    stripped = write_trace(doc, tmp_path / "stripped.json")
    report = report_json(str(stripped))
    assert report["steps_source"].startswith("Optimizer.step#")
    steps = report["steps"]
    assert len(steps) == len(marks)
    for (lo, hi), step in zip(marks[:-1], steps[1:]):
        assert lo <= step["start_us"] <= hi  # the previous iteration's optimizer step ended in its ProfilerStep


def test_hip_graphs_are_called_hip_graphs(tmp_path, reports):
    """A ROCm trace's graph replays (hipGraphLaunch) are HIP graphs, not CUDA graphs: the 16-rank
    training trace with its cudaGraphLaunch calls renamed as ROCm names them."""

    def as_rocm(doc):
        for e in doc["traceEvents"]:
            if e.get("name") == "cudaGraphLaunch":
                e["name"] = "hipGraphLaunch"

    path = rewrite_trace(PUBLIC / "hta-training-16rank-nccl-graphs.json.gz", tmp_path / "rocm.json", as_rocm)
    reasons = reason_texts(report_json(str(path))["verdict"])
    assert any(r.startswith("HIP graphs replayed: 70 launches") for r in reasons)
    assert not any("CUDA graphs" in r for r in reasons)
    original = reason_texts(reports["hta-training-16rank-nccl-graphs.json.gz"][0]["verdict"])
    assert any(r.startswith("CUDA graphs replayed: 70 launches") for r in original)
