"""`dbo-trace top`: the live counters as a table (rich), like `nvidia-smi dmon` for DBO. Presentation only."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from dbo_trace.analysis.live import LiveRow
from dbo_trace.render.format import pct
from dbo_trace.render.safe import terminal_text

HEADER = ("pid", "steps", "steps/s", "microbatched", "paths", "graph replays", "yields/step", "wait/step per ubatch", "age")


def _cell(text: str) -> Text:
    """Counter keys and the folder's name are data: shown inert, never read as rich markup."""
    return Text(terminal_text(text))


def live_table(rows: list[LiveRow], title: str) -> Table:
    table = Table(*HEADER, title=_cell(title), title_justify="left")
    for r in rows:
        table.add_row(*map(_cell, _cells(r)))
    return table


def _cells(r: LiveRow) -> list[str]:
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
