"""The default output: a rich summary for the terminal."""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import replace

from rich.console import Console
from rich.text import Text

from dbo_trace.analysis.model import Report
from dbo_trace.render.base import RenderOptions
from dbo_trace.render.document.pipeline import PipelineBlock
from dbo_trace.render.document import ReportDocument, build_document
from dbo_trace.render.format import (
    label_of,
    legend,
    hidden_cell,
    disaggregated_ranks,
    disaggregated_lines,
    profiler_lines,
    rank_cell,
    roles_lines,
    CPU_RANGE_HEADER,
    KERNEL_HEADER,
    LAYER_HEADER,
    PIPELINE_LAYER_HEADER,
    pipeline_layer_cells,
    LAYER_OPS_HEADER,
    OPERATION_HEADER,
    PHASE_HEADER,
    RANK_LINES,
    ROUND_TRIP_HEADER,
    SPREAD_HEADER,
    all_notes,
    comm_layers_of,
    cpu_range_cells,
    cross_rank_lines,
    dbo_arithmetic_applies,
    headline,
    next_step_line,
    pays_line,
    pipeline_line,
    predicted_line,
    reason_lines,
    host_cause_lines,
    host_stack_lines,
    host_stack_rows,
    kernel_cells,
    layer_cells,
    layer_ops_cells,
    ledger_lines,
    ledger_of,
    ms,
    only_layer,
    operation_cells,
    pct,
    phase_cells,
    round_trip_cells,
    short_step_label,
    spread_cells,
    step_number_cell,
    step_time_cell,
    step_verdict_cell,
    tri,
    us,
    what_if_lines,
)
from dbo_trace.render.layout import NEVER, Column, cells, strip_trailing, table, terminal_width, wrap
from dbo_trace.render.names import display_names
from dbo_trace.render.safe import terminal_document

_STYLE = {
    "overlapped": "bold green",
    "not-overlapped": "bold red",
    "host-bound": "bold yellow",
    "no-communication": "bold magenta",
}
MAX_STEP_ROWS = 20
MAX_OPERATION_ROWS = 16
# Sentences of one list (the verdict's reasons, the notes, the cross-rank lines) and rows of the phase
# tables: a report has a few, but an archive's report.json may hold millions in a few bytes each,
# and each costs the terminal ~0.1 ms to lay out. The rest are counted; the Markdown and JSON list all.
MAX_LIST_LINES = 50
TOP_CAUSE_WIDTH = 16  # characters of a range or operator name in the phase table (the JSON and Markdown have it whole)
TERMINAL_KERNEL_ROWS = 10
TERMINAL_CPU_RANGE_ROWS = 10

# The tables' columns; keep orders which go first when a table is too wide (layout.Column).
RANK_COLUMNS = [
    Column("rank"),
    Column("steps", keep=3),
    Column("busy"),
    Column("comm", keep=6),
    Column("hidden"),
    Column("exposed"),
    Column("host", keep=8),
    Column("launch", keep=2),
    Column("kernel", keep=1),
    Column("replays", keep=5),
    Column("verdict", right=False),
]
STEP_COLUMNS = [
    Column("rank"),
    Column("#"),
    Column("step", right=False, wrap=True),
    Column("kind", right=False, keep=7),
    Column("time"),
    Column("busy", keep=8),
    Column("hidden"),
    Column("host"),
    Column("launch", keep=2),
    Column("graph", keep=6),
    Column("verdict", right=False),
]
_PHASE_KEEP = {"steps": 4, "replayed": 3}
_OPERATION_KEEP = {"steps": 2, "median time": 5}
_ROUND_TRIP_KEEP = {"round trips": 4, "per layer": 3}


def _columns(
    header: Sequence[str], keep: dict[str, int], text: tuple[str, ...] = (), left: tuple[str, ...] = ()
) -> list[Column]:
    """Columns for a header shared with the other renderers (format.py): text ones left, wrapping;
    left ones left, whole (labels whose words line up)."""
    return [
        Column(h, right=h not in text + left, keep=keep.get(h, NEVER), wrap=h in text and h != "verdict") for h in header
    ]


