"""A load sweep summarised (docs/analysis.md, "Load sweep"): per load the ablation's table, DBO's change
against its DBO-off partner at the same load, where that change turns, and the tokens per microbatch.

Pure: figures in (each run's timed repeats, what it ran with, its profiled arm where it has one),
figures out. No words: render/sweep.py writes them.

- The ablation's table, per load and arm, over its usable repeats (analysis/compare/unprofiled.py repeats_of):
  TPOT: the mean ± sample sd (ddof 1) of the repeats' median TPOT; ITL: the mean of their median ITL;
  output tok/s: mean ± sd; the change against the load's first arm with a TPOT mean (by the means).
- DBO's change at a load: the DBO-on arm's TPOT mean against its partner's (DBO off, the same
  cudagraph mode and GPU sharing, at the same load) - 1, with a Welch t 95% interval of the difference
  of the means as a fraction of the partner's mean: (m_on - m_off ± t(df) · sqrt(s_on²/n_on +
  s_off²/n_off)) / m_off, df by Welch-Satterthwaite. Slower or faster "beyond noise" only where the
  interval excludes 0; no interval with fewer than 2 repeats in either arm. Where both arms were
  profiled at that load, compare's pair of their step periods beside it (analysis/compare/arms.py).
- Where DBO turns: over the loads in order of requests in flight, between the last load beyond noise
  one way and the next load beyond noise the other way; loads within noise between them are passed
  over, and nothing is said outside the loads measured. A load is beyond noise by its timed repeats'
  interval, else (3 repeats give a wide one) by its profiled windows' step periods where compare calls
  their change beyond noise; the turn says which told each side.
- Tokens per microbatch: requests in flight (the concurrency, capped by the prompts and by
  --max-num-seqs where the settings give it) / 2: a decode step carries one token per running
  request, and DBO splits the step's batch in two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from dbo_trace.analysis.compare.arms import BEYOND, TOO_FEW, Arm, Pair, RanWith, dbo_pairs, graphs_text
from dbo_trace.analysis.afd.effect import Effect
from dbo_trace.analysis.compare.unprofiled import Repeat, welch_t95

Call = Literal["slower", "faster", "within noise", "no interval"]
# Which measurement put a load beyond noise: the timed repeats (first), else the profiled step periods.
Told = Literal["repeats", "profiled"]
REPEATS: Told = "repeats"
PROFILED: Told = "profiled"
SLOWER: Call = "slower"
FASTER: Call = "faster"
WITHIN: Call = "within noise"
NO_INTERVAL: Call = "no interval"
MICROBATCHES = 2  # DBO splits a step's batch in two


@dataclass(frozen=True)
class LoadPoint:
    name: str
    concurrency: int
    num_prompts: int
    input_len: int
    output_len: int
    max_num_seqs: int | None = None  # the servers' --max-num-seqs where every arm's settings give one

    @property
    def in_flight(self) -> int:
        """Requests in flight at once in the steady state: the concurrency, capped by the prompts
        sent and by the batch the server admits."""
        caps = [self.concurrency, self.num_prompts] + ([self.max_num_seqs] if self.max_num_seqs else [])
        return min(caps)

    @property
    def tokens_per_microbatch(self) -> float:
        """A decode step's tokens per microbatch where DBO splits the batch: one token per request."""
        return self.in_flight / MICROBATCHES


@dataclass(frozen=True)
class RunFigures:
    """One arm at one load, as its recording gives it."""

    arm: str
    load: str
    status: str
    reason: str | None  # the sweep's or the reader's words, passed on
    repeats: tuple[Repeat, ...]  # the usable ones
    ran_with: RanWith | None  # from its settings, else its profiled trace; None where neither says
    profiled: Arm | None = None  # compare's all-steps row of its profiled window
    decode_step_tokens: float | None = None  # its profiled decode steps' median tokens per step
    decode_threshold: int | None = None  # the --dbo-decode-token-threshold its settings record


@dataclass(frozen=True)
class ArmAtLoad:
    arm: str
    status: str
    reason: str | None
    repeats: int
    tpot_mean_ms: float | None
    tpot_sd_ms: float | None
    itl_mean_ms: float | None
    tokens_per_s_mean: float | None
    tokens_per_s_sd: float | None
    change: float | None = None  # TPOT mean against the baseline's - 1
    ran_with: RanWith | None = None
    profiled: bool = False  # its profiled window was analysed (ran_with then holds what the trace showed)


