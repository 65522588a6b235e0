"""DBO's effect predicted from one arm, in words: what it was calibrated on and what widened its
interval (analysis/afd/dbo_model.py hands over the figures)."""

from __future__ import annotations

from dbo_trace.analysis.compare.arms import ALL_STEPS, Arm, Pair
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
