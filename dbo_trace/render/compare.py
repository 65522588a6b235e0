"""`dbo-trace compare` output: the ablation table as terminal text, JSON or Markdown; for arms of a
disaggregated (AFD) run, their round trips per arm; DBO's effect per pair (DBO on against off, one
cudagraph mode); the arms timed unprofiled. Lays out what analysis/compare/arms.py computed."""

from __future__ import annotations

import io
from dataclasses import asdict
from typing import Any, Callable

import msgspec

from dbo_trace import __version__
from dbo_trace.analysis.compare.arms import (
    ALL_STEPS,
    LOAD,
    MIN_STEPS,
    SHARING,
    TOO_FEW,
    WITHIN,
    Arm,
    ArmRoundTrip,
    ComparedArm,
    Comparison,
    Load,
    Mismatch,
    Pair,
    RanWith,
    ShapeDiff,
    graphs_text,
)
from dbo_trace.analysis.afd.effect import Effect
from dbo_trace.analysis.compare.unprofiled import TimedArm
from dbo_trace.render import unprofiled as unprofiled_table
from dbo_trace.render.base import RenderOptions
from dbo_trace.render.format import md_table, ms, num, pct, tri
from dbo_trace.render.json_out import json_text
from dbo_trace.render.words.pipeline import conclusions, model_lines, signed_ms
from dbo_trace.render.document.pipeline import dbo_what_if_block, overlap_block
from dbo_trace.render.names import display_names
from dbo_trace.render.layout import Column, strip_trailing, table, terminal_width, wrap
from dbo_trace.render.safe import Markdown, markdown_code, markdown_text, terminal_text
from dbo_trace.render.words.verdict import label_text

# 2: a row per arm and phase (field `phase`), rounded figures; 3: the step time's median, p90, p99 and max;
# 4: step times are periods, steady steps, ranks averaged per step, the change's bootstrap interval and call
# 5: a disaggregated run's round trip (round_trip_us, its hidden share, the criterion, its change)
# 6: the step sample is start-to-start periods (a rank's last step apart); ran_with; the round trip's
# parts; pairs (DBO's effect per cudagraph mode); unprofiled rows' profiled_phase and profiled_periods
# 7: arms paired and grouped by load (ran_with.load, load_group); pairs' load, unpaired reasons and
# effect (the change per step in parts, analysis/afd/effect.py); conclusions (one sentence per pair)
# 8: an AFD arm's overlap (exposed, hidden, beside the other round trip, ms per step: one meaning, the
# report's) and dbo_what_if (the other arm predicted from this one); effect.hidden_us is
# effect.exposed_removed_us (a change of exposed comm, never called hidden)
COMPARE_SCHEMA, COMPARE_VERSION = "dbo-trace-compare", 8


def ran_with_text(w: RanWith) -> str:
    """What an arm ran with in a few words: its cudagraph mode and DBO."""
    dbo = "DBO ?" if w.dbo is None else "DBO on" if w.dbo else "DBO off"
    if w.dbo and not w.microbatched:
        dbo += " (no step microbatched)"
    return f"{graphs_text(w.graphs, w.graph_mode)}, {dbo}"


def shape_text(d: ShapeDiff) -> str:
    listed = ", ".join(f"{label} {value}" for label, value in d.values)
    return f"the arms differ in {d.key} ({listed}): check that they compare like with like"


def _rows(compared: list[ComparedArm]) -> list[list[str]]:
    rows = []
    for r in compared:
        a = r.measured
        rows.append(
            [
                a.label,
                a.phase,
                load_text(a.ran_with.load if a.ran_with is not None else None),
                _steps_cell(a),
                _spread_cell(a),
                ms(a.window_median_us) if _window_differs(a) else "-",
                _change_cell(r.vs_first),
                num(a.round_trips_per_layer),
                ms(a.per_round_trip_us),
                "-" if a.round_trip is not None else pct(a.comm_hidden_fraction),  # one meaning of hidden
                pct(a.replayed_kernel_fraction),
                arm_verdict_text(a),
            ]
        )
    return rows


def _steps_cell(a: Arm) -> str:
    text = str(a.steps) + (f" (+{a.stalls} stalled)" if a.stalls else "")
    return text + (f", {a.ranks} ranks" if a.ranks > 1 else "")


def _window_differs(a: Arm) -> bool:
    w, p = a.window_median_us, a.step_median_us
    return w is not None and p is not None and abs(w - p) > 0.05 * p


