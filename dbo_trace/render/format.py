"""Number formatting and tables shared by the text renderers."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import msgspec
from msgspec import UnsetType

from dbo_trace.analysis.live import MICROBATCHED_PATHS
from dbo_trace.analysis.afd.gpu_sharing import SLICED_MIN_US, SLICED_RATIO
from dbo_trace.render.document import (
    DisaggregatedBlock,
    ProfilerBlock,
    CommOperation,
    CpuRange,
    HostCausesBlock,
    KernelRow,
    NamedShare,
    NextStepBlock,
    PaysBlock,
    PhaseBlock,
    PhaseVerdict,
    RankBlock,
    ReasonBlock,
    ReportDocument,
    RoundTripsBlock,
    StallBlock,
    StepBlock,
    VerdictBlock,
    figure_rows,
)
from dbo_trace.render.ledger import LaunchShapeBlock, LayerHandoverRow, LayerOpsRow, LedgerBlock, SmEvidenceBlock
from dbo_trace.render.safe import Markdown, markdown_cell, markdown_code
from dbo_trace.render.names import display_names
from dbo_trace.render.notes import LINE_NAMES
from dbo_trace.render.wording import counted


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


def headline(verdict: VerdictBlock | PhaseVerdict) -> str:
    """The verdict's first line: its label and the dominant finding (analysis/verdict/decision.py)."""
    return verdict.headline or verdict.label or "-"


def reason_lines(verdict: VerdictBlock | PhaseVerdict) -> list[str]:
    """The verdict's reasons in words (a document before version 6 holds the words alone)."""
    return [r if isinstance(r, str) else r.text for r in verdict.reasons]


def next_step_line(verdict: VerdictBlock | PhaseVerdict) -> str | None:
    """The verdict's next step (absent from documents before version 6)."""
    n = verdict.next_step
    return n.text if isinstance(n, NextStepBlock) else None


def pays_line(verdict: VerdictBlock | PhaseVerdict) -> str | None:
    """Does DBO pay, where the verdict answers it (a microbatched run's or rank's, version 8 on)."""
    pays = getattr(verdict, "pays", None)
    return pays.text if isinstance(pays, PaysBlock) else None


def borderline(verdict: VerdictBlock | PhaseVerdict) -> bool:
    """A share decided the label within 2 points of its line (said only by documents of version 6 on)."""
    return any(isinstance(r, ReasonBlock) and r.borderline for r in verdict.reasons)


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


def disaggregated_lines(b: DisaggregatedBlock) -> list[str]:
    """An AFD attention rank's round trips in words (the document's disaggregated block)."""
    per = f"{num(b.per_step)} per step" + (f" ({num(b.per_layer)} per layer)" if b.per_layer is not None else "")
    told = ", ".join(f"{k}: {v} steps" for k, v in b.microbatches_told.items())
    lag = b.host_lag_total_us if isinstance(b.host_lag_total_us, float) else 0.0
    less = " less the host's lag" if lag > 0 else ""
    first = (
        f"disaggregated round trips (send start to its receive's end): {b.round_trips}, {per}, median {ms(b.median_us)}; "
        f"{pct(b.hidden_share)} of their time{less} under the other microbatch's compute; microbatches by {told}"
    )
    lines = [first]
    if lag > 0 and isinstance(b.host_lag_median_us, float):
        op = b.lag_op if isinstance(b.lag_op, NamedShare) else None
        held = f"; through {pct(op.share)} of it the CPU op {op.name} ran" if op is not None else ""
        lines.append(
            f"the host's lag (the send kernel's end to the receive kernel's launch call): {ms(b.host_lag_median_us)} a "
            f"round trip (median), {pct(lag / b.total_us if b.total_us > 0 else None)} of the round trips' time{held}; "
            "the criterion and the hidden share are of the rest"
        )
    if b.parts is not None:
        ffn = f"FFN compute and queueing {ms(b.parts.ffn_us)}"
        if b.parts.ffn_compute_us is not None:
            ffn = f"FFN compute {ms(b.parts.ffn_compute_us)}, FFN queueing or waiting {ms(b.parts.ffn_queue_us)}"
        late = ""
        if isinstance(b.parts.late_us, float):
            late = f" ({ms(b.parts.late_us)} of it the FFN's answer waiting for the attention to post its receive)"
        lines.append(
            f"parts (medians over the {b.parts.matched} matched to the FFN's kernels): transfer {ms(b.parts.transfer_us)}"
            f"{late}, {ffn}, attention waiting in its receive {ms(b.parts.wait_us)}"
        )
    else:
        lines.append(f"no FFN trace: the receive kernel ({ms(b.receive_kernel_us)} median) holds the wait and the FFN's time")
    if b.criterion_ratio is not None:
        lines.append(
            f"per-microbatch compute {ms(b.compute_per_microbatch_us)} per layer against a round trip's exposed "
            f"{ms(b.median_exposed_us)} (ratio {num(b.criterion_ratio)}, medians): criterion {tri(b.criterion_met)}"
        )
    return lines


