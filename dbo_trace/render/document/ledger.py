"""The DBO ledger in the document (a rank's `dbo_ledger` block) and its lines for the text outputs.
Selection and rounding only: every figure comes from dbo_trace.analysis.ledger."""

from __future__ import annotations

from typing import Annotated

import msgspec

from dbo_trace.analysis.host.host_time import CAUSES, HostCauses
from dbo_trace.analysis.what_if import (
    NO_ROUND_TRIPS,
    NO_SM_COUNT,
    ONE_MICROBATCH,
    CommSmsWhatIf,
    NoHandoversWhatIf,
    NotEstimated,
    RoundTripWhatIf,
    WhatIf,
)
from dbo_trace.analysis.overlap.held_sms import SmEvidence
from dbo_trace.analysis.overlap.layer_operations import LayerOps
from dbo_trace.analysis.ledger import LayerHandovers, Ledger, StepLedger, Unprofiled, YieldOps
from dbo_trace.render.document.held import rounded

_Count = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]


class _Block(msgspec.Struct, forbid_unknown_fields=True):
    """As render/document/base.py's Struct: decoding refuses a key the block does not have."""


def _r(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(float(x), digits)


class SplitBlock(_Block):
    tokens: list[float] | None  # median tokens per microbatch
    compute_us: list[float] | None  # median compute busy per microbatch
    imbalance: float | None  # (largest - smallest) / largest compute, median over steps
    excess_us: float | None  # largest - smallest compute: what the other microbatch cannot cover


class LedgerBlock(_Block):
    source: str | None
    handovers: _Count
    median_handover_us: float | None
    p90_handover_us: float | None
    handover_per_step_us: float | None
    yields_per_step: float | None
    startup_us: float | None
    startup_gpu_idle_us: float | None  # the host-time cause ubatch_startup over the rank's host test
    share: float | None
    unprofiled: Unprofiled | None  # the analysis's, rounded (render/document/held.py)
    yield_op: YieldOps | None
    split: SplitBlock
    layers: list[LayerHandovers]
    steps: list[StepLedger]  # the analysis's, rounded (render/document/held.py)


def ledger_block(x: Ledger | None, causes: HostCauses | None, y: YieldOps | None) -> LedgerBlock | None:
    """The rank's DBO ledger (None without one), with its yield op's calls (the rank's)."""
    if x is None:
        return None
    u = x.unprofiled
    return LedgerBlock(
        source=x.source,
        handovers=x.handovers,
        median_handover_us=_r(x.median_us),
        p90_handover_us=_r(x.p90_us),
        handover_per_step_us=_r(x.handover_per_step_us),
        yields_per_step=_r(x.yields_per_step),
        startup_us=_r(x.startup_us),
        startup_gpu_idle_us=None if causes is None else _r(causes.us(CAUSES.index("ubatch_startup"))),
        share=_r(x.share, 4),
        unprofiled=None if u is None else rounded(u),
        yield_op=None if y is None else rounded(y, wall_share=4, thread_share=4),
        split=SplitBlock(
            tokens=None if (t := x.split_tokens) is None else [_r(v, 1) or 0.0 for v in t],
            compute_us=None if (c := x.compute_us) is None else [_r(v) or 0.0 for v in c],
            imbalance=_r(x.imbalance, 4),
            excess_us=_r(x.excess_us),
        ),
        layers=[rounded(row) for row in x.layers],
        steps=[rounded(s, share=4) for s in x.steps],
    )


def layer_ops_block(rows: list[LayerOps]) -> list[LayerOps]:
    """The analysis's rows as they are, rounded (render/document/held.py): exposed_fraction is a key of
    version 8 (an older archive's row reads it as None; its version check, app/review_archive.py, reads
    the strict decoding, where it is absent)."""
    return [rounded(x, hidden_fraction=4, exposed_fraction=4) for x in rows]


def sm_evidence_block(x: SmEvidence | None) -> SmEvidence | None:
    """The analysis's, rounded (render/document/held.py): what held-back comm's holder occupied."""
    return None if x is None else rounded(x)


class WhatIfRow(_Block):
    what: str
    step_us: float | None  # measured (median)
    predicted_us: float | None  # the model's
    change: float | None  # predicted / measured - 1
    assumptions: str


ROUND_TRIP_MODEL = (
    "a model, not a measurement: each of a step's N round trips (one per microbatch and layer) costs "
    "max(C, R) of the step when overlapped, C the compute per microbatch and R the comm per round trip "
    "(medians of the DBO arithmetic); the rest of the step is unchanged"
)


NO_ESTIMATE = "no estimate: "  # a what-if row's assumptions where the model made none (predicted_us null)


def not_estimated_words(x: NotEstimated) -> tuple[str, str]:
    """(what was asked, why the model makes no estimate) in words."""
    what = f"round trip {x.round_trip_us:g} us" if x.round_trip_us is not None else f"{x.sms_reserved} SMs reserved for comm"
    if x.why == ONE_MICROBATCH and x.afd:
        why = (
            "one microbatch per step (DBO off): the model estimates what the other microbatch's compute hides, so it "
            "applies to a DBO arm" + ("" if x.dbo_given else "; --what-if dbo=on predicts DBO's effect from this arm")
        )
    elif x.why == ONE_MICROBATCH:
        why = (
            "no step's two microbatches are told apart (DBO off, or their kernels' microbatch not in the trace): the "
            "model needs the compute per microbatch"
        )
    elif x.why == NO_ROUND_TRIPS:
        why = "no DBO arithmetic (no comm operations counted per step): the model needs the step's round trips"
    elif x.why == NO_SM_COUNT:
        why = "the trace does not give the GPU's SM count (Kineto's deviceProperties numSms)"
    else:
        why = f"{x.sms_reserved} SMs are not fewer than the GPU's {x.sms}"
    return what, NO_ESTIMATE + why


def what_if_words(x: WhatIf) -> tuple[str, str]:
    """(what the model changed, its assumptions) in words."""
    if isinstance(x, RoundTripWhatIf):
        if x.compute_covers:  # no effect: say why, where a reader sees exposed comm beside a +0%
            return f"round trip {x.round_trip_us:g} us", (
                f"{ROUND_TRIP_MODEL}; no change here: the compute per microbatch ({x.compute_us / 1000:.2f} ms) already "
                f"covers the round trip ({x.comm_us / 1000:.2f} ms measured), so a shorter one hides nothing more: the "
                "comm exposed here was exposed by something else (the exposed comm line says what)"
            )
        return f"round trip {x.round_trip_us:g} us", ROUND_TRIP_MODEL
    if isinstance(x, CommSmsWhatIf):
        return f"{x.sms_reserved} of {x.sms} SMs reserved for comm", (
            f"a model, not a measurement: the comm exposed for want of a free SM ({x.crowded_us / 1000:.2f} ms per step) "
            f"hides entirely, and the step's compute ({x.compute_us / 1000:.2f} ms per step) slows in proportion to the SMs "
            f"it loses (+{x.cost_us / 1000:.2f} ms; a kernel of one wave can lose more); the rest of the step is unchanged"
        )
    assert isinstance(x, NoHandoversWhatIf), x
    return "no hand-overs", "a bound, not a measurement: every hand-over's latency on the step's critical path"


def what_if_block(rows: list[WhatIf | NotEstimated]) -> list[WhatIfRow]:
    out = []
    for x in rows:
        if isinstance(x, NotEstimated):  # asked, not estimated: predicted_us and change null, the reason in words
            what, why = not_estimated_words(x)
            out.append(WhatIfRow(what=what, step_us=_r(x.step_us), predicted_us=None, change=None, assumptions=why))
            continue
        what, assumptions = what_if_words(x)
        out.append(
            WhatIfRow(
                what=what,
                step_us=_r(x.step_us),
                predicted_us=_r(x.predicted_us),
                change=_r(x.change, 4),
                assumptions=assumptions,
            )
        )
    return out
