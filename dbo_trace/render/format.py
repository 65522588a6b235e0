"""Number formatting and tables shared by the text renderers."""

from __future__ import annotations

from typing import Any, Callable

from dbo_trace.render import document
from dbo_trace.render.safe import Markdown, markdown_cell, markdown_code


def ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1000:.2f} ms"


def us(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} us"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def num(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}".rstrip("0").rstrip(".") if digits else f"{x:.0f}"


def tri(state: bool | None, yes: str = "met", no: str = "missed") -> str:
    """A three-state figure: true, false, or unknown (null in the JSON: never shown as a negative)."""
    return "unknown" if state is None else yes if state else no


def headline(verdict: dict) -> str:
    """The verdict's first line: its label and the dominant finding (analysis/verdict.py). A document
    from before schema 3 (a review archive) has the label alone."""
    return verdict.get("headline") or verdict["label"] or "-"


def round_trip_cells(rt: dict) -> list[str]:
    """The DBO arithmetic row, as every text renderer shows it (the document's round_trips block)."""
    return [
        ms(rt["step_us"]),
        num(rt["per_step"]),
        num(rt["per_layer"]),
        ms(rt["per_round_trip_us"]),
        ms(rt["comm_per_round_trip_us"]),
        ms(rt["compute_per_round_trip_us"]),
        num(rt["ratio"]),
        tri(rt["criterion_met"]),
    ]


ROUND_TRIP_HEADER = [
    "step",
    "round trips",
    "per layer",
    "per round trip",
    "comm per round trip",
    "compute per microbatch",
    "ratio",
    "criterion",
]


def aligned_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table whose columns are padded to line up, for a terminal that shows it as text."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"

    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)]) + "\n"


def md_table(header: list[str], rows: list[list]) -> list[str]:
    """A Markdown table, one string per line; every cell escaped (safe.markdown_cell: text from input
    stays text, no cell ends early or forges a row)."""
    row = lambda cells: "| " + " | ".join(markdown_cell(c) for c in cells) + " |"  # noqa: E731
    return [row(header), "|---" * len(header) + "|", *(row(r) for r in rows)]


RANK_HEADER = [
    "rank",
    "steps",
    "GPU busy",
    "comm hidden",
    "host-caused GPU idle",
    "graph launches",
    "replayed kernels",
    "verdict",
]


def rank_cells(r: dict) -> list[str]:
    """A rank's summary row in the Markdown and HTML reports (the document's rank block)."""
    return [
        str(r["rank"]),
        str(len(r["steps"])),
        pct(r["gpu"]["utilization"]),
        pct(r["comm"]["hidden_fraction"]),
        pct(r["host"]["idle_fraction"]),
        str(r["graphs"]["launches"]),
        pct(r["graphs"]["replayed_kernel_fraction"]),
        r["verdict"]["label"],
    ]


def _figure_cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return tri(value, "yes", "no")
    return str(value)


