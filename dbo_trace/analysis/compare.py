"""Arms of an ablation side by side (eager, eager + DBO, graphs, graphs + DBO ...).

Every reported step of every rank of an arm is one sample of its step time;
a bundle with several profile windows simply contributes more steps. The
change against the first arm is called noise when it is smaller than twice
the standard error of the difference (about a 95% band for a few dozen steps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from dbo_trace.analysis.attribution import SOURCE_NONE
from dbo_trace.analysis.live import MICROBATCHED_PATHS
from dbo_trace.analysis.report import Report
from dbo_trace.analysis.steps import PHASES
from dbo_trace.analysis.summaries import spread

NOISE_SE = 2.0  # a difference within this many standard errors is within noise


ALL_STEPS = "all"


@dataclass(frozen=True)
class Arm:
    label: str
    phase: str  # "all", or prefill / decode / mixed: the steps of that phase alone
    steps: int
    step_mean_us: float
    step_std_us: float
    round_trips_per_layer: float | None
    per_round_trip_us: float | None
    comm_hidden_fraction: float | None
    replayed_kernel_fraction: float | None
    verdict: str
    change: float | None = None  # step time change against the first arm (fraction)
    within_noise: bool | None = None
    step_median_us: float | None = None  # the middle and the tail, which one long step cannot move as it moves the mean
    step_p90_us: float | None = None
    step_p99_us: float | None = None
    step_max_us: float | None = None
    # a disaggregated (AFD) run's round trips (analysis/roundtrips.py): send start to its receive's end
    round_trip_us: float | None = None  # median round trip
    round_trip_hidden_share: float | None = None  # of the round trips' time, the other microbatch's compute
    round_trip_criterion: bool | None = None  # per-microbatch compute >= the round trip's exposed time
    round_trip_change: float | None = None  # the median round trip against the first arm's (fraction)


def arm_of(label: str, report: Report, phase: str = ALL_STEPS) -> Arm:
    """One arm's row: every step, or the steps of one phase (vLLM's annotations say which)."""
    steps = [s for r in report.ranks for s in r.steps if phase == ALL_STEPS or s.phase == phase]
    walls = np.array([s.wall_us for s in steps], float)
    rt = report.round_trips
    afd = next((r.afd for r in report.ranks if r.afd is not None), None) if phase == ALL_STEPS else None
    x = spread(walls)
    if phase == ALL_STEPS:
        m, verdict = report.total, report.verdict.label
    else:
        p = next(p for p in report.phases if p.phase == phase)
        m = p.metrics
        verdict = "/".join(dict.fromkeys(p.per_rank)) if p.per_rank is not None else p.verdict.label if p.verdict else "-"
    return Arm(
        label=label,
        phase=phase,
        steps=len(walls),
        step_mean_us=float(walls.mean()) if len(walls) else math.nan,
        step_std_us=float(walls.std(ddof=1)) if len(walls) > 1 else 0.0,
        round_trips_per_layer=rt.per_layer if rt and phase == ALL_STEPS else None,
        per_round_trip_us=rt.per_round_trip_us if rt and phase == ALL_STEPS else None,
        comm_hidden_fraction=m.comm_hidden_fraction,
        replayed_kernel_fraction=m.replayed_kernel_fraction,
        verdict=verdict,
        step_median_us=None if x is None else x.median_us,
        step_p90_us=None if x is None else x.p90_us,
        step_p99_us=None if x is None else x.p99_us,
        step_max_us=None if x is None else x.max_us,
        round_trip_us=afd.median_us if afd else None,
        round_trip_hidden_share=afd.hidden_share if afd else None,
        round_trip_criterion=afd.criterion_met if afd else None,
    )


def arms_of(label: str, report: Report, phases: list[str]) -> list[Arm]:
    return [arm_of(label, report)] + [arm_of(label, report, p) for p in phases]


def shared_phases(reports: list[Report]) -> list[str]:
    """The phases every arm has steps of, in prefill, decode, mixed order."""
    have = [{s.phase for r in rep.ranks for s in r.steps} for rep in reports]
    return [p for p in PHASES if all(p in h for h in have)]


def compare(arms: list[Arm]) -> list[Arm]:
    """Each arm with its change against the first arm of the same phase, and whether it is within
    noise (new rows: the arms given are left as they are), grouped by phase: all steps first, then
    each phase."""
    order = list(dict.fromkeys(a.phase for a in arms))
    return [a for phase in order for a in _against_first([b for b in arms if b.phase == phase])]


def _against_first(arms: list[Arm]) -> list[Arm]:
    base = arms[0]
    return [base] + [_against(arm, base) for arm in arms[1:]]


def _against(arm: Arm, base: Arm) -> Arm:
    se = math.sqrt(base.step_std_us**2 / max(base.steps, 1) + arm.step_std_us**2 / max(arm.steps, 1))
    rt_change = None
    if arm.round_trip_us is not None and base.round_trip_us:
        rt_change = arm.round_trip_us / base.round_trip_us - 1.0
    return replace(
        arm,
        round_trip_change=rt_change,
        change=arm.step_mean_us / base.step_mean_us - 1.0,
        within_noise=abs(arm.step_mean_us - base.step_mean_us) <= NOISE_SE * se,
    )


def microbatched(report: Report) -> bool:
    """DBO ran: some kernel has a microbatch, or the event log says a step took a microbatched path
    (a full-graph replay is microbatched although its kernels cannot be told apart)."""
    return any(
        r.attribution != SOURCE_NONE
        or any(s.path in MICROBATCHED_PATHS for s in r.steps)
        or (r.afd is not None and r.afd.microbatched)  # a replayed AFD graph's kernel order showed two
        for r in report.ranks
    )


def shape_warnings(labels: list[str], reports: list[Report]) -> list[str]:
    """Arms that differ in shape compare unlike things: say so (ranks, layers, microbatched or not)."""

    def shape(r: Report) -> dict[str, object]:
        rt = r.round_trips
        return {
            "ranks": len(r.ranks),
            "layers": rt.layers if rt else None,
            "microbatched": microbatched(r),
        }

    shapes = [shape(r) for r in reports]
    out = []
    for key in ("ranks", "layers", "microbatched"):
        values = [s[key] for s in shapes]
        if len(set(map(str, values))) > 1:
            listed = ", ".join(f"{label} {value}" for label, value in zip(labels, values))
            out.append(f"the arms differ in {key} ({listed}): check that they compare like with like")
    return out
