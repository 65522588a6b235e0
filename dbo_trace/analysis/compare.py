"""Arms of an ablation side by side (eager, eager + DBO, graphs, graphs + DBO ...).

A step's time is its period (its share of the wall clock, analysis/stalls.py); an arm's sample is
its steady steps (stalls apart). Ranks are not independent samples: where an arm has several
ranks, the k-th step's sample is the mean of the ranks' k-th periods. Where both arms have token
counts per step, steps are paired by shape (token buckets both arms have), and where their sizes
still differ the time per token is compared. The change against the first arm is the ratio of the
medians, with a seeded percentile-bootstrap 95% interval; it is "beyond noise" only when the
interval excludes no change and each arm has at least MIN_STEPS steps (docs/analysis.md, "compare").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from dbo_trace.analysis.attribution import SOURCE_NONE
from dbo_trace.analysis.live import MICROBATCHED_PATHS
from dbo_trace.analysis.model import Report, StepReport
from dbo_trace.analysis.steps import PHASES
from dbo_trace.analysis.summaries import spread

MIN_STEPS = 5  # fewer steps in either arm: no call on the change (a median of 1-4 steps says little)
BOOTSTRAP = 2000  # resamples for the change's interval
SEED = 0  # the bootstrap's seed: the same arms give the same interval
TOKEN_BUCKETS_PER_DOUBLING = 4  # step shapes: token counts within ~19% share a bucket
SIZES_DIFFER = 0.10  # arms whose median tokens per step differ by more are compared per token
BEYOND, WITHIN, TOO_FEW = "beyond noise", "within noise", "too few steps"


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
    # schema 4: the statistics (docs/analysis.md, "compare")
    stalls: int = 0  # steps left out as stalls
    window_median_us: float | None = None  # the median step window, beside the period where they differ
    per_token_us: float | None = None  # median period per token, where steps have token counts
    ranks: int = 1  # ranks averaged per step (never pooled as independent steps)
    call: str | None = None  # BEYOND, WITHIN or TOO_FEW against the first arm
    change_low: float | None = None  # the 95% interval of the change (bootstrap, as fractions like the change)
    change_high: float | None = None
    compared_steps: tuple[int, int] | None = None  # steps used (first arm, this arm) after pairing by shape
    compared_medians_us: tuple[float, float] | None = None  # their medians (per token: us per token)
    paired_by_shape: bool = False  # only steps of token buckets both arms have
    per_token: bool = False  # the change is of the time per token (step sizes differ)
    slower_pairs: float | None = None  # share of (first arm, this arm) step pairs in which this arm was slower
    samples_us: tuple[float, ...] = field(default=(), repr=False)  # the steady periods (per step; ranks averaged)
    sample_tokens: tuple[int | None, ...] = field(default=(), repr=False)  # their tokens per step
    # a disaggregated (AFD) run's round trips (analysis/roundtrips.py): send start to its receive's end
    round_trip_us: float | None = None  # median round trip
    round_trip_hidden_share: float | None = None  # of the round trips' time, the other microbatch's compute
    round_trip_criterion: bool | None = None  # per-microbatch compute >= the round trip's exposed time
    round_trip_change: float | None = None  # the median round trip against the first arm's (fraction)


def arm_of(label: str, report: Report, phase: str = ALL_STEPS) -> Arm:
    """One arm's row: every step, or the steps of one phase (vLLM's annotations say which)."""
    per_rank = [[s for s in r.steps if phase == ALL_STEPS or s.phase == phase] for r in report.ranks]
    steps = [s for mine in per_rank for s in mine]
    walls = np.array([s.period_us for s in steps], float)
    samples, tokens = _samples(per_rank)
    rt = report.round_trips
    afd = next((r.afd for r in report.ranks if r.afd is not None), None) if phase == ALL_STEPS else None
    x = spread(samples)  # the steady steps' (stalls are counted apart)
    if phase == ALL_STEPS:
        m, verdict = report.total, report.verdict.label
    else:
        p = next(p for p in report.phases if p.phase == phase)
        m = p.metrics
        verdict = "/".join(dict.fromkeys(p.per_rank)) if p.per_rank is not None else p.verdict.label if p.verdict else "-"
    known = [(t, u) for t, u in zip(tokens, samples) if t]
    return Arm(
        label=label,
        phase=phase,
        steps=len(samples),
        step_mean_us=float(walls.mean()) if len(walls) else math.nan,
        step_std_us=float(walls.std(ddof=1)) if len(walls) > 1 else 0.0,
        round_trips_per_layer=rt.per_layer if rt and phase == ALL_STEPS else None,
        per_round_trip_us=rt.per_round_trip_us if rt and phase == ALL_STEPS else None,
        comm_hidden_fraction=m.comm_hidden_fraction,
        replayed_kernel_fraction=m.replayed_kernel_fraction,
        verdict=verdict,
        step_median_us=float(np.median(samples)) if samples else None,
        step_p90_us=None if x is None else x.p90_us,
        step_p99_us=None if x is None else x.p99_us,
        step_max_us=None if x is None else x.max_us,
        stalls=sum(s.stall is not None for s in steps),
        window_median_us=float(np.median([s.wall_us for s in steps if s.stall is None])) if samples else None,
        per_token_us=float(np.median([u / t for t, u in known])) if known and len(known) == len(samples) else None,
        ranks=len([m for m in per_rank if m]),
        samples_us=tuple(samples),
        sample_tokens=tuple(tokens),
        round_trip_us=afd.median_us if afd else None,
        round_trip_hidden_share=afd.hidden_share if afd else None,
        round_trip_criterion=afd.criterion_met if afd else None,
    )


def _samples(per_rank: list[list[StepReport]]) -> tuple[list[float], list[int | None]]:
    """The arm's sample: each steady step's period; with several ranks, the k-th steady step's
    period averaged over the ranks (the ranks of one step are one observation, not several)."""
    steady = [[s for s in mine if s.stall is None] for mine in per_rank]
    steady = [m for m in steady if m]
    if not steady:
        return [], []
    n = min(len(m) for m in steady)
    periods = [float(np.mean([m[k].period_us for m in steady])) for k in range(n)]
    return periods, [_tokens(steady[0][k]) for k in range(n)]


def _tokens(s: StepReport) -> int | None:
    if s.context_tokens is None and s.generation_tokens is None:
        return None
    return (s.context_tokens or 0) + (s.generation_tokens or 0)


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
    """The change against the first arm (docs/analysis.md, "compare"): the steps paired by shape
    where both have token counts, per token where sizes still differ; the ratio of the medians with
    a bootstrap 95% interval; a call only with MIN_STEPS steps or more in each."""
    rt_change = None
    if arm.round_trip_us is not None and base.round_trip_us:
        rt_change = arm.round_trip_us / base.round_trip_us - 1.0
    a, b = list(base.samples_us), list(arm.samples_us)
    ta, tb = list(base.sample_tokens), list(arm.sample_tokens)
    paired = per_token = False
    if a and b and all(ta) and all(tb):
        ka, kb = [_bucket(t or 0) for t in ta], [_bucket(t or 0) for t in tb]
        shared = set(ka) & set(kb)
        keep_a = [i for i, k in enumerate(ka) if k in shared]
        keep_b = [i for i, k in enumerate(kb) if k in shared]
        if len(keep_a) == len(a) and len(keep_b) == len(b):
            paired = True  # every step has a shape the other arm has: nothing to leave out
        elif len(keep_a) >= MIN_STEPS and len(keep_b) >= MIN_STEPS:
            a, ta = [a[i] for i in keep_a], [ta[i] for i in keep_a]
            b, tb = [b[i] for i in keep_b], [tb[i] for i in keep_b]
            paired = True
        ma, mb = float(np.median(np.array(ta, float))), float(np.median(np.array(tb, float)))
        if abs(mb / ma - 1.0) > SIZES_DIFFER:
            a = [u / float(t or 1) for u, t in zip(a, ta)]
            b = [u / float(t or 1) for u, t in zip(b, tb)]
            per_token = True
    if not a or not b:
        return replace(arm, call=TOO_FEW, compared_steps=(len(a), len(b)), round_trip_change=rt_change)
    med_a, med_b = float(np.median(a)), float(np.median(b))
    if med_a <= 0:
        return replace(arm, call=TOO_FEW, compared_steps=(len(a), len(b)), round_trip_change=rt_change)
    low, high = bootstrap_interval(np.array(a), np.array(b))
    enough = len(a) >= MIN_STEPS and len(b) >= MIN_STEPS
    beyond = enough and (low > 0 or high < 0)
    diffs = np.subtract.outer(np.array(b), np.array(a))
    return replace(
        arm,
        round_trip_change=rt_change,
        change=med_b / med_a - 1.0,
        change_low=low,
        change_high=high,
        within_noise=None if not enough else not beyond,
        call=TOO_FEW if not enough else BEYOND if beyond else WITHIN,
        compared_steps=(len(a), len(b)),
        compared_medians_us=(med_a, med_b),
        paired_by_shape=paired,
        per_token=per_token,
        slower_pairs=float(((diffs > 0).sum() + 0.5 * (diffs == 0).sum()) / diffs.size),
    )


def _bucket(tokens: int) -> int:
    """A step's shape: its token count's bucket, a quarter of a doubling wide."""
    return int(round(TOKEN_BUCKETS_PER_DOUBLING * math.log2(max(tokens, 1))))


def bootstrap_interval(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """The 95% percentile-bootstrap interval of median(b) / median(a) - 1: BOOTSTRAP resamples of each
    arm with replacement, from numpy's default_rng(SEED), the first arm's (integers(0, n, (B, n)))
    drawn before this arm's (integers(0, m, (B, m))); the 2.5th and 97.5th linear percentiles.
    Seeded: the same arms give the same interval every run."""
    rng = np.random.default_rng(SEED)
    ra = np.median(a[rng.integers(0, len(a), (BOOTSTRAP, len(a)))], axis=1)
    rb = np.median(b[rng.integers(0, len(b), (BOOTSTRAP, len(b)))], axis=1)
    ratio = rb / ra - 1.0
    return float(np.percentile(ratio, 2.5)), float(np.percentile(ratio, 97.5))


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
