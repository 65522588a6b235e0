"""Number formatting and tables shared by the text renderers."""

from __future__ import annotations

from typing import Any

from dbo_trace.render import document


def ms(us: float | None) -> str:
    return "-" if us is None else f"{us / 1000:.2f} ms"


def us(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f} us"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def num(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}".rstrip("0").rstrip(".") if digits else f"{x:.0f}"


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
        "met" if rt["criterion_met"] else "missed",
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
    """A Markdown table, one string per line."""
    row = lambda cells: "| " + " | ".join(str(c) for c in cells) + " |"  # noqa: E731
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
        return "yes" if value else "no"
    return str(value)


def figure_table(ranks: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Every figure of every rank (document.WINDOW_FIGURES), as the JSON holds it: a figure a row."""
    header = ["figure", *(f"rank {r['rank']}" for r in ranks)]
    return header, [[f.name, *(_figure_cell(document.figure_of(r, f)) for r in ranks)] for f in document.WINDOW_FIGURES]


PHASE_HEADER = ("phase", "steps", "median step", "GPU busy", "host idle", "comm hidden", "replayed", "verdict")


def phase_cells(name: str, ph: dict) -> list[str]:
    label = ph["verdict"]["label"] or "/".join(dict.fromkeys(ph["verdict"].get("per_rank", []))) or "-"
    return [
        name,
        str(ph["steps"]),
        ms(ph["median_step_us"]),
        pct(ph["gpu_utilization"]),
        pct(ph["host_idle_fraction"]),
        pct(ph["comm_hidden_fraction"]),
        pct(ph["replayed_kernel_fraction"]),
        label,
    ]


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
    shown = ", ".join(f"{k['name'][:50]} x{k['count']} {ms(k['total_us'])}" for k in top[:most])
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
    from dbo_trace.analysis.exposure import REASON_TEXT

    x = rank.get("exposed_comm_reasons")
    if not x or not x["exposed_us"]:
        return None
    parts = sorted(((t, r) for r, text in REASON_TEXT.items() if (t := x.get(f"{r}_us") or 0) > 0), reverse=True)
    why = "; ".join(f"{ms(t)} {REASON_TEXT[r]}" for t, r in parts)
    return f"rank {rank['rank']} exposed comm {ms(x['exposed_us'])}: {why}"


def cross_rank_lines(d: dict) -> list[str]:
    """The cross-rank view: who the others waited for, who waited for whom, and the notes."""
    cross = d.get("cross_rank")
    if not cross:
        return []
    a = cross.get("alignment")
    how = []
    if a and a.get("method"):
        how = [f"ranks aligned by {a['method']} (expected accuracy {a['accuracy_us']:g} us)"]
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
            f"{who} {ms(late['after_holder_launch_us'])} after {late['holder'][:40]} was launched)"
        )
    if "crowded" in causes:
        c = causes["crowded"]
        parts.append(f"{c['kernels']} found no free SMs beside it ({ms(c['delay_us'])}; an SM-hungry kernel)")
    if "held" in causes:
        c = causes["held"]
        parts.append(f"{c['kernels']} for a reason the trace does not show ({ms(c['delay_us'])})")
    holders = ", ".join(f"{h['name'][:40]} x{h['kernels']}" for h in x["holders"][:2])
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


def short_step_label(label: str) -> str:
    """vLLM's `execute_context_2(1024)_generation_3(3)` as `ctx 2(1024) gen 3(3)`: the same facts, narrower."""
    if label.startswith("execute_"):
        import re

        m = re.match(r"^execute_(?:\d+_)?context_(\d+)\((?:sq)?(\d+)[^)]*\)_generation_(\d+)\((?:sq)?(\d+)", label)
        if m:
            return f"ctx {m.group(1)}({m.group(2)}) gen {m.group(3)}({m.group(4)})"
    return label