class _Lines:
    """The output as lines, each written whole: rich only colours them, never wraps or pads them."""

    def __init__(self, width: int, color: bool):
        self.width, self.buf = width, io.StringIO()
        self.console = Console(file=self.buf, force_terminal=color, no_color=not color, width=width, highlight=False)

    def line(self, text: str = "", style: str | None = None) -> None:
        self.console.print(Text(text, style=style or ""), soft_wrap=True)

    def lines(self, texts: list[str]) -> None:
        for t in texts:
            self.line(t)

    def paragraph(self, text: str, lead: str = "", style: str | None = None, whole: bool = False) -> None:
        """A sentence wrapped to the width; the styled lead word (`note:`) keeps its colour, or with
        whole every line of it is styled (the verdict)."""
        for k, piece in enumerate(wrap(lead + text, self.width, "", "  ")):
            if whole:
                self.line(piece, style)
            elif k == 0 and lead and style:
                self.console.print(Text.assemble((lead.rstrip(), style), piece[len(lead.rstrip()) :]), soft_wrap=True)
            else:
                self.line(piece)

    def bullets(self, texts: list[str], most: int | None = MAX_LIST_LINES) -> None:
        """Bulleted sentences whose continuation lines stay indented under their bullet; past `most`
        (None: no limit), how many more."""
        for text in texts[:most]:
            self.lines(wrap(text, self.width, "  - ", "    "))
        self.more(len(texts) - len(texts[:most]))

    def more(self, left: int, what: str = "") -> None:
        if left > 0:
            self.line(f"  ... {left} more{what} (--json or --markdown lists all)")

    def table(
        self, title: str | None, columns: list[Column], rows: list[list[str]], what: str = "--json", kind: str | None = None,
        disaggregated: bool = False,
    ) -> None:
        """The table laid out to the width, then the key to its abbreviated columns (format.legend)."""
        self.lines(table(title, columns, rows, self.width, what))
        key = legend([c.header for c in columns], kind, disaggregated)
        if key is not None and rows:
            self.paragraph(key, "  ")
        self.line()

    def text(self) -> str:
        return strip_trailing(self.buf.getvalue())


KERNEL_DROPS = ("min", "max", "mean", "median")  # a kernel table's figures, the least needed first
KERNEL_NAME_ROOM = 40  # columns a kernel's name gets before the table keeps all its figures


def _name_room(width: int, header: tuple[str, ...], rows: list[list[str]]) -> int:
    """What is left for the first (name) column once the others have their widest cell (2 columns apart)."""
    others = sum(max([len(h)] + [cells(r[i]) for r in rows]) for i, h in enumerate(header) if i > 0)
    return max(12, width - others - 2 * (len(header) - 1) - 2)


def _host_stacks(out: _Lines, d: ReportDocument) -> None:
    """`--host-stacks`: the host idle by sampled Python frame per rank and phase, as a small tree:
    a line per row with its GPU idle, share and cause, then its frames under it, one a line,
    outermost first (project frame, `> ` the library call, `> ` the innermost library frame).
    Frame names run to 100 characters: table cells cut them into pieces over many lines at 80
    columns; here a name longer than a line breaks only after a `.` or `:` of its path."""
    for title, rows in host_stack_rows(d):
        out.lines(wrap(title, out.width, "", "  "))
        out.line(f"  {'GPU idle':>10}  {'of idle':>7}  cause; under it the frames, outermost first")
        for cause, project, library, inner, idle, share in rows:
            out.line(f"  {idle:>10}  {share:>7}  {cause}")
            frames = [("", project), ("> ", library), ("> ", inner if inner != library else "-")]
            for lead, name in frames:
                if name != "-":
                    out.lines(_frame_lines(name, out.width, "      " + lead, "      " + " " * len(lead) + "  "))
        out.line()


