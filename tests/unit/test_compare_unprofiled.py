"""compare's unprofiled table (issue 40 item 3): sample bundles given timed repeats in their manifests,
the figures checked against a computation here from the definitions in docs/analysis.md
("Unprofiled timing") with numpy and a t table, not through analysis/compare/unprofiled.py."""

import json
import math
import shutil

import numpy as np
import pytest
from conftest import ROOT, run_cli

SAMPLES = ROOT / "samples"
T95 = {2: 4.303, 3: 3.182, 4: 2.776}  # Student's t, two-sided 95%, by degrees of freedom


def _arm(tmp_path, sample: str, name: str, durations, tpots, itls, tool="vllm bench serve"):
    dest = tmp_path / name
    shutil.copytree(SAMPLES / sample, dest)
    m = json.loads((dest / "manifest.json").read_text())
    m["repeats"] = [
        {"tool": tool, "index": i, "duration_s": d, "completed": 64, "output_throughput": 64 * 256 / d,
         "median_tpot_ms": t, "median_itl_ms": it}
        for i, (d, t, it) in enumerate(zip(durations, tpots, itls))
    ]  # fmt: skip
    (dest / "manifest.json").write_text(json.dumps(m))
    return dest


def test_unprofiled_table_against_an_independent_computation(tmp_path):
    a = _arm(tmp_path, "serial", "eager", [36.6, 36.69, 36.636], [3.5, 3.52, 3.49], [3.4, 3.41, 3.39])
    b = _arm(tmp_path, "overlap", "eagerdbo", [38.1, 38.3, 37.9, 38.2], [3.7, 3.71, 3.69, 3.7], [3.6, 3.6, 3.61, 3.62])
    proc = run_cli("compare", "--json", str(a), str(b))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    first, second = out["unprofiled"]
    da, db = np.array([36.6, 36.69, 36.636]), np.array([38.1, 38.3, 37.9, 38.2])
    assert (first["label"], first["repeats"], second["repeats"]) == ("eager", 3, 4)
    assert first["duration_mean_s"] == pytest.approx(da.mean(), abs=1e-4)
    assert first["duration_sd_s"] == pytest.approx(da.std(ddof=1), abs=1e-4)
    assert first["change"] is None and first["tool"] == "vllm bench serve"
    assert second["change"] == pytest.approx(db.mean() / da.mean() - 1, abs=1e-4)
    va, vb = db.var(ddof=1) / 4, da.var(ddof=1) / 3
    se = math.sqrt(va + vb)
    assert second["change_interval"] == pytest.approx(2 * se / da.mean(), abs=1e-4)
    df = (va + vb) ** 2 / (va**2 / 3 + vb**2 / 2)
    lo, hi = max(d for d in T95 if d <= df), min(d for d in T95 if d >= df)
    t_lo, t_hi = T95[hi], T95[lo]  # t falls as df grows: the true t lies between
    assert t_lo * se / da.mean() - 1e-4 <= second["change_interval_t95"] <= t_hi * se / da.mean() + 1e-4
    assert second["within_noise"] is False  # 1.5 s apart, sd 0.05-0.17 s
    assert second["output_tokens_per_s"] == pytest.approx(np.mean(64 * 256 / db), abs=1e-3)
    assert second["tpot_median_ms"] == pytest.approx(np.mean([3.7, 3.71, 3.69, 3.7]), abs=1e-4)
    assert second["itl_median_ms"] == pytest.approx(np.mean([3.6, 3.6, 3.61, 3.62]), abs=1e-4)
    # The profiled step median beside it (compare's own, decode steps where the arm has them), and the overhead.
    arms = {(x["label"], x["phase"]): x for x in out["arms"]}
    for row in (first, second):
        step = arms.get((row["label"], "decode")) or arms[(row["label"], "all")]
        assert row["profiled_step_ms"] == pytest.approx(step["step_median_us"] / 1000, abs=1e-3)
        # like with like: against the ITL median (a decode step's period), not TPOT (it holds interleaved prefills)
        expected = row["profiled_step_ms"] / row["itl_median_ms"] - 1
        if row["profiled_periods"] < 5:  # too few steps for an overhead (each sample profiled 5 steps: 4 periods)
            assert row["profiler_overhead"] is None and row["overhead_too_few"] is True
            continue
        assert row["profiler_overhead"] == (pytest.approx(expected, abs=1e-3) if expected >= 0 else None)


