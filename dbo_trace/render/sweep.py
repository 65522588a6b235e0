"""A load sweep's summary (analysis/compare/load_sweep.py computes it): the document (schema `dbo-trace-sweep-summary`,
docs/report-schema.md) and its terminal, Markdown, HTML and JSON renderings. Selects, rounds and words;
computes nothing. Every name from the sweep (arms, loads, reasons, commands) is input: made inert here
for each output (render/safe.py)."""

from __future__ import annotations

import base64
import io
from dataclasses import replace

import msgspec

from dbo_trace import __version__
from dbo_trace.analysis.compare.arms import BEYOND, TOO_FEW, Pair, graphs_text
from dbo_trace.analysis.compare.load_sweep import (
    FASTER,
    NO_INTERVAL,
    PROFILED,
    SLOWER,
    WITHIN,
    ArmAtLoad,
    Call,
    DboPoint,
    DboSeries,
    LoadTable,
    SweepSummary,
    Turn,
)
from dbo_trace.render.base import RenderOptions
from dbo_trace.render.compare import ran_with_text
from dbo_trace.render.words.pipeline import conclusion
from dbo_trace.render.format import md_table, ms
from dbo_trace.render.json_out import json_text
from dbo_trace.render.layout import NEVER, Column, strip_trailing, table, terminal_width, wrap
from dbo_trace.render.safe import Markdown, html_text, markdown_code, markdown_text, terminal_document

SWEEP_SCHEMA, SWEEP_SCHEMA_VERSION = "dbo-trace-sweep-summary", 1


class Struct(msgspec.Struct, forbid_unknown_fields=True):
    pass


class ArmRow(Struct):
    arm: str
    status: str  # complete, failed, incomplete, skipped, pending
    reason: str | None
    ran_with: str | None  # its cudagraph mode and DBO, as its settings (or trace) say
    repeats: int  # usable timed repeats
    tpot_mean_ms: float | None  # mean over the repeats of each repeat's median TPOT
    tpot_sd_ms: float | None  # their sample standard deviation (null below 2 repeats)
    itl_median_ms: float | None  # mean over the repeats of each repeat's median ITL
    output_tokens_per_s: float | None
    output_tokens_per_s_sd: float | None
    change: float | None  # TPOT mean against the load's baseline arm - 1


class LoadBlock(Struct):
    name: str
    concurrency: int
    num_prompts: int
    input_len: int
    output_len: int
    in_flight: int  # requests in flight: the concurrency capped by the prompts and --max-num-seqs
    tokens_per_microbatch: float  # in flight / 2: a decode step's tokens per microbatch under DBO
    baseline: str | None  # the arm the changes are against: the first with a TPOT mean
    arms: list[ArmRow]


class ProfiledChange(Struct):
    """compare's pair of the two profiled windows at this load (step periods, start to start)."""

    change: float | None
    change_low: float | None  # bootstrap 95% interval
    change_high: float | None
    call: str | None  # beyond noise, within noise, too few steps
    steps: list[int] | None  # (off, on)
    step_median_ms: list[float] | None  # (off, on); us per token where per_token
    per_token: bool
    conclusion: str | None = None  # compare's sentence for the pair: does DBO pay, with the parts that made it


class PartBlock(Struct):
    name: str
    off_us: float | None
    on_us: float | None


class PointBlock(Struct):
    load: str
    in_flight: int
    tokens_per_microbatch: float
    measured_tokens_per_microbatch: float | None  # the DBO arm's profiled decode steps' median tokens / 2
    tpot_off_ms: float | None
    tpot_on_ms: float | None
    repeats: list[int]  # (off, on)
    change: float | None
    change_low: float | None
    change_high: float | None
    interval: str  # "welch_t95"
    df: float | None
    call: Call | None
    profiled: ProfiledChange | None
    parts: list[PartBlock]
    # the side of no change beyond noise, and what told it: the repeats, else the profiled periods
    # (analysis/compare/load_sweep.py DboPoint.side, the one rule the turn is placed by)
    side: Call | None = None
    side_told_by: str | None = None
    # the timed repeats' and the profiled change disagree beyond their intervals, and the one to trust
    # (analysis/compare/load_sweep.py DboPoint.measures_disagree, .trusted: "repeats")
    measures_disagree: bool = False
    trusted: str | None = None