def roles_lines(d: ReportDocument) -> list[str]:
    """A disaggregated run's roles: each rank's and where it came from, both roles' figures over the
    attention's steps, and the round trip against its transfer (the document's roles block)."""
    roles = d.roles
    if roles is None:
        return []
    ranks = [f"rank {r.rank} {r.role}" + (f" (from {r.role_source})" if r.role_source else "") for r in d.ranks if r.role]
    lines = ["roles: " + "; ".join(ranks)] if ranks else []
    p = roles.pair
    if p is not None:
        lines.append(
            f"both roles over the attention's {p.steps} steps: FFN compute {ms(p.ffn_compute_per_step_us)} per step, "
            f"{ms(p.ffn_compute_per_round_trip_us)} per round trip"
            + (f" (FFN queueing or waiting {ms(p.ffn_queue_per_round_trip_us)})" if p.ffn_queue_per_round_trip_us is not None else "")
            + f"; GPU busy: attention {pct(p.attention_busy)}, FFN {pct(p.ffn_busy)}, both at once {pct(p.both_busy)}"
        )
    ts = roles.time_slicing
    if ts is not None and not ts.sliced:  # where sliced, the verdict's first reason says it
        mps = {"answered": "MPS answered", "not running": "MPS not running"}.get(roles.mps_daemon or "", "MPS not verified")
        one = "one GPU" if roles.shared_gpu else ("not one GPU" if roles.shared_gpu is False else "one GPU or not: not known")
        less = f", less the FFN's {ms(ts.ffn_compute_us)} compute," if ts.ffn_compute_us is not None else ""
        lines.append(
            f"GPU sharing: {one}, {mps}; a round trip's receive waits {ms(ts.receive_us)}{less} against a {us(ts.send_us)} "
            f"send: {num(ts.ratio, 1)} times its transfer, no sign of time-slicing (that shows as a wait of "
            f"{SLICED_RATIO:g} times the transfer and over {ms(SLICED_MIN_US)})"
        )
    return lines


def profiler_lines(d: ReportDocument) -> list[str]:
    """The profiler's own cost, where the recording has timed repeats (where it is large, what that
    means for the verdict is the verdict's reason profiler_overhead)."""
    p = d.profiler
    if not isinstance(p, ProfilerBlock) or p.profiled_period_us is None:
        return []
    basis = p.basis if isinstance(p.basis, str) else "TPOT"  # before version 8: TPOT
    unprofiled = p.unprofiled_itl_ms if basis == "ITL" and isinstance(p.unprofiled_itl_ms, float) else p.unprofiled_tpot_ms
    if unprofiled is None:
        return []
    steps = "decode steps" if p.steps_of == "decode" else "steps"
    period = f"the profiled {steps}' period {ms(p.profiled_period_us)} (median of {p.periods}, start to start)"
    against = f"{unprofiled:.2f} ms unprofiled ({basis}, mean of {p.repeats} repeats' medians, {p.timed_by})"
    if p.overhead is not None:
        return [f"profiler overhead {100 * p.overhead:+.0f}%: {period} against {against}"]
    if p.tpot_prefills is True:
        return [
            f"profiler overhead not measured: the repeats have no ITL median, and their TPOT ({unprofiled:.2f} ms) "
            "holds the prefills that interleave as requests arrive (or may: the load is not known), where "
            f"{period} is a decode step's; not like with like"
        ]
    if p.below is True or p.profiled_period_us / 1000.0 < unprofiled:
        return [
            f"profiler overhead not measured: {period} is below {against}; they are not like with like"
            + (" (TPOT holds the prefills that interleave as requests arrive)" if basis == "TPOT" else "")
        ]
    return []


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


