"""The step as a pipeline (issue 59; docs/analysis.md, "The step as a pipeline (AFD)"): every figure of
`report --json`'s `pipeline` and `overlap` blocks against tests/references/independent_pipeline.py,
written from the docs by a helper who never read dbo_trace/ (tests/references/NOTES-pipeline.md has
its readings), on the shipped AFD recordings; and `compare` giving the same overlap figures as
`report` (one meaning of hidden)."""

from __future__ import annotations

import json
from functools import lru_cache

import pytest
from conftest import SAMPLES, run_cli
from independent_pipeline import analyse

ARMS = [
    "afd-sweep/graphs/c16", "afd-sweep/graphs/c32", "afd-sweep/graphs/c64",
    "afd-sweep/graphs-dbo/c16", "afd-sweep/graphs-dbo/c32", "afd-sweep/graphs-dbo/c64",
    "afd-pair-graphs-dbo", "afd-graphs-dbo",
]  # fmt: skip
DBO_ARMS = [a for a in ARMS if "dbo" in a]


@lru_cache(maxsize=None)
def reference(arm: str) -> dict:
    return analyse(str(SAMPLES / arm))


@lru_cache(maxsize=None)
def document(arm: str) -> dict:
    done = run_cli("report", str(SAMPLES / arm), "--json")
    assert done.returncode == 0, done.stderr
    found: dict = json.loads(done.stdout)
    return found


@pytest.mark.parametrize("arm", ARMS)
def test_visits_and_their_medians_agree(arm):
    ref, p = reference(arm), document(arm)["pipeline"]
    assert p["microbatched"] == ref["microbatched"]
    assert p["has_ffn"] == (ref["ffn_matched"] > 0)
    for key in ("attention_us", "hop_out_us", "ffn_us", "hop_back_us", "round_trip_us"):
        if ref[key] is None:
            assert p[key] is None, key
        else:
            assert p[key] == pytest.approx(ref[key], abs=0.5), key
    assert p["loop_us"] == pytest.approx(ref["loop_us"], abs=2.0)
    # the period: the reference's own start-to-start (it reads a last step's period as its window)
    assert p["period_us"] == pytest.approx(ref["_details"]["period_us_start_to_start_only"], rel=0.01)
    if ref["ffn_matched"]:
        assert p["ffn_waited_share"] == pytest.approx(ref["ffn_receive_waited_share"], abs=0.005)
        assert p["attention_waited_share"] == pytest.approx(ref["attention_receive_waited_share"], abs=0.005)


@pytest.mark.parametrize("arm", [a for a in ARMS if a != "afd-graphs-dbo"])
def test_bounds_and_the_bound_that_held_agree(arm):
    ref, p = reference(arm), document(arm)["pipeline"]
    if ref["bounds_us"] is None:
        assert p["bounds_us"] is None and p["bound"] == ref["bound"] == "serial"
        return
    for key, value in ref["bounds_us"].items():
        assert p["bounds_us"][key] == pytest.approx(value, abs=1.0), key
    # the round trip and the FFN's busy bound lie within 1-4 us a layer: the call is close, and
    # both readings hold it for most steady steps
    assert p["bound"] == ref["bound"]


@pytest.mark.parametrize("arm", ARMS)
def test_overlap_has_one_meaning_and_agrees(arm):
    ref, o = reference(arm), document(arm)["overlap"]
    assert o["exposed_per_step_ms"] == pytest.approx(ref["exposed_per_step_ms"], abs=0.005)
    assert o["hidden_per_step_ms"] == pytest.approx(ref["hidden_per_step_ms"], abs=0.005)
    assert o["beside_round_trip_per_step_ms"] == pytest.approx(ref["beside_round_trip_per_step_ms"], abs=0.005)
    share = document(arm)["disaggregated"]["overlapped_share"]
    assert share == pytest.approx(ref["overlapped_share"], abs=0.002)


