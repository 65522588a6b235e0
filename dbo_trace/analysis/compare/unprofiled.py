"""The arms as timed unprofiled: `record --repeats` (vllm bench serve, or the built-in streamed load),
beside the profiled step time and the profiler's overhead (docs/analysis.md, "Unprofiled timing").

Per arm, from its manifest's `repeats` (each repeat's duration_s, output_throughput,
median_tpot_ms, median_itl_ms; a repeat that completed no request is left out):
- duration: mean ± sample standard deviation (ddof 1) over the n repeats;
- output tokens/s, TPOT median, ITL median: the mean over the repeats of each repeat's figure;
- change against the first arm given at the same load (never across loads: another load's duration
  is another workload's): mean duration / that arm's - 1, with an interval of ±2 standard
  errors of the difference of the means (sqrt(sd_a²/n_a + sd_b²/n_b), as fractions of the first
  arm's mean): "within noise" where the change is inside it; beside it the 95% interval from
  Student's t (Welch's degrees of freedom), which is wider for few repeats (t = 4.30 at 2 df);
- the profiler's overhead: the profiled per-step time (the median start-to-start period of the
  arm's steady steps, its decode steps where it has them: analysis/steps/periods.py) against the
  unprofiled per-step time, minus 1. Like with like: the ITL median (the gap between one request's
  tokens, a decode step's period) where the repeats have it; else the TPOT median, whose mean per
  request holds the prefills that interleave as requests arrive. A profiled period below the
  unprofiled one is no overhead: the two are not comparable, and no figure is given; nor is one
  from fewer than OVERHEAD_PERIODS_AT_LEAST profiled periods (too few).

`report` of one recording with repeats states the same overhead (profiler_overhead), and where it is
OVERHEAD_LARGE or more, that the host time it reports may be the profiler's own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import numpy as np

from dbo_trace.analysis.steps.periods import PeriodStep, last_index, steady_periods

NOISE_SE = 2.0  # the same band as compare's step times
# A profiler that stretches a step by this share is as large as the effects an ablation compares
# (DBO's gains and losses here are 15-30%): the profiled run's host time is then partly its own.
OVERHEAD_LARGE = 0.20
# The overhead is a median of the profiled periods: fewer than this many, and one slow or fast step
# (a prefill's, a stall's) is the figure; none is given.
OVERHEAD_PERIODS_AT_LEAST = 5


@dataclass(frozen=True)
class Repeat:
    """One timed repeat of a recording's load, the profiler off (the manifest's `repeats`)."""

    tool: str
    duration_s: float | None
    completed: float | None
    output_throughput: float | None
    median_tpot_ms: float | None
    median_itl_ms: float | None


@dataclass(frozen=True)
class Unprofiled:
    label: str
    repeats: int  # n: repeats with a duration and at least one completed request
    tool: str  # "vllm bench serve", "builtin", or both joined with "+"
    duration_mean_s: float
    duration_sd_s: float
    output_tokens_per_s: float | None
    tpot_median_ms: float | None
    itl_median_ms: float | None
    profiled_step_ms: float | None  # the median profiled step period, start to start (compare's step median)
    profiler_overhead: float | None = None  # profiled step / unprofiled step - 1; None: not comparable
    overhead_basis: str | None = None  # what the unprofiled step is: ITL or TPOT (the repeats' medians, mean)
    overhead_below: bool = False  # the profiled period fell below the unprofiled one: not comparable
    tpot_prefills: bool = False  # no ITL, and TPOT holds interleaved prefills (or may: the load is unknown): not comparable
    overhead_too_few: bool = False  # fewer than OVERHEAD_PERIODS_AT_LEAST profiled periods: no overhead
    profiled_phase: str | None = None  # the steps the profiled period is of: "decode", or "all"
    profiled_periods: int | None = None  # how many start-to-start periods it is the median of
    arm: int = 0  # which arm it is of (compare's Arm.arm): what keys it; the label only names it
    prefills_interleave: bool | None = None  # the load admits prompts beyond its concurrency (None: not said)

    @property
    def overhead_large(self) -> bool:
        return self.profiler_overhead is not None and self.profiler_overhead >= OVERHEAD_LARGE


@dataclass(frozen=True)
class DurationChange:
    """A timed arm's mean duration against the first arm given at its load (against_first), built whole
    where it is computed; both arms' figures stay as measured."""

    baseline: str  # the arm it is against (its label)
    change: float  # mean duration / the baseline's - 1
    interval: float | None = None  # ± this many (fraction): NOISE_SE standard errors of the difference
    interval_t95: float | None = None  # ± this (fraction): Student's t 95% with Welch's df
    within_noise: bool | None = None  # None: either arm has a single repeat (its spread is unknown)


