"""`compare` of the AFD plugin's decode arms recorded on the H200 (docs/analysis.md, "compare", and
"Disaggregated round trips"): graphs (tests/data/afd/afd-graphs), graphs+DBO (samples/afd-graphs-dbo)
and eager+DBO (tests/data/afd/afd-eager-dbo). Every figure is checked against a count made here from
the raw files in plain Python (gzip + json: the execute_* starts, the manifests' repeats) or by
tests/references/round_trips_reference.py; and `report` of one recording states the profiler's overhead."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLES, run_cli
from round_trips_reference import hidden_share, round_trips

from dbo_trace.analysis.compare.arms import declared

DATA = ROOT / "tests" / "data" / "afd"
ARMS = {"graphs": DATA / "afd-graphs", "graphs+dbo": SAMPLES / "afd-graphs-dbo", "eager+dbo": DATA / "afd-eager-dbo"}
LAYERS = 27


def _manifest(bundle: Path) -> dict:
    return json.loads((bundle / "manifest.json").read_text())


def _trace(bundle: Path) -> Path:
    return bundle / _manifest(bundle)["roles"]["attention"]["traces"][0]


def _truth(bundle: Path) -> dict:
    """Plain counts: the median gap between consecutive execute_* starts, the data-plane SendRecv
    kernels per step (all of them less the 2 control-plane sends a step), the repeats' TPOT and ITL
    (the profiler's overhead is against ITL, like with like: a decode step's period)."""
    with gzip.open(_trace(bundle), "rt") as f:
        events = json.load(f)["traceEvents"]
    starts = sorted(e["ts"] for e in events if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("execute_"))
    sendrecv = sum(1 for e in events if e.get("cat") == "kernel" and "SendRecv" in e.get("name", ""))
    repeats = _manifest(bundle)["repeats"]
    tpot = statistics.mean(r["median_tpot_ms"] for r in repeats)
    itl = statistics.mean(r["median_itl_ms"] for r in repeats)
    period = statistics.median(b - a for a, b in zip(starts, starts[1:]))
    return {
        "steps": len(starts),
        "period_us": period,
        "round_trips_per_step": (sendrecv - 2 * len(starts)) / len(starts) / 2,
        "tpot_ms": tpot,
        "itl_ms": itl,
        "overhead": period / 1000 / itl - 1,
    }


@pytest.fixture(scope="module")
def truth():
    return {label: _truth(bundle) for label, bundle in ARMS.items()}


@pytest.fixture(scope="module")
def compared():
    args = [a for label in ARMS for a in ("--label", label)]
    proc = run_cli("compare", "--json", *args, *(str(b) for b in ARMS.values()))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_each_arm_against_the_raw_files(compared, truth):
    arms = {a["label"]: a for a in compared["arms"] if a["phase"] == "all"}
    assert [a["phase"] for a in compared["arms"]] == ["all"] * 3  # decode rows would repeat them
    timed = {u["label"]: u for u in compared["unprofiled"]}
    for label, t in truth.items():
        a, u = arms[label], timed[label]
        assert a["steps"] == t["steps"] - 1  # periods: the last step has no next start
        # graphs+DBO's steps come from its event log (UBatchWrapper calls), the others' from execute_*
        assert a["step_median_us"] == pytest.approx(t["period_us"], rel=0.01)
        assert a["round_trips_per_layer"] * LAYERS == pytest.approx(t["round_trips_per_step"], rel=0.1)
        assert u["tpot_median_ms"] == pytest.approx(t["tpot_ms"], abs=1e-4)
        assert u["profiler_overhead"] == pytest.approx(t["overhead"], abs=0.01)
        ref = round_trips(_trace(ARMS[label]))
        assert a["round_trip_us"] == pytest.approx(statistics.median(r["r1"] - r["s0"] for r in ref), rel=1e-6)
        assert a["round_trip_hidden_share"] == pytest.approx(hidden_share(ref), abs=0.03)
        assert a["round_trip_parts_matched"] is None and a["round_trip_transfer_us"] is None  # no FFN trace
    assert arms["graphs"]["round_trip_criterion"] is None  # one microbatch: nothing to hide a round trip under
    assert arms["eager+dbo"]["round_trip_criterion"] is False and arms["graphs+dbo"]["round_trip_criterion"] is False
    assert timed["eager+dbo"]["profiler_overhead"] > 0.5 and abs(timed["graphs"]["profiler_overhead"]) < 0.05
    ran = {label: arms[label]["ran_with"] for label in ARMS}
    assert ran["graphs"] == {"graphs": True, "graph_mode": "FULL_DECODE_ONLY", "dbo": False, "told_by": "settings",
                             "microbatched": False, "mps": None,
                             "load": {"concurrency": 16, "input_len": 128, "output_len": 48, "decode_requests": 16.0}}  # fmt: skip  (the manifest's bare mps: true is unverified)
    assert (ran["graphs+dbo"]["dbo"], ran["graphs+dbo"]["microbatched"], ran["eager+dbo"]["graph_mode"]) == (True, True, "eager")


def test_dbo_per_pair_by_the_wall_clock(compared, truth):
    """graphs+DBO against graphs: slower by the median period between step starts, as the plain count
    says (10.12 against 8.75 ms here); eager+DBO has no eager arm to pair with."""
    (pair, alone) = compared["pairs"]
    assert (pair["on"], pair["off"], pair["graphs"]) == ("graphs+dbo", "graphs", "FULL_DECODE_ONLY")
    plain = truth["graphs+dbo"]["period_us"] / truth["graphs"]["period_us"] - 1
    assert plain > 0.1 and pair["change"] == pytest.approx(plain, abs=0.02)
    assert pair["call"] == "beyond noise" and pair["change_low"] > 0 and pair["outcome"] == "DBO slower"
    # 32 prompts at 16 in flight: prefills interleave, so the pair's unprofiled step is ITL, not TPOT
    assert pair["tpot_basis"] == "ITL"
    assert pair["tpot_ms"] == pytest.approx([truth["graphs"]["itl_ms"], truth["graphs+dbo"]["itl_ms"]], abs=1e-3)
    assert (alone["on"], alone["off"], alone["graphs"]) == ("eager+dbo", None, "eager")


def test_the_tables_say_it(monkeypatch, truth):
    monkeypatch.setenv("COLUMNS", "250")
    args = [a for label in ARMS for a in ("--label", label)]
    text = run_cli("compare", *args, *(str(b) for b in ARMS.values())).stdout
    row = next(line for line in text.splitlines() if line.lstrip().startswith("graphs+dbo vs graphs"))
    assert "FULL_DECODE_ONLY" in row and "DBO slower" in row
    assert (
        "eager+dbo (all steps, 16 in flight, 128 in / 48 out): no DBO-off arm of the same load, GPU sharing and "
        "cudagraph mode to pair it with: graphs ran another cudagraph mode (FULL_DECODE_ONLY against eager)"
    ) in " ".join(text.split())
    afd = next(line for line in text.splitlines() if line.lstrip().startswith("eager+dbo ") and "DBO on" in line)
    t = truth["eager+dbo"]  # TPOT and the profiler's overhead beside the round trip
    assert f"{t['tpot_ms']:.2f} ms" in afd and f"{100 * t['overhead']:+.0f}%" in afd
    md = run_cli("compare", "--markdown", *args, *(str(b) for b in ARMS.values())).stdout
    graphs = truth["graphs"]["period_us"] / 1000  # its steps are execute_*'s: the plain count's to the 10 us shown
    assert f"| `graphs+dbo` vs `graphs` | all | FULL_DECODE_ONLY | {graphs:.2f} -> " in md


def test_pairs_follow_settings_not_order():
    """The DBO arm given first still pairs with its DBO-off arm."""
    proc = run_cli("compare", "--json", "--label", "gd", "--label", "g", str(ARMS["graphs+dbo"]), str(ARMS["graphs"]))
    (pair,) = json.loads(proc.stdout)["pairs"]
    assert (pair["on"], pair["off"]) == ("gd", "g") and pair["change"] > 0


@pytest.mark.parametrize(
    "settings, expected",
    [
        ({"cudagraph": {"enforce-eager": True}, "dbo": {"enable-dbo": True}}, (False, "eager", True)),
        ({"cudagraph": {"compilation-config": '{"cudagraph_mode": "full_decode_only"}'}, "dbo": {}}, (True, "FULL_DECODE_ONLY", False)),
        ({"cudagraph": {"compilation-config": '{"cudagraph_mode": "NONE"}'}}, (False, "eager", None)),
        ({"cudagraph": {"compilation-config": "3"}, "dbo": {"enable-dbo": "true"}}, (None, None, True)),
        ({"cudagraph": {}}, (None, None, None)),  # vLLM's default mode: the trace tells
        (None, (None, None, None)),
        ("not a dict", (None, None, None)),
    ],
)
def test_declared_settings(settings, expected):
    assert declared(settings) == expected


def test_report_states_the_profiler_overhead(truth):
    """`report` of one recording with repeats: the overhead in every output; large on eager+DBO, where
    it says the host-bound verdict may be partly the profiler's doing."""
    for label in ("graphs+dbo", "eager+dbo"):
        bundle, t = ARMS[label], truth[label]
        doc = json.loads(run_cli("report", "--json", str(bundle)).stdout)
        p = doc["profiler"]
        assert p["periods"] == t["steps"] - 1 and p["steps_of"] == "decode" and p["repeats"] == 3
        assert p["profiled_period_us"] == pytest.approx(t["period_us"], rel=0.01)
        assert p["unprofiled_tpot_ms"] == pytest.approx(t["tpot_ms"], abs=1e-4)
        assert p["basis"] == "ITL" and p["unprofiled_itl_ms"] == pytest.approx(t["itl_ms"], abs=1e-4)
        assert p["overhead"] == pytest.approx(t["overhead"], abs=0.01)
        assert p["large"] is (label == "eager+dbo")
        percent = f"profiler overhead {100 * p['overhead']:+.0f}%"
        said = "the host-bound verdict may be partly the profiler's own doing"
        assert (doc["verdict"]["label"] == "host-bound") is (label == "eager+dbo")
        # a claim about the run's verdict: its reason, not a line beside it
        overhead = [r for r in doc["verdict"]["reasons"] if r["kind"] == "profiler_overhead"]
        assert [r["text"].startswith(said) for r in overhead] == ([True] if label == "eager+dbo" else [])
        outputs = [run_cli("report", str(bundle)).stdout, run_cli("report", "--markdown", str(bundle)).stdout]
        for text in outputs:
            flat = " ".join(text.split())
            assert percent in flat and (said in flat) is (label == "eager+dbo")
        if label == "eager+dbo":  # +52% against ITL (+53% against TPOT)
            assert percent == f"profiler overhead {100 * t['overhead']:+.0f}%"


