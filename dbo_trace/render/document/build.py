"""The whole document: a rank's block, the options and `build_document`, the report's figures selected and rounded."""

from __future__ import annotations

from typing import cast

from msgspec import UNSET, UnsetType

from dbo_trace import __version__
from dbo_trace.analysis.cross_rank.side_by_side import CrossRank
from dbo_trace.analysis.model import RankReport, Report, comm_patterns_of, layers_of
from dbo_trace.analysis.overlap.held_sms import SmEvidence
from dbo_trace.analysis.overlap.layer_operations import LayerOps
from dbo_trace.analysis.overlap.operations import OperationRow
from dbo_trace.analysis.verdict.decision import Label as VerdictLabel
from dbo_trace.lazy import concatenated
from dbo_trace.render.document.afd import (
    DisaggregatedBlock,
    ProfilerBlock,
    RolesBlock,
    RoundTripsBlock,
    disaggregated_block,
    profiler_block,
    roles_block,
    round_trips_block,
)
from dbo_trace.render.document.base import Int, Number, SCHEMA, SCHEMA_VERSION, Struct, _r
from dbo_trace.render.document.held import rounded
from dbo_trace.analysis.afd.dbo_model import DboWhatIf, NotPredicted
from dbo_trace.render.words.pipeline import not_predicted_text
from dbo_trace.render.document.pipeline import (
    DboWhatIfBlock,
    OverlapBlock,
    PipelineBlock,
    dbo_what_if_block,
    overlap_block,
    pipeline_block,
)
from dbo_trace.render.document.cross_rank import CrossRankBlock, PeerWait, cross_rank_block, peer_wait_block
from dbo_trace.render.document.figures import Comm, Gpu, Host, StepGraphs, figures_of, graph_step_counts
from dbo_trace.render.document.host import (
    Attribution,
    ClocksBlock,
    CpuRange,
    HostCausesBlock,
    HostTestBlock,
    IncompleteBlock,
    KernelSummaryBlock,
    LaunchDelayBlock,
    RankStacksBlock,
    TimeBlock,
    clocks_block,
    cpu_range_block,
    host_causes_block,
    incomplete_block,
    kernel_summary_block,
    launch_delay_block,
    rank_stacks_block,
    time_block,
)
from dbo_trace.render.document.ledger import (
    LedgerBlock,
    WhatIfRow,
    layer_ops_block,
    ledger_block,
    sm_evidence_block,
    what_if_block,
)
from dbo_trace.render.document.overlap import (
    ContentionBlock,
    ExposedCommReasons,
    HeldBackBlock,
    NameCount,
    NameCountTotal,
    contention_block,
    exposure_block,
    held_back_block,
)
from dbo_trace.render.document.steps import BehindBlock, PhaseBlock, StepBlock, behind_block, phase_block, step_blocks
from dbo_trace.render.document.verdict import VerdictBlock, verdict_block
from dbo_trace.render.words.notes import host_line, note_text, role_source_text
from dbo_trace.render.words.verdict import host_basis_text


class RankBlock(Struct, omit_defaults=True):  # role, disaggregated: only where a run has roles
    rank: Int
    source: str
    gpu: Gpu
    comm: Comm
    host: Host
    graphs: StepGraphs
    steps_source: str
    steps_inferred: bool
    microbatch_source: str
    time: TimeBlock
    time_in_steps: TimeBlock
    host_test: HostTestBlock
    host_causes: HostCausesBlock | None
    host_causes_window: HostCausesBlock | None
    phases: dict[str, PhaseBlock]
    contention: ContentionBlock | None
    exposed_comm_reasons: ExposedCommReasons | None
    held_back_comm: HeldBackBlock | None
    # the analysis's rows, rounded (render/document/held.py): layer and role are keys of version 5,
    # exposed_fraction of 8 (an older archive's row reads them as None; its version check reads the
    # strict decoding, app/review_archive.py, where they are absent)
    comm_operations: list[OperationRow]
    comm_kernel_names: list[NameCount]
    top_compute_kernels: list[NameCountTotal]
    kernel_summary: KernelSummaryBlock | None
    cpu_range_summary: list[CpuRange]
    round_trips: RoundTripsBlock | None
    steps: list[StepBlock]
    verdict: VerdictBlock
    attribution: Attribution
    notes: list[str]
    peer_wait: PeerWait | None  # version 3: what this rank waited for its peers (null: one rank, or none matched)
    time_steady: TimeBlock | None | UnsetType = UNSET  # version 5: what the host test measured (the steady state)
    behind: BehindBlock | None | UnsetType = UNSET  # version 5: the step windows overlap (the GPU runs behind the CPU)
    launch_delay: LaunchDelayBlock | None | UnsetType = UNSET  # version 5: launch call end to start; queued host idle
    role: str | None = None  # attention / ffn in a disaggregated run (the manifest's, its command line's, the trace's)
    role_source: str | None = None  # where the role came from, in words
    disaggregated: DisaggregatedBlock | None = None  # an AFD attention rank's round trips
    host_stacks: RankStacksBlock | UnsetType = UNSET  # only with sampled Python stacks (docs/analysis.md)
    # version 5: DBO's own cost, the split (render/document/ledger.py); absent from a version 3 or 4 document
    dbo_ledger: LedgerBlock | None | UnsetType = UNSET
    comm_layers: list[LayerOps] | UnsetType = UNSET  # version 5: comm operations per layer, alike grouped
    sm_evidence: SmEvidence | None | UnsetType = UNSET  # version 5: what held-back comm's holder occupied
    clocks: ClocksBlock | None | UnsetType = UNSET  # within version 7: the GPU clock's offsets the events allow
    incomplete: IncompleteBlock | None | UnsetType = UNSET  # within version 7: the trace lacks GPU work (null: whole)


