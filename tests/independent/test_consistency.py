"""Every shipped sample's document agrees with itself (issue 56): figures that a reader adds up do
add up, and a label never contradicts the figure beside it. Relations, not wording: they hold on
every sample, whatever its figures. The documents are the goldens, which tests/golden/test_golden.py keeps
equal to what `report --json` writes today."""

import json
from pathlib import Path

import pytest
from conftest import ROOT

GOLDEN = ROOT / "tests" / "golden"
# every report document among the goldens (a load sweep's summary is another schema: tests/unit/test_sweep_read.py)
DOCUMENTS = sorted(p for p in GOLDEN.glob("*.json") if json.loads(p.read_text()).get("schema") == "dbo-trace-report")
TOLERANCE = 0.002  # of the whole: the document rounds shares to 4 digits and times to 3


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def _windows(doc: dict) -> list[tuple[str, dict]]:
    """The run, each rank, and each rank's steps: every block that carries the time and comm figures."""
    out = [("run", doc)]
    for r in doc["ranks"]:
        out.append((f"rank {r['rank']}", r))
        out += [(f"rank {r['rank']} step {s.get('number')}", s) for s in r.get("steps", [])]
    return out


def test_there_are_documents_to_check():
    assert len(DOCUMENTS) >= 20


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.stem)
def test_hidden_and_exposed_shares_of_an_operation_add_up(path):
    """two-gpu-overlap's layer 0 read '76% hidden, 0.73 ms median exposed' of 1.65 ms: a share of the
    total beside a median, 120% in all. Both are now shares of one total."""
    checked = 0
    for r in _load(path)["ranks"]:
        for row in list(r.get("comm_operations") or []) + list(r.get("comm_layers") or []):
            hidden, exposed = row.get("hidden_fraction"), row.get("exposed_fraction")
            if hidden is None or exposed is None:
                continue
            assert abs(hidden + exposed - 1.0) <= TOLERANCE, (r["rank"], row)
            checked += 1
    if any(r.get("comm_operations") for r in _load(path)["ranks"]):
        assert checked, "operations without exposed shares"


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.stem)
def test_comm_splits_into_hidden_and_exposed(path):
    for where, w in _windows(_load(path)):
        comm = w.get("comm")
        if not isinstance(comm, dict) or not comm.get("busy_us"):
            continue
        assert abs(comm["hidden_us"] + comm["exposed_us"] - comm["busy_us"]) <= TOLERANCE * comm["busy_us"] + 0.01, where


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.stem)
def test_the_time_split_adds_up_to_the_window(path):
    """compute, exposed comm, copies, host-caused and other idle: the 'rank time' line's shares."""
    for where, w in _windows(_load(path)):
        t = w.get("time")
        if not isinstance(t, dict) or not t.get("window_us"):
            continue
        parts = t["compute_us"] + t["comm_exposed_us"] + t["copy_us"] + t["host_idle_us"] + t["other_idle_us"]
        assert abs(parts - t["window_us"]) <= TOLERANCE * t["window_us"] + 0.01, (where, t)


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.stem)
def test_exposed_comm_reasons_add_up_to_the_exposed_comm(path):
    for r in _load(path)["ranks"]:
        reasons = r.get("exposed_comm_reasons")
        if not isinstance(reasons, dict) or not reasons.get("exposed_us"):
            continue
        total = sum(v for k, v in reasons.items() if k.endswith("_us") and k != "exposed_us")
        exposed = reasons["exposed_us"]
        assert abs(exposed - r["comm"]["exposed_us"]) <= 0.01
        assert abs(total - exposed) <= TOLERANCE * max(exposed, 1.0) + 0.01, (r["rank"], total, exposed)


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.stem)
def test_a_what_if_without_effect_says_why(path):
    """`--what-if round-trip=...` predicted +0% on a run with 38 ms of exposed comm, and did not say
    that the round trip's length is not what exposed it. (The goldens hold the default what-ifs.)"""
    for x in _load(path).get("what_if") or []:
        if x["what"].startswith("round trip") and x["change"] is not None and abs(x["change"]) < 0.005:
            assert "no change here" in x["assumptions"], x


def test_a_round_trip_what_if_without_effect_says_why_on_overlap():
    """The case the tester met: samples/overlap, whose compute per microbatch covers the round trip."""
    from dbo_trace.analysis.model import Options
    from dbo_trace.app.pipeline import analyze_paths
    from dbo_trace.render import RENDERERS, RenderOptions

    report = analyze_paths([ROOT / "samples" / "overlap"], Options(what_if_round_trip_us=(100.0,)))
    doc = json.loads(RENDERERS["json"].render(report, RenderOptions(width=100)))
    rows = [x for x in doc["what_if"] if x["what"].startswith("round trip")]
    assert rows and abs(rows[0]["change"]) < 0.005
    assert doc["comm"]["exposed_us"] > 30_000  # 38 ms exposed beside it
    assert "no change here" in rows[0]["assumptions"] and "covers the round trip" in rows[0]["assumptions"]


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.stem)
def test_no_straggler_is_said_only_of_the_steps_starts(path):
    """'no straggler' was followed by 'rank 1 waited 20.49 ms (43% of its comm time) for rank 0'."""
    cross = _load(path).get("cross_rank")
    if isinstance(cross, dict) and str(cross.get("summary", "")).startswith("no straggler"):
        assert cross["summary"].startswith("no straggler at the steps' starts")
        assert "waits at collectives inside the steps are counted apart" in cross["summary"]