def _frame_lines(name: str, width: int, first: str, rest: str) -> list[str]:
    """A frame's dotted name (`package.module:Class.method`) in lines of at most width columns,
    broken only after a `.` or `:`; a piece longer than a line alone is cut where it must."""
    pieces = re.findall(r"[^.:]+[.:]?|[.:]", name)
    lines, line = [], first
    for piece in pieces:
        if cells(line) + cells(piece) > width and line.strip():
            lines.append(line)
            line = rest
        while cells(line) + cells(piece) > width:  # one piece wider than a line
            room = max(1, width - cells(line))
            lines.append(line + piece[:room])
            line, piece = rest, piece[room:]
        line += piece
    return [*lines, line]


def _operations(out: _Lines, d: ReportDocument) -> None:
    """Each rank's comm operations, per microbatch and per layer."""
    for r in d.ranks:
        ops = r.comm_operations
        if ops:
            out.table(
                f"rank {r.rank} comm operations (per microbatch, in step order; time: median over steps; hidden, exposed: shares of all its time)",
                _columns(OPERATION_HEADER, _OPERATION_KEEP, (OPERATION_HEADER[-1],), ("op",)),
                [operation_cells(op) for op in ops[:MAX_OPERATION_ROWS]],
            )
            if len(ops) > MAX_OPERATION_ROWS:
                out.line(f"  ... {len(ops) - MAX_OPERATION_ROWS} more operations (--json lists all)")
                out.line()
        layers = comm_layers_of(r)
        if layers:
            out.table(
                f"rank {r.rank} comm operations per layer (both microbatches; layers alike grouped)",
                _columns(LAYER_OPS_HEADER, {}, (LAYER_OPS_HEADER[-1],)),
                [layer_ops_cells(row) for row in layers[:MAX_OPERATION_ROWS]],
            )
            out.more(len(layers) - MAX_OPERATION_ROWS, " layer rows")


def _ledgers(out: _Lines, d: ReportDocument) -> None:
    """Each rank's DBO ledger and its hand-overs per layer."""
    for r in d.ranks:
        ledger = ledger_of(r)
        out.bullets(ledger_lines(r.rank, ledger), most=None)
        handovers = ledger.layers if ledger is not None else []
        if handovers:
            out.table(
                f"rank {r.rank} hand-overs per layer",
                _columns(LAYER_HEADER, {}),
                [layer_cells(row) for row in handovers[:MAX_OPERATION_ROWS]],
                kind="hand-overs",
            )
            out.more(len(handovers) - MAX_OPERATION_ROWS, " layers")


def _pipeline_layer(out: _Lines, d: ReportDocument, layer: int | None) -> None:
    """--layer N on an AFD arm: that layer's visits per microbatch (the document's pipeline block)."""
    if layer is not None and isinstance(d.pipeline, PipelineBlock) and d.pipeline.layers_detail:
        out.table(
            f"pipeline, layer {layer} (us, medians over the steady steps)",
            _columns(PIPELINE_LAYER_HEADER, {"attn waited": 1, "FFN waited": 2, "visits": 3, "layer": 4}),
            [pipeline_layer_cells(row) for row in d.pipeline.layers_detail],
        )