def _change_cell(c: Comparison | None) -> str:
    if c is None:
        return "baseline"
    if c.call == TOO_FEW:
        return "too few steps"
    if c.change is None:
        return "-"
    text = f"{100 * c.change:+.1f}%"
    if c.change_low is not None and c.change_high is not None:
        text += f" [{100 * c.change_low:+.1f}, {100 * c.change_high:+.1f}]"
    if c.per_token:
        text += " per token"
    return text + (" (noise)" if c.call == WITHIN else "")


def _spread_cell(a: Arm) -> str:
    if a.step_median_us is None:
        return "-"
    return f"{a.step_median_us / 1000:.2f} ({(a.step_p90_us or 0) / 1000:.2f}, {(a.step_max_us or 0) / 1000:.2f})"


def noise_line(compared: list[ComparedArm]) -> str:
    """Per phase, which arms changed beyond noise against the first, with the pairs behind it."""
    parts = []
    for phase, group in dict.fromkeys((r.measured.phase, r.load_group) for r in compared):
        rows = [r for r in compared if r.measured.phase == phase and r.load_group == group]
        first = rows[0].measured
        said = [_said(r.measured, r.vs_first, first) for r in rows[1:] if r.vs_first is not None]
        at = f" at {load_text(first.ran_with.load if first.ran_with else None)}" if several_loads(compared) else ""
        what = "all steps" if phase == ALL_STEPS else phase + " steps"
        parts.append(f"{what}{at} against {first.label}: " + (", ".join(said) if said else "no other arm"))
    return (
        "; ".join(parts)
        + f". Step times are periods of steady steps (stalls apart); a change is beyond noise when its bootstrap 95% "
        f"interval excludes no change (0%) and each arm has at least {MIN_STEPS} steps."
        + (
            " Comm hidden is comm kernel time under compute; a disaggregated (AFD) arm's is a dash: its sends and "
            "receives run on the compute stream, and its hidden share of the round trips is the round-trip table's."
            if any(r.measured.round_trip is not None for r in compared)
            else ""
        )
    )


def _said(a: Arm, c: Comparison, base: Arm) -> str:
    n = c.compared_steps
    steps = f"{n[0]} and {n[1]} steps" if n else ""
    how = ", ".join(x for x in (steps, "paired by shape" if c.paired_by_shape else "", "per token" if c.per_token else "") if x)
    if c.call == TOO_FEW:
        return f"{a.label} too few steps to tell ({how}; at least {MIN_STEPS} each)"
    change = f"{100 * (c.change or 0.0):+.1f}%"
    if c.compared_medians_us is not None:
        unit = "us per token" if c.per_token else "ms"
        scale = 1.0 if c.per_token else 1000.0
        lo, hi = (x / scale for x in c.compared_medians_us)
        how = f"medians {lo:.2f} and {hi:.2f} {unit}, " + how
    slower = f", slower in {100 * c.slower_pairs:.0f}% of step pairs" if c.slower_pairs is not None else ""
    # the change is of the steps compared; where pairing by shape left some out, their medians are not
    # the table's (over every steady step): say so, so the sentence and the table are read as one
    fewer = n is not None and (n[0] < base.steps or n[1] < a.steps)
    apart = "; the table's medians are over every steady step" if fewer else ""
    return f"{a.label} {change} {c.call} ({how}{slower}{apart})"



# ---- a disaggregated run's round trips, per arm (the arms' all-steps rows) ------------------------------

AFD_TITLE = "disaggregated round trips (AFD), per arm: medians; the parts need the FFN's trace"
AFD_COLUMNS = [
    Column("arm", right=False, wrap=True),
    Column("ran with", right=False, wrap=True, keep=3),
    Column("step period (start to start)"),
    Column("round trips/layer", keep=9),
    Column("round trip (send to receive end)"),
    Column("transfer", keep=5),
    Column("of it late receive", keep=5),
    Column("FFN compute", keep=6),
    Column("FFN queue/wait", keep=4),
    Column("attention wait", keep=7),
    Column("hidden"),
    Column("compute per microbatch per layer : exposed per round trip", keep=8),
    Column("criterion"),
    Column("unprofiled TPOT", keep=10),
    Column("profiler overhead", keep=11),
]


