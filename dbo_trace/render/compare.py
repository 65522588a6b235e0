"""`dbo-trace compare` output: the ablation table as terminal text, JSON or Markdown; for arms of a
disaggregated (AFD) run, their round trips per arm; DBO's effect per pair (DBO on against off, one
cudagraph mode); the arms timed unprofiled. Lays out what analysis/compare.py computed."""

from __future__ import annotations

import io
from dataclasses import asdict
from typing import Any, Callable

from dbo_trace import __version__
from dbo_trace.analysis.compare import ALL_STEPS, MIN_STEPS, TOO_FEW, WITHIN, Arm, Pair, RanWith, ShapeDiff, graphs_text
from dbo_trace.analysis.unprofiled import Unprofiled
from dbo_trace.render import unprofiled as unprofiled_table
from dbo_trace.render.base import RenderOptions
from dbo_trace.render.format import md_table, ms, num, pct, tri
from dbo_trace.render.json_out import json_text
from dbo_trace.render.layout import Column, strip_trailing, table, terminal_width, wrap
from dbo_trace.render.safe import Markdown, markdown_code, markdown_text, terminal_text

# 2: a row per arm and phase (field `phase`), rounded figures; 3: the step time's median, p90, p99 and max;
# 4: step times are periods, steady steps, ranks averaged per step, the change's bootstrap interval and call
# 5: a disaggregated run's round trip (round_trip_us, its hidden share, the criterion, its change)
# 6: the step sample is start-to-start periods (a rank's last step apart); ran_with; the round trip's
# parts; pairs (DBO's effect per cudagraph mode); unprofiled rows' profiled_phase and profiled_periods
COMPARE_SCHEMA, COMPARE_VERSION = "dbo-trace-compare", 6


def ran_with_text(w: RanWith) -> str:
    """What an arm ran with in a few words: its cudagraph mode and DBO."""
    dbo = "DBO ?" if w.dbo is None else "DBO on" if w.dbo else "DBO off"
    if w.dbo and not w.microbatched:
        dbo += " (no step microbatched)"
    return f"{graphs_text(w.graphs, w.graph_mode)}, {dbo}"


def shape_text(d: ShapeDiff) -> str:
    listed = ", ".join(f"{label} {value}" for label, value in d.values)
    return f"the arms differ in {d.key} ({listed}): check that they compare like with like"


def _rows(arms: list[Arm]) -> list[list[str]]:
    rows = []
    for a in arms:
        rows.append(
            [
                a.label,
                a.phase,
                _steps_cell(a),
                _spread_cell(a),
                ms(a.window_median_us) if _window_differs(a) else "-",
                _change_cell(a),
                num(a.round_trips_per_layer),
                ms(a.per_round_trip_us),
                pct(a.comm_hidden_fraction),
                pct(a.replayed_kernel_fraction),
                a.verdict,
            ]
        )
    return rows


def _steps_cell(a: Arm) -> str:
    text = str(a.steps) + (f" (+{a.stalls} stalled)" if a.stalls else "")
    return text + (f", {a.ranks} ranks" if a.ranks > 1 else "")


def _window_differs(a: Arm) -> bool:
    w, p = a.window_median_us, a.step_median_us
    return w is not None and p is not None and abs(w - p) > 0.05 * p


def _change_cell(a: Arm) -> str:
    if a.call is None:
        return "baseline"
    if a.call == TOO_FEW:
        return "too few steps"
    if a.change is None:
        return "-"
    text = f"{100 * a.change:+.1f}%"
    if a.change_low is not None and a.change_high is not None:
        text += f" [{100 * a.change_low:+.1f}, {100 * a.change_high:+.1f}]"
    if a.per_token:
        text += " per token"
    return text + (" (noise)" if a.call == WITHIN else "")


def _spread_cell(a: Arm) -> str:
    if a.step_median_us is None:
        return "-"
    return f"{a.step_median_us / 1000:.2f} ({(a.step_p90_us or 0) / 1000:.2f}, {(a.step_max_us or 0) / 1000:.2f})"


def noise_line(arms: list[Arm]) -> str:
    """Per phase, which arms changed beyond noise against the first, with the pairs behind it."""
    parts = []
    for phase in dict.fromkeys(a.phase for a in arms):
        rows = [a for a in arms if a.phase == phase]
        said = [_said(a) for a in rows[1:]]
        parts.append(f"{'all steps' if phase == ALL_STEPS else phase + ' steps'} against {rows[0].label}: " + ", ".join(said))
    return (
        "; ".join(parts)
        + f". Step times are periods of steady steps (stalls apart); a change is beyond noise when its bootstrap 95% "
        f"interval excludes no change (0%) and each arm has at least {MIN_STEPS} steps."
    )


