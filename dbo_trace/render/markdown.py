"""--markdown: a summary to paste into a pull request."""

from __future__ import annotations

from dbo_trace.analysis.report import Report
from dbo_trace.render import RenderOptions
from dbo_trace.render.document import build_document
from dbo_trace.render.format import (
    PHASE_HEADER,
    RANK_HEADER,
    RANK_LINES,
    ROUND_TRIP_HEADER,
    cross_rank_lines,
    figure_table,
    md_table,
    ms,
    pct,
    phase_cells,
    rank_cells,
    round_trip_cells,
    us,
)

_MARKDOWN_SPECIAL = str.maketrans({ch: "\\" + ch for ch in "\\`*_{}[]()<>#+-.!|~"})


def _inert_markdown(text: str) -> str:
    """A note that names trace strings (process groups) as plain text in Markdown: every character
    Markdown or HTML could read as syntax backslash-escaped, control characters dropped."""
    return "".join(ch for ch in text if ch.isprintable()).translate(_MARKDOWN_SPECIAL)


class MarkdownRenderer:
    name, suffixes, binary = "markdown", (".md",), False

    def render(self, report: Report, options: RenderOptions = RenderOptions()) -> str:
        return self.render_document(build_document(report), options)

    def render_document(self, d: dict, options: RenderOptions = RenderOptions()) -> str:
        """From the JSON document alone: what `report` shows of a review archive's report.json."""
        out = [f"### dbo-trace: **{d['verdict']['label']}**", ""]
        out += [f"- {reason}" for reason in d["verdict"]["reasons"]]
        if options.image:
            out += ["", f"![CPU/GPU timeline of one step]({options.image})"]
        out += [""] + md_table(RANK_HEADER, [rank_cells(r) for r in d["ranks"]])
        out.append("")
        for line_of in RANK_LINES:  # each kind of finding for every rank, then the next kind
            out += [f"- {line}" for r in d["ranks"] if (line := line_of(r))]
        if d["phases"]:
            out += ["", "Per phase (vLLM's step annotations):", ""] + md_table(
                list(PHASE_HEADER), [phase_cells(name, ph) for name, ph in d["phases"].items()]
            )
        if d["cross_rank"]:
            out += ["", f"Across ranks: {d['cross_rank']['summary']}."]
            out += [""] + [f"- {line}" for line in cross_rank_lines(d)[1:]]
            out += [f"- note: {_inert_markdown(note)}" for note in d["cross_rank"].get("notes", [])]
        rt = d["round_trips"]
        if rt:
            out += [""] + md_table(ROUND_TRIP_HEADER, [round_trip_cells(rt)])
            out += [
                "",
                f"Round trips counted from {rt['source']}; layers: {rt['layers'] or 'unknown (pass --layers)'}. "
                "Criterion (with microbatches only): per-microbatch compute >= comm round trip, so the round trip "
                "*could* hide entirely; below 1 at most that share of it could; the hidden share says what did "
                "(docs/analysis.md).",
            ]
        out += ["", "<details><summary>Per step</summary>", ""] + md_table(
            [
                "rank",
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
                    s["rank"],
                    s["label"],
                    s["phase"] or "-",
                    s["path"] or "-",
                    ms(s["step_us"]),
                    pct(s["comm"]["hidden_fraction"]),
                    pct(s["host"]["idle_fraction"]),
                    s["host"]["launches"],
                    us(s["host"]["median_launch_us"]),
                    "yes" if s["replayed"] else "no",
                    s["verdict"]["label"],
                ]
                for s in d["steps"]
            ],
        )
        out += ["", "</details>", ""]
        out += ["<details><summary>Every figure, per rank</summary>", ""] + md_table(*figure_table(d["ranks"]))
        out += ["", "</details>", ""]
        notes = list(dict.fromkeys([n for r in d["ranks"] for n in r["notes"]] + d["warnings"]))
        if notes:
            out += ["Notes:", *[f"- {n}" for n in notes], ""]
        out.append(
            f"<sub>dbo-trace {d['dbo_trace_version']}; microbatches from {d['microbatch_source']}, "
            f"steps from {d['steps_source']}</sub>"
        )
        return "\n".join(out) + "\n"
