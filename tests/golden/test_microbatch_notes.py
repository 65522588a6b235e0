""""Microbatched" is one fact (issue 61, item 4): no output that gives per-microbatch figures also
says there were no microbatches. Read on every sample's golden outputs, which test_golden.py holds
to the real output byte for byte."""

import json
import re

import pytest
from conftest import RUN_SAMPLES, ROOT

GOLDEN = ROOT / "tests" / "golden"
# what only a microbatched arm prints: a split into microbatches, a figure per microbatch, the
# round trips' microbatches, a microbatch's lane
PER_MICROBATCH = re.compile(r"tokens per microbatch|per-microbatch|microbatches by kernel order|microbatch [01]\b")


@pytest.mark.parametrize("suffix", [".txt", ".md"])
@pytest.mark.parametrize("sample", RUN_SAMPLES)
def test_no_microbatches_note_only_without_microbatch_figures(sample, suffix):
    text = (GOLDEN / f"{sample}{suffix}").read_text()
    figures = PER_MICROBATCH.findall(text)
    if figures:
        assert "no microbatches" not in text, f"{sample}{suffix} gives {sorted(set(figures))} and says no microbatches"


def test_pair_ranks_name_where_their_microbatches_came_from():
    """The DBO pair: the attention's microbatches are its round trips' (a graph replay's kernels have
    no thread of their own), and the FFN serves them: no rank's source is "none"."""
    doc = json.loads((GOLDEN / "afd-pair-graphs-dbo.json").read_text())
    assert doc["microbatch_source"] != "none"
    assert [r["microbatch_source"] != "none" for r in doc["ranks"]] == [True, True]
    assert not any("no microbatches" in str(n) for r in doc["ranks"] for n in r["notes"])
