"""A step and a phase in the document, and the stalls and the steps that ran behind."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import cast

from msgspec import UNSET, UnsetType

from dbo_trace.analysis.model import PhaseReport, RankReport, StepReport
from dbo_trace.analysis.host.python_frames import StepFrame
from dbo_trace.analysis.steps.stalls import Behind, CompileRange, Stall
from dbo_trace.analysis.verdict.decision import Label as VerdictLabel
from dbo_trace.lazy import LazyList
from dbo_trace.render.document.base import Count, Int, Number, Struct, _r
from dbo_trace.render.document.figures import Comm, Gpu, Graphs, Host, figures_of
from dbo_trace.render.document.host import (
    HostCausesBlock,
    SpreadBlock,
    StepCauses,
    host_causes_block,
    spread_block,
    step_causes_block,
)
from dbo_trace.render.document.verdict import VerdictBlock, phase_verdict_block, verdict_block
from dbo_trace.render.document.held import rounded
from dbo_trace.render.words.notes import host_line
from dbo_trace.render.words.verdict import stall_text


class PhaseBlock(Struct):
    steps: Count
    median_step_us: float | None
    gpu_utilization: float | None
    host_idle_fraction: float | None
    comm_hidden_fraction: float | None
    replayed_kernel_fraction: float | None
    graph_launches: Count
    step_us: SpreadBlock | None
    host_causes: HostCausesBlock | None
    verdict: VerdictBlock  # its own where every rank has the phase, else no label and each rank's (per_rank)
    stalls: Count | UnsetType = UNSET  # version 5: its steps that stalled; its figures and verdict are over the others


class StepBlock(Struct):
    rank: Int
    number: Number  # the step's row in its rank's per-step table, from 1: what --step takes
    label: str
    path: str | None
    phase: str | None
    context_tokens: Count | None
    generation_tokens: Count | None
    start_us: float | None
    step_us: float | None
    comm_ops: Count
    replayed: bool
    captured_launches: Count
    verdict: VerdictBlock
    gpu: Gpu
    comm: Comm
    host: Host
    graphs: Graphs
    host_causes: StepCauses | None
    window_us: float | None | UnsetType = UNSET  # version 5: its window (CPU start to its last GPU work's end); step_us is its period
    stall: StallBlock | None | UnsetType = UNSET  # version 5: why it is not steady state; null: steady
    # version 5, where the rank has sampled Python stacks: the frame most of its sampled host idle was in
    host_frame: StepFrame | UnsetType = UNSET  # the analysis's, rounded (render/document/held.py)


@dataclass(frozen=True, kw_only=True)
class StallBlock(Stall):
    """A step left out of the verdicts (docs/analysis.md, "Steady state and stalls"): the analysis's
    Stall as it is, rounded (render/document/held.py), and its words after its figures."""

    text: str


NameUs = CompileRange  # a compile range's name and summed time (us), the analysis's own


def phase_block(p: PhaseReport) -> PhaseBlock:
    m = p.metrics
    return PhaseBlock(
        steps=p.steps,
        median_step_us=_r(p.median_step_us),
        gpu_utilization=_r(m.utilization, 4),
        host_idle_fraction=_r(m.host_idle_fraction, 4),
        comm_hidden_fraction=_r(m.comm_hidden_fraction, 4),
        replayed_kernel_fraction=_r(m.replayed_kernel_fraction, 4),
        graph_launches=m.graph_launches,
        step_us=spread_block(p.step_spread),
        host_causes=host_causes_block(
            p.host_causes,
            None
            if p.host_causes is None
            else host_line(p.phase, p.verdict is not None and p.verdict.label == VerdictLabel.HOST_BOUND, m.host_idle_fraction, p.host_causes),
        ),
        verdict=phase_verdict_block(p),
        stalls=p.stalls,
    )


def step_block(step: StepReport, rank: int, number: int) -> StepBlock:
    m = step.metrics
    frame = step.host_frame
    return StepBlock(
        host_frame=UNSET if frame is None else rounded(frame),
        rank=rank,
        number=number,
        label=step.label,
        path=step.path,
        phase=step.phase,
        context_tokens=step.context_tokens,
        generation_tokens=step.generation_tokens,
        start_us=_r(step.start_us),
        step_us=_r(step.period_us),
        comm_ops=step.comm_ops,
        replayed=step.replayed,
        captured_launches=step.captured_launches,
        verdict=verdict_block(step.verdict),
        gpu=figures_of(Gpu, m),
        comm=figures_of(Comm, m),
        host=figures_of(Host, m),
        graphs=figures_of(Graphs, m),
        host_causes=step_causes_block(step.host_causes),
        window_us=_r(step.wall_us),
        stall=stall_block(step.stall),
    )


def stall_block(st: Stall | None) -> StallBlock | None:
    if st is None:
        return None
    r = rounded(st)
    return StallBlock(**{f.name: getattr(r, f.name) for f in fields(Stall)}, text=stall_text(st))


# The analysis's own, rounded (render/document/held.py): a step's most-sampled project frame, the
# step windows that overlap (the GPU runs behind the CPU).
StepFrameBlock = StepFrame
BehindBlock = Behind


def behind_block(b: Behind | None) -> Behind | None:
    if b is None:
        return None
    return rounded(b)


def step_blocks(r: RankReport, lazy: bool) -> list[StepBlock]:
    """A rank's step blocks, each numbered from 1; lazy: each built when read (a LazyList)."""
    if not lazy:
        return [step_block(s, r.rank, i + 1) for i, s in enumerate(r.steps)]
    steps = r.steps
    return cast("list[StepBlock]", LazyList(len(steps), lambda i: step_block(steps[i], r.rank, i + 1)))
