"""The default output: a rich summary for the terminal."""

from __future__ import annotations

import io
import shutil

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dbo_trace.analysis.report import Report
from dbo_trace.render import RenderOptions
from dbo_trace.render.document import build_document
from dbo_trace.render.format import (
    OPERATION_HEADER,
    PHASE_HEADER,
    RANK_LINES,
    ROUND_TRIP_HEADER,
    cross_rank_lines,
    ms,
    operation_cells,
    pct,
    phase_cells,
    round_trip_cells,
    short_step_label,
    us,
)

_STYLE = {
    "overlapped": "bold green",
    "not-overlapped": "bold red",
    "host-bound": "bold yellow",
    "no-communication": "bold magenta",
}
MAX_STEP_ROWS = 20
MAX_OPERATION_ROWS = 16


def _bullets(console: Console, texts: list[str]) -> None:
    """Bulleted sentences whose continuation lines stay indented under their bullet."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(width=3, no_wrap=True)
    grid.add_column(overflow="fold")
    for text in texts:
        grid.add_row("  -", text)
    console.print(grid)


class TerminalRenderer:
    name, suffixes, binary = "terminal", (".txt",), False

    def render(self, report: Report, options: RenderOptions = RenderOptions()) -> str:
        return self.render_document(build_document(report), options)

    def render_document(self, d: dict, options: RenderOptions = RenderOptions()) -> str:
        """From the JSON document alone: what `report` shows of a review archive's report.json."""
        buf = io.StringIO()
        # The terminal's own width, at least 80: tables are laid out to fit 100 columns without cutting cells.
        width = options.width or max(80, shutil.get_terminal_size((100, 24)).columns)
        color = options.color
        console = Console(file=buf, force_terminal=color, no_color=not color, width=width, highlight=False)
        label = d["verdict"]["label"]
        console.print(f"[{_STYLE.get(label, 'bold')}]verdict: {label}[/]")
        _bullets(console, d["verdict"]["reasons"])
        console.print()

        ranks = Table(
            title="per rank (launch / kernel: medians)",
            title_justify="left",
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            collapse_padding=True,
        )
        for col in ("rank", "steps", "busy", "comm", "hidden", "exposed", "host", "launch", "kernel", "replays", "verdict"):
            ranks.add_column(
                col, justify="left" if col == "verdict" else "right", no_wrap=True, min_width=16 if col == "verdict" else None
            )
        for r in d["ranks"]:
            ranks.add_row(
                str(r["rank"]),
                str(len(r["steps"])),
                pct(r["gpu"]["utilization"]),
                ms(r["comm"]["busy_us"]),
                pct(r["comm"]["hidden_fraction"]),
                ms(r["comm"]["exposed_us"]),
                pct(r["host"]["idle_fraction"]),
                us(r["host"]["median_launch_us"]),
                us(r["host"]["median_kernel_us"]),
                f"{r['graphs']['launches']} ({pct(r['graphs']['replayed_kernel_fraction'])})",
                r["verdict"]["label"],
            )
        console.print(ranks)
        _bullets(console, [line for r in d["ranks"] for line_of in RANK_LINES if (line := line_of(r))])
        phases = d["phases"]
        if phases:
            t = Table(title="per phase (vLLM's step annotations)", title_justify="left")
            for col in PHASE_HEADER:
                t.add_column(col, justify="left" if col in ("phase", "verdict") else "right")
            for name, ph in phases.items():
                t.add_row(*phase_cells(name, ph))
            console.print(t)
        for r in d["ranks"]:
            ops = r["comm_operations"]
            if ops:
                t = Table(
                    title=f"rank {r['rank']} comm operations (per microbatch, in step order; medians over steps)",
                    title_justify="left",
                    box=box.SIMPLE_HEAD,
                    pad_edge=False,
                    collapse_padding=True,
                )
                for col in OPERATION_HEADER:
                    t.add_column(col, justify="left" if col.startswith("exposed mostly") else "right")
                for op in ops[:MAX_OPERATION_ROWS]:
                    t.add_row(*operation_cells(op))
                console.print(t)
                if len(ops) > MAX_OPERATION_ROWS:
                    console.print(f"  ... {len(ops) - MAX_OPERATION_ROWS} more operations (--json lists all)")
        cross = d["cross_rank"]
        if cross:
            console.print(f"across ranks: {cross['summary']}")
            for line in cross_rank_lines(d)[1:]:
                console.print(f"  {escape(line)}")
            for note in cross["notes"]:
                console.print(f"[yellow]note:[/] {escape(note)}")  # notes name process groups: trace strings

        rt = d["round_trips"]
        if rt:
            t = Table(title="DBO arithmetic (medians over steps)", title_justify="left")
            for col in ROUND_TRIP_HEADER:
                t.add_column(col, justify="right")
            t.add_row(*round_trip_cells(rt))
            console.print(t)

        steps = Table(title="per step", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
        for col in ("rank", "step", "kind", "time", "busy", "hidden", "host", "launch", "graph", "verdict"):
            steps.add_column(
                col,
                justify="left" if col in ("step", "kind", "verdict") else "right",
                no_wrap=True,
                min_width=16 if col == "verdict" else len(col),  # headers and "no-communication" whole
            )
        rows = d["steps"]
        for s in rows[:MAX_STEP_ROWS]:
            steps.add_row(
                str(s["rank"]),
                short_step_label(s["label"]),
                s["path"] or s["phase"] or "-",
                ms(s["step_us"]),
                pct(s["gpu"]["utilization"]),
                pct(s["comm"]["hidden_fraction"]),
                pct(s["host"]["idle_fraction"]),
                str(s["host"]["launches"]),
                "yes" if s["replayed"] else "no",
                s["verdict"]["label"],
            )
        console.print(steps)
        if len(rows) > MAX_STEP_ROWS:
            console.print(f"  ... {len(rows) - MAX_STEP_ROWS} more steps (--json or --markdown lists all)")
        console.print(f"microbatches from: {d['microbatch_source']}; steps from: {d['steps_source']}")
        for note in dict.fromkeys([n for r in d["ranks"] for n in r["notes"]] + d["warnings"]):  # a note of every rank once
            console.print(f"[yellow]note:[/] {note}")
        return buf.getvalue()