def figure_table(ranks: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Every figure of every rank (document.WINDOW_FIGURES), as the JSON holds it: a figure a row."""
    header = ["figure", *(f"rank {r['rank']}" for r in ranks)]
    return header, [[Markdown(f.name), *(_figure_cell(document.figure_of(r, f)) for r in ranks)] for f in document.WINDOW_FIGURES]


PHASE_HEADER = (
    "phase", "steps", "median step", "GPU busy", "host idle", "comm hidden", "replayed", "top host cause", "verdict"
)  # fmt: skip


def phase_cells(name: str, ph: dict, escape: Callable[[str], str] = str, name_width: int | None = None) -> list[str]:
    """escape: what a trace string needs in the output (Markdown); name_width: a cut for the terminal."""
    label = ph["verdict"]["label"] or "/".join(dict.fromkeys(ph["verdict"].get("per_rank", []))) or "-"
    return [
        name,
        str(ph["steps"]),
        ms(ph["median_step_us"]),
        pct(ph["gpu_utilization"]),
        pct(ph["host_idle_fraction"]),
        pct(ph["comm_hidden_fraction"]),
        pct(ph["replayed_kernel_fraction"]),
        top_cause_cell(ph.get("host_causes"), escape, name_width),
        label,
    ]


def top_cause_cell(causes: dict | None, escape: Callable[[str], str] = str, name_width: int | None = None) -> str:
    """The largest thing the host did while the GPU waited, and its share of that idle time."""
    top = causes and causes.get("top")
    if not top:
        return "-"
    return f"{escape(cut(top['name'], name_width))} {pct(top['share'])}"


def cut(text: str, width: int | None) -> str:
    """A long name cut to width, its end marked ("..." where the name was cut on purpose)."""
    return text if width is None or len(text) <= width else text[: max(1, width - 3)] + "..."


def host_cause_lines(d: dict) -> list[str]:
    """Under a host-bound verdict: what the host did while the GPU waited, per host-bound phase
    (the run's own line where there are no phases)."""
    if d["verdict"]["label"] != "host-bound":
        return []
    lines = [
        ph["host_causes"]["line"]
        for ph in d["phases"].values()
        if ph.get("host_causes") and "host-bound" in (ph["verdict"]["label"], *ph["verdict"].get("per_rank", []))
    ]
    run = d.get("host_causes")
    return lines or ([run["line"]] if run and run.get("line") else [])


def time_line(rank: dict) -> str:
    """Where one rank's window went, bucket by bucket (they add up to the window)."""
    t, w = rank["time"], rank["time"]["window_us"] or 0.0

    def share(key: str) -> str:
        return pct(t[key] / w) if w else "-"

    host = rank["host_test"]
    return (
        f"rank {rank['rank']} time ({ms(w)} window): compute {share('compute_us')}, exposed comm "
        f"{share('comm_exposed_us')}, copy {share('copy_us')}, GPU idle waiting on the host {share('host_idle_us')}, "
        f"idle waiting on a dependency {share('other_idle_us')}; host-bound test: {pct(host['fraction'])} ({host['basis']})"
    )


def contention_line(rank: dict) -> str | None:
    """What overlap cost on one rank, in words (docs/analysis.md, "What overlap costs")."""
    x = rank.get("contention")
    if not x:
        return None
    parts = []
    for kind in ("compute", "comm"):
        slow, n = x[f"{kind}_slowdown"], x[f"{kind}_kernels_overlapped"]
        if slow is not None:
            transfer = x.get("comm_transfer_slowdown") if kind == "comm" else None
            split = "" if transfer is None else f"; their transfers {100 * transfer:+.0f}%, the rest waiting for a peer rank"
            parts.append(f"{kind} kernels {100 * slow:+.0f}% ({n} overlapped{split})")
    cost = (
        "; ".join(parts) + " against their time alone"
        if parts
        else "no kernel ran both alone and beside the other microbatch, so no slowdown to measure"
    )
    return (
        f"rank {rank['rank']} overlap cost: {cost}; overlap saved {ms(x['saved_us'])} "
        f"(serial estimate {ms(x['serial_estimate_us'])}, GPU busy {ms(x['busy_us'])})"
    )


def top_compute_line(rank: dict, most: int = 3) -> str | None:
    top = rank.get("top_compute_kernels") or []
    if not top:
        return None
    shown = ", ".join(f"{cut(k['name'], 50)} x{k['count']} {ms(k['total_us'])}" for k in top[:most])
    return f"rank {rank['rank']} top compute kernels: {shown}"


def comm_kernels_line(rank: dict, most: int = 3) -> str:
    found = rank.get("comm_kernel_names") or []
    if not found:
        return f"rank {rank['rank']} communication kernels: none recognised"
    shown = ", ".join(f"{k['name'][:60]} x{k['count']}" for k in found[:most])
    more = f" and {len(found) - most} more" if len(found) > most else ""
    return f"rank {rank['rank']} communication kernels: {shown}{more}"


def exposure_line(rank: dict) -> str | None:
    """Why one rank's comm was exposed, the largest causes first (docs/analysis.md)."""
    from dbo_trace.analysis.attribution import SOURCE_NONE
    from dbo_trace.analysis.exposure import REASON_TEXT, REASON_TEXT_NO_UBATCH

    x = rank.get("exposed_comm_reasons")
    if not x or not x["exposed_us"]:
        return None
    text = REASON_TEXT_NO_UBATCH if rank.get("microbatch_source") == SOURCE_NONE else REASON_TEXT
    parts = sorted(((t, r) for r in text if (t := x.get(f"{r}_us") or 0) > 0), reverse=True)
    why = "; ".join(f"{ms(t)} {text[r]}" for t, r in parts)
    return f"rank {rank['rank']} exposed comm {ms(x['exposed_us'])}: {why}"


def cross_rank_lines(d: dict) -> list[str]:
    """The cross-rank view: who the others waited for, who waited for whom, and the notes."""
    cross = d.get("cross_rank")
    if not cross:
        return []
    a = cross.get("alignment")
    how = []
    if a and a.get("method"):
        accuracy = "" if a.get("accuracy_us") is None else f" (expected accuracy {a['accuracy_us']:g} us)"
        how = [f"ranks aligned by {a['method']}{accuracy}"]
    return [cross["summary"], *how, *cross.get("lines", [])]


def held_back_line(rank: dict) -> str | None:
    """Comm kernels that waited for the other microbatch's compute to end, and why (docs/analysis.md)."""
    x = rank.get("held_back_comm")
    if not x or not x["kernels"]:
        return None
    causes = x["by_cause"]
    parts = []
    if "late_record" in causes:
        c, late = causes["late_record"], x["late_record_example"]
        who = f"ub{late['ubatch']}'s thread" if late["ubatch"] >= 0 else f"thread {late['thread']}"
        parts.append(
            f"{c['kernels']} waited on an event recorded too late ({ms(c['delay_us'])}; e.g. {late['record_call']} by "
            f"{who} {ms(late['after_holder_launch_us'])} after {cut(late['holder'], 40)} was launched)"
        )
    if "crowded" in causes:
        c = causes["crowded"]
        parts.append(f"{c['kernels']} found no free SMs beside it ({ms(c['delay_us'])}; an SM-hungry kernel)")
    if "held" in causes:
        c = causes["held"]
        parts.append(f"{c['kernels']} for a reason the trace does not show ({ms(c['delay_us'])})")
    holders = ", ".join(f"{cut(h['name'], 40)} x{h['kernels']}" for h in x["holders"][:2])
    return (
        f"rank {rank['rank']} comm held back: {x['kernels']} of {x['comm_kernels_examined']} comm kernels were ready "
        f"beside the other microbatch's compute but started as it ended, {ms(x['delay_us'])} of delay "
        f"(median {ms(x['median_delay_us'])}): " + "; ".join(parts) + f". Held by: {holders}"
    )


# The one-line findings of a rank, in the order every text renderer prints them (None: nothing to say).
RANK_LINES = (time_line, contention_line, exposure_line, held_back_line, comm_kernels_line, top_compute_line)


OPERATION_HEADER = ("microbatch", "op", "steps", "median time", "hidden", "median exposed", "exposed mostly because")


def operation_cells(op: dict) -> list[str]:
    from dbo_trace.analysis.exposure import REASON_SHORT

    return [
        "-" if op["ubatch"] < 0 else f"ub{op['ubatch']}",
        str(op["index"] + 1),
        str(op["steps"]),
        ms(op["median_us"]),
        pct(op["hidden_fraction"]),
        ms(op["median_exposed_us"]),
        "-" if op["reason"] is None else REASON_SHORT[op["reason"]],
    ]


def step_number_cell(step: dict) -> str:
    """A step's number, what --step takes ("-" in a document from before schema 3)."""
    return "-" if step.get("number") is None else str(step["number"])


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


KERNEL_HEADER = ("kernel", "count", "total", "mean", "median", "min", "max", "of GPU time")
CPU_RANGE_HEADER = ("CPU range", "kind", "count", "total", "host idle", "of host idle")
SPREAD_HEADER = ("phase", "steps", "median", "p90", "p99", "max")


def kernel_cells(row: dict, escape: Callable[[str], str] = str, name_width: int | None = None) -> list[str]:
    return [
        escape(cut(row["name"], name_width)),
        str(row["count"]),
        ms(row["total_us"]),
        us(row["mean_us"]),
        us(row["median_us"]),
        us(row["min_us"]),
        us(row["max_us"]),
        pct(row["share"]),
    ]


def cpu_range_cells(row: dict, escape: Callable[[str], str] = str, name_width: int | None = None) -> list[str]:
    return [
        escape(cut(row["name"], name_width)),
        row["kind"],
        str(row["count"]),
        ms(row["total_us"]),
        ms(row["host_idle_us"]),
        pct(row["share"]),
    ]


def spread_cells(name: str, ph: dict) -> list[str] | None:
    x = ph.get("step_us")
    if not x:
        return None
    return [name, str(ph["steps"]), ms(x["median"]), ms(x["p90"]), ms(x["p99"]), ms(x["max"])]


MD_KERNEL_ROWS = 20
MD_CPU_RANGE_ROWS = 20


def summary_markdown(d: dict) -> list[str]:
    """Step-time spread per phase, and per rank the kernel and CPU-range summaries (names whole, escaped)."""
    out: list[str] = []
    spreads = [row for name, ph in d["phases"].items() if (row := spread_cells(name, ph))]
    if spreads:
        out += ["Step time per phase:", ""] + md_table(list(SPREAD_HEADER), spreads) + [""]
    for r in d["ranks"]:
        k = r.get("kernel_summary")
        if k and k["rows"]:
            shown = k["rows"][:MD_KERNEL_ROWS]
            out += [
                f"<details><summary>Rank {r['rank']} kernels: {len(shown)} of {k['names']} names by total time "
                f"({k['kernels']} kernels, {ms(k['total_us'])})</summary>",
                "",
            ]
            out += md_table(list(KERNEL_HEADER), [kernel_cells(row, markdown_code) for row in shown]) + ["", "</details>", ""]
        ranges = r.get("cpu_range_summary")
        if ranges:
            shown = ranges[:MD_CPU_RANGE_ROWS]
            out += [f"<details><summary>Rank {r['rank']} CPU ranges by the host-caused GPU idle they explain</summary>", ""]
            out += md_table(list(CPU_RANGE_HEADER), [cpu_range_cells(row, markdown_code) for row in shown])
            out += ["", "</details>", ""]
    return out