@dataclass(frozen=True)
class LoadTable:
    load: LoadPoint
    rows: tuple[ArmAtLoad, ...]
    baseline: str | None  # the first arm with a TPOT mean at this load


@dataclass(frozen=True)
class PartChange:
    """One part of the step (compute, comm alone, idle: the pays-compare decomposition), off and on."""

    name: str
    off_us: float | None
    on_us: float | None


@dataclass(frozen=True)
class DboPoint:
    """DBO's change at one load: the DBO-on arm against its DBO-off partner."""

    load: LoadPoint
    on: str
    off: str
    tpot_ms: tuple[float, float] | None  # TPOT means (off, on)
    repeats: tuple[int, int]  # usable repeats (off, on)
    change: float | None  # TPOT mean on / off - 1
    change_low: float | None  # Welch t 95% interval (fractions of the off mean)
    change_high: float | None
    df: float | None  # its Welch-Satterthwaite degrees of freedom
    call: Call | None  # SLOWER, FASTER, WITHIN or NO_INTERVAL; None without both TPOT means
    profiled: Pair | None = None  # compare's pair of the two profiled windows, where both were profiled
    parts: tuple[PartChange, ...] = ()  # filled by dbo_parts where the profiled pair carries them
    decode_step_tokens: float | None = None  # the DBO arm's profiled decode steps' median tokens per step

    @property
    def measured_tokens_per_microbatch(self) -> float | None:
        return None if self.decode_step_tokens is None else self.decode_step_tokens / MICROBATCHES

    @property
    def measures_disagree(self) -> bool:
        """The two measures of this one change, the timed repeats' TPOT and the profiled step period,
        disagree beyond their intervals: both 95% intervals known, and they do not meet."""
        p = self.profiled
        if self.change_low is None or self.change_high is None or p is None or p.call == TOO_FEW:
            return False
        if p.change_low is None or p.change_high is None:
            return False
        return self.change_high < p.change_low or p.change_high < self.change_low

    @property
    def trusted(self) -> Told | None:
        """Where the two measures disagree, the one to trust: the timed repeats, always. They are
        separate recordings with the profiler off, and their interval holds the variance between
        recordings; the step period's bootstrap resamples the steps of one profiled window, so its
        interval cannot hold that variance, and both windows carry the profiler (docs/analysis.md)."""
        return REPEATS if self.measures_disagree else None

    @property
    def side(self) -> tuple[Call, Told] | None:
        """The side of no change this load is on beyond noise, and which measurement told it: the timed
        repeats first (the profiler off); where their interval holds 0 (3 repeats give a wide one), the
        profiled windows' step periods, where compare calls that change beyond noise and the two
        measures do not disagree (then the repeats are trusted). None: neither."""
        if self.call in (SLOWER, FASTER):
            return self.call, REPEATS
        p = self.profiled
        if p is not None and p.call == BEYOND and p.change is not None and p.change != 0 and not self.measures_disagree:
            return (SLOWER if p.change > 0 else FASTER), PROFILED
        return None


@dataclass(frozen=True)
class Turn:
    """Where DBO's change goes from one side of no change to the other, between two measured loads."""

    before: str  # the last load beyond noise on the first side
    after: str  # the next load beyond noise on the other side
    before_in_flight: int
    after_in_flight: int
    direction: tuple[Call, Call]  # (SLOWER, FASTER) or (FASTER, SLOWER)
    passed_over: tuple[str, ...] = ()  # loads between them within noise or without an interval
    told_by: tuple[Told, Told] = ("repeats", "repeats")  # which measurement put each of the two beyond noise


# What the sweep supports for vLLM's --dbo-decode-token-threshold (a decode-only batch of at least
# that many tokens is split in two): a value, or which case leaves none.
ThresholdKind = Literal[
    "split_from",  # one turn, slower to faster: split from the faster load's tokens a step
    "faster_throughout",  # faster at every load beyond noise: split from the first of them
    "slower_throughout",  # slower at every load beyond noise: no value in the range measured
    "not_beyond_noise",  # no load beyond noise: nothing to place a value by
    "turns_against",  # faster, then slower: a threshold splits from a size up, never below one
    "several_turns",  # more than one turn: no one threshold fits
]


