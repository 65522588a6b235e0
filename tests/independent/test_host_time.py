"""Host time explained (docs/analysis.md, "Host time"): the causes add up to the host-idle bucket
everywhere, agree with a plain recomputation from json.load (tests/references/host_time_reference.py), follow
the worked example, and the launch wording follows the numbers."""

import pytest
from conftest import ROOT, SAMPLES, reason_texts, sample_trace, RUN_SAMPLES
from host_time_reference import CAUSES as REF_CAUSES
from host_time_reference import host_causes as reference_causes
from traces import write_trace

from dbo_trace.analysis.host.host_time import CAUSES
from dbo_trace.analysis.model import Options
from dbo_trace.analysis.verdict.evidence_types import HostBasis
from dbo_trace.app.pipeline import analyze_paths
from dbo_trace.render import RENDERERS, RenderOptions
from dbo_trace.render.document import build_document

PUBLIC = ROOT / "tests" / "data" / "public"
SAMPLE_DIRS = RUN_SAMPLES
PUBLIC_TRACES = sorted(p.name for p in PUBLIC.iterdir() if "mtia" not in p.name)  # MTIA: refused, no CUDA activity
REFERENCE_SAMPLES = sorted(n for n in SAMPLE_DIRS if n.startswith("vllm-")) + ["hostbound"]
REFERENCE_PUBLIC = ["hta-rocm-mi250.json.gz", "hta-training-2rank-nccl.json.gz"]


def _adds_up(c, host_idle_us):
    assert c.host_idle_us == pytest.approx(host_idle_us, abs=1e-6)
    assert all(x >= 0 for x in c.by_cause_us)
    assert sum(c.by_cause_us) == pytest.approx(host_idle_us, rel=1e-9, abs=1e-6)
    assert sum(t for _, t in c.named) <= c.us(CAUSES.index("named")) + 1e-6
    assert sum(t for _, t in c.cpu_ops) <= c.us(CAUSES.index("cpu_ops")) + 1e-6


@pytest.mark.parametrize("source", SAMPLE_DIRS + [f"public/{n}" for n in PUBLIC_TRACES])
def test_causes_add_up_to_the_host_idle_bucket(source):
    path = PUBLIC / source.split("/", 1)[1] if source.startswith("public/") else SAMPLES / source
    report = analyze_paths([path], Options())
    for r in report.ranks:
        _adds_up(r.host_causes_window, r.window.host_idle_us)
        # over what the host test measured: the steady state (the stalls' windows left out)
        _adds_up(r.host_causes, r.steady.host_idle_us)
        if not any(s.stall for s in r.steps):
            basis = r.in_steps if r.host_test.basis == HostBasis.IN_STEPS else r.window
            assert r.steady.host_idle_us == pytest.approx(basis.host_idle_us, abs=1e-6)
        for s in r.steps:
            _adds_up(s.host_causes, s.metrics.host_idle_us)
        for p in r.phases:
            _adds_up(p.host_causes, p.metrics.host_idle_us)
        # The pieces themselves cover the bucket: untraced is measured, not only the remainder.
        pieces = r.detailed().host_pieces
        assert float((pieces.hi - pieces.lo).sum()) == pytest.approx(r.window.host_idle_us, rel=1e-9, abs=1e-6)
        assert (pieces.lo[1:] >= pieces.hi[:-1]).all()  # sorted and disjoint
    doc = build_document(report)
    block = doc.ranks[0].host_causes_window
    assert sum(v.us for v in block.causes.values()) == pytest.approx(block.host_idle_us, abs=0.01)


def _reference_cases():
    return [(n, sample_trace(n), SAMPLES / n) for n in REFERENCE_SAMPLES] + [
        (n, PUBLIC / n, PUBLIC / n) for n in REFERENCE_PUBLIC
    ]


@pytest.mark.parametrize("name,trace,source", _reference_cases(), ids=lambda x: x if isinstance(x, str) else "")
def test_shares_agree_with_a_plain_recomputation(name, trace, source):
    host_idle, totals, names = reference_causes(trace)
    r = analyze_paths([source], Options()).ranks[0]
    c = r.host_causes_window
    assert c.host_idle_us == pytest.approx(host_idle, rel=1e-6)
    for cause in REF_CAUSES:
        assert c.us(CAUSES.index(cause)) / c.host_idle_us == pytest.approx(totals[cause] / host_idle, abs=0.02), cause
    for kind, listed in (("named", c.named), ("cpu_ops", c.cpu_ops)):
        for n, t in listed:
            assert t / c.host_idle_us == pytest.approx(names.get((kind, n), 0.0) / host_idle, abs=0.02), n