@pytest.mark.parametrize("arm", DBO_ARMS)
def test_the_first_line_gives_the_three_figures_and_calls_it_overlapped(arm):
    """The DBO arm at 64 in flight, where DBO pays, is no longer called not-overlapped (its hidden share
    alone, 21%, sat on the line); the headline gives exposed, hidden and beside, as the JSON does."""
    d = document(arm)
    o = d["overlap"]
    assert d["verdict"]["label"] == "overlapped"
    head = d["verdict"]["headline"]
    assert f"{o['hidden_per_step_ms']:.2f} ms under its compute" in head
    assert f"{o['beside_round_trip_per_step_ms']:.2f} ms beside its round trip" in head
    assert f"{o['exposed_per_step_ms']:.2f} ms of comm exposed" in head


def test_layer_view_works_on_a_graph_replayed_dbo_arm():
    """--layers 27 --layer 3 on a graph-replayed DBO arm: its visits per microbatch (the layer told by
    the round trips' order), not 'the report has no layer labels'."""
    done = run_cli("report", str(SAMPLES / "afd-sweep/graphs-dbo/c64"), "--layers", "27", "--layer", "3")
    assert done.returncode == 0, done.stderr
    assert "pipeline, layer 3" in done.stdout
    rows = [line.split() for line in done.stdout.splitlines() if line.split()[:2] in (["3", "0"], ["3", "1"])]
    assert len(rows) == 2
    ref = reference("afd-sweep/graphs-dbo/c64")
    assert ref["per_step"]  # the reference's steps are there to check the layer's visits exist
    layer_rows = [x for x in document("afd-sweep/graphs-dbo/c64")["pipeline"]["layers_detail"] if x["layer"] == 3]
    assert [x["visits"] for x in layer_rows] == [20, 20]


def test_compare_gives_each_arm_the_reports_overlap():
    """One meaning of hidden: compare's JSON holds, per arm, the overlap report --json gives."""
    off, on = SAMPLES / "afd-sweep/graphs/c64", SAMPLES / "afd-sweep/graphs-dbo/c64"
    done = run_cli("compare", str(off), str(on), "--label", "off", "--label", "on", "--json")
    assert done.returncode == 0, done.stderr
    arms = {a["label"]: a for a in json.loads(done.stdout)["arms"] if a["phase"] == "all"}
    for label, arm in (("off", "afd-sweep/graphs/c64"), ("on", "afd-sweep/graphs-dbo/c64")):
        mine, theirs = arms[label]["overlap"], document(arm)["overlap"]
        for key in ("exposed_per_step_ms", "hidden_per_step_ms", "beside_round_trip_per_step_ms"):
            assert mine[key] == pytest.approx(theirs[key], abs=0.1), key


def test_one_step_median_in_report_and_compare():
    """Issue 61: an arm's step median reads one way. On samples/afd-pair-graphs-dbo (steps from the event
    log, vLLM's annotations beside them) the report's phase median, its step-time table, the profiler's
    period and the pipeline's are compare's, and the reference's start-to-start median of the
    `execute_*` annotations, within 0.5%."""
    arm = "afd-pair-graphs-dbo"
    d = document(arm)
    truth = reference(arm)["_details"]["period_us_start_to_start_only"]
    done = run_cli("compare", str(SAMPLES / "afd-graphs"), str(SAMPLES / arm), "--json")
    assert done.returncode == 0, done.stderr
    (theirs,) = [a for a in json.loads(done.stdout)["arms"] if a["label"] == arm and a["phase"] == "all"]
    medians = {
        "phase": d["phases"]["decode"]["median_step_us"],
        "step time table": d["phases"]["decode"]["step_us"]["median"],
        "profiler": d["profiler"]["profiled_period_us"],
        "pipeline": d["pipeline"]["period_us"],
        "compare": theirs["step_median_us"],
    }
    for what, value in medians.items():
        assert value == pytest.approx(truth, rel=0.005), (what, value, truth)
