"""Arms of an ablation side by side (eager, eager + DBO, graphs, graphs + DBO ...).

Every reported step of every rank of an arm is one sample of its step time;
a bundle with several profile windows simply contributes more steps. The
change against the first arm is called noise when it is smaller than twice
the standard error of the difference (about a 95% band for a few dozen steps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dbo_trace.analysis.report import Report

NOISE_SE = 2.0  # a difference within this many standard errors is within noise


@dataclass
class Arm:
    label: str
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


def arm_of(label: str, report: Report) -> Arm:
    walls = np.array([s.wall_us for r in report.ranks for s in r.steps], float)
    rt = report.round_trips
    return Arm(
        label=label,
        steps=len(walls),
        step_mean_us=float(walls.mean()) if len(walls) else math.nan,
        step_std_us=float(walls.std(ddof=1)) if len(walls) > 1 else 0.0,
        round_trips_per_layer=rt.per_layer if rt else None,
        per_round_trip_us=rt.per_round_trip_us if rt else None,
        comm_hidden_fraction=report.total.comm_hidden_fraction,
        replayed_kernel_fraction=report.total.replayed_kernel_fraction,
        verdict=report.verdict.label,
    )


def compare(arms: list[Arm]) -> list[Arm]:
    """Fill in each arm's change against the first, and whether it is within noise."""
    base = arms[0]
    for arm in arms[1:]:
        arm.change = arm.step_mean_us / base.step_mean_us - 1.0
        se = math.sqrt(base.step_std_us**2 / max(base.steps, 1) + arm.step_std_us**2 / max(arm.steps, 1))
        arm.within_noise = abs(arm.step_mean_us - base.step_mean_us) <= NOISE_SE * se
    return arms