def afd_arms(compared: list[ComparedArm]) -> list[tuple[Arm, ArmRoundTrip]]:
    """The disaggregated arms of all steps, each with its round trip."""
    arms = [r.measured for r in compared]
    return [(a, a.round_trip) for a in arms if a.phase == ALL_STEPS and a.round_trip is not None]


def _afd_rows(compared: list[ComparedArm], unprofiled: list[TimedArm]) -> list[list[str]]:
    timed = {t.measured.arm: t.measured for t in unprofiled}  # by identity: two arms may share a label
    rows = []
    for a, rt in afd_arms(compared):
        u = timed.get(a.arm)
        split = rt.ffn_compute_us is not None
        rows.append(
            [
                a.label,
                ran_with_text(a.ran_with) if a.ran_with is not None else "-",
                ms(a.step_median_us),
                num(a.round_trips_per_layer),
                ms(rt.median_us) + ("" if rt.parts_matched is not None else f" (receive {ms(rt.receive_us)})"),
                ms(rt.transfer_us),
                ms(rt.late_us),
                ms(rt.ffn_compute_us if split else rt.ffn_us) + ("" if split or rt.ffn_us is None else " with queue"),
                ms(rt.ffn_queue_us),
                ms(rt.wait_us),
                pct(rt.hidden_share),
                f"{ms(rt.compute_per_microbatch_us)} : {ms(rt.exposed_us)}",
                _criterion_cell(rt),
                "-" if u is None or u.tpot_median_ms is None else f"{u.tpot_median_ms:.2f} ms",
                "-" if u is None or u.profiler_overhead is None else f"{100 * u.profiler_overhead:+.0f}%",
            ]
        )
    return rows


def _criterion_cell(rt: ArmRoundTrip) -> str:
    """Met or missed with the ratio; unknown with one microbatch: no other compute to hide a round trip."""
    if rt.criterion_ratio is None:
        return "unknown (one microbatch)"
    return f"{tri(rt.criterion)} ({rt.criterion_ratio:.2f})"


AFD_NOTE = (
    "Round trip: a data-plane send's start to its matching receive's end (median); without the FFN's trace its "
    "parts are not measured and the receive kernel's median, which holds the attention wait, the FFN's time and "
    "the return transfer, stands in brackets. Of it late receive: of the transfer, the FFN's answer waiting for "
    "the attention to post its receive (the attention's host late, not the wire). Hidden: the share of the round trips' time, less the host's "
    "lag before the receive's launch, under the other microbatch's compute. Criterion: per-microbatch compute "
    "(per layer) against the round trip's exposed time (ratio >= 1: "
    "one microbatch's compute could cover the other's round trip; below 1 DBO can hide at most that share). "
    "Unprofiled TPOT: the mean of the repeats' median TPOT; profiler overhead: the step period against the "
    "repeats' median ITL (TPOT where they have none), none where the period falls below it."
)


# ---- DBO's effect per pair --------------------------------------------------------------------------------

PAIR_TITLE = (
    "DBO's effect per pair: DBO on against DBO off at one load, GPU sharing and cudagraph mode (step periods, start to start)"
)
PAIR_COLUMNS = [
    Column("pair", right=False, wrap=True),
    Column("steps of", right=False, keep=2),
    Column("cudagraphs", right=False, keep=5),
    Column("step period off -> on"),
    Column("DBO's change [95% interval]", right=False),
    Column("unprofiled TPOT off -> on", keep=4),
    Column("round trip off -> on", keep=3),
    Column("by the wall clock", right=False, wrap=True),
]


def _pair_rows(pairs: list[Pair]) -> list[list[str]]:
    rows = []
    for p in pairs:
        if p.off is None:
            continue
        medians = p.compared_medians_us
        unit = " us/token" if p.per_token else " ms"
        scale = 1.0 if p.per_token else 1000.0
        rows.append(
            [
                f"{p.on} vs {p.off}",
                p.phase,
                p.graphs,
                "-" if medians is None else f"{medians[0] / scale:.2f} -> {medians[1] / scale:.2f}{unit}",
                _pair_change_cell(p),
                "-" if p.tpot_ms is None else f"{p.tpot_ms[0]:.2f} -> {p.tpot_ms[1]:.2f} ms ({100 * (p.tpot_change or 0.0):+.1f}%)"
                + ("" if p.tpot_basis in (None, "TPOT") else f" by {p.tpot_basis}"),
                "-" if p.round_trip_us is None else f"{ms(p.round_trip_us[0])} -> {ms(p.round_trip_us[1])}",
                _outcome_cell(p),
            ]
        )
    return rows


