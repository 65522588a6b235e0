"""Long graph launches are flagged only where the GPU waited on them (issue 54): a cudaGraphLaunch
that returns late because the queue is full has its replayed work start at once, and costs
nothing. The figures are checked against the raw trace (plain json here)."""

from __future__ import annotations

from pathlib import Path

from conftest import SAMPLES, report_json
from traces import read_trace, rewrite_events

PAIR = SAMPLES / "afd-pair-graphs-dbo"
(ATTENTION_TRACE,) = sorted((PAIR / "traces").glob("*.json.gz"))


def long_launches(events: list[dict]) -> dict[int, tuple[float, float, float]]:
    """correlation -> (call start, call duration, first replayed activity's start) of every
    cudaGraphLaunch of 1 ms or more."""
    calls = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") == "cuda_runtime" and e.get("name") == "cudaGraphLaunch" and e.get("dur", 0) >= 1000
    }
    first: dict[int, float] = {}
    for e in events:
        corr = e.get("args", {}).get("correlation")
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and corr in calls:
            first[corr] = min(first.get(corr, float("inf")), e["ts"])
    return {c: (calls[c]["ts"], calls[c]["dur"], first[c]) for c in calls if c in first}


def test_the_pairs_long_launches_started_their_work_at_once_and_are_not_flagged() -> None:
    found = long_launches(read_trace(ATTENTION_TRACE)["traceEvents"])
    assert len(found) == 20  # the attention's; the FFN's 20 are the peer's
    assert all(first - ts <= 150 and dur >= 2000 for ts, dur, first in found.values())
    doc = report_json(str(PAIR))
    assert "long_graph_launches" not in [r["kind"] for r in doc["verdict"]["reasons"]]
    for rank in doc["ranks"]:
        assert "long_graph_launches" not in [r["kind"] for r in rank["verdict"]["reasons"]]


def test_a_long_launch_the_gpu_waited_on_is_flagged(tmp_path: Path) -> None:
    """The same trace with each long launch's call moved earlier, its length kept, so that its work
    starts 90% into the call: the GPU waited on the host, and the launches are named."""

    def earlier(events: list[dict]) -> list[dict]:
        found = long_launches(events)
        for e in events:
            corr = e.get("args", {}).get("correlation")
            if e.get("cat") == "cuda_runtime" and corr in found:
                ts, dur, first = found[corr]
                e["ts"] = first - 0.9 * dur
        return events

    trace = rewrite_events(ATTENTION_TRACE, tmp_path / "late.json.gz", earlier)
    doc = report_json(str(trace))
    (reason,) = [r for r in doc["verdict"]["reasons"] if r["kind"] == "long_graph_launches"]
    assert reason["text"].startswith("20 cudaGraphLaunch calls took >= 1 ms")
