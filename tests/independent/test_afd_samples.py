"""The AFD plugin's recordings (DeepSeek-V2-Lite's shape, 27 layers, both roles on one H200):
round trips per step within 10% of the kernel count's truth (27 without DBO, 54 with), the
microbatched flag as the command line asked, the hidden share within 0.03 of the independent
reference (tests/references/round_trips_reference.py, a plain walk over the JSON). The samples are samples/afd-*
(DBO_TRACE_AFD_SAMPLES names another folder of such bundles); without any, the tests are skipped."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import SAMPLES
from round_trips_reference import hidden_share, per_step, round_trips

from dbo_trace.analysis.compare.arms import microbatched
from dbo_trace.analysis.model import Options
from dbo_trace.app.pipeline import analyze_paths

FOLDER = Path(os.environ.get("DBO_TRACE_AFD_SAMPLES", SAMPLES))
BUNDLES = sorted(p for p in FOLDER.glob("afd-*") if (p / "manifest.json").is_file())
LAYERS = 27


def _dbo(bundle: Path) -> bool:
    return "--enable-dbo" in json.loads((bundle / "manifest.json").read_text())["command"]


@pytest.fixture(scope="module", params=BUNDLES or [None], ids=[p.name for p in BUNDLES] or ["none"])
def recorded(request):
    if request.param is None:
        pytest.skip("no AFD recordings (samples/afd-*)")
    bundle = request.param
    report = analyze_paths([bundle], Options())
    return bundle, report, next(r for r in report.ranks if r.role == "attention")


def test_round_trips_per_step_and_microbatched(recorded):
    bundle, report, attention = recorded
    truth = 2 * LAYERS if _dbo(bundle) else LAYERS
    assert attention.afd is not None
    assert abs(attention.afd.per_step - truth) <= 0.1 * truth
    assert report.round_trips is not None and abs(report.round_trips.per_step - truth) <= 0.1 * truth
    assert microbatched(report) is _dbo(bundle)


def test_hidden_share_against_the_independent_reference(recorded):
    bundle, report, attention = recorded
    (trace,) = [bundle / t for t in json.loads((bundle / "manifest.json").read_text())["roles"]["attention"]["traces"]]
    ref = round_trips(trace)
    assert abs(per_step(ref) - attention.afd.per_step) <= 0.1 * attention.afd.per_step
    assert abs(hidden_share(ref) - attention.afd.hidden_share) <= 0.03
    if not _dbo(bundle):
        assert attention.afd.hidden_share == 0.0