class TurnBlock(Struct):
    before: str
    after: str
    before_in_flight: int
    after_in_flight: int
    from_side: Call
    to_side: Call
    passed_over: list[str]
    told_by: list[str]  # which measurement put each side beyond noise: "repeats", else "profiled"


class SeriesBlock(Struct):
    on: str
    off: str
    graphs: str
    points: list[PointBlock]
    turns: list[TurnBlock]
    side: Call | None  # without a turn: the one side every load beyond noise is on
    loads_beyond_noise: int
    loads_unpaired: list[str]  # loads where the two arms do not both have TPOT means
    turn_text: str
    threshold: ThresholdBlock | None = None  # the --dbo-decode-token-threshold the loads support, or why none
    threshold_text: str | None = None


class ThresholdBlock(Struct):
    """analysis/compare/load_sweep.py Threshold: a value of vLLM's --dbo-decode-token-threshold, or why none."""

    kind: str  # split_from, faster_throughout, slower_throughout, not_beyond_noise, turns_against, several_turns
    value: int | None  # tokens a decode step, at a measured load (a bound, no closer)
    at_load: str | None
    at_tokens: int | None
    below_load: str | None
    below_tokens: int | None
    recorded: int | None  # the DBO arm's own threshold, as its settings record it


class UnpairedBlock(Struct):
    on: str
    graphs: str


class RunBlock(Struct):
    arm: str
    load: str
    status: str
    reason: str | None
    profiled: bool


class SweepDocument(Struct):
    schema: str
    schema_version: int
    dbo_trace_version: str
    created: str
    command: list[str]
    peer_command: list[str] | None
    repeats: int
    profile: bool
    loads: list[LoadBlock]
    dbo: list[SeriesBlock]
    unpaired: list[UnpairedBlock]
    undeclared: list[str]  # arms with timed repeats whose settings (or trace) never say whether DBO ran: not paired
    runs_not_used: list[RunBlock]
    warnings: list[str]


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(float(x), digits)


def ran_with_words(a: ArmAtLoad) -> str | None:
    """Its cudagraph mode and DBO; whether a step was microbatched only where its trace was read."""
    w = a.ran_with
    if w is None:
        return None
    return ran_with_text(w) if a.profiled else f"{graphs_text(w.graphs, w.graph_mode)}, DBO {'on' if w.dbo else 'off'}"


def _arm_row(a: ArmAtLoad) -> ArmRow:
    return ArmRow(
        arm=a.arm, status=a.status, reason=a.reason, ran_with=ran_with_words(a),
        repeats=a.repeats, tpot_mean_ms=_r(a.tpot_mean_ms), tpot_sd_ms=_r(a.tpot_sd_ms), itl_median_ms=_r(a.itl_mean_ms),
        output_tokens_per_s=_r(a.tokens_per_s_mean, 2), output_tokens_per_s_sd=_r(a.tokens_per_s_sd, 2), change=_r(a.change),
    )  # fmt: skip


def _load_block(t: LoadTable) -> LoadBlock:
    x = t.load
    return LoadBlock(
        x.name, x.concurrency, x.num_prompts, x.input_len, x.output_len, x.in_flight, x.tokens_per_microbatch, t.baseline,
        [_arm_row(a) for a in t.rows],
    )  # fmt: skip


def _profiled(p: Pair | None) -> ProfiledChange | None:
    if p is None:
        return None
    medians = p.compared_medians_us
    scale = 1.0 if p.per_token else 1000.0
    return ProfiledChange(
        _r(p.change), _r(p.change_low), _r(p.change_high), p.call,
        list(p.compared_steps) if p.compared_steps else None,
        [round(m / scale, 4) for m in medians] if medians else None, p.per_token, conclusion(p),
    )  # fmt: skip


