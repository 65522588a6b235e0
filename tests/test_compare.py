"""`dbo-trace compare` on the samples: statistics checked against the statistics module over each
sample's own `report --json` steps, and the noise call on arms known to differ and known to match."""

import json
import math
import statistics

import pytest
from conftest import SAMPLES, run_cli


def steps_ms(variant):
    report = json.loads(run_cli("report", "--json", str(SAMPLES / variant)).stdout)
    return [s["step_us"] for s in report["steps"]]


def compared(*variants):
    proc = run_cli("compare", "--json", *(str(SAMPLES / v) for v in variants))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_compare_statistics_match_the_per_step_report():
    out = compared("serial", "overlap", "graph")
    assert out["schema"] == "dbo-trace-compare"
    base = statistics.mean(steps_ms("serial"))
    for arm, variant in zip(out["arms"], ("serial", "overlap", "graph")):
        walls = steps_ms(variant)
        assert arm["label"] == variant and arm["steps"] == len(walls)
        assert arm["step_mean_us"] == pytest.approx(statistics.mean(walls), rel=1e-6)
        assert arm["step_std_us"] == pytest.approx(statistics.stdev(walls), rel=1e-6)
        if variant != "serial":
            assert arm["change"] == pytest.approx(
                statistics.mean(walls) / base - 1, abs=1e-4
            )  # fractions to 1e-4, as in the report
    assert out["arms"][0]["change"] is None
    assert out["arms"][2]["replayed_kernel_fraction"] == pytest.approx(1.0)
    assert out["arms"][1]["round_trips_per_layer"] == 2


def test_noise_call_separates_a_real_change_from_a_rerun():
    out = compared("overlap", "overlap-stock-profiler", "graph")
    rerun, graph = out["arms"][1], out["arms"][2]
    a, b = steps_ms("overlap"), steps_ms("overlap-stock-profiler")
    se = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
    assert rerun["within_noise"] is (abs(statistics.mean(a) - statistics.mean(b)) <= 2 * se) is True
    assert graph["within_noise"] is False
    assert "within noise" in out["noise"] and "overlap-stock-profiler" in out["noise"]


def test_compare_markdown_and_labels():
    proc = run_cli(
        "compare", "--markdown", "--label", "eager", "--label", "graphs", str(SAMPLES / "serial"), str(SAMPLES / "graph")
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("| arm | steps of | steps | step time")
    assert lines[2].startswith("| `eager` | all | 5 |")  # a label is a name: in code and "baseline" in lines[2]
    assert lines[3].startswith("| `graphs` | all | 5 |") and "%" in lines[3]


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
    assert "the arms differ in ranks (overlap 1, two-gpu-overlap 2, vllm-graphs-decode 1)" in proc.stderr
    assert "the arms differ in microbatched" in proc.stderr
    same = run_cli("compare", str(SAMPLES / "serial"), str(SAMPLES / "overlap"))
    assert "differ" not in same.stderr