def _pair_change_cell(p: Pair) -> str:
    if p.call == TOO_FEW or p.change is None:
        return "too few steps"
    text = f"{100 * p.change:+.1f}%"
    if p.change_low is not None and p.change_high is not None:
        text += f" [{100 * p.change_low:+.1f}, {100 * p.change_high:+.1f}]"
    return text + (" per token" if p.per_token else "")


def _outcome_cell(p: Pair) -> str:
    out = p.outcome
    if out is None:
        return "too few steps to tell"
    slower = "" if p.slower_pairs is None else f" (slower in {100 * p.slower_pairs:.0f}% of step pairs)"
    return f"{out}{slower}"


def pair_lines(pairs: list[Pair]) -> list[str]:
    """What the pair table cannot hold: DBO arms with no partner, and partners chosen among several."""
    out = []
    for p in pairs:
        if p.off is None:
            why = "; ".join(_mismatch_text(m) for m in p.unpaired)
            out.append(
                f"{p.on} ({p.phase} steps, {load_text(p.load)}): no DBO-off arm of the same load, GPU sharing and "
                f"cudagraph mode to pair it with: {why}"
            )
        elif p.others:
            out.append(
                f"{p.on} ({p.phase} steps): paired with {p.off}, the first of the arms that fit "
                f"({', '.join((p.off, *p.others))}); give the one to pair with first"
            )
        if p.off is not None and not p.load_known and p.phase == ALL_STEPS:
            out.append(
                f"{p.on} and {p.off}: paired without knowing that they ran one load (a declared load or vLLM's step "
                "annotations on both would tell)"
            )
    return out


def load_text(load: Load | None) -> str:
    """An arm's load in a few words: as declared, else as its decode steps show."""
    if load is None or not load.known:
        return "load not known"
    if load.declared:
        lengths = f", {load.input_len} in / {load.output_len} out" if load.input_len and load.output_len else ""
        return f"{load.concurrency} in flight{lengths}"
    return f"{num(load.decode_requests, 1)} decode requests a step"


def _mismatch_text(m: Mismatch) -> str:
    if m.key == LOAD:
        on = m.on_value if isinstance(m.on_value, Load) else None
        off = m.off_value if isinstance(m.off_value, Load) else None
        return f"{m.off} ran another load ({load_text(off)} against {load_text(on)})"
    if m.key == SHARING:
        on_mps = m.on_value if isinstance(m.on_value, bool) else None
        off_mps = m.off_value if isinstance(m.off_value, bool) else None
        return f"{m.off} shared the GPU otherwise (MPS {tri(off_mps, 'on', 'off')} against {tri(on_mps, 'on', 'off')})"
    return f"{m.off} ran another cudagraph mode ({m.off_value} against {m.on_value})"


KERNEL_NAME_WIDTH = 44  # a kernel's name, shortened as the report's lists shorten it (render/names.py)
EFFECT_COLUMNS = [
    Column("per step", right=False, wrap=True),
    Column("DBO off"),
    Column("DBO on"),
    Column("change"),
]
KERNEL_COLUMNS = [
    Column("compute kernel", right=False, wrap=True),
    Column("calls/step off -> on", keep=2),
    Column("us a call off -> on"),
    Column("ms/step change"),
]


def effect_title(p: Pair) -> str:
    return f"DBO's effect taken apart, per step: {p.on} against {p.off}"


def _part_row(what: str, off: float, on: float) -> list[str]:
    return [what, f"{off / 1000:.2f}", f"{on / 1000:.2f}", signed_ms(on - off)]


