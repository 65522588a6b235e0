"""The picture of an AFD pair (docs/outputs.md, "report --timeline"): the attention side's lanes by
microbatch, each round trip as a span from its send's start to its receive's end with its part under
the other microbatch's compute, the FFN's GPU on the same clock; in the PNG/SVG, the HTML page and
the Perfetto export. Checked against the synthetic pair's truth (tests/helpers/afd_synth.py), the real
graphs+DBO arm (samples/afd-graphs-dbo) and tests/references/round_trips_reference.py, a plain walk over the JSON."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from collections import Counter, defaultdict

import pytest
from afd_synth import afd_pair
from conftest import SAMPLES, run_cli
from round_trips_reference import round_trips

from dbo_trace.analysis.model import Options
from dbo_trace.render.pictures.step_view import afd_peer, median_step, step_view
from dbo_trace.app.pipeline import analyze_paths

LAYERS = 3
LANES_TWO = ["attention GPU, microbatch 0", "round trips, microbatch 1", "attention GPU, microbatch 1", "round trips, microbatch 0"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("afd") / "bundle"
    truth = afd_pair(folder, dbo=True, graphs=True, layers=LAYERS)
    return folder, truth, analyze_paths([folder], Options())


def _attention(report):
    return next(r for r in report.ranks if r.role == "attention")


def _union(pieces):
    total, end = 0.0, None
    for a, b in sorted(pieces):
        if end is None or a > end:
            total, end = total + b - a, b
        elif b > end:
            total, end = total + b - end, b
    return total


def test_the_pair_on_one_clock(pair):
    folder, truth, report = pair
    rank = _attention(report)
    pos = 1
    view = step_view(rank, pos, afd_peer(report, rank))
    assert view.lanes[1:] == [*LANES_TWO, "attention GPU, no microbatch", "FFN GPU (same clock)"]
    step = rank.steps[pos]
    t0 = view.start
    # The round trips: the truth's, as spans from send start to receive end, per microbatch.
    ref = [r for r in round_trips(folder / "traces" / "attention.pt.trace.json.gz") if step.start_us <= r["s0"] < step.end_us]
    assert len(ref) == 2 * LAYERS
    for u in (0, 1):
        drawn = sorted(x for b in view.bars if b.kind == "round trip" and b.ubatch == u for x in (b.start + t0, b.end + t0))
        assert drawn == pytest.approx(sorted(x for r in ref if r["ub"] == u for x in (r["s0"], r["r1"])))
        hidden = [(b.start, b.end) for b in view.bars if b.kind == "hidden" and b.ubatch == u]
        assert all(b.lane == f"round trips, microbatch {u}" for b in view.bars if b.kind in ("hidden", "round trip") and b.ubatch == u)
        assert _union(hidden) == pytest.approx(sum(r["hidden"] for r in ref if r["ub"] == u))
    # Each microbatch's attention compute on its own lane: 1 + LAYERS compute kernels a step each.
    compute = Counter(b.lane for b in view.bars if b.kind == "compute" and b.lane.startswith("attention GPU"))
    assert compute == {"attention GPU, microbatch 0": LAYERS + 1, "attention GPU, microbatch 1": LAYERS + 1}
    # The FFN's kernels in the step's window, on the attention's clock (the raw FFN trace, plainly)
    with gzip.open(folder / "peer" / "traces" / "ffn.pt.trace.json.gz", "rt") as f:
        ffn = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel"]
    inside = [e for e in ffn if e["ts"] < step.end_us and e["ts"] + e["dur"] > step.start_us]
    # each drawn: a send or receive as itself, the compute between two of them merged into one span
    drawn = [(b.start + t0, b.end + t0) for b in view.bars if b.lane == "FFN GPU (same clock)"]
    def covered(e: dict) -> bool:
        return any(a - 0.01 <= max(e["ts"], t0) and min(e["ts"] + e["dur"], view.end) <= b + 0.01 for a, b in drawn)

    assert inside and all(covered(e) for e in inside)
    assert len(drawn) <= len(inside)


def test_the_real_graphs_dbo_arm():
    """samples/afd-graphs-dbo (no FFN trace): the median step's 54 round trips, 27 a microbatch, and
    the share of their time drawn as hidden, against the independent reference's for that step."""
    report = analyze_paths([SAMPLES / "afd-graphs-dbo"], Options())
    rank = _attention(report)
    pos = median_step(rank)
    view = step_view(rank, pos, afd_peer(report, rank))
    assert view.lanes[1:5] == LANES_TWO and "FFN GPU (same clock)" not in view.lanes
    manifest = json.loads((SAMPLES / "afd-graphs-dbo" / "manifest.json").read_text())
    ref = round_trips(SAMPLES / "afd-graphs-dbo" / manifest["roles"]["attention"]["traces"][0])
    step = rank.steps[pos]
    mine = [r for r in ref if step.start_us <= r["s0"] < step.end_us]
    trips = [b for b in view.bars if b.kind == "round trip"]
    assert Counter(b.ubatch for b in trips) == Counter(r["ub"] for r in mine) == {0: 27, 1: 27}
    drawn_total = sum(b.end - b.start for b in trips)
    assert drawn_total == pytest.approx(sum(r["r1"] - r["s0"] for r in mine), rel=1e-6)
    hidden = sum(_union([(b.start, b.end) for b in view.bars if b.kind == "hidden" and b.ubatch == u]) for u in (0, 1))
    assert hidden / drawn_total == pytest.approx(sum(r["hidden"] for r in mine) / drawn_total, abs=0.03)


