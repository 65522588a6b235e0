"""--markdown: a summary to paste into a pull request."""

from __future__ import annotations

from dbo_trace.analysis.model import Report
from dbo_trace.render.base import RenderOptions
from dbo_trace.render.document.pipeline import PipelineBlock
from dbo_trace.render.document import ReportDocument, RoundTripsBlock, StepBlock, build_document
from dbo_trace.render.format import (
    label_of,
    GLOSSARY,
    disaggregated_lines,
    roles_lines,
    profiler_lines,
    LAYER_HEADER,
    PIPELINE_LAYER_HEADER,
    pipeline_layer_cells,
    LAYER_OPS_HEADER,
    OPERATION_HEADER,
    PHASE_HEADER,
    RANK_HEADER,
    RANK_LINES,
    ROUND_TRIP_HEADER,
    all_notes,
    comm_layers_of,
    cross_rank_lines,
    dbo_arithmetic_applies,
    figure_table,
    headline,
    next_step_line,
    pays_line,
    pipeline_line,
    predicted_line,
    reason_lines,
    host_cause_lines,
    host_stack_lines,
    host_stack_rows,
    STACK_HEADER,
    layer_cells,
    layer_ops_cells,
    ledger_lines,
    ledger_of,
    md_table,
    only_layer,
    operation_cells,
    pct,
    phase_cells,
    rank_cells,
    hidden_cell,
    disaggregated_ranks,
    round_trip_cells,
    step_number_cell,
    step_time_cell,
    step_verdict_cell,
    summary_markdown,
    tri,
    us,
    what_if_lines,
)
from dbo_trace.render.safe import markdown_code, markdown_html, markdown_text


