"""--timeline and --perfetto on the real samples: the pictures exist, and what they mark adds up to
numbers computed another way (the report's JSON, and tests/references/headline_reference.py over the raw trace)."""

import json
import struct

import pytest
import headline_reference as ref
from conftest import SAMPLES, run_cli, sample_trace

from dbo_trace.analysis.model import Options  # noqa: E402
from dbo_trace.render.pictures.step_view import median_step, step_view  # noqa: E402
from dbo_trace.app.pipeline import analyze_paths  # noqa: E402

DRAWN = ["serial", "overlap", "graph", "hostbound"]


def png_size(path):
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def analysed(variant):
    return analyze_paths([SAMPLES / variant], Options())


@pytest.mark.parametrize("variant", DRAWN)
def test_timeline_png_is_drawn_for_every_sample(tmp_path, variant):
    out = tmp_path / "t.png"
    proc = run_cli("report", str(SAMPLES / variant), "--timeline", str(out))
    assert proc.returncode == 0, proc.stderr
    width, height = png_size(out)
    assert width >= 1400 and height >= 300 and out.stat().st_size > 20_000
    assert f"wrote {out}" in proc.stderr


@pytest.mark.parametrize("variant", ["overlap", "two-gpu-overlap", "vllm-eager-mixed-detailed"])
def test_timeline_png_is_sized_for_a_comment_without_a_blank_band(tmp_path, variant):
    """GitHub shows a comment's picture at most 880 px wide: the PNG is twice that (sharp on a
    high-density screen, its 9-10 pt text about 12 px once scaled), and no band of blank rows takes
    more than 8% of its height (the legend once sat under a sixth of empty picture)."""
    out = tmp_path / "t.png"
    assert run_cli("report", str(SAMPLES / variant), "--timeline", str(out)).returncode == 0
    longest, height, width = longest_blank_band(out)
    assert width == 2 * 880
    assert longest < 0.08 * height, f"{longest} blank rows of {height}"


@pytest.mark.parametrize("variant", ["two-gpu-overlap", "two-gpu-hostbound"])
def test_the_all_ranks_picture_has_no_blank_band(tmp_path, variant):
    """The legend sat 0.6 in above the bottom, under a fifth of the picture blank (71 rows of 374)."""
    out = tmp_path / "ranks.png"
    assert run_cli("report", str(SAMPLES / variant), "--all-ranks", "--timeline", str(out)).returncode == 0
    longest, height, _ = longest_blank_band(out)
    assert longest < 0.08 * height, f"{longest} blank rows of {height}"


def longest_blank_band(path):
    """(the most blank pixel rows in a row, the height, the width) of a PNG: blank is near-white across."""
    import numpy as np
    from PIL import Image

    pixels = np.asarray(Image.open(path).convert("L"))
    height, width = pixels.shape
    longest = run = 0
    for row in (pixels >= 250).all(axis=1):
        run = run + 1 if row else 0
        longest = max(longest, run)
    return longest, height, width


def test_timeline_svg_names_the_lanes(tmp_path):
    out = tmp_path / "t.svg"
    assert run_cli("report", str(SAMPLES / "overlap"), "--timeline", str(out), "--step", "1").returncode == 0
    text = out.read_text()
    for lane in ("CPU microbatch 0", "CPU microbatch 1", "GPU stream 13 (compute", "GPU stream 17 (comm"):
        assert lane in text