@dataclass(frozen=True)
class Threshold:
    kind: ThresholdKind
    value: int | None  # the supported value: the tokens a step of a measured load (a bound, placed no closer)
    at: tuple[str, int] | None  # the load the value is placed at, and its tokens a step
    below: tuple[str, int] | None  # the last load slower beneath it (split_from), or the largest slower one
    recorded: int | None  # the DBO arm's own --dbo-decode-token-threshold, where its settings give it


def step_tokens(p: DboPoint) -> int:
    """A decode step's tokens at this load: the DBO arm's profiled decode steps' median where profiled
    (what vLLM compares with its threshold), else the requests in flight (one token each)."""
    return round(p.decode_step_tokens) if p.decode_step_tokens else p.load.in_flight


def decode_threshold(points: tuple[DboPoint, ...], turns: tuple[Turn, ...], recorded: int | None) -> Threshold:
    """The --dbo-decode-token-threshold the loads measured support (docs/analysis.md, "Load sweep"): where
    DBO turns from slower to faster, the faster load's tokens a step, a bound placed at a measured load
    and no closer (the turn lies somewhere above the slower load); else why no value is supported."""
    by_name = {p.load.name: p for p in points}
    sided = [(p, p.side[0]) for p in points if p.side is not None]

    def named(name: str) -> tuple[str, int]:
        return name, step_tokens(by_name[name])

    if len(turns) > 1:
        return Threshold("several_turns", None, None, None, recorded)
    if turns:
        t = turns[0]
        if t.direction != (SLOWER, FASTER):
            return Threshold("turns_against", None, named(t.after), named(t.before), recorded)
        at = named(t.after)
        return Threshold("split_from", at[1], at, named(t.before), recorded)
    if not sided:
        return Threshold("not_beyond_noise", None, None, None, recorded)
    if sided[0][1] == FASTER:
        first = sided[0][0]
        return Threshold("faster_throughout", step_tokens(first), named(first.load.name), None, recorded)
    return Threshold("slower_throughout", None, None, named(sided[-1][0].load.name), recorded)


@dataclass(frozen=True)
class DboSeries:
    """One DBO arm against its partner, load by load (in order of requests in flight)."""

    on: str
    off: str
    graphs: str
    points: tuple[DboPoint, ...]
    turns: tuple[Turn, ...]
    side: Call | None  # without a turn: SLOWER or FASTER where every load beyond noise is that side; None where none is
    beyond: int  # loads beyond noise
    unpaired: tuple[str, ...] = ()  # loads where one of the two has no TPOT mean
    threshold: Threshold | None = None  # the --dbo-decode-token-threshold the loads support, or why none


@dataclass(frozen=True)
class Unpaired:
    """A DBO arm with no DBO-off arm of the same cudagraph mode and GPU sharing to pair it with."""

    on: str
    graphs: str


@dataclass(frozen=True)
class SweepSummary:
    loads: tuple[LoadTable, ...]  # in order of requests in flight
    series: tuple[DboSeries, ...]
    unpaired: tuple[Unpaired, ...]
    runs: tuple[RunFigures, ...]
    undeclared: tuple[str, ...] = ()  # arms whose settings (or profiled trace) at no load say whether DBO ran


def _mean_sd(values: list[float | None]) -> tuple[float | None, float | None, int]:
    known = np.array([v for v in values if v is not None], float)
    if not len(known):
        return None, None, 0
    return float(known.mean()), float(known.std(ddof=1)) if len(known) > 1 else None, len(known)


def _tpot_mean(run: RunFigures) -> float | None:
    return _mean_sd([r.median_tpot_ms for r in run.repeats])[0]