def disaggregated_ranks(d: ReportDocument) -> set[int]:
    """The ranks with a role in a disaggregated run (attention or FFN)."""
    return {r.rank for r in d.ranks if r.role is not None}


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
        r.verdict.label,
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


PHASE_HEADER = (
    "phase", "steps", "median step", "GPU busy", "host idle", "comm hidden", "replayed", "top host cause", "verdict"
)  # fmt: skip


def per_rank_labels(v: PhaseVerdict) -> list[str]:
    """A phase's verdict per rank, where the phase has no verdict of its own (else none)."""
    return [] if isinstance(v.per_rank, UnsetType) else v.per_rank


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


def cut(text: str, width: int | None) -> str:
    """A long name cut to width, its end marked ("..." where the name was cut on purpose)."""
    return text if width is None or len(text) <= width else text[: max(1, width - 3)] + "..."


def host_cause_lines(d: ReportDocument) -> list[str]:
    """Under a host-bound verdict: what the host did while the GPU waited, per host-bound phase
    (the run's own line where there are no phases)."""
    if d.verdict.label != "host-bound":
        return []
    lines = [
        ph.host_causes.line
        for ph in d.phases.values()
        if ph.host_causes is not None and "host-bound" in (ph.verdict.label, *per_rank_labels(ph.verdict))
    ]
    run = d.host_causes
    shown = [line for line in lines if line is not None] or ([run.line] if run is not None and run.line else [])
    inner = _innermost_line(run) if run is not None else None
    return shown + ([inner] if shown and inner else [])


def _innermost_line(c: HostCausesBlock) -> str | None:
    """The CPU operators' time by the innermost operator, where that names something the top-level
    ones do not (a compile inside a custom op, the aten op a wrapper spends its time in)."""
    inner = [] if isinstance(c.cpu_ops_innermost, UnsetType) else c.cpu_ops_innermost
    shown = [x for x in inner[:LINE_NAMES] if (x.share or 0.0) >= 0.005]
    if not shown or [x.name for x in shown] == [x.name for x in c.cpu_ops[: len(shown)]]:
        return None
    items = ", ".join(f"{x.name} {pct(x.share)}" for x in shown)
    return f"the CPU operators' time by the innermost operator running (inside the top-level ones): {items}"


def host_stack_lines(d: ReportDocument) -> list[str]:
    """Each rank's host idle by sampled Python frame, where it has samples (whatever the verdict)."""
    return [r.host_stacks.window.line for r in d.ranks if not isinstance(r.host_stacks, UnsetType)]


STACK_HEADER = ("cause", "project frame", "library call", "innermost library frame", "GPU idle", "of idle")


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


def all_notes(d: ReportDocument) -> list[str]:
    """Every rank's notes and the warnings, each once, in order (what every text renderer lists)."""
    return list(dict.fromkeys([n for r in d.ranks for n in r.notes] + d.warnings))


def time_line(rank: RankBlock) -> str:
    """Where one rank's window went, bucket by bucket (they add up to the window)."""
    t, w = rank.time, rank.time.window_us or 0.0

    def share(us: float) -> str:
        return pct(us / w) if w else "-"

    host = rank.host_test
    return (
        f"rank {rank.rank} time ({ms(w)} window): compute {share(t.compute_us)}, exposed comm "
        f"{share(t.comm_exposed_us)}, copy {share(t.copy_us)}, GPU idle waiting on the host {share(t.host_idle_us)}, "
        f"idle waiting on a dependency {share(t.other_idle_us)}; host-bound test: {pct(host.fraction)} ({host.basis})"
    )