def test_unprofiled_markdown_has_the_ablation_shape_and_arms_without_repeats_are_left_out(tmp_path):
    a = _arm(tmp_path, "serial", "eager", [36.6, 36.69, 36.636], [3.5, 3.52, 3.49], [3.4, 3.41, 3.39], tool="builtin")
    plain = tmp_path / "plain"
    shutil.copytree(SAMPLES / "overlap", plain)
    proc = run_cli("compare", "--markdown", str(a), str(plain))
    assert proc.returncode == 0, proc.stderr
    assert "**unprofiled (timed repeats, the profiler off)**" in proc.stdout
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| `eager` | 36.642 s"))
    assert "36.642 s ± 0.045 (n 3)" in row and "baseline" in row and "builtin" in row
    assert "| `plain` | " not in proc.stdout.split("**unprofiled")[1]
    # Without repeats anywhere, compare's output is as before: no section, no key.
    proc = run_cli("compare", "--json", str(plain), str(SAMPLES / "serial"))
    assert "unprofiled" not in json.loads(proc.stdout)


def test_unprofiled_figures_of_a_real_recording_with_vllm_bench_repeats():
    """samples/afd-graphs-dbo: three `vllm bench serve` repeats recorded on the H200; the table's
    figures are those of its manifest, computed here."""
    sample = SAMPLES / "afd-graphs-dbo"
    repeats = json.loads((sample / "manifest.json").read_text())["repeats"]
    proc = run_cli("compare", "--json", "--label", "a", "--label", "b", str(sample), str(sample))
    assert proc.returncode == 0, proc.stderr
    first, second = json.loads(proc.stdout)["unprofiled"]
    d = np.array([r["duration_s"] for r in repeats])
    assert first["repeats"] == len(repeats) == 3 and first["tool"] == "vllm bench serve"
    assert first["duration_mean_s"] == pytest.approx(d.mean(), abs=1e-4)
    assert first["duration_sd_s"] == pytest.approx(d.std(ddof=1), abs=1e-4)
    assert first["tpot_median_ms"] == pytest.approx(np.mean([r["median_tpot_ms"] for r in repeats]), abs=1e-4)
    assert first["output_tokens_per_s"] == pytest.approx(np.mean([r["output_throughput"] for r in repeats]), abs=1e-3)
    assert second["change"] == pytest.approx(0.0, abs=1e-9) and second["within_noise"] is True


def test_slower_pairs_is_the_share_of_all_pairs_counted_by_brute_force():
    """compare's "slower in x% of step pairs": by sorting (linear after the sort), the same figure as
    comparing every pair, ties counting a half, on real step periods and on ties made on purpose."""
    import numpy as np

    from dbo_trace.analysis.compare.arms import slower_pairs

    rng = np.random.default_rng(7)
    for a, b in (
        (rng.normal(10.0, 1.0, 300), rng.normal(10.2, 1.0, 250)),
        (rng.integers(0, 5, 40).astype(float), rng.integers(0, 5, 60).astype(float)),  # many ties
        (np.array([1.0]), np.array([1.0])),
    ):
        diffs = np.subtract.outer(b, a)
        brute = float(((diffs > 0).sum() + 0.5 * (diffs == 0).sum()) / diffs.size)
        assert slower_pairs(a, b) == brute


