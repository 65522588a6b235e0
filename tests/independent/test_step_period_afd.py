"""The step time is the step's period on the AFD plugin's graphs+DBO decode recorded on the H200
(samples/afd-graphs-dbo): within 5% of the median start-to-start period of vLLM's execute_* ranges,
counted by scripts/afd_truth.py (plain Python, no dbo-trace code)."""

import importlib.util
import json

import pytest
from conftest import ROOT, SAMPLES, report_json

BUNDLE = SAMPLES / "afd-graphs-dbo"


def _truth():
    spec = importlib.util.spec_from_file_location("afd_truth", ROOT / "scripts" / "afd_truth.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    manifest = json.loads((BUNDLE / "manifest.json").read_text())
    trace = (manifest.get("roles") or {}).get("attention", {}).get("traces") or manifest.get("traces")
    return mod.trace_truth(BUNDLE / trace[0])


@pytest.mark.skipif(not BUNDLE.exists(), reason="samples/afd-graphs-dbo is not in this checkout")
def test_the_step_time_is_the_true_period_on_the_afd_graphs_dbo_arm():
    truth = _truth()
    doc = report_json(str(BUNDLE))
    rank = doc["ranks"][0]
    assert len(rank["steps"]) == truth["steps"]
    period = rank["phases"]["decode"]["median_step_us"]
    assert period == pytest.approx(truth["median_period_us"], rel=0.05)
    steps = sorted(rank["steps"], key=lambda s: s["start_us"])
    for a, b in zip(steps, steps[1:]):
        assert a["step_us"] == pytest.approx(b["start_us"] - a["start_us"], abs=0.01)
