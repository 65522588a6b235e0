"""Schema version 10's launch figures (a rank's clocks.lag_median_us, launch_delay.last_us and
window_us) against tests/references/launch_lags_truth.py, written from the docs alone, on real
traces: vLLM recordings of this project's and other projects' traces, graph replays among them (a
replayed kernel's lag is from its one graph launch: apart, as the docs say)."""

import pytest
from conftest import ROOT, SAMPLES, report_json
from launch_lags_truth import analyse, load

PUBLIC = ROOT / "tests" / "data" / "public"
TRACES = [
    SAMPLES / "hostbound",
    SAMPLES / "afd-graphs-dbo",  # CUDA graphs replayed: the median with them would be 773 us more
    PUBLIC / "kineto-2021-v100.json.gz",
    PUBLIC / "hta-rocm-mi250.json.gz",
    PUBLIC / "tracelens-vllm-decode-full-rocm.json.gz",  # HIP graphs: 4190 us apart with them
    PUBLIC / "tracelens-sglang-decode-rocm.json.gz",
]


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_the_launch_figures_are_the_references(path):
    files = sorted((path / "traces").glob("*.json.gz")) if path.is_dir() else [path]
    (trace,) = files
    truth = analyse(load(str(trace)))
    (rank,) = report_json(str(path))["ranks"]
    assert rank["clocks"]["shift_us"] == 0  # the reference takes the GPU's clock as read
    assert rank["clocks"]["lag_median_us"] == pytest.approx(truth["lag_median_nograph"], abs=0.01)
    assert rank["launch_delay"]["last_us"] == pytest.approx(truth["last_delay_nograph_bystart"], abs=0.01)
    assert rank["launch_delay"]["window_us"] == pytest.approx(truth["window"], abs=0.01)