def _point_block(p: DboPoint) -> PointBlock:
    t = p.tpot_ms
    return PointBlock(
        load=p.load.name, in_flight=p.load.in_flight, tokens_per_microbatch=p.load.tokens_per_microbatch,
        measured_tokens_per_microbatch=_r(p.measured_tokens_per_microbatch, 2),
        tpot_off_ms=_r(t[0]) if t else None, tpot_on_ms=_r(t[1]) if t else None, repeats=list(p.repeats),
        change=_r(p.change), change_low=_r(p.change_low), change_high=_r(p.change_high), interval="welch_t95",
        df=_r(p.df, 2), call=p.call, profiled=_profiled(p.profiled),
        parts=[PartBlock(x.name, _r(x.off_us, 3), _r(x.on_us, 3)) for x in p.parts],
        side=p.side[0] if p.side else None, side_told_by=p.side[1] if p.side else None,
        measures_disagree=p.measures_disagree, trusted=p.trusted,
    )  # fmt: skip


def turn_text(s: DboSeries) -> str:
    """Where DBO turns, or that it does not in the loads measured: never past them."""
    who = f"{s.on} against {s.off}"
    if not s.points:
        return f"{who}: no load where both have timed repeats; nothing to say where DBO turns"
    low, high = s.points[0].load.in_flight, s.points[-1].load.in_flight
    if s.turns:
        said = []
        call_at = {p.load.name: p.call for p in s.points}
        for t in s.turns:
            over = [f"{n}: {call_at.get(n) or 'no TPOT'}" for n in t.passed_over]
            told = (
                "both beyond noise by the timed repeats"
                if t.told_by == ("repeats", "repeats")
                else f"both beyond noise ({t.before} by its {_told(t.told_by[0])}, {t.after} by its {_told(t.told_by[1])})"
            )
            said.append(
                f"from {t.direction[0]} to {t.direction[1]} between {t.before} ({t.before_in_flight} in flight) and "
                f"{t.after} ({t.after_in_flight} in flight), {told}"
                + (f" (between them {', '.join(over)})" if over else "")
            )
        return f"{who}: DBO turns " + "; then ".join(said) + "; placed no closer than the loads measured"
    span = f"{low} to {high} requests in flight" if low != high else f"{low} requests in flight"
    if s.side is None:
        return f"{who}: DBO does not turn in the range measured ({span}): no load is beyond noise"
    calls = [f"{p.load.name} {p.side[0] if p.side else p.call}" for p in s.points]
    return (
        f"{who}: DBO does not turn in the range measured ({span}): {s.side} beyond noise at {s.beyond} of "
        f"{len(s.points)} loads ({', '.join(calls)})"
    )


FLAG = "--dbo-decode-token-threshold"


def threshold_text(s: DboSeries) -> str | None:
    """The vLLM setting that puts the turn to work: the value the loads measured support, a bound placed
    no closer than they are, or why none is."""
    t = s.threshold
    if t is None:
        return None
    ran = "" if t.recorded is None else f"; this sweep ran {s.on} with {FLAG} {t.recorded}"
    none = f"next step: no {FLAG} value is supported: "
    if t.kind == "split_from" and t.at is not None and t.below is not None:
        (a, at), (b, below) = t.at, t.below
        return (
            f"next step: set {FLAG} {at} on {s.on}'s server (vLLM splits a decode batch of at least that many "
            f"tokens): DBO was slower at {below} tokens a step ({b}) and faster at {at} ({a}); the turn lies between "
            f"them, unmeasured, so {at} is a bound placed at the faster load and no closer (any value from {below + 1} "
            f"to {at} fits the loads measured; a load between them would narrow it){ran}"
        )
    if t.kind == "faster_throughout" and t.at is not None:
        a, at = t.at
        return (
            f"next step: set {FLAG} {at} on {s.on}'s server: DBO was faster at every load beyond noise, from {at} "
            f"tokens a step ({a}); nothing measured below {at} supports a lower value{ran}"
        )
    if t.kind == "slower_throughout" and t.below is not None:
        b, below = t.below
        return (
            none + f"DBO was slower at every load beyond noise, up to {below} tokens a step ({b}); a threshold above "
            f"{below} keeps DBO off across the loads measured, and loads past {below} would show whether it pays{ran}"
        )
    if t.kind == "turns_against" and t.at is not None and t.below is not None:
        return (
            none + f"DBO was faster at {t.below[1]} tokens a step ({t.below[0]}) and slower at {t.at[1]} ({t.at[0]}), "
            f"and vLLM splits a decode batch from a size up, never only below one{ran}"
        )
    if t.kind == "several_turns":
        return none + f"DBO turns more than once in the loads measured, and one threshold splits from one size up{ran}"
    return none + f"no load is beyond noise, so nothing places one (more repeats narrow the intervals){ran}"


