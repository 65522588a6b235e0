"""Disaggregated round trips (docs/analysis.md, "Disaggregated round trips (AFD)") on synthetic AFD
pairs that follow the measured facts (tests/helpers/afd_synth.py): the count per step, the microbatched flag,
the hidden share and the FFN parts against the traces' own truth and against tests/references/round_trips_reference.py."""

from __future__ import annotations

import json
import statistics

import pytest
from afd_synth import afd_pair
from conftest import reason_texts
from round_trips_reference import hidden_share, parts, per_step, round_trips

from dbo_trace.analysis.compare.arms import arms_of, compare, dbo_pairs, microbatched, ran_with
from dbo_trace.analysis.model import Options
from dbo_trace.analysis.afd.roles import SharedGpu
from dbo_trace.app.pipeline import analyze_paths
from dbo_trace.render import RENDERERS
from dbo_trace.render.words.verdict import expensive_text, headline
from dbo_trace.render.compare import render_markdown, render_terminal

ARMS = {"eager": (False, False), "eager-dbo": (True, False), "graphs": (False, True), "graphs-dbo": (True, True)}
LAYERS = 3


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    out = {}
    for name, (dbo, graphs) in ARMS.items():
        folder = tmp_path_factory.mktemp(name) / "bundle"
        truth = afd_pair(folder, dbo=dbo, graphs=graphs, layers=LAYERS, yield_us=250.0 if name == "eager" else 0.0)
        out[name] = (folder, truth, analyze_paths([folder], Options()))
    return out


def _attention(report):
    (rank,) = [r for r in report.ranks if r.role == "attention"]
    return rank


@pytest.mark.parametrize("arm", ARMS)
def test_round_trips_per_step_and_microbatched(bundles, arm):
    folder, truth, report = bundles[arm]
    dbo = ARMS[arm][0]
    a = _attention(report).afd
    assert a is not None
    assert a.per_step == (2 * LAYERS if dbo else LAYERS)
    assert a.per_step == len(truth["round_trips"]) / truth["steps"]
    assert a.per_step_kernels == 2 * a.per_step  # the 2 control-plane sends per step are not round trips
    assert a.control_kernels == 2 * truth["steps"]
    assert a.unpaired == 0
    assert a.microbatched is dbo
    assert microbatched(report) is dbo
    assert report.round_trips is not None and report.round_trips.per_step == a.per_step
    assert report.round_trips.microbatched is dbo
    told = "kernel order" if dbo and ARMS[arm][1] else "launching threads" if dbo else "one microbatch"
    assert a.microbatches_told == {told: truth["steps"]}


@pytest.mark.parametrize("arm", ARMS)
def test_hidden_share_against_the_truth_and_the_independent_reference(bundles, arm):
    folder, truth, report = bundles[arm]
    a = _attention(report).afd
    rts = truth["round_trips"]
    ref = round_trips(folder / "traces" / "attention.pt.trace.json.gz")
    if all(r["lag"] == 0 for r in ref):  # the share is of the round trips less the host's lag (none here)
        expected = sum(r["hidden"] for r in rts) / sum(r["rt"] for r in rts)
        assert a.hidden_share == pytest.approx(expected, abs=1e-6)
    else:  # an eager DBO arm launches a receive after its yield: the rest's share, the reference's lag
        assert a.host_lag_total_us == pytest.approx(sum(r["lag"] for r in ref))
        assert a.hidden_share == pytest.approx(hidden_share(ref), abs=1e-6)
    assert len(ref) == len(a.rows)
    assert per_step(ref) == a.per_step
    assert abs(hidden_share(ref) - a.hidden_share) <= 0.03
    assert sorted(r["r1"] - r["s0"] for r in ref) == pytest.approx(sorted(a.rows.round_trip_us.tolist()))
    if ARMS[arm][0]:
        assert a.hidden_share > 0.1  # DBO hid part of each round trip (of its rest, where the host lagged)
        # the label follows the overlapped share: under the other microbatch's compute or beside its round trip
        assert a.hidden_share <= a.overlapped_share <= 1.0
        assert _attention(report).verdict.label == ("overlapped" if a.overlapped_share >= 0.2 else "not-overlapped")
    else:
        assert a.hidden_share == 0.0
        assert a.criterion_ratio is None


