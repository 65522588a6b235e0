"""What a table shows of the document: the disaggregated ranks, one layer of the ledger, the layers seen, whether DBO's arithmetic applies, whether a verdict was borderline."""

from __future__ import annotations

import dataclasses

import msgspec
from msgspec import UnsetType

from dbo_trace.analysis.overlap.layer_operations import LayerOps
from dbo_trace.analysis.steps.microbatched import step_microbatched
from dbo_trace.render.document import RankBlock, ReasonBlock, ReportDocument, VerdictBlock
from dbo_trace.render.document.ledger import LedgerBlock
from dbo_trace.render.document.pipeline import PipelineBlock


def borderline(verdict: VerdictBlock) -> bool:
    """A share decided the label within 2 points of its line (said only by documents of version 6 on)."""
    return any(isinstance(r, ReasonBlock) and r.borderline for r in verdict.reasons)


def disaggregated_ranks(d: ReportDocument) -> set[int]:
    """The ranks with a role in a disaggregated run (attention or FFN)."""
    return {r.rank for r in d.ranks if r.role is not None}


def label_of(v: VerdictBlock) -> str:
    """A run's, a rank's or a step's label: never null there (app/review_archive.py refuses one), as
    only a phase's may be (its verdict one type with theirs: render/document/verdict.py)."""
    return v.label or "-"


def per_rank_labels(v: VerdictBlock) -> list[str]:
    """A phase's verdict per rank, where the phase has no verdict of its own (else none)."""
    return [] if isinstance(v.per_rank, UnsetType) else v.per_rank


def dbo_arithmetic_applies(d: ReportDocument) -> bool:
    """The round-trip table is DBO arithmetic: only where microbatches exist (a kernel's microbatch is
    known, or a step took a microbatched path, as a full-graph replay of both microbatches does)."""
    rt = d.round_trips
    return rt is not None and (rt.microbatched or any(step_microbatched(s.path) for s in d.steps))


def only_layer(d: ReportDocument, layer: int | None) -> ReportDocument:
    """--layer N: every rank's comm operations, per-layer rows and hand-overs of that layer only."""
    if layer is None:
        return d
    ranks = []
    for r in d.ranks:
        ledger = ledger_of(r)
        ranks.append(
            msgspec.structs.replace(
                r,
                comm_operations=[op for op in r.comm_operations if op.layer == layer],
                comm_layers=[x for x in comm_layers_of(r) if x.first_layer <= layer <= x.last_layer],
                dbo_ledger=ledger
                if ledger is None
                else msgspec.structs.replace(ledger, layers=[x for x in ledger.layers if x.layer == layer]),
            )
        )
    p = d.pipeline
    if isinstance(p, PipelineBlock):
        p = dataclasses.replace(p, layers_detail=[x for x in p.layers_detail if x.layer == layer])
    return msgspec.structs.replace(d, ranks=ranks, pipeline=p)


def layers_seen(d: ReportDocument) -> set[int]:
    """The layers some rank's comm operations or hand-overs name."""
    seen = {op.layer for r in d.ranks for op in r.comm_operations if isinstance(op.layer, int)}
    visits = {x.layer for x in d.pipeline.layers_detail} if isinstance(d.pipeline, PipelineBlock) else set()
    return seen | visits | {x.layer for r in d.ranks if (b := ledger_of(r)) is not None for x in b.layers}


# ---- the DBO ledger (render/document/ledger.py's block) --------------------------------------------------


def ledger_of(r: RankBlock) -> LedgerBlock | None:
    """A rank's ledger; None where it has none or its document's version had none."""
    return r.dbo_ledger if isinstance(r.dbo_ledger, LedgerBlock) else None


def comm_layers_of(r: RankBlock) -> list[LayerOps]:
    """A rank's comm operations per layer; none where its document's version had none."""
    return r.comm_layers if isinstance(r.comm_layers, list) else []
