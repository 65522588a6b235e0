"""The shipped load sweep's text output (samples/afd-sweep, issue 61): what a reviewer pastes.

Each figure checked here is read back from the tool's own JSON or recomputed from the run's files
with the standard library; the text is checked for what it must show beside its call."""

from __future__ import annotations

import json
import math
import re
import statistics

import pytest
from conftest import ROOT, run_cli

SWEEP = "samples/afd-sweep"
INTERVAL = re.compile(r"([+-]\d+\.\d)%? \[([+-]\d+\.\d), ([+-]\d+\.\d)\]")


@pytest.fixture(scope="module")
def document() -> dict:
    proc = run_cli("report", "--json", SWEEP, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _change_rows(text: str) -> dict[str, str]:
    """The DBO change table's rows by load name (its first cell)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("DBO's change per load"))
    rule = next(i for i in range(start, len(lines)) if lines[i].lstrip().startswith("─"))
    rows = {}
    for line in lines[rule + 1 :]:
        if not line.startswith(" ") or line.startswith("  "):
            break
        rows[line.split()[0]] = line
    return rows


@pytest.mark.parametrize("columns", [None, "80"])
def test_at_80_columns_a_call_keeps_an_interval_that_excludes_0(monkeypatch, document, columns):
    """Piped (80 columns) or at 80: a row that says faster shows an interval wholly below 0, one that
    says slower an interval wholly above it: the column its call rests on is never the one dropped."""
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    proc = run_cli("report", SWEEP, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert max(len(line) for line in proc.stdout.splitlines()) <= 80
    rows = _change_rows(proc.stdout)
    points = {p["load"]: p for p in document["dbo"][0]["points"]}
    assert set(rows) == set(points) == {"c16", "c32", "c64"}
    for load, row in rows.items():
        shown = [(float(lo), float(hi)) for _, lo, hi in INTERVAL.findall(row)]
        if "DBO faster" in row:
            assert any(hi < 0 for _, hi in shown), row
        if "DBO slower" in row:
            assert any(lo > 0 for lo, _ in shown), row
        assert "DBO faster" in row or "DBO slower" in row, row
    # c64's call rests on its profiled step periods (its repeats' interval holds 0): that interval is shown
    p = points["c64"]["profiled"]
    assert points["c64"]["side_told_by"] == "profiled" and points["c64"]["change_high"] > 0
    assert f"[{100 * p['change_low']:+.1f}, {100 * p['change_high']:+.1f}]" in rows["c64"]


T95 = {2: 4.303, 3: 3.182, 4: 2.776}  # Student's t, two-sided 95%, by degrees of freedom


def _tpots(arm: str, load: str) -> list[float]:
    """A run's timed repeats' median TPOT, as its manifest records them."""
    manifest = json.loads((ROOT / SWEEP / arm / load / "manifest.json").read_text())
    return [r["median_tpot_ms"] for r in manifest["repeats"] if r["completed"]]


def _welch_bounds(off: list[float], on: list[float]) -> tuple[float, float]:
    """The Welch 95% interval's widest and narrowest bounds (t at the df's table neighbours), as fractions."""
    mo, mn = statistics.mean(off), statistics.mean(on)
    vo, vn = statistics.variance(off) / len(off), statistics.variance(on) / len(on)
    df = (vo + vn) ** 2 / (vo**2 / (len(off) - 1) + vn**2 / (len(on) - 1))
    t = T95[max(d for d in T95 if d <= df)]
    half = t * math.sqrt(vo + vn) / mo
    return mn / mo - 1 - half, mn / mo - 1 + half


def test_two_measures_of_one_change_that_disagree_are_said_and_reconciled(document):
    """c16: the repeats' TPOT change and the profiled step period's disagree beyond their intervals; the
    output says so, both intervals, and that the timed repeats are the ones to trust."""
    points = {p["load"]: p for p in document["dbo"][0]["points"]}
    for load, p in points.items():
        q = p["profiled"]
        apart = p["change_high"] < q["change_low"] or q["change_high"] < p["change_low"]
        assert p["measures_disagree"] is apart and p["trusted"] == ("repeats" if apart else None)
    assert [load for load, p in points.items() if p["measures_disagree"]] == ["c16"]
    # the repeats' interval at c16, from the runs' own manifests: wholly above the profiled one
    off, on = _tpots("graphs", "c16"), _tpots("graphs-dbo", "c16")
    widest_low, _ = _welch_bounds(off, on)
    assert widest_low > points["c16"]["profiled"]["change_high"]
    proc = run_cli("report", SWEEP, cwd=ROOT)
    text = " ".join(proc.stdout.split())
    p, q = points["c16"], points["c16"]["profiled"]
    repeats = f"{100 * p['change']:+.1f}% [{100 * p['change_low']:+.1f}, {100 * p['change_high']:+.1f}]"
    profiled = f"{100 * q['change']:+.1f}% [{100 * q['change_low']:+.1f}, {100 * q['change_high']:+.1f}]"
    said = f"c16: DBO's two measures disagree beyond their intervals: {repeats} by the timed repeats' TPOT, {profiled}"
    assert said in text and "Trust the timed repeats" in text
    assert text.count("disagree beyond their intervals") == 1  # c32 and c64: their intervals meet


def test_a_profiled_change_that_disagrees_with_the_repeats_does_not_place_a_side():
    """Where the repeats' interval holds 0 and the profiled one is beyond noise but apart from it, the
    repeats are trusted: the load is not put on a side (nor a turn placed) by the profiled change."""
    from dbo_trace.analysis.compare.arms import BEYOND, Pair
    from dbo_trace.analysis.compare.load_sweep import DboPoint, LoadPoint

    load = LoadPoint("c8", 8, 100, 128, 48)
    meeting = Pair("all", "on", "off", "g", change=0.02, change_low=0.005, change_high=0.04, call=BEYOND)
    apart = Pair("all", "on", "off", "g", change=0.04, change_low=0.03, change_high=0.05, call=BEYOND)
    base = DboPoint(load, "on", "off", (1.0, 1.0), (3, 3), 0.0, -0.01, 0.01, 4.0, "within noise")
    from dataclasses import replace

    assert replace(base, profiled=meeting).side == ("slower", "profiled")
    assert not replace(base, profiled=meeting).measures_disagree
    held = replace(base, profiled=apart)
    assert held.measures_disagree and held.trusted == "repeats" and held.side is None


def test_the_shipped_sweep_names_the_decode_threshold_its_turn_supports(document):
    """The turn lies between c32 (32 tokens a decode step) and c64 (64): the output names vLLM's
    --dbo-decode-token-threshold with a value above 32 and at most 64, placed at the faster load."""
    (series,) = document["dbo"]
    (turn,) = series["turns"]
    points = {p["load"]: p for p in series["points"]}
    slower, faster = points[turn["before"]], points[turn["after"]]
    # a decode step's tokens: the DBO arm's measured decode steps, two microbatches each
    low, high = int(2 * slower["measured_tokens_per_microbatch"]), int(2 * faster["measured_tokens_per_microbatch"])
    assert (low, high) == (32, 64) == (slower["in_flight"], faster["in_flight"])
    t = series["threshold"]
    assert t["kind"] == "split_from" and low < t["value"] <= high and t["value"] == high
    assert (t["at_load"], t["below_load"]) == ("c64", "c32")
    manifest = json.loads((ROOT / SWEEP / "graphs-dbo" / "c64" / "manifest.json").read_text())
    assert t["recorded"] == int(manifest["settings"]["dbo"]["dbo-decode-token-threshold"])
    proc = run_cli("report", SWEEP, cwd=ROOT)
    text = " ".join(proc.stdout.split())
    assert f"next step: set --dbo-decode-token-threshold {high} on graphs-dbo's server" in text
    assert "a bound placed at the faster load and no closer" in text


def _series_points(sides: list[str | None], tokens: list[int]):
    from dbo_trace.analysis.compare.load_sweep import DboPoint, LoadPoint

    calls = {"slower": "slower", "faster": "faster", None: "within noise"}
    return tuple(
        DboPoint(LoadPoint(f"c{n}", n, 1000, 128, 48), "on", "off", (1.0, 1.0), (3, 3), 0.0, -0.1, 0.1, 4.0, calls[side])
        for side, n in zip(sides, tokens)
    )


@pytest.mark.parametrize(
    "sides, kind, value, at, below",
    [
        (["slower", None, "faster", "faster"], "split_from", 48, ("c48", 48), ("c16", 16)),
        (["faster", "slower"], "turns_against", None, ("c32", 32), ("c16", 16)),
        (["slower", "faster", "slower"], "several_turns", None, None, None),
        ([None, "faster", "faster"], "faster_throughout", 32, ("c32", 32), None),
        (["slower", "slower", None], "slower_throughout", None, None, ("c32", 32)),
        ([None, None], "not_beyond_noise", None, None, None),
    ],
)
def test_the_threshold_is_placed_at_a_measured_load_or_none_is_supported(sides, kind, value, at, below):
    """The rule of docs/analysis.md "Load sweep": a threshold splits decode batches from a size up, so
    only a turn from slower to faster (or faster throughout) supports a value, the faster load's tokens."""
    from dbo_trace.analysis.compare.load_sweep import decode_threshold, turns_of

    tokens = [16 * (i + 1) for i in range(len(sides))]
    points = _series_points(sides, tokens)
    turns, _, _ = turns_of(list(points))
    t = decode_threshold(points, turns, 2)
    assert (t.kind, t.value, t.at, t.below, t.recorded) == (kind, value, at, below, 2)