def arm_at_load(run: RunFigures, baseline_tpot_ms: float | None = None) -> ArmAtLoad:
    """The arm's figures at a load; its change against baseline_tpot_ms (None: it is the baseline, or
    there is none)."""
    tpot, tpot_sd, _ = _mean_sd([r.median_tpot_ms for r in run.repeats])
    itl, _, _ = _mean_sd([r.median_itl_ms for r in run.repeats])
    rate, rate_sd, _ = _mean_sd([r.output_throughput for r in run.repeats])
    change = tpot / baseline_tpot_ms - 1.0 if tpot is not None and baseline_tpot_ms is not None else None
    return ArmAtLoad(
        run.arm, run.status, run.reason, len(run.repeats), tpot, tpot_sd, itl, rate, rate_sd, change,
        ran_with=run.ran_with, profiled=run.profiled is not None,
    )  # fmt: skip


def load_table(load: LoadPoint, runs: list[RunFigures]) -> LoadTable:
    """The arms at a load, each against the first arm with a TPOT mean (the baseline)."""
    base = next((i for i, r in enumerate(runs) if _tpot_mean(r)), None)
    if base is None:
        return LoadTable(load, tuple(arm_at_load(r) for r in runs), None)
    b = _tpot_mean(runs[base])
    rows = tuple(arm_at_load(r, None if i == base else b) for i, r in enumerate(runs))
    return LoadTable(load, rows, runs[base].arm)


def tpot_change(off: list[float], on: list[float]) -> tuple[float, float | None, float | None, float | None, Call]:
    """(change, low, high, df, call) of the mean TPOT, on against off (the module's docstring)."""
    a, b = np.array(off, float), np.array(on, float)
    change = float(b.mean() / a.mean() - 1.0)
    if len(a) < 2 or len(b) < 2:
        return change, None, None, None, NO_INTERVAL
    va, vb = float(a.var(ddof=1)) / len(a), float(b.var(ddof=1)) / len(b)
    se, t95, df = welch_t95(vb, len(b), va, len(a))
    half = t95 * se / float(a.mean())
    low, high = change - half, change + half
    call = SLOWER if low > 0 else FASTER if high < 0 else WITHIN
    return change, low, high, df, call


def same_pairing(on: RanWith, off: RanWith) -> bool:
    """compare's rule (analysis/compare/arms.py dbo_pairs): DBO off, one cudagraph mode (graphs both or
    neither, the same named mode where both name one), the same GPU sharing where both say."""
    graphs = on.graphs == off.graphs and (on.graph_mode is None or off.graph_mode is None or on.graph_mode == off.graph_mode)
    sharing = on.mps is None or off.mps is None or on.mps == off.mps
    return off.dbo is False and graphs and sharing


def partners(arms: list[str], ran_with: dict[str, RanWith]) -> tuple[list[tuple[str, str, str]], list[Unpaired]]:
    """Each DBO arm's partner, the first DBO-off arm in the sweep's order that fits (an arm's settings
    are the same at every load: they are decided from the first run that says)."""
    pairs, unpaired = [], []
    for on in arms:
        w = ran_with.get(on)
        if w is None or not w.dbo:
            continue
        fits = [off for off in arms if off in ran_with and same_pairing(w, ran_with[off])]
        named = w.graph_mode or next((ran_with[o].graph_mode for o in fits if ran_with[o].graph_mode), None)
        if fits:
            pairs.append((on, fits[0], graphs_text(w.graphs, named)))
        else:
            unpaired.append(Unpaired(on, graphs_text(w.graphs, named)))
    return pairs, unpaired


# The parts of a step, in the order the outputs list them (analysis/afd/effect.py's SpanParts and FfnParts).
SPAN_PARTS = (
    ("compute", "compute_us"), ("comm alone", "comm_alone_us"), ("copy", "copy_us"),
    ("host-caused idle", "host_idle_us"), ("dependency idle", "dependency_idle_us"),
)  # fmt: skip
FFN_PARTS = (("FFN compute", "compute_us"), ("FFN comm and copies", "other_busy_us"), ("FFN idle", "idle_us"))


def dbo_parts(effect: Effect | None) -> tuple[PartChange, ...]:
    """DBO's change taken apart per step on the profiled pair (analysis/afd/effect.py: compute, comm alone,
    copy, host-caused and dependency idle; the FFN's GPU where both arms have its trace), off and on;
    nothing where the pair carries no effect (a window too short, no steps)."""
    if effect is None:
        return ()
    out = [PartChange(name, getattr(effect.off, key), getattr(effect.on, key)) for name, key in SPAN_PARTS]
    off_ffn, on_ffn = effect.off.ffn, effect.on.ffn
    if off_ffn is not None and on_ffn is not None:
        out += [PartChange(name, getattr(off_ffn, key), getattr(on_ffn, key)) for name, key in FFN_PARTS]
    return tuple(out)