def _threshold_block(s: DboSeries) -> ThresholdBlock | None:
    t = s.threshold
    if t is None:
        return None
    at, below = t.at or (None, None), t.below or (None, None)
    return ThresholdBlock(t.kind, t.value, at[0], at[1], below[0], below[1], t.recorded)


def _told(by: str) -> str:
    return "timed repeats" if by == "repeats" else "profiled step periods (its repeats' interval holds 0)"


def _turn_block(t: Turn) -> TurnBlock:
    return TurnBlock(
        t.before, t.after, t.before_in_flight, t.after_in_flight, t.direction[0], t.direction[1], list(t.passed_over),
        list(t.told_by),
    )


def build_sweep_document(
    summary: SweepSummary,
    *,
    created: str,
    command: list[str],
    peer_command: list[str] | None,
    repeats: int,
    profile: bool,
    warnings: list[str],
) -> SweepDocument:
    used = {"complete"}
    return SweepDocument(
        schema=SWEEP_SCHEMA,
        schema_version=SWEEP_SCHEMA_VERSION,
        dbo_trace_version=__version__,
        created=created,
        command=command,
        peer_command=peer_command,
        repeats=repeats,
        profile=profile,
        loads=[_load_block(t) for t in summary.loads],
        dbo=[
            SeriesBlock(
                s.on,
                s.off,
                s.graphs,
                [_point_block(p) for p in s.points],
                [_turn_block(t) for t in s.turns],
                s.side,
                s.beyond,
                list(s.unpaired),
                turn_text(s),
                _threshold_block(s),
                threshold_text(s),
            )  # fmt: skip
            for s in summary.series
        ],
        unpaired=[UnpairedBlock(u.on, u.graphs) for u in summary.unpaired],
        undeclared=list(summary.undeclared),
        runs_not_used=[
            RunBlock(r.arm, r.load, r.status, r.reason, r.profiled is not None)
            for r in summary.runs
            if r.status not in used or (not r.repeats and r.profiled is None)
        ],
        warnings=warnings,
    )


# ---- cells and lines the text outputs share ---------------------------------------------------------------


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def tpot_cell(a: ArmRow) -> str:
    if a.tpot_mean_ms is None:
        return "-"
    sd = "" if a.tpot_sd_ms is None else f" ± {a.tpot_sd_ms:.2f}"
    return f"{a.tpot_mean_ms:.2f}{sd} (n {a.repeats})"


def rate_cell(a: ArmRow) -> str:
    if a.output_tokens_per_s is None:
        return "-"
    sd = "" if a.output_tokens_per_s_sd is None else f" ± {a.output_tokens_per_s_sd:.0f}"
    return f"{a.output_tokens_per_s:.0f}{sd}"


def change_cell(a: ArmRow, baseline: str | None) -> str:
    if a.status != "complete" or a.tpot_mean_ms is None:
        return a.status if a.status != "complete" else "no repeats"
    return "baseline" if a.arm == baseline else _pct(a.change)


def load_title(x: LoadBlock) -> str:
    return (
        f"load {x.name}: {x.in_flight} request{'s' * (x.in_flight != 1)} in flight ({x.num_prompts} prompts at concurrency "
        f"{x.concurrency}, {x.input_len} tokens in, {x.output_len} out); {x.tokens_per_microbatch:g} decode "
        f"token{'s' * (x.tokens_per_microbatch != 1)} per microbatch under DBO"
    )


