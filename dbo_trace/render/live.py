"""`dbo-trace top`: the live counters as a table (rich) on a terminal, like `nvidia-smi dmon` for DBO,
and as plain lines (one per process per refresh) for a pipe or a file. Presentation only."""

from __future__ import annotations

from rich.text import Text

from dbo_trace.analysis.live import LiveRow
from dbo_trace.render.format import pct
from dbo_trace.render.layout import PIPED_WIDTH, Column, table, wrap
from dbo_trace.render.safe import terminal_text

# The table's columns; at a narrow terminal the text ones wrap and the least needed give way first.
COLUMNS = (
    Column("pid", right=False),
    Column("steps"),
    Column("steps/s", keep=3),
    Column("microbatched"),
    Column("paths", right=False, wrap=True),
    Column("graph replays", right=False, wrap=True),
    Column("yields/step", keep=2),
    Column("wait/step per ubatch", right=False, wrap=True, keep=4),
    Column("age", keep=1),
)
HEADER = tuple(c.header for c in COLUMNS)


def live_cells(r: LiveRow) -> list[str]:
    """A process's row, one cell per HEADER column."""
    return [
        str(r.pid) + ("" if r.hooks_enabled else " (hooks off)"),
        str(r.steps),
        "-" if r.steps_per_s is None else f"{r.steps_per_s:.1f}",
        pct(r.microbatched_share),
        ", ".join(f"{k} {v}" for k, v in r.path_counts.items()) or "-",
        _replays(r),
        "-" if r.yields_per_step is None else f"{r.yields_per_step:.1f}",
        _waits(r),
        "-" if r.age_s is None else f"{r.age_s:.0f} s",
    ]


def _waits(r: LiveRow) -> str:
    """Each microbatch's wait per step, with its basis: the steps that ran the threads, named (a
    replay runs none, and a capturing step can take seconds: `ub1 954.97 ms` beside 9.6 ms replays
    read as impossible with `33 steps` alone), and, where the counters have it, those steps' mean
    time, which each wait is a part of (`ub0 0.09, ub1 0.92 of 1.03 ms a step`)."""
    if not r.wait_ms_per_step:
        return "-"
    waits = ", ".join(f"ub{u} {ms:.2f}" for u, ms in r.wait_ms_per_step.items())
    basis = f"over its {r.yielding_steps} eager or capturing steps"
    if r.yielding_step_ms is not None:
        return f"{waits} of {r.yielding_step_ms:.2f} ms a step, {basis}"
    return f"{waits} ms a step, {basis} (their time not in these counters; a replay runs no thread)"


def _replays(r: LiveRow) -> str:
    """Graph replays per runtime mode (CUDAGraphWrapper) and the microbatched steps' own (UBatchWrapper),
    then the captures; "-" where there is none of them."""
    parts = [f"{k} {v}" for k, v in r.graph_replays.items()]
    if r.microbatched_replays:
        parts.append(f"microbatched {r.microbatched_replays}")
    text = ", ".join(parts) or ("0" if r.graph_captures else "-")
    return text + (f" (captures {r.graph_captures})" if r.graph_captures else "")


def live_table(rows: list[LiveRow], title: str, width: int) -> Text:
    """One refresh for a terminal of `width` columns (at least 80): the title, then the table laid
    out by render/layout.py, as every terminal table is; every string inert."""
    cells = [[terminal_text(c) for c in live_cells(r)] for r in rows]
    return Text("\n".join(table(terminal_text(title), list(COLUMNS), cells, max(width, 80), what="piped output")))


def live_lines(rows: list[LiveRow], title: str, clock: str, width: int = PIPED_WIDTH) -> list[str]:
    """One refresh as plain lines for a pipe or a log: `clock title`, then a record per process of
    `column: value` pairs (no colour, no box, no cursor movement), each wrapped to width columns (at
    least 80): a record starts with the clock, its later lines are indented (a log reader joins a line
    that starts with a space to the one before); every string inert."""
    records = [f"{clock} {title}"] + [f"{clock} " + "; ".join(f"{h}: {c}" for h, c in zip(HEADER, live_cells(r))) for r in rows]
    indent = " " * (len(clock) + 3)
    return [line for record in records for line in wrap(terminal_text(record), max(width, 80), "", indent)]