def effect_rows(e: Effect) -> list[list[str]]:
    """The attention's (or the served rank's) parts, then the FFN's where its trace is there (ms)."""
    a, b = e.off, e.on
    rows = [
        _part_row("compute", a.compute_us, b.compute_us),
        _part_row("comm alone (waiting for the other side)", a.comm_alone_us, b.comm_alone_us),
    ]
    if a.copy_us or b.copy_us:
        rows.append(_part_row("copy alone", a.copy_us, b.copy_us))
    rows += [
        _part_row("idle, host-caused", a.host_idle_us, b.host_idle_us),
        _part_row("idle, dependency", a.dependency_idle_us, b.dependency_idle_us),
        _part_row("mean period (the parts' sum)", a.period_us, b.period_us),
    ]
    if a.ffn is not None or b.ffn is not None:  # one arm's alone where the other holds no FFN trace
        for what, key in (("compute", "compute_us"), ("comm and copy alone", "other_busy_us"), ("idle", "idle_us")):
            x = None if a.ffn is None else float(getattr(a.ffn, key))
            y = None if b.ffn is None else float(getattr(b.ffn, key))
            rows.append(
                [f"FFN GPU: {what}", ms_cell(x), ms_cell(y), "-" if x is None or y is None else signed_ms(y - x)]
            )
    return rows


def ms_cell(us_value: float | None) -> str:
    return "-" if us_value is None else f"{us_value / 1000:.2f}"


def effect_sum_line(e: Effect) -> str:
    """How the parts add up: to the mean period's change exactly, to the median's within the residual."""
    text = (
        f"Over {e.off.periods} and {e.on.periods} step periods (first steady step's start to the last's), the parts' "
        f"changes add up to {signed_ms(e.parts_sum_us)} ms, the change of the mean period"
    )
    if e.median_change_us is None or e.residual_us is None:
        return text + "."
    return text + (
        f"; the median period changed {signed_ms(e.median_change_us)} ms, so the parts hold it within "
        f"{abs(e.residual_us) / 1000:.2f} ms (the residual)."
    )


def kernel_rows(e: Effect) -> list[list[str]]:
    def calls(k: object) -> str:
        return "-" if k is None else f"{getattr(k, 'calls_per_step'):.1f}"

    def per_call(k: object) -> str:
        return "-" if k is None else f"{getattr(k, 'median_us'):.1f}"

    shown = display_names([k.name for k in e.kernels], KERNEL_NAME_WIDTH)
    return [
        [name, f"{calls(k.off)} -> {calls(k.on)}", f"{per_call(k.off)} -> {per_call(k.on)}", signed_ms(k.change_us)]
        for name, k in zip(shown, e.kernels)
    ]


EFFECT_NOTE = (
    "Parts per step over the steady steps' span: compute is the union of the kernels that are not communication "
    "or copies; comm alone, communication under no compute (on an AFD attention GPU, the wait for the FFN's answer: "
    "the round trip's exposed part); idle, host-caused where nothing was queued, dependency where work was queued "
    "and waited. The kernels whose time per step changed most: where DBO halves the batch, a call's time shows what "
    "the smaller launch costs. The ratio per-microbatch compute : exposed round trip (the table above) is a figure, "
    "not the verdict: the verdict is the measured change."
)


PAIR_NOTE = (
    "DBO's change: the DBO arm's median step period against its partner's, with the bootstrap 95% interval; "
    "'DBO slower' or 'faster' only where the interval excludes no change. Arms pair at the same load (requests in "
    "flight and lengths as declared, else decode requests a step within 10%), GPU sharing and cudagraph mode, by "
    "their recorded settings (--enable-dbo, cudagraph mode), else by what their traces show."
)


def render_markdown(arms: list[ComparedArm], unprofiled: list[TimedArm] = [], pairs: list[Pair] = []) -> str:
    keep = [i for i in range(len(COLUMNS)) if i != LOAD_COLUMN or several_loads(arms)]
    named = [[markdown_code(r[0]), *r[1:]] for r in _rows(arms)]  # the arm's label: a name
    rows = [[r[i] for i in keep] for r in named]
    said = conclusions(pairs)
    out = [f"**{markdown_text(line)}**" for line in said] + ([""] if said else [])
    modelled = model_lines([r.measured for r in arms], pairs)
    out += [markdown_text(line) for line in modelled] + ([""] if modelled else [])
    out += md_table([HEADER[i] for i in keep], rows)
    out += ["", markdown_text(noise_line(arms)), ""]
    afd = _afd_rows(arms, unprofiled)
    if afd:
        out += [f"**{markdown_text(AFD_TITLE)}**", ""]
        out += md_table([c.header for c in AFD_COLUMNS], [[markdown_code(r[0]), *r[1:]] for r in afd])
        out += ["", markdown_text(AFD_NOTE), ""]
    out += _pairs_markdown(pairs)
    return "\n".join(out + unprofiled_table.markdown_lines(unprofiled))