LOAD_COLUMNS = [
    Column("arm", right=False, wrap=True),
    Column("TPOT ms (mean ± sd, n)"),
    Column("vs baseline (TPOT)", right=False),
    Column("ITL median ms", keep=3),
    Column("output tok/s (mean ± sd)", keep=4),
    Column("ran with", right=False, wrap=True, keep=2),
]
TERMINAL_LOAD_COLUMNS = (
    len(LOAD_COLUMNS) - 1
)  # the terminal leaves "ran with" to the other outputs: the pair table names the mode


def load_rows(x: LoadBlock) -> list[list[str]]:
    return [
        [a.arm, tpot_cell(a), change_cell(a, x.baseline), _ms(a.itl_median_ms), rate_cell(a), a.ran_with or "-"] for a in x.arms
    ]


def load_lines(x: LoadBlock) -> list[str]:
    """What the table cannot hold: why an arm has no figures, and which arm is the baseline where it is not the first."""
    out = [
        f"{a.arm}: "
        + (f"{a.status}" + (f" ({a.reason})" if a.reason else "") if a.status != "complete" else "no usable timed repeat")
        for a in x.arms
        if a.status != "complete" or a.tpot_mean_ms is None
    ]
    if x.baseline is not None and x.arms and x.arms[0].arm != x.baseline:
        out.append(f"changes are against {x.baseline}, the first arm with timed repeats at this load")
    return out


def interval_cell(p: PointBlock) -> str:
    if p.change is None:
        return "-"
    text = _pct(p.change)
    if p.change_low is not None and p.change_high is not None:
        text += f" [{100 * p.change_low:+.1f}, {100 * p.change_high:+.1f}]"
    return text


CALL_WORDS = {SLOWER: "DBO slower", FASTER: "DBO faster", WITHIN: "noise", NO_INTERVAL: "1 repeat: no interval"}


def call_cell(p: PointBlock) -> str:
    """The repeats' call; where their interval holds 0 but the profiled step periods are beyond noise,
    that side, marked as theirs (the turn is placed by it: analysis/compare/load_sweep.py DboPoint.side)."""
    if p.side is not None and p.side_told_by == PROFILED:
        return f"{CALL_WORDS[p.side]} (profiled)"
    return "-" if p.call is None else CALL_WORDS[p.call]


def profiled_cell(p: PointBlock) -> str:
    q = p.profiled
    if q is None:
        return "-"
    if q.call == TOO_FEW or q.change is None:
        return "too few steps"
    text = f"{100 * q.change:+.1f}%"
    if q.change_low is not None and q.change_high is not None:
        text += f" [{100 * q.change_low:+.1f}, {100 * q.change_high:+.1f}]"
    return text + (" per token" if q.per_token else "") + ("" if q.call == BEYOND else " (noise)")


def flight_cell(p: PointBlock) -> str:
    """Requests in flight, and the decode tokens per microbatch under DBO (measured beside, where profiled)."""
    measured = "" if p.measured_tokens_per_microbatch is None else f", {p.measured_tokens_per_microbatch:g} measured"
    return f"{p.in_flight} ({p.tokens_per_microbatch:g}{measured})"


DBO_COLUMNS = [
    Column("load", right=False, wrap=True),
    Column("in flight (tokens per microbatch)", keep=6),  # the load's own title above says it too
    Column("TPOT ms off -> on", keep=3),
    Column("DBO's change [t 95%]", right=False),
    Column("call", right=False),
    Column("profiled step period [95%]", right=False, keep=5),
]
PROFILED_COLUMN = len(DBO_COLUMNS) - 1


def dbo_columns(s: SeriesBlock) -> list[Column]:
    """The change table's columns: where a row's call rests on the profiled step periods (its repeats'
    interval holds 0), that column is never dropped, since without it the row's interval holds 0
    beside a call that says faster or slower; the requests in flight go first (each load's title has them)."""
    if not any(p.side_told_by == PROFILED for p in s.points):
        return DBO_COLUMNS
    return [*DBO_COLUMNS[:PROFILED_COLUMN], replace(DBO_COLUMNS[PROFILED_COLUMN], keep=NEVER)]