def _said(a: Arm) -> str:
    n = a.compared_steps
    steps = f"{n[0]} and {n[1]} steps" if n else ""
    how = ", ".join(x for x in (steps, "paired by shape" if a.paired_by_shape else "", "per token" if a.per_token else "") if x)
    if a.call == TOO_FEW:
        return f"{a.label} too few steps to tell ({how}; at least {MIN_STEPS} each)"
    change = f"{100 * (a.change or 0.0):+.1f}%"
    if a.compared_medians_us is not None:
        unit = "us per token" if a.per_token else "ms"
        scale = 1.0 if a.per_token else 1000.0
        lo, hi = (x / scale for x in a.compared_medians_us)
        how = f"medians {lo:.2f} and {hi:.2f} {unit}, " + how
    slower = f", slower in {100 * a.slower_pairs:.0f}% of step pairs" if a.slower_pairs is not None else ""
    return f"{a.label} {change} {a.call} ({how}{slower})"


# ---- a disaggregated run's round trips, per arm (the arms' all-steps rows) ------------------------------

AFD_TITLE = "disaggregated round trips (AFD), per arm: medians; the parts need the FFN's trace"
AFD_COLUMNS = [
    Column("arm", right=False, wrap=True),
    Column("ran with", right=False, wrap=True, keep=3),
    Column("step period (start to start)"),
    Column("round trips/layer", keep=9),
    Column("round trip (send to receive end)"),
    Column("transfer", keep=5),
    Column("of it late receive", keep=5),
    Column("FFN compute", keep=6),
    Column("FFN queue/wait", keep=4),
    Column("attention wait", keep=7),
    Column("hidden"),
    Column("compute per microbatch : exposed", keep=8),
    Column("criterion"),
    Column("unprofiled TPOT", keep=10),
    Column("profiler overhead", keep=11),
]


def afd_arms(arms: list[Arm]) -> list[Arm]:
    return [a for a in arms if a.phase == ALL_STEPS and a.round_trip_us is not None]


def _afd_rows(arms: list[Arm], unprofiled: list[Unprofiled]) -> list[list[str]]:
    timed = {u.label: u for u in unprofiled}
    rows = []
    for a in afd_arms(arms):
        u = timed.get(a.label)
        split = a.round_trip_ffn_compute_us is not None
        rows.append(
            [
                a.label,
                ran_with_text(a.ran_with) if a.ran_with is not None else "-",
                ms(a.step_median_us),
                num(a.round_trips_per_layer),
                ms(a.round_trip_us) + ("" if a.round_trip_parts_matched is not None else f" (receive {ms(a.round_trip_receive_us)})"),
                ms(a.round_trip_transfer_us),
                ms(a.round_trip_late_us),
                ms(a.round_trip_ffn_compute_us if split else a.round_trip_ffn_us) + ("" if split or a.round_trip_ffn_us is None else " with queue"),
                ms(a.round_trip_ffn_queue_us),
                ms(a.round_trip_wait_us),
                pct(a.round_trip_hidden_share),
                f"{ms(a.compute_per_microbatch_us)} : {ms(a.round_trip_exposed_us)}",
                _criterion_cell(a),
                "-" if u is None or u.tpot_median_ms is None else f"{u.tpot_median_ms:.2f} ms",
                "-" if u is None or u.profiler_overhead is None else f"{100 * u.profiler_overhead:+.0f}%",
            ]
        )
    return rows


def _criterion_cell(a: Arm) -> str:
    """Met or missed with the ratio; unknown with one microbatch: no other compute to hide a round trip."""
    if a.round_trip_criterion_ratio is None:
        return "unknown (one microbatch)"
    return f"{tri(a.round_trip_criterion)} ({a.round_trip_criterion_ratio:.2f})"


AFD_NOTE = (
    "Round trip: a data-plane send's start to its matching receive's end (median); without the FFN's trace its "
    "parts are not measured and the receive kernel's median, which holds the attention wait, the FFN's time and "
    "the return transfer, stands in brackets. Of it late receive: of the transfer, the FFN's answer waiting for "
    "the attention to post its receive (the attention's host late, not the wire). Hidden: the share of the round trips' time, less the host's "
    "lag before the receive's launch, under the other microbatch's compute. Criterion: per-microbatch compute "
    "(per layer) against the round trip's exposed time (ratio >= 1: "
    "one microbatch's compute could cover the other's round trip; below 1 DBO can hide at most that share). "
    "Unprofiled TPOT: the mean of the repeats' median TPOT; profiler overhead: the step period against the "
    "repeats' median ITL (TPOT where they have none), none where the period falls below it."
)


# ---- DBO's effect per pair --------------------------------------------------------------------------------