@dataclass(frozen=True)
class TimedArm:
    """A row of compare's unprofiled table: the arm's repeats as measured, and its change against the
    first arm at its load."""

    measured: Unprofiled
    vs_first: DurationChange | None = None  # None: the first at its load, the baseline


def _number(r: dict[str, Any], key: str) -> float | None:
    """A repeat's figure (a time, a rate or a count): a finite number, not below zero."""
    v = r.get(key)
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0:
        return float(v)
    return None


TOOL_MOST = 64  # "vllm bench serve", "builtin": a tool's name is short; a longer one is cut


def _tool(r: dict[str, Any]) -> str:
    tool = r.get("tool")
    if not isinstance(tool, str) or not tool.strip():
        return "unknown"
    return tool if len(tool) <= TOOL_MOST else tool[: TOOL_MOST - 3] + "..."


def repeats_of(raw: Any) -> tuple[Repeat, ...]:
    """A manifest's `repeats` as read (anything: a manifest is input), each repeat's figures that are
    finite numbers; the usable ones: a duration above zero (requests completed take time: a zero
    is no measurement, and the change against it no number) and at least one completed request."""
    if not isinstance(raw, list):
        return ()
    out = []
    for r in raw:
        if not isinstance(r, dict):
            continue
        rep = Repeat(
            _tool(r), _number(r, "duration_s"), _number(r, "completed"), _number(r, "output_throughput"),
            _number(r, "median_tpot_ms"), _number(r, "median_itl_ms"),
        )  # fmt: skip
        if (rep.duration_s or 0.0) > 0 and (rep.completed or 0.0) > 0:
            out.append(rep)
    return tuple(out)


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known else None


def unprofiled_of(
    label: str,
    repeats: Any,
    profiled_step_us: float | None,
    *,
    phase: str | None = None,
    periods: int | None = None,
    prefills_interleave: bool | None = None,
) -> Unprofiled | None:
    """One arm's unprofiled figures; None where its manifest holds no usable repeat. repeats: the
    manifest's list as read, or repeats_of's."""
    usable = repeats if isinstance(repeats, tuple) else repeats_of(repeats)
    if not usable:
        return None
    durations = np.array([r.duration_s for r in usable], float)
    tpot = _mean([r.median_tpot_ms for r in usable])
    itl = _mean([r.median_itl_ms for r in usable])
    step_ms = profiled_step_us / 1000.0 if profiled_step_us is not None and math.isfinite(profiled_step_us) else None
    basis, unprofiled_ms = (ITL, itl) if itl else (TPOT, tpot) if tpot else (None, None)
    # TPOT is a decode step's period only where no prefill interleaves (the load says so)
    tpot_prefills = basis == TPOT and prefills_interleave is not False
    too_few = periods is not None and periods < OVERHEAD_PERIODS_AT_LEAST
    comparable = step_ms is not None and unprofiled_ms and not tpot_prefills and not too_few
    overhead = step_ms / unprofiled_ms - 1.0 if comparable and step_ms is not None and unprofiled_ms else None
    tools = "+".join(dict.fromkeys(r.tool for r in usable))
    return Unprofiled(
        label=label,
        repeats=len(durations),
        tool=tools,
        duration_mean_s=float(durations.mean()),
        duration_sd_s=float(durations.std(ddof=1)) if len(durations) > 1 else 0.0,
        output_tokens_per_s=_mean([r.output_throughput for r in usable]),
        tpot_median_ms=tpot,
        itl_median_ms=itl,
        profiled_step_ms=step_ms,
        profiler_overhead=overhead if overhead is not None and overhead >= 0 else None,
        overhead_basis=basis if step_ms is not None else None,
        overhead_below=overhead is not None and overhead < 0,
        tpot_prefills=tpot_prefills and step_ms is not None,
        overhead_too_few=too_few and step_ms is not None and unprofiled_ms is not None and not tpot_prefills,
        profiled_phase=phase if step_ms is not None else None,
        profiled_periods=periods if step_ms is not None else None,
        prefills_interleave=prefills_interleave,
    )


ITL, TPOT = "ITL", "TPOT"  # the unprofiled step the overhead is against
TPOT_PREFILLS = "TPOT with prefills"  # TPOT where prefills interleave and no ITL stands in: labelled so


