"""`dbo-trace report --json` on the AFD decode arms against a reviewer's plain count of the raw files.

The truth is `tests/references/afd_pair_truth.py` (json, gzip and statistics over the Kineto traces
and the bench repeats; written without reading dbo-trace's code). Tolerances, as the review was
asked for: round trips within 10%, the FFN's compute per step (and per round trip) within 15%, GPU
busy shares within 0.03, step periods within 2%; the median round trip within 2% (both sides pair
the same kernels), the unprofiled TPOT within 0.5% (the same three numbers averaged); `compare`'s DBO
pairs: the period's change within what 2% on each period allows, the TPOT's change within 0.005.

Where the report and the count define a figure differently the test says how (see each test). The
one known disagreement: on `afd-pair-graphs-dbo` the report takes its steps from the event log's
`dbo:step#N:graph_replay` ranges, which start ~5 ms into vLLM's `execute_*` steps (9.9 ms into the
first), so its "over the attention's steps" span starts one step-preparation later than vLLM's
steps do; the attention's busy share then differs by 0.037 (strict xfail below, explained by
`test_busy_over_the_reports_own_steps`).
"""

import functools
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples"

_spec = importlib.util.spec_from_file_location("afd_pair_truth", REPO / "tests" / "references" / "afd_pair_truth.py")
T = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(T)

_spec = importlib.util.spec_from_file_location("afd_late_receive_truth", REPO / "tests" / "references" / "afd_late_receive_truth.py")
LATE = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(LATE)

PAIRS = ["afd-eager", "afd-pair-graphs-dbo", "afd-pair-graphs-nomps"]  # both roles traced
ATTENTION_ONLY = ["afd-eager-dbo", "afd-graphs", "afd-graphs-dbo"]
ARMS = PAIRS + ATTENTION_ONLY
MPS_PAIRS = ["afd-eager", "afd-pair-graphs-dbo"]


def dbo_trace():
    here = Path(sys.executable).parent / "dbo-trace"
    found = str(here) if here.exists() else shutil.which("dbo-trace")
    if not found:
        pytest.skip("no dbo-trace executable next to this Python or on PATH")
    return found


@functools.lru_cache(maxsize=None)
def truth(name):
    return T.bundle_truth(str(SAMPLES / name))