PAIR_TITLE = "DBO's effect per pair: DBO on against DBO off, one cudagraph mode (step periods, start to start)"
PAIR_COLUMNS = [
    Column("pair", right=False, wrap=True),
    Column("steps of", right=False, keep=2),
    Column("cudagraphs", right=False, keep=5),
    Column("step period off -> on"),
    Column("DBO's change [95% interval]", right=False),
    Column("unprofiled TPOT off -> on", keep=4),
    Column("round trip off -> on", keep=3),
    Column("by the wall clock", right=False, wrap=True),
]


def _pair_rows(pairs: list[Pair]) -> list[list[str]]:
    rows = []
    for p in pairs:
        if p.off is None:
            continue
        medians = p.compared_medians_us
        unit = " us/token" if p.per_token else " ms"
        scale = 1.0 if p.per_token else 1000.0
        rows.append(
            [
                f"{p.on} vs {p.off}",
                p.phase,
                p.graphs,
                "-" if medians is None else f"{medians[0] / scale:.2f} -> {medians[1] / scale:.2f}{unit}",
                _pair_change_cell(p),
                "-" if p.tpot_ms is None else f"{p.tpot_ms[0]:.2f} -> {p.tpot_ms[1]:.2f} ms ({100 * (p.tpot_change or 0.0):+.1f}%)",
                "-" if p.round_trip_us is None else f"{ms(p.round_trip_us[0])} -> {ms(p.round_trip_us[1])}",
                _outcome_cell(p),
            ]
        )
    return rows


def _pair_change_cell(p: Pair) -> str:
    if p.call == TOO_FEW or p.change is None:
        return "too few steps"
    text = f"{100 * p.change:+.1f}%"
    if p.change_low is not None and p.change_high is not None:
        text += f" [{100 * p.change_low:+.1f}, {100 * p.change_high:+.1f}]"
    return text + (" per token" if p.per_token else "")


def _outcome_cell(p: Pair) -> str:
    out = p.outcome
    if out is None:
        return "too few steps to tell"
    slower = "" if p.slower_pairs is None else f" (slower in {100 * p.slower_pairs:.0f}% of step pairs)"
    return f"{out}{slower}"


def pair_lines(pairs: list[Pair]) -> list[str]:
    """What the pair table cannot hold: DBO arms with no partner, and partners chosen among several."""
    out = []
    for p in pairs:
        if p.off is None:
            out.append(f"{p.on} ({p.phase} steps): no arm with DBO off and the same cudagraph mode ({p.graphs}) to pair it with")
        elif p.others:
            out.append(
                f"{p.on} ({p.phase} steps): paired with {p.off}, the first of the arms that fit "
                f"({', '.join((p.off, *p.others))}); give the one to pair with first"
            )
    return out


PAIR_NOTE = (
    "DBO's change: the DBO arm's median step period against its partner's, with the bootstrap 95% interval; "
    "'DBO slower' or 'faster' only where the interval excludes no change. Arms are paired by their recorded "
    "settings (cudagraph mode, --enable-dbo), else by what their traces show (graph replays, two microbatches)."
)


def render_markdown(arms: list[Arm], unprofiled: list[Unprofiled] = [], pairs: list[Pair] = []) -> str:
    rows = [[markdown_code(r[0]), *r[1:]] for r in _rows(arms)]  # the arm's label: a name
    out = md_table(HEADER, rows)
    out += ["", markdown_text(noise_line(arms)), ""]
    afd = _afd_rows(arms, unprofiled)
    if afd:
        out += [f"**{markdown_text(AFD_TITLE)}**", ""]
        out += md_table([c.header for c in AFD_COLUMNS], [[markdown_code(r[0]), *r[1:]] for r in afd])
        out += ["", markdown_text(AFD_NOTE), ""]
    out += _pairs_markdown(pairs)
    return "\n".join(out + unprofiled_table.markdown_lines(unprofiled))


def _pairs_markdown(pairs: list[Pair]) -> list[str]:
    if not pairs:
        return []
    out = [f"**{markdown_text(PAIR_TITLE)}**", ""]
    rows = _pair_rows(pairs)
    if rows:
        pair_cell = [Markdown(f"{markdown_code(p.on)} vs {markdown_code(p.off)}") for p in pairs if p.off is not None]
        out += md_table([c.header for c in PAIR_COLUMNS], [[cell, *r[1:]] for cell, r in zip(pair_cell, rows)])
        out.append("")
    out += [f"- {markdown_text(line)}" for line in pair_lines(pairs)]
    return out + ["", markdown_text(PAIR_NOTE), ""]


def _rounded(arm: dict[str, Any]) -> dict[str, Any]:
    """Times to the nanosecond, fractions to 1e-4, as the report's JSON: no binary-fraction noise."""
    out = {}
    for key, value in arm.items():
        digits = 3 if key.endswith("_us") else 4
        if isinstance(value, float):
            value = round(value, digits)
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, float) for v in value):
            value = [round(v, digits) for v in value]
        out[key] = value
    return out


