"""compare's second table: the arms timed unprofiled (`record --repeats`), beside the profiled step
time and the profiler's overhead (analysis/compare/unprofiled.py computes; this only lays out).

The Markdown is the ablation's table shape: `eager | 36.642 s ± 0.047 (n 3) | baseline | ...`.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from dbo_trace.analysis.compare.unprofiled import NOISE_SE, OVERHEAD_PERIODS_AT_LEAST, DurationChange, TimedArm, Unprofiled
from dbo_trace.render.format import md_table
from dbo_trace.render.layout import Column
from dbo_trace.render.safe import markdown_code

TITLE = "unprofiled (timed repeats, the profiler off)"
COLUMNS = [
    Column("arm", right=False, wrap=True),
    Column("duration (mean ± sd, n)"),
    Column("vs first (± 2 SE; t 95%)", right=False),
    Column("output tok/s", keep=4),
    Column("TPOT median", keep=5),
    Column("ITL median", keep=3),
    Column("profiled step median", keep=6),
    Column("profiler overhead"),
    Column("timed by", right=False, keep=2),
]  # keep: the narrow terminal drops the lowest first (the tool, ITL, tok/s) and keeps the overhead's two terms
HEADER = [c.header for c in COLUMNS]


def _opt(value: float | None, fmt: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{fmt}}{unit}"


def _change(c: DurationChange | None) -> str:
    if c is None:
        return "baseline"
    text = f"{100 * c.change:+.1f}%"
    if c.interval is None:
        return text + " (one repeat: no interval)"
    return f"{text} ± {100 * c.interval:.1f}% (t95 ± {100 * (c.interval_t95 or 0.0):.1f}%)" + (
        " noise" if c.within_noise else ""
    )


def _overhead(u: Unprofiled) -> str:
    if u.profiler_overhead is not None:
        return f"{100 * u.profiler_overhead:+.0f}%"
    return "too few steps" if u.overhead_too_few else "-"


def rows(unprofiled: list[TimedArm]) -> list[list[str]]:
    return [_row(t.measured, t.vs_first) for t in unprofiled]


def _row(u: Unprofiled, change: DurationChange | None) -> list[str]:
    return [
        u.label,
        f"{u.duration_mean_s:.3f} s ± {u.duration_sd_s:.3f} (n {u.repeats})",
        _change(change),
        _opt(u.output_tokens_per_s, ".1f"),
        _opt(u.tpot_median_ms, ".2f", " ms"),
        _opt(u.itl_median_ms, ".2f", " ms"),
        _opt(u.profiled_step_ms, ".2f", " ms"),
        _overhead(u),
        u.tool,
    ]


NOTE = (
    f"Unprofiled: each arm's load timed by its recording's repeats with the profiler off; change: mean duration "
    f"against the first arm given at the same load (never across loads), ± {NOISE_SE:.0f} standard errors of the difference (noise inside it) and Student's "
    "t 95% (wider for few repeats); profiler overhead: the profiled step median against the unprofiled ITL "
    f"median (TPOT where the repeats have none), none where it falls below or from fewer than {OVERHEAD_PERIODS_AT_LEAST} "
    "profiled steps (too few)."
)


def markdown_lines(unprofiled: list[TimedArm]) -> list[str]:
    if not unprofiled:
        return []
    table = md_table(HEADER, [[markdown_code(r[0]), *r[1:]] for r in rows(unprofiled)])
    return ["", f"**{TITLE}**", "", *table, "", NOTE, ""]


# A row's change against the first arm of its load, in the JSON: its keys among the arm's, each group
# before the arm's key named, where schema 8 has always written them; the baseline's keys empty.
CHANGE_BEFORE = {
    "profiled_phase": ("change", "change_interval", "change_interval_t95", "within_noise"),
    "prefills_interleave": ("baseline",),
}


def _change_json(c: DurationChange | None) -> dict[str, Any]:
    if c is None:
        return {"change": None, "change_interval": None, "change_interval_t95": None, "within_noise": None, "baseline": None}
    return {
        "change": c.change, "change_interval": c.interval, "change_interval_t95": c.interval_t95,
        "within_noise": c.within_noise, "baseline": c.baseline,
    }  # fmt: skip


def json_rows(unprofiled: list[TimedArm]) -> list[dict[str, Any]]:
    out = []
    for t in unprofiled:
        change = _change_json(t.vs_first)
        d: dict[str, Any] = {}
        for k, v in asdict(t.measured).items():
            d.update({key: change[key] for key in CHANGE_BEFORE.get(k, ())})
            if k != "arm":  # the arm's position keys it inside; the JSON names it by its (unique) label
                d[k] = v
        out.append({k: round(v, 4) if isinstance(v, float) else v for k, v in d.items()})
    return out