def contention_line(rank: RankBlock) -> str | None:
    """What overlap cost on one rank, in words (docs/analysis.md, "What overlap costs")."""
    x = rank.contention
    if x is None:
        return None
    parts = []
    for kind, slow, n, transfer in (
        ("compute", x.compute_slowdown, x.compute_kernels_overlapped, None),
        ("comm", x.comm_slowdown, x.comm_kernels_overlapped, x.comm_transfer_slowdown),
    ):
        if slow is not None:
            split = "" if transfer is None else f"; their transfers {100 * transfer:+.0f}%, the rest waiting for a peer rank"
            parts.append(f"{kind} kernels {100 * slow:+.0f}% ({n} overlapped{split})")
    cost = (
        "; ".join(parts) + " against their time alone"
        if parts
        else "no kernel ran both alone and beside the other microbatch, so no slowdown to measure"
    )
    return (
        f"rank {rank.rank} overlap cost: {cost}; overlap saved {ms(x.saved_us)} "
        f"(serial estimate {ms(x.serial_estimate_us)}, GPU busy {ms(x.busy_us)})"
    )


def top_compute_line(rank: RankBlock, most: int = 3) -> str | None:
    top = rank.top_compute_kernels
    if not top:
        return None
    names = display_names([k.name for k in top[:most]], 50)
    shown = ", ".join(f"{name} x{k.count} {ms(k.total_us)}" for name, k in zip(names, top[:most]))
    return f"rank {rank.rank} top compute kernels: {shown}"


def comm_kernels_line(rank: RankBlock, most: int = 3) -> str:
    found = rank.comm_kernel_names
    if not found:
        return f"rank {rank.rank} communication kernels: none recognised"
    names = display_names([k.name for k in found[:most]], 60)
    shown = ", ".join(f"{name} x{k.count}" for name, k in zip(names, found[:most]))
    more = f" and {len(found) - most} more" if len(found) > most else ""
    return f"rank {rank.rank} communication kernels: {shown}{more}"


def exposure_line(rank: RankBlock) -> str | None:
    """Why one rank's comm was exposed, the largest causes first (docs/analysis.md)."""
    from dbo_trace.analysis.steps.attribution import SOURCE_NONE
    from dbo_trace.analysis.overlap.exposure import REASON_TEXT, REASON_TEXT_NO_UBATCH

    x = rank.exposed_comm_reasons
    if x is None or not x.exposed_us:
        return None
    from dbo_trace.analysis.overlap.exposure import WAITING
    from dbo_trace.analysis.afd.roles import ATTENTION

    text = REASON_TEXT_NO_UBATCH if rank.microbatch_source == SOURCE_NONE else REASON_TEXT
    if rank.role == ATTENTION:
        # the dependency the attention's queued compute waits on is the receive of the FFN's answer
        text = {**text, WAITING: "compute was queued but waited for the FFN's answer (the round trip's receive)"}
    by_reason = dict(x.by_reason())
    parts = sorted(((t, r) for r in text if (t := by_reason.get(r) or 0) > 0), reverse=True)
    why = "; ".join(f"{ms(t)} {text[r]}" for t, r in parts)
    return f"rank {rank.rank} exposed comm {ms(x.exposed_us)}: {why}"


def cross_rank_lines(d: ReportDocument) -> list[str]:
    """The cross-rank view: who the others waited for, who waited for whom, and the notes."""
    cross = d.cross_rank
    if cross is None:
        return []
    a = cross.alignment
    how = []
    if a is not None and a.method:
        accuracy = "" if a.accuracy_us is None else f" (expected accuracy {a.accuracy_us:g} us)"
        how = [f"ranks aligned by {a.method}{accuracy}"]
    return [cross.summary, *how, *cross.lines]


