"""Arms of an ablation side by side (eager, eager + DBO, graphs, graphs + DBO ...).

A step's time is its period (its share of the wall clock, analysis/steps/stalls.py), start to start; an
arm's sample is its steady steps that have a next start (stalls apart; analysis/steps/periods.py). Ranks
are not independent samples: where an arm has several ranks, the k-th step's sample is the mean of
the ranks' k-th periods. Where both arms have token counts per step, steps are paired by shape
(token buckets both arms have), and where their sizes still differ the time per token is compared.
The change against the first arm is the ratio of the medians, with a seeded percentile-bootstrap 95%
interval; it is "beyond noise" only when the interval excludes no change and each arm has at least
MIN_STEPS steps (docs/analysis.md, "compare"). Arms of several loads are grouped by load, each
against the first arm of its load (load_groups). DBO's effect is the same change per pair: an arm
with DBO on against the arm with DBO off at the same load, GPU sharing and cudagraph mode
(dbo_pairs), taken apart per step where both arms have their parts (analysis/afd/effect.py).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from dbo_trace.analysis.steps.periods import marked_periods_of
from dbo_trace.analysis.afd.dbo_model import DboWhatIf
from dbo_trace.analysis.afd.pipeline import StepOverlap
from dbo_trace.analysis.afd.effect import Effect, SpanParts, effect_of
from dbo_trace.analysis.steps.periods import last_index, steady_periods
from dbo_trace.analysis.model import RankReport, Report, StepReport
from dbo_trace.analysis.afd.roles import FFN
from dbo_trace.analysis.afd.round_trips import AfdRoundTrips
from dbo_trace.analysis.steps.sources import PHASES, SOURCE_VLLM
from dbo_trace.analysis.host.summaries import spread
from dbo_trace.analysis.compare.unprofiled import Unprofiled, decode_step_ms
from dbo_trace.analysis.verdict.decision import Label
from dbo_trace.serve_args import json_value

MIN_STEPS = 5  # fewer steps in either arm: no call on the change (a median of 1-4 steps says little)
BOOTSTRAP = 2000  # resamples for the change's interval
SEED = 0  # the bootstrap's seed: the same arms give the same interval
TOKEN_BUCKETS_PER_DOUBLING = 4  # step shapes: token counts within ~19% share a bucket
SIZES_DIFFER = 0.10  # arms whose median tokens per step differ by more are compared per token
LOADS_DIFFER = 0.10  # arms whose median decode requests per step differ by more ran different loads
BEYOND, WITHIN, TOO_FEW = "beyond noise", "within noise", "too few steps"


ALL_STEPS = "all"


@dataclass(frozen=True)
class ArmRoundTrip:
    """A disaggregated (AFD) arm's round trips (analysis/afd/round_trips.py): send start to its receive's
    end, medians; its parts over the round trips matched to the FFN's kernels. compare's JSON writes
    each as the arm's `round_trip_*` key (render/compare.py, ROUND_TRIP_KEYS)."""

    median_us: float
    hidden_share: float | None  # of the round trips' time, the other microbatch's compute
    criterion: bool | None  # per-microbatch compute >= the round trip's exposed time
    criterion_ratio: float | None  # compute per microbatch / exposed
    compute_per_microbatch_us: float | None  # median step compute busy / round trips
    exposed_us: float | None  # median round trip less its hidden time
    receive_us: float | None  # median receive kernel: without the FFN trace, what holds its parts
    parts_matched: int | None  # round trips matched to the FFN's kernels (None: no FFN trace)
    transfer_us: float | None
    ffn_us: float | None  # the FFN's compute and queueing together
    ffn_compute_us: float | None  # apart, where the round trips' parts carry the split
    ffn_queue_us: float | None
    wait_us: float | None  # the attention side's receive waiting for the FFN's answer
    late_us: float | None  # of the transfer, the FFN's answer waiting for the attention's receive


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
    verdict: tuple[Label, ...]  # the arm's label, or its ranks' (each once); empty: none
    step_median_us: float | None = None  # the middle and the tail, which one long step cannot move as it moves the mean
    step_p90_us: float | None = None
    step_p99_us: float | None = None
    step_max_us: float | None = None
    # schema 4: the statistics (docs/analysis.md, "compare")
    stalls: int = 0  # steps left out as stalls
    window_median_us: float | None = None  # the median step window, beside the period where they differ
    per_token_us: float | None = None  # median period per token, where steps have token counts
    ranks: int = 1  # ranks averaged per step (never pooled as independent steps)
    samples_us: tuple[float, ...] = field(default=(), repr=False)  # the steady periods (per step; ranks averaged)
    sample_tokens: tuple[int | None, ...] = field(default=(), repr=False)  # their tokens per step
    round_trip: ArmRoundTrip | None = None  # a disaggregated (AFD) run's (None: not one)
    ran_with: RanWith | None = None  # schema 6: what the arm ran with (for pairing DBO on with DBO off)
    # schema 7: its step's parts (the load group is compare's: ComparedArm)
    parts: SpanParts | None = field(default=None, repr=False)  # its served rank's mean period in parts (analysis/afd/effect.py)
    arm: int = 0  # which input the row is of (its position among the arms given): what keys its data; labels only name it
    # schema 8: an AFD arm's overlap per step, the pipeline's (one meaning: analysis/afd/pipeline.py), and the
    # other arm predicted from this one (analysis/afd/dbo_model.py), beside the pair's measurement
    overlap: StepOverlap | None = None
    prediction: DboWhatIf | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Comparison:
    """One arm's step time against another's (compare: the first arm of its phase and load; a pair: the
    DBO-off arm), built whole where it is computed (_against; docs/analysis.md, "compare"). Both arms
    stay as measured."""

    call: str  # BEYOND, WITHIN or TOO_FEW
    compared_steps: tuple[int, int]  # steps used (the other arm, this arm) after pairing by shape
    change: float | None = None  # median / the other's median - 1 (fraction)
    change_low: float | None = None  # the 95% interval of the change (bootstrap, as fractions like the change)
    change_high: float | None = None
    within_noise: bool | None = None  # None: too few steps to call
    compared_medians_us: tuple[float, float] | None = None  # their medians (per token: us per token)
    paired_by_shape: bool = False  # only steps of token buckets both arms have
    per_token: bool = False  # the change is of the time per token (step sizes differ)
    slower_pairs: float | None = None  # share of (other arm, this arm) step pairs in which this arm was slower
    round_trip_change: float | None = None  # disaggregated arms: the median round trip against the other's


