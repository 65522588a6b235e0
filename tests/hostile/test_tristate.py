"""A figure the JSON holds as null is unknown: no renderer may print it as a negative. The flags are
the keys that hold true or false in some sample's document; for every null such a key holds (and
for each flag made null by hand), each renderer's output must differ from its output with `false`
wherever `true` and `false` print differently (the flag is shown)."""

import copy
import re

import msgspec
import pytest
from conftest import SAMPLES, report_json, run_cli

from dbo_trace.render import RenderOptions
from dbo_trace.render.document import ReportDocument
from dbo_trace.render.markdown import MarkdownRenderer
from dbo_trace.render.terminal import TerminalRenderer

RENDERERS = {"terminal": TerminalRenderer(), "markdown": MarkdownRenderer()}


def leaves(node, path=()):
    """(path, value) of a document's leaves; of each list its first element only (they repeat one shape)."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from leaves(v, (*path, k))
    elif isinstance(node, list):
        if node:
            yield from leaves(node[0], (*path, 0))
    else:
        yield path, node


SAMPLE_NAMES = ["graph", "vllm-graphs-decode", "overlap", "hostbound", "late"]


@pytest.fixture(scope="module")
def documents():
    return {name: report_json(str(SAMPLES / name)) for name in SAMPLE_NAMES}


@pytest.fixture(scope="module")
def flags(documents):
    return {path[-1] for d in documents.values() for path, v in leaves(d) if isinstance(v, bool)}


def with_value(doc, path, value):
    out = copy.deepcopy(doc)
    node = out
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return out


def test_the_flags_include_the_criterion(flags):
    assert {"criterion_met", "bound", "replayed", "microbatched"} <= flags


@pytest.mark.parametrize("renderer", list(RENDERERS))
def test_no_null_flag_is_printed_as_a_negative(documents, flags, renderer):
    r = RENDERERS[renderer]
    options = RenderOptions(width=120)
    found = [
        (name, path, v)
        for name in SAMPLE_NAMES
        for path, v in leaves(documents[name])
        if path[-1] in flags and (v is None or isinstance(v, bool))
    ]
    shown_as_flags = 0
    for name, path, value in found:
        doc = with_value(documents[name], path, None)  # the null the document holds, or one made by hand
        try:
            null = msgspec.convert(doc, ReportDocument)
        except msgspec.ValidationError:
            continue  # the document's type holds no null here (a flag always known): nothing to show as unknown
        try:
            yes = r.render_document(msgspec.convert(with_value(doc, path, True), ReportDocument), options)
            no = r.render_document(msgspec.convert(with_value(doc, path, False), ReportDocument), options)
        except msgspec.ValidationError:
            continue  # a slot that holds an object or a string: not a flag
        if yes == no:
            continue  # not shown as a yes/no
        shown_as_flags += 1
        assert r.render_document(null, options) != no, f"{name}: {'.'.join(map(str, path))} null prints as false (was {value})"
    assert shown_as_flags  # the test met at least one flag that is shown (criterion_met)


def test_unknown_criterion_reads_unknown_everywhere(tmp_path):
    graph = SAMPLES / "graph"
    assert report_json(str(graph))["round_trips"]["criterion_met"] is None  # full-graph DBO: no microbatch per kernel
    text = run_cli("report", str(graph)).stdout
    markdown = run_cli("report", "--markdown", str(graph)).stdout
    page = tmp_path / "graph.html"
    assert run_cli("report", str(graph), "--html", str(page)).returncode == 0
    for out in (text, markdown, page.read_text()):
        assert "missed" not in out
        assert "unknown" in out
    # and a known one still reads as itself
    assert report_json(str(SAMPLES / "overlap"))["round_trips"]["criterion_met"] is True
    assert re.search(r" met$", run_cli("report", str(SAMPLES / "overlap")).stdout, re.M)  # the criterion, right-aligned
