"""Real vLLM 0.26 recordings (samples/vllm-*, made on an H200 by `dbo-trace record -- vllm serve`):
steps and phases against vLLM's own execute_* annotations, graph launches against the trace and the
plugin's log, every figure against tests/references/headline_reference.py, the counters from the engine core."""

import json
import re

import pytest
import compare_reference as reference_compare
from conftest import SAMPLES, assert_matches_headline, reason_texts, report_json, run_cli
from headline_reference import headline
from traces import read_trace

from dbo_trace.analysis.classify import CommRules
from dbo_trace.trace.eventlog import read_event_log

VLLM = ["vllm-graphs-decode", "vllm-eager-decode", "vllm-graphs-prefill", "vllm-big-mixed", "vllm-eager-mixed-detailed"]
EXECUTE = re.compile(r"^execute_(?:\d+_)?context_(\d+)\(.*\)_generation_(\d+)\(.*\)$")


def trace_of(name):
    (path,) = (SAMPLES / name / "traces").glob("*.pt.trace.json.gz")
    return path


def raw(name):
    return read_trace(trace_of(name))


@pytest.fixture(scope="module")
def docs():
    return {name: report_json(str(SAMPLES / name)) for name in VLLM}


@pytest.mark.parametrize("name", VLLM)
def test_steps_are_vllms_steps_with_their_phases(docs, name):
    doc = docs[name]
    assert doc["steps_source"] == "vLLM execute_* annotations"
    marks = sorted(
        (e["ts"], e["name"]) for e in raw(name)["traceEvents"] if e.get("cat") == "user_annotation" and EXECUTE.match(e["name"])
    )
    asked = json.loads((SAMPLES / name / "manifest.json").read_text())["window"]["max_iterations"]
    # The profiler stops after max_iterations steps, or earlier when the load ends (the prefill run: 23 of 60).
    assert len(marks) == asked or (name == "vllm-graphs-prefill" and len(marks) == 23)
    reported = {s["label"] for s in doc["steps"]}
    assert reported <= {n for _, n in marks}
    for step in doc["steps"]:
        ctx, gen = (int(g) for g in EXECUTE.match(step["label"]).groups())
        want = "mixed" if ctx and gen else "prefill" if ctx else "decode" if gen else None
        assert step["phase"] == want


@pytest.mark.parametrize("name", VLLM)
def test_figures_match_the_independent_computation(docs, name):
    doc, ref = docs[name], headline(trace_of(name), CommRules().regex().pattern)
    assert_matches_headline(doc, ref)
    assert doc["graphs"]["launches"] == ref["graph_launches"]


@pytest.mark.parametrize("name", ["vllm-graphs-decode", "vllm-graphs-prefill", "vllm-big-mixed", "vllm-eager-decode"])
def test_graph_replays_in_the_log_match_the_trace(docs, name):
    """The plugin counts a replay per CUDAGraphWrapper call in the engine core; inside the profiled
    window there must be exactly one per cudaGraphLaunch of the trace."""
    doc = raw(name)
    base = doc["baseTimeNanoseconds"]
    timed = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "cuda_runtime", "kernel")]
    lo = min(e["ts"] for e in timed) * 1000 + base
    hi = max(e["ts"] + e["dur"] for e in timed) * 1000 + base
    launches = sum(1 for e in timed if e["name"] == "cudaGraphLaunch")
    replays = 0
    for path in (SAMPLES / name / "events").glob("*.jsonl"):
        replays += sum(1 for t, kind, *_ in read_event_log(path).records if kind == "graph_replay" and lo <= t <= hi)
    assert replays == launches == docs[name]["graphs"]["launches"]
    counters = json.loads((SAMPLES / name / "manifest.json").read_text())["counters"]
    in_counters = sum(v for k, v in counters.items() if k.startswith("graph_replay/"))
    assert in_counters >= launches  # the counters cover the whole server life, the trace a window of it
    if launches:
        assert counters, "the engine core's counters reached the manifest"


def test_eager_and_graph_decode_have_their_own_lines(docs):
    eager, graphs = docs["vllm-eager-decode"]["phases"]["decode"], docs["vllm-graphs-decode"]["phases"]["decode"]
    assert eager["replayed_kernel_fraction"] == 0 and graphs["replayed_kernel_fraction"] > 0.8
    assert graphs["graph_launches"] == graphs["steps"] - graphs["stalls"]  # one FULL graph per steady decode step
    assert graphs["median_step_us"] < eager["median_step_us"] / 2


@pytest.mark.parametrize("name", VLLM)
def test_a_mostly_idle_gpu_is_called_host_bound(docs, name):
    """A 162M-parameter MoE on an H200 (the 12-layer one: 27%): the GPU mostly waits on the host."""
    doc = docs[name]
    assert doc["gpu"]["utilization"] < (0.3 if name == "vllm-big-mixed" else 0.1)
    assert doc["host"]["idle_fraction"] > 0.5
    assert doc["verdict"]["label"] == "host-bound"
    assert doc["microbatch_source"] == "none"  # no DBO at data parallel size 1: no microbatch lines
    assert "other microbatch" not in " ".join(reason_texts(doc["verdict"]))


def test_compare_gives_the_ablation_per_phase():
    proc = run_cli(
        "compare",
        "--json",
        str(SAMPLES / "vllm-eager-decode"),
        str(SAMPLES / "vllm-graphs-decode"),
        "--label",
        "eager",
        "--label",
        "graphs",
    )
    assert proc.returncode == 0, proc.stderr
    arms = {(a["label"], a["phase"]): a for a in json.loads(proc.stdout)["arms"]}
    eager, graphs = arms[("eager", "decode")], arms[("graphs", "decode")]
    docs = {n: report_json(str(SAMPLES / n)) for n in ("vllm-eager-decode", "vllm-graphs-decode")}
    walls = {n: [s["step_us"] for s in d["steps"] if s["phase"] == "decode"] for n, d in docs.items()}
    last = max(docs["vllm-eager-decode"]["steps"], key=lambda s: s["start_us"])
    # the sample is start to start: the rank's last step (a decode step here) has no next start
    assert last["phase"] == "decode" and eager["steps"] + eager["stalls"] == len(walls["vllm-eager-decode"]) - 1
    assert eager["step_mean_us"] == pytest.approx(sum(walls["vllm-eager-decode"]) / len(walls["vllm-eager-decode"]), rel=1e-6)
    want = reference_compare.against(
        reference_compare.sample(docs["vllm-eager-decode"], "decode"), reference_compare.sample(docs["vllm-graphs-decode"], "decode")
    )
    assert graphs["change"] == pytest.approx(want["change"], abs=1e-4)
    assert graphs["change"] < -0.5 and graphs["call"] == want["call"] == "beyond noise"


def test_detailed_annotations_give_token_counts(docs):
    steps = docs["vllm-eager-mixed-detailed"]["steps"]
    assert all(s["label"].startswith("execute_") and "(sq" in s["label"] for s in steps)
    for s in steps:
        m = re.match(r"^execute_\d+_context_\d+\(sq(\d+).*\)_generation_\d+\(sq(\d+)", s["label"])
        assert (s["context_tokens"], s["generation_tokens"]) == (int(m.group(1)), int(m.group(2)))