@dataclass(frozen=True)
class ComparedArm:
    """A row of compare's table: the arm as measured, the load group it is compared within (arms of one
    phase and one load share a group), and its comparison against that group's first arm."""

    measured: Arm
    load_group: int = 0
    vs_first: Comparison | None = None  # None: the group's first arm, the baseline


def graphs_text(graphs: bool | None, mode: str | None) -> str:
    """The cudagraph mode in a word: vLLM's mode name where known, else graphs or eager."""
    return "-" if graphs is None else (mode or "graphs") if graphs else "eager"


@dataclass(frozen=True)
class Load:
    """An arm's load: as its manifest declares it (`load`: requests in flight, input and output
    lengths), and as its trace shows it (the steady decode steps' median decode requests a step, from
    vLLM's `execute_context_N(..)_generation_M(..)` annotations)."""

    concurrency: int | None = None
    input_len: int | None = None
    output_len: int | None = None
    decode_requests: float | None = None  # median M of the steady decode steps

    @property
    def declared(self) -> bool:
        return self.concurrency is not None

    @property
    def known(self) -> bool:
        return self.declared or self.decode_requests is not None


def load_of(report: Report, declared: object = None) -> Load:
    """An arm's load: declared (a manifest's `load` dict: concurrency, input_len, output_len), and the
    steady decode steps' median decode requests from the served ranks' vLLM annotations."""
    median = next((r.decode_requests for r in _served(report) if r.decode_requests is not None), None)
    load = declared if isinstance(declared, dict) else {}

    def whole(key: str) -> int | None:
        v = load.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 10**9 else None

    return Load(whole("concurrency"), whole("input_len"), whole("output_len"), median)


