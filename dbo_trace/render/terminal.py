"""The default output: a rich summary for the terminal."""

from __future__ import annotations

import io
import shutil

from rich.console import Console
from rich.table import Table

from dbo_trace.analysis.report import Report
from dbo_trace.render.document import build_document
from dbo_trace.render.format import (
    OPERATION_HEADER,
    PHASE_HEADER,
    ROUND_TRIP_HEADER,
    comm_kernels_line,
    contention_line,
    exposure_line,
    ms,
    operation_cells,
    pct,
    phase_cells,
    round_trip_cells,
    time_line,
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


class TerminalRenderer:
    def __init__(self, color: bool = False, width: int | None = None):
        self.color, self.width = color, width

    def render(self, report: Report) -> str:
        buf = io.StringIO()
        width = self.width or max(120, shutil.get_terminal_size((120, 24)).columns)
        console = Console(file=buf, force_terminal=self.color, no_color=not self.color, width=width, highlight=False)
        d = build_document(report)
        label = d["verdict"]["label"]
        console.print(f"[{_STYLE.get(label, 'bold')}]verdict: {label}[/]")
        for reason in d["verdict"]["reasons"]:
            console.print(f"  - {reason}")
        console.print()

        ranks = Table(title="per rank", title_justify="left")
        for col in (
            "rank",
            "steps",
            "GPU busy",
            "comm",
            "hidden",
            "exposed",
            "host idle",
            "launch / kernel (median)",
            "graphs (replayed)",
            "verdict",
        ):
            ranks.add_column(col, justify="left" if col == "verdict" else "right")
        for r in d["ranks"]:
            ranks.add_row(
                str(r["rank"]),
                str(len(r["steps"])),
                pct(r["gpu"]["utilization"]),
                ms(r["comm"]["busy_us"]),
                pct(r["comm"]["hidden_fraction"]),
                ms(r["comm"]["exposed_us"]),
                pct(r["host"]["idle_fraction"]),
                f"{us(r['host']['median_launch_us'])} / {us(r['host']['median_kernel_us'])}",
                f"{r['graphs']['launches']} ({pct(r['graphs']['replayed_kernel_fraction'])})",
                r["verdict"]["label"],
            )
        console.print(ranks)
        for r in d["ranks"]:
            console.print(time_line(r))
            if (cost := contention_line(r)) is not None:
                console.print(cost)
            if (why := exposure_line(r)) is not None:
                console.print(why)
            console.print(comm_kernels_line(r))
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
            for note in cross["notes"]:
                console.print(f"[yellow]note:[/] {note}")

        rt = d["round_trips"]
        if rt:
            t = Table(title="DBO arithmetic (medians over steps)", title_justify="left")
            for col in ROUND_TRIP_HEADER:
                t.add_column(col, justify="right")
            t.add_row(*round_trip_cells(rt))
            console.print(t)

        steps = Table(title="per step", title_justify="left")
        for col in ("rank", "step", "path", "time", "GPU busy", "hidden", "host idle", "launches", "replayed", "verdict"):
            steps.add_column(col, justify="left" if col in ("step", "path", "verdict") else "right")
        rows = d["steps"]
        for s in rows[:MAX_STEP_ROWS]:
            steps.add_row(
                str(s["rank"]),
                s["label"],
                s["path"] or "-",
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