def test_report_html_states_the_profiler_overhead(tmp_path):
    out = tmp_path / "r.html"
    proc = run_cli("report", str(ARMS["eager+dbo"]), "--html", str(out))
    assert proc.returncode == 0, proc.stderr
    page = out.read_text()
    assert "profiler overhead +52%" in page and "may be partly the profiler&#x27;s own doing" in page


def test_no_repeats_no_overhead():
    doc = json.loads(run_cli("report", "--json", str(SAMPLES / "overlap")).stdout)
    assert "profiler" not in doc
    assert "profiler overhead" not in run_cli("report", str(SAMPLES / "overlap")).stdout


def test_hostile_labels_stay_inert_in_the_afd_table_and_the_pairs():
    from test_inert import HOSTILE, assert_no_raw_controls, check_markdown

    for flag in ([], ["--markdown"], ["--json"]):
        proc = run_cli(
            "compare", *flag, "--label", "g" + HOSTILE, "--label", HOSTILE, str(ARMS["graphs"]), str(ARMS["graphs+dbo"])
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert_no_raw_controls(proc.stdout)
        if flag == ["--markdown"]:
            check_markdown(proc.stdout)
            assert "DBO slower" in proc.stdout
        if flag == ["--json"]:
            (pair,) = json.loads(proc.stdout)["pairs"]
            assert (pair["on"], pair["off"]) == (HOSTILE, "g" + HOSTILE)


def test_each_arms_warnings_name_their_arm():
    """compare of two AFD arms: a warning from reading an arm (its roles, its missing FFN trace) says
    which arm, so the same sentence for two arms is two lines a reader can tell apart."""
    from conftest import SAMPLES, run_cli

    proc = run_cli("compare", str(SAMPLES / "afd-eager"), str(SAMPLES / "afd-graphs-dbo"))
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "ran on one GPU" in line or "has no trace" in line]
    assert lines and all(line.startswith(("dbo-trace: warning: afd-eager: ", "dbo-trace: warning: afd-graphs-dbo: ")) for line in lines)
    assert any("afd-graphs-dbo: the manifest's ffn role has no trace" in line for line in lines)