def _worked_example(tmp_path, preprocess="gpu_model_runner: preprocess", first_kernel_us=6000):
    """docs/analysis.md's worked example as a Kineto trace (times in us; 1 ms = 1000)."""

    def x(cat, name, ts, dur, tid=7, **args):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}

    events = [
        x("user_annotation", "ProfilerStep#1", 0, 10000),
        x("user_annotation", preprocess, 500, 2000),
        x("cpu_op", "aten::copy_", 1000, 1000),
        x("cuda_runtime", "cudaMemcpyAsync", 1500, 100, correlation=1),
        x("cuda_runtime", "cudaStreamSynchronize", 2500, 500, correlation=2),
        x("cpu_op", "aten::linear", 3200, 700),
        x("cuda_runtime", "cudaLaunchKernel", 3900, 100, correlation=3),
        x("cuda_runtime", "cudaLaunchKernel", 11900, 100, correlation=4),
        # GPU: a copy 0-1 ms (launched before the profiler: no call), kernels 4-10 and 12-13 ms.
        x("gpu_memcpy", "Memcpy HtoD", 0, 1000, tid=9, stream=9),
        x("kernel", "gemm", 4000, first_kernel_us, tid=9, stream=9, correlation=3),
        x("kernel", "gemm", 12000, 1000, tid=9, stream=9, correlation=4),
    ]
    return write_trace({"schemaVersion": 1, "traceEvents": events}, tmp_path / "example.pt.trace.json.gz")


def test_the_worked_example(tmp_path):
    r = analyze_paths([_worked_example(tmp_path)], Options()).ranks[0]
    c = r.host_causes_window
    assert c.host_idle_us == pytest.approx(5000)  # 1-4 ms and 10-12 ms; the copy's tail 13 ms is the window's end
    expected = {
        "named": 1400,
        "launch_calls": 300,
        "synchronisation": 500,
        "cpu_ops": 700,
        "between_steps": 1900,
        "untraced": 200,
        "other_cuda_calls": 0,
        "ubatch_startup": 0,
    }
    assert {k: round(c.us(CAUSES.index(k))) for k in CAUSES} == expected
    assert c.named == (("gpu_model_runner: preprocess", pytest.approx(1400)),)
    assert c.cpu_ops == (("aten::linear", pytest.approx(700)),)
    assert c.launch_calls == 3 and c.sync_calls == 1
    host_idle, totals, _ = reference_causes(_worked_example(tmp_path))
    assert {k: round(v) for k, v in totals.items()} == expected and host_idle == pytest.approx(5000)


def test_launch_wording_follows_the_numbers():
    """graphs-decode: launch calls a few percent of the idle, so launching is not named the cause;
    the ROCm trace: launch calls lead, so it is."""
    reasons = " ".join(reason_texts(analyze_paths([SAMPLES / "vllm-graphs-decode"], Options()).verdict))
    assert "launching kernels" not in reasons and "not its main cause" in reasons
    r = analyze_paths([PUBLIC / "hta-rocm-mi250.json.gz"], Options())
    assert r.ranks[0].host_causes.launches_lead
    assert "launching kernels" in " ".join(reason_texts(r.verdict))


def test_the_line_under_a_host_bound_verdict():
    report = analyze_paths([SAMPLES / "vllm-graphs-decode"], Options())
    text = RENDERERS["terminal"].render(report, RenderOptions(width=100))
    # over the decode phase's steady steps (9 of its 113 steps stalled: docs/analysis.md, "Steady state and stalls")
    assert "host time: decode host-bound 85%: of 198.3 ms GPU idle, 19% launch calls (2,291 calls)" in text
    md = RENDERERS["markdown"].render(report, RenderOptions())
    assert "- host time: decode host-bound 85%: of 198.3 ms GPU idle" in md
    assert "top host cause" in md and "top host cause" in text


