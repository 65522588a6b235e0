"""--markdown is ready to paste into a GitHub comment: rendered by a real Markdown parser
(markdown-it-py, with GitHub's table extension) its tables are tables with the columns they were
written with, its <details> blocks are balanced and hold their tables, and a picture is never a link
to a local file (a broken image in a comment): the output says where the PNG is and to attach it."""

import re

import pytest
from conftest import SAMPLES, run_cli
from markdown_it import MarkdownIt

CHECKED = ["overlap", "two-gpu-overlap", "vllm-graphs-decode", "late"]


def parse(text: str):
    return MarkdownIt("commonmark").enable("table").parse(text)


def tables(tokens) -> list[list[int]]:
    """Each table as the cell count of each of its rows (header row first)."""
    found, rows = [], None
    for t in tokens:
        if t.type == "table_open":
            rows = []
        elif t.type == "tr_open":
            rows.append(0)
        elif t.type in ("th_open", "td_open"):
            rows[-1] += 1
        elif t.type == "table_close":
            found.append(rows)
    return found


def written_tables(text: str) -> list[int]:
    """The column count of each table as written: its header line's cells, above a |---| line."""
    lines = text.splitlines()
    return [lines[i - 1].count(" | ") + 1 for i, line in enumerate(lines) if re.fullmatch(r"(\|-+:?)+\|", line)]


@pytest.fixture(scope="module", params=CHECKED)
def markdown(request, tmp_path_factory):
    here = tmp_path_factory.mktemp(request.param)
    proc = run_cli("report", str(SAMPLES / request.param), "--markdown", "--timeline", "step.png", cwd=here)
    assert proc.returncode == 0, proc.stderr
    return here, proc.stdout, proc.stderr


def test_every_table_parses_as_a_table_with_its_columns(markdown):
    _, text, _ = markdown
    parsed = tables(parse(text))
    assert [rows[0] for rows in parsed] == written_tables(text)
    assert len(parsed) >= 3  # ranks, per step, every figure at least
    for rows in parsed:
        assert len(set(rows)) == 1, f"a row with another number of cells than its header: {rows}"
        assert len(rows) >= 2


def test_details_blocks_are_balanced_and_hold_their_tables(markdown):
    _, text, _ = markdown
    tokens = parse(text)
    depth, inside = 0, 0
    for t in tokens:
        if t.type == "html_block":
            depth += t.content.count("<details>") - t.content.count("</details>")
            assert depth in (0, 1), f"<details> nested or closed twice: {t.content!r}"
            assert t.content.count("<summary>") == t.content.count("</summary>")
        elif t.type == "table_open" and depth:
            inside += 1
    assert depth == 0
    assert inside >= 2  # per step and every figure; a table GitHub would show as raw pipes counts nothing
    assert "<details><summary>Per step</summary>" in text


def test_the_picture_is_named_with_how_to_attach_it_never_linked(markdown):
    here, text, stderr = markdown
    assert (here / "step.png").is_file()
    html = MarkdownIt("commonmark").enable("table").render(text)
    assert "<img" not in html and "![" not in text
    for t in parse(text):
        for child in t.children or []:
            assert child.type != "image", f"an image link to {child.attrs}"
    note = next(line for line in text.splitlines() if "step.png" in line)
    assert "attach" in note and "drag" in note
    assert "attach it" in stderr


def test_comm_operations_are_folded(markdown):
    _, text, _ = markdown
    if "comm operations" in text:
        assert re.search(r"<details><summary>Rank \d+ comm operations", text)


def test_the_phase_tables_top_host_cause_is_inline_code_not_escaped_backticks():
    """Before: the cause's name, already inline code, was escaped again by the table writer, so a
    comment showed \\`vllm::moe_forward (CPU op)\\` 32% with its backslashes. Parsed, the cell is
    now a code span holding the name, then the share."""
    text = run_cli("report", "--markdown", str(SAMPLES / "vllm-eager-decode")).stdout
    cells = [t for t in parse(text) if t.type == "inline" and "moe_forward" in t.content and t.content.endswith("%") and t.content.startswith("`")]
    assert cells, text
    children = cells[0].children
    assert [c.type for c in children][:2] == ["code_inline", "text"], [(c.type, c.content) for c in children]
    assert children[0].content == "vllm::moe_forward (CPU op)" and children[1].content.strip().endswith("%")