def held_back_line(rank: RankBlock) -> str | None:
    """Comm kernels that waited for the other microbatch's compute to end, and why (docs/analysis.md)."""
    x = rank.held_back_comm
    if x is None or not x.kernels:
        return None
    from dbo_trace.analysis.overlap.exposure import CROWDED, HELD, LATE_RECORD

    causes = x.by_cause
    parts = []
    late = x.late_record_example
    if LATE_RECORD in causes and late is not None:  # the document holds the example with the cause
        c = causes[LATE_RECORD]
        who = f"ub{late.ubatch}'s thread" if late.ubatch >= 0 else f"thread {late.thread}"
        parts.append(
            f"{c.kernels} waited on an event recorded too late ({ms(c.delay_us)}; e.g. {late.record_call} by "
            f"{who} {ms(late.after_holder_launch_us)} after {display_names([late.holder], 40)[0]} was launched)"
        )
    if CROWDED in causes:
        c = causes[CROWDED]
        parts.append(f"{c.kernels} found no free SMs beside it ({ms(c.delay_us)}; an SM-hungry kernel)")
    if HELD in causes:
        c = causes[HELD]
        parts.append(f"{c.kernels} for a reason the trace does not show ({ms(c.delay_us)})")
    names = display_names([h.name for h in x.holders[:2]], 40)
    holders = ", ".join(f"{name} x{h.kernels}" for name, h in zip(names, x.holders[:2]))
    return (
        f"rank {rank.rank} comm held back: {x.kernels} of {x.comm_kernels_examined} comm kernels were ready "
        f"beside the other microbatch's compute but started as it ended, their starts delayed {ms(x.delay_us)} "
        f"in all (median {ms(x.median_delay_us)} each; the delays overlap each other and the compute, so they add "
        f"up past the exposed time they caused, which the exposed comm line splits): " + "; ".join(parts)
        + f". Held by: {holders}"
    )


# The one-line findings of a rank, in the order every text renderer prints them (None: nothing to say).
def _amount(x: int | None, unit: str = "") -> str:
    return "-" if x is None else f"{x:,}{unit}"


def sm_evidence_line(rank: RankBlock) -> str | None:
    """The held-back comm's holder: its launch against the SMs (docs/analysis.md, "SM evidence")."""
    x = rank.sm_evidence if isinstance(rank.sm_evidence, SmEvidenceBlock) else None
    if x is None:
        return None
    h = x.holder

    def shape(s: LaunchShapeBlock) -> str:
        dims = ",".join(map(str, s.grid))
        regs = "-" if s.registers_per_thread is None else f"{s.registers_per_thread}"
        smem = _amount(s.shared_memory, " B")
        return (
            f"grid [{dims}] = {counted(s.ctas, 'CTA')} of {counted(s.threads, 'thread')}, {regs} registers per thread, "
            f"{smem} shared memory each"
        )

    parts = [
        f"rank {rank.rank} SM evidence: the kernel that held back {counted(x.held, 'comm kernel')}, {cut(h.name, 40)}, "
        f"ran {shape(h)}"
    ]
    if x.sms is not None and x.per_sm is not None:
        parts.append(
            f"on {x.sms} SMs, at most {x.per_sm} of its CTAs fit one SM ({num(x.waves)} wave{'' if x.waves == 1 else 's'}); "
            f"beside it an SM has {_amount(x.left_shared_memory, ' B')} shared memory, {_amount(x.left_registers)} "
            f"registers and {_amount(x.left_threads)} threads left"
        )
    if x.comm is not None:
        verdict = {
            # the counts are an upper bound: where they let it in but the trace shows it held back, say
            # which of the two is the measurement, so the line does not contradict "no free SMs" above it
            True: "fits there by these counts, yet the trace shows it did not start beside it: something these counts "
            "leave out kept it off the SMs (allocation granularities, the shared-memory carveout the holder set, "
            "the block scheduler)",
            False: "does not fit there",
            None: "cannot be placed by these counts",
        }
        parts.append(f"one CTA of the comm kernel {cut(x.comm.name, 40)} ({shape(x.comm)}) {verdict[x.comm_fits]}")
    if x.comm_sms is not None:
        parts.append(f"the recording set VLLM_DBO_COMM_SMS={x.comm_sms}")
    elif x.env_recorded:
        parts.append("VLLM_DBO_COMM_SMS was not set in the recording's environment (vLLM's default: 20 on CUDA)")
    else:
        parts.append("the recording's environment is not known (VLLM_DBO_COMM_SMS unknown)")
    return "; ".join(parts)


RANK_LINES = (time_line, contention_line, exposure_line, held_back_line, sm_evidence_line, comm_kernels_line, top_compute_line)


