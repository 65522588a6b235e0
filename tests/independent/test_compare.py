"""`dbo-trace compare` on the samples: statistics checked against a plain computation from the docs
(tests/references/compare_reference.py) over each sample's own `report --json` steps, and the noise call on arms
known to differ and known to match."""

import re
import json
import statistics

import pytest
import compare_reference as reference_compare
from conftest import SAMPLES, run_cli

_REPORTS: dict[str, dict] = {}


def report(variant):
    if variant not in _REPORTS:
        _REPORTS[variant] = json.loads(run_cli("report", "--json", str(SAMPLES / variant)).stdout)
    return _REPORTS[variant]


def compared(*variants):
    proc = run_cli("compare", "--json", *(str(SAMPLES / v) for v in variants))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_compare_statistics_match_the_per_step_report():
    out = compared("serial", "overlap", "graph")
    assert out["schema"] == "dbo-trace-compare" and out["schema_version"] == 8
    for arm, variant in zip(out["arms"], ("serial", "overlap", "graph")):
        doc = report(variant)
        periods = [s["step_us"] for s in doc["steps"]]
        # start to start: the last step (the latest start) has no next start, and its period is its window
        last = max(doc["steps"], key=lambda s: s["start_us"])
        steady = [s["step_us"] for s in doc["steps"] if s["stall"] is None and s is not last]
        stalls = sum(s["stall"] is not None for s in doc["steps"])
        assert arm["label"] == variant and arm["steps"] == len(steady) and arm["stalls"] == stalls
        assert arm["step_mean_us"] == pytest.approx(statistics.mean(periods), rel=1e-6)
        assert arm["step_median_us"] == pytest.approx(statistics.median(steady), abs=1e-3)
        if variant != "serial":
            want = reference_compare.against(
                reference_compare.sample(report("serial"), "all"), reference_compare.sample(doc, "all")
            )
            assert arm["call"] == want["call"]
            assert arm["change"] == pytest.approx(want["change"], abs=1e-4)  # fractions to 1e-4, as in the report
            assert arm["change_low"] == pytest.approx(want["low"], abs=1e-4)
            assert arm["change_high"] == pytest.approx(want["high"], abs=1e-4)
    assert out["arms"][0]["change"] is None and out["arms"][0]["call"] is None
    assert out["arms"][2]["replayed_kernel_fraction"] == pytest.approx(1.0)
    assert out["arms"][1]["round_trips_per_layer"] == 2


def test_noise_call_separates_a_real_change_from_a_rerun():
    """vLLM eager against graphs decode (115 and 106 periods) is a change beyond noise; the demo's rerun
    and graph arms hold 5 steps, 4 start-to-start periods each: too few for any call."""
    out = compared("vllm-eager-decode", "vllm-graphs-decode")
    graph = out["arms"][1]
    want = reference_compare.against(reference_compare.sample(report("vllm-eager-decode"), "all"),
                                     reference_compare.sample(report("vllm-graphs-decode"), "all"))  # fmt: skip
    assert graph["call"] == want["call"] == "beyond noise" and graph["within_noise"] is False
    assert tuple(graph["compared_steps"]) == want["n"]
    assert graph["slower_pairs"] == pytest.approx(want["slower"], abs=1e-4)
    out = compared("overlap", "overlap-stock-profiler", "graph")
    base = reference_compare.sample(report("overlap"), "all")
    for arm, variant in zip(out["arms"][1:], ("overlap-stock-profiler", "graph")):
        want = reference_compare.against(base, reference_compare.sample(report(variant), "all"))
        assert arm["call"] == want["call"] == "too few steps" and tuple(arm["compared_steps"]) == want["n"] == (4, 4)
        assert arm["within_noise"] is None  # no call: the table shows no change