@pytest.mark.parametrize("arm", ARMS)
def test_ffn_parts(bundles, arm):
    folder, truth, report = bundles[arm]
    a = _attention(report).afd
    assert a.parts is not None and a.ffn_matched == len(a.rows)
    assert a.median_part("ffn_us") == pytest.approx(60.0)  # the synthetic FFN's compute
    rt = a.rows.round_trip_us
    total = a.parts.transfer_us + a.parts.ffn_us
    assert total == pytest.approx(rt)  # transfer and the FFN's time add up to the round trip
    ref = parts(folder / "traces" / "attention.pt.trace.json.gz", folder / "peer" / "traces" / "ffn.pt.trace.json.gz",
                round_trips(folder / "traces" / "attention.pt.trace.json.gz"))  # fmt: skip
    assert all(p is not None for p in ref)
    for key, mine in (("transfer", "transfer_us"), ("ffn", "ffn_us"), ("wait", "wait_us")):
        assert statistics.median(p[key] for p in ref) == pytest.approx(a.median_part(mine))


def test_roles_are_kept_apart(bundles):
    folder, truth, report = bundles["graphs-dbo"]
    assert sorted(r.role for r in report.ranks) == ["attention", "ffn"]
    assert report.cross_rank is None  # not DP ranks of one collective
    assert report.roles is not None and report.roles.shared_gpu and report.roles.ffn_window_restricted
    assert any(isinstance(w, SharedGpu) and w.roles == ("attention", "ffn") for w in report.warnings)
    ffn = next(r for r in report.ranks if r.role == "ffn")
    assert ffn.afd is None
    assert ffn.window.window_us < 10_000  # its 7.7 s last receive cut to the attention's window
    doc = json.loads(RENDERERS["json"].render(report))
    assert {r["role"] for r in doc["ranks"]} == {"attention", "ffn"}
    assert doc["disaggregated"]["per_step"] == 2 * LAYERS
    assert doc["roles"]["shared_gpu"] is True
    assert "FFN round trip" in headline(report.verdict)
    text = " ".join(RENDERERS["terminal"].render(report).split())
    assert "disaggregated round trips" in text and "FFN compute 0.06 ms, FFN queueing or waiting" in text
    assert "disaggregated round trips" in RENDERERS["markdown"].render(report)


def test_without_dbo_the_headline_says_single_batch(bundles):
    report = bundles["graphs"][2]
    assert report.verdict.label == "single-batch"  # no microbatches: the overlap question has no subject
    assert "one microbatch: each FFN round trip exposed whole" in headline(report.verdict)


def test_expensive_call_in_the_host_line(bundles):
    report = bundles["eager"][2]
    rank = _attention(report)
    (call,) = [e for e in rank.expensive_calls if e.name == "vllm::manual_dbo_yield"]
    assert call.median_us == pytest.approx(250.0) and call.calls == LAYERS * bundles["eager"][1]["steps"]
    assert call.calls_per_step == LAYERS and call.kernel_us_per_call == 0.0
    assert any("vllm::manual_dbo_yield (CPU op) 0.25 ms per call" in r for r in reason_texts(rank.verdict))


def test_compare_four_arms(bundles):
    """compare's per-arm round trips with their parts (the FFN's trace is there) against the synthetic
    truth and tests/references/round_trips_reference.py, and DBO's effect per pair: each DBO arm against the arm of its
    cudagraph mode without DBO (the synthetic bundles record no settings: the traces tell)."""
    labels = list(ARMS)
    with_settings = {name: ran_with(bundles[name][2]) for name in labels}
    rows = compare([arm for name in labels for arm in arms_of(name, bundles[name][2], [], with_settings[name])])
    arms = [r.measured for r in rows]
    by = {a.label: a.round_trip for a in arms}  # each arm's round trip (compare.ArmRoundTrip)
    vs = {r.measured.label: r.vs_first for r in rows}  # each arm against the first (compare.Comparison)
    assert vs["eager"] is None  # the first arm: the baseline
    assert by["eager-dbo"].median_us == pytest.approx(_attention(bundles["eager-dbo"][2]).afd.median_us)
    assert vs["eager-dbo"].round_trip_change == pytest.approx(by["eager-dbo"].median_us / by["eager"].median_us - 1)
    assert by["eager"].criterion is None and by["eager-dbo"].criterion is not None
    assert by["graphs-dbo"].hidden_share > 0.2
    for name in labels:
        folder, truth, _ = bundles[name]
        a = by[name]
        att = folder / "traces" / "attention.pt.trace.json.gz"
        ref_rts = round_trips(att)
        ref = parts(att, folder / "peer" / "traces" / "ffn.pt.trace.json.gz", ref_rts)
        assert a.parts_matched == len(ref_rts)
        assert a.median_us == pytest.approx(statistics.median(r["r1"] - r["s0"] for r in ref_rts))
        assert a.ffn_us == pytest.approx(60.0)  # the synthetic FFN's compute
        for key, mine in (("transfer", a.transfer_us), ("ffn", a.ffn_us), ("wait", a.wait_us)):
            assert mine == pytest.approx(statistics.median(p[key] for p in ref))
        own = _attention(bundles[name][2]).afd
        assert a.ffn_compute_us == pytest.approx(own.median_part("compute_us"))  # the report's split
        assert 0 < a.ffn_compute_us <= 60.0 and a.ffn_queue_us == pytest.approx(own.median_part("queue_us"))
        w = with_settings[name]
        assert (w.graphs, w.dbo, w.told_by) == (ARMS[name][1], ARMS[name][0], "trace")
    pairs = dbo_pairs(arms)
    assert [(p.on, p.off, p.graphs) for p in pairs] == [("eager-dbo", "eager", "eager"), ("graphs-dbo", "graphs", "graphs")]
    steps = {a.label: a.steps for a in arms}
    for p in pairs:
        on, off = by[p.on], by[p.off]
        assert p.round_trip_us == (off.median_us, on.median_us)
        assert p.compared_steps == (steps[p.off], steps[p.on]) and p.call == "too few steps"  # 3 periods each
    text = render_terminal(rows, width=250, pairs=pairs)
    assert "disaggregated round trips (AFD), per arm" in text and "eager-dbo vs eager" in text and "graphs-dbo vs graphs" in text
    md = render_markdown(rows, pairs=pairs)
    assert "compute per microbatch per layer : exposed per round trip" in md and "| `graphs-dbo` vs `graphs` |" in md


