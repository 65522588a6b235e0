"""The AFD pair's picture on the real pair (samples/afd-pair-graphs-dbo; issue 54): both roles with
--all-ranks too, the FFN's compute as one span per round trip, one meaning per colour, a title that
agrees with the lanes, the clock from vLLM's step start, the long cudaGraphLaunch drawn as a full
queue's, and the same in the HTML page and the Perfetto export. Figures are checked against the raw
traces (plain json)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from conftest import SAMPLES, run_cli

from dbo_trace.analysis.model import Options
from dbo_trace.render.pictures.step_view import FFN_GPU, FFN_SPAN, afd_peer, chosen_step, step_view
from dbo_trace.app.pipeline import analyze_paths
from dbo_trace.render.pictures.timeline_png import pair_note, queue_full, step_legend

PAIR = SAMPLES / "afd-pair-graphs-dbo"
(ATTENTION_TRACE,) = sorted((PAIR / "traces").glob("*.json.gz"))
(FFN_TRACE,) = sorted((PAIR / "peer" / "traces").glob("*.json.gz"))


@pytest.fixture(scope="module")
def drawn():
    report = analyze_paths([PAIR], Options())
    rank, position = chosen_step(report, None, None)
    return report, rank, position, step_view(rank, position, afd_peer(report, rank))


def events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]


def test_the_step_counts_from_vllms_step_start(drawn) -> None:
    """The window drawn begins at the DBO step's graph replay range; vLLM's execute_* annotation
    holding that moment began about 5 ms before, and the axis counts from it."""
    _report, rank, position, view = drawn
    step = rank.steps[position]
    base = json.loads(gzip.open(ATTENTION_TRACE, "rt").read()).get("baseTimeNanoseconds")
    assert base is not None  # the analysis's clock is the trace's ts; the step's start is on it
    holding = [
        e for e in events(ATTENTION_TRACE)
        if e.get("cat") == "user_annotation" and e["name"].startswith("execute_context_")
        and e["ts"] <= step.start_us < e["ts"] + e["dur"]
    ]  # fmt: skip
    (execute,) = holding
    assert view.origin_us == pytest.approx(execute["ts"] - step.start_us, abs=0.01)
    assert -6000 < view.origin_us < -4000
    assert view.axis_label.startswith("ms from vLLM's step start")


def test_the_ffn_lane_is_one_span_per_round_trip(drawn) -> None:
    _report, rank, position, view = drawn
    ffn = [b for b in view.bars if b.lane == FFN_GPU]
    spans = [b for b in ffn if b.kind == FFN_SPAN]
    kernels = [e for e in events(FFN_TRACE) if e.get("cat") == "kernel"]
    offset = (json.loads(gzip.open(FFN_TRACE, "rt").read())["baseTimeNanoseconds"]
              - json.loads(gzip.open(ATTENTION_TRACE, "rt").read())["baseTimeNanoseconds"]) / 1000  # fmt: skip
    inside = [e for e in kernels if e["ts"] + offset < view.end and e["ts"] + e["dur"] + offset > view.start]
    assert len(inside) > 10 * len(spans)  # the solid band was these kernels one by one
    # one span per round trip: 54 round trips a step, give or take the window's edges
    assert 50 <= len(spans) <= 60 and view.ffn_spans == len(spans)
    compute = [e for e in inside if not e["name"].startswith("ncclDevKernel")]
    for e in compute:  # every FFN compute kernel lies in a span
        a, b = e["ts"] + offset - view.start, e["ts"] + e["dur"] + offset - view.start
        assert any(s.start - 0.01 <= max(a, 0) and min(b, view.duration) <= s.end + 0.01 for s in spans)


def test_each_colour_means_one_thing(drawn) -> None:
    *_, view = drawn
    entries = step_legend(view)
    solid = [(style["facecolor"], style.get("hatch"), style.get("alpha")) for style, _ in entries]
    assert len(solid) == len(set(solid)), entries
    labels = [label for _, label in entries]
    assert "round trip under the other microbatch's compute" in labels and "comm under compute" in labels


def test_the_title_says_the_round_trips_overlapped_share(drawn) -> None:
    """Kernel overlap reads 0% on an AFD rank (its sends and receives run on the compute stream);
    the title gives the step's round trips' overlapped share (under the other microbatch's compute
    or beside its round trip: the label's), as the lanes show it."""
    _report, rank, position, view = drawn
    share = rank.steps.afd_shares[position].share
    assert 0.8 < share < 1.0
    assert f"round trips overlapped {100 * share:.0f}%" in view.title and "comm hidden 0%" not in view.title


def test_the_note_explains_the_lanes_and_the_gaps(drawn) -> None:
    *_, view = drawn
    assert view.attention_wait_us is not None and view.attention_idle_us is not None
    assert 0 < view.attention_wait_us <= view.attention_idle_us
    note = pair_note(view)
    assert note is not None
    assert "above the other microbatch's round trips" in note and "waiting for the FFN's answer" in note


def test_the_long_graph_launch_is_drawn_as_a_full_queue(drawn) -> None:
    *_, view = drawn
    (launch,) = [b for b in view.bars if b.kind == "launch" and b.name == "cudaGraphLaunch"]
    assert launch.end - launch.start > 2000 and launch.gpu_began_us is not None and launch.gpu_began_us < 150
    assert queue_full(launch) and not launch.waited
    assert "launch call, GPU work began at once" in [label for _, label in step_legend(view)]


@pytest.mark.parametrize("all_ranks", [False, True])
def test_the_svg_draws_the_pair_with_and_without_all_ranks(tmp_path: Path, all_ranks: bool) -> None:
    out = tmp_path / "pair.svg"
    args = ["report", str(PAIR), "--timeline", str(out)] + (["--all-ranks"] if all_ranks else [])
    assert run_cli(*args).returncode == 0
    svg = out.read_text()
    for text in (
        "FFN GPU (same clock)", "round trips, microbatch 0", "attention GPU, microbatch 1", "FFN compute per round trip",
    ):
        assert text in svg
    assert "rank 0 compute" not in svg and "no microbatch" not in svg.split("CUDA call, no microbatch")[0]


def test_the_html_page_has_the_ffn_spans_and_the_clock(tmp_path: Path) -> None:
    out = tmp_path / "pair.html"
    assert run_cli("report", str(PAIR), "--html", str(out)).returncode == 0
    page = out.read_text()
    data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', page, re.S).group(1))
    kind = data["kinds"].index("ffn compute")
    pair = [v for v in data["views"] if FFN_GPU in v["lanes"]]
    assert pair and all(any(b[4] == kind for b in v["bars"]) for v in pair)
    assert all(v["origin"] < -4000 and "waiting for the FFN" in v["note"] for v in pair)
    assert "#01665e" in page  # the hidden round trip's own colour


def test_perfetto_has_the_ffn_spans_and_the_wait(tmp_path: Path) -> None:
    out = tmp_path / "pair.pftrace"
    assert run_cli("report", str(PAIR), "--perfetto", str(out)).returncode == 0
    data = out.read_bytes()
    for track in (
        b"FFN compute per round trip",
        b"attention GPU idle, a round trip in flight (waiting for the FFN)",
        b"cudaGraphLaunch (returned late: a full queue, its GPU work began at once)",
    ):
        assert track in data


def test_one_microbatch_has_no_lane_order_note() -> None:
    """afd-pair-graphs-nomps runs one microbatch: its lanes do not alternate, and the note does not
    say they do; the gaps are still explained."""
    nomps = SAMPLES / "afd-pair-graphs-nomps"
    report = analyze_paths([nomps], Options())
    rank, position = chosen_step(report, None, None)
    view = step_view(rank, position, afd_peer(report, rank))
    assert "round trips" in view.lanes and "round trips, microbatch 0" not in view.lanes
    note = pair_note(view)
    assert note is not None and "Lanes:" not in note and "White gaps" in note