def test_the_dsv2lite_prefill_arms_compare_periods_and_make_no_claim_from_one_step(monkeypatch):
    """Eager against graphs prefill (docs/analysis.md, "compare"): the mixed steps are compared by their
    periods, paired by shape (the graphs arm's 8,837-token step has no eager partner), the stalls apart;
    the one-step prefill and decode rows are too few to tell, with no change shown."""
    proc = run_cli("compare", "--json", str(SAMPLES / "dsv2lite-eager-prefill"), str(SAMPLES / "dsv2lite-graphs-prefill"))
    assert proc.returncode == 0, proc.stderr
    arms = {(a["label"], a["phase"]): a for a in json.loads(proc.stdout)["arms"]}
    eager, graphs = report("dsv2lite-eager-prefill"), report("dsv2lite-graphs-prefill")
    for phase in ("all", "prefill", "decode", "mixed"):
        arm = arms[("dsv2lite-graphs-prefill", phase)]
        want = reference_compare.against(reference_compare.sample(eager, phase), reference_compare.sample(graphs, phase))
        assert arm["call"] == want["call"]
        assert tuple(arm["compared_steps"]) == want["n"]
        if want["call"] != "too few steps":
            assert arm["change"] == pytest.approx(want["change"], abs=1e-4)
            assert (arm["change_low"], arm["change_high"]) == pytest.approx((want["low"], want["high"]), abs=1e-4)
            assert arm["paired_by_shape"] is want["paired"] and arm["per_token"] is want["per_token"]
    mixed = arms[("dsv2lite-graphs-prefill", "mixed")]
    assert mixed["paired_by_shape"] and tuple(mixed["compared_steps"]) == (11, 11)
    assert arms[("dsv2lite-eager-prefill", "mixed")]["stalls"] == 1
    for phase in ("prefill", "decode"):
        assert arms[("dsv2lite-graphs-prefill", phase)]["call"] == "too few steps"
    monkeypatch.setenv("COLUMNS", "250")  # a row a line (at the piped default of 80 the rows are stacked)
    table = run_cli("compare", str(SAMPLES / "dsv2lite-eager-prefill"), str(SAMPLES / "dsv2lite-graphs-prefill")).stdout
    prefill_rows = [line for line in table.splitlines() if line.lstrip().startswith("dsv2lite-graphs-prefill  prefill ")]
    # no change claimed: the change cell says so, and no signed percentage stands anywhere in the row
    assert prefill_rows and all("too few steps" in line and not re.search(r"[+-]\d+\.\d%", line) for line in prefill_rows)


def test_compare_markdown_and_labels():
    proc = run_cli(
        "compare", "--markdown", "--label", "eager", "--label", "graphs", str(SAMPLES / "serial"), str(SAMPLES / "graph")
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("| arm | steps of | steps | step period ms: median (p90, max)")
    assert lines[2].startswith("| `eager` | all | 4 |")  # 4 periods of 5 steps; a label is a name: in code and "baseline" in lines[2]
    assert lines[3].startswith("| `graphs` | all | 4 |") and "%" in lines[3]


@pytest.mark.parametrize(
    "args,message",
    [
        (["samples/serial"], "compare needs at least two arms"),
        (["--label", "a", "samples/serial", "samples/graph"], "--label given once for 2 arms"),
        (["samples/serial", "samples/nope"], "samples/nope: no such file or directory"),
    ],
)
def test_compare_bad_input_is_one_line(args, message):
    from conftest import ROOT

    proc = run_cli("compare", *args, cwd=ROOT)
    assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_compare_warns_when_the_arms_differ_in_shape():
    proc = run_cli("compare", str(SAMPLES / "overlap"), str(SAMPLES / "two-gpu-overlap"), str(SAMPLES / "vllm-graphs-decode"))
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stderr.split())  # a warning wraps at the terminal's width
    assert "the arms differ in ranks (overlap 1, two-gpu-overlap 2, vllm-graphs-decode 1)" in said
    assert "the arms differ in microbatched" in said
    same = run_cli("compare", str(SAMPLES / "serial"), str(SAMPLES / "overlap"))
    assert "differ" not in same.stderr
