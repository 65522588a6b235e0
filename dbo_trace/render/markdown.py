"""--markdown: a summary to paste into a pull request."""

from __future__ import annotations

from dbo_trace.analysis.report import Report
from dbo_trace.render.document import build_document
from dbo_trace.render.format import ROUND_TRIP_HEADER, md_table, ms, pct, round_trip_cells, us


class MarkdownRenderer:
    def __init__(self, image: str | None = None):
        self.image = image  # a timeline picture to link, relative to where the Markdown will live

    def render(self, report: Report) -> str:
        d = build_document(report)
        out = [f"### dbo-trace: **{d['verdict']['label']}**", ""]
        out += [f"- {reason}" for reason in d["verdict"]["reasons"]]
        if self.image:
            out += ["", f"![CPU/GPU timeline of one step]({self.image})"]
        out += [""] + md_table(
            ["rank", "steps", "GPU busy", "comm hidden", "host-caused GPU idle", "graph launches", "replayed kernels", "verdict"],
            [
                [
                    r["rank"],
                    len(r["steps"]),
                    pct(r["gpu"]["utilization"]),
                    pct(r["comm"]["hidden_fraction"]),
                    pct(r["host"]["idle_fraction"]),
                    r["graphs"]["launches"],
                    pct(r["graphs"]["replayed_kernel_fraction"]),
                    r["verdict"]["label"],
                ]
                for r in d["ranks"]
            ],
        )
        if d["cross_rank"]:
            out += ["", f"Across ranks: {d['cross_rank']['summary']}."]
        rt = d["round_trips"]
        if rt:
            out += [""] + md_table(ROUND_TRIP_HEADER, [round_trip_cells(rt)])
            out += [
                "",
                f"Round trips counted from {rt['source']}; layers: {rt['layers'] or 'unknown (pass --layers)'}. "
                "Criterion: per-microbatch compute >= comm round trip, so the round trip can hide entirely; "
                "below 1 at most that share of it hides (docs/analysis.md).",
            ]
        out += ["", "<details><summary>Per step</summary>", ""] + md_table(
            ["rank", "step", "path", "time", "comm hidden", "host idle", "launches", "median launch", "replayed", "verdict"],
            [
                [
                    s["rank"],
                    s["label"],
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
        notes = [n for r in d["ranks"] for n in r["notes"]] + d["warnings"]
        if notes:
            out += ["Notes:", *[f"- {n}" for n in notes], ""]
        att = d["ranks"][0]["attribution"]
        out.append(
            f"<sub>dbo-trace {d['dbo_trace_version']}; microbatches from {att['ubatch_source']}, "
            f"steps from {att['step_source']}</sub>"
        )
        return "\n".join(out) + "\n"
