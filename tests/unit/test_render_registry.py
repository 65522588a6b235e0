"""The renderer registry builds each renderer when first asked for (issue 55: start-up): its table
of names and suffixes must say what each class says of itself, and asking for one renderer must
not import the others' modules."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dbo_trace.render import _TABLE, RENDERERS, for_path

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", list(_TABLE))
def test_table_says_what_each_renderer_says(name: str) -> None:
    renderer = RENDERERS[name]
    assert renderer.name == name
    assert tuple(renderer.suffixes) == _TABLE[name][3]
    assert RENDERERS[name] is renderer  # built once
    for suffix in renderer.suffixes:
        assert for_path(Path(f"out{suffix.upper()}")) is renderer


def test_registry_reads_as_a_mapping() -> None:
    assert list(RENDERERS) == ["terminal", "json", "markdown", "html", "perfetto", "png", "svg"]
    assert len(RENDERERS) == 7 and "json" in RENDERERS and "pdf" not in RENDERERS
    assert for_path(Path("out.pdf")) is None
    with pytest.raises(KeyError):
        RENDERERS["pdf"]


def _imported_after(code: str) -> set[str]:
    # Without coverage's start-up variables: CI measures every child (.ci/run's --cov), and coverage
    # itself imports sqlite3 and patches multiprocessing, which would be charged to dbo-trace.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COVERAGE_", "COV_CORE_"))}
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules))"],
        capture_output=True, text=True, check=True, cwd=ROOT, env=env,
    )  # fmt: skip
    return set(out.stdout.split())


def test_one_renderer_imports_only_its_module() -> None:
    seen = _imported_after(
        "from pathlib import Path\nfrom dbo_trace.render import RENDERERS, for_path\nRENDERERS['json']\nfor_path(Path('a.json'))"
    )
    assert "dbo_trace.render.json_out" in seen
    others = {"dbo_trace.render.html", "dbo_trace.render.pictures.perfetto", "dbo_trace.render.pictures.timeline_png", "dbo_trace.render.terminal"}
    assert not seen & others, seen & others
    assert "matplotlib" not in seen and "rich" not in seen


def test_terminal_report_imports_no_other_output() -> None:
    """`report` of a trace to the terminal imports neither the HTML, Markdown, Perfetto nor picture
    renderer, nor matplotlib (each asked for by its own flag)."""
    seen = _imported_after(
        "import contextlib, io, sys\nfrom dbo_trace.cli import run\nsys.argv = ['dbo-trace', 'report', 'samples/overlap']\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n    run()"
    )
    assert "dbo_trace.render.terminal" in seen and "dbo_trace.analysis.verdict.decision" in seen
    unused = {"dbo_trace.render.html", "dbo_trace.render.markdown", "dbo_trace.render.pictures.perfetto", "dbo_trace.render.pictures.timeline_png"}
    assert not seen & unused, seen & unused
    assert not {m for m in seen if m.split(".")[0] in ("matplotlib", "perfetto", "torch")}


def test_small_trace_report_starts_no_pool_machinery() -> None:
    """A small trace is read in one process: `report` imports neither multiprocessing nor the process
    pool, nor sqlite3 where no Nsight export is given (trace/workers.py, trace/nsys.py), nor the
    redaction rules (app/review_archive.py imports them when it packs)."""
    seen = _imported_after(
        "import contextlib, io, sys\nfrom dbo_trace.cli import run\n"
        "sys.argv = ['dbo-trace', 'report', '--json', 'samples/overlap']\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n    run()"
    )
    assert "dbo_trace.trace.workers" in seen and "dbo_trace.trace.nsys" in seen
    assert not {m for m in seen if m.split(".")[0] in ("multiprocessing", "sqlite3", "rich")}
    assert "dbo_trace.redact" not in seen  # app/review_archive.py is imported for is_archive alone
    assert "concurrent.futures.process" not in seen