def load_differs(a: Load | None, b: Load | None) -> bool:
    """Two loads differ: requests in flight (and the lengths) where both declare them, else the median
    decode requests per step by more than LOADS_DIFFER. Unknown on either side: not told apart."""
    if a is None or b is None:
        return False
    if a.declared and b.declared:
        return any(
            x is not None and y is not None and x != y
            for x, y in ((a.concurrency, b.concurrency), (a.input_len, b.input_len), (a.output_len, b.output_len))
        )
    if a.decode_requests is not None and b.decode_requests is not None:
        low = min(a.decode_requests, b.decode_requests)
        return abs(a.decode_requests - b.decode_requests) > LOADS_DIFFER * max(low, 1.0)
    return False


def load_keys(rows: list[ComparedArm]) -> dict[int, int]:
    """Each arm (Arm.arm) and its load's group, as compare's step table groups them (its all-steps
    rows): the unprofiled block measures changes within a load, like the table."""
    first = [r for r in rows if r.measured.phase == rows[0].measured.phase] if rows else []
    return {r.measured.arm: r.load_group for r in first}


@dataclass(frozen=True)
class RanWith:
    """What an arm ran with, as far as its recording's settings (the `vllm serve` command line) say,
    else as its trace shows (graph replays; microbatches)."""

    graphs: bool | None  # CUDA graphs replayed (decode)
    graph_mode: str | None  # vLLM's cudagraph_mode where the settings name it ("FULL_DECODE_ONLY"), "eager"
    dbo: bool | None
    told_by: str  # "settings", "trace", or "settings and trace" (each decided by one of them)
    microbatched: bool  # the trace's evidence: some step ran two microbatches
    mps: bool | None = None  # both roles' GPU shared under MPS (the report's roles); pairs share it
    load: Load | None = None  # what it served (pairs share it)


def arm_of(
    label: str, report: Report, phase: str = ALL_STEPS, ran_with: RanWith | None = None, marked_basis: bool = False
) -> Arm:
    """One arm's row: every step, or the steps of one phase (vLLM's annotations say which). An FFN
    server's steps are not the served steps: a disaggregated run's arm is its attention side.
    marked_basis: the sample is the steps by vLLM's annotations (marked_sample), as for every arm of
    the comparison where all have them."""
    served = _served(report)
    per_rank = [([s for s in r.steps if phase == ALL_STEPS or s.phase == phase], last_index(r.steps)) for r in served]
    steps = [s for mine, _ in per_rank for s in mine]
    walls = np.array([s.period_us for s in steps], float)
    if marked_basis and all(r.marked_periods for r in served):
        # every arm's steps by vLLM's annotations: one basis for the change (docs/analysis.md, "compare")
        samples, tokens = marked_sample(served, phase)
    else:
        samples, kth = steady_periods(per_rank)
        tokens = [_tokens(s) for s in kth]
    rt = report.round_trips
    afd = next((r.afd for r in report.ranks if r.afd is not None), None) if phase == ALL_STEPS else None
    x = spread(samples)  # the steady steps' (stalls are counted apart)
    verdict: tuple[Label, ...]
    if phase == ALL_STEPS:
        m, verdict = report.total, (report.verdict.label,)
    else:
        p = next(p for p in report.phases if p.phase == phase)
        m = p.metrics
        verdict = (
            tuple(dict.fromkeys(p.per_rank)) if p.per_rank is not None else (p.verdict.label,) if p.verdict else ()
        )
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
        ranks=len([m for m, _ in per_rank if m]),
        samples_us=tuple(samples),
        sample_tokens=tuple(tokens),
        ran_with=ran_with,
        parts=next((r.span_parts for r in served if r.span_parts is not None), None) if phase == ALL_STEPS else None,
        round_trip=None if afd is None else _arm_round_trip(afd),
        overlap=report.pipeline.overlap if report.pipeline is not None and phase == ALL_STEPS else None,
        prediction=report.dbo_what_if if phase == ALL_STEPS and isinstance(report.dbo_what_if, DboWhatIf) else None,
    )


def has_marked_periods(report: Report) -> bool:
    """Every served rank's steps can be timed by vLLM's annotations (execute_*): they are its steps, or
    it carries their periods beside steps of another source (an event log's)."""
    return all(r.marked_periods or r.step_source.startswith(SOURCE_VLLM) for r in _served(report))