def test_two_arms_with_the_same_folder_name_keep_their_own_figures():
    """Issue 61 item 1: graphs/c64 and graphs-dbo/c64 were both labelled "c64", and the data keyed by
    label gave the DBO-off arm the DBO arm's unprofiled TPOT. Each arm's TPOT is computed here from its
    own manifest's repeats; the labels are the paths' distinguishing parts."""
    off, on = SAMPLES / "afd-sweep" / "graphs" / "c64", SAMPLES / "afd-sweep" / "graphs-dbo" / "c64"
    repeats = {a: json.loads((a / "manifest.json").read_text())["repeats"] for a in (off, on)}
    tpot = {a: np.mean([r["median_tpot_ms"] for r in rs]) for a, rs in repeats.items()}
    assert abs(tpot[off] - tpot[on]) > 0.5  # 12.66 against 11.96 ms: a swap shows
    proc = run_cli("compare", "--json", str(off), str(on))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [a["label"] for a in out["arms"] if a["phase"] == "all"] == ["graphs/c64", "graphs-dbo/c64"]
    unprofiled = {u["label"]: u["tpot_median_ms"] for u in out["unprofiled"]}
    assert unprofiled == pytest.approx({"graphs/c64": tpot[off], "graphs-dbo/c64": tpot[on]}, abs=1e-3)
    (pair,) = [p for p in out["pairs"] if p["phase"] == "all"]
    assert (pair["off"], pair["on"]) == ("graphs/c64", "graphs-dbo/c64")
    # the pair's unprofiled step is ITL here (128 prompts at 64 in flight: TPOT holds prefills; item 8)
    itl = {a: np.mean([r["median_itl_ms"] for r in rs]) for a, rs in repeats.items()}
    assert pair["tpot_basis"] == "ITL" and pair["tpot_ms"] == pytest.approx([itl[off], itl[on]], abs=1e-3)
    # The round-trip table (the Markdown's has every column): each arm's row its own TPOT.
    text = run_cli("compare", "--markdown", str(off), str(on)).stdout
    rows = {line.split(" | ")[0]: line for line in text.splitlines() if "ms : " in line}  # an AFD row: compute : exposed
    assert f"| {tpot[off]:.2f} ms |" in rows["| `graphs/c64`"] and f"| {tpot[on]:.2f} ms |" in rows["| `graphs-dbo/c64`"]
    # One folder twice is numbered; labels given twice alike are refused.
    out = json.loads(run_cli("compare", "--json", str(on), str(on)).stdout)
    assert [a["label"] for a in out["arms"] if a["phase"] == "all"] == ["c64 (arm 1)", "c64 (arm 2)"]
    proc = run_cli("compare", "--label", "x", "--label", "x", str(off), str(on))
    assert proc.returncode != 0 and "--label 'x' given twice" in proc.stderr


def test_dbo_pairs_key_arms_by_identity_not_label():
    """Two arms under one label (as --label could once give them) still get each its own TPOT: the
    pairing and the repeats are keyed by the arm's position, not its name."""
    from dataclasses import replace

    from dbo_trace.analysis.compare.arms import Arm, RanWith, dbo_pairs
    from dbo_trace.analysis.compare.unprofiled import unprofiled_of

    def arm(i: int, dbo: bool, period: float) -> Arm:
        w = RanWith(graphs=True, graph_mode="FULL_DECODE_ONLY", dbo=dbo, told_by="settings", microbatched=dbo)
        steady = {"samples_us": (period,) * 8, "sample_tokens": (64,) * 8}
        return Arm("c64", "all", 8, period, 0.0, None, None, None, None, (), **steady, ran_with=w, arm=i)

    def repeats(tpot: float) -> list:
        return [{"tool": "builtin", "duration_s": 2.0, "completed": 64, "median_tpot_ms": tpot}] * 3

    timed = [replace(unprofiled_of("c64", repeats(t), None), arm=i) for i, t in ((0, 12.66), (1, 11.96))]
    (pair,) = dbo_pairs([arm(0, False, 12640.0), arm(1, True, 11950.0)], timed)
    assert pair.tpot_ms == pytest.approx((12.66, 11.96)) and (pair.off_arm, pair.on_arm) == (0, 1)