class OptionsBlock(Struct):
    comm_kernels: list[str]
    comm_streams: list[Int]
    ubatch_patterns: list[str]
    layers: Number | None
    step_marker: str | None
    comm_kernels_only: bool


class ReportDocument(Struct, omit_defaults=True):  # roles, disaggregated: only where a run has roles
    """The whole report: the run's totals (its figures over all ranks), then each rank's."""

    schema: str
    schema_version: Int
    dbo_trace_version: str
    inputs: list[str]
    gpu: Gpu
    comm: Comm
    host: Host
    graphs: StepGraphs
    steps_source: str
    microbatch_source: str
    time: TimeBlock
    host_causes: HostCausesBlock | None
    phases: dict[str, PhaseBlock]
    round_trips: RoundTripsBlock | None
    steps: list[StepBlock]  # every rank's steps, in rank order (the ranks' own blocks)
    verdict: VerdictBlock
    options: OptionsBlock
    ranks: list[RankBlock]
    cross_rank: CrossRankBlock | None
    warnings: list[str]
    roles: RolesBlock | None = None  # a disaggregated run's roles
    disaggregated: DisaggregatedBlock | None = None  # the attention rank's round trips
    what_if: list[WhatIfRow] | UnsetType = UNSET  # version 5: model estimates (docs/analysis.md, "What-if")
    profiler: ProfilerBlock | UnsetType = UNSET  # within version 5: only where the recording has timed repeats
    # version 9: an AFD attention rank's steps as a pipeline, its overlap in three figures, and DBO's
    # effect predicted from this arm (--what-if dbo=on|off)
    overlap: OverlapBlock | None | UnsetType = UNSET
    pipeline: PipelineBlock | None | UnsetType = UNSET
    dbo_what_if: DboWhatIfBlock | None | UnsetType = UNSET
    dbo_what_if_not: str | UnsetType = UNSET  # --what-if dbo= asked, and why there is no prediction


def rank_block(
    r: RankReport, cross_rank: CrossRank | None = None, lazy_steps: bool = False, dbo_given: bool = False
) -> RankBlock:
    """lazy_steps: its step blocks built when read (build_document); dbo_given: --what-if dbo=on|off given."""
    bound = r.verdict.label == VerdictLabel.HOST_BOUND
    waits = cross_rank.waits if cross_rank is not None else None
    mine = waits.ranks.get(r.rank) if waits is not None else None
    return RankBlock(
        rank=r.rank,
        source=r.source,
        gpu=figures_of(Gpu, r.total),
        comm=figures_of(Comm, r.total),
        host=figures_of(Host, r.total, bound=bound),
        graphs=figures_of(StepGraphs, r.total, **graph_step_counts([r.steps.table])),
        steps_source=r.step_source,
        steps_inferred=r.steps_inferred,
        microbatch_source=r.attribution,
        time=time_block(r.window),
        time_in_steps=time_block(r.in_steps),
        host_test=HostTestBlock(fraction=_r(r.host_test.fraction, 4), basis=host_basis_text(r.host_test.basis)),
        host_causes=host_causes_block(
            r.host_causes,
            None if r.host_causes is None else host_line(f"rank {r.rank}", bound, r.host_test.fraction, r.host_causes),
        ),
        host_causes_window=host_causes_block(r.host_causes_window),
        phases={p.phase: phase_block(p) for p in r.phases},
        contention=contention_block(r.contention, r.comm_transfer_slowdown),
        exposed_comm_reasons=exposure_block(r.exposure),
        held_back_comm=held_back_block(r.held_back),
        comm_operations=[rounded(o, hidden_fraction=4, exposed_fraction=4) for o in r.operations],
        comm_kernel_names=[NameCount(name=n, count=k) for n, k in r.comm_kernels],
        top_compute_kernels=[NameCountTotal(name=n, count=k, total_us=_r(t)) for n, k, t in r.top_compute_kernels],
        kernel_summary=kernel_summary_block(r.kernel_summary),
        cpu_range_summary=cpu_range_block(r.cpu_ranges),
        round_trips=round_trips_block(r.round_trips),
        steps=step_blocks(r, lazy_steps),
        verdict=verdict_block(r.verdict, dbo_given),
        attribution=Attribution(profile_all_threads=r.profile_all_threads),
        notes=[note_text(n) for n in r.notes],
        peer_wait=None if mine is None or cross_rank is None else peer_wait_block(mine, cross_rank, r.wait_split),
        time_steady=None if r.steady is None else time_block(r.steady),
        behind=behind_block(r.behind),
        launch_delay=launch_delay_block(r.launch_delay),
        clocks=clocks_block(r.clocks),
        incomplete=incomplete_block(r.incomplete),
        role=r.role,
        role_source=None if r.role_source is None else role_source_text(r.role_source),
        disaggregated=disaggregated_block(r.afd),
        host_stacks=rank_stacks_block(r.host_stacks, r.rank),
        dbo_ledger=ledger_block(r.ledger, r.host_causes, r.yield_ops),
        comm_layers=layer_ops_block(r.operations_by_layer),
        sm_evidence=sm_evidence_block(r.sm_evidence),
    )


