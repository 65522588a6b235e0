"""The DBO ledger (docs/analysis.md, "The DBO ledger") against tests/references/ledger_reference.py, a plain
reading of the raw trace and event log, on the shipped DBO samples."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from dbo_trace.analysis.model import Options
from dbo_trace.app.pipeline import analyze_paths
from dbo_trace.render.document import build_document
from tests.conftest import SAMPLES
from ledger_reference import ledger as reference

COMM = r"nccl|spin_kernel"
CASES = ["overlap", "smhungry", "late", "hostbound", "two-gpu-overlap", "two-gpu-hostbound", "afd-graphs-dbo"]
PROFILED = set(CASES) - {"afd-graphs-dbo"}  # its profiled steps replay graphs: the yields are outside the window


def _pid(trace: Path) -> int:
    with gzip.open(trace, "rt") as fh:
        doc = json.load(fh)
    return Counter(e["pid"] for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime").most_common(1)[0][0]


def _log_of(sample: Path, trace: Path) -> Path:
    pid = _pid(trace)
    for log in sorted((sample / "events").glob("*.jsonl")):
        if json.loads(log.read_text().splitlines()[0]).get("pid") == pid:
            return log
    raise AssertionError(f"no event log of pid {pid} in {sample}")


def _close(mine, ref, rel=0.05, absolute=1e-6):
    assert mine is not None and ref is not None, (mine, ref)
    assert abs(mine - ref) <= max(absolute, rel * abs(ref)), (mine, ref)


@pytest.fixture(scope="module", params=CASES)
def case(request):
    sample = SAMPLES / request.param
    report = analyze_paths([sample], Options())
    doc = build_document(report)
    traces = sorted((sample / "traces").glob("*.json.gz"))
    return request.param, doc, [reference(t, _log_of(sample, t), COMM) for t in traces]


def test_handovers_match_the_reference(case):
    name, doc, refs = case
    assert len(doc.ranks) == len(refs)
    for rank, ref in zip(doc.ranks, refs):
        b = rank.dbo_ledger
        u, ru = b.unprofiled, ref["unprofiled"]
        assert (u.steps, u.handovers) == (ru["steps"], ru["handovers"])
        for key in ("median_us", "p90_us", "per_step_us"):
            _close(getattr(u, key), ru[key])
        if name not in PROFILED:
            assert b.source is None and ref["handovers"] == 0
            continue
        assert b is not None and b.source is not None, name
        assert b.handovers == ref["handovers"]
        _close(b.median_handover_us, ref["median_us"])
        _close(b.p90_handover_us, ref["p90_us"])
        _close(b.handover_per_step_us, ref["per_step_us"])
        _close(b.yields_per_step, ref["yields_per_step"])
        _close(b.startup_us, ref["startup_us"])
        _close(b.share, ref["share"])
        assert {row.layer: row.median_us for row in b.layers}.keys() == ref["layers"].keys()
        for row in b.layers:
            _close(row.median_us, ref["layers"][row.layer])


def test_split_matches_the_reference(case):
    name, doc, refs = case
    for rank, ref in zip(doc.ranks, refs):
        if name not in PROFILED:  # graph replays: no microbatch per kernel
            assert rank.dbo_ledger.split.compute_us is None and ref["compute_us"] is None
            continue
        sp = rank.dbo_ledger.split
        assert sp.tokens == ref["tokens"]
        assert len(sp.compute_us) == len(ref["compute_us"]) == 2
        for mine, theirs in zip(sp.compute_us, ref["compute_us"]):
            _close(mine, theirs)
        _close(sp.imbalance, ref["imbalance"], rel=0.05, absolute=0.005)
        _close(sp.excess_us, ref["excess_us"], rel=0.05, absolute=0.005 * max(ref["compute_us"]))


def test_issue_figures():
    """The issue's numbers: two-gpu-overlap's thread start-up as GPU idle, 67.5 ms over both ranks."""
    doc = build_document(analyze_paths([SAMPLES / "two-gpu-overlap"], Options()))
    total = sum(r.dbo_ledger.startup_gpu_idle_us for r in doc.ranks)
    assert abs(total - 67_500) < 500


def test_afd_yield_path():
    """The AFD plugin's manual_dbo_yield reaches UBatchContext's yield: on afd-graphs-dbo (its eager
    microbatched steps are outside the profiled window) 54 hand-overs per step, 27 layers x 2
    microbatches, as scripts/afd_truth.py counts its yields."""
    doc = build_document(analyze_paths([SAMPLES / "afd-graphs-dbo"], Options()))
    u = doc.ranks[0].dbo_ledger.unprofiled
    assert u.steps == 26 and u.handovers == 54 * 26
    assert doc.ranks[0].dbo_ledger.split.tokens == [8.0, 8.0]


def test_no_microbatches_no_ledger():
    doc = build_document(analyze_paths([SAMPLES / "dsv2lite-graphs-decode"], Options()))
    assert all(r.dbo_ledger is None for r in doc.ranks)


def _layer_reference(ops, layers):
    """The per-layer rows from the document's own comm operations, by docs/analysis.md's words: 2
    operations per microbatch and layer are its dispatch and combine (k // 2, k % 2); per layer the
    operations' median times added, hidden time added over that, exposed added."""
    per = {}
    for op in ops:
        per.setdefault(op["index"] // 2, []).append(op)
    out = {}
    for layer, rows in per.items():
        busy = sum(r["median_us"] for r in rows)
        hidden = sum(r["median_us"] * r["hidden_fraction"] for r in rows)
        out[layer] = (len(rows), busy, hidden / busy, sum(r["median_exposed_us"] for r in rows))
    assert len(out) == layers
    return out


@pytest.mark.parametrize("name", ["overlap", "smhungry", "two-gpu-overlap"])
def test_comm_operations_by_layer_and_role(name):
    doc = json.loads(_json(name))
    for rank in doc["ranks"]:
        ops = rank["comm_operations"]
        assert [(o["layer"], o["role"]) for o in ops if o["ubatch"] == 0] == [
            (k // 2, "dispatch" if k % 2 == 0 else "combine") for k in range(8)
        ]
        ref = _layer_reference(ops, 4)
        seen = set()
        for row in rank["comm_layers"]:
            first = row["first_layer"]
            n, busy, hidden, exposed = ref[first]
            assert row["operations"] == n
            assert abs(row["median_us"] - busy) <= 0.01 * busy
            assert abs(row["hidden_fraction"] - hidden) <= 0.01
            assert abs(row["median_exposed_us"] - exposed) <= 0.01 * max(exposed, 1)
            for layer in range(first, row["last_layer"] + 1):  # grouped layers say the same within 10%
                assert abs(ref[layer][1] - busy) <= 0.1 * busy
                seen.add(layer)
        assert seen == set(range(4))


def _json(name):
    from dbo_trace.render.json_out import JsonRenderer

    return JsonRenderer().render(analyze_paths([SAMPLES / name], Options()))


def test_layers_alike_are_grouped_and_unlike_are_not():
    from dbo_trace.analysis.overlap.layer_operations import layer_operations, operation_places

    places = operation_places([0] * 6 + [1] * 6, list(range(6)) * 2, 3, False)
    assert places[:3] == [(0, "dispatch"), (0, "combine"), (1, "dispatch")]
    assert operation_places([0, 0, 0], [0, 1, 2], 2, False) == [(None, None)] * 3  # 3 ops do not fit 2 layers
    assert operation_places([0, 0], [0, 1], 2, True) == [(0, "round trip"), (1, "round trip")]
    layer = [p[0] for p in places]
    busy = [100.0, 100, 104, 104, 300, 300] * 2  # layers 0 and 1 within 10%, layer 2 three times longer
    rows = layer_operations(layer, busy, [0.5] * 12, [10.0] * 12, ["crowded"] * 12)
    assert [(r.first_layer, r.last_layer, r.operations) for r in rows] == [(0, 1, 4), (2, 2, 4)]
    assert rows[0].median_us == 400 and rows[1].median_us == 1200


def test_layer_view_shows_that_layer_only():
    from tests.conftest import run_cli

    shown = run_cli("report", str(SAMPLES / "overlap"), "--layer", "2")
    assert shown.returncode == 0, shown.stderr
    assert "layer 2 dispatch" in shown.stdout and "layer 2 combine" in shown.stdout
    assert "layer 1 " not in shown.stdout and "layer 3 " not in shown.stdout
    refused = run_cli("report", str(SAMPLES / "overlap"), "--layer", "4")
    assert refused.returncode == 2 and "--layer 4: the report has layers 0 to 3" in refused.stderr
    refused = run_cli("report", str(SAMPLES / "overlap"), "--layer", "1", "--json")
    assert refused.returncode == 2 and "--json lists every layer" in refused.stderr


def _reference_sm(trace: Path, holder: str, comm: str):
    """From the raw trace, by docs/analysis.md ("SM evidence"): the launch args of every kernel named
    holder and comm (one shape each), the device's limits, and what one SM has left beside the holder."""
    with gzip.open(trace, "rt") as fh:
        doc = json.load(fh)
    dev = doc["deviceProperties"][0]
    shapes = {}
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and e["name"] in (holder, comm):
            a = e["args"]
            shapes.setdefault(e["name"], set()).add(
                (tuple(a["grid"]), tuple(a["block"]), a["registers per thread"], a["shared memory"])
            )
    (h,), (c,) = shapes[holder], shapes[comm]
    threads = h[1][0] * h[1][1] * h[1][2]
    regs = h[2] * ((threads + 31) // 32 * 32)
    limits = [dev["maxThreadsPerMultiprocessor"] // threads, dev["regsPerMultiprocessor"] // regs]
    if h[3]:
        limits.append(dev["sharedMemPerMultiprocessor"] // h[3])
    per_sm = min(limits)
    ctas = h[0][0] * h[0][1] * h[0][2]
    resident = min(per_sm, -(-ctas // dev["numSms"]))
    left = (
        dev["sharedMemPerMultiprocessor"] - resident * h[3],
        dev["regsPerMultiprocessor"] - resident * regs,
        dev["maxThreadsPerMultiprocessor"] - resident * threads,
    )
    c_threads = c[1][0] * c[1][1] * c[1][2]
    fits = c[3] <= left[0] and c[2] * ((c_threads + 31) // 32 * 32) <= left[1] and c_threads <= left[2]
    return h, c, dev["numSms"], per_sm, left, fits


@pytest.mark.parametrize("name", ["overlap", "smhungry", "two-gpu-overlap"])
def test_sm_evidence_matches_the_raw_trace(name):
    doc = json.loads(_json(name))
    traces = sorted((SAMPLES / name / "traces").glob("*.json.gz"))
    for rank, trace in zip(doc["ranks"], traces):
        x = rank["sm_evidence"]
        h, c, sms, per_sm, left, fits = _reference_sm(trace, x["holder"]["name"], x["comm"]["name"])
        assert (tuple(x["holder"]["grid"]), tuple(x["holder"]["block"])) == h[:2]
        assert (x["holder"]["registers_per_thread"], x["holder"]["shared_memory"]) == h[2:]
        assert (x["comm"]["registers_per_thread"], x["comm"]["shared_memory"]) == c[2:]
        assert (x["sms"], x["per_sm"]) == (sms, per_sm)
        assert (x["left_shared_memory"], x["left_registers"], x["left_threads"]) == left
        assert x["comm_fits"] == fits
    if name == "two-gpu-overlap":  # the issue's numbers: [2,66,1] = 132 CTAs of 188,636 B; NCCL 32 CTAs of 103,808 B
        x = doc["ranks"][0]["sm_evidence"]
        assert x["holder"]["ctas"] == 132 and x["holder"]["shared_memory"] == 188_636
        assert x["comm"]["ctas"] == 32 and x["comm"]["shared_memory"] == 103_808 and x["comm_fits"] is False
        assert x["comm_sms"] is None and x["env_recorded"] is True


@pytest.mark.parametrize("serial,overlapped,error", [("serial", "overlap", -0.20), ("two-gpu-serial", "two-gpu-overlap", -0.06)])
def test_the_model_predicts_a_dbo_arm_from_its_serial_arm(serial, overlapped, error):
    """docs/analysis.md ("What-if estimates") states these errors: the model predicts the overlapped
    arm's step from the serial arm's DBO arithmetic, N x min(C, R) shorter: each round trip moves from
    C + R to max(C, R)."""
    s = analyze_paths([SAMPLES / serial], Options()).round_trips
    o = analyze_paths([SAMPLES / overlapped], Options()).round_trips
    assert s.per_step == 8
    predicted = s.step_us - s.per_step * min(s.compute_per_round_trip_us, s.comm_per_round_trip_us)
    assert predicted / o.step_us - 1 == pytest.approx(error, abs=0.01)


def test_what_if_lines():
    from tests.conftest import run_cli

    shown = run_cli("report", str(SAMPLES / "overlap"), "--what-if", "round-trip=5ms")
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    # N = 8, C = 2.86 ms, R = 2.36 ms: 8 x (max(C, 5) - max(C, R)) = 8 x 2.14 ms longer
    assert "what-if, round trip 5000 us: step 53.70 ms against 36.59 ms measured (+47%); a model, not a measurement" in text
    assert "what-if, no hand-overs: step 34.15 ms against 36.59 ms measured (-7%)" in text
    refused = run_cli("report", str(SAMPLES / "overlap"), "--what-if", "threads=20")
    assert refused.returncode == 2 and "round-trip=TIME" in refused.stderr


def test_what_if_comm_sms_from_the_documents_figures():
    """sms=N by the docs' words from the JSON's own figures: step - crowded exposed per step +
    compute per step x N / (SMs - N)."""
    from dbo_trace.commands.report import ReportRequest

    request = ReportRequest(paths=(SAMPLES / "two-gpu-overlap",), what_if=("sms=20",))
    doc = json.loads(_json_with(request.options))
    rt = doc["round_trips"]
    crowded = sum(r["exposed_comm_reasons"]["crowded_us"] for r in doc["ranks"])
    steps = sum(len(r["steps"]) for r in doc["ranks"])
    compute = rt["compute_per_round_trip_us"] * rt["per_step"]
    expected = rt["step_us"] - crowded / steps + compute * 20 / 112
    (row,) = [x for x in doc["what_if"] if x["what"] == "20 of 132 SMs reserved for comm"]
    assert row["predicted_us"] == pytest.approx(expected, rel=1e-3)
    assert "a model, not a measurement" in row["assumptions"]


def _json_with(options):
    from dbo_trace.render.json_out import JsonRenderer

    return JsonRenderer().render(analyze_paths([SAMPLES / "two-gpu-overlap"], options))


def test_a_disaggregated_runs_comm_operations_and_hand_overs_are_labelled_by_layer():
    """AFD eager+DBO (tests/data/afd-eager-dbo-3steps): the event log has no layer events, so the
    layers are the attention rank's FFN round trips per microbatch and step; the layers counted here
    from the trace: each step's SendRecv kernels less its 2 control-plane sends, one send and one
    receive per round trip, one round trip per layer and microbatch."""
    import gzip
    from collections import Counter

    from conftest import ROOT, run_cli

    bundle = ROOT / "tests" / "data" / "afd-eager-dbo-3steps"
    (trace,) = (bundle / "traces").glob("*.json.gz")
    events = [e for e in json.load(gzip.open(trace))["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("execute_"))
    sendrecv = {e["args"]["correlation"] for e in events if e.get("cat") == "kernel" and "SendRecv" in e["name"]}
    launches = [e["ts"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver") and e["args"].get("correlation") in sendrecv]
    per_step = Counter(i for t in launches for i, (lo, hi) in enumerate(steps) if lo <= t <= hi)  # by the launch
    (kernels,) = set(per_step.values())
    layers = (kernels - 2) // 2 // 2
    assert layers == 27
    doc = json.loads(run_cli("report", "--json", str(bundle)).stdout)
    rank = doc["ranks"][0]
    ops = rank["comm_operations"]
    assert [(o["ubatch"], o["index"], o["layer"], o["role"]) for o in ops] == [
        (u, k, k, "round trip") for u in (0, 1) for k in range(layers)
    ]
    covered = [n for row in rank["comm_layers"] for n in range(row["first_layer"], row["last_layer"] + 1)]
    assert covered == list(range(layers)) and all(row["operations"] == 2 for row in rank["comm_layers"])
    assert [row["layer"] for row in rank["dbo_ledger"]["layers"]] == list(range(layers))
    text = run_cli("report", str(bundle)).stdout
    assert "1: layer 0 round trip" in text and "comm operations per layer" in text
    assert "what-if, no hand-overs: step" in " ".join(text.split())
