"""`dbo-trace top`: the live counters as a table (rich) on a terminal, like `nvidia-smi dmon` for DBO,
and as plain lines (one per process per refresh) for a pipe or a file. Presentation only."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from dbo_trace.analysis.live import LiveRow
from dbo_trace.render.format import pct
from dbo_trace.render.safe import terminal_text

HEADER = ("pid", "steps", "steps/s", "microbatched", "paths", "graph replays", "yields/step", "wait/step per ubatch", "age")


def live_cells(r: LiveRow) -> list[str]:
    """A process's row, one cell per HEADER column."""
    return [
        str(r.pid) + ("" if r.hooks_enabled else " (hooks off)"),
        str(r.steps),
        "-" if r.steps_per_s is None else f"{r.steps_per_s:.1f}",
        pct(r.microbatched_share),
        ", ".join(f"{k} {v}" for k, v in r.path_counts.items()) or "-",
        ", ".join(f"{k} {v}" for k, v in r.graph_replays.items())
        + (f" (captures {r.graph_captures})" if r.graph_captures else "")
        or "-",
        "-" if r.yields_per_step is None else f"{r.yields_per_step:.1f}",
        ", ".join(f"ub{u} {ms:.2f} ms" for u, ms in r.wait_ms_per_step.items()) or "-",
        "-" if r.age_s is None else f"{r.age_s:.0f} s",
    ]


def _cell(text: str) -> Text:
    """Counter keys and the folder's name are data: shown inert, never read as rich markup."""
    return Text(terminal_text(text))


def live_table(rows: list[LiveRow], title: str) -> Table:
    table = Table(*HEADER, title=_cell(title), title_justify="left")
    for r in rows:
        table.add_row(*map(_cell, live_cells(r)))
    return table


def live_lines(rows: list[LiveRow], title: str, clock: str) -> list[str]:
    """One refresh as plain lines for a pipe or a log: `clock title`, then a line per process of
    `column: value` pairs (no colour, no box, no cursor movement); every string inert."""
    lines = [f"{clock} {title}"] + [f"{clock} " + "; ".join(f"{h}: {c}" for h, c in zip(HEADER, live_cells(r))) for r in rows]
    return [terminal_text(line) for line in lines]
