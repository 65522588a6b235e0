"""The glossary (docs/glossary.md) names every column the report's tables show, the Markdown report
links it, and every table whose column names are abbreviated has a one-line key under it, in the
terminal (at 80 and 120 columns) and in the Markdown; on a real recording (samples/overlap)."""

import re

import pytest
from conftest import ROOT, SAMPLES, run_cli

from dbo_trace.render import format as f
from dbo_trace.render import terminal as t
from dbo_trace.render.live import HEADER as TOP_HEADER
from dbo_trace.render.sweep import DBO_COLUMNS, LOAD_COLUMNS

GLOSSARY = (ROOT / "docs" / "glossary.md").read_text()
HEADERS = [
    [c.header for c in t.RANK_COLUMNS],
    [c.header for c in t.STEP_COLUMNS],
    f.PHASE_HEADER, f.OPERATION_HEADER, f.LAYER_OPS_HEADER, f.LAYER_HEADER, f.KERNEL_HEADER, f.CPU_RANGE_HEADER,
    f.SPREAD_HEADER, f.STACK_HEADER, f.ROUND_TRIP_HEADER, f.RANK_HEADER, TOP_HEADER,
    [c.header for c in LOAD_COLUMNS], [c.header for c in DBO_COLUMNS],
]  # fmt: skip


def test_every_column_is_in_the_glossary():
    named = set(re.findall(r"`([^`]+)`", GLOSSARY))
    missing = sorted({h for header in HEADERS for h in header if h not in named})
    assert not missing, missing


def test_every_key_explains_only_columns_the_glossary_has():
    named = set(re.findall(r"`([^`]+)`", GLOSSARY))
    assert set(f.COLUMN_KEYS) <= named
    assert all(set(keys) <= named for keys in f.KEYS_BY_TABLE.values())


def _tables(text):
    """(header line, the line after the table's rows and its notes) of each terminal table."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        if re.fullmatch(r" ─+", line):
            j = i + 1
            while j < len(lines) and lines[j].strip() and not lines[j].startswith("  key: "):
                j += 1
            out.append((lines[i - 1], lines[j] if j < len(lines) else ""))
    return out


@pytest.mark.parametrize("width", ["80", "120"])
def test_a_key_sits_under_every_abbreviated_terminal_table(width, monkeypatch):
    monkeypatch.setenv("COLUMNS", width)
    text = run_cli("report", str(SAMPLES / "overlap")).stdout
    tables = _tables(text)
    assert len(tables) >= 8
    for header, after in tables:
        if any(f" {h} " in f" {header} " for h in ("busy", "host", "op", "p90", "of GPU time", "of host idle", "ratio")):
            assert after.startswith("  key: "), (header, after)
    assert all(len(line) <= int(width) for line in text.splitlines())


def test_the_markdown_names_the_glossary_and_keys_its_abbreviated_tables():
    """The glossary is named, not linked: a relative link in a pull request's comment resolves against
    the project under review, where no docs/glossary.md is."""
    md = run_cli("report", "--markdown", str(SAMPLES / "overlap")).stdout
    assert "`docs/glossary.md` in dbo-trace's repository" in md and "](docs/glossary.md)" not in md
    lines = md.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|---"):
            header = [c.strip() for c in lines[i - 1].strip("|").split("|")]
            end = next(j for j in range(i, len(lines)) if not lines[j].startswith("|"))
            key = f.legend(header, None)
            if key is not None and header[0] not in ("rank", "CPU range", "layer"):  # their own keys differ in wording
                assert lines[end + 1] == f"<sub>{key}</sub>", (header, lines[end : end + 2])
            if any(h in header for h in ("p90", "of GPU time", "median exposed")):
                assert lines[end + 1].startswith("<sub>key: "), header