def decode_step_ms(off: Unprofiled, on: Unprofiled) -> tuple[tuple[float, float], str] | None:
    """A pair's unprofiled decode step (off, on) and its basis: TPOT where no prefill interleaves; where
    the load admits prompts beyond its concurrency (requests arriving in waves) TPOT holds their
    prefills, so ITL (a decode step's period) where both arms have it, else TPOT labelled as holding
    them. None where either arm has neither."""
    if off.prefills_interleave or on.prefills_interleave:
        if off.itl_median_ms and on.itl_median_ms:
            return (off.itl_median_ms, on.itl_median_ms), ITL
        basis = TPOT_PREFILLS
    else:
        basis = TPOT
    if off.tpot_median_ms and on.tpot_median_ms:
        return (off.tpot_median_ms, on.tpot_median_ms), basis
    return None


class PhasedStep(PeriodStep, Protocol):
    @property
    def phase(self) -> str | None: ...


DECODE, ALL = "decode", "all"


def profiled_period(ranks: Sequence[Sequence[PhasedStep]]) -> tuple[float | None, str, int]:
    """The profiled step period the overhead compares with TPOT: the median start-to-start period of
    the steady decode steps (of every rank: ranks averaged per step), or of all steady steps where
    no rank has a decode step; with the phase used and the number of periods."""
    phase = DECODE if any(s.phase == DECODE for steps in ranks for s in steps) else ALL
    chosen = [([s for s in steps if phase == ALL or s.phase == phase], last_index(steps)) for steps in ranks]
    periods, _ = steady_periods(chosen)
    return (float(np.median(periods)) if periods else None), phase, len(periods)


def _t95(df: float) -> float:
    """Student's t two-sided 95% quantile (a table, interpolated in 1/df; normal beyond)."""
    table = [(1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (5, 2.571), (6, 2.447), (8, 2.306), (10, 2.228),
             (15, 2.131), (20, 2.086), (30, 2.042), (60, 2.000), (120, 1.980)]  # fmt: skip
    if df <= 1:
        return table[0][1]
    for (d0, t0), (d1, t1) in zip(table, table[1:]):
        if d0 <= df <= d1:
            w = (1 / df - 1 / d1) / (1 / d0 - 1 / d1)
            return t1 + w * (t0 - t1)
    return 1.96


def _welch_df(va: float, na: int, vb: float, nb: int) -> float:
    """Welch-Satterthwaite degrees of freedom of a difference of two means (va, vb: sd²/n)."""
    denominator = va**2 / (na - 1) + vb**2 / (nb - 1)
    return (va + vb) ** 2 / denominator if denominator > 0 else float(na + nb - 2)


def welch_t95(v_new: float, n_new: int, v_base: float, n_base: int) -> tuple[float, float, float]:
    """A difference of two means: its standard error, Student's t 95% quantile at the Welch-Satterthwaite
    degrees of freedom, and those degrees (v: sd²/n). The repeats' tables and a load sweep's change use it."""
    df = _welch_df(v_new, n_new, v_base, n_base)
    return math.sqrt(v_new + v_base), _t95(df), df


def against_first(rows: list[Unprofiled], load_of: dict[int, int] | None = None) -> list[TimedArm]:
    """Each arm as measured, with its change in mean duration against the first arm of its load, its
    interval and noise call (no interval where either arm has a single repeat: its spread is unknown).
    load_of: each arm's (Unprofiled.arm) load, as a key that arms of one load share; None or absent:
    one load."""
    firsts: dict[int, Unprofiled] = {}
    out = []
    for row in rows:
        base = firsts.setdefault((load_of or {}).get(row.arm, -1), row)
        if base is row:
            out.append(TimedArm(row))
            continue
        interval = interval_t95 = within = None
        if row.repeats >= 2 and base.repeats >= 2:
            va, vb = row.duration_sd_s**2 / row.repeats, base.duration_sd_s**2 / base.repeats
            se, t95, _ = welch_t95(va, row.repeats, vb, base.repeats)
            interval, interval_t95 = NOISE_SE * se / base.duration_mean_s, t95 * se / base.duration_mean_s
            within = abs(row.duration_mean_s - base.duration_mean_s) <= NOISE_SE * se
        change = DurationChange(base.label, row.duration_mean_s / base.duration_mean_s - 1.0, interval, interval_t95, within)
        out.append(TimedArm(row, change))
    return out