def picture_note(image: str, base: str = "file") -> list[str]:
    """Where the picture is and how it gets into a comment: a GitHub comment cannot show a file from
    the reviewer's disk (a link to a local path is a broken image), so it says to attach it instead.
    base: "file", the path is relative to this Markdown's folder (written with -o, or in an
    archive); "cwd", relative to the folder dbo-trace ran in (Markdown on stdout: a redirect's file
    is unknown to the command, so the note cannot claim to be relative to it)."""
    name = markdown_code(image)
    where = "this Markdown file's folder" if base == "file" else "the folder dbo-trace ran in, not to this file"
    return [
        f"> **Picture to attach:** the CPU/GPU timeline of one step is the file {name} (its path is relative to "
        f"{where}). A GitHub comment cannot show a file from your disk: drag {name} into "
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


# Rows of the per-step table: a run of 100,000 steps made 10 MB of Markdown nobody reads (a GitHub
# comment holds 65,536 characters). The rest are summed up under it; --json lists every step.
MD_STEP_ROWS = 200


def _per_rank_rows(d: ReportDocument) -> int:
    return max(1, MD_STEP_ROWS // max(1, len(d.ranks)))


def shown_steps(d: ReportDocument) -> list[StepBlock]:
    """Every step, or past MD_STEP_ROWS each rank's first (an equal share of the rows)."""
    if len(d.steps) <= MD_STEP_ROWS:
        return d.steps
    return [s for r in d.ranks for s in r.steps[: _per_rank_rows(d)]]


def steps_left_out(d: ReportDocument) -> str:
    """The line under a per-step table cut at MD_STEP_ROWS: what it shows of how many, and where the rest are."""
    per_rank = "; ".join(f"rank {r.rank}: {len(r.steps):,}" for r in d.ranks)
    return (
        f"*Each rank's first {_per_rank_rows(d)} steps of {len(d.steps):,} ({per_rank}); the ranks' medians are in "
        "the tables above. `--json` lists every step; `--step` takes a number, a label, median or slowest.*"
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
            out += md_table(list(LAYER_HEADER), [layer_cells(row) for row in ledger.layers], "hand-overs") + ["", "</details>"]
    return out


class MarkdownRenderer:
    name, suffixes, binary = "markdown", (".md",), False

    def render(self, report: Report, options: RenderOptions = RenderOptions()) -> str:
        return self.render_document(build_document(report, lazy_steps=True), options)

    def render_document(self, d: ReportDocument, options: RenderOptions = RenderOptions()) -> str:
        """From the document alone: what `report` shows of a review archive's report.json."""
        d = only_layer(d, options.layer)
        label = label_of(d.verdict)
        out = [f"### dbo-trace: **{markdown_text(label)}**{markdown_text(headline(d.verdict)[len(label) :])}", ""]
        if (pays := pays_line(d.verdict)) is not None:
            out += [f"**Does DBO pay:** {markdown_text(pays)}", ""]
        if (predicted := predicted_line(d)) is not None:
            out += [f"**DBO's effect predicted:** {markdown_text(predicted)}", ""]
        if (step := next_step_line(d.verdict)) is not None:
            out += [f"**Next step:** {markdown_text(step)}", ""]
        out += [f"- {markdown_text(reason)}" for reason in reason_lines(d.verdict)]
        out += [f"- {markdown_text(line)}" for line in (pipeline_line(d),) if line is not None]
        out += [f"- {markdown_text(line)}" for line in profiler_lines(d)]  # beside the verdict it may qualify
        out += [f"- host time: {markdown_text(line)}" for line in host_cause_lines(d)]
        out += [f"- {markdown_text(line)}" for line in host_stack_lines(d)]
        if options.image:
            out += ["", *picture_note(options.image, options.image_base)]
        afd = disaggregated_ranks(d)
        out += [""] + md_table(RANK_HEADER, [rank_cells(r) for r in d.ranks], disaggregated=bool(afd))
        out.append("")
        for line_of in RANK_LINES:  # each kind of finding for every rank, then the next kind
            out += [f"- {markdown_text(line)}" for r in d.ranks if (line := line_of(r))]
        for title, rows in host_stack_rows(d):  # folded, like the per-step table
            cells = [[markdown_code(c) if i < 4 and c != "-" else c for i, c in enumerate(row)] for row in rows]
            out += ["", f"<details><summary>{markdown_html(title)}</summary>", ""]  # an HTML block: no Markdown escapes
            out += md_table(list(STACK_HEADER), cells) + ["", "</details>"]
        for r in d.ranks:  # long: folded, like the per-step table
            ops = r.comm_operations
            if ops:
                out += ["", f"<details><summary>Rank {r.rank} comm operations ({len(ops)}: per microbatch, in step "
                        "order; time: median over steps; hidden, exposed: shares of all its time)</summary>", ""]  # fmt: skip
                out += md_table(list(OPERATION_HEADER), [operation_cells(op) for op in ops]) + ["", "</details>"]
            layers = comm_layers_of(r)
            if layers:
                out += ["", f"Rank {r.rank} comm operations per layer (both microbatches; layers alike grouped):", ""]
                out += md_table(list(LAYER_OPS_HEADER), [layer_ops_cells(row) for row in layers])
        if d.phases:
            out += ["", "Per phase (vLLM's step annotations; the steady steps' figures, stalls counted apart):", ""] + md_table(
                list(PHASE_HEADER),
                [phase_cells(name, ph, markdown_code, disaggregated=bool(afd)) for name, ph in d.phases.items()],
                disaggregated=bool(afd),
            )
        if d.cross_rank is not None:
            out += ["", f"Across ranks: {markdown_text(d.cross_rank.summary)}."]
            out += [""] + [f"- {markdown_text(line)}" for line in cross_rank_lines(d)[1:]]
            out += [f"- note: {markdown_text(note)}" for note in d.cross_rank.notes]
        if d.disaggregated is not None or d.roles is not None:
            lines = roles_lines(d) + (disaggregated_lines(d.disaggregated) if d.disaggregated is not None else [])
            out += [""] + [f"- {markdown_text(line)}" for line in lines]
        rt = d.round_trips
        if rt is not None and dbo_arithmetic_applies(d):
            out += [""] + md_table(ROUND_TRIP_HEADER, [round_trip_cells(rt)])
            out += ["", round_trip_note(rt, "*could*", markdown_text(rt.source, line_start=False))]
        out += ledger_markdown(d)
        if options.layer is not None and isinstance(d.pipeline, PipelineBlock) and d.pipeline.layers_detail:
            out += ["", f"Pipeline, layer {options.layer} (us, medians over the steady steps):", ""]
            out += md_table(list(PIPELINE_LAYER_HEADER), [pipeline_layer_cells(row) for row in d.pipeline.layers_detail])
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
                    step_time_cell(s),
                    hidden_cell(s.comm.hidden_fraction, s.rank in afd),
                    pct(s.host.idle_fraction),
                    s.host.launches,
                    us(s.host.median_launch_us),
                    tri(s.replayed, "yes", "no"),
                    step_verdict_cell(s),
                ]
                for s in shown_steps(d)
            ],
            "step",
            disaggregated=bool(afd),
        )
        if len(d.steps) > MD_STEP_ROWS:
            out += ["", steps_left_out(d)]
        out += ["", "</details>", ""]
        out += ["<details><summary>Every figure, per rank</summary>", ""] + md_table(*figure_table(d))
        out += ["", "</details>", ""]
        out += summary_markdown(d)
        notes = all_notes(d)
        if notes:
            out += ["Notes:", *[f"- {markdown_text(n)}" for n in notes], ""]
        out.append(
            f"<sub>dbo-trace {markdown_text(d.dbo_trace_version)}; microbatches from "
            f"{markdown_text(d.microbatch_source)}, steps from {markdown_text(d.steps_source)}; every column and term: "
            f"`{GLOSSARY}` in dbo-trace's repository</sub>"
        )
        return "\n".join(out) + "\n"
