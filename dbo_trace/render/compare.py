"""`dbo-trace compare` output: the ablation table as terminal text, JSON or Markdown."""

from __future__ import annotations

import io
from dataclasses import asdict
from typing import Any, Callable

from dbo_trace import __version__
from dbo_trace.analysis.compare import ALL_STEPS, NOISE_SE, Arm
from dbo_trace.analysis.unprofiled import Unprofiled
from dbo_trace.render import unprofiled as unprofiled_table
from dbo_trace.render.base import RenderOptions
from dbo_trace.render.format import md_table, ms, num, pct, tri
from dbo_trace.render.json_out import json_text
from dbo_trace.render.layout import Column, strip_trailing, table, terminal_width, wrap
from dbo_trace.render.safe import markdown_code, markdown_text, terminal_text

# 2: a row per arm and phase (field `phase`), rounded figures; 3: the step time's median, p90, p99 and max;
# 4: a disaggregated run's round trip (round_trip_us, its hidden share, the criterion, its change)
COMPARE_SCHEMA, COMPARE_VERSION = "dbo-trace-compare", 4


def _rows(arms: list[Arm]) -> list[list[str]]:
    rows = []
    for a in arms:
        change = "baseline" if a.change is None else f"{100 * a.change:+.1f}%" + (" (noise)" if a.within_noise else "")
        rows.append(
            [
                a.label,
                a.phase,
                str(a.steps),
                f"{ms(a.step_mean_us)} ± {ms(a.step_std_us)}",
                _spread_cell(a),
                change,
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


def _round_trip_cell(a: Arm) -> str:
    """The median disaggregated round trip, with its change against the first arm."""
    if a.round_trip_us is None:
        return "-"
    change = "" if a.round_trip_change is None else f" ({100 * a.round_trip_change:+.0f}%)"
    return ms(a.round_trip_us) + change


def _spread_cell(a: Arm) -> str:
    if a.step_median_us is None:
        return "-"
    return f"{a.step_median_us / 1000:.2f} ({(a.step_p90_us or 0) / 1000:.2f}, {(a.step_max_us or 0) / 1000:.2f}) ms"


def noise_line(arms: list[Arm]) -> str:
    first = arms[0]
    whole = [a for a in arms if a.phase == first.phase]
    noise = [a.label for a in whole[1:] if a.within_noise]
    real = [a.label for a in whole[1:] if not a.within_noise]
    parts = []
    if real:
        parts.append(f"beyond noise against {first.label}: {', '.join(real)}")
    if noise:
        parts.append(f"within noise (< {NOISE_SE:.0f} standard errors): {', '.join(noise)}")
    for phase in dict.fromkeys(a.phase for a in arms if a.phase != first.phase):
        rows = [a for a in arms if a.phase == phase]
        verdicts = ", ".join(f"{a.label} {_change(a)}" for a in rows[1:])
        parts.append(f"{phase} steps: {verdicts}")
    return "; ".join(parts) + "."


def _change(arm: Arm) -> str:
    return "within noise" if arm.within_noise else f"{100 * (arm.change or 0.0):+.1f}%"


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


def render_json(arms: list[Arm], unprofiled: list[Unprofiled] = []) -> str:
    body: dict[str, Any] = {
        "schema": COMPARE_SCHEMA,
        "schema_version": COMPARE_VERSION,
        "dbo_trace_version": __version__,
        "arms": [_rounded(asdict(a)) for a in arms],
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
    Column("steps", keep=2),
    Column("step time (mean ± sd)"),
    Column("step median (p90, max)", keep=5),
    Column("vs first", right=False),
    Column("round trips/layer", keep=3),
    Column("per round trip", keep=4),
    Column("FFN round trip", keep=8),
    Column("round trip hidden", keep=9),
    Column("compute >= round trip", keep=10),
    Column("comm hidden", keep=7),
    Column("graph-replayed kernels", keep=6),
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