def test_expensive_call_on_a_real_recording():
    """samples/vllm-eager-decode: vllm::moe_forward costs far more per call than its GPU work; its
    median and count recomputed from the JSON."""
    from conftest import SAMPLES, sample_trace
    from traces import events_of, read_trace

    doc = read_trace(sample_trace("vllm-eager-decode"))
    durs = [e["dur"] for e in events_of(doc, "cpu_op") if e["name"] == "vllm::moe_forward"]
    report = analyze_paths([SAMPLES / "vllm-eager-decode"], Options())
    (call,) = [e for e in report.ranks[0].expensive_calls if e.name == "vllm::moe_forward"]
    assert call.calls == len(durs)
    assert call.median_us == pytest.approx(statistics.median(durs))
    assert call.kernel_us_per_call * 10 <= call.median_us
    assert any("vllm::moe_forward (CPU op)" in r for r in reason_texts(report.verdict))


def test_without_the_ffn_trace_the_receive_kernel_is_given(tmp_path):
    folder = tmp_path / "bundle"
    afd_pair(folder, dbo=True, graphs=False, layers=LAYERS)
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["roles"]["ffn"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    for f in (folder / "peer" / "traces").iterdir():
        f.unlink()
    report = analyze_paths([folder], Options())
    (rank,) = report.ranks
    assert rank.role == "attention" and rank.afd is not None and rank.afd.parts is None
    assert rank.afd.per_step == 2 * LAYERS
    text = " ".join(RENDERERS["terminal"].render(report).split())
    assert "no FFN trace: the receive kernel" in text


def test_a_step_whose_order_fits_no_pattern_is_said_so():
    """Compute between the first two data kernels but not 4L of them: paired in order, not hidden."""
    import numpy as np

    from dbo_trace.analysis import classify as c
    from dbo_trace.analysis.afd.round_trips import TOLD_NOT
    from dbo_trace.analysis.afd.round_trips import round_trips as pair

    # S A S R A R  (6 data-ish kernels: 4 data, 2 compute), then one more data kernel: 5 data kernels
    kinds = [c.COMM, c.COMPUTE, c.COMM, c.COMM, c.COMPUTE, c.COMM, c.COMM]
    start = np.arange(len(kinds), dtype=float) * 10
    rows, told, unpaired, told_ub = pair(
        start=start, end=start + 5, kind=np.array(kinds, np.int8), data=np.array([k == c.COMM for k in kinds]),
        step=np.zeros(len(kinds), np.int64), ubatch=np.full(len(kinds), -1, np.int8),
    )  # fmt: skip
    assert told == {TOLD_NOT: 1} and len(rows) == 2 and unpaired == 1
    assert rows.hidden_us.tolist() == [0.0, 0.0]
    assert told_ub.tolist() == [-1] * len(kinds)  # no microbatch told: the picture draws one lane


def test_a_yield_under_dbo_is_said_to_hold_the_other_turn(tmp_path):
    folder = tmp_path / "bundle"
    afd_pair(folder, dbo=True, graphs=False, layers=LAYERS, yield_us=250.0)
    rank = _attention(analyze_paths([folder], Options()))
    (call,) = [e for e in rank.expensive_calls if e.name == "vllm::manual_dbo_yield"]
    assert call.yields and "the other microbatch's turn" in expensive_text(call)
    assert call.calls_per_step == 2 * LAYERS