def gpu_events_in(variant, start, end):
    raw = ref.load(sample_trace(variant))["traceEvents"]
    gpu = [e for e in raw if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    return [e for e in gpu if e["ts"] < end and e["ts"] + e.get("dur", 0) > start]


def covered(spans):
    """Time covered by (start, end) pairs, overlaps once: a plain sweep, not the package's intervals."""
    total, reach = 0.0, float("-inf")
    for s, e in sorted(spans):
        if e > reach:
            total += e - max(s, reach)
            reach = e
    return total


def test_step_view_holds_every_kernel_in_the_steps_window(tmp_path):
    report = analysed("overlap")
    rank = report.ranks[0]
    view = step_view(rank, median_step(rank))
    in_window = gpu_events_in("overlap", view.start, view.end)
    bars = [b for b in view.bars if b.lane.startswith("GPU")]
    assert len(bars) == len(in_window) > 0
    assert sum(b.own for b in bars) == len([e for e in in_window if view.start <= e["ts"] <= view.end])
    # Both microbatches' launches sit on their own CPU lanes, and the GPU bars carry both colours.
    assert {b.ubatch for b in bars} == {0, 1}
    assert {b.lane for b in view.bars if b.kind == "launch"} == {"CPU microbatch 0", "CPU microbatch 1"}


def test_a_step_whose_gpu_runs_behind_is_drawn_busy_over_its_window():
    """dsv2lite-eager-prefill's median step (#4): its own kernels start 106 ms into its window, while
    the GPU still runs the steps before it. The picture draws every kernel of the window (the raw
    trace's, counted here), the queueing behind them on the bottom lane, and no red lead-in: the host
    did not leave the GPU idle (host idle 0% in its row)."""
    rank = analysed("dsv2lite-eager-prefill").ranks[0]
    view = step_view(rank, median_step(rank))
    events = gpu_events_in("dsv2lite-eager-prefill", view.start, view.end)
    clipped = [(max(e["ts"], view.start) - view.start, min(e["ts"] + e["dur"], view.end) - view.start) for e in events]
    gpu_bars = [b for b in view.bars if b.lane.startswith("GPU")]
    assert len(gpu_bars) == len(events)
    drawn = [(max(b.start, 0.0), min(b.end, view.duration)) for b in gpu_bars]
    assert covered(drawn) == pytest.approx(covered(clipped), rel=1e-6)
    assert covered(clipped) > 0.9 * view.duration  # busy where the window was busy
    assert view.lead_in_us > 100_000 and not view.lead_in_idle
    assert covered(view.queued) > 0.9 * view.lead_in_us
    assert covered(view.host_idle) == pytest.approx(view.step.metrics.host_idle_us, abs=0.01)
    theirs = [(b.start, b.end) for b in gpu_bars if not b.own]
    assert covered([(max(s, 0.0), min(e, view.lead_in_us)) for s, e in theirs if s < view.lead_in_us]) > 0.9 * view.lead_in_us


@pytest.mark.parametrize(
    "variant,band,metric",
    [
        ("overlap", "overlap", "comm_hidden_us"),
        ("hostbound", "host_idle", "host_idle_us"),
        ("overlap", "exposed", "comm_exposed_us"),
        ("late", "exposed", "comm_exposed_us"),
    ],
)
def test_marked_bands_add_up_to_the_step_metrics(variant, band, metric):
    rank = analysed(variant).ranks[0]
    view = step_view(rank, median_step(rank))
    marked = sum(e - s for s, e in getattr(view, band))
    assert marked == pytest.approx(getattr(view.step.metrics, metric), rel=1e-6, abs=0.01)
    assert marked > 0


def test_perfetto_reads_back_with_the_derived_tracks(tmp_path):
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

    out = tmp_path / "o.pftrace"
    proc = run_cli("report", str(SAMPLES / "overlap"), "--perfetto", str(out))
    assert proc.returncode == 0, proc.stderr
    trace = Trace.FromString(out.read_bytes())
    tracks = {p.track_descriptor.uuid: p.track_descriptor.name for p in trace.packet if p.HasField("track_descriptor")}
    slices: dict[str, list] = {}
    open_at: dict[int, tuple] = {}
    for p in trace.packet:
        if not p.HasField("track_event"):
            continue
        ev = p.track_event
        if ev.type == TrackEvent.TYPE_SLICE_BEGIN:
            assert ev.track_uuid not in open_at  # slices on a track never overlap
            open_at[ev.track_uuid] = (p.timestamp, ev.name)
        else:
            start, name = open_at.pop(ev.track_uuid)
            slices.setdefault(tracks[ev.track_uuid], []).append((start, p.timestamp, name))
    js = json.loads(run_cli("report", "--json", str(SAMPLES / "overlap")).stdout)
    raw = ref.load(sample_trace("overlap"))["traceEvents"]
    gpu = [e for e in raw if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert sum(len(v) for k, v in slices.items() if k.startswith("GPU stream")) == len(gpu)
    assert len(slices["steps (verdict)"]) == len(js["steps"])
    assert all(": overlapped (" in name for _, _, name in slices["steps (verdict)"])
    hidden_us = sum(e - s for s, e, _ in slices["comm under compute"]) / 1000
    exposed_us = sum(e - s for s, e, _ in slices["exposed comm"]) / 1000
    assert hidden_us == pytest.approx(js["comm"]["hidden_us"], rel=1e-3)
    assert hidden_us + exposed_us == pytest.approx(js["comm"]["busy_us"], rel=1e-3)
    for name in ("microbatch 0 compute (GPU)", "microbatch 1 comm (GPU)"):
        assert slices[name]


def test_timeline_refuses_an_unknown_format_and_a_missing_step(tmp_path):
    bad = run_cli("report", str(SAMPLES / "overlap"), "--timeline", str(tmp_path / "t.gif"))
    assert bad.returncode == 2 and "--timeline writes .png or .svg" in bad.stderr
    far = run_cli("report", str(SAMPLES / "overlap"), "--timeline", str(tmp_path / "t.png"), "--step", "99")
    assert far.returncode == 2 and "--step 99: rank 0 has 5 steps" in far.stderr
    kept = tmp_path / "mine.png"
    kept.write_bytes(b"mine")
    again = run_cli("report", str(SAMPLES / "overlap"), "--timeline", str(kept))
    assert again.returncode == 2 and kept.read_bytes() == b"mine"


def test_graph_replay_kernels_are_packed_into_few_lanes_without_overlap():
    rank = analysed("graph").ranks[0]
    view = step_view(rank, median_step(rank))
    graph_lanes = [lane for lane in view.lanes if lane.startswith("GPU graph replay")]
    # One GEMM and one comm kernel at a time at most: two lanes hold every replayed kernel.
    assert graph_lanes == ["GPU graph replay, lane 1 of 2", "GPU graph replay, lane 2 of 2"]  # not "two launches"
    gpu_bars = [b for b in view.bars if b.lane.startswith("GPU")]
    assert len([b for b in gpu_bars if b.kind != "copy"]) == view.step.metrics.kernels
    assert all(b.lane in graph_lanes for b in gpu_bars)
    for lane in graph_lanes:
        spans = sorted((b.start, b.end) for b in gpu_bars if b.lane == lane)
        assert all(prev_end <= start for (_, prev_end), (start, _) in zip(spans, spans[1:]))


def test_the_lead_in_before_the_first_kernel_is_measured_and_host_idle():
    """The overlap sample's steps start two microbatch threads before any kernel: the picture names
    that stretch, and it is host-caused GPU idle from the step's start."""
    rank = analysed("overlap").ranks[0]
    view = step_view(rank, median_step(rank))
    d = rank.detail
    sel = d.attribution.gpu_step == view.step.index
    assert view.lead_in_us == pytest.approx(float(d.timeline.gpu.start[sel].min()) - view.step.start_us)
    assert view.lead_in_us > 1000.0
    assert view.host_idle[0][0] == pytest.approx(0.0) and view.host_idle[0][1] >= view.lead_in_us - 1e-6


def test_the_late_steps_picture_marks_each_held_back_comm_from_ready_to_start(tmp_path):
    """Every held-back comm kernel of the drawn step gets a mark that ends where the kernel starts,
    on the kernel's own lane; the Perfetto trace carries the same waits on their own tracks."""
    rank = analysed("late").ranks[0]
    position = median_step(rank)
    view = step_view(rank, position)
    comm_bars = {(round(b.start, 3), b.lane) for b in view.bars if b.kind == "comm"}
    assert view.held_back and all(start > ready for ready, start, _, _ in view.held_back)
    assert all((round(start, 3), lane) in comm_bars for _, start, lane, _ in view.held_back)
    assert {cause for *_, cause in view.held_back} <= {"late_record", "crowded", "held"}
    out = tmp_path / "late.pftrace"
    assert run_cli("report", str(SAMPLES / "late"), "--perfetto", str(out)).returncode == 0
    assert b"comm held back (ready, not started)" in out.read_bytes() and b"held back: late_record" in out.read_bytes()


def test_the_title_wraps_between_its_parts_and_shows_no_escapes(monkeypatch):
    """The title's own line breaks are the layout's; only the trace's strings in it are made inert
    (a step label could hold a newline). Before, the layout's breaks were escaped: `\\x0a` in the title."""
    import matplotlib

    from dbo_trace.analysis.model import Options
    from dbo_trace.render.pictures.step_view import median_step, step_view
    from dbo_trace.app.pipeline import analyze_paths
    from dbo_trace.render.pictures.timeline_png import draw_timeline

    rank = analyze_paths([SAMPLES / "overlap"], Options()).ranks[0]
    view = step_view(rank, median_step(rank))
    monkeypatch.setitem(matplotlib.rcParams, "svg.fonttype", "none")  # text as <text>, not paths
    svg = draw_timeline(view, "svg").decode()
    assert "\\x0a" not in svg and "x0a" not in svg
    titles = [t for t in svg.split("<text") if "rank 0" in t and "step" in t]
    assert titles, "the title is drawn"


ALL_SAMPLES = sorted(p.name for p in SAMPLES.iterdir() if (p / "traces").is_dir())
PUBLIC = SAMPLES.parent / "tests" / "data" / "public"
LONG = "x" * 40 + "::" + "very_long_range_name_" * 8  # a trace name longer than any legend column


def text_outside(fig):
    """The texts a draw of the canvas draws (title, legend, labels, notes) whose box reaches past the
    canvas, measured by matplotlib's renderer as each is drawn: nothing is trusted from the layout's
    own arithmetic."""
    from matplotlib.text import Text

    drawn = []
    draw = Text.draw

    def recording(self, renderer):
        draw(self, renderer)
        if self.get_visible() and self.get_text().strip():
            drawn.append((self.get_text()[:60], self.get_window_extent(renderer)))

    Text.draw = recording
    try:
        fig.canvas.draw()
    finally:
        Text.draw = draw
    box = fig.bbox
    assert drawn, "the picture draws text"
    return [
        (text, (round(b.x0), round(b.x1), round(b.y0), round(b.y1)))
        for text, b in drawn
        if b.x0 < box.x0 - 0.5 or b.x1 > box.x1 + 0.5 or b.y0 < box.y0 - 0.5 or b.y1 > box.y1 + 0.5
    ]


def edge_ink(png: bytes):
    """How many pixels of the PNG's outermost 3 columns and rows are not near-white: drawn text cut by
    the canvas's edge leaves ink there (the legend once read `ributed` at the left edge)."""
    import io

    import numpy as np
    from PIL import Image

    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("L"))
    edges = [pixels[:, :3], pixels[:, -3:], pixels[:3, :], pixels[-3:, :]]
    return sum(int((e < 200).sum()) for e in edges)


def check_inside(fig, image_format="png"):
    import io

    assert text_outside(fig) == []
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=fig.dpi)
    assert edge_ink(buf.getvalue()) == 0