def series_title(s: SeriesBlock) -> str:
    return (
        f"DBO's change per load: {s.on} against {s.off} (DBO off, cudagraphs {s.graphs}, same GPU sharing), "
        "by the timed repeats' TPOT"
    )


def series_rows(s: SeriesBlock) -> list[list[str]]:
    return [
        [
            p.load,
            flight_cell(p),
            "-" if p.tpot_off_ms is None or p.tpot_on_ms is None else f"{p.tpot_off_ms:.2f} -> {p.tpot_on_ms:.2f}",
            interval_cell(p),
            call_cell(p),
            profiled_cell(p),
        ]  # fmt: skip
        for p in s.points
    ]


def disagree_lines(s: SeriesBlock) -> list[str]:
    """Per load where the two measures of DBO's change disagree beyond their intervals: both, and which
    to trust and why (docs/analysis.md, "Load sweep")."""
    out = []
    for p in s.points:
        if not p.measures_disagree or p.profiled is None:
            continue
        off, on = p.repeats
        out.append(
            f"{p.load}: DBO's two measures disagree beyond their intervals: {interval_cell(p)} by the timed repeats' "
            f"TPOT, {profiled_cell(p)} by the profiled step period. Trust the timed repeats: {off} and {on} "
            "recordings with the profiler off, whose interval holds the variance between recordings; the profiled "
            "interval resamples the steps of one window per arm, so it cannot hold that variance, and both "
            "windows ran under the profiler"
        )
    return out


def parts_lines(s: SeriesBlock) -> list[str]:
    """Per profiled load: compare's sentence for the pair, then each part of the step off -> on."""
    out = []
    for p in s.points:
        if p.profiled is not None and p.profiled.conclusion:
            out.append(f"{p.load}, profiled: {p.profiled.conclusion}")
        if p.parts:
            listed = ", ".join(f"{x.name} {ms(x.off_us)} -> {ms(x.on_us)}{_change(x)}" for x in p.parts)
            out.append(f"{p.load}: per step, DBO off -> on: {listed}")
    return out


def _change(x: PartBlock) -> str:
    if x.off_us is None or x.on_us is None:
        return ""
    return f" ({(x.on_us - x.off_us) / 1000:+.2f})"


def unpaired_lines(d: SweepDocument) -> list[str]:
    out = [
        f"{u.on}: no arm with DBO off and the same cudagraph mode ({u.graphs}) and GPU sharing to pair it with"
        for u in d.unpaired
    ]
    return out + [
        f"{a}: neither its recorded settings nor a profiled trace say whether DBO ran; not paired" for a in d.undeclared
    ]


def no_dbo_lines(d: SweepDocument) -> list[str]:
    """Where the sweep holds no DBO arm against one without DBO, that it states no DBO change."""
    if d.dbo or d.unpaired or d.undeclared:
        return []
    return ["DBO's change: no arm ran with DBO beside an arm without it"]


def run_lines(d: SweepDocument) -> list[str]:
    out = []
    for r in d.runs_not_used:
        why = f" ({r.reason})" if r.reason else ""
        if r.status == "complete":
            why = why or " (no usable timed repeat)"
        out.append(f"{r.arm} at {r.load}: {r.status}{why}")
    return out


NOTE = (
    "TPOT: per arm and load, the mean ± sample sd over the timed repeats (the profiler off) of each repeat's median "
    "TPOT; ITL likewise. DBO's change: the DBO arm's TPOT mean against its DBO-off partner's at the same load, with "
    "Welch's t 95% interval (few repeats give few degrees of freedom and a wide interval: it says what 3 repeats can). "
    "'DBO slower' or 'faster' only where the interval excludes 0. Profiled step period: compare's change of the "
    "two profiled windows' median step periods, with its bootstrap 95% interval. Tokens per microbatch: requests in "
    "flight / 2 (a decode step's one token per request, split in two); measured: the DBO arm's profiled decode "
    "steps' median tokens / 2. TPOT of a load whose requests arrive in waves holds their prefills; ITL is beside it."
)


