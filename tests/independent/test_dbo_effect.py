"""`compare` pairs like with like and takes DBO's effect apart (issue 51; docs/analysis.md, "Does DBO
pay: the effect taken apart"). The parts are checked against a count made here from the raw traces
in plain Python (gzip + json, unions of intervals), not through dbo_trace; pairing by load on copies
of the shipped bundles whose manifests' load is edited, given in shuffled order."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import statistics
from pathlib import Path

import pytest
from conftest import SAMPLES, run_cli
from test_inert import HOSTILE, assert_no_raw_controls, check_markdown

from dbo_trace.render.layout import cells

OFF, ON = SAMPLES / "afd-graphs", SAMPLES / "afd-pair-graphs-dbo"


# ---- an independent count from the raw trace ---------------------------------------------------------


def _union(iv: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _clip(iv: list[tuple[float, float]], lo: float, hi: float) -> float:
    return sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in iv)


def _minus(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """a less b, both unions."""
    out, j = [], 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            out.append((cur, e))
    return out


def _events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]


def _count(bundle: Path) -> dict[str, float]:
    """Per step (us) over [first execute_* start, last one's): compute (non-NCCL kernels), comm alone
    (NCCL less compute), copy alone, idle; the FFN's compute over the same span where it is traced."""
    (trace,) = (bundle / "traces").glob("*.json.gz")
    ev = _events(trace)
    starts = sorted(e["ts"] for e in ev if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("execute_"))
    lo, hi, n = starts[0], starts[-1], len(starts) - 1
    kern = [e for e in ev if e.get("cat") == "kernel"]
    comp = _union([(e["ts"], e["ts"] + e["dur"]) for e in kern if not e["name"].startswith("nccl")])
    comm = _union([(e["ts"], e["ts"] + e["dur"]) for e in kern if e["name"].startswith("nccl")])
    copies = _union([(e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") in ("gpu_memcpy", "gpu_memset")])
    busy = _union(comp + comm + copies)
    out = {
        "compute_us": _clip(comp, lo, hi) / n,
        "comm_alone_us": _clip(_minus(comm, comp), lo, hi) / n,
        "copy_us": _clip(_minus(copies, _union(comp + comm)), lo, hi) / n,
        "idle_us": (hi - lo - _clip(busy, lo, hi)) / n,
        "median_us": statistics.median(b - a for a, b in zip(starts, starts[1:])),
    }
    peer = list((bundle / "peer" / "traces").glob("*.json.gz")) if (bundle / "peer" / "traces").is_dir() else []
    if peer:
        fev = _events(peer[0])
        fk = [e for e in fev if e.get("cat") == "kernel" and not e["name"].startswith("nccl")]
        # both traces' clocks: baseTimeNanoseconds (the same here, checked by the reader)
        out["ffn_compute_us"] = _clip(_union([(e["ts"], e["ts"] + e["dur"]) for e in fk]), lo, hi) / n
    return out


@pytest.fixture(scope="module")
def effect_json():
    proc = run_cli("compare", "--json", "--label", "graphs", "--label", "graphs+dbo", str(OFF), str(ON))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_parts_match_a_plain_count(effect_json):
    (pair,) = effect_json["pairs"]
    e = pair["effect"]
    for side, bundle in (("off", OFF), ("on", ON)):
        truth, got = _count(bundle), e[side]
        for part in ("compute_us", "comm_alone_us", "copy_us"):
            assert got[part] == pytest.approx(truth[part], abs=1.0), (side, part)
        assert got["host_idle_us"] + got["dependency_idle_us"] == pytest.approx(truth["idle_us"], abs=1.0)
    assert e["on"]["ffn"]["compute_us"] == pytest.approx(_count(ON)["ffn_compute_us"], abs=1.0)
    assert e["off"]["ffn"] is None  # afd-graphs holds the attention's trace alone
    # graphs+DBO at 16 in flight: compute grows, the exposed round trip shrinks (issue 51's table)
    assert e["changes_us"]["compute_us"] > 2000 and e["changes_us"]["comm_alone_us"] < -2000


def test_the_parts_add_up(effect_json):
    """To the change of the mean period exactly; to the median's within the residual stated."""
    e = effect_json["pairs"][0]["effect"]
    c = e["changes_us"]
    total = c["compute_us"] + c["comm_alone_us"] + c["copy_us"] + c["idle_us"]
    assert total == pytest.approx(e["parts_sum_us"], abs=0.01)
    assert e["parts_sum_us"] == pytest.approx(e["on"]["period_us"] - e["off"]["period_us"], abs=0.01)
    assert e["parts_sum_us"] == pytest.approx(e["mean_change_us"], abs=0.01)
    assert e["residual_us"] == pytest.approx(e["parts_sum_us"] - e["median_change_us"], abs=0.01)
    assert abs(e["residual_us"]) < 300  # 19 periods a side: mean and median within 0.3 ms here
    (kernel,) = [k for k in e["kernels"] if "FlashAttnFwdSm90" in k["name"]]
    assert kernel["off"]["median_us"] < 14 < 18 < kernel["on"]["median_us"]  # half the batch, a slower call


def test_the_conclusion_comes_first(effect_json, monkeypatch):
    (said,) = effect_json["conclusions"]
    assert said.startswith("graphs+dbo against graphs: DBO does not pay: its cost (+")
    assert "exceeds the exposed comm it removes" in said and "tokens" not in said
    monkeypatch.setenv("COLUMNS", "80")
    text = run_cli("compare", "--label", "graphs", "--label", "graphs+dbo", str(OFF), str(ON)).stdout
    assert text.startswith("graphs+dbo against graphs: DBO does not pay")
    assert max(map(cells, text.splitlines())) <= 80
    md = run_cli("compare", "--markdown", "--label", "graphs", "--label", "graphs+dbo", str(OFF), str(ON)).stdout
    assert md.startswith("**graphs+dbo against graphs: DBO does not pay")


# ---- like with like ------------------------------------------------------------------------------------


def _at_load(tmp_path: Path, bundle: Path, name: str, concurrency: int | None) -> Path:
    folder = tmp_path / name
    shutil.copytree(bundle, folder)
    path = folder / "manifest.json"
    m = json.loads(path.read_text())
    if concurrency is None:
        m.pop("load", None)
    else:
        m["load"]["concurrency"] = concurrency
    path.write_text(json.dumps(m))
    return folder


@pytest.fixture(scope="module")
def loads(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("loads")
    return {
        "g16": _at_load(tmp, OFF, "g16", 16),
        "d16": _at_load(tmp, ON, "d16", 16),
        "g32": _at_load(tmp, OFF, "g32", 32),
        "d32": _at_load(tmp, ON, "d32", 32),
    }


def test_pairs_by_load_in_any_order(loads):
    order = ["d32", "g16", "d16", "g32"]  # the old pairing took the first DBO-off arm: d32 with g16
    proc = run_cli("compare", "--json", *(str(loads[k]) for k in order))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    pairs = {p["on"]: p["off"] for p in out["pairs"]}
    assert pairs == {"d32": "g32", "d16": "g16"}
    assert not any(p["per_token"] for p in out["pairs"]) and not any(a["per_token"] for a in out["arms"])
    groups = {a["label"]: a["load_group"] for a in out["arms"]}
    assert groups == {"d32": 0, "g32": 0, "g16": 1, "d16": 1}  # by load, in the order loads first come
    base = {a["label"]: a["call"] for a in out["arms"]}
    assert base["d32"] is None and base["g16"] is None  # each load's first arm is its baseline
    assert len(out["conclusions"]) == 2


def test_an_arm_without_a_partner_says_why(loads, monkeypatch):
    proc = run_cli("compare", "--json", str(loads["g16"]), str(loads["d32"]))
    out = json.loads(proc.stdout)
    (pair,) = out["pairs"]
    assert pair["off"] is None and pair["effect"] is None and out["conclusions"] == []
    (why,) = pair["unpaired"]
    assert why["key"] == "load" and why["off_value"]["concurrency"] == 16 and why["on_value"]["concurrency"] == 32
    d32 = next(a for a in out["arms"] if a["label"] == "d32")
    assert d32["change"] is None and not d32["per_token"]  # no change across loads, per token or not
    monkeypatch.setenv("COLUMNS", "200")
    text = " ".join(run_cli("compare", str(loads["g16"]), str(loads["d32"])).stdout.split())
    assert "g16 ran another load (16 in flight, 128 in / 48 out against 32 in flight, 128 in / 48 out)" in text


def test_without_a_declared_load_the_trace_tells(loads):
    """No manifest load: the steady decode steps' median decode requests (16 on both) pair them."""
    bare = _at_load(loads["g16"].parent, OFF, "g-bare", None)
    out = json.loads(run_cli("compare", "--json", str(bare), str(loads["d16"])).stdout)
    (pair,) = out["pairs"]
    assert pair["off"] == "g-bare" and pair["load_known"]
    bare_arm = next(a for a in out["arms"] if a["label"] == "g-bare")
    assert bare_arm["ran_with"]["load"] == {"concurrency": None, "input_len": None, "output_len": None, "decode_requests": 16.0}


def test_hostile_labels_stay_inert(monkeypatch):
    arms = ["--label", HOSTILE, "--label", "dbo", str(OFF), str(ON)]
    for flag in ([], ["--markdown"], ["--json"]):
        proc = run_cli("compare", *flag, *arms)
        assert proc.returncode == 0, proc.stderr
        assert_no_raw_controls(proc.stdout)
        assert "W" * 200 not in re.sub(r"\s", "", proc.stdout)
        if flag == ["--markdown"]:
            check_markdown(proc.stdout)
    monkeypatch.setenv("COLUMNS", "80")
    text = run_cli("compare", *arms).stdout
    assert "DBO does not pay" in text.split("\n\n")[0]
    assert max(map(cells, text.splitlines())) <= 80


def test_the_eager_pair_matches_a_plain_count():
    """eager against eager+DBO (the yield op's hand-overs make the DBO arm's host idle): the parts as
    the plain count has them, and DBO does not pay, having hidden no exposed comm."""
    off, on = SAMPLES / "afd-eager", SAMPLES / "afd-eager-dbo"
    out = json.loads(run_cli("compare", "--json", str(off), str(on)).stdout)
    (pair,) = out["pairs"]
    e = pair["effect"]
    for side, bundle in (("off", off), ("on", on)):
        truth, got = _count(bundle), e[side]
        for part in ("compute_us", "comm_alone_us", "copy_us"):
            assert got[part] == pytest.approx(truth[part], abs=1.0), (side, part)
        assert got["host_idle_us"] + got["dependency_idle_us"] == pytest.approx(truth["idle_us"], abs=1.0)
    assert e["call"] == "does not pay" and e["exposed_removed_us"] == 0
    assert "it removed no exposed comm" in out["conclusions"][0]


def _reference():
    """tests/references/dbo_effect_truth.py: the reference written from the definitions alone,
    without reading dbo_trace (branch truth; here once merged)."""
    import importlib.util

    path = Path(__file__).parent.parent / "references" / "dbo_effect_truth.py"
    if not path.exists():
        pytest.skip("tests/references/dbo_effect_truth.py is not merged here yet")
    spec = importlib.util.spec_from_file_location("dbo_effect_truth", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_against_the_independent_reference(effect_json):
    ref = _reference().effect(str(OFF), str(ON))
    e = effect_json["pairs"][0]["effect"]
    for side in ("off", "on"):
        r, got = ref[side], e[side]
        assert got["periods"] == r["periods"]
        assert got["period_us"] / 1000 == pytest.approx(r["period_mean_ms"], abs=1e-3)
        for part in ("compute", "comm_alone", "copy"):
            assert got[f"{part}_us"] / 1000 == pytest.approx(r[f"{part}_ms"], abs=1e-3), (side, part)
        # the idle's total; its split differs by definition (docs/analysis.md: host-caused up to the
        # launch call's end + 20 us here, to its start there)
        assert (got["host_idle_us"] + got["dependency_idle_us"]) / 1000 == pytest.approx(r["idle_ms"], abs=1e-3)
    ffn, r = e["on"]["ffn"], ref["on"]["ffn"]
    assert ffn["compute_us"] / 1000 == pytest.approx(r["compute_ms"], abs=1e-3)
    assert ffn["other_busy_us"] / 1000 == pytest.approx(r["comm_alone_ms"] + r["copy_ms"], abs=1e-3)
    assert ffn["idle_us"] / 1000 == pytest.approx(r["idle_ms"], abs=1e-3)
    assert e["parts_sum_us"] / 1000 == pytest.approx(ref["sum_of_parts_ms"], abs=1e-3)
    flash = next(k for k in ref["top_kernels"] if "FlashAttnFwdSm90" in k["name"])
    (mine,) = [k for k in e["kernels"] if k["name"] == flash["name"]]
    medians = (flash["off_median_us"], flash["on_median_us"])
    assert (mine["off"]["median_us"], mine["on"]["median_us"]) == pytest.approx(medians, abs=0.01)


# ---- the pure functions and the words, on made-up arrays ----------------------------------------------


def _parts(compute: float, comm: float, host: float, dep: float, periods: int = 10):
    from dbo_trace.analysis.afd.effect import SpanParts

    per = compute + comm + host + dep
    return SpanParts(0.0, per * periods, periods, compute, comm, 0.0, host, dep)


def test_the_parts_of_a_made_up_timeline():
    """Steps at 0, 100, 200, 300 (S = [0, 300), 3 periods); compute [10, 50) and [110, 150), comm
    [40, 90) (10 under compute), a copy [250, 260), a kernel [290, 320) cut at S's end."""
    import numpy as np

    from dbo_trace.analysis import classify as c
    from dbo_trace.analysis.accounting import partition
    from dbo_trace.analysis.afd.effect import ffn_parts, span_of, span_parts

    start = np.array([10.0, 40.0, 110.0, 250.0, 290.0])
    end = np.array([50.0, 90.0, 150.0, 260.0, 320.0])
    kind = np.array([c.COMPUTE, c.COMM, c.COMPUTE, c.COPY, c.COMPUTE], np.int8)
    launch = start - 5.0  # every launch before its gap: all idle is dependency idle
    part = partition(lo=0.0, hi=400.0, start=start, end=end, kind=kind, launch_start=launch)
    steps = np.array([0.0, 100.0, 200.0, 300.0, 350.0])
    steady = np.array([True, True, True, True, False])  # the last a stall: S ends at 300
    assert span_of(steps, steady) == (0.0, 300.0, 3)
    p = span_parts(part, 0.0, 300.0, 3, start=start, end=end, name=np.array([0, 1, 0, 2, 0]),
                   compute=kind == c.COMPUTE, names=["gemm", "nccl", "copy"])  # fmt: skip
    assert p.compute_us == pytest.approx((40 + 40 + 10) / 3)
    assert p.comm_alone_us == pytest.approx(40 / 3)
    assert p.copy_us == pytest.approx(10 / 3)
    assert p.host_idle_us + p.dependency_idle_us == pytest.approx((300 - 90 - 40 - 10) / 3)
    assert p.compute_us + p.comm_alone_us + p.copy_us + p.idle_us == pytest.approx(p.period_us) == 100.0
    (gemm,) = p.kernels
    assert (gemm.name, gemm.calls_per_step, gemm.median_us) == ("gemm", 1.0, 40.0)  # [290, 320) starts in S too
    f = ffn_parts(0.0, 300.0, 3, (np.array([0.0, 150.0]), np.array([100.0, 200.0])), (np.array([0.0]), np.array([60.0])))
    assert (f.compute_us, f.other_busy_us, f.idle_us) == pytest.approx((20.0, 30.0, 50.0))


def _pair(off, on, median_off: float, median_on: float, beyond: bool | None):
    from dbo_trace.analysis.compare.arms import BEYOND, TOO_FEW, WITHIN, Pair
    from dbo_trace.analysis.afd.effect import effect_of

    e = effect_of(off, on, median_off_us=median_off, median_on_us=median_on, beyond_noise=beyond)
    call = TOO_FEW if beyond is None else BEYOND if beyond else WITHIN
    return Pair("all", "graphs+dbo@64", "graphs@64", "FULL_DECODE_ONLY", change=median_on / median_off - 1, call=call, effect=e)


def test_the_words_of_each_call():
    from dbo_trace.render.words.pipeline import conclusion

    pays = _pair(_parts(1590, 11000, 1000, 330), _parts(3420, 5910, 2000, 1520), 13920, 12730, True)
    assert conclusion(pays) == (
        "graphs+dbo@64 against graphs@64: DBO pays: it removed 5.09 ms of exposed comm a step and added 1.83 ms of "
        "compute and 2.19 ms of idle (net -1.07 ms a step in the mean period; measured -1.19 ms, -8.5% in the median)"
    )
    costs = _pair(_parts(1390, 5900, 1000, 40), _parts(3800, 3160, 2000, 940), 8330, 9920, True)
    assert conclusion(costs) == (
        "graphs+dbo@64 against graphs@64: DBO does not pay: its cost (+4.31 ms a step: compute +2.41, idle +1.90) "
        "exceeds the exposed comm it removes (2.74 ms); it would pay where the exposed comm it removes (the round trips' "
        "exposed time, which grows with the batch) exceeds its cost (net +1.57 ms a step in the mean period; measured "
        "+1.59 ms, +19.1% in the median)"
    )
    noise = _pair(_parts(1000, 5000, 1000, 0), _parts(3000, 3000, 1000, 0), 7000, 7010, False)
    assert "DBO's change is within noise (net +0.00 ms a step in the mean period; measured +0.01 ms, +0.1% in the median)" in (
        conclusion(noise) or ""
    )
    few = _pair(_parts(1000, 5000, 1000, 0), _parts(3000, 3000, 1000, 0), 7000, 7010, None)
    assert "too few steps to tell whether DBO pays" in (conclusion(few) or "")
    assert "token" not in " ".join(conclusion(p) or "" for p in (pays, costs, noise, few))


def test_a_manifest_load_that_is_no_count_is_not_declared(loads):
    """A load's values from the manifest are counts or nothing: text, floats, booleans and negative
    numbers are no declared load (the trace's decode counts then decide), and nothing of them shows."""
    folder = loads["g16"].parent / "g-hostile"
    shutil.copytree(OFF, folder)
    path = folder / "manifest.json"
    m = json.loads(path.read_text())
    m["load"] = {"concurrency": "\x1b[31m32", "input_len": 12.5, "output_len": True}
    path.write_text(json.dumps(m))
    out = json.loads(run_cli("compare", "--json", str(folder), str(loads["d16"])).stdout)
    load = next(a for a in out["arms"] if a["label"] == "g-hostile")["ran_with"]["load"]
    assert load == {"concurrency": None, "input_len": None, "output_len": None, "decode_requests": 16.0}
    assert {p["on"]: p["off"] for p in out["pairs"]} == {"d16": "g-hostile"}
    text = run_cli("compare", str(folder), str(loads["d16"])).stdout
    assert_no_raw_controls(text)