@pytest.mark.parametrize("variant", ALL_SAMPLES)
def test_title_and_legend_lie_inside_every_samples_picture(variant):
    """Every sample's median step, and with several ranks the all-ranks picture: each drawn text's
    box inside the canvas, and no ink on the canvas's edge."""
    from dbo_trace.render.pictures.ranks_view import ranks_step_view
    from dbo_trace.render.pictures.timeline_png import ranks_figure, timeline_figure

    report = analysed(variant)
    rank = next(r for r in report.ranks if r.steps)
    check_inside(timeline_figure(step_view(rank, median_step(rank))))
    if len(report.ranks) > 1:
        check_inside(ranks_figure(ranks_step_view(report, median_step(rank))))


@pytest.mark.parametrize("trace", ["hta-rocm-mi250.json.gz", "hta-training-2rank-nccl.json.gz", "kineto-2021-v100.json.gz"])
def test_title_and_legend_lie_inside_real_traces_with_long_names(trace):
    """Real traces from other projects (ROCm's and cutlass's kernel names, PyTorch's long operator
    names), and the same pictures with a trace name longer than the canvas in the title, a range's
    name, and a thread's lane."""
    import dataclasses

    from dbo_trace.render.pictures.timeline_png import timeline_figure

    report = analyze_paths([PUBLIC / trace], Options())
    rank = next(r for r in report.ranks if r.steps)
    view = step_view(rank, median_step(rank))
    check_inside(timeline_figure(view))
    long_view = dataclasses.replace(view, title=view.title + " · " + LONG + " " + LONG, lanes=[LONG] + view.lanes[1:])
    lane = view.lanes[0]
    long_view.bars = [dataclasses.replace(b, lane=LONG if b.lane == lane else b.lane) for b in view.bars]
    long_view.bars += [dataclasses.replace(b, group=LONG + str(k)) for k, b in enumerate(view.bars[:3])]
    long_view.groups = [LONG + str(k) for k in range(3)] + view.groups
    for b in long_view.bars[-3:]:
        b.kind = "range"
    check_inside(timeline_figure(long_view))


