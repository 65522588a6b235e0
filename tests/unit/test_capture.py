"""Graph capture: launches made while a stream is captured are recorded into a graph, not run.

The trace is a real vLLM recording (samples/vllm-eager-decode) in which some steps are turned into
captures the way CUDA records them: cudaStreamBeginCapture / cudaStreamEndCapture around the step's
launches on its thread, and no kernel from those launches (none runs during a capture). The counts
are checked against a plain walk over the JSON."""

import pytest
from conftest import SAMPLES, report_json, run_cli, sample_trace
from traces import CALL_CATEGORIES, GPU_CATEGORIES, events_of, read_trace, write_trace

LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch")


def _captured_trace(tmp_path, share):
    """The sample with the first `share` of its steps captured; (path, launches captured per step)."""
    src = sample_trace("vllm-eager-decode")
    doc = read_trace(src)
    events = doc["traceEvents"]
    steps = sorted(
        (e for e in events_of(doc, "user_annotation") if str(e.get("name", "")).startswith("execute_")),
        key=lambda e: e["ts"],
    )
    chosen = steps[: int(len(steps) * share)]
    captured_corr, per_step, extra = set(), {}, []
    for s in chosen:
        lo, hi, tid = s["ts"], s["ts"] + s["dur"], s["tid"]
        inside = [e for e in events_of(doc, *CALL_CATEGORIES) if e.get("tid") == tid and lo <= e["ts"] <= hi]
        launches = [e for e in inside if e["name"] in LAUNCHES]
        per_step[s["name"], s["ts"]] = len(launches)
        captured_corr |= {e["args"]["correlation"] for e in launches if "correlation" in e.get("args", {})}
        for name, ts in (("cudaStreamBeginCapture", lo + 0.001), ("cudaStreamEndCapture", hi - 0.002)):
            extra.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": name,
                    "pid": s["pid"],
                    "tid": tid,
                    "ts": ts,
                    "dur": 0.001,
                    "args": {"correlation": -7},
                }
            )
    kept = [e for e in events if not (e.get("cat") in GPU_CATEGORIES and e.get("args", {}).get("correlation") in captured_corr)]
    doc["traceEvents"] = kept + extra
    return write_trace(doc, tmp_path / "captured.json.gz"), per_step


def test_a_trace_that_is_mostly_capture_is_called_capture_not_host_bound(tmp_path):
    path, per_step = _captured_trace(tmp_path, 0.9)
    doc = report_json(str(path))
    assert doc["verdict"]["label"] == "graph-capture"
    first = doc["verdict"]["reasons"][0]
    assert first["kind"] == "graph_capture" and first["text"].startswith("the trace is mostly graph capture")
    assert doc["verdict"]["findings"][:2] == ["graph_capture", "host_bound"]
    assert doc["verdict"]["next_step"]["kind"] == "profile_after_startup"
    assert not any(r["kind"] == "stalls" for r in doc["verdict"]["reasons"])  # its stalls are the capture itself
    by_start = {round(ts, 3): n for (_name, ts), n in per_step.items()}
    reported = [s for s in doc["steps"] if s["captured_launches"]]
    assert reported and all(s["captured_launches"] == by_start[round(s["start_us"], 3)] for s in reported)
    assert doc["graphs"]["captured_launches"] == sum(s["captured_launches"] for s in doc["steps"])
    # Steps whose every launch was captured ran nothing and, as any step without GPU work, are not
    # reported; the others still ran copies or work of other threads.
    assert doc["graphs"]["steps_captured"] == len(reported)


def test_a_few_captures_in_a_run_are_a_line_not_the_verdict(tmp_path):
    path, _ = _captured_trace(tmp_path, 0.05)
    doc = report_json(str(path))
    assert doc["verdict"]["label"] == "host-bound"
    (line,) = [r for r in doc["verdict"]["reasons"] if r["kind"] == "graph_capture"]
    assert line["text"].startswith("graph capture: ")


@pytest.mark.parametrize("sample", ["vllm-graphs-decode", "graph", "hostbound"])
def test_no_capture_no_capture_figures(sample):
    doc = report_json(str(SAMPLES / sample))
    assert doc["graphs"]["captured_launches"] == 0 and doc["graphs"]["steps_captured"] == 0
    assert not any(r["kind"] == "graph_capture" for r in doc["verdict"]["reasons"])


def test_a_capture_trace_archived_reads_back(tmp_path):
    """`archive` then `report` of a trace that is mostly capture: its verdict's label (graph-capture)
    and finding are words the document's types accept, so the archive reads back as written."""
    import json

    path, _ = _captured_trace(tmp_path, 0.9)
    out = tmp_path / "capture.tar.gz"
    made = run_cli("archive", str(path), "-o", str(out))
    assert made.returncode == 0, made.stderr
    shown = run_cli("report", str(out), "--json")
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert doc == report_json(str(path))
    assert doc["verdict"]["label"] == "graph-capture" and doc["verdict"]["qualifier"] == "graph_capture"
    text = run_cli("report", str(out))
    assert text.returncode == 0 and text.stdout.startswith("verdict: graph-capture")
