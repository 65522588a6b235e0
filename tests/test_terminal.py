"""The terminal summary fits 100 columns on every sample: no cell cut short, no line past the edge."""

import pytest
from conftest import SAMPLES

from dbo_trace.analysis.report import Options
from dbo_trace.pipeline import analyze_paths
from dbo_trace.render import RENDERERS, RenderOptions

SAMPLE_DIRS = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())


@pytest.mark.parametrize("sample", SAMPLE_DIRS)
def test_the_summary_fits_100_columns_without_cutting_cells(sample):
    text = RENDERERS["terminal"].render(analyze_paths([SAMPLES / sample], Options()), RenderOptions(width=100))
    assert "…" not in text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 100
    assert text.startswith("verdict: ")