def test_a_window_of_several_steps_holds_every_kernel_and_call_in_it(tmp_path):
    """--window '#2:#4' draws from step #2's start to #4's end: every GPU activity of the raw trace
    that overlaps it, each step's start marked; bad windows are one line each."""
    from dbo_trace.render.pictures.step_view import parse_window, window_view

    rank = analysed("overlap").ranks[0]
    lo, hi = parse_window(rank, "#2:#4")
    assert (lo, hi) == (rank.steps[1].start_us, rank.steps[3].end_us)
    assert parse_window(rank, "1.5:2") == (rank.steps[0].start_us + 1500.0, rank.steps[0].start_us + 2000.0)
    view = window_view(rank, lo, hi)
    events = gpu_events_in("overlap", lo, hi)
    gpu_bars = [b for b in view.bars if b.lane.startswith("GPU")]
    assert len(gpu_bars) == len(events) > 0 and all(b.own for b in gpu_bars)
    assert [label for _, label in view.marks] == ["#2", "#3", "#4"]
    assert view.marks[0][0] == 0.0
    check_inside(__import__("dbo_trace.render.pictures.timeline_png", fromlist=["x"]).timeline_figure(view))
    out = tmp_path / "w.svg"
    proc = run_cli("report", str(SAMPLES / "overlap"), "--timeline", str(out), "--window", "#2:#4")
    assert proc.returncode == 0 and "rank 0, window #2:#4" in proc.stderr
    for bad, says in (("#2:#9", "#9 is out of range (#1 to #5)"), ("a:b", "each side is milliseconds"), ("5:1", "not after")):
        proc = run_cli("report", str(SAMPLES / "overlap"), "--timeline", str(tmp_path / "x.png"), "--window", bad)
        assert proc.returncode == 2 and says in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    proc = run_cli("report", str(SAMPLES / "overlap"), "--window", "0:5")
    assert proc.returncode == 2 and "--window chooses the span that --timeline draws" in proc.stderr