OPERATION_HEADER = ("microbatch", "op", "steps", "median time", "hidden", "exposed", "exposed mostly because")
NOTHING_EXPOSED = 0.005  # an exposed share that rounds to 0%: no reason is given for it


def exposed_cells(hidden: float | None, exposed: float | None | UnsetType, median_exposed_us: float | None) -> list[str]:
    """Hidden and exposed as shares of one total (the operation's time over every step), so that they
    add up; a document before version 8 has no exposed share: its median exposed time is shown."""
    return [pct(hidden), pct(exposed) if isinstance(exposed, float) else ms(median_exposed_us)]


def exposed_reason(reason: str | None, exposed: float | None | UnsetType, median_exposed_us: float | None) -> str:
    """Why the exposed time was exposed; nothing where none was."""
    from dbo_trace.analysis.overlap.exposure import REASON_SHORT

    nothing = exposed < NOTHING_EXPOSED if isinstance(exposed, float) else (median_exposed_us or 0.0) < 5.0
    return "-" if reason is None or nothing else REASON_SHORT.get(reason, reason)


def operation_cells(op: CommOperation) -> list[str]:
    return [
        "-" if op.ubatch < 0 else f"ub{op.ubatch}",
        f"{op.index + 1}: layer {op.layer} {op.role}" if isinstance(op.layer, int) else str(op.index + 1),
        str(op.steps),
        ms(op.median_us),
        *exposed_cells(op.hidden_fraction, op.exposed_fraction, op.median_exposed_us),
        exposed_reason(op.reason, op.exposed_fraction, op.median_exposed_us),
    ]


def dbo_arithmetic_applies(d: ReportDocument) -> bool:
    """The round-trip table is DBO arithmetic: only where microbatches exist (a kernel's microbatch is
    known, or a step took a microbatched path, as a full-graph replay of both microbatches does)."""
    rt = d.round_trips
    return rt is not None and (rt.microbatched or any(s.path in MICROBATCHED_PATHS for s in d.steps))


WINDOW_SHOWN = 0.05  # a step's window is shown beside its period where they differ by this share


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


KERNEL_HEADER = ("kernel", "count", "total", "mean", "median", "min", "max", "of GPU time")
CPU_RANGE_HEADER = ("CPU range", "kind", "count", "total", "host idle", "of host idle")
SPREAD_HEADER = ("phase", "steps", "median", "p90", "p99", "max")


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


MD_KERNEL_ROWS = 20
MD_CPU_RANGE_ROWS = 20


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


def only_layer(d: ReportDocument, layer: int | None) -> ReportDocument:
    """--layer N: every rank's comm operations, per-layer rows and hand-overs of that layer only."""
    if layer is None:
        return d
    ranks = []
    for r in d.ranks:
        ledger = ledger_of(r)
        ranks.append(
            msgspec.structs.replace(
                r,
                comm_operations=[op for op in r.comm_operations if op.layer == layer],
                comm_layers=[x for x in comm_layers_of(r) if x.first_layer <= layer <= x.last_layer],
                dbo_ledger=ledger
                if ledger is None
                else msgspec.structs.replace(ledger, layers=[x for x in ledger.layers if x.layer == layer]),
            )
        )
    return msgspec.structs.replace(d, ranks=ranks)


def layers_seen(d: ReportDocument) -> set[int]:
    """The layers some rank's comm operations or hand-overs name."""
    seen = {op.layer for r in d.ranks for op in r.comm_operations if isinstance(op.layer, int)}
    return seen | {x.layer for r in d.ranks if (b := ledger_of(r)) is not None for x in b.layers}


# ---- the DBO ledger (render/ledger.py's block) --------------------------------------------------


def ledger_of(r: RankBlock) -> LedgerBlock | None:
    """A rank's ledger; None where it has none or its document's version had none."""
    return r.dbo_ledger if isinstance(r.dbo_ledger, LedgerBlock) else None


