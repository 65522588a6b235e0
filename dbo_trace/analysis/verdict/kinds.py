"""The three kinds of what a verdict says besides its label, as base types: a reason, a headline's
finding (qualifier) and a next step. Their subclasses, each with its figures, are verdict/reasons.py's;
the overlap model (verdict/evidence_types.py OverlapModel) answers in them. A leaf."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True, kw_only=True)
class Reason:
    """One reason of a verdict: its kind, its figures (the fields of its class) and whether a share
    decided the label within BORDERLINE of its line."""

    kind: ClassVar[str]
    borderline: bool = False


@dataclass(frozen=True, kw_only=True)
class Qualifier:
    """The dominant finding the headline names in brackets: its key and its figures."""

    key: ClassVar[str]


@dataclass(frozen=True, kw_only=True)
class NextStep:
    """The one action the verdict's evidence supports, with the figures it follows from."""

    kind: ClassVar[str]
