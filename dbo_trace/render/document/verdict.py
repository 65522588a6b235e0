"""A verdict in the document: its label, typed reasons and next step, each beside its words."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal, cast, get_args

from msgspec import UNSET, UnsetType

from dbo_trace.analysis.model import PhaseReport
from dbo_trace.analysis.verdict.decision import PaysFigures, Verdict
from dbo_trace.render.document.base import Label, NextStepKind, QualifierKey, ReasonKind, Struct
from dbo_trace.render.document.held import rounded
from dbo_trace.render.words.verdict import headline, label_text, next_step_text, pays_text, reason_text


# The next step kinds an older version wrote that analysis no longer has (the document's own history).
RetiredKind = Literal["dbo_cannot_pay"]  # version 8 replaced it by measure_pays
RETIRED_KINDS: tuple[RetiredKind, ...] = get_args(RetiredKind)


# ---- the blocks -----------------------------------------------------------------------------------


class ReasonBlock(Struct):
    """A reason of a verdict (version 6): its kind, whether a share decided the label within 2 points
    of its line, and its words (render/words/verdict.py)."""

    kind: ReasonKind
    borderline: bool
    text: str


class NextStepBlock(Struct):
    """The one action the verdict's evidence supports (version 6), with the figures it follows from in its words."""

    kind: NextStepKind | RetiredKind
    text: str


@dataclass(frozen=True, kw_only=True)
class PaysBlock(PaysFigures):
    """Does DBO pay (version 8): the analysis's figures as they are, rounded (render/document/held.py),
    from one arm not measured: what the arm shows of the balance, per step (null: not in this trace;
    yield_wait_per_step_us from version 9, the yield op's wait apart from its own cost), and its words."""

    text: str


# A reason as a document holds it: version 6 a ReasonBlock, versions 3 to 5 its text alone.
ReasonItem = str | ReasonBlock


# A twin of analysis/verdict/decision.py Verdict, kept: it writes the verdict's reasons and next step
# as {kind, text} and adds its headline, words analysis/ does not hold (it holds no sentences).
class VerdictBlock(Struct):
    """A verdict: the run's, a rank's, a step's or a phase's. Only a phase's may lack a label (where
    its ranks' differ: per_rank, each rank's), and a phase's has no pays (app/review_archive.py
    refuses either elsewhere)."""

    label: Label | None
    qualifier: QualifierKey | None
    headline: str | None
    findings: list[QualifierKey]
    reasons: list[ReasonItem]
    per_rank: list[str] | UnsetType = UNSET  # a phase's, only without a label of its own
    next_step: NextStepBlock | None | UnsetType = UNSET  # version 6
    pays: PaysBlock | UnsetType = UNSET  # version 8: a microbatched run's or rank's


def _vocabulary(v: Verdict) -> tuple[Label, QualifierKey | None, list[QualifierKey]]:
    """The verdict's label, qualifier and findings: analysis.verdict's own types."""
    qualifier = None if v.qualifier is None else v.qualifier.key
    return v.label, qualifier, cast("list[QualifierKey]", list(v.findings))


def _reasons(v: Verdict) -> list[ReasonItem]:
    return [ReasonBlock(kind=r.kind, borderline=r.borderline, text=reason_text(r)) for r in v.reasons]


def _next_step(v: Verdict, dbo_given: bool = False) -> NextStepBlock | None:
    n = v.next_step
    return None if n is None else NextStepBlock(kind=n.kind, text=next_step_text(n, dbo_given))


def _pays(v: Verdict) -> PaysBlock | UnsetType:
    if v.pays is None:
        return UNSET
    held = rounded(PaysFigures(**{f.name: getattr(v.pays, f.name) for f in fields(PaysFigures)}))
    return PaysBlock(**{f.name: getattr(held, f.name) for f in fields(PaysFigures)}, text=pays_text(v.pays))


def verdict_block(v: Verdict, dbo_given: bool = False) -> VerdictBlock:
    """The verdict's block; dbo_given: --what-if dbo=on|off was given (its next step suggests no --what-if dbo=)."""
    label, qualifier, findings = _vocabulary(v)
    return VerdictBlock(
        label=label, qualifier=qualifier, headline=headline(v), findings=findings, reasons=_reasons(v),
        next_step=_next_step(v, dbo_given), pays=_pays(v),
    )  # fmt: skip


def phase_verdict_block(p: PhaseReport) -> VerdictBlock:
    v = p.verdict
    if v is None:
        return VerdictBlock(
            label=None, qualifier=None, headline=None, findings=[], reasons=[], per_rank=[label_text(label) for label in p.per_rank or []], next_step=None
        )
    label, qualifier, findings = _vocabulary(v)
    return VerdictBlock(
        label=label, qualifier=qualifier, headline=headline(v), findings=findings, reasons=_reasons(v), next_step=_next_step(v)
    )
