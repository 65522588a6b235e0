"""DBO's effect in words: per pair, whether it pays by the measured change and the parts that made it
(compare's and the load sweep's conclusions), and as the one-arm model predicts it, with what it was
calibrated on and what widened its interval (analysis/afd/dbo_model.py hands over the figures)."""

from __future__ import annotations

from dbo_trace.analysis.compare.arms import ALL_STEPS, MIN_STEPS, Arm, Pair
from dbo_trace.analysis.afd.effect import DOES_NOT_PAY, PAYS, WITHIN_NOISE, Effect
from dbo_trace.analysis.afd.dbo_model import (
    ALREADY_OFF,
    ALREADY_ON,
    NOT_AFD,
    NOT_MEASURED,
    OTHER_MODE,
    OWN_PAIR_ONLY,
    Caveats,
    DboWhatIf,
)


def calibration_text(w: DboWhatIf) -> str:
    text = f"{w.source}: {w.pairs} pair{'s' if w.pairs != 1 else ''}"
    if w.excluded_own:
        text += " (this recording's own pair left out)"
    if w.loo_max is not None:
        text += f"; each pair predicted from the others within {w.loo_max * 100:.1f} points"
    return text


def caveat_texts(c: Caveats) -> list[str]:
    out = []
    if c.no_ffn:
        out.append("no FFN trace: its visit and the hops are split by the calibration's hop line")
    if c.gpu is not None:
        out.append(f"another GPU: {c.gpu}, calibrated on {', '.join(c.calibrated_gpus)}")
    if c.outside is not None:
        tokens, low, high = c.outside
        out.append(f"outside the calibrated loads: {tokens:g} tokens a step, calibrated on {low:g} to {high:g}")
    if c.pads:
        shapes = ", ".join(
            f"{'each microbatch' if p.microbatch else 'the batch'} of {p.tokens} tokens to the {p.graph} graph" for p in c.pads
        )
        out.append(f"the load pads: {shapes}; such loads ran above the model (7-14 points)")
    return out


_NOT_PREDICTED = {
    NOT_AFD: "no prediction: the model is of an AFD pair's decode steps, and this input has no attention rank whose "
    "round trips were paired",
    ALREADY_ON: "no prediction: this arm ran DBO; --what-if dbo=off predicts the arm without it",
    ALREADY_OFF: "no prediction: this arm ran without DBO; --what-if dbo=on predicts the arm with it",
    OTHER_MODE: "no prediction: every calibrated pair ran the other cudagraph mode (eager against CUDA graphs: the "
    "host's lag in an eager round trip is no term of the model); --calibrate with pairs of this arm's mode",
    NOT_MEASURED: "no prediction: a term the model needs was not measured here (decode tokens from vLLM's step "
    "annotations, a microbatch's attention visit)",
    OWN_PAIR_ONLY: "no prediction: the calibration holds only this recording's own pair; --calibrate with other "
    "recordings",
}


def not_predicted_text(why: str) -> str:
    return _NOT_PREDICTED.get(why, "no prediction")


def model_lines(arms: list[Arm], pairs: list[Pair]) -> list[str]:
    """Per pair, DBO's change as the one-arm model predicts it from each arm (analysis/afd/dbo_model.py),
    beside the pair's measured change: the model checked on every pair recorded."""
    by_arm = {a.arm: a for a in arms if a.phase == ALL_STEPS}  # keyed by identity: labels only name
    out = []
    for p in pairs:
        if p.off is None or p.off_arm is None or p.phase != ALL_STEPS or p.change is None:
            continue
        found = []
        for label, arm, what in ((p.off, p.off_arm, "DBO off"), (p.on, p.on_arm, "DBO on")):
            w = by_arm[arm].prediction if arm in by_arm else None
            if w is not None:
                inside = "holds" if w.low <= p.change <= w.high else "misses"
                found.append(
                    f"from {label} ({what}) {w.change * 100:+.1f}% [{w.low * 100:+.1f}, {w.high * 100:+.1f}], which {inside} it"
                )
        if found:
            out.append(
                f"{p.on} against {p.off}, the one-arm model beside the measured {p.change * 100:+.1f}%: "
                + "; ".join(found)
            )
    return out