def test_png_svg_and_html_draw_it(tmp_path, pair):
    folder = pair[0]
    svg, html = tmp_path / "t.svg", tmp_path / "r.html"
    proc = run_cli("report", str(folder), "--timeline", str(svg), "--html", str(html))
    assert proc.returncode == 0, proc.stderr
    text = svg.read_text()
    for label in (*LANES_TWO, "FFN GPU (same clock)", "round trip: send start to receive end",
                  "round trip under the other microbatch"):  # fmt: skip
        assert label in text.replace("&#x27;", "'")
    data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', html.read_text(), re.S).group(1))
    kinds = data["kinds"]
    attention = [v for v in data["views"] if "FFN GPU (same clock)" in v["lanes"]]
    assert attention and all(v["ffn"] == v["lanes"].index("FFN GPU (same clock)") for v in attention)
    drawn = Counter(kinds[b[4]] for b in attention[0]["bars"])
    assert drawn["round trip"] == 2 * LAYERS and drawn["hidden"] > 0


def _tracks_and_slices(path):
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

    trace = Trace.FromString(path.read_bytes())
    names, slices = {}, defaultdict(list)
    for p in trace.packet:
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            names[d.uuid] = d.name or d.process.process_name
        elif p.HasField("track_event") and p.track_event.type == TrackEvent.TYPE_SLICE_BEGIN:
            slices[p.track_event.track_uuid].append((p.timestamp, p.track_event.name))
    out = defaultdict(list)  # by name: a track of each rank's derived tracks shares its name
    for k, v in slices.items():
        out[names[k]] += v
    return out


def test_perfetto_has_the_round_trips_and_the_ffn_on_the_attention_clock(tmp_path, pair):
    """The FFN's trace given another baseTimeNanoseconds (its ts moved by as much: the same wall
    time): the export puts its kernels where the attention's clock has them."""
    folder, truth, _ = pair
    moved = tmp_path / "bundle"
    shutil.copytree(folder, moved)
    ffn = moved / "peer" / "traces" / "ffn.pt.trace.json.gz"
    with gzip.open(ffn, "rt") as f:
        doc = json.load(f)
    shift_us = 1234.0
    doc["baseTimeNanoseconds"] -= int(shift_us * 1000)
    for e in doc["traceEvents"]:
        if "ts" in e:
            e["ts"] += shift_us
    with gzip.open(ffn, "wt") as f:
        json.dump(doc, f)
    out = tmp_path / "p.pftrace"
    proc = run_cli("report", str(moved), "--perfetto", str(out))
    assert proc.returncode == 0, proc.stderr
    tracks = _tracks_and_slices(out)
    ref = round_trips(folder / "traces" / "attention.pt.trace.json.gz")
    for u in (0, 1):
        spans = tracks[f"round trips, microbatch {u} (send start to receive end)"]
        assert sorted(ts for ts, _ in spans) == sorted(int(round(r["s0"] * 1000)) for r in ref if r["ub"] == u)
        assert f"round trips, microbatch {u}: under the other microbatch's compute" in tracks
    with gzip.open(folder / "peer" / "traces" / "ffn.pt.trace.json.gz", "rt") as f:
        original = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel" and e["name"] == "fused_moe_kernel"]
    exported = [ts for name, spans in tracks.items() if name.startswith("GPU stream") for ts, n in spans if n == "fused_moe_kernel"]
    assert sorted(exported) == sorted(int(round(e["ts"] * 1000)) for e in original)
    assert len(tracks["microbatch 0 compute (GPU)"]) > 0 and len(tracks["microbatch 1 compute (GPU)"]) > 0
