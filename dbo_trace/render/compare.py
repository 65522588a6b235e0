"""`dbo-trace compare` output: the ablation table as terminal text, JSON or Markdown."""

from __future__ import annotations

import io
from dataclasses import asdict
from typing import Any, Callable

from dbo_trace import __version__
from dbo_trace.analysis.compare import ALL_STEPS, MIN_STEPS, TOO_FEW, WITHIN, Arm
from dbo_trace.analysis.unprofiled import Unprofiled
from dbo_trace.render import unprofiled as unprofiled_table
from dbo_trace.render.base import RenderOptions
from dbo_trace.render.format import md_table, ms, num, pct, tri
from dbo_trace.render.json_out import json_text
from dbo_trace.render.layout import Column, strip_trailing, table, terminal_width, wrap
from dbo_trace.render.safe import markdown_code, markdown_text, terminal_text

# 2: a row per arm and phase (field `phase`), rounded figures; 3: the step time's median, p90, p99 and max;
# 4: step times are periods, steady steps, ranks averaged per step, the change's bootstrap interval and call
# 5: a disaggregated run's round trip (round_trip_us, its hidden share, the criterion, its change)
COMPARE_SCHEMA, COMPARE_VERSION = "dbo-trace-compare", 5


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
                _round_trip_cell(a),
                pct(a.round_trip_hidden_share),
                "-" if a.round_trip_us is None else tri(a.round_trip_criterion),
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


def _round_trip_cell(a: Arm) -> str:
    """The median disaggregated round trip, with its change against the first arm."""
    if a.round_trip_us is None:
        return "-"
    change = "" if a.round_trip_change is None else f" ({100 * a.round_trip_change:+.0f}%)"
    return ms(a.round_trip_us) + change


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


AFD_COLUMNS = ("FFN round trip", "round trip hidden", "compute >= round trip")


def _shown(arms: list[Arm]) -> list[int]:
    """The columns shown: a disaggregated run's round-trip columns only where an arm has them."""
    afd = any(a.round_trip_us is not None for a in arms)
    return [i for i, c in enumerate(COLUMNS) if afd or c.header not in AFD_COLUMNS]


def render_markdown(arms: list[Arm], unprofiled: list[Unprofiled] = []) -> str:
    shown = _shown(arms)
    rows = [[markdown_code(r[0]), *r[1:]] for r in _rows(arms)]  # the arm's label: a name
    out = md_table([HEADER[i] for i in shown], [[r[i] for i in shown] for r in rows])
    return "\n".join(out + ["", markdown_text(noise_line(arms)), ""] + unprofiled_table.markdown_lines(unprofiled))


def _rounded(arm: dict[str, Any]) -> dict[str, Any]:
    """Times to the nanosecond, fractions to 1e-4, as the report's JSON: no binary-fraction noise."""
    out = {}
    for key, value in arm.items():
        if isinstance(value, float):
            value = round(value, 3 if key.endswith("_us") else 4)
        out[key] = value
    return out


_SAMPLES = ("samples_us", "sample_tokens")  # the statistic's input, not figures


def render_json(arms: list[Arm], unprofiled: list[Unprofiled] = []) -> str:
    body: dict[str, Any] = {
        "schema": COMPARE_SCHEMA,
        "schema_version": COMPARE_VERSION,
        "dbo_trace_version": __version__,
        "arms": [_rounded({k: v for k, v in asdict(a).items() if k not in _SAMPLES}) for a in arms],
        "noise": noise_line(arms),
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
    Column("FFN round trip", keep=8),
    Column("round trip hidden", keep=9),
    Column("compute >= round trip", keep=10),
    Column("comm hidden", keep=7),
    Column("graph-replayed kernels", keep=2),
    Column("verdict", right=False),
]
HEADER = [c.header for c in COLUMNS]  # the Markdown's, the same columns


def render_terminal(arms: list[Arm], color: bool = False, width: int | None = None, unprofiled: list[Unprofiled] = []) -> str:
    """The table at the terminal's width (at least 80; piped: $COLUMNS, else 100), every cell whole."""
    from rich.console import Console
    from rich.text import Text

    width = width or terminal_width()
    rows = [[terminal_text(cell) for cell in row] for row in _rows(arms)]  # labels are paths: data
    shown = _shown(arms)
    if all(a.phase == ALL_STEPS for a in arms):  # every arm's steps whole: the column would only repeat "all"
        shown.remove(1)
    lines = table("dbo-trace compare", [COLUMNS[i] for i in shown], [[r[i] for i in shown] for r in rows], width)
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=color, no_color=not color, width=width, highlight=False)
    lines = [*lines, *wrap(terminal_text(noise_line(arms)), width, "", "  ")]
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

    def __init__(self, name: str, suffixes: tuple[str, ...], render: Callable[[list[Arm], RenderOptions, list[Unprofiled]], str]):
        self.name, self.suffixes, self._render = name, suffixes, render

    def render(self, arms: list[Arm], options: RenderOptions = RenderOptions(), unprofiled: list[Unprofiled] = []) -> str:
        return self._render(arms, options, unprofiled)


COMPARE_RENDERERS = {
    r.name: r
    for r in (
        _CompareOutput("terminal", (".txt",), lambda arms, o, u: render_terminal(arms, color=o.color, width=o.width, unprofiled=u)),
        _CompareOutput("json", (".json",), lambda arms, o, u: render_json(arms, u)),
        _CompareOutput("markdown", (".md",), lambda arms, o, u: render_markdown(arms, u)),
    )
}