def dbo_point(load: LoadPoint, on: RunFigures, off: RunFigures) -> DboPoint:
    t_off = [r.median_tpot_ms for r in off.repeats if r.median_tpot_ms is not None]
    t_on = [r.median_tpot_ms for r in on.repeats if r.median_tpot_ms is not None]
    profiled = None
    parts: tuple[PartChange, ...] = ()
    if on.profiled is not None and off.profiled is not None:
        # a sweep's arms are named once each (the sweep's keys): their labels key the pair
        found = [p for p in dbo_pairs([off.profiled, on.profiled]) if p.on == on.arm and p.off == off.arm]
        profiled = found[0] if found else None
        parts = dbo_parts(profiled.effect if profiled is not None else None)
    means: tuple[float, float] | None = None
    change = low = high = df = None
    call: Call | None = None
    if t_off and t_on and float(np.mean(t_off)) > 0:
        change, low, high, df, call = tpot_change(t_off, t_on)
        means = (float(np.mean(t_off)), float(np.mean(t_on)))
    return DboPoint(
        load, on.arm, off.arm, means, (len(t_off), len(t_on)), change, low, high, df, call,
        profiled=profiled, parts=parts, decode_step_tokens=on.decode_step_tokens,
    )  # fmt: skip


def turns_of(points: list[DboPoint]) -> tuple[tuple[Turn, ...], Call | None, int]:
    """Where the change crosses no change beyond noise (points in order of requests in flight), the one
    side where it never does, and how many loads are beyond noise."""
    turns = []
    last: tuple[DboPoint, Call, Told] | None = None  # the last load beyond noise, its side and what told it
    between: list[str] = []
    beyond = [p for p in points if p.side is not None]
    for p in points:
        told = p.side
        if told is None:
            if last is not None:
                between.append(p.load.name)
            continue
        side, by = told
        if last is not None and last[1] != side:
            before = last[0].load
            turns.append(
                Turn(before.name, p.load.name, before.in_flight, p.load.in_flight, (last[1], side), tuple(between), (last[2], by))
            )
        last, between = (p, side, by), []
    sides = {p.side[0] for p in beyond if p.side is not None}
    one_side = next(iter(sides)) if len(sides) == 1 and not turns else None
    return tuple(turns), one_side, len(beyond)


def summarise(loads: list[LoadPoint], arms: list[str], runs: list[RunFigures]) -> SweepSummary:
    """The sweep's summary: loads in order of requests in flight (then as listed), arms in the sweep's order."""
    order = sorted(loads, key=lambda x: x.in_flight)  # stable: loads of one in-flight count keep the sweep's order
    by = {(r.arm, r.load): r for r in runs}
    tables = tuple(load_table(x, [by[(a, x.name)] for a in arms if (a, x.name) in by]) for x in order)
    ran_with: dict[str, RanWith] = {}
    for r in runs:
        if r.ran_with is not None and r.arm not in ran_with and r.ran_with.dbo is not None:
            ran_with[r.arm] = r.ran_with
    pairs, unpaired = partners(arms, ran_with)
    series = []
    for on, off, graphs in pairs:
        points, missing = [], []
        for x in order:
            a, b = by.get((on, x.name)), by.get((off, x.name))
            point = dbo_point(x, a, b) if a is not None and b is not None else None
            if point is None or point.call is None:
                missing.append(x.name)
            if point is not None and (point.call is not None or point.profiled is not None):
                points.append(point)
        turns, side, beyond = turns_of(points)
        recorded = next((r.decode_threshold for r in runs if r.arm == on and r.decode_threshold is not None), None)
        threshold = decode_threshold(tuple(points), turns, recorded)
        series.append(DboSeries(on, off, graphs, tuple(points), turns, side, beyond, tuple(missing), threshold))
    undeclared = tuple(a for a in arms if a not in ran_with and any(r.arm == a and r.repeats for r in runs))
    return SweepSummary(tables, tuple(series), tuple(unpaired), tuple(runs), undeclared)
