"""--markdown: a summary to paste into a pull request."""

from __future__ import annotations

from dbo_trace.analysis.report import Report
from dbo_trace.render.base import RenderOptions
from dbo_trace.render.document import ReportDocument, RoundTripsBlock, build_document
from dbo_trace.render.format import (
    LAYER_HEADER,
    LAYER_OPS_HEADER,
    OPERATION_HEADER,
    PHASE_HEADER,
    RANK_HEADER,
    RANK_LINES,
    ROUND_TRIP_HEADER,
    all_notes,
    comm_layers_of,
    cross_rank_lines,
    figure_table,
    headline,
    host_cause_lines,
    layer_cells,
    layer_ops_cells,
    ledger_lines,
    ledger_of,
    md_table,
    ms,
    only_layer,
    operation_cells,
    pct,
    phase_cells,
    rank_cells,
    round_trip_cells,
    step_number_cell,
    summary_markdown,
    tri,
    us,
    what_if_lines,
)
from dbo_trace.render.safe import markdown_code, markdown_text


def picture_note(image: str) -> list[str]:
    """Where the picture is and how it gets into a comment: a GitHub comment cannot show a file from
    the reviewer's disk (a link to a local path is a broken image), so it says to attach it instead."""
    name = markdown_code(image)
    return [
        f"> **Picture to attach:** the CPU/GPU timeline of one step is the file {name} (its path is relative to "
        f"where this Markdown was written). A GitHub comment cannot show a file from your disk: drag {name} into "
        "the comment box to attach it, and GitHub puts its link where you drop it.",
    ]


def round_trip_note(rt: RoundTripsBlock, could: str = "could", source: str | None = None) -> str:
    """What the DBO arithmetic table rests on, under it in the Markdown and HTML reports. source:
    rt.source as the output needs it (the Markdown's escaped: an archive's may hold any text)."""
    return (
        f"Round trips counted from {rt.source if source is None else source}; layers: {rt.layers or 'unknown (pass --layers)'}. "
        f"Criterion (with microbatches only): per-microbatch compute >= comm round trip, so the round trip "
        f"{could} hide entirely; below 1 at most that share of it could; the hidden share says what did "
        "(docs/analysis.md)."
    )


def ledger_markdown(d: ReportDocument) -> list[str]:
    """The DBO ledger under the DBO arithmetic: its sentences, then the hand-overs per layer, folded."""
    out: list[str] = []
    for r in d.ranks:
        ledger = ledger_of(r)
        lines = ledger_lines(r.rank, ledger)
        if lines:
            out += [""] + [f"- {markdown_text(line)}" for line in lines]
        if ledger is not None and ledger.layers:
            out += ["", f"<details><summary>Rank {r.rank} hand-overs per layer</summary>", ""]
            out += md_table(list(LAYER_HEADER), [layer_cells(row) for row in ledger.layers]) + ["", "</details>"]
    return out


class MarkdownRenderer:
    name, suffixes, binary = "markdown", (".md",), False

    def render(self, report: Report, options: RenderOptions = RenderOptions()) -> str:
        return self.render_document(build_document(report), options)

    def render_document(self, d: ReportDocument, options: RenderOptions = RenderOptions()) -> str:
        """From the document alone: what `report` shows of a review archive's report.json."""
        d = only_layer(d, options.layer)
        label = d.verdict.label
        out = [f"### dbo-trace: **{markdown_text(label)}**{markdown_text(headline(d.verdict)[len(label) :])}", ""]
        out += [f"- {markdown_text(reason)}" for reason in d.verdict.reasons]
        out += [f"- host time: {markdown_text(line)}" for line in host_cause_lines(d)]
        if options.image:
            out += ["", *picture_note(options.image)]
        out += [""] + md_table(RANK_HEADER, [rank_cells(r) for r in d.ranks])
        out.append("")
        for line_of in RANK_LINES:  # each kind of finding for every rank, then the next kind
            out += [f"- {markdown_text(line)}" for r in d.ranks if (line := line_of(r))]
        for r in d.ranks:  # long: folded, like the per-step table
            ops = r.comm_operations
            if ops:
                out += ["", f"<details><summary>Rank {r.rank} comm operations ({len(ops)}: per microbatch, in step "
                        "order; medians over steps)</summary>", ""]  # fmt: skip
                out += md_table(list(OPERATION_HEADER), [operation_cells(op) for op in ops]) + ["", "</details>"]
            layers = comm_layers_of(r)
            if layers:
                out += ["", f"Rank {r.rank} comm operations per layer (both microbatches; layers alike grouped):", ""]
                out += md_table(list(LAYER_OPS_HEADER), [layer_ops_cells(row) for row in layers])
        if d.phases:
            out += ["", "Per phase (vLLM's step annotations):", ""] + md_table(
                list(PHASE_HEADER), [phase_cells(name, ph, markdown_code) for name, ph in d.phases.items()]
            )
        if d.cross_rank is not None:
            out += ["", f"Across ranks: {markdown_text(d.cross_rank.summary)}."]
            out += [""] + [f"- {markdown_text(line)}" for line in cross_rank_lines(d)[1:]]
            out += [f"- note: {markdown_text(note)}" for note in d.cross_rank.notes]
        rt = d.round_trips
        if rt is not None:
            out += [""] + md_table(ROUND_TRIP_HEADER, [round_trip_cells(rt)])
            out += ["", round_trip_note(rt, "*could*", markdown_text(rt.source, line_start=False))]
        out += ledger_markdown(d)
        if what := what_if_lines(d):
            out += [""] + [f"- {markdown_text(line)}" for line in what]
        out += ["", "<details><summary>Per step</summary>", ""] + md_table(
            [
                "rank",
                "#",
                "step",
                "phase",
                "path",
                "time",
                "comm hidden",
                "host idle",
                "launches",
                "median launch",
                "replayed",
                "verdict",
            ],
            [
                [
                    s.rank,
                    step_number_cell(s),
                    markdown_code(s.label),
                    s.phase or "-",
                    markdown_code(s.path) if s.path else "-",
                    ms(s.step_us),
                    pct(s.comm.hidden_fraction),
                    pct(s.host.idle_fraction),
                    s.host.launches,
                    us(s.host.median_launch_us),
                    tri(s.replayed, "yes", "no"),
                    s.verdict.label,
                ]
                for s in d.steps
            ],
        )
        out += ["", "</details>", ""]
        out += ["<details><summary>Every figure, per rank</summary>", ""] + md_table(*figure_table(d))
        out += ["", "</details>", ""]
        out += summary_markdown(d)
        notes = all_notes(d)
        if notes:
            out += ["Notes:", *[f"- {markdown_text(n)}" for n in notes], ""]
        out.append(
            f"<sub>dbo-trace {markdown_text(d.dbo_trace_version)}; microbatches from "
            f"{markdown_text(d.microbatch_source)}, steps from {markdown_text(d.steps_source)}</sub>"
        )
        return "\n".join(out) + "\n"