def _header(d: SweepDocument) -> list[str]:
    arms, loads = len({a.arm for x in d.loads for a in x.arms}), len(d.loads)
    timed = f"{d.repeats} timed repeats each" if d.repeats > 1 else "1 timed repeat each" if d.repeats else "no timed repeats"
    return [
        f"load sweep: {arms} arm{'s' * (arms != 1)} at {loads} load{'s' * (loads != 1)}, {timed}"
        + (", a profiled window per arm and load" if d.profile else "")
        + (f"; made {d.created}" if d.created else "")
    ]


# ---- terminal ---------------------------------------------------------------------------------------------


def render_terminal(document: SweepDocument, color: bool = False, width: int | None = None) -> str:
    from rich.console import Console
    from rich.text import Text

    d = terminal_document(document)  # every string from the sweep made inert
    width = width or terminal_width()
    lines: list[str] = []
    for s in d.dbo:  # the answer first: where DBO turns, or that it does not in the loads measured, and what to set
        lines += wrap(s.turn_text, width, "", "  ")
        if s.threshold_text:
            lines += wrap(s.threshold_text, width, "", "  ")
    for text in _header(d):
        lines += wrap(text, width, "", "  ")
    for x in d.loads:
        rows = [r[:TERMINAL_LOAD_COLUMNS] for r in load_rows(x)]
        lines += ["", *table(load_title(x), LOAD_COLUMNS[:TERMINAL_LOAD_COLUMNS], rows, width)]
        for line in load_lines(x):
            lines += wrap(line, width, "  ", "    ")
    for s in d.dbo:
        lines += (
            ["", *table(series_title(s), dbo_columns(s), series_rows(s), width)]
            if s.points
            else ["", *wrap(series_title(s), width, "", "  ")]
        )
        for line in disagree_lines(s) + parts_lines(s):
            lines += wrap(line, width, "  ", "    ")
    extra = no_dbo_lines(d) + unpaired_lines(d) + run_lines(d)
    if extra:
        lines += ["", "not in the figures:"]
        for line in extra:
            lines += wrap(line, width, "  ", "    ")
    for w in d.warnings:
        lines += wrap(f"warning: {w}", width, "", "  ")
    lines += ["", *wrap(NOTE, width, "", "  ")]
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=color, no_color=not color, width=width, highlight=False)
    for line in lines:
        console.print(Text(line), soft_wrap=True)
    return strip_trailing(buf.getvalue())


# ---- Markdown ---------------------------------------------------------------------------------------------


def render_markdown(d: SweepDocument, image: str | None = None) -> str:
    out = [f"### {markdown_text(_header(d)[0], line_start=False)}", ""]
    for s in d.dbo:
        out += [f"**{markdown_text(s.turn_text, line_start=False)}**", ""]
        out += [markdown_text(s.threshold_text), ""] if s.threshold_text else []
    if image is not None:
        out += [f"![DBO's change against requests in flight]({image.replace(' ', '%20').replace(')', '%29')})", ""]
    for x in d.loads:
        out += [f"**{markdown_text(load_title(x), line_start=False)}**", ""]
        rows = [[markdown_code(r[0]), *r[1:]] for r in load_rows(x)]
        out += md_table([c.header for c in LOAD_COLUMNS], rows)
        out += [""] + [f"- {markdown_text(line)}" for line in load_lines(x)] + ([""] if load_lines(x) else [])
    for s in d.dbo:
        title = Markdown(
            f"DBO's change per load: {markdown_code(s.on)} against {markdown_code(s.off)} (DBO off, cudagraphs "
            f"{markdown_code(s.graphs)}, same GPU sharing), by the timed repeats' TPOT"
        )
        out += [f"**{title}**", ""]
        if s.points:
            out += md_table([c.header for c in DBO_COLUMNS], [[markdown_code(r[0]), *r[1:]] for r in series_rows(s)])
            out.append("")
        out += [f"- {markdown_text(line)}" for line in disagree_lines(s) + parts_lines(s)] + [""]
    extra = no_dbo_lines(d) + unpaired_lines(d) + run_lines(d)
    if extra:
        out += ["Not in the figures:", ""] + [f"- {markdown_text(line)}" for line in extra] + [""]
    out += [f"- warning: {markdown_text(w, line_start=False)}" for w in d.warnings]
    out += ([""] if d.warnings else []) + [markdown_text(NOTE), ""]
    return "\n".join(out)