def ledger_lines(rank: int, b: LedgerBlock | None) -> list[str]:
    """The ledger in sentences, one per figure group (terminal and Markdown alike)."""
    if b is None:
        return []
    out = []
    if b.source is not None:
        startup = ""
        if b.startup_us is not None:
            startup = f"; thread start-up {ms(b.startup_us)} per step"
            if b.startup_gpu_idle_us:
                startup += f" ({ms(b.startup_gpu_idle_us)} of GPU idle in start-up over the steps)"
        out.append(
            f"rank {rank} DBO overhead: {num(b.yields_per_step, 0)} yields per step; hand-over (a yield to the other "
            f"microbatch's resume) median {us(b.median_handover_us)}, p90 {us(b.p90_handover_us)}, "
            f"{ms(b.handover_per_step_us)} per step{startup}; {pct(b.share)} of the step (medians over "
            f"{len([s for s in b.steps if s.handovers])} steps; from the {b.source})"
        )
    u = b.unprofiled
    if u is not None:
        out.append(
            f"rank {rank} hand-overs outside the profiled window ({u.steps} step{'' if u.steps == 1 else 's'} "
            "the event log saw, without the "
            f"profiler's cost): median {us(u.median_us)}, p90 {us(u.p90_us)}, {ms(u.per_step_us)} per step"
        )
    y = b.yield_op
    if y is not None:
        if y.wall_per_step_us is not None and y.thread_per_step_us is not None and (y.threads_per_step or 1) > 1:
            # threads in it at once: the wall time, then one thread's; never their sum, which exceeds the step
            inside = (
                f"in it {ms(y.wall_per_step_us)} per step ({pct(y.wall_share)} of the step: wall time any of its "
                f"{num(y.threads_per_step, 0)} threads was), {ms(y.thread_per_step_us)} per thread ({pct(y.thread_share)})"
            )
        else:
            inside = f"{ms(y.wall_per_step_us if y.wall_per_step_us is not None else y.per_step_us)} per step in it"
        out.append(
            f"rank {rank} yield op {y.name}: {y.calls} calls, median {us(y.median_us)} each, "
            f"{num(y.per_step, 0)} per step, {inside} (a cost where DBO is off, "
            "a wait for the other microbatch where it yields)"
        )
    sp = b.split
    parts = []
    if sp.tokens:
        parts.append(" / ".join(num(t, 0) for t in sp.tokens) + " tokens per microbatch")
    if sp.compute_us:
        parts.append(
            "compute " + " / ".join(ms(c) for c in sp.compute_us) + f", imbalance {pct(sp.imbalance)} "
            f"({ms(sp.excess_us)} of the longer microbatch's compute the other cannot cover)"
        )
    if parts:
        out.append(f"rank {rank} split (medians over steps): " + "; ".join(parts))
    return out


LAYER_HEADER = ("layer", "hand-overs", "median", "p90", "per step")


def layer_cells(row: LayerHandoverRow) -> list[str]:
    return [str(row.layer), str(row.handovers), us(row.median_us), us(row.p90_us), ms(row.per_step_us)]


LAYER_OPS_HEADER = ("layers", "ops", "median time", "hidden", "exposed", "exposed mostly because")


def layer_ops_cells(row: LayerOpsRow) -> list[str]:
    first, last = row.first_layer, row.last_layer
    return [
        str(first) if first == last else f"{first}-{last}",
        str(row.operations),
        ms(row.median_us),
        *exposed_cells(row.hidden_fraction, row.exposed_fraction, row.median_exposed_us),
        exposed_reason(row.reason, row.exposed_fraction, row.median_exposed_us),
    ]


def comm_layers_of(r: RankBlock) -> list[LayerOpsRow]:
    """A rank's comm operations per layer; none where its document's version had none."""
    return r.comm_layers if isinstance(r.comm_layers, list) else []


def what_if_lines(d: ReportDocument) -> list[str]:
    """The model's estimates, each labelled as one (docs/analysis.md, "What-if estimates")."""
    rows = d.what_if if isinstance(d.what_if, list) else []
    return [
        f"what-if, {x.what}: step {ms(x.predicted_us)} against {ms(x.step_us)} measured "
        f"({'-' if x.change is None else f'{100 * x.change:+.0f}%'}); {x.assumptions}"
        for x in rows
    ]