@functools.lru_cache(maxsize=None)
def report(name):
    # `report SAMPLE --json` writes the document on stdout (`--json -` would read `-` as a path).
    env = dict(os.environ, COLUMNS="160")
    run = subprocess.run([dbo_trace(), "report", str(SAMPLES / name), "--json"], capture_output=True, text=True,
                         env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


@functools.lru_cache(maxsize=None)
def compare(off, on):
    run = subprocess.run([dbo_trace(), "compare", str(SAMPLES / off), str(SAMPLES / on), "--json"],
                         capture_output=True, text=True, env=dict(os.environ, COLUMNS="160"), timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


def field(doc, *path):
    """doc[path...]; fails, naming the figure, where the report has no such field or holds null
    there: a figure these samples measure going missing or null is the regression to catch."""
    cur = doc
    name = ".".join(map(str, path))
    for key in path:
        if isinstance(cur, dict) and key in cur:
            cur = cur[key]
        elif isinstance(cur, list) and isinstance(key, int) and -len(cur) <= key < len(cur):
            cur = cur[key]
        else:
            pytest.fail(f"the report JSON has no {name}")
    assert cur is not None, f"the report JSON's {name} is null"
    return cur


def within(tool, true, rel):
    return abs(tool - true) <= rel * abs(true)


# --- the count itself: the facts it rests on hold on every arm -----------------------------------

@pytest.mark.parametrize("name", ARMS)
def test_truth_rests_on_facts(name):
    t = truth(name)
    a = t["attention"]
    mb = 2 if a["microbatched"] else 1
    assert a["steps"] in (10, 20)
    assert set(a["control_kernels_per_step"]) == {2}  # the connector's two control-plane sends
    assert set(a["data_kernels_per_step"]) == {2 * T.LAYERS * mb}
    assert set(a["microbatches_per_step"]) == {mb}
    # Send/receive from the CPU ops (eager) follow the pattern assumed inside graph replays...
    assert all(a["order_matches_pattern"])
    # ...and every step's compute-between-data-kernels signature is the eager arm's of its kind.
    expected = (True, False) * 3 if mb == 2 else (False, True) * 3
    assert set(a["gap_signatures"]) == {expected}
    # Where the launching thread tells the microbatch (eager + DBO), FIFO pairing is per-thread pairing.
    if name == "afd-eager-dbo":
        assert a["pairing_agrees_with_threads"] and all(a["pairing_agrees_with_threads"])
    assert a["round_trips_per_step"] == T.LAYERS * mb
    if t["pair"] is not None:
        assert t["pair"]["same_clock"]
        assert t["pair"]["round_trips_with_ffn_compute"] == 1.0  # the FFN computes inside every round trip
    assert t["bench"]["repeats"] == 3


# --- the FFN's steps are the attention's (issue 61, item 3) -------------------------------------

@pytest.mark.parametrize("name", PAIRS)
def test_ffn_steps_are_the_attentions(name):
    """The FFN's trace marks no step; its steps are the attention's on the pair's clock. The count is
    the raw attention trace's `execute_*` steps (the reference's), on both ranks; each FFN step holds
    the same kernels (one forward pass each), so no step is one of GPU idle gaps."""
    doc, a = report(name), truth(name)["attention"]
    by_role = {r["role"]: r for r in doc["ranks"]}
    assert len(by_role["attention"]["steps"]) == a["steps"]
    ffn = by_role["ffn"]
    assert len(ffn["steps"]) == a["steps"], [s.get("label") for s in ffn["steps"]]
    assert not ffn["steps_inferred"]
    assert "attention" in ffn["steps_source"]


# --- round trips, microbatching, periods --------------------------------------------------------

@pytest.mark.parametrize("name", ARMS)
def test_round_trips(name):
    doc, a = report(name), truth(name)["attention"]
    assert within(field(doc, "disaggregated", "per_step"), a["round_trips_per_step"], 0.10)
    assert within(field(doc, "disaggregated", "per_layer"), a["round_trips_per_layer"], 0.10)
    assert within(field(doc, "disaggregated", "round_trips"), a["round_trips_total"], 0.10)
    assert within(field(doc, "disaggregated", "control_kernels"), sum(a["control_kernels_per_step"]), 0.10)
    assert field(doc, "disaggregated", "steps") == a["steps"]


@pytest.mark.parametrize("name", ARMS)
def test_median_round_trip(name):
    doc, a = report(name), truth(name)["attention"]
    assert within(field(doc, "disaggregated", "median_us"), a["median_round_trip_us"], 0.02)


@pytest.mark.parametrize("name", ARMS)
def test_microbatched(name):
    doc, a = report(name), truth(name)["attention"]
    assert field(doc, "disaggregated", "microbatched") is a["microbatched"]
    assert field(doc, "round_trips", "microbatched") is a["microbatched"]


@pytest.mark.parametrize("name", ARMS)
def test_period(name):
    doc, a = report(name), truth(name)["attention"]
    assert within(field(doc, "profiler", "profiled_period_us"), a["median_period_us"], 0.02)
    # The phase's median also counts the last step's window as its period: still within 2%.
    assert within(field(doc, "phases", "decode", "median_step_us"), a["median_period_us"], 0.02)


# --- unprofiled TPOT and the profiler's cost ------------------------------------------------------

@pytest.mark.parametrize("name", ARMS)
def test_unprofiled_and_overhead(name):
    doc, t = report(name), truth(name)
    # The report averages the repeats' median TPOTs (the count's headline takes their median; both kept).
    tpot = field(doc, "profiler", "unprofiled_tpot_ms")
    assert within(tpot, t["bench"]["tpot_ms_mean"], 0.005)
    assert field(doc, "profiler", "repeats") == t["bench"]["repeats"]
    overhead = field(doc, "profiler", "overhead")
    mine = t["attention"]["median_period_us"] / (t["bench"]["tpot_ms_mean"] * 1000) - 1
    # 2% of period at most, as a change of the ratio: 0.02 x (1 + overhead).
    assert abs(overhead - mine) <= 0.02 * (1 + mine) + 0.001


# --- both roles ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ARMS)
def test_roles_labelled(name):
    doc = report(name)
    ranks = field(doc, "ranks")
    assert ranks[0].get("role") == "attention"
    assert field(doc, "roles", "roles") == ["attention", "ffn"]
    if name in PAIRS:
        assert len(ranks) == 2 and ranks[1].get("role") == "ffn"
    else:
        assert len(ranks) == 1


@pytest.mark.parametrize("name", PAIRS)
def test_ffn_compute(name):
    doc, p, a = report(name), truth(name)["pair"], truth(name)["attention"]
    assert field(doc, "roles", "pair", "steps") == a["steps"]
    assert within(field(doc, "roles", "pair", "ffn_compute_per_step_us"), p["ffn_compute_per_step_us"], 0.15)
    assert within(field(doc, "roles", "pair", "ffn_compute_per_round_trip_us"), p["ffn_compute_per_round_trip_us"], 0.15)
    assert within(field(doc, "roles", "pair", "round_trips_per_step"), a["round_trips_per_step"], 0.10)


BUSY_XFAIL = {
    ("afd-pair-graphs-dbo", "attention_busy"): "the report's steps are the event log's graph replays, which start "
    "9.9 ms after vLLM's first execute_* step: over vLLM's steps the attention is 0.698 busy, the report says 0.735",
}


@pytest.mark.parametrize("name", PAIRS)
@pytest.mark.parametrize("key", ["attention_busy", "ffn_busy", "both_busy"])
def test_busy(name, key):
    """Over vLLM's steps (the first execute_* start to the last step's GPU end), kernels only."""
    doc, p = report(name), truth(name)["pair"]
    tool = field(doc, "roles", "pair", key)
    if (name, key) in BUSY_XFAIL:
        if abs(tool - p[key]) > 0.03:
            pytest.xfail(BUSY_XFAIL[name, key])
        pytest.fail(f"{name} {key}: now within 0.03 ({tool} against {p[key]:.4f}); drop it from BUSY_XFAIL")
    assert abs(tool - p[key]) <= 0.03, (tool, p[key])


@pytest.mark.parametrize("name", PAIRS)
def test_busy_over_the_reports_own_steps(name):
    """Counted over the report's own steps (its first step's start to its last step's end), copies
    and memsets included as the report's "GPU activities" are, the three shares agree within 0.005:
    where the figures differ, the steps differ, not the counting."""
    doc = report(name)
    steps = field(doc, "ranks", 0, "steps")
    lo, hi = steps[0]["start_us"], steps[-1]["start_us"] + steps[-1]["step_us"]
    a, f = truth(name)["attention"], truth(name)["pair"]["ffn"]
    span = hi - lo
    au = T.union(T.clip(a["activity_intervals"], lo, hi))
    fu = T.union(T.clip(f["activities"], lo, hi))
    mine = {"attention_busy": T.total(au) / span, "ffn_busy": T.total(fu) / span,
            "both_busy": T.total(T.intersect(au, fu)) / span}
    for key, value in mine.items():
        assert abs(field(doc, "roles", "pair", key) - value) <= 0.005, (key, value)


# --- GPU sharing ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", PAIRS)
def test_time_slicing(name):
    doc, t = report(name), truth(name)
    sliced = field(doc, "roles", "time_slicing", "sliced")
    a = t["attention"]
    ratio = a["median_recv_kernel_us"] / a["median_send_kernel_us"]
    if name == "afd-pair-graphs-nomps":
        assert t["mps_daemon"] == "not running" and ratio > 100  # 4.44 ms receive against a 17 us send
        assert sliced is True
        assert field(doc, "roles", "mps") is False
    else:
        assert t["mps_daemon"] == "answered" and ratio < 10
        assert sliced is False
        assert field(doc, "roles", "mps") is True
    assert field(doc, "roles", "shared_gpu") is True


# --- DBO's effect (compare) ----------------------------------------------------------------------

@pytest.mark.parametrize("on,off", [("afd-pair-graphs-dbo", "afd-graphs"), ("afd-graphs-dbo", "afd-graphs"),
                                    ("afd-eager-dbo", "afd-eager")])
def test_dbo_effect(on, off):
    """compare's DBO pair: the change of the median period within what 2% on each period allows, the
    unprofiled TPOT's change as the means of the repeats' median TPOTs give it; DBO slower in all three."""
    doc = compare(off, on)
    pairs = [p for p in field(doc, "pairs") if p.get("on") == on and p.get("off") == off]
    assert len(pairs) == 1, field(doc, "pairs")
    pair = pairs[0]
    t_on, t_off = truth(on), truth(off)
    mine = T.dbo_effect(t_on, t_off)["period_change"]
    assert mine > 0.05  # DBO costs time in every arm
    assert abs(field(pair, "change") - mine) <= 2 * 0.02 * (1 + mine), (pair["change"], mine)
    # the load admits more prompts than its concurrency (prefills interleave): the unprofiled change is
    # by ITL (issue 61 item 8), the means of the repeats' median ITLs, read here from the repeats' files
    assert field(pair, "tpot_basis") == "ITL"
    itl = _itl_mean(SAMPLES / on) / _itl_mean(SAMPLES / off) - 1
    assert abs(field(pair, "tpot_change") - itl) <= 0.005
    assert field(pair, "outcome") == "DBO slower"


def _itl_mean(bundle) -> float:
    itls = [json.loads(p.read_text())["median_itl_ms"] for p in sorted((bundle / "bench").glob("repeat-*.json"))]
    assert len(itls) == 3
    return statistics.mean(itls)


@pytest.mark.parametrize("off,on,arm", [("afd-graphs", "afd-pair-graphs-dbo", "afd-pair-graphs-dbo"),
                                        ("afd-eager", "afd-eager-dbo", "afd-eager")])
def test_compare_gives_the_reports_round_trip_parts(off, on, arm):
    """An arm with the FFN's trace: compare's round-trip parts are the report's, the FFN's compute and
    its queueing apart included (compare once looked them up under other names and said 'with queue')."""
    parts = field(report(arm), "disaggregated", "parts")
    (row,) = [a for a in field(compare(off, on), "arms") if a["label"] == arm and a["phase"] == "all"]
    for mine, theirs in (("round_trip_transfer_us", "transfer_us"), ("round_trip_ffn_us", "ffn_us"),
                         ("round_trip_ffn_compute_us", "ffn_compute_us"), ("round_trip_ffn_queue_us", "ffn_queue_us"),
                         ("round_trip_wait_us", "wait_us"), ("round_trip_late_us", "late_us")):
        assert row[mine] is not None and row[mine] == pytest.approx(parts[theirs], abs=1e-3), mine


@pytest.mark.parametrize("name", PAIRS)
def test_late_receive(name):
    """The round trip's transfer and, of it, the late receive (the FFN's answer waiting for the
    attention to post its receive) against tests/references/afd_late_receive_truth.py, a reviewer's
    count from the docs alone: eager's 1.81 ms of a 2.02 ms transfer is the attention host's lateness."""
    ref = LATE.late_receive(str(SAMPLES / name))
    parts = field(report(name), "disaggregated", "parts")
    assert parts["matched"] == ref["matched"] == ref["round_trips"]
    for key in ("late_us", "transfer_us"):
        assert parts[key] == pytest.approx(ref[key], abs=0.01), key
    if name == "afd-eager":
        assert parts["late_us"] > 0.8 * parts["transfer_us"]  # the wire is a small part of it


# --- one GPU: the roles' figures are never added (issue 61, item 5) -------------------------------

def test_shared_gpu_host_idle_is_the_served_roles():
    """samples/afd-eager runs both roles on one GPU: the report's host-idle line is the attention's
    own (its in-step host idle over its steps, from its own rank block), the FFN's apart, never the
    two added (which read 48%, one GPU's time counted twice)."""
    doc = report("afd-eager")
    assert doc["roles"]["shared_gpu"] is True
    by_role = {r["role"]: r for r in doc["ranks"]}
    reasons = [x for x in doc["verdict"]["reasons"] if "GPU idle waiting for the host" in str(x)]
    assert len(reasons) == 1, reasons
    line = str(reasons[0])
    att_host = by_role["attention"]["host_test"]
    ffn_host = by_role["ffn"]["host_test"]
    att = f"the attention's GPU idle waiting for the host {round(100 * att_host['fraction'])}%"
    assert att in line, line
    assert f"the ffn apart (the roles share one GPU" in line and f"host {round(100 * ffn_host['fraction'])}%" in line
    # the attention alone is host-bound as the raw count says: its GPU idle most of its steps
    assert att_host["fraction"] > 0.9
