"""The summary tables (docs/analysis.md, "Summaries") against plain loops over json.load."""

import statistics

import pytest
from conftest import ROOT, SAMPLES, sample_trace
from headline_reference import events_of

from dbo_trace.analysis.model import Options
from dbo_trace.app.pipeline import analyze_paths

PUBLIC = ROOT / "tests" / "data" / "public"
CASES = [("vllm-graphs-decode", sample_trace("vllm-graphs-decode"), SAMPLES / "vllm-graphs-decode")] + [
    (n, PUBLIC / n, PUBLIC / n) for n in ("hta-rocm-mi250.json.gz", "kineto-2021-v100.json.gz")
]


@pytest.mark.parametrize("name,trace,source", CASES, ids=[c[0] for c in CASES])
def test_kernel_and_cpu_range_summaries(name, trace, source):
    events = events_of(trace)
    durations = {}
    for e in events:
        if e["cat"] == "kernel":
            durations.setdefault(e["name"], []).append(e["end"] - e["ts"])
    everything = sum(sum(v) for v in durations.values())
    r = analyze_paths([source], Options()).ranks[0]
    k = r.kernel_summary
    assert k.kernels == sum(len(v) for v in durations.values()) and k.names == len(durations)
    assert k.total_us == pytest.approx(everything)
    totals = sorted((sum(v) for v in durations.values()), reverse=True)
    assert [row.total_us for row in k.rows] == pytest.approx(totals[: len(k.rows)])
    for row in k.rows:
        d = durations[row.name]
        assert (row.count, row.min_us, row.max_us) == (len(d), pytest.approx(min(d)), pytest.approx(max(d)))
        assert row.median_us == pytest.approx(statistics.median(d))
        assert row.mean_us == pytest.approx(sum(d) / len(d))
        assert row.share == pytest.approx(sum(d) / everything)
    cpu = {}
    for e in events:
        if e["cat"] in ("cpu_op", "user_annotation", "python_function"):
            n, t = cpu.get(e["name"], (0, 0.0))
            cpu[e["name"]] = (n + 1, t + e["end"] - e["ts"])
    named = dict(r.host_causes_window.named) | dict(r.host_causes_window.cpu_ops)
    for row in r.cpu_ranges:
        assert (row.count, row.total_us) == (cpu[row.name][0], pytest.approx(cpu[row.name][1]))
        assert row.share == pytest.approx(row.host_idle_us / r.window.host_idle_us)
        if row.name in named:  # the host causes' top names are the same time
            assert row.host_idle_us == pytest.approx(named[row.name])
    assert [row.host_idle_us for row in r.cpu_ranges] == sorted((row.host_idle_us for row in r.cpu_ranges), reverse=True)


def _percentile(values, q):
    """Linear interpolation between closest ranks (numpy's default), by hand."""
    v = sorted(values)
    pos = (len(v) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def test_step_time_spread_per_phase():
    report = analyze_paths([SAMPLES / "vllm-graphs-decode"], Options())
    for p in report.phases:
        walls = [s.period_us for s in report.ranks[0].steps if s.phase == p.phase]  # every step's period
        x = p.step_spread
        assert x.median_us == pytest.approx(statistics.median(walls))
        assert x.p90_us == pytest.approx(_percentile(walls, 0.9))
        assert x.p99_us == pytest.approx(_percentile(walls, 0.99))
        assert x.max_us == max(walls)
    mixed = next(p for p in report.phases if p.phase == "mixed")
    assert mixed.step_spread.max_us > 800_000 > 20 * mixed.step_spread.median_us  # the one 845 ms step


def test_compare_shows_the_median_and_spread():
    from dbo_trace.analysis.compare.arms import arm_of

    report = analyze_paths([SAMPLES / "vllm-graphs-decode"], Options())
    arm = arm_of("graphs", report, "mixed")
    steady = [s.period_us for s in report.ranks[0].steps if s.phase == "mixed" and s.stall is None]
    assert arm.step_median_us == pytest.approx(statistics.median(steady))  # the steady steps' periods
    assert arm.step_max_us == max(steady)
