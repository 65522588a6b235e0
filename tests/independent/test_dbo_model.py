"""DBO's effect from one arm (issue 59; docs/analysis.md, "DBO's effect from one arm (AFD)"): the model
predicts each load of the shipped sweep from calibration on the OTHER loads alone, against the change
measured from the raw traces by tests/references/independent_pipeline.py (start-to-start periods of
vLLM's step annotations, written by a helper who never read the code); and the command's behaviour:
its JSON, its calibration, its caveats and its refusals."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from functools import lru_cache

import pytest
from conftest import SAMPLES, run_cli
from independent_pipeline import analyse

from dbo_trace.analysis.afd.dbo_model import (
    FLOOR_POINTS,
    Calibration,
    CalibrationPair,
    Padding,
    prediction_of,
)
from dbo_trace.analysis.afd.attention_side import graph_padding
from dbo_trace.commands.calibration import default_calibration

LOADS = (16, 32, 64)


@lru_cache(maxsize=None)
def measured_change(load: int) -> float:
    """DBO's change at a load, from the raw traces: the median start-to-start period on against off."""
    periods = {
        arm: analyse(str(SAMPLES / f"afd-sweep/{arm}/c{load}"))["_details"]["period_us_start_to_start_only"]
        for arm in ("graphs", "graphs-dbo")
    }
    return periods["graphs-dbo"] / periods["graphs"] - 1.0


def _pair(calibration: Calibration, load: int) -> CalibrationPair:
    (found,) = [p for p in calibration.pairs if p.off.tokens == load]
    return found


@pytest.mark.parametrize("load", LOADS)
def test_each_load_is_predicted_from_the_others_within_5_points(load):
    """Leave-one-out: the sweep's other loads calibrate the model; this load's DBO-off arm predicts its
    DBO arm and the DBO arm its DBO-off arm. Each within 5 points of the measured change, the sign right
    where the change is beyond +-3%, and the interval never narrower than +-3 points."""
    calibration = default_calibration()
    assert len(calibration.pairs) == 3 and calibration.default
    others = Calibration(tuple(p for p in calibration.pairs if p.off.tokens != load), "the other loads")
    pair = _pair(calibration, load)
    measured = measured_change(load)
    for given in (pair.off, pair.on):
        w = prediction_of(given, others)
        assert abs(w.change - measured) <= 0.05, (given.label, w.change, measured)
        if abs(measured) > 0.03:
            assert (w.change > 0) == (measured > 0) or abs(w.change) <= 0.03
        assert w.high - w.change >= FLOOR_POINTS and w.change - w.low >= FLOOR_POINTS
        assert w.caveats.outside is None if load == 32 else w.caveats.outside is not None  # 16 and 64 extrapolate


def test_most_intervals_hold_the_measured_change():
    calibration = default_calibration()
    held = 0
    for load in LOADS:
        others = Calibration(tuple(p for p in calibration.pairs if p.off.tokens != load), "the other loads")
        pair = _pair(calibration, load)
        held += sum(w.low <= measured_change(load) <= w.high for w in (prediction_of(pair.off, others), prediction_of(pair.on, others)))
    assert held >= 4


def test_the_calibration_measures_what_the_trace_shows():
    """The shipped calibration's arms hold the pipeline's figures: their periods are the reference's."""
    for pair in default_calibration().pairs:
        for arm in (pair.off, pair.on):
            ref = analyse(str(SAMPLES / arm.label.removeprefix("samples/")))
            assert arm.period_us == pytest.approx(ref["_details"]["period_us_start_to_start_only"], rel=0.005)
            assert arm.attention_us == pytest.approx(ref["attention_us"], abs=0.5)
            assert arm.ffn_us == pytest.approx(ref["ffn_us"], abs=0.5)
            assert arm.dbo is ref["microbatched"] and arm.graphs


def test_another_gpu_and_padding_widen_the_interval_and_say_why():
    calibration = default_calibration()
    pair = _pair(calibration, 32)
    others = Calibration(tuple(p for p in calibration.pairs if p is not pair), "the other loads")
    plain = prediction_of(pair.off, others, gpu="NVIDIA H200")
    other_gpu = prediction_of(pair.off, others, gpu="NVIDIA H100 80GB HBM3")
    assert not plain.caveats and other_gpu.caveats.gpu == "NVIDIA H100 80GB HBM3"
    assert other_gpu.high - other_gpu.low > plain.high - plain.low
    pads = graph_padding(48.0, (1, 2, 4, 8, 16, 32, 64))
    assert pads == (Padding(False, 48, 64), Padding(True, 24, 32))
    padded = prediction_of(replace(pair.off, tokens=48.0), others, pads=pads)
    assert padded.caveats.pads == pads and padded.high - padded.change > padded.change - padded.low
    assert graph_padding(32.0, (1, 2, 4, 8, 16, 32, 64)) == ()
    assert graph_padding(32.0, None) == ()