def marked_sample(served: list[RankReport], phase: str) -> tuple[list[float], list[int | None]]:
    """The steady steps' periods by vLLM's annotations, start to start (the k-th averaged over the
    ranks, as steady_periods does), with the first rank's token counts. An event log's steps start
    at the step's graph replay or microbatch threads, a point that moves with DBO on and off: with
    both arms on the annotations, the change is of one thing (its step parts, analysis/afd/effect.py, are
    on the same basis)."""
    which = None if phase == ALL_STEPS else phase
    periods = marked_periods_of([r.marked_periods for r in served], which)
    first = next((m for r in served if (m := [x for x in r.marked_periods if which is None or x.phase == which])), [])
    return periods, [m.tokens for m in first[: len(periods)]]


def _served(report: Report) -> list[RankReport]:
    """The ranks whose steps are the served steps: not an FFN server's (its loop is not a step)."""
    return [r for r in report.ranks if r.role != FFN] or report.ranks


def _arm_round_trip(afd: AfdRoundTrips) -> ArmRoundTrip:
    """A disaggregated arm's round trip and its parts (analysis/afd/round_trips.py)."""
    part = afd.median_part  # None without the parts, or where they do not carry a split; a wrong name raises
    return ArmRoundTrip(
        median_us=afd.median_us,
        hidden_share=afd.hidden_share,
        criterion=afd.criterion_met,
        criterion_ratio=afd.criterion_ratio,
        compute_per_microbatch_us=afd.compute_per_microbatch_us,
        exposed_us=afd.median_exposed_us,
        receive_us=afd.median_receive_us,
        parts_matched=None if afd.parts is None else afd.ffn_matched,
        transfer_us=part("transfer_us"),
        ffn_us=part("ffn_us"),
        ffn_compute_us=part("compute_us"),
        ffn_queue_us=part("queue_us"),
        wait_us=part("wait_us"),
        late_us=part("late_us"),
    )


def _tokens(s: StepReport) -> int | None:
    if s.context_tokens is None and s.generation_tokens is None:
        return None
    return (s.context_tokens or 0) + (s.generation_tokens or 0)


def arms_of(
    label: str, report: Report, phases: list[str], ran_with: RanWith | None = None, marked_basis: bool = False
) -> list[Arm]:
    return [arm_of(label, report, ran_with=ran_with, marked_basis=marked_basis)] + [
        arm_of(label, report, p, ran_with, marked_basis) for p in phases
    ]


def shared_phases(reports: list[Report]) -> list[str]:
    """The phases every arm has steps of, in prefill, decode, mixed order; not a phase that holds every
    step of every arm (its rows would repeat the all-steps rows: four decode arms)."""
    have = [[s.phase for r in _served(rep) for s in r.steps] for rep in reports]
    whole = [p for p in PHASES if all(h and set(h) == {p} for h in have)]
    return [p for p in PHASES if all(p in h for h in have) and p not in whole]


def compare(arms: list[Arm]) -> list[ComparedArm]:
    """compare's rows: each arm as measured, with its comparison against the first arm of the same
    phase and load (its change and whether it is within noise), grouped by phase (all steps first,
    then each phase), and within a phase by load in the order the loads first come."""
    order = list(dict.fromkeys(a.phase for a in arms))
    out = []
    for phase in order:
        for k, group in enumerate(load_groups([b for b in arms if b.phase == phase])):
            out += [ComparedArm(a, k, _against(a, group[0]) if i else None) for i, a in enumerate(group)]
    return out


def _load(a: Arm) -> Load | None:
    return a.ran_with.load if a.ran_with is not None else None


def load_groups(arms: list[Arm]) -> list[list[Arm]]:
    """The arms by load: each joins the first group whose first arm's load it does not differ from."""
    groups: list[list[Arm]] = []
    for a in arms:
        home = next((g for g in groups if not load_differs(_load(g[0]), _load(a))), None)
        if home is None:
            groups.append([a])
        else:
            home.append(a)
    return groups


