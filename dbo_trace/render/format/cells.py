"""A table's row as cells: a rank's, a phase's, a step's, a comm operation's, a kernel's, a layer's."""

from __future__ import annotations

from typing import Any, Callable

from msgspec import UnsetType

from dbo_trace.render.document.pipeline import PipelineLayerBlock
from dbo_trace.render.document import (
    CpuRange,
    KernelRow,
    PhaseBlock,
    RankBlock,
    ReportDocument,
    RoundTripsBlock,
    StallBlock,
    StepBlock,
    figure_rows,
)
from dbo_trace.analysis.ledger import LayerHandovers
from dbo_trace.analysis.overlap.layer_operations import LayerOps
from dbo_trace.analysis.overlap.operations import OperationRow
from dbo_trace.render.format.filtering import borderline, label_of, per_rank_labels
from dbo_trace.render.format.numbers import cut, ms, num, pct, tri, us
from dbo_trace.render.format.tables import (
    CPU_RANGE_HEADER,
    KERNEL_HEADER,
    MD_CPU_RANGE_ROWS,
    MD_KERNEL_ROWS,
    SPREAD_HEADER,
    WINDOW_SHOWN,
    hidden_cell,
    md_table,
)
from dbo_trace.render.names import display_names
from dbo_trace.render.safe import Markdown, markdown_code


def round_trip_cells(rt: RoundTripsBlock) -> list[str]:
    """The DBO arithmetic row, as every text renderer shows it (the document's round_trips block)."""
    return [
        ms(rt.step_us),
        num(rt.per_step),
        num(rt.per_layer),
        ms(rt.per_round_trip_us),
        ms(rt.comm_per_round_trip_us),
        ms(rt.compute_per_round_trip_us),
        num(rt.ratio),
        tri(rt.criterion_met),
    ]


def rank_cell(r: RankBlock) -> str:
    """A rank's number, with its role in a disaggregated run ("1 (attention)")."""
    return str(r.rank) if r.role is None else f"{r.rank} ({r.role})"


def rank_cells(r: RankBlock) -> list[str]:
    """A rank's summary row in the Markdown and HTML reports (the document's rank block)."""
    return [
        rank_cell(r),
        str(len(r.steps)),
        pct(r.gpu.utilization),
        hidden_cell(r.comm.hidden_fraction, r.role is not None),
        pct(r.host.idle_fraction),
        str(r.graphs.launches),
        pct(r.graphs.replayed_kernel_fraction),
        label_of(r.verdict),
    ]


def _figure_cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return tri(value, "yes", "no")
    return str(value)


def figure_table(d: ReportDocument) -> tuple[list[str], list[list[str]]]:
    """Every figure of every rank (each field of the document's figure blocks that declares one,
    document.figure), as the JSON holds it: a figure a row."""
    header = ["figure", *(f"rank {r.rank}" for r in d.ranks)]
    columns = [dict(figure_rows(r)) for r in d.ranks]
    return header, [[Markdown(name), *(_figure_cell(c[name]) for c in columns)] for name, _ in figure_rows(d)]


def phase_cells(
    name: str, ph: PhaseBlock, escape: Callable[[str], str] = str, name_width: int | None = None, disaggregated: bool = False
) -> list[str]:
    """escape: what a trace string needs in the output (Markdown); name_width: a cut for the terminal;
    disaggregated: the phase is a disaggregated run's (its hidden a dash, DISAGGREGATED_HIDDEN)."""
    label = ph.verdict.label or "/".join(dict.fromkeys(per_rank_labels(ph.verdict))) or "-"
    top = ph.host_causes.top if ph.host_causes is not None else None
    cause = "-"
    if top is not None:
        name_cell = escape(cut(top.name, name_width))
        cause = f"{name_cell} {pct(top.share)}"
        if isinstance(name_cell, Markdown):  # already safe Markdown (the share is digits and %): not escaped again
            cause = Markdown(cause)
    return [
        name,
        f"{ph.steps} ({ph.stalls} stalled)" if isinstance(ph.stalls, int) and ph.stalls else str(ph.steps),
        ms(ph.median_step_us),
        pct(ph.gpu_utilization),
        pct(ph.host_idle_fraction),
        hidden_cell(ph.comm_hidden_fraction, disaggregated),
        pct(ph.replayed_kernel_fraction),
        # The largest thing the host did while the GPU waited, and its share of that idle time.
        cause,
        label,
    ]