# ---- HTML -------------------------------------------------------------------------------------------------


def _html_table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["<table>", "<tr>" + "".join(f"<th>{html_text(h)}</th>" for h in header) + "</tr>"]
    out += ["<tr>" + "".join(f"<td>{html_text(c)}</td>" for c in row) + "</tr>" for row in rows]
    return out + ["</table>"]


STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:70em}table{border-collapse:collapse;margin:.5em 0 1em}"
    "td,th{border:1px solid #ccc;padding:.2em .6em;text-align:right}td:first-child,th:first-child{text-align:left}"
    "img{max-width:100%}.note{color:#555;font-size:90%}"
)


def render_html(d: SweepDocument, svg: bytes | None = None) -> str:
    """One self-contained page: the tables, the sentences and the picture (an SVG as an <img> data URI,
    which runs no script)."""
    out = ["<!doctype html>", '<html lang="en"><head><meta charset="utf-8"><meta name="generator" content="dbo-trace">']
    out += ["<title>dbo-trace load sweep</title>"]  # the generator mark: a rerun may replace the page it wrote
    out += [f"<style>{STYLE}</style></head><body>", f"<h1>{html_text(_header(d)[0])}</h1>"]
    for s in d.dbo:  # the answer first
        out.append(f"<p><strong>{html_text(s.turn_text)}</strong></p>")
        out += [f"<p>{html_text(s.threshold_text)}</p>"] if s.threshold_text else []
    if svg is not None:
        picture = base64.b64encode(svg).decode()
        out.append(f'<p><img alt="DBO\'s change against requests in flight" src="data:image/svg+xml;base64,{picture}"></p>')
    for x in d.loads:
        out += [f"<h2>{html_text(load_title(x))}</h2>", *_html_table([c.header for c in LOAD_COLUMNS], load_rows(x))]
        out += [f"<p>{html_text(line)}</p>" for line in load_lines(x)]
    for s in d.dbo:
        out.append(f"<h2>{html_text(series_title(s))}</h2>")
        if s.points:
            out += _html_table([c.header for c in DBO_COLUMNS], series_rows(s))
        out += [f"<p>{html_text(line)}</p>" for line in disagree_lines(s) + parts_lines(s)]
    extra = no_dbo_lines(d) + unpaired_lines(d) + run_lines(d)
    if extra:
        out += ["<h2>Not in the figures</h2>", "<ul>", *(f"<li>{html_text(line)}</li>" for line in extra), "</ul>"]
    out += [f"<p>warning: {html_text(w)}</p>" for w in d.warnings]
    out += [f'<p class="note">{html_text(NOTE)}</p>', "</body></html>", ""]
    return "\n".join(out)


# ---- JSON -------------------------------------------------------------------------------------------------


def render_json(d: SweepDocument) -> str:
    return json_text(d)


class SweepOutput:
    """The sweep summary's outputs, in the report renderers' shape (name, suffixes, binary, render)."""

    binary = False

    def __init__(self, name: str, suffixes: tuple[str, ...]):
        self.name, self.suffixes = name, suffixes

    def render(self, d: SweepDocument, options: RenderOptions = RenderOptions(), svg: bytes | None = None) -> str:
        if self.name == "json":
            return render_json(d)
        if self.name == "markdown":
            return render_markdown(d, options.image)
        if self.name == "html":
            return render_html(d, svg)
        return render_terminal(d, color=options.color, width=options.width)


SWEEP_RENDERERS = {r.name: r for r in (SweepOutput("terminal", (".txt",)), SweepOutput("json", (".json",)),
                                        SweepOutput("markdown", (".md",)), SweepOutput("html", (".html", ".htm")))}  # fmt: skip