def test_unprofiled_changes_are_within_a_load_never_across(tmp_path):
    """issue 61 item 9: with arms of two loads, each arm's unprofiled change is against the first arm
    given at its own load (graphs-dbo/c32 against graphs/c32), never against the first arm of all
    (graphs/c16, half the prompts); the changes counted here from the manifests' repeats."""
    sweep = SAMPLES / "afd-sweep"
    paths = [sweep / "graphs" / "c16", sweep / "graphs-dbo" / "c16", sweep / "graphs" / "c32", sweep / "graphs-dbo" / "c32"]
    proc = run_cli("compare", "--json", *map(str, paths))
    assert proc.returncode == 0, proc.stderr
    rows = {r["label"]: r for r in json.loads(proc.stdout)["unprofiled"]}

    def mean_duration(path):
        repeats = json.loads((path / "manifest.json").read_text())["repeats"]
        return float(np.mean([r["duration_s"] for r in repeats]))

    d = {f"{p.parent.name}/{p.name}": mean_duration(p) for p in paths}
    assert rows["graphs/c16"]["change"] is None and rows["graphs/c32"]["change"] is None  # each load's first
    assert rows["graphs-dbo/c16"]["change"] == pytest.approx(d["graphs-dbo/c16"] / d["graphs/c16"] - 1, abs=1e-4)
    assert rows["graphs-dbo/c32"]["change"] == pytest.approx(d["graphs-dbo/c32"] / d["graphs/c32"] - 1, abs=1e-4)
    assert rows["graphs-dbo/c32"]["baseline"] == "graphs/c32" and rows["graphs-dbo/c16"]["baseline"] == "graphs/c16"


def test_a_pairs_unprofiled_change_is_by_itl_where_prefills_interleave(tmp_path):
    """issue 61 item 8: at 64 in flight with 128 prompts (requests arriving in waves) each repeat's TPOT
    holds the prefills of the second wave; the pair's unprofiled change is then by ITL (a decode step's
    period), and says so. Where the load admits no prompt beyond its concurrency, TPOT stands."""
    sweep = SAMPLES / "afd-sweep"
    off, on = sweep / "graphs" / "c64", sweep / "graphs-dbo" / "c64"

    def mean_of(path, key):
        manifest = json.loads((path / "manifest.json").read_text())
        assert manifest["load"]["num_prompts"] > manifest["load"]["concurrency"] or key == "median_tpot_ms"
        return float(np.mean([r[key] for r in manifest["repeats"]]))

    (pair,) = json.loads(run_cli("compare", "--json", str(off), str(on)).stdout)["pairs"]
    itl = (mean_of(off, "median_itl_ms"), mean_of(on, "median_itl_ms"))
    assert pair["tpot_basis"] == "ITL"
    assert pair["tpot_ms"] == pytest.approx(list(itl), abs=1e-3)
    assert pair["tpot_change"] == pytest.approx(itl[1] / itl[0] - 1, abs=1e-4)
    text = run_cli("compare", "--markdown", str(off), str(on)).stdout  # every column
    assert f"{itl[0]:.2f} -> {itl[1]:.2f} ms ({100 * (itl[1] / itl[0] - 1):+.1f}%) by ITL" in text
    # the same arms declared with no prompt beyond the concurrency: one wave, TPOT is a decode step's
    copies = []
    for path in (off, on):
        copy = tmp_path / path.parent.name / path.name
        shutil.copytree(path, copy)
        manifest = json.loads((copy / "manifest.json").read_text())
        manifest["load"]["num_prompts"] = manifest["load"]["concurrency"]
        (copy / "manifest.json").write_text(json.dumps(manifest))
        copies.append(copy)
    (pair,) = json.loads(run_cli("compare", "--json", *map(str, copies)).stdout)["pairs"]
    tpot = (mean_of(off, "median_tpot_ms"), mean_of(on, "median_tpot_ms"))
    assert pair["tpot_basis"] == "TPOT" and pair["tpot_ms"] == pytest.approx(list(tpot), abs=1e-3)
