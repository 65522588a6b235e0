"""The GPU's clock against the CPU's, and incomplete traces (issue 54; docs/analysis.md, "The GPU's
clock" and "Incomplete traces"). Every bound is computed here again from the raw events (plain
json), and a skew is made by moving a real trace's GPU events by a known offset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLES, report_json, run_cli
from traces import read_trace, rewrite_events

PUBLIC = ROOT / "tests" / "data" / "public"
SGLANG = PUBLIC / "tracelens-sglang-decode-rocm.json.gz"
VLLM_DECODE = PUBLIC / "tracelens-vllm-decode-full-rocm.json.gz"
VLLM_PIECEWISE = PUBLIC / "tracelens-vllm-piecewise-rocm.json.gz"
SAMPLED = PUBLIC / "hta-sampled-job"
GPU = ("kernel", "gpu_memcpy", "gpu_memset")
CALLS = ("cuda_runtime", "cuda_driver")


def raw_bounds(path: Path) -> tuple[float, float | None]:
    """(upper, lower) from the raw events: the least (activity start - its launch call's start); the
    greatest (a synchronous copy's end - its call's end), None without one."""
    events = read_trace(path)["traceEvents"]
    calls = {e["args"]["correlation"]: e for e in events if e.get("cat") in CALLS and "correlation" in e.get("args", {})}
    upper = min(e["ts"] - calls[c]["ts"] for e in events if e.get("cat") in GPU and (c := e["args"].get("correlation")) in calls)
    lows = [
        e["ts"] + e["dur"] - (calls[c]["ts"] + calls[c]["dur"])
        for e in events
        if e.get("cat") in GPU
        and (c := e["args"].get("correlation")) in calls
        and calls[c]["name"] in ("hipMemcpyWithStream", "cudaMemcpy", "hipMemcpy")
    ]
    return upper, max(lows) if lows else None


def rank(doc: dict) -> dict:
    (only,) = doc["ranks"]
    return only


def test_sglang_decode_synchronous_copy_pins_the_clocks_and_the_lag_is_a_queue() -> None:
    """TraceLens's sglang decode on an MI300X: a hipMemcpyWithStream that waited 463 ms for the GPU
    ends 16 us after its copy, and the first kernel starts 9 us after its launch: the offset is
    -16..+9 us, so the 8 ms lag of the last launches is a queue (the GPU ran a batch behind)."""
    upper, lower = raw_bounds(SGLANG)
    assert lower is not None and upper == pytest.approx(9.34, abs=0.01) and lower == pytest.approx(-16.41, abs=0.01)
    doc = report_json(str(SGLANG))
    clocks = rank(doc)["clocks"]
    assert clocks["upper_us"] == pytest.approx(upper, abs=0.01)
    assert clocks["lower_us"] == pytest.approx(lower, abs=0.01)
    assert clocks["shift_us"] == 0.0 and clocks["gpu_behind"] is True
    assert clocks["host_idle_low_us"] is None  # pinned: the host idle is one figure
    assert rank(doc)["incomplete"] is None
    (behind,) = [r["text"] for r in doc["verdict"]["reasons"] if r["kind"] == "running_behind"]
    assert "pin the GPU clock's offset to -16..+9 us: a queue, not an offset" in behind


def test_vllm_decode_slice_bounds_the_offset_at_6_9_ms_and_is_a_slice() -> None:
    """The decode slice of TraceLens's vLLM ROCm profile: no kernel starts sooner than 6.9 ms after
    its launch, no blocking call: the offset is at most 6.9 ms; the lag grows from 7.8 to 16.5 ms,
    a queue behind work launched before the window. Its host idle is an upper bound."""
    upper, lower = raw_bounds(VLLM_DECODE)
    assert lower is None and upper == pytest.approx(6885.08, abs=0.01)
    r = rank(report_json(str(VLLM_DECODE)))
    assert r["clocks"]["upper_us"] == pytest.approx(upper, abs=0.01) and r["clocks"]["lower_us"] is None
    assert r["clocks"]["gpu_behind"] is True and r["clocks"]["shift_us"] == 0.0
    assert r["incomplete"]["sliced"] is True and r["incomplete"]["host_idle_upper_bound"] is True
    assert r["incomplete"]["head_wait_us"] > 1000
    assert any("+6.89 ms" in n for n in r["notes"])


def test_the_piecewise_slice_of_the_same_run_is_a_slice_too() -> None:
    r = rank(report_json(str(VLLM_PIECEWISE)))
    assert r["incomplete"]["sliced"] is True and r["incomplete"]["head_wait_us"] > 100_000


def correlation_span_share(path: Path) -> float:
    ids = sorted({e["args"]["correlation"] for e in read_trace(path)["traceEvents"] if e.get("cat") in CALLS})
    return len(ids) / (ids[-1] - ids[0] + 1)


def test_the_sampled_hta_trace_is_incomplete_and_its_host_idle_an_upper_bound() -> None:
    """HolisticTraceAnalysis's sampled trace keeps 0.5% of the API calls its correlation ids number."""
    doc = report_json(str(SAMPLED))
    for r in doc["ranks"]:
        share = correlation_span_share(SAMPLED / f"rank-{r['rank']}.json.gz")
        assert share < 0.006
        assert r["incomplete"]["sampled"] is True
        assert r["incomplete"]["correlation_coverage"] == pytest.approx(share, abs=1e-4)
        assert any("the trace is incomplete (sampled or cut)" in n and "upper bound" in n for n in r["notes"])
    (host,) = [r["text"] for r in doc["verdict"]["reasons"] if r["kind"] == "host_idle"]
    assert host.startswith("GPU idle waiting for the host at most 25%") and "an upper bound" in host


@pytest.mark.parametrize("sample", ["vllm-graphs-decode", "overlap", "afd-eager"])
def test_complete_recordings_are_neither_incomplete_nor_shifted(sample: str) -> None:
    for r in report_json(str(SAMPLES / sample))["ranks"]:
        assert r["incomplete"] is None
        assert r["clocks"]["shift_us"] == 0.0
        assert r["clocks"]["upper_us"] < 100  # an idle GPU starts launched work within microseconds


AFD_EAGER = sorted((SAMPLES / "afd-eager" / "traces").glob("*.json.gz"))[0]


def shifted_copy(tmp_path: Path, by_us: float) -> Path:
    """afd-eager's attention trace with every GPU event moved by by_us (as a skewed GPU clock would)."""

    def move(events: list[dict]) -> list[dict]:
        for e in events:
            if e.get("cat") in GPU:
                e["ts"] += by_us
        return events

    return rewrite_events(AFD_EAGER, tmp_path / f"skewed{by_us:+.0f}.json.gz", move)


@pytest.mark.parametrize("by_us", [2000.0, -2000.0])
def test_a_proven_skew_is_found_and_undone(tmp_path: Path, by_us: float) -> None:
    """The recording's own interval is -4.8..+6.5 us (21 blocking calls, its launches); moved by
    2 ms either way it excludes 0, and the tool moves the GPU back to within that interval of where
    it was: the host idle and the GPU's busy time come back as the unmoved trace's."""
    upper, _ = raw_bounds(AFD_EAGER)
    base = rank(report_json(str(AFD_EAGER)))
    lower = base["clocks"]["lower_us"]
    assert -10 < lower < 0 < upper < 10
    r = rank(report_json(str(shifted_copy(tmp_path, by_us))))
    shift = r["clocks"]["shift_us"]
    assert by_us + lower - 0.01 <= shift <= by_us + upper + 0.01  # what was moved, within the clocks' own uncertainty
    assert r["host"]["idle_us"] == pytest.approx(base["host"]["idle_us"], rel=0.02)
    assert r["gpu"]["busy_us"] == pytest.approx(base["gpu"]["busy_us"], rel=1e-6)
    (note,) = [n for n in r["notes"] if "the clocks are skewed" in n]
    assert ("earlier" if by_us > 0 else "later") in note and f"{abs(shift) / 1000:.2f} ms" in note


def test_the_report_of_a_moved_trace_without_the_shift_would_differ(tmp_path: Path) -> None:
    """The check above can fail: the moved trace read with its GPU clock as recorded gives another
    host idle (the shift is what brings it back)."""
    from dbo_trace.analysis.model import Options
    from dbo_trace.analysis.rank_analysis import host_idle_at, rank_detail
    from dbo_trace.trace.load import read_timeline

    tl = read_timeline(shifted_copy(tmp_path, 2000.0), 0)
    d = rank_detail(tl, [], Options())
    base = rank(report_json(str(AFD_EAGER)))["host"]["idle_us"]
    assert abs(host_idle_at(d, 0.0) - base) > 0.05 * base


def test_the_clocks_and_incomplete_keys_are_in_the_json() -> None:
    out = run_cli("report", "--json", str(SGLANG))
    assert set(json.loads(out.stdout)["ranks"][0]["clocks"]) >= {"lower_us", "upper_us", "shift_us", "gpu_behind"}


def test_a_constant_lag_is_left_open_and_the_host_idle_given_as_a_range(tmp_path: Path) -> None:
    """HTA's sampled rank 0 (no blocking call) with its GPU moved 5 ms later: every launch now lags
    by 5 ms or more, the same at the end as at the start. The events cannot tell an offset from a
    queue: no shift, not 'GPU behind', and the host idle given from as measured to as it would be
    were the GPU's clock the 5 ms ahead the launches allow."""
    trace = SAMPLED / "rank-0.json.gz"

    def move(events: list[dict]) -> list[dict]:
        for e in events:
            if e.get("cat") in GPU:
                e["ts"] += 5000
        return events

    moved = rewrite_events(trace, tmp_path / "late.json.gz", move)
    upper, lower = raw_bounds(moved)
    assert lower is None and upper == pytest.approx(raw_bounds(trace)[0] + 5000, abs=0.01)
    r = rank(report_json(str(moved)))
    clocks = r["clocks"]
    assert clocks["shift_us"] == 0.0 and clocks["gpu_behind"] is False
    assert clocks["upper_us"] == pytest.approx(upper, abs=0.01)
    low, high = clocks["host_idle_low_us"], clocks["host_idle_high_us"]
    assert low == pytest.approx(r["host"]["idle_us"], rel=1e-3) and high > low + 100
    assert any("as the clocks allow" in n for n in r["notes"])