def host_stack_rows(d: ReportDocument) -> list[tuple[str, list[list[str]]]]:
    """The flame-style table per rank and window (`--host-stacks`): (title, rows)."""
    out = []
    for r in d.ranks:
        if isinstance(r.host_stacks, UnsetType):
            continue
        windows = [(f"rank {r.rank}", r.host_stacks.window)]
        windows += [(f"rank {r.rank} {p}", h) for p, h in r.host_stacks.phases.items()]
        for title, h in windows:
            rows = [
                [row.cause.replace("_", " "), row.project or "-", row.library or "-", row.inner or "-", ms(row.us), pct(row.share)]
                for row in h.rows
            ]
            out.append((f"{title}: host idle by Python frame ({h.samples})", rows))
    return out
NOTHING_EXPOSED = 0.005  # an exposed share that rounds to 0%: no reason is given for it


def exposed_cells(hidden: float | None, exposed: float | None, median_exposed_us: float | None) -> list[str]:
    """Hidden and exposed as shares of one total (the operation's time over every step), so that they
    add up; a document before version 8 has no exposed share (None where the hidden one is known,
    as in no later version's): its median exposed time is shown."""
    return [pct(hidden), pct(exposed) if exposed is not None or hidden is None else ms(median_exposed_us)]


def exposed_reason(reason: str | None, exposed: float | None, median_exposed_us: float | None) -> str:
    """Why the exposed time was exposed; nothing where none was."""
    from dbo_trace.render.words.exposure import REASON_SHORT

    nothing = exposed < NOTHING_EXPOSED if isinstance(exposed, float) else (median_exposed_us or 0.0) < 5.0
    return "-" if reason is None or nothing else REASON_SHORT.get(reason, reason)


def operation_cells(op: OperationRow) -> list[str]:
    return [
        "-" if op.ubatch < 0 else f"ub{op.ubatch}",
        f"{op.index + 1}: layer {op.layer} {op.role}" if isinstance(op.layer, int) else str(op.index + 1),
        str(op.steps),
        ms(op.median_us),
        *exposed_cells(op.hidden_fraction, op.exposed_fraction, op.median_exposed_us),
        exposed_reason(op.reason, op.exposed_fraction, op.median_exposed_us),
    ]


def step_time_cell(step: StepBlock) -> str:
    """A step's time: its period; its window beside it where the two differ (the GPU ran behind)."""
    w, p = step.window_us, step.step_us
    if not isinstance(w, float) or p is None or abs(w - p) <= WINDOW_SHOWN * max(p, 1e-9):
        return ms(p)
    return f"{ms(p)} (window {w / 1000:.2f})"


def step_verdict_cell(step: StepBlock) -> str:
    """A step's verdict, and its stall's cause where it stalled (left out of the run's verdict)."""
    label: str = step.verdict.label or "-"
    if borderline(step.verdict):
        label += " (borderline)"
    return label if not isinstance(step.stall, StallBlock) else f"{label}; stall: {step.stall.cause}"


def step_number_cell(step: StepBlock) -> str:
    """A step's number, what --step takes."""
    return str(step.number)


def short_step_label(label: str) -> str:
    """vLLM's `execute_context_14(7168)_generation_2(2)` as `7168+2 tok`: its prefill and decode
    tokens (the phase column says which kind of step, the # column which one; the full label, with
    the request counts, is in the Markdown and the JSON). Other labels as they are."""
    if label.startswith("execute_"):
        import re

        m = re.match(r"^execute_(?:\d+_)?context_(\d+)\((?:sq)?(\d+)[^)]*\)_generation_(\d+)\((?:sq)?(\d+)", label)
        if m:
            return f"{m.group(2)}+{m.group(4)} tok"
    return label