def signed_ms(us_value: float) -> str:
    return f"{us_value / 1000:+.2f}"


def _measured(p: Pair, e: Effect | None) -> str:
    """The measured change in brackets: ms and % of the median period."""
    if e is not None and e.median_change_us is not None and e.median_change is not None:
        # the parts add up to the mean period's change; the call is the median's: both, so the sum checks
        return (
            f"(net {signed_ms(e.parts_sum_us)} ms a step in the mean period; measured {signed_ms(e.median_change_us)} ms, "
            f"{100 * e.median_change:+.1f}% in the median)"
        )
    if p.change is not None:
        return f"({100 * p.change:+.1f}%{' per token' if p.per_token else ''})"
    return ""


def _added(e: Effect) -> str:
    grown = [(e.compute_change_us, "compute"), (e.idle_change_us, "idle"), (e.copy_change_us, "copy")]
    shown = [f"{v / 1000:.2f} ms of {what}" for v, what in grown if v >= 5.0]
    return " and ".join(shown) if shown else "nothing"


def conclusion(p: Pair) -> str | None:
    """One sentence per pair (its all-steps row): does DBO pay here, by the measured change's call,
    with the parts that made it."""
    if p.off is None or p.phase != ALL_STEPS:
        return None
    e = p.effect
    head = f"{p.on} against {p.off}: "
    shape = " (the same load's steps differ in shape: compared per token)" if p.per_token else ""
    if e is None:
        out = p.outcome
        if out is None:
            return head + f"too few steps to tell whether DBO pays (at least {MIN_STEPS} each){shape}"
        said = {"DBO faster": "DBO pays", "DBO slower": "DBO does not pay"}.get(out, "DBO's change is within noise")
        return head + f"{said} by the step period {_measured(p, None)}{shape}; its parts are not measured"
    if e.call == PAYS and e.exposed_removed_us < 5.0:
        return head + (
            f"DBO pays, though it removed no exposed comm: compute {signed_ms(e.compute_change_us)}, comm alone "
            f"{signed_ms(e.comm_alone_change_us)}, idle {signed_ms(e.idle_change_us)} ms a step {_measured(p, e)}{shape}"
        )
    if e.call == PAYS:
        return head + (
            f"DBO pays: it removed {e.exposed_removed_us / 1000:.2f} ms of exposed comm a step and added {_added(e)} "
            f"{_measured(p, e)}{shape}"
        )
    if e.call == DOES_NOT_PAY:
        grown = ", ".join(
            f"{what} {signed_ms(v)}"
            for v, what in ((e.compute_change_us, "compute"), (e.idle_change_us, "idle"), (e.copy_change_us, "copy"),
                            (e.comm_alone_change_us, "comm alone"))
            if v >= 5.0
        )  # fmt: skip
        cost = f"+{e.cost_us / 1000:.2f} ms a step: {grown}"
        if e.exposed_removed_us < 5.0:
            return head + f"DBO does not pay: it removed no exposed comm and cost {cost} {_measured(p, e)}{shape}"
        return head + (
            f"DBO does not pay: its cost ({cost}) exceeds the exposed comm it removes ({e.exposed_removed_us / 1000:.2f} "
            f"ms); it would pay where the exposed comm it removes (the round trips' exposed time, which grows with the "
            f"batch) exceeds its cost {_measured(p, e)}{shape}"
        )
    parts = (
        f"compute {signed_ms(e.compute_change_us)}, comm alone {signed_ms(e.comm_alone_change_us)}, "
        f"idle {signed_ms(e.idle_change_us)} ms a step"
    )
    if e.call == WITHIN_NOISE:
        return head + f"DBO's change is within noise {_measured(p, e)}{shape}: {parts}"
    return head + f"too few steps to tell whether DBO pays (at least {MIN_STEPS} each): {parts}"


def conclusions(pairs: list[Pair]) -> list[str]:
    return [c for p in pairs if (c := conclusion(p)) is not None]