def _against(arm: Arm, base: Arm) -> Comparison:
    """The arm against base (docs/analysis.md, "compare"): the steps paired by shape where both have
    token counts, per token where sizes still differ; the ratio of the medians with a bootstrap 95%
    interval; a call only with MIN_STEPS steps or more in each; and the median round trip's own change
    where both are disaggregated arms."""
    rt, base_rt = arm.round_trip, base.round_trip
    rt_change = rt.median_us / base_rt.median_us - 1.0 if rt is not None and base_rt is not None and base_rt.median_us else None
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
    med_a, med_b = (float(np.median(a)), float(np.median(b))) if a and b else (0.0, 0.0)
    if med_a <= 0:
        return Comparison(TOO_FEW, (len(a), len(b)), round_trip_change=rt_change)
    low, high = bootstrap_interval(np.array(a), np.array(b))
    enough = len(a) >= MIN_STEPS and len(b) >= MIN_STEPS
    beyond = enough and (low > 0 or high < 0)
    return Comparison(
        call=TOO_FEW if not enough else BEYOND if beyond else WITHIN,
        compared_steps=(len(a), len(b)),
        change=med_b / med_a - 1.0,
        change_low=low,
        change_high=high,
        within_noise=None if not enough else not beyond,
        compared_medians_us=(med_a, med_b),
        paired_by_shape=paired,
        per_token=per_token,
        slower_pairs=slower_pairs(np.array(a), np.array(b)),
        round_trip_change=rt_change,
    )


def slower_pairs(a: np.ndarray, b: np.ndarray) -> float:
    """The share of (a_i, b_j) pairs with b_j > a_i, ties counting a half: by sorting, not the n x m
    matrix of differences (2 x 20,000 steps made a 3.2 GB one)."""
    first = np.sort(a)
    below = np.searchsorted(first, b, "left")  # per b_j: the a_i under it
    ties = np.searchsorted(first, b, "right") - below
    return float((below.sum() + 0.5 * ties.sum()) / (len(a) * len(b)))


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
    """DBO ran: some kernel has a microbatch, a step took a microbatched path (a full-graph replay is
    microbatched although its kernels cannot be told apart) or a replayed AFD graph's kernel order
    showed two (Report.dbo_ran: analysis/steps/microbatched.py)."""
    return report.dbo_ran


@dataclass(frozen=True)
class ShapeDiff:
    """Arms that differ in shape compare unlike things: what differs, and each arm's value."""

    key: str  # ranks, layers or microbatched
    values: tuple[tuple[str, object], ...]  # (arm label, its value), in the arms' order


def shape_differences(labels: list[str], reports: list[Report]) -> list[ShapeDiff]:
    """What differs in the arms' shape (ranks, layers, microbatched or not)."""

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
            out.append(ShapeDiff(key, tuple(zip(labels, values))))
    return out


# ---- what each arm ran with, and DBO's effect per pair ------------------------------------------------

TRUE_TEXT = ("true", "1", "yes", "on")


def _flag(value: object) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() in TRUE_TEXT)


# vLLM's CUDAGraphMode names (NONE, PIECEWISE, FULL, FULL_DECODE_ONLY, FULL_AND_PIECEWISE): a mode is
# a short name, else the settings name none and the trace decides.
GRAPH_MODE = re.compile(r"[A-Z][A-Z0-9_]{0,39}")


def _cudagraph_mode(config: object) -> str | None:
    """vLLM's cudagraph_mode from a --compilation-config value (its JSON text), upper-case; None where
    it names none (a bare optimisation level such as `-O 3`)."""
    parsed = json_value(config)
    mode = parsed.get("cudagraph_mode") if isinstance(parsed, dict) else None
    mode = mode.strip().upper() if isinstance(mode, str) else None
    return mode if mode is not None and GRAPH_MODE.fullmatch(mode) else None


def declared(settings: object) -> tuple[bool | None, str | None, bool | None]:
    """(graphs, graph mode, DBO) as a recording's settings declare them (the manifest's `settings`:
    `vllm serve` flags by group); None where they do not say. DBO is off unless --enable-dbo is
    given, so a `dbo` group without it says off; vLLM's default cudagraph mode is left to the trace."""
    if not isinstance(settings, dict):
        return None, None, None
    graphs: bool | None = None
    mode: str | None = None
    group = settings.get("cudagraph")
    if isinstance(group, dict):
        named = _cudagraph_mode(group.get("compilation-config"))
        if _flag(group.get("enforce-eager")) or named == "NONE":
            graphs, mode = False, "eager"
        elif named is not None:
            graphs, mode = True, named
    dbo_group = settings.get("dbo")
    dbo = _flag(dbo_group.get("enable-dbo")) if isinstance(dbo_group, dict) else None
    return graphs, mode, dbo