def _pairs_markdown(pairs: list[Pair]) -> list[str]:
    if not pairs:
        return []
    out = [f"**{markdown_text(PAIR_TITLE)}**", ""]
    rows = _pair_rows(pairs)
    if rows:
        pair_cell = [Markdown(f"{markdown_code(p.on)} vs {markdown_code(p.off)}") for p in pairs if p.off is not None]
        out += md_table([c.header for c in PAIR_COLUMNS], [[cell, *r[1:]] for cell, r in zip(pair_cell, rows)])
        out.append("")
    out += [f"- {markdown_text(line)}" for line in pair_lines(pairs)]
    out += ["", markdown_text(PAIR_NOTE), ""]
    for p in pairs:
        if p.effect is None or p.phase != ALL_STEPS:
            continue
        out += [f"**{markdown_text(effect_title(p))}**", ""]
        out += md_table([c.header for c in EFFECT_COLUMNS], effect_rows(p.effect))
        out += ["", markdown_text(effect_sum_line(p.effect)), ""]
        if p.effect.kernels:
            out += md_table([c.header for c in KERNEL_COLUMNS], [[markdown_code(r[0]), *r[1:]] for r in kernel_rows(p.effect)])
            out.append("")
    if any(p.effect is not None for p in pairs):
        out += [markdown_text(EFFECT_NOTE), ""]
    return out


def _rounded(arm: dict[str, Any]) -> dict[str, Any]:
    """Times to the nanosecond, fractions to 1e-4, as the report's JSON: no binary-fraction noise."""
    out = {}
    for key, value in arm.items():
        digits = 3 if key.endswith("_us") else 4
        if isinstance(value, float):
            value = round(value, digits)
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, float) for v in value):
            value = [round(v, digits) for v in value]
        out[key] = value
    return out


_SAMPLES = ("samples_us", "sample_tokens", "parts", "overlap", "prediction")  # the statistic's input (parts: in the pairs' effect), not figures
IDENTITY = ("arm", "on_arm", "off_arm")  # positions that key the arms inside; the JSON names arms by their (unique) labels


def _deep_rounded(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _deep_rounded(v, k) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_deep_rounded(v, key) for v in value]
    if isinstance(value, float):
        return round(value, 3 if key.endswith("_us") else 4)
    return value


def _pair_json(p: Pair) -> dict[str, Any]:
    """A pair's figures; its effect with each part's change, their sum, and the residual."""
    body = {k: v for k, v in asdict(p).items() if k != "effect" and k not in IDENTITY}
    body["outcome"] = p.outcome
    e = p.effect
    if e is None:
        body["effect"] = None
    else:
        effect = asdict(e)
        for name in ("off", "on"):
            effect[name]["period_us"] = getattr(e, name).period_us
        effect["kernels"] = [{**asdict(k), "change_us": k.change_us} for k in e.kernels]
        effect["changes_us"] = {
            "compute_us": e.compute_change_us, "comm_alone_us": e.comm_alone_change_us, "copy_us": e.copy_change_us,
            "host_idle_us": e.change("host_idle_us"), "dependency_idle_us": e.change("dependency_idle_us"),
            "idle_us": e.idle_change_us,
        }  # fmt: skip
        effect["parts_sum_us"] = e.parts_sum_us
        effect["mean_change_us"] = e.mean_change_us
        effect["residual_us"] = e.residual_us
        effect["cost_us"] = e.cost_us
        effect["exposed_removed_us"] = e.exposed_removed_us
        body["effect"] = effect
    rounded: dict[str, Any] = _deep_rounded(body)
    return rounded


def arm_verdict_text(a: Arm) -> str:
    """The arm's label, or its ranks' labels joined by '/'; '-' where it has none."""
    return "/".join(label_text(label) for label in a.verdict) or "-"


# An arm's round trip in the JSON: flat `round_trip_*` keys, as schemas 5 and 6 wrote them, the first
# four where the round trip sits among the arm's keys (the fourth, round_trip_change, its comparison's)
# and its parts after ran_with (the schema's order).
ROUND_TRIP_KEYS = (
    ("round_trip_us", "median_us"), ("round_trip_hidden_share", "hidden_share"), ("round_trip_criterion", "criterion"),
)  # fmt: skip
ROUND_TRIP_PART_KEYS = (
    ("round_trip_transfer_us", "transfer_us"), ("round_trip_ffn_us", "ffn_us"), ("round_trip_ffn_compute_us", "ffn_compute_us"),
    ("round_trip_ffn_queue_us", "ffn_queue_us"), ("round_trip_wait_us", "wait_us"), ("round_trip_late_us", "late_us"),
    ("round_trip_parts_matched", "parts_matched"), ("round_trip_receive_us", "receive_us"),
    ("compute_per_microbatch_us", "compute_per_microbatch_us"), ("round_trip_exposed_us", "exposed_us"),
    ("round_trip_criterion_ratio", "criterion_ratio"),
)  # fmt: skip