def kernel_cells(row: KernelRow, escape: Callable[[str], str] = str, name: str | None = None) -> list[str]:
    """A kernel table's row; name: the kernel's name as the table shows it (names.display_names)."""
    return [
        escape(row.name if name is None else name),
        str(row.count),
        ms(row.total_us),
        us(row.mean_us),
        us(row.median_us),
        us(row.min_us),
        us(row.max_us),
        pct(row.share),
    ]


def cpu_range_cells(row: CpuRange, escape: Callable[[str], str] = str, name_width: int | None = None) -> list[str]:
    return [
        escape(cut(row.name, name_width)),
        row.kind,
        str(row.count),
        ms(row.total_us),
        ms(row.host_idle_us),
        pct(row.share),
    ]


def spread_cells(name: str, ph: PhaseBlock) -> list[str] | None:
    x = ph.step_us
    if x is None:
        return None
    return [name, str(ph.steps), ms(x.median), ms(x.p90), ms(x.p99), ms(x.max)]


def summary_tables(d: ReportDocument, code: Callable[[str], str] = str) -> list[tuple[str, bool, list[str], list[list[str]]]]:
    """Step-time spread per phase, and per rank the kernel and CPU-range summaries (names whole):
    (title, folded, header, rows) for the Markdown and the page alike. code: how a name is shown."""
    out: list[tuple[str, bool, list[str], list[list[str]]]] = []
    spreads = [row for name, ph in d.phases.items() if (row := spread_cells(name, ph))]
    if spreads:
        out.append(("Step time per phase (every step's period, stalls included):", False, list(SPREAD_HEADER), spreads))
    for r in d.ranks:
        k = r.kernel_summary
        if k is not None and k.rows:
            shown = k.rows[:MD_KERNEL_ROWS]
            title = f"Rank {r.rank} kernels: {len(shown)} of {k.names} names by total time ({k.kernels} kernels, {ms(k.total_us)})"
            rows = [kernel_cells(row, code, name) for row, name in zip(shown, display_names([r.name for r in shown]))]
            out.append((title, True, list(KERNEL_HEADER), rows))
        ranges = r.cpu_range_summary
        if ranges:
            title = f"Rank {r.rank} CPU ranges by the host-caused GPU idle they explain"
            rows = [cpu_range_cells(row, code) for row in ranges[:MD_CPU_RANGE_ROWS]]
            out.append((title, True, list(CPU_RANGE_HEADER), rows))
    return out


def summary_markdown(d: ReportDocument) -> list[str]:
    """summary_tables as Markdown: the kernel and CPU-range tables folded."""
    out: list[str] = []
    for title, folded, header, rows in summary_tables(d, markdown_code):
        kind = "cpu ranges" if header == list(CPU_RANGE_HEADER) else None
        if folded:
            out += [f"<details><summary>{title}</summary>", ""] + md_table(header, rows, kind) + ["", "</details>", ""]
        else:
            out += [title, ""] + md_table(header, rows, kind) + [""]
    return out


def layer_cells(row: LayerHandovers) -> list[str]:
    return [str(row.layer), str(row.handovers), us(row.median_us), us(row.p90_us), ms(row.per_step_us)]


def pipeline_layer_cells(row: PipelineLayerBlock) -> list[str]:
    return [
        str(row.layer), "-" if row.ubatch < 0 else str(row.ubatch), str(row.visits), us(row.attention_us),
        us(row.hop_out_us), us(row.ffn_us), us(row.hop_back_us), us(row.round_trip_us), pct(row.ffn_receive_waited),
        pct(row.attention_receive_waited),
    ]  # fmt: skip


def layer_ops_cells(row: LayerOps) -> list[str]:
    first, last = row.first_layer, row.last_layer
    return [
        str(first) if first == last else f"{first}-{last}",
        str(row.operations),
        ms(row.median_us),
        *exposed_cells(row.hidden_fraction, row.exposed_fraction, row.median_exposed_us),
        exposed_reason(row.reason, row.exposed_fraction, row.median_exposed_us),
    ]