def _sources(values: list[str]) -> str:
    unique = list(dict.fromkeys(values))
    return unique[0] if len(unique) == 1 else "; ".join(f"rank {i}: {v}" for i, v in enumerate(values))


def build_document(report: Report, lazy_steps: bool = False) -> ReportDocument:
    """lazy_steps: the per-step blocks (the ranks' and the run's) are built when a renderer reads
    them: the terminal shows 20 and the Markdown 200 of a run's 100,000. Such a document cannot be
    encoded (--json and --html build theirs whole)."""
    m = report.total
    dbo_given = report.options.what_if_dbo is not None  # its next steps suggest no --what-if dbo=
    ranks = [rank_block(r, report.cross_rank, lazy_steps, dbo_given) for r in report.ranks]
    bound = report.verdict.label == VerdictLabel.HOST_BOUND
    return ReportDocument(
        schema=SCHEMA,
        schema_version=SCHEMA_VERSION,
        dbo_trace_version=__version__,
        inputs=report.inputs,
        gpu=figures_of(Gpu, m),
        comm=figures_of(Comm, m),
        host=figures_of(Host, m, bound=bound),
        graphs=figures_of(StepGraphs, m, **graph_step_counts([r.steps.table for r in report.ranks])),
        steps_source=_sources([r.step_source for r in report.ranks]),
        microbatch_source=_sources([r.attribution for r in report.ranks]),
        time=time_block(report.window),
        host_causes=host_causes_block(
            report.host_causes,
            None
            if report.host_causes is None
            else host_line(
                "",
                bound,
                report.host_test.fraction if report.host_test is not None else None,
                report.host_causes,
            ),
        ),
        phases={p.phase: phase_block(p) for p in report.phases},
        round_trips=round_trips_block(report.round_trips),
        # the ranks' own step blocks, built once
        steps=cast("list[StepBlock]", concatenated([r.steps for r in ranks]))
        if lazy_steps
        else [step for rank in ranks for step in rank.steps],
        verdict=verdict_block(report.verdict, dbo_given),
        options=OptionsBlock(
            comm_kernels=list(comm_patterns_of(report.options, report.recording)),
            comm_streams=list(report.options.comm_streams),
            ubatch_patterns=list(report.options.ubatch_patterns),
            layers=layers_of(report.options, report.recording),
            step_marker=report.options.step_marker,
            comm_kernels_only=report.options.comm_only,
        ),
        ranks=ranks,
        cross_rank=cross_rank_block(report.cross_rank),
        warnings=[note_text(n) for n in report.warnings],
        roles=roles_block(report.roles),
        disaggregated=next((b.disaggregated for b in ranks if b.disaggregated is not None), None),
        what_if=what_if_block(report.what_if),
        profiler=profiler_block(report.unprofiled),
        overlap=overlap_block(report.pipeline.overlap) if report.pipeline is not None else UNSET,
        pipeline=pipeline_block(report.pipeline) if report.pipeline is not None else UNSET,
        dbo_what_if=dbo_what_if_block(w) if isinstance(w := report.dbo_what_if, DboWhatIf) else UNSET,
        dbo_what_if_not=not_predicted_text(w.why) if isinstance(w := report.dbo_what_if, NotPredicted) else UNSET,
    )
