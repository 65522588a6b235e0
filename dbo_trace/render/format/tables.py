"""The tables' headers and the keys to their abbreviated columns, and a table laid out (Markdown, or aligned for a terminal)."""

from __future__ import annotations

from typing import Any, Sequence

from dbo_trace.render.format.numbers import pct
from dbo_trace.render.safe import markdown_cell


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


GLOSSARY = "docs/glossary.md"  # every column and term of the report, explained

# What an abbreviated column name means, for the one-line key under each table that has one (the
# glossary has every column). A table's own meaning for a name comes first (KEYS_BY_TABLE).
COLUMN_KEYS = {
    "#": "step number (--timeline FILE --step #)",
    "busy": "GPU busy",
    "comm": "comm kernel time",
    "hidden": "comm under compute",
    "exposed": "comm not under compute",
    "host": "host-caused GPU idle over the row's whole time (a rank's verdict may test time in steps only)",
    "replays": "graph launches (kernels replayed)",
    "graph": "graph replayed",
    "time": "step period",
    "median step": "steady steps' median period",
    "host idle": "host-caused GPU idle",
    "comm hidden": "comm under compute",
    "replayed": "kernels replayed",
    "op": "place in the step (layer, role)",
    "ops": "ops per layer",
    "median time": "comm kernel time",
    "median exposed": "not under compute",
    "per round trip": "period / round trips",
    "ratio": "compute / comm (>= 1 meets the criterion)",
    "p90": "90th percentile",
    "p99": "99th",
    "of GPU time": "share of kernel time",
    "of host idle": "share of it",
    "of idle": "share of it",
    "hand-overs": "yields taken over",
}
KEYS_BY_TABLE = {
    "rank": {"launch": "median launch call", "kernel": "median kernel"},
    "step": {"launch": "launch calls", "launches": "launch calls", "replayed": "graph replayed"},
    "hand-overs": {"median": "median yield to the other's resume"},
}


# A disaggregated (AFD) rank's sends and receives run on its compute stream: no comm kernel runs under
# compute, and what DBO hides there is the round trip. Its tables' hidden cells are a dash, and their key says so.
DISAGGREGATED_HIDDEN = (
    "comm under compute (-: a disaggregated rank, its sends and receives on the compute stream; "
    "its hidden is the round trips' time under the other microbatch's compute, in the verdict)"
)


def hidden_cell(fraction: float | None, disaggregated: bool) -> str:
    """A table's hidden cell: comm under compute, or a dash on a disaggregated rank (DISAGGREGATED_HIDDEN)."""
    return "-" if disaggregated else pct(fraction)


def legend(header: Sequence[str], table: str | None = None, disaggregated: bool = False) -> str | None:
    """The key to a table's abbreviated columns, one line (None where it has none); docs/glossary.md
    has every column. disaggregated: a row is a disaggregated rank's (its hidden cells a dash)."""
    own = dict(KEYS_BY_TABLE.get(table or "", {}))
    if disaggregated:
        own |= {"hidden": DISAGGREGATED_HIDDEN, "comm hidden": DISAGGREGATED_HIDDEN}
    parts = [f"{h}: {own.get(h) or COLUMN_KEYS[h]}" for h in header if h in own or h in COLUMN_KEYS]
    return "key: " + "; ".join(parts) if parts else None


def md_table(header: list[str], rows: list[list[Any]], table: str | None = None, disaggregated: bool = False) -> list[str]:
    """A Markdown table, one string per line; every cell escaped (safe.markdown_cell: text from input
    stays text, no cell ends early or forges a row); under it, after a blank line (a line next to a
    table is a row of it), the key to its abbreviated columns."""

    def row(cells: list[Any]) -> str:
        return "| " + " | ".join(markdown_cell(c) for c in cells) + " |"

    key = legend(header, table, disaggregated)
    return [row(header), "|---" * len(header) + "|", *(row(r) for r in rows), *(["", f"<sub>{key}</sub>"] if key else [])]


RANK_HEADER = [
    "rank",
    "steps",
    "GPU busy",
    "comm hidden",
    "host-caused GPU idle (window)",
    "graph launches",
    "replayed kernels",
    "verdict",
]


PHASE_HEADER = (
    "phase", "steps", "median step", "GPU busy", "host idle", "comm hidden", "replayed", "top host cause", "verdict"
)  # fmt: skip


STACK_HEADER = ("cause", "project frame", "library call", "innermost library frame", "GPU idle", "of idle")


OPERATION_HEADER = ("microbatch", "op", "steps", "median time", "hidden", "exposed", "exposed mostly because")


WINDOW_SHOWN = 0.05  # a step's window is shown beside its period where they differ by this share


KERNEL_HEADER = ("kernel", "count", "total", "mean", "median", "min", "max", "of GPU time")
CPU_RANGE_HEADER = ("CPU range", "kind", "count", "total", "host idle", "of host idle")
SPREAD_HEADER = ("phase", "steps", "median", "p90", "p99", "max")


MD_KERNEL_ROWS = 20
MD_CPU_RANGE_ROWS = 20


LAYER_HEADER = ("layer", "hand-overs", "median", "p90", "per step")


# --layer N on an AFD arm: that layer's visits per microbatch (the pipeline's, us, medians over the steady steps)
PIPELINE_LAYER_HEADER = (
    "layer", "microbatch", "visits", "attention", "hop out", "FFN", "hop back", "round trip", "FFN waited", "attn waited",
)  # fmt: skip


LAYER_OPS_HEADER = ("layers", "ops", "median time", "hidden", "exposed", "exposed mostly because")
