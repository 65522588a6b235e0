"""Golden outputs: every text renderer in the registry on every sample, byte for byte. A change to
any output shows here and is made deliberately:

    DBO_TRACE_UPDATE_GOLDEN=1 python -m pytest tests/golden/test_golden.py   # then review `git diff tests/golden`
"""

import os
from pathlib import Path

import pytest
from conftest import ROOT, RUN_SAMPLES, SAMPLES, SWEEP_SAMPLES, run_cli

from dbo_trace.analysis.model import Options
from dbo_trace.app.pipeline import analyze_paths
from dbo_trace.render import RENDERERS, RenderOptions

GOLDEN = ROOT / "tests" / "golden"
SAMPLE_DIRS = RUN_SAMPLES
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


def test_a_new_figure_is_one_field_and_every_listing_shows_it(reports, monkeypatch):
    """issue 14's and 28's rule: a figure is one field of one block struct of render/document/, its
    source and rounding declared on it (document.figure); it then reaches the JSON (every window:
    run, rank, step) and the every-figure tables of the Markdown and HTML reports, none of which
    names it."""
    import json
    from typing import Annotated

    import msgspec

    from dbo_trace.render import document
    from dbo_trace.render.document import build, steps

    def p99(m):
        return m.launch_us * 0.5 + 1.0 / 3

    added = ("p99_launch_us", Annotated[float | None, document.figure(p99, 4)])
    host = msgspec.defstruct("Host", [added], bases=(document.Host,))
    for module in (build, steps):  # where a run's, a rank's and a step's blocks are built
        monkeypatch.setattr(module, "Host", host)
    report = reports["overlap"]
    d = json.loads(RENDERERS["json"].render(report))
    rank = report.ranks[0]
    for window, m in ((d, report.total), (d["ranks"][0], rank.total), (d["steps"][0], rank.steps[0].metrics)):
        assert list(window["host"])[-1] == "p99_launch_us"  # after the block's other figures
        assert window["host"]["p99_launch_us"] == round(m.launch_us * 0.5 + 1.0 / 3, 4)
    value = d["ranks"][0]["host"]["p99_launch_us"]
    assert f"| host.p99_launch_us | {value} |" in RENDERERS["markdown"].render(report)
    assert f"<td>host.p99_launch_us</td><td>{value}</td>" in RENDERERS["html"].render(report)


@pytest.mark.parametrize("fmt, suffix", [("text", ".txt"), ("markdown", ".md"), ("json", ".json")])
@pytest.mark.parametrize("sample", SWEEP_SAMPLES)
def test_a_sweep_summary_is_the_golden_one(monkeypatch, sample, fmt, suffix):
    """A load sweep's folder (samples/afd-sweep) reads as its summary: every text format, byte for byte."""
    monkeypatch.setenv("COLUMNS", "100")
    proc = run_cli("report", "--format", fmt, str(Path("samples") / sample), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    path = GOLDEN / f"{sample}{suffix}"
    if UPDATE:
        path.write_text(proc.stdout)
    assert path.exists(), f"no golden output {path}: run with DBO_TRACE_UPDATE_GOLDEN=1 and review it"
    assert proc.stdout == path.read_text(), f"{path} differs: if the change is meant, update it (see this module's docstring)"
