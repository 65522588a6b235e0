"""The shipped load sweep's text output (samples/afd-sweep, issue 61): what a reviewer pastes.

Each figure checked here is read back from the tool's own JSON or recomputed from the run's files
with the standard library; the text is checked for what it must show beside its call."""

from __future__ import annotations

import json
import re

import pytest
from conftest import ROOT, run_cli

SWEEP = "samples/afd-sweep"
INTERVAL = re.compile(r"([+-]\d+\.\d)%? \[([+-]\d+\.\d), ([+-]\d+\.\d)\]")


@pytest.fixture(scope="module")
def document() -> dict:
    proc = run_cli("report", "--json", SWEEP, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _change_rows(text: str) -> dict[str, str]:
    """The DBO change table's rows by load name (its first cell)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("DBO's change per load"))
    rule = next(i for i in range(start, len(lines)) if lines[i].lstrip().startswith("─"))
    rows = {}
    for line in lines[rule + 1 :]:
        if not line.startswith(" ") or line.startswith("  "):
            break
        rows[line.split()[0]] = line
    return rows


@pytest.mark.parametrize("columns", [None, "80"])
def test_at_80_columns_a_call_keeps_an_interval_that_excludes_0(monkeypatch, document, columns):
    """Piped (80 columns) or at 80: a row that says faster shows an interval wholly below 0, one that
    says slower an interval wholly above it: the column its call rests on is never the one dropped."""
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    proc = run_cli("report", SWEEP, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert max(len(line) for line in proc.stdout.splitlines()) <= 80
    rows = _change_rows(proc.stdout)
    points = {p["load"]: p for p in document["dbo"][0]["points"]}
    assert set(rows) == set(points) == {"c16", "c32", "c64"}
    for load, row in rows.items():
        shown = [(float(lo), float(hi)) for _, lo, hi in INTERVAL.findall(row)]
        if "DBO faster" in row:
            assert any(hi < 0 for _, hi in shown), row
        if "DBO slower" in row:
            assert any(lo > 0 for lo, _ in shown), row
        assert "DBO faster" in row or "DBO slower" in row, row
    # c64's call rests on its profiled step periods (its repeats' interval holds 0): that interval is shown
    p = points["c64"]["profiled"]
    assert points["c64"]["side_told_by"] == "profiled" and points["c64"]["change_high"] > 0
    assert f"[{100 * p['change_low']:+.1f}, {100 * p['change_high']:+.1f}]" in rows["c64"]