def _summaries(out: _Lines, d: ReportDocument, width: int) -> None:
    """Step-time spread per phase; per rank the kernel and CPU-range summaries, names cut to the width."""
    spreads = [row for name, ph in d.phases.items() if (row := spread_cells(name, ph))]
    if spreads:
        out.table("step time per phase (every step's period, stalls included)", _columns(SPREAD_HEADER, {}, ("phase",)), spreads[:MAX_LIST_LINES])
        out.more(len(spreads) - MAX_LIST_LINES, " phases")
    for r in d.ranks:
        k = r.kernel_summary
        if k is not None and k.rows:
            shown = k.rows[:TERMINAL_KERNEL_ROWS]
            cells = [kernel_cells(row) for row in shown]
            # The name needs room to be told apart: the least needed figures give way first.
            header, cut_at = list(KERNEL_HEADER), _name_room(width, KERNEL_HEADER, cells)
            for gone in KERNEL_DROPS:
                if cut_at >= KERNEL_NAME_ROOM:
                    break
                header.remove(gone)
                cut_at = _name_room(width, tuple(header), [[c[KERNEL_HEADER.index(h)] for h in header] for c in cells])
            names = display_names([row.name for row in shown], cut_at)
            rows = [kernel_cells(row, name=name) for row, name in zip(shown, names)]
            out.lines(
                table(
                    f"rank {r.rank} kernels: {len(shown)} of {k.names} names by total time ({k.kernels} kernels)",
                    _columns(header, {}, ("kernel",)),
                    [[row[KERNEL_HEADER.index(h)] for h in header] for row in rows],
                    width,
                )
            )
            if len(header) < len(KERNEL_HEADER):
                gone_text = ", ".join(h for h in KERNEL_HEADER if h not in header)
                out.lines(wrap(f"(not shown at {width} columns: {gone_text}; a wider terminal or --json has them)", width, "  ", "   "))
            key = legend(header)
            if key is not None:
                out.paragraph(key, "  ")
            out.line()
        ranges = r.cpu_range_summary
        if ranges:
            shown_ranges = ranges[:TERMINAL_CPU_RANGE_ROWS]
            cut_at = _name_room(width, CPU_RANGE_HEADER, [cpu_range_cells(row) for row in shown_ranges])
            out.table(
                f"rank {r.rank} CPU ranges by the host-caused GPU idle they explain",
                _columns(CPU_RANGE_HEADER, {}, ("CPU range", "kind")),
                [cpu_range_cells(row, name_width=cut_at) for row in shown_ranges],
                kind="cpu ranges",
            )