def ran_with(report: Report, settings: object = None, load: object = None) -> RanWith:
    """What the arm ran with: its settings where they say (`settings`: the manifest's, or parsed from
    its `vllm serve` command line by the caller), else its trace (a steady step that replayed graphs;
    a step that ran two microbatches). The trace decides on bare traces and on recordings made
    without the settings, so the pairing does not need them."""
    graphs, mode, dbo = declared(settings)
    served = _served(report)
    told = []
    is_microbatched = microbatched(report)
    if graphs is None:
        graphs = any(s.replayed for r in served for s in r.steps if s.stall is None)
        told.append("trace")
    else:
        told.append("settings")
    if dbo is None:
        dbo = is_microbatched
        told.append("trace")
    else:
        told.append("settings")
    mps = report.roles.mps if report.roles is not None else None
    return RanWith(graphs, mode, dbo, " and ".join(dict.fromkeys(told)), is_microbatched, mps, load_of(report, load))


def _same_graphs(a: RanWith, b: RanWith) -> bool:
    """One cudagraph mode: graphs both or neither, and the same named mode where both name one."""
    return a.graphs == b.graphs and (a.graph_mode is None or b.graph_mode is None or a.graph_mode == b.graph_mode)


def _same_sharing(a: RanWith, b: RanWith) -> bool:
    """The same GPU sharing, where both say (a bare trace does not: it pairs with either)."""
    return a.mps is None or b.mps is None or a.mps == b.mps


SLOWER, FASTER, NO_CHANGE = "DBO slower", "DBO faster", "no change beyond noise"
LOAD, SHARING, MODE = "load", "GPU sharing", "cudagraph mode"  # what can keep a DBO-off arm from pairing


@dataclass(frozen=True)
class Mismatch:
    """Why a DBO-off arm is not a DBO arm's partner: the first of load, sharing or mode that differs."""

    off: str  # the DBO-off arm's label
    key: str  # LOAD, SHARING or MODE
    on_value: object  # the DBO arm's (a Load, an MPS flag, a mode's name)
    off_value: object


def _mismatch(on: Arm, off: Arm) -> Mismatch | None:
    a, b = on.ran_with, off.ran_with
    assert a is not None and b is not None
    if load_differs(a.load, b.load):
        return Mismatch(off.label, LOAD, a.load, b.load)
    if not _same_sharing(a, b):
        return Mismatch(off.label, SHARING, a.mps, b.mps)
    if not _same_graphs(a, b):
        return Mismatch(off.label, MODE, graphs_text(a.graphs, a.graph_mode), graphs_text(b.graphs, b.graph_mode))
    return None


@dataclass(frozen=True)
class Pair:
    """DBO's effect at one load, sharing and cudagraph mode: the arm with DBO on against the arm with
    DBO off (by their step periods, start to start: the change, its interval and call as `compare`
    gives against the first arm), with the unprofiled TPOT and the round trip beside it where both
    arms have them, and the change taken apart per step (analysis/afd/effect.py) where both have parts."""

    phase: str
    on: str  # the DBO arm's label
    off: str | None  # its partner's; None: no DBO-off arm of the same load, sharing and mode
    graphs: str  # the mode they share ("FULL_DECODE_ONLY", "graphs", "eager")
    others: tuple[str, ...] = ()  # other DBO-off arms that fit as well: the first given is taken
    change: float | None = None  # median period on / off - 1
    change_low: float | None = None
    change_high: float | None = None
    call: str | None = None  # BEYOND, WITHIN or TOO_FEW
    compared_steps: tuple[int, int] | None = None  # (off, on)
    compared_medians_us: tuple[float, float] | None = None  # (off, on); per token where per_token
    per_token: bool = False  # the same load's steps differ in shape (tokens a step by > SIZES_DIFFER)
    slower_pairs: float | None = None  # share of (off, on) step pairs in which DBO was slower
    tpot_ms: tuple[float, float] | None = None  # unprofiled decode step medians (off, on), from the repeats
    tpot_change: float | None = None
    tpot_basis: str | None = None  # what tpot_ms is: TPOT, ITL (prefills interleave), or TPOT with prefills
    round_trip_us: tuple[float, float] | None = None  # median round trips (off, on), disaggregated arms
    round_trip_change: float | None = None
    load: Load | None = None  # the DBO arm's
    load_known: bool = True  # False: neither a declared load nor vLLM's decode counts to match on
    unpaired: tuple[Mismatch, ...] = ()  # without a partner: why each DBO-off arm of the phase is not one
    effect: Effect | None = None  # the change per step in parts, all steps' row only
    on_arm: int = 0  # the arms' identities (Arm.arm): on and off name them, these key them
    off_arm: int | None = None

    @property
    def outcome(self) -> str | None:
        """By the wall clock between step starts: DBO slower, faster, or neither beyond noise."""
        if self.call == BEYOND and self.change is not None:
            return SLOWER if self.change > 0 else FASTER
        return NO_CHANGE if self.call == WITHIN else None