_SAMPLES = ("samples_us", "sample_tokens")  # the statistic's input, not figures


def render_json(arms: list[Arm], unprofiled: list[Unprofiled] = [], pairs: list[Pair] = []) -> str:
    body: dict[str, Any] = {
        "schema": COMPARE_SCHEMA,
        "schema_version": COMPARE_VERSION,
        "dbo_trace_version": __version__,
        "arms": [_rounded({k: v for k, v in asdict(a).items() if k not in _SAMPLES}) for a in arms],
        "noise": noise_line(arms),
        "pairs": [_rounded({**asdict(p), "outcome": p.outcome}) for p in pairs],
    }
    if unprofiled:  # only where some arm's recording holds timed repeats
        body["unprofiled"] = unprofiled_table.json_rows(unprofiled)
    return json_text(body)


# The terminal table's columns (layout.Column): the headline figures (step time, its change, the
# verdict) are never dropped; the others go, least needed first, when the terminal is narrow.
COLUMNS = [
    Column("arm", right=False, wrap=True),
    Column("steps of", right=False),
    Column("steps", keep=6),
    Column("step period ms: median (p90, max)"),
    Column("window median", keep=1),
    Column("vs first [95% interval]", right=False),
    Column("round trips/layer", keep=3),
    Column("per round trip", keep=4),
    Column("comm hidden", keep=7),
    Column("graph-replayed kernels", keep=2),
    Column("verdict", right=False),
]
HEADER = [c.header for c in COLUMNS]  # the Markdown's, the same columns


def render_terminal(
    arms: list[Arm], color: bool = False, width: int | None = None, unprofiled: list[Unprofiled] = [], pairs: list[Pair] = []
) -> str:
    """The table at the terminal's width (at least 80; piped: $COLUMNS, else 100), every cell whole."""
    from rich.console import Console
    from rich.text import Text

    width = width or terminal_width()
    rows = [[terminal_text(cell) for cell in row] for row in _rows(arms)]  # labels are paths: data
    shown = list(range(len(COLUMNS)))
    if all(a.phase == ALL_STEPS for a in arms):  # every arm's steps whole: the column would only repeat "all"
        shown.remove(1)
    lines = table("dbo-trace compare", [COLUMNS[i] for i in shown], [[r[i] for i in shown] for r in rows], width)
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=color, no_color=not color, width=width, highlight=False)
    lines = [*lines, *wrap(terminal_text(noise_line(arms)), width, "", "  ")]
    afd = [[terminal_text(cell) for cell in row] for row in _afd_rows(arms, unprofiled)]
    if afd:
        lines += ["", *table(AFD_TITLE, AFD_COLUMNS, afd, width), *wrap(AFD_NOTE, width, "", "  ")]
    if pairs:
        lines += [""]
        rows = [[terminal_text(cell) for cell in row] for row in _pair_rows(pairs)]
        if rows:
            lines += table(PAIR_TITLE, PAIR_COLUMNS, rows, width)
        else:
            lines += wrap(PAIR_TITLE, width)
        for line in pair_lines(pairs):
            lines += wrap(terminal_text(line), width, "  ", "    ")
        lines += wrap(PAIR_NOTE, width, "", "  ")
    if unprofiled:  # its own section, after the step table's noise line
        extra = [[terminal_text(cell) for cell in row] for row in unprofiled_table.rows(unprofiled)]
        lines += ["", *table(unprofiled_table.TITLE, unprofiled_table.COLUMNS, extra, width)]
        lines += wrap(unprofiled_table.NOTE, width, "", "  ")
    for line in lines:
        console.print(Text(line), soft_wrap=True)
    return strip_trailing(buf.getvalue())


class _CompareOutput:
    """compare's outputs, with the report renderers' shape (name, suffixes, binary, render): the
    product is the compared arms instead of a Report."""

    binary = False

    def __init__(
        self, name: str, suffixes: tuple[str, ...], render: Callable[[list[Arm], RenderOptions, list[Unprofiled], list[Pair]], str]
    ):
        self.name, self.suffixes, self._render = name, suffixes, render

    def render(
        self, arms: list[Arm], options: RenderOptions = RenderOptions(), unprofiled: list[Unprofiled] = [], pairs: list[Pair] = []
    ) -> str:
        return self._render(arms, options, unprofiled, pairs)


COMPARE_RENDERERS = {
    r.name: r
    for r in (
        _CompareOutput(
            "terminal", (".txt",), lambda arms, o, u, p: render_terminal(arms, color=o.color, width=o.width, unprofiled=u, pairs=p)
        ),
        _CompareOutput("json", (".json",), lambda arms, o, u, p: render_json(arms, u, p)),
        _CompareOutput("markdown", (".md",), lambda arms, o, u, p: render_markdown(arms, u, p)),
    )
}
