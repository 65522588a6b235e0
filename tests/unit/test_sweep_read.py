"""Reading a load sweep's folder (issue 52, the read side): `report OUT` and `compare OUT`.

The sweep is built from the shipped AFD bundles (tests/helpers/sweep_build.py): samples/afd-graphs (DBO off)
and samples/afd-pair-graphs-dbo (DBO on), both recorded at 16 requests in flight with the same load,
are load c16, real and profiled. Loads c32 and c64 are copies whose timed repeats are rewritten to
made-up TPOTs: their figures are NOT a real sweep, only inputs whose answer is known. Every expected
figure is computed here from vllm bench serve's own result files (bench/repeat-N.json) with the
standard library, not through dbo_trace's code.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from conftest import ROOT, run_cli
from sweep_build import OFF, ON, REAL_LOAD, SAMPLES, bench_field, bench_tpots, build_sweep

C32 = {"name": "c32", "concurrency": 32, "num_prompts": 64, "input_len": 128, "output_len": 48}
C64 = {"name": "c64", "concurrency": 64, "num_prompts": 128, "input_len": 128, "output_len": 48}
# Made up (not measured): DBO within noise at 32 in flight, faster beyond noise at 64.
MADE_UP = {
    ("graphs", "c32"): [10.1, 10.3, 10.2],
    ("graphs+DBO", "c32"): [10.4, 10.0, 10.5],
    ("graphs", "c64"): [14.0, 14.2, 13.9],
    ("graphs+DBO", "c64"): [12.8, 12.9, 13.0],
}
T95 = {2: 4.303, 3: 3.182, 4: 2.776}  # Student's t, two-sided 95%, by degrees of freedom


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    return build_sweep(tmp_path_factory.mktemp("sweep") / "out", [C64, REAL_LOAD, C32], tpots=MADE_UP)


@pytest.fixture(scope="module")
def summary(sweep) -> dict:
    proc = run_cli("report", "--json", str(sweep))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _welch(off: list[float], on: list[float]) -> tuple[float, float, float, float]:
    """(change, se as a fraction of the off mean, df, off mean): the definition in docs/analysis.md."""
    mo, mn = statistics.mean(off), statistics.mean(on)
    vo, vn = statistics.variance(off) / len(off), statistics.variance(on) / len(on)
    df = (vo + vn) ** 2 / (vo**2 / (len(off) - 1) + vn**2 / (len(on) - 1))
    return mn / mo - 1, math.sqrt(vo + vn) / mo, df, mo


def test_the_real_load_reads_the_samples_own_bench_files(sweep, summary):
    """c16 is the shipped pair as recorded: its figures are those of samples/*/bench/repeat-N.json."""
    (c16,) = [x for x in summary["loads"] if x["name"] == "c16"]
    rows = {a["arm"]: a for a in c16["arms"]}
    for arm, sample in (("graphs", OFF), ("graphs+DBO", ON)):
        tpots = bench_tpots(SAMPLES / sample)
        assert len(tpots) == 3 == rows[arm]["repeats"]
        assert rows[arm]["tpot_mean_ms"] == pytest.approx(statistics.mean(tpots), abs=1e-4)
        assert rows[arm]["tpot_sd_ms"] == pytest.approx(statistics.stdev(tpots), abs=1e-4)
        assert rows[arm]["itl_median_ms"] == pytest.approx(
            statistics.mean(bench_field(SAMPLES / sample, "median_itl_ms")), abs=1e-4
        )
        rates = bench_field(SAMPLES / sample, "output_throughput")
        assert rows[arm]["output_tokens_per_s"] == pytest.approx(statistics.mean(rates), abs=0.01)
        assert rows[arm]["output_tokens_per_s_sd"] == pytest.approx(statistics.stdev(rates), abs=0.01)
    off, on = bench_tpots(SAMPLES / OFF), bench_tpots(SAMPLES / ON)
    assert c16["baseline"] == "graphs" and rows["graphs"]["change"] is None
    assert rows["graphs+DBO"]["change"] == pytest.approx(statistics.mean(on) / statistics.mean(off) - 1, abs=1e-4)
    assert (c16["in_flight"], c16["tokens_per_microbatch"]) == (16, 8.0)  # 16 requests, two microbatches of 8


def test_dbo_change_per_load_with_welch_intervals(sweep, summary):
    (series,) = summary["dbo"]
    assert (series["on"], series["off"], series["graphs"]) == ("graphs+DBO", "graphs", "FULL_DECODE_ONLY")
    assert [p["load"] for p in series["points"]] == ["c16", "c32", "c64"]  # by requests in flight, not as listed
    expected_calls = {"c16": "slower", "c32": "within noise", "c64": "faster"}
    for p in series["points"]:
        off, on = bench_tpots(sweep / "arm0" / p["load"]), bench_tpots(sweep / "arm1" / p["load"])
        change, se, df, _ = _welch(off, on)
        assert p["change"] == pytest.approx(change, abs=1e-4)
        assert p["df"] == pytest.approx(df, abs=0.01)
        lo, hi = max(d for d in T95 if d <= df), min(d for d in T95 if d >= df)
        half_low, half_high = change - p["change_low"], p["change_high"] - change
        for half in (half_low, half_high):
            assert T95[hi] * se - 2e-4 <= half <= T95[lo] * se + 2e-4
        assert p["interval"] == "welch_t95" and p["repeats"] == [3, 3]
        assert p["call"] == expected_calls[p["load"]]
        assert p["in_flight"] == int(p["load"][1:]) and p["tokens_per_microbatch"] == int(p["load"][1:]) / 2


def test_where_dbo_turns_between_two_measured_loads(summary):
    (series,) = summary["dbo"]
    (turn,) = series["turns"]
    assert (turn["before"], turn["after"], turn["from_side"], turn["to_side"]) == ("c16", "c64", "slower", "faster")
    assert turn["passed_over"] == ["c32"]
    assert "turns from slower to faster between c16 (16 in flight) and c64 (64 in flight)" in series["turn_text"]


def test_the_profiled_pair_is_compares(sweep, summary):
    """Where both arms were profiled (c16 only here), compare's pair of the same two bundles, as compare gives it."""
    proc = run_cli("compare", "--json", str(sweep / "arm0" / "c16"), str(sweep / "arm1" / "c16"))
    assert proc.returncode == 0, proc.stderr
    (pair,) = [p for p in json.loads(proc.stdout)["pairs"] if p["phase"] == "all"]
    points = {p["load"]: p for p in summary["dbo"][0]["points"]}
    profiled = points["c16"]["profiled"]
    assert profiled["change"] == pytest.approx(pair["change"], abs=1e-4)
    assert [profiled["change_low"], profiled["change_high"]] == pytest.approx([pair["change_low"], pair["change_high"]], abs=1e-4)
    assert profiled["steps"] == list(pair["compared_steps"])
    assert points["c32"]["profiled"] is None and points["c64"]["profiled"] is None  # their traces were left out
    # The DBO arm's decode steps carry 16 tokens at 16 in flight: 8 per microbatch, as the load says.
    assert points["c16"]["measured_tokens_per_microbatch"] == 8.0
    # The step taken apart: the parts compare's effect gives the same pair, and its sentence.
    effect = pair["effect"]
    parts = {x["name"]: (x["off_us"], x["on_us"]) for x in points["c16"]["parts"]}
    assert set(parts) >= {"compute", "comm alone", "copy", "host-caused idle", "dependency idle"}
    assert parts["compute"][1] > parts["compute"][0] and parts["comm alone"][1] < parts["comm alone"][0]
    for name, key in (("compute", "compute_us"), ("comm alone", "comm_alone_us"), ("dependency idle", "dependency_idle_us")):
        assert parts[name] == pytest.approx((effect["off"][key], effect["on"][key]), abs=1e-3)
    assert profiled["conclusion"].startswith("graphs+DBO against graphs: DBO does not pay")


def test_the_terminal_summary_fits_80_columns_and_says_it(sweep):
    proc = run_cli("report", str(sweep))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    text = " ".join(proc.stdout.split())
    assert "DBO turns from slower to faster between c16 (16 in flight) and c64 (64 in flight)" in text
    assert "load c64: 64 requests in flight" in text and "32 decode tokens per microbatch" in text
    assert "\x1b" not in proc.stdout  # piped: no colour
    same = run_cli("compare", str(sweep))
    assert same.returncode == 0 and same.stdout == proc.stdout  # compare OUT gives the same summary


def test_markdown_html_and_the_plot(sweep, tmp_path):
    md, png, svg, html = tmp_path / "s.md", tmp_path / "s.png", tmp_path / "s.svg", tmp_path / "s.html"
    proc = run_cli("report", str(sweep), "--plot", str(png), "-o", str(md), "--html", str(html))
    assert proc.returncode == 0, proc.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = md.read_text()
    assert "![DBO's change against requests in flight](s.png)" in text
    assert "| `c64` | 64 (32) |" in text
    page = html.read_text()
    assert page.lower().startswith("<!doctype html>") and "data:image/svg+xml;base64," in page and "<script" not in page
    proc = run_cli("compare", str(sweep), "-o", str(svg))
    assert proc.returncode == 0, proc.stderr
    assert svg.read_text().lstrip().startswith("<?xml") and "<svg" in svg.read_text()


def test_a_bundle_inside_the_sweep_still_reads_alone(sweep):
    proc = run_cli("report", "--json", str(sweep / "arm1" / "c16"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["schema"] == "dbo-trace-report"


def test_failed_pending_and_missing_runs_are_listed_not_fatal(tmp_path):
    out = build_sweep(
        tmp_path / "out", [REAL_LOAD, C32, C64], profiled=(), tpots=MADE_UP,
        status={("graphs+DBO", "c32"): ("failed", "the server exited with status 1 before /health: CUDA out of memory"),
                ("graphs", "c64"): ("pending", None)},
    )  # fmt: skip
    # A run marked complete whose bundle is gone, and one sweep.json does not list at all.
    spec = json.loads((out / "sweep.json").read_text())
    spec["loads"].append({"name": "c8", "concurrency": 8, "num_prompts": 16, "input_len": 128, "output_len": 48})
    spec["runs"].append({"arm": "graphs", "load": "c8", "bundle": "arm0/c8", "status": "complete", "reason": None})
    (out / "sweep.json").write_text(json.dumps(spec))
    proc = run_cli("report", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    listed = {(r["arm"], r["load"]): (r["status"], r["reason"]) for r in d["runs_not_used"]}
    assert listed == {
        ("graphs+DBO", "c32"): ("failed", "the server exited with status 1 before /health: CUDA out of memory"),
        ("graphs", "c64"): ("pending", None),
        ("graphs", "c8"): ("complete", "its bundle arm0/c8 is missing"),
        ("graphs+DBO", "c8"): ("pending", "not in the sweep's runs"),
    }
    (series,) = d["dbo"]
    assert [p["load"] for p in series["points"]] == ["c16"] and sorted(series["loads_unpaired"]) == ["c32", "c64", "c8"]
    assert (
        "does not turn in the range measured (16 requests in flight): slower beyond noise at 1 of 1 loads" in series["turn_text"]
    )
    c64 = next(x for x in d["loads"] if x["name"] == "c64")
    assert c64["baseline"] == "graphs+DBO"  # the first arm has no repeats there: the next one is the baseline, said so
    text = " ".join(run_cli("report", str(out)).stdout.split())
    assert "graphs+DBO at c32: failed (the server exited with status 1 before /health: CUDA out of memory)" in text
    assert "changes are against graphs+DBO, the first arm with timed repeats at this load" in text


def _damaged(tmp_path: Path, body: bytes | str) -> tuple[int, str, str]:
    out = tmp_path / "damaged"
    out.mkdir(exist_ok=True)
    (out / "sweep.json").write_bytes(body if isinstance(body, bytes) else body.encode())
    proc = run_cli("report", str(out))
    return proc.returncode, proc.stdout, proc.stderr


GOOD = {
    "format": "dbo-trace-sweep", "version": 1, "created": "x", "command": ["vllm", "serve", "m"], "peer_command": None,
    "arms": [{"name": "a", "args": []}],
    "loads": [{"name": "c8", "concurrency": 8, "num_prompts": 16, "input_len": 1, "output_len": 1}],
    "repeats": 3, "profile": False, "runs": [{"arm": "a", "load": "c8", "bundle": "a/c8", "status": "pending", "reason": None}],
}  # fmt: skip


@pytest.mark.parametrize(
    "change, said",
    [
        (lambda s: json.dumps(s)[:-20], "cannot read the sweep's summary"),
        (lambda s: json.dumps({**s, "format": "something-else"}), 'not a dbo-trace sweep (no "format": "dbo-trace-sweep")'),
        (lambda s: json.dumps({**s, "version": 9}), "sweep version 9 is newer than this dbo-trace reads (1); upgrade dbo-trace"),
        (lambda s: json.dumps({**s, "version": "1"}), "the sweep has no valid version ('1')"),
        (
            lambda s: json.dumps({**s, "loads": [{**s["loads"][0], "concurrency": "8"}]}),
            "Expected `int`, got `str` - at `$.loads[0].concurrency`",
        ),
        (lambda s: json.dumps({**s, "loads": [{**s["loads"][0], "concurrency": 0}]}), "$.loads[0].concurrency"),
        (lambda s: json.dumps({**s, "runs": [{**s["runs"][0], "status": "done"}]}), "$.runs[0].status"),
        (
            lambda s: json.dumps({**s, "runs": [{**s["runs"][0], "arm": "b"}]}),
            "runs[0] names arm 'b' and load 'c8', which the sweep does not list",
        ),
        (
            lambda s: json.dumps({**s, "runs": [{**s["runs"][0], "bundle": "../../etc"}]}),
            "its bundle '../../etc' is not a folder inside the sweep",
        ),
        (lambda s: json.dumps({**s, "arms": s["arms"] * 2}), "the arm 'a' is listed twice"),
        (lambda s: json.dumps({**s, "runs": s["runs"] * 2}), "arm 'a' at load 'c8' is listed twice"),
        (lambda s: "[" * 100_000, "cannot read the sweep's summary"),
        (lambda s: json.dumps({**s, "command": ["x" * 1000] * 5000}), "more than the 4 MiB"),
    ],
    ids=[
        "cut",
        "format",
        "newer",
        "version-type",
        "type",
        "range",
        "status",
        "unknown-arm",
        "escape",
        "twice",
        "run-twice",
        "deep",
        "huge",
    ],
)
def test_damage_in_sweep_json_is_one_line_naming_the_file(tmp_path, change, said):
    code, out, err = _damaged(tmp_path, change(GOOD))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("dbo-trace: error: ") and "Traceback" not in err
    assert str(tmp_path / "damaged" / "sweep.json") in err and said in err, err


def test_a_damaged_manifest_is_that_runs_reason(tmp_path):
    out = build_sweep(tmp_path / "out", [REAL_LOAD], profiled=())
    (out / "arm1" / "c16" / "manifest.json").write_text('{"format": "dbo-trace-bundle", "version": 1, "repeats": "many"}')
    proc = run_cli("report", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    (run,) = json.loads(proc.stdout)["runs_not_used"]
    assert (
        run["arm"] == "graphs+DBO"
        and "manifest.json: its manifest cannot be used (Expected `array`, got `str` - at `$.repeats`)" in run["reason"]
    )


def test_refusals_before_any_work(sweep, tmp_path):
    cases = [
        (["report", str(sweep), str(SAMPLES / "overlap")], "a load sweep's folder, read on its own"),
        (["compare", str(sweep), str(SAMPLES / "overlap")], "a load sweep's folder, read on its own"),
        (["report", str(SAMPLES / "overlap"), "--plot", str(tmp_path / "p.png")], "--plot draws a load sweep's folder"),
        (["report", str(sweep), "--timeline", str(tmp_path / "t.png")], "to analyse or draw one run, give its bundle"),
        (["report", str(sweep), "--plot", str(tmp_path / "p.txt")], "--plot writes .png or .svg"),
        (["report", str(sweep), "-o", str(tmp_path / "p.pftrace")], "not as perfetto"),
        (["compare", str(sweep), "--label", "x"], "a load sweep's folder names its own arms"),
    ]
    for args, said in cases:
        proc = run_cli(*args)
        assert proc.returncode == 2 and said in proc.stderr, (args, proc.stderr)
    assert not list(tmp_path.iterdir())


def test_hostile_names_stay_inert(tmp_path):
    from test_inert import SHAPES, assert_no_raw_controls, check_markdown

    off, on = " ".join(SHAPES[:8]), " ".join(SHAPES[8:]) + " $x^2$ <img src=x>"
    load = {**REAL_LOAD, "name": "c16 $\\frac{$ <img src=x onerror=alert(1)> \x1b]0;t\x07"}
    failed = {(on, "c32"): ("failed", "\x1b[2J **gone** <script>x</script>")}
    out = build_sweep(
        tmp_path / "out",
        [load, C32],
        arms=((off, OFF), (on, ON)),
        profiled=(),
        status=failed,
        load_folder=lambda x: x["name"][:3],
    )
    for flag in ([], ["--markdown"], ["--json"]):
        proc = run_cli("report", *flag, str(out))
        assert proc.returncode == 0, proc.stderr
        assert_no_raw_controls(proc.stdout)
        assert_no_raw_controls(proc.stderr)
        if flag == ["--markdown"]:
            check_markdown(proc.stdout)
        if not flag:
            assert max(len(line) for line in proc.stdout.splitlines()) <= 80
            assert "[link=http://evil.example/]x[/link]" in proc.stdout
        if flag == ["--json"]:
            assert json.loads(proc.stdout)["loads"][0]["arms"][1]["arm"] == on  # the data exactly
    html, png, svg = tmp_path / "s.html", tmp_path / "s.png", tmp_path / "s.svg"
    assert run_cli("report", str(out), "-o", str(html), "--plot", str(png)).returncode == 0
    assert run_cli("report", str(out), "-o", str(svg)).returncode == 0
    page = html.read_text()
    assert "<img src=x" not in page and "<script>x" not in page and "\x1b" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "**gone** &lt;script&gt;x&lt;/script&gt;" in page
    assert "<img" not in svg.read_text() and png.read_bytes()[:4] == b"\x89PNG"


# ---- where DBO turns, and the pairing, on made-up points (the rules of docs/analysis.md "Load sweep") -----


def _points(calls: list[str | None]):
    from dbo_trace.analysis.compare.load_sweep import DboPoint, LoadPoint

    out = []
    for i, call in enumerate(calls):
        load = LoadPoint(f"c{8 * (i + 1)}", 8 * (i + 1), 1000, 128, 48)
        out.append(DboPoint(load, "on", "off", (1.0, 1.0), (3, 3), 0.0, -0.1, 0.1, 4.0, call))
    return out


@pytest.mark.parametrize(
    "calls, turns, side, beyond",
    [
        (["faster", "within noise", "slower"], [("c8", "c24", ("faster", "slower"), ("c16",))], None, 2),
        (
            ["slower", "faster", "no interval", "slower"],
            [("c8", "c16", ("slower", "faster"), ()), ("c16", "c32", ("faster", "slower"), ("c24",))],
            None,
            3,
        ),
        (["within noise", "within noise"], [], None, 0),
        (["slower", "within noise", "no interval"], [], "slower", 1),
        (["within noise", "faster", "faster"], [], "faster", 2),
        ([], [], None, 0),
    ],
)
def test_turns_only_between_loads_beyond_noise_on_each_side(calls, turns, side, beyond):
    from dbo_trace.analysis.compare.load_sweep import turns_of

    found, found_side, found_beyond = turns_of(_points(calls))
    assert [(t.before, t.after, t.direction, t.passed_over) for t in found] == turns
    assert (found_side, found_beyond) == (side, beyond)


def test_a_dbo_arm_pairs_only_with_the_same_graph_mode_and_sharing():
    from dbo_trace.analysis.compare.arms import RanWith
    from dbo_trace.analysis.compare.load_sweep import partners

    arms = ["eager", "graphs", "graphs+DBO", "eager+DBO", "graphs+DBO nomps", "piecewise+DBO"]
    ran = {
        "eager": RanWith(False, "eager", False, "settings", False, True),
        "graphs": RanWith(True, "FULL_DECODE_ONLY", False, "settings", False, True),
        "graphs+DBO": RanWith(True, "FULL_DECODE_ONLY", True, "settings", False, True),
        "eager+DBO": RanWith(False, "eager", True, "settings", False, True),
        "graphs+DBO nomps": RanWith(True, "FULL_DECODE_ONLY", True, "settings", False, False),
        "piecewise+DBO": RanWith(True, "PIECEWISE", True, "settings", False, True),
    }
    pairs, unpaired = partners(arms, ran)
    assert pairs == [("graphs+DBO", "graphs", "FULL_DECODE_ONLY"), ("eager+DBO", "eager", "eager")]
    assert [(u.on, u.graphs) for u in unpaired] == [("graphs+DBO nomps", "FULL_DECODE_ONLY"), ("piecewise+DBO", "PIECEWISE")]


def test_an_arm_that_never_says_whether_dbo_ran_is_named_not_guessed(tmp_path):
    out = build_sweep(tmp_path / "out", [REAL_LOAD], profiled=())
    manifest = out / "arm1" / "c16" / "manifest.json"
    m = json.loads(manifest.read_text())
    del m["settings"], m["command"]
    manifest.write_text(json.dumps(m))
    proc = run_cli("report", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["dbo"] == [] and d["undeclared"] == ["graphs+DBO"]
    text = " ".join(run_cli("report", str(out)).stdout.split())
    assert "graphs+DBO: neither its recorded settings nor a profiled trace say whether DBO ran; not paired" in text


def test_a_bundle_that_says_it_did_not_complete_or_leads_outside_is_not_used(tmp_path):
    out = build_sweep(tmp_path / "out", [REAL_LOAD, C32], profiled=(), tpots=MADE_UP)
    manifest = out / "arm1" / "c16" / "manifest.json"
    m = json.loads(manifest.read_text())
    m["status"] = "incomplete"
    manifest.write_text(json.dumps(m))
    elsewhere = tmp_path / "elsewhere"
    (out / "arm0" / "c32").rename(elsewhere)
    (out / "arm0" / "c32").symlink_to(elsewhere, target_is_directory=True)
    proc = run_cli("report", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    listed = {(r["arm"], r["load"]): (r["status"], r["reason"]) for r in json.loads(proc.stdout)["runs_not_used"]}
    assert listed == {
        ("graphs+DBO", "c16"): ("incomplete", "its manifest's status is 'incomplete', not complete; not used"),
        ("graphs", "c32"): ("complete", "its bundle arm0/c32 leads outside the sweep"),
    }


def test_a_sweep_without_a_dbo_arm_says_it_states_no_dbo_change(tmp_path):
    out = build_sweep(tmp_path / "out", [REAL_LOAD], arms=(("graphs", OFF),), profiled=())
    proc = run_cli("report", str(out))
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert text.startswith("load sweep: 1 arm at 1 load, 3 timed repeats each")
    assert "DBO's change: no arm ran with DBO beside an arm without it" in text


def test_a_sweep_run_and_a_report_read_mps_by_one_rule():
    """An unprofiled sweep run's GPU sharing is read as the report's roles read it (gpu_sharing.verified_mps):
    MPS on only where its daemon answered; a bare `mps: true` is a claim, which pairs with either."""
    from dbo_trace.analysis.afd.gpu_sharing import gpu_sharing, verified_mps
    from dbo_trace.bundle import read_bundle_manifest

    for block, expected in (
        ({"mps": True, "mps_daemon": "answered"}, True), ({"mps": True}, None), ({"mps_daemon": "not running"}, False),
        ({"mps": False, "mps_daemon": "answered"}, False), (None, None),
    ):  # fmt: skip
        assert verified_mps(block) is expected, block
    for bundle in sorted((ROOT / "samples" / "afd-sweep").glob("*/c*")):
        m = read_bundle_manifest(bundle)
        assert verified_mps(m.gpu_sharing) is gpu_sharing([m], []).mps is True, bundle