def _json(*args: str) -> dict:
    done = run_cli("report", *args, "--json")
    assert done.returncode == 0, done.stderr
    found: dict = json.loads(done.stdout)
    return found


def test_report_what_if_dbo_on_of_the_off_arm_leaves_its_own_pair_out():
    d = _json(str(SAMPLES / "afd-sweep/graphs/c64"), "--what-if", "dbo=on")
    w = d["dbo_what_if"]
    assert w["given"] == "off" and set(w) >= {"period_ms", "change", "interval", "calibration", "caveats"}
    low, high = w["interval"]
    assert low < w["change"] < high and high - low >= 2 * FLOOR_POINTS - 1e-9
    assert "own pair left out" in w["calibration"] and "2 pairs" in w["calibration"]
    assert abs(w["change"] - measured_change(64)) <= 0.05 and w["change"] < 0  # DBO pays at 64 in flight
    assert w["measured_period_ms"] == pytest.approx(d["pipeline"]["period_us"] / 1000, abs=1e-3)


def test_report_what_if_dbo_off_of_a_dbo_arm_and_the_wrong_direction():
    w = _json(str(SAMPLES / "afd-sweep/graphs-dbo/c16"), "--what-if", "dbo=off")["dbo_what_if"]
    assert w["given"] == "on" and w["change"] > 0  # DBO costs at 16 in flight
    d = _json(str(SAMPLES / "afd-sweep/graphs-dbo/c16"), "--what-if", "dbo=on")
    assert "dbo_what_if" not in d and "--what-if dbo=off predicts" in d["dbo_what_if_not"]
    eager = _json(str(SAMPLES / "afd-eager"), "--what-if", "dbo=on")
    assert "other cudagraph mode" in eager["dbo_what_if_not"]


def test_calibrate_with_your_own_pair(tmp_path):
    """--calibrate takes bundles (or a sweep folder) and pairs them by compare's rule; one pair gives no
    leave-one-out, so the interval rests on a recording's noise alone."""
    off, on = tmp_path / "off", tmp_path / "on"
    shutil.copytree(SAMPLES / "afd-sweep/graphs/c32", off)
    shutil.copytree(SAMPLES / "afd-sweep/graphs-dbo/c32", on)
    w = _json(str(SAMPLES / "afd-sweep/graphs/c16"), "--what-if", "dbo=on", "--calibrate", str(off), "--calibrate", str(on))[
        "dbo_what_if"
    ]
    assert w["calibration"].startswith("calibrated on 1 recorded pair given: 1 pair")
    assert "each pair predicted" not in w["calibration"]
    assert any("outside the calibrated loads" in c for c in w["caveats"])


def test_calibrate_errors_are_one_line():
    alone = run_cli("report", str(SAMPLES / "afd-sweep/graphs/c16"), "--calibrate", str(SAMPLES / "afd-sweep/graphs/c32"))
    assert alone.returncode == 2 and "add --what-if dbo=on" in alone.stderr and "Traceback" not in alone.stderr
    only_off = run_cli(
        "report", str(SAMPLES / "afd-sweep/graphs/c16"), "--what-if", "dbo=on", "--calibrate", str(SAMPLES / "afd-sweep/graphs/c32")
    )
    assert only_off.returncode == 2 and "no AFD pair of DBO on and off" in only_off.stderr
    not_bundle = run_cli("report", str(SAMPLES / "afd-sweep/graphs/c16"), "--what-if", "dbo=on", "--calibrate", str(SAMPLES))
    assert not_bundle.returncode == 2 and "not a dbo-trace bundle or load sweep folder" in not_bundle.stderr


def test_compare_shows_each_arms_prediction_beside_the_measurement():
    done = run_cli("compare", str(SAMPLES / "afd-sweep/graphs/c32"), str(SAMPLES / "afd-sweep/graphs-dbo/c32"), "--label", "off",
                   "--label", "on", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    arms = {a["label"]: a for a in body["arms"] if a["phase"] == "all"}
    assert arms["off"]["dbo_what_if"]["given"] == "off" and arms["on"]["dbo_what_if"]["given"] == "on"
    (pair,) = [p for p in body["pairs"] if p["phase"] == "all"]
    assert pair["change"] == pytest.approx(measured_change(32), abs=0.002)
    text = run_cli("compare", str(SAMPLES / "afd-sweep/graphs/c32"), str(SAMPLES / "afd-sweep/graphs-dbo/c32"), "--label", "off",
                   "--label", "on").stdout  # fmt: skip
    assert "the one-arm model beside the measured" in " ".join(text.split())