def test_trace_names_are_inert_in_the_outputs(tmp_path):
    hostile = "[bold red]x[/] | `y` <b>z</b>\nnext"
    report = analyze_paths([_worked_example(tmp_path, hostile, first_kernel_us=1000)], Options())  # host-bound
    assert report.ranks[0].host_causes_window.named[0][0] == hostile
    text = RENDERERS["terminal"].render(report, RenderOptions(width=100, color=True))
    assert "[bold red]x[/]" in text  # printed as text, not taken as markup
    md = RENDERERS["markdown"].render(report, RenderOptions())
    line = next(li for li in md.splitlines() if li.startswith("- host time:"))
    # Markdown escapes (render/safe.py): no code span, no raw HTML, no new line; a pipe matters in tables only.
    assert "\\`y\\`" in line and "\\<b>" in line and "\n" not in line and "next" in line


def test_the_timeline_draws_what_the_host_did():
    """The median decode step of graphs-decode: CPU operators on the main thread's lane, coloured by
    name; the replayed kernels coloured by what they belong to; the legend only what is drawn."""
    from dbo_trace.render.pictures.step_view import median_step, step_view
    from dbo_trace.render.pictures.timeline_png import OTHER_GROUP, group_colour

    r = analyze_paths([SAMPLES / "vllm-graphs-decode"], Options()).ranks[0]
    view = step_view(r, median_step(r))
    ops = [b for b in view.bars if b.kind == "op"]
    assert ops and all(b.lane == "CPU main thread" and b.group == b.name for b in ops)
    assert any(b.name == "aten::copy_" for b in ops) and "aten::copy_" in view.groups
    on_replay_lanes = [b for b in view.bars if b.lane.startswith("GPU graph replay") and b.kind == "compute"]
    replayed = [b for b in on_replay_lanes if (b.group or "").startswith("graph replay at ")]
    assert len(replayed) >= 0.8 * len(on_replay_lanes)  # the rest: eager kernels on the replay's stream
    # issue 37: a replayed kernel keeps what launched it as data, but is never drawn in a CPU range's
    # colour (it read as that range's): the coloured groups are the CPU's names only
    assert replayed[0].group not in view.groups and group_colour(view, replayed[0].group) == OTHER_GROUP
    from dbo_trace.render.pictures.timeline_png import CLASS_COLOURS, kernel_colour

    assert kernel_colour(replayed[0]) == CLASS_COLOURS[replayed[0].kind]
    # Every op starts after the one before it ends on its lane: outermost runs, not nested ops.
    ends = sorted((b.start, b.end) for b in ops)
    assert all(a[1] <= b[0] for a, b in zip(ends, ends[1:]))
    hostbound = analyze_paths([SAMPLES / "hostbound"], Options()).ranks[0]
    v = step_view(hostbound, median_step(hostbound))
    assert v.groups == ["aten::add_"]  # its operators, on the microbatch lanes their launches are on
    assert {b.lane for b in v.bars if b.kind == "op"} == {"CPU microbatch 0", "CPU microbatch 1"}


def test_innermost_operator_stretches() -> None:
    """Nested ranges cut where the innermost open one changes, covering their union exactly; a range
    outliving its parent stays the innermost to its own end (nothing of it is lost)."""
    import numpy as np

    from dbo_trace.analysis.host.host_time import innermost

    # A [0,10) holds B [2,5) holding C [3,4), and D [6,8); E [12,14) alone; F [13,20) outlives E
    start = np.array([0, 2, 3, 6, 12, 13.0])
    end = np.array([10, 5, 4, 8, 14, 20.0])
    lo, hi, name = innermost(start, end, np.arange(6))
    assert lo.tolist() == [0, 2, 3, 4, 5, 6, 8, 12, 13]
    assert hi.tolist() == [2, 3, 4, 5, 6, 8, 10, 13, 20]
    assert name.tolist() == [0, 1, 2, 1, 0, 3, 0, 4, 5]
    # siblings overlapping by a hair (ts + dur past the next ts at epoch microseconds)
    lo, hi, name = innermost(np.array([0, 10 - 1e-9, 30.0]), np.array([10, 20, 40.0]), np.arange(3))
    assert hi.tolist()[-2:] == [20, 40] and name.tolist() == [0, 1, 2] and (hi - lo).sum() == 30
    assert innermost(np.empty(0), np.empty(0), np.empty(0, np.int64))[0].size == 0