def _flat(rt: ArmRoundTrip | None, keys: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    return {key: None if rt is None else getattr(rt, name) for key, name in keys}


# A row's comparison against its group's first arm, in the JSON: its keys among the arm's, each group
# before the arm's key named, where schema 8 has always written them; the baseline's keys empty.
VS_FIRST_BEFORE = {
    "step_median_us": ("change", "within_noise"),
    "samples_us": (
        "call", "change_low", "change_high", "compared_steps", "compared_medians_us", "paired_by_shape", "per_token",
        "slower_pairs",
    ),
    "parts": ("load_group",),
}  # fmt: skip
BASELINE = {
    "change": None, "within_noise": None, "call": None, "change_low": None, "change_high": None, "compared_steps": None,
    "compared_medians_us": None, "paired_by_shape": False, "per_token": False, "slower_pairs": None, "round_trip_change": None,
}  # fmt: skip


def _arm_json(r: ComparedArm) -> dict[str, Any]:
    a = r.measured
    vs = {**(BASELINE if r.vs_first is None else asdict(r.vs_first)), "load_group": r.load_group}
    body: dict[str, Any] = {}
    for k, v in asdict(a).items():
        body.update({key: vs[key] for key in VS_FIRST_BEFORE.get(k, ())})
        if k in _SAMPLES or k in IDENTITY:
            continue
        if k == "round_trip":
            body.update(_flat(a.round_trip, ROUND_TRIP_KEYS))
            body["round_trip_change"] = vs["round_trip_change"]
            continue
        body[k] = v
        if k == "ran_with":
            body.update(_flat(a.round_trip, ROUND_TRIP_PART_KEYS))
    body["verdict"] = arm_verdict_text(a)  # in its place among the arm's keys
    body["overlap"] = _overlap_json(a)
    w = dbo_what_if_block(a.prediction)
    body["dbo_what_if"] = msgspec.to_builtins(w) if w is not None else None
    return _rounded(body)


def _overlap_json(a: Arm) -> dict[str, Any] | None:
    """The arm's overlap as report --json gives it (the document's block: the same keys and rounding)."""
    block = overlap_block(a.overlap)
    return msgspec.to_builtins(block) if block is not None else None


def render_json(arms: list[ComparedArm], unprofiled: list[TimedArm] = [], pairs: list[Pair] = []) -> str:
    body: dict[str, Any] = {
        "schema": COMPARE_SCHEMA,
        "schema_version": COMPARE_VERSION,
        "dbo_trace_version": __version__,
        "conclusions": conclusions(pairs),
        "arms": [_arm_json(a) for a in arms],
        "noise": noise_line(arms),
        "pairs": [_pair_json(p) for p in pairs],
    }
    if unprofiled:  # only where some arm's recording holds timed repeats
        body["unprofiled"] = unprofiled_table.json_rows(unprofiled)
    return json_text(body)


# The terminal table's columns (layout.Column): the headline figures (step time, its change, the
# verdict) are never dropped; the others go, least needed first, when the terminal is narrow.
COLUMNS = [
    Column("arm", right=False, wrap=True),
    Column("steps of", right=False),
    Column("load", right=False, wrap=True),
    Column("steps", keep=6),
    Column("step period ms: median (p90, max)"),
    Column("window median", keep=1),
    Column("vs first [95% interval]", right=False),
    Column("round trips/layer", keep=3),
    Column("per round trip", keep=4),
    Column("comm hidden", keep=7),
    Column("graph-replayed kernels", keep=2),
    Column("verdict", right=False),
]
HEADER = [c.header for c in COLUMNS]  # the Markdown's, the same columns
LOAD_COLUMN = 2


def several_loads(arms: list[ComparedArm]) -> bool:
    """Arms of more than one load: the table shows each arm's (its change is against its load's first)."""
    return any(r.load_group for r in arms)


def render_terminal(
    arms: list[ComparedArm],
    color: bool = False,
    width: int | None = None,
    unprofiled: list[TimedArm] = [],
    pairs: list[Pair] = [],
) -> str:
    """The table at the terminal's width (at least 80; piped: $COLUMNS, else 100), every cell whole."""
    from rich.console import Console
    from rich.text import Text

    width = width or terminal_width()
    rows = [[terminal_text(cell) for cell in row] for row in _rows(arms)]  # labels are paths: data
    shown = list(range(len(COLUMNS)))
    if all(r.measured.phase == ALL_STEPS for r in arms):  # every arm's steps whole: the column would only repeat "all"
        shown.remove(1)
    if not several_loads(arms):
        shown.remove(LOAD_COLUMN)
    lines = [line for said in conclusions(pairs) for line in wrap(terminal_text(said), width, "", "  ")]
    modelled = model_lines([r.measured for r in arms], pairs)
    lines += [line for said in modelled for line in wrap(terminal_text(said), width, "", "  ")]
    lines += [""] if lines else []
    lines += table("dbo-trace compare", [COLUMNS[i] for i in shown], [[r[i] for i in shown] for r in rows], width)
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=color, no_color=not color, width=width, highlight=False)
    lines = [*lines, *wrap(terminal_text(noise_line(arms)), width, "", "  ")]
    afd = [[terminal_text(cell) for cell in row] for row in _afd_rows(arms, unprofiled)]
    if afd:
        lines += ["", *table(AFD_TITLE, AFD_COLUMNS, afd, width), *wrap(AFD_NOTE, width, "", "  ")]
    if pairs:
        lines += [""]
        rows = [[terminal_text(cell) for cell in row] for row in _pair_rows(pairs)]
        if rows:
            lines += table(PAIR_TITLE, PAIR_COLUMNS, rows, width)
        else:
            lines += wrap(PAIR_TITLE, width)
        for line in pair_lines(pairs):
            lines += wrap(terminal_text(line), width, "  ", "    ")
        lines += wrap(PAIR_NOTE, width, "", "  ")
        for p in pairs:
            if p.effect is None or p.phase != ALL_STEPS:
                continue
            lines += ["", *table(terminal_text(effect_title(p)), EFFECT_COLUMNS, effect_rows(p.effect), width)]
            lines += wrap(effect_sum_line(p.effect), width, "", "  ")
            if p.effect.kernels:
                krows = [[terminal_text(c) for c in r] for r in kernel_rows(p.effect)]
                lines += ["", *table(None, KERNEL_COLUMNS, krows, width)]
        if any(p.effect is not None for p in pairs):
            lines += wrap(EFFECT_NOTE, width, "", "  ")
    if unprofiled:  # its own section, after the step table's noise line
        extra = [[terminal_text(cell) for cell in row] for row in unprofiled_table.rows(unprofiled)]
        lines += ["", *table(unprofiled_table.TITLE, unprofiled_table.COLUMNS, extra, width)]
        lines += wrap(unprofiled_table.NOTE, width, "", "  ")
    for line in lines:
        console.print(Text(line), soft_wrap=True)
    return strip_trailing(buf.getvalue())


class _CompareOutput:
    """compare's outputs, with the report renderers' shape (name, suffixes, binary, render): the
    product is the compared arms (ComparedArm) instead of a Report."""

    binary = False

    def __init__(
        self,
        name: str,
        suffixes: tuple[str, ...],
        render: Callable[[list[ComparedArm], RenderOptions, list[TimedArm], list[Pair]], str],
    ):
        self.name, self.suffixes, self._render = name, suffixes, render

    def render(
        self,
        arms: list[ComparedArm],
        options: RenderOptions = RenderOptions(),
        unprofiled: list[TimedArm] = [],
        pairs: list[Pair] = [],
    ) -> str:
        return self._render(arms, options, unprofiled, pairs)


COMPARE_RENDERERS = {
    r.name: r
    for r in (
        _CompareOutput(
            "terminal", (".txt",), lambda arms, o, u, p: render_terminal(arms, color=o.color, width=o.width, unprofiled=u, pairs=p)
        ),
        _CompareOutput("json", (".json",), lambda arms, o, u, p: render_json(arms, u, p)),
        _CompareOutput("markdown", (".md",), lambda arms, o, u, p: render_markdown(arms, u, p)),
    )
}
