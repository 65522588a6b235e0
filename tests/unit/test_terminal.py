"""The terminal outputs fit the terminal: at 80 columns and up (and piped, where $COLUMNS or 80
columns rule) every line fits, no line ends in a space, no cell is cut short, and the headline figures
of the JSON report appear whole. The figures are formatted here from the documented display formats
(docs: milliseconds to 2 places, percentages whole), not with the package's formatters."""

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT, SAMPLES, RUN_SAMPLES

from dbo_trace.analysis.model import Options
from dbo_trace.app.pipeline import analyze_paths
from dbo_trace.render import RENDERERS, RenderOptions

SAMPLE_DIRS = RUN_SAMPLES
CHECKED = ["overlap", "vllm-graphs-decode", "two-gpu-overlap", "graph", "late"]
WIDTHS = [80, 100, 120]
NUMBER = re.compile(r"(?<![A-Za-z_])\d+(?:\.\d+)?")  # a figure, not the digits of a (cut) kernel name


@pytest.fixture(scope="module")
def reports():
    return {s: analyze_paths([SAMPLES / s], Options()) for s in CHECKED}


def ms(us):
    return f"{us / 1000:.2f} ms"


def pct(x):
    return f"{100 * x:.0f}%"


def headline_figures(d: dict) -> list[str]:
    """What a reader looks for first: each rank's busy, hidden and exposed figures and verdict, the
    DBO arithmetic's step and ratio, the shown steps' times."""
    out = []
    for r in d["ranks"]:
        out += [pct(r["gpu"]["utilization"]), r["verdict"]["label"], ms(r["comm"]["exposed_us"])]
        if r["comm"]["hidden_fraction"] is not None:
            out.append(pct(r["comm"]["hidden_fraction"]))
    rt = d["round_trips"]
    if rt:
        out += [ms(rt["step_us"]), f"{rt['ratio']:.2f}".rstrip("0").rstrip(".")]
    out += [ms(s["step_us"]) for s in d["steps"][:20]]
    return out


def check_fits(text: str, width: int) -> None:
    lines = text.splitlines()
    assert lines, "no output"
    for line in lines:
        assert len(line) <= width, f"{len(line)} columns: {line!r}"
        assert line == line.rstrip(), f"trailing space: {line!r}"
    assert "…" not in text


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("sample", CHECKED)
def test_the_report_fits_the_width_with_every_headline_figure_whole(reports, sample, width):
    report = reports[sample]
    text = RENDERERS["terminal"].render(report, RenderOptions(width=width))
    check_fits(text, width)
    assert text.startswith("verdict: ")
    d = json.loads(RENDERERS["json"].render(report))
    for figure in headline_figures(d):
        assert figure in text, f"{figure!r} missing (or cut) at {width} columns"
    # A number cut short would be a number the unconstrained layout never prints.
    wide = RENDERERS["terminal"].render(report, RenderOptions(width=1000))
    shown = re.sub(r"\(not shown at \d+ columns", "", text)
    assert set(NUMBER.findall(shown)) <= set(NUMBER.findall(wide))


@pytest.mark.parametrize("sample", SAMPLE_DIRS)
def test_every_sample_fits_80_columns(sample):
    text = RENDERERS["terminal"].render(analyze_paths([SAMPLES / sample], Options()), RenderOptions(width=80))
    check_fits(text, 80)


def test_a_dropped_column_is_named_and_a_multi_rank_step_table_keeps_its_ranks(reports):
    text = RENDERERS["terminal"].render(reports["two-gpu-overlap"], RenderOptions(width=80))
    steps = text[text.index("per step") :]
    assert re.search(r"^ rank  #  step", steps, re.M), "two ranks: the per-step table says which rank each row is"
    assert "(not shown at 80 columns: launch" in text
    wide = RENDERERS["terminal"].render(reports["two-gpu-overlap"], RenderOptions(width=200))
    assert "not shown" not in wide


def cli(args: list[str], columns: str | None) -> str:
    """The console script as a user runs it, stdout a pipe (no terminal)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if columns is not None:
        env["COLUMNS"] = columns
    proc = subprocess.run([sys.executable, "-m", "dbo_trace.cli", *args], capture_output=True, text=True, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


COMPARED = ["samples/serial", "samples/overlap", "samples/graph"]


@pytest.mark.parametrize("columns", [None, "80", "120"])
def test_piped_report_and_compare_fit_columns_or_80(columns):
    width = int(columns or 80)
    check_fits(cli(["report", "samples/two-gpu-overlap"], columns), width)
    text = cli(["compare", *COMPARED], columns)
    check_fits(text, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_compare_keeps_its_headline_figures_at_every_width(width):
    text = cli(["compare", *COMPARED], str(width))
    check_fits(text, width)
    d = json.loads(cli(["compare", "--json", *COMPARED], None))
    for arm in d["arms"]:
        step = f"{arm['step_median_us'] / 1000:.2f} ("  # the median step period, then (p90, max)
        change = "baseline" if arm["change"] is None else f"{100 * arm['change']:+.1f}%"
        if arm["call"] == "too few steps":
            change = "too few steps"  # no change claimed
        row = next(line for line in text.splitlines() if line.split()[:1] == [arm["label"]])
        assert step in row and change in row and arm["verdict"] in row, (row, step, change)


def test_a_table_too_wide_for_any_column_set_stacks_its_rows_whole():
    from dbo_trace.render.layout import NEVER, Column, table

    columns = [Column("arm", right=False), Column("step time"), Column("launch", keep=1), Column("verdict", right=False)]
    rows = [
        ["graphs-dbo", "27.16 ms ± 1.36 ms", "11.3 us", "not-overlapped"],
        ["eager", "45.06 ms ± 0.47 ms", "9.5 us", "host-bound"],
    ]
    assert all(c.keep == NEVER for c in columns if c.header != "launch")
    at = {w: table("t", columns, rows, w) for w in (30, 44, 50, 80)}
    for w, lines in at.items():
        assert all(len(line) <= w and line == line.rstrip() for line in lines), (w, lines)
        text = "\n".join(lines)
        for cell in (c for r in rows for c in r[:2] + r[3:]):
            assert cell in text, (w, cell)  # every kept cell whole, on one line
    assert any("not shown at 50 columns: launch" in line for line in at[50])
    assert not any("not shown" in line for line in at[80])
    # Stacked, each `header value` pair stays whole on a line (at 30 columns this one is wider than a line).
    assert any("step time 27.16 ms ± 1.36 ms" in line for line in at[44]) and any("launch 9.5 us" in x for x in at[44])
