"""Every note is true: computed from the facts the figures use, each checked on a sample where it
must appear and one where it must not. The facts are read here from the raw files (the event log's
lines, json.load), not from the package."""

import json
from pathlib import Path

import pytest
from conftest import SAMPLES, report_json, run_cli
from traces import read_trace

PUBLIC = Path(__file__).parent.parent / "data" / "public"


def log_records(bundle: Path) -> list[list]:
    """Every record of a bundle's event logs (docs/bundle-format.md: a header line, then one JSON array a line)."""
    out = []
    for f in sorted((bundle / "events").glob("*.jsonl")):
        lines = f.read_text().splitlines()
        out += [json.loads(line) for line in lines[1:] if line.strip()]
    return out


def step_paths(bundle: Path) -> set:
    return {r[6].get("path") for r in log_records(bundle) if r[1] == "step_begin" and isinstance(r[6], dict)}


def notes(doc: dict) -> list[str]:
    return [n for r in doc["ranks"] for n in r["notes"]]


def test_no_event_log_is_said_only_where_there_is_none():
    bundle = SAMPLES / "vllm-graphs-decode"
    records = log_records(bundle)
    assert records and all(r[4] < 0 for r in records)  # an event log, and no record of a microbatch in it
    said = notes(report_json(str(bundle)))
    assert not any("no event log" in n for n in said)
    assert any(n.startswith("no microbatches (the event log records no microbatch thread") for n in said)
    bare = PUBLIC / "kineto-2021-v100.json.gz"  # a bare trace: no log at all
    assert any(n.startswith("no microbatches (no event log,") for n in notes(report_json(str(bare))))


def test_graph_replay_steps_are_named_as_the_microbatched_graph_path():
    bundle = SAMPLES / "graph"
    assert step_paths(bundle) == {"graph_capture", "graph_replay"}  # the log: captured, then replayed the DBO graph
    doc = report_json(str(bundle))
    assert {s["path"] for s in doc["steps"]} == {"graph_replay"}  # the profiled steps replayed it
    said = notes(doc)
    assert any("microbatched CUDA graph path (graph_replay)" in n for n in said)
    assert not any("no event log" in n or n.startswith("no microbatches") for n in said)
    assert step_paths(SAMPLES / "overlap") == {"eager_microbatched"}  # eager DBO: its kernels have microbatches
    assert not any("microbatch" in n for n in notes(report_json(str(SAMPLES / "overlap"))))


def test_compare_warns_of_unlike_arms_only_when_one_did_not_microbatch():
    for name in ("serial", "overlap", "graph"):  # every step took a microbatched path (eager or full graph)
        assert step_paths(SAMPLES / name) <= {"eager_microbatched", "graph_capture", "graph_replay"}
    same = run_cli("compare", *(str(SAMPLES / n) for n in ("serial", "overlap", "graph")))
    assert same.returncode == 0 and "differ in microbatched" not in same.stderr
    assert step_paths(SAMPLES / "vllm-eager-decode") == set()  # vLLM 0.26 without DBO: no UBatchWrapper step
    unlike = run_cli("compare", str(SAMPLES / "overlap"), str(SAMPLES / "vllm-eager-decode"))
    assert "differ in microbatched (overlap True, vllm-eager-decode False)" in " ".join(unlike.stderr.split())  # wrapped


OTHER_UBATCH_HOST = "the other microbatch's compute had not been launched"


def _exposure_is_host(doc: dict) -> bool:
    return any((r["exposed_comm_reasons"] or {}).get("host_us") for r in doc["ranks"])


def test_exposure_names_the_other_microbatch_only_where_there_are_microbatches():
    training = PUBLIC / "hta-training-2rank-nccl.json.gz"  # data-parallel training: no microbatches
    doc = report_json(str(training))
    assert doc["microbatch_source"] == "none" and _exposure_is_host(doc)  # the reason is there ...
    out = run_cli("report", str(training)).stdout + run_cli("report", "--markdown", str(training)).stdout
    assert OTHER_UBATCH_HOST not in " ".join(out.split())  # ... without a microbatch to blame
    assert "the next compute had not been launched (host)" in " ".join(out.split())
    dbo = SAMPLES / "two-gpu-overlap"  # DBO over NCCL: a little of its exposure is the other microbatch's late launch
    assert _exposure_is_host(report_json(str(dbo)))
    assert OTHER_UBATCH_HOST in " ".join(run_cli("report", str(dbo)).stdout.split())


@pytest.mark.parametrize("name", ["late", "graph", "vllm-graphs-decode"])
def test_notes_are_printed_once_each(name):
    out = run_cli("report", str(SAMPLES / name)).stdout
    printed = [line for line in out.splitlines() if line.startswith("note:")]
    assert len(printed) == len(set(printed))


def test_public_trace_is_gzip_json():  # the fixture the tests above read is what it says
    assert "traceEvents" in read_trace(PUBLIC / "kineto-2021-v100.json.gz")  # read as gzip: it is gzip
