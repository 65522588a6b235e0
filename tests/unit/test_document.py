"""The typed report document (render/document/): what `--json` writes decodes back into the same
tree (so an archive's report reads back whole), and the document's fixed vocabularies agree with
the analyses that produce them."""

import typing
from pathlib import Path

import msgspec
import pytest
from conftest import SAMPLES

from dbo_trace.analysis.overlap.exposure import REASONS
from dbo_trace.render.words.exposure import REASON_SHORT
from dbo_trace.analysis.host.host_time import CAUSES
from dbo_trace.analysis.model import Options
from dbo_trace.app.pipeline import analyze_paths
from dbo_trace.render import document
from dbo_trace.render.document import ReportDocument
from dbo_trace.render.json_out import json_text

# the report documents among the goldens (a load sweep's summary is its own schema: tests/unit/test_sweep_read.py)
GOLDEN_JSON = sorted(p for p in (Path(__file__).parent.parent / "golden").glob("*.json") if '"schema": "dbo-trace-report"' in p.read_text())


@pytest.fixture(scope="module")
def hostbound():
    return document.build_document(analyze_paths([SAMPLES / "hostbound"], Options()))


# `report --json samples/two-gpu-overlap` of schema version 3 (before its attribution block lost
# two keys): what an archive of that version holds.
VERSION_3 = Path(__file__).parent.parent / "data" / "report-v3-two-gpu-overlap.json"


@pytest.mark.parametrize("path", GOLDEN_JSON, ids=lambda p: p.stem)
def test_a_written_document_decodes_and_encodes_to_the_same_bytes(path):
    """A document this version writes reads back whole: decoded (every type checked) and encoded, the same bytes."""
    data = path.read_bytes()
    doc = msgspec.json.decode(data, type=ReportDocument)  # every type checked
    assert json_text(doc).encode() == data


def test_an_older_archive_is_shown_as_the_document_it_holds(tmp_path):
    """A version 3 document in an archive: `report --json ARCHIVE` is the document it holds, byte for
    byte as stored (checked, not re-encoded: a later version's keys it lacks are not written as null),
    and its text reads (what it lacks is not measured)."""
    from conftest import run_cli

    from dbo_trace.app.review_archive import archive_bytes

    data = VERSION_3.read_bytes()
    archive = tmp_path / "v3.tar.gz"
    archive.write_bytes(archive_bytes({"report.json": data}))
    shown = run_cli("report", "--json", str(archive))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.encode() == data
    assert run_cli("report", str(archive)).returncode == 0


def test_the_fixed_vocabularies_are_the_analyses():
    assert set(typing.get_args(document.Reason)) == set(REASON_SHORT)
    reasons = [name.removesuffix("_us") for name in document.ExposedCommReasons.__struct_fields__[1:]]
    assert reasons == list(REASONS)  # the exposure block's keys, in the order the analysis adds them


def test_the_verdict_vocabularies_are_the_analyses():
    from dbo_trace.analysis.verdict import reasons as verdict
    from dbo_trace.analysis.verdict.decision import LABELS, Label
    from dbo_trace.analysis.verdict.reasons import QUALIFIERS

    assert document.Label is Label and tuple(label.value for label in document.Label) == LABELS
    assert typing.get_args(document.QualifierKey) == QUALIFIERS
    classes = [c for c in vars(verdict).values() if isinstance(c, type)]
    next_kinds = typing.get_args(document.NextStepKind) + typing.get_args(document.RetiredKind)
    for base, words in ((verdict.Reason, typing.get_args(document.ReasonKind)), (verdict.NextStep, next_kinds)):
        kinds = [c.kind for c in classes if issubclass(c, base) and c is not base]
        kinds += [k for k in document.RETIRED_KINDS if base is verdict.NextStep]  # an older archive's
        assert sorted(words) == sorted(kinds) and len(set(kinds)) == len(kinds)


def test_the_host_causes_are_the_analysis_causes(hostbound):
    d = hostbound
    blocks = [d.host_causes, *(r.host_causes for r in d.ranks)]
    assert any(blocks)
    for block in blocks:
        if block is not None:
            assert list(block.causes) == list(CAUSES)


def test_every_figure_is_declared_once_and_listed(hostbound):
    """Each figure block lists its declared figures in field order, and a field that is no figure
    (a rank's steps by graph kind) is not listed; a rank's host.bound is its verdict's."""
    d = hostbound
    names = [name for name, _ in document.figure_rows(d)]
    assert names[:2] == ["gpu.utilization", "gpu.busy_us"] and "host.bound" in names
    assert not any(n.startswith("graphs.steps_") for n in names)
    assert len(names) == len(set(names)) == 29
    rank = d.ranks[0]
    assert rank.verdict.label == "host-bound" and dict(document.figure_rows(rank))["host.bound"] is True
    assert d.host.bound is True