class TerminalRenderer:
    name, suffixes, binary = "terminal", (".txt",), False

    def render(self, report: Report, options: RenderOptions = RenderOptions()) -> str:
        return self.render_document(build_document(report, lazy_steps=True), options)

    def render_document(self, d: ReportDocument, options: RenderOptions = RenderOptions()) -> str:
        """From the document alone: what `report` shows of a review archive's report.json."""
        # every string from input inert (the layout prints Text: no markup is parsed); --layer's view
        d = terminal_document(only_layer(d, options.layer))
        # The width by layout.terminal_width's one rule ($COLUMNS, the terminal's, else 80): every table fits it whole.
        width = options.width or terminal_width()
        out = _Lines(width, options.color)
        label = label_of(d.verdict)
        out.paragraph(headline(d.verdict), "verdict: ", _STYLE.get(label, "bold"), whole=True)
        if (pays := pays_line(d.verdict)) is not None:
            out.paragraph(pays, "does DBO pay: ", "bold")
        if (predicted := predicted_line(d)) is not None:
            out.paragraph(predicted, "DBO's effect predicted: ", "bold")
        if (step := next_step_line(d.verdict)) is not None:
            out.paragraph(step, "next step: ", "bold")
        out.bullets(reason_lines(d.verdict) + [line for line in (pipeline_line(d),) if line is not None])
        out.bullets(profiler_lines(d))  # beside the verdict it may qualify
        out.bullets([f"host time: {line}" for line in host_cause_lines(d)])
        out.bullets(host_stack_lines(d))
        out.line()
        afd = disaggregated_ranks(d)
        out.table(
            "per rank (launch / kernel: medians)",
            RANK_COLUMNS,
            [
                [
                    rank_cell(r),
                    str(len(r.steps)),
                    pct(r.gpu.utilization),
                    ms(r.comm.busy_us),
                    hidden_cell(r.comm.hidden_fraction, r.rank in afd),
                    ms(r.comm.exposed_us),
                    pct(r.host.idle_fraction),
                    us(r.host.median_launch_us),
                    us(r.host.median_kernel_us),
                    f"{r.graphs.launches} ({pct(r.graphs.replayed_kernel_fraction)})",
                    label_of(r.verdict),
                ]
                for r in d.ranks
            ],
            kind="rank",
            disaggregated=bool(afd),
        )
        out.bullets([line for r in d.ranks for line_of in RANK_LINES if (line := line_of(r))], most=None)  # a few per rank
        out.line()
        phases = d.phases
        if phases:
            out.table(
                "per phase (vLLM's step annotations; the steady steps' figures, stalls counted apart)",
                _columns(PHASE_HEADER, _PHASE_KEEP, ("phase", "verdict", "top host cause")),
                [
                    phase_cells(name, ph, name_width=TOP_CAUSE_WIDTH, disaggregated=bool(afd))
                    for name, ph in list(phases.items())[:MAX_LIST_LINES]
                ],
                disaggregated=bool(afd),
            )
            out.more(len(phases) - MAX_LIST_LINES, " phases")
        _operations(out, d)
        cross = d.cross_rank
        if cross is not None:
            out.paragraph(f"across ranks: {cross.summary}")
            out.bullets(cross_rank_lines(d)[1:])
            for note in cross.notes[:MAX_LIST_LINES]:
                out.paragraph(note, "note: ", "yellow")
            out.more(len(cross.notes) - MAX_LIST_LINES, " notes")
            out.line()

        if d.disaggregated is not None or d.roles is not None:
            out.bullets(roles_lines(d) + (disaggregated_lines(d.disaggregated) if d.disaggregated is not None else []))
            out.line()
        rt = d.round_trips
        if rt is not None and dbo_arithmetic_applies(d):
            out.table(
                "DBO arithmetic (medians over steps)", _columns(ROUND_TRIP_HEADER, _ROUND_TRIP_KEEP), [round_trip_cells(rt)]
            )
        out.bullets(what_if_lines(d), most=None)
        _ledgers(out, d)
        _pipeline_layer(out, d, options.layer)

        rows = d.steps
        # the rank column says nothing where one rank has steps (d.steps: the ranks' step blocks in turn)
        one_rank = len({r.rank for r in d.ranks if r.steps}) <= 1
        out.table(
            "per step",
            [replace(c, keep=1 if one_rank else NEVER) if c.header == "rank" else c for c in STEP_COLUMNS],
            [
                [
                    str(s.rank),
                    step_number_cell(s),
                    short_step_label(s.label),
                    s.path or s.phase or "-",
                    step_time_cell(s),
                    pct(s.gpu.utilization),
                    hidden_cell(s.comm.hidden_fraction, s.rank in afd),
                    pct(s.host.idle_fraction),
                    str(s.host.launches),
                    tri(s.replayed, "yes", "no"),
                    step_verdict_cell(s),
                ]
                for s in rows[:MAX_STEP_ROWS]
            ],
            "--json or --markdown",
            kind="step",
            disaggregated=any(s.rank in afd for s in rows[:MAX_STEP_ROWS]),
        )
        if len(rows) > MAX_STEP_ROWS:
            out.paragraph(
                f"  ... {len(rows) - MAX_STEP_ROWS} more steps (--json lists all; --timeline FILE --step N draws "
                "one: N a number, a label, median or slowest)"
            )
        _summaries(out, d, width)
        if options.host_stacks:
            _host_stacks(out, d)
        out.paragraph(f"microbatches from: {d.microbatch_source}; steps from: {d.steps_source}")
        notes = all_notes(d)
        for note in notes[:MAX_LIST_LINES]:
            out.paragraph(note, "note: ", "yellow")
        out.more(len(notes) - MAX_LIST_LINES, " notes")
        return out.text()