def dbo_pairs(arms: list[Arm], unprofiled: list[Unprofiled] = []) -> list[Pair]:
    """Per phase, each arm that ran DBO against the arm that did not with the same load, GPU sharing
    and cudagraph mode, the first such arm in the order given; an arm without one is listed with no
    partner and why; nothing where no arm ran without DBO. arms: as measured (their ran_with set), in
    compare's order; unprofiled: the arms' repeats."""
    timed = {u.arm: u for u in unprofiled}  # by identity: two arms may share a label
    out = []
    for phase in dict.fromkeys(a.phase for a in arms):
        rows = [a for a in arms if a.phase == phase and a.ran_with is not None]
        offs = [a for a in rows if a.ran_with is not None and a.ran_with.dbo is False]
        if not offs:
            continue  # every arm ran DBO (or none says): no ablation of DBO to pair
        for on in rows:
            w = on.ran_with
            if w is None or not w.dbo:
                continue
            why = [(a, _mismatch(on, a)) for a in offs]
            fits = [a for a, m in why if m is None]
            named = w.graph_mode or next((a.ran_with.graph_mode for a in fits if a.ran_with and a.ran_with.graph_mode), None)
            graphs = graphs_text(w.graphs, named)
            if not fits:
                out.append(
                    Pair(phase, on.label, None, graphs, load=w.load, unpaired=tuple(m for _, m in why if m is not None), on_arm=on.arm)
                )
                continue
            off = fits[0]
            vs = _against(on, off)
            both = decode_step_ms(timed[off.arm], timed[on.arm]) if off.arm in timed and on.arm in timed else None
            t, basis = both if both is not None else (None, None)
            rt = (off.round_trip.median_us, on.round_trip.median_us) if off.round_trip and off.round_trip.median_us and on.round_trip else None
            off_load = off.ran_with.load if off.ran_with is not None else None
            known = w.load is not None and w.load.known and off_load is not None and off_load.known
            out.append(
                Pair(
                    phase, on.label, off.label, graphs, tuple(a.label for a in fits[1:]),
                    change=vs.change, change_low=vs.change_low, change_high=vs.change_high, call=vs.call,
                    compared_steps=vs.compared_steps, compared_medians_us=vs.compared_medians_us, per_token=vs.per_token,
                    slower_pairs=vs.slower_pairs, tpot_ms=t, tpot_change=t[1] / t[0] - 1.0 if t else None, tpot_basis=basis,
                    round_trip_us=rt, round_trip_change=vs.round_trip_change if rt else None,  # _against's, against off
                    load=w.load, load_known=known, effect=_effect(off, on, vs), on_arm=on.arm, off_arm=off.arm,
                )
            )  # fmt: skip
    return out


def _effect(off: Arm, on: Arm, vs: Comparison) -> Effect | None:
    """The pair's change per step in parts, where both arms have them; the measured change is the
    median period's (compare's sample: the steps paired by shape), its call compare's."""
    if off.parts is None or on.parts is None:
        return None
    medians = vs.compared_medians_us if not vs.per_token else None
    if medians is None:
        medians = (off.step_median_us, on.step_median_us) if off.step_median_us and on.step_median_us else None
    beyond = None if vs.call not in (BEYOND, WITHIN) else vs.call == BEYOND
    return effect_of(
        off.parts, on.parts, median_off_us=medians[0] if medians else None, median_on_us=medians[1] if medians else None,
        beyond_noise=beyond,
    )  # fmt: skip
