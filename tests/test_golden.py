"""Golden outputs: every text renderer in the registry on every sample, byte for byte. A change to
any output shows here and is made deliberately:

    DBO_TRACE_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py   # then review `git diff tests/golden`
"""

import os
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLES

from dbo_trace.analysis.report import Options
from dbo_trace.pipeline import analyze_paths
from dbo_trace.render import RENDERERS, RenderOptions

GOLDEN = ROOT / "tests" / "golden"
SAMPLE_DIRS = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())
TEXT = sorted(name for name, r in RENDERERS.items() if not r.binary and name != "html")  # the page embeds the same document
UPDATE = bool(os.environ.get("DBO_TRACE_UPDATE_GOLDEN"))


@pytest.fixture(scope="module")
def reports():
    here = os.getcwd()
    os.chdir(ROOT)  # relative input paths: the documents name their sources, and must not name this checkout
    try:
        return {s: analyze_paths([Path("samples") / s], Options()) for s in SAMPLE_DIRS}
    finally:
        os.chdir(here)


@pytest.mark.parametrize("renderer", TEXT)
@pytest.mark.parametrize("sample", SAMPLE_DIRS)
def test_output_is_the_golden_one(reports, sample, renderer):
    r = RENDERERS[renderer]
    got = r.render(reports[sample], RenderOptions(width=100))
    path = GOLDEN / f"{sample}{r.suffixes[0]}"
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(got)
    assert path.exists(), f"no golden output {path}: run with DBO_TRACE_UPDATE_GOLDEN=1 and review it"
    assert got == path.read_text(), f"{path} differs: if the change is meant, update it (see this module's docstring)"


def test_a_new_figure_is_one_line_and_every_listing_shows_it(reports, monkeypatch):
    """issue 14's rule: a figure declared once in document.WINDOW_FIGURES reaches the JSON (every
    window: run, rank, step) and the every-figure tables of the Markdown and HTML reports."""
    import json

    from dbo_trace.render import document

    added = document.Figure("host", "p99_launch_us", lambda m: m.launch_us * 0.5 + 1.0)
    monkeypatch.setattr(document, "WINDOW_FIGURES", (*document.WINDOW_FIGURES, added))
    report = reports["overlap"]
    d = json.loads(RENDERERS["json"].render(report))
    rank = report.ranks[0]
    for window, m in ((d, report.total), (d["ranks"][0], rank.total), (d["steps"][0], rank.steps[0].metrics)):
        assert window["host"]["p99_launch_us"] == round(m.launch_us * 0.5 + 1.0, 3)
    assert f"| host.p99_launch_us | {d['ranks'][0]['host']['p99_launch_us']} |" in RENDERERS["markdown"].render(report)
    assert "<td>host.p99_launch_us</td>" in RENDERERS["html"].render(report)
