"""`dbo-trace compare` output: the ablation table as terminal text, JSON or Markdown."""

from __future__ import annotations

from dataclasses import asdict
from typing import Callable

from dbo_trace import __version__
from dbo_trace.analysis.compare import NOISE_SE, Arm
from dbo_trace.render import RenderOptions
from dbo_trace.render.format import md_table, ms, num, pct
from dbo_trace.render.json_out import json_text
from dbo_trace.render.safe import markdown_code, markdown_text, terminal_text

COMPARE_SCHEMA, COMPARE_VERSION = "dbo-trace-compare", 2  # 2: a row per arm and phase (field `phase`), rounded figures


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
                change,
                num(a.round_trips_per_layer),
                ms(a.per_round_trip_us),
                pct(a.comm_hidden_fraction),
                pct(a.replayed_kernel_fraction),
                a.verdict,
            ]
        )
    return rows


HEADER = [
    "arm",
    "steps of",
    "steps",
    "step time (mean ± sd)",
    "vs first",
    "round trips/layer",
    "per round trip",
    "comm hidden",
    "graph-replayed kernels",
    "verdict",
]


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


def render_markdown(arms: list[Arm]) -> str:
    out = md_table(HEADER, [[markdown_code(r[0]), *r[1:]] for r in _rows(arms)])  # the arm's label: a name
    return "\n".join(out + ["", markdown_text(noise_line(arms)), ""])


def _rounded(arm: dict) -> dict:
    """Times to the nanosecond, fractions to 1e-4, as the report's JSON: no binary-fraction noise."""
    out = {}
    for key, value in arm.items():
        if isinstance(value, float):
            value = round(value, 3 if key.endswith("_us") else 4)
        out[key] = value
    return out


def render_json(arms: list[Arm]) -> str:
    return json_text(
        {
            "schema": COMPARE_SCHEMA,
            "schema_version": COMPARE_VERSION,
            "dbo_trace_version": __version__,
            "arms": [_rounded(asdict(a)) for a in arms],
            "noise": noise_line(arms),
        }
    )


def render_terminal(arms: list[Arm], color: bool = False) -> str:
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    table = Table(*HEADER, title="dbo-trace compare", title_justify="left")
    for r in _rows(arms):
        table.add_row(*map(terminal_text, r))
    buf = StringIO()
    console = Console(
        file=buf,
        force_terminal=color,
        width=None if color else 160,
        color_system="auto" if color else None,
        markup=False,  # labels are paths and names: data, never markup
        emoji=False,
    )
    console.print(table)
    console.print(terminal_text(noise_line(arms)))
    return buf.getvalue()


class _CompareOutput:
    """compare's outputs, with the report renderers' shape (name, suffixes, binary, render): the
    product is the compared arms instead of a Report."""

    binary = False

    def __init__(self, name: str, suffixes: tuple[str, ...], render: Callable[[list[Arm], RenderOptions], str]):
        self.name, self.suffixes, self._render = name, suffixes, render

    def render(self, arms: list[Arm], options: RenderOptions = RenderOptions()) -> str:
        return self._render(arms, options)


COMPARE_RENDERERS = {
    r.name: r
    for r in (
        _CompareOutput("terminal", (".txt",), lambda arms, o: render_terminal(arms, color=o.color)),
        _CompareOutput("json", (".json",), lambda arms, o: render_json(arms)),
        _CompareOutput("markdown", (".md",), lambda arms, o: render_markdown(arms)),
    )
}
