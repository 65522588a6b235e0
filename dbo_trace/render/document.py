"""The report as a typed document (schema in docs/report-schema.md): a tree of msgspec Structs,
`ReportDocument` at the root. Every text renderer reads it; `--json` is its encoding, and a review
archive's report.json is decoded back into it (archive.read_report_document), its types checked.

Only field selection and rounding live here; every figure comes from dbo_trace.analysis. A Struct's
fields are the JSON keys in their order (the bytes of `--json` are the encoding of this tree).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from operator import attrgetter
from typing import Annotated, Any, Literal, NamedTuple, TypeVar, cast

import msgspec
from msgspec import UNSET, UnsetType

from dbo_trace import __version__
from dbo_trace.analysis.accounting import TimeBuckets
from dbo_trace.analysis.cross_rank.clocks import Alignment
from dbo_trace.analysis.overlap.contention import Contention
from dbo_trace.analysis.overlap.exposure import LATE_RECORD, Exposure
from dbo_trace.analysis.host.gpu_clock import ClockBounds, Incomplete
from dbo_trace.analysis.overlap.held import HeldSummary
from dbo_trace.analysis.host.host_time import CAUSES, HostCauses
from dbo_trace.analysis.metrics import RoundTrips, WindowMetrics
from dbo_trace.analysis.model import PhaseReport, RankReport, Report, StepReport, StepTable
from dbo_trace.analysis.cross_rank.collective_waits import GroupWaits, MatchedOp, PeerWaits, RankWaits, WaitSplit
from dbo_trace.analysis.host.python_frames import HostStacks, RankStacks
from dbo_trace.analysis.overlap.queueing import LaunchDelay
from dbo_trace.analysis.cross_rank.side_by_side import CrossRank
from dbo_trace.analysis.afd.roles import RolesInfo
from dbo_trace.analysis.afd.round_trips import AfdRoundTrips
from dbo_trace.analysis.steps.stalls import Behind, Stall
from dbo_trace.analysis.host.summaries import CpuRangeRow, KernelSummary, Spread
from dbo_trace.analysis.compare.unprofiled import Unprofiled
from dbo_trace.analysis.verdict.decision import Label as VerdictLabel
from dbo_trace.analysis.verdict.decision import Verdict, is_host_bound
from dbo_trace.lazy import LazyList, concatenated
from dbo_trace.render.ledger import (
    LayerOpsRow,
    LedgerBlock,
    SmEvidenceBlock,
    WhatIfRow,
    layer_ops_block,
    ledger_block,
    sm_evidence_block,
    what_if_block,
)
from dbo_trace.render.notes import (
    cross_note_text,
    cross_rank_summary,
    host_line,
    note_text,
    op_label,
    role_source_text,
    stacks_line,
    top_item_name,
    wait_lines,
)
from dbo_trace.render.wording import headline, host_basis_text, label_text, next_step_text, pays_text, reason_text, stall_text, time_slicing_text

SCHEMA = "dbo-trace-report"
# 3: verdict.headline, verdict.qualifier, verdict.findings; steps' number; host_causes, kernel_summary,
# cpu_ranges, step_us spread. 4: a rank's attribution block without ubatch_source and step_source
# (the rank's microbatch_source and steps_source hold them). 5: a step's step_us is its period (its
# share of the wall clock), its window apart (window_us); stalls; figures and verdicts over the
# steady state; a rank's host_stacks (only with sampled Python stacks); a rank's dbo_ledger,
# comm_layers, sm_evidence and the run's what_if. 6: every verdict's reasons as {kind, borderline,
# text} and its next_step; the labels graph-capture and gpu-bound, the findings graph_capture and gpu_bound.
# 7: the reason profiler_overhead, the next step ffn_server, the round trip's late_us. 8: the label
# single-batch, the finding exposed_comm, the next step measure_pays (dbo_cannot_pay gone), a run's and
# a rank's verdict.pays; a comm operation's and a layer's exposed_fraction
# (hidden_fraction's basis: the two add up)
SCHEMA_VERSION = 8
READABLE_VERSIONS = (3, 4, 5, 6, 7, 8)  # what a review archive's report may have been written with


class Struct(msgspec.Struct, forbid_unknown_fields=True):
    """Every block of the document: decoding refuses a key its type does not have. A version writes
    only its document's keys (a new key bumps it), so an unknown one in an archive is damage, and
    kept it would vanish from the --json that shows the stored document."""


def _r(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(float(x), digits)


# A whole number as an archive may hold it: within 64 bits (a hostile 5000-digit number could not
# be printed; a float holds it); msgspec checks it on decoding.
Int = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]
# How many of something (kernels, launches, steps, calls): never below zero. A step's number counts from 1.
Count = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]
Number = Annotated[int, msgspec.Meta(ge=1, le=(1 << 63) - 1)]
# Why a comm operation was exposed (analysis.exposure.REASON_SHORT's keys; a test keeps them equal).
Reason = Literal["peer", "late_record", "crowded", "held", "host", "waiting", "nothing", "unknown"]
# A verdict's label and its findings (analysis.verdict.LABELS and QUALIFIERS; a test keeps them equal).
Label = Literal[
    "graph-capture", "host-bound", "gpu-bound", "no-communication", "overlapped", "single-batch", "not-overlapped"
]
# The document's value of each analysis.verdict.Label (a test keeps each the Enum's own value).
LABEL_VALUE: dict[VerdictLabel, Label] = {
    VerdictLabel.GRAPH_CAPTURE: "graph-capture", VerdictLabel.HOST_BOUND: "host-bound",
    VerdictLabel.GPU_BOUND: "gpu-bound", VerdictLabel.NO_COMMUNICATION: "no-communication",
    VerdictLabel.OVERLAPPED: "overlapped", VerdictLabel.SINGLE_BATCH: "single-batch",
    VerdictLabel.NOT_OVERLAPPED: "not-overlapped",
}  # fmt: skip
StallCause = Literal["compile", "graph capture", "outlier"]  # analysis/steps/stalls.py
# A comm operation's role in its layer (analysis.ledger's DISPATCH ... ROUND_TRIP).
Role = Literal["dispatch", "combine", "send", "recv", "round trip"]
QualifierKey = Literal[
    "graph_capture", "host_bound", "gpu_bound", "late_record", "peer_wait", "round_trip", "did_not_pay", "crowded",
    "exposed_comm",
]
# A reason's kind and a next step's (the kinds of analysis.verdict's Reason and NextStep classes, and
# the kinds an older version wrote that analysis no longer has, RETIRED_KINDS; a test keeps them equal).
RETIRED_KINDS = ("dbo_cannot_pay",)  # version 8 replaced it by measure_pays
ReasonKind = Literal[
    "time_slicing", "running_behind", "graph_capture", "stalls", "host_idle", "expensive_calls", "launch", "profiled_threads", "profiler_overhead", "gpu_busy", "no_comm",
    "comm_overlap", "afd_round_trips", "afd_step_round_trips", "long_graph_launches", "graph_replays", "criterion",
    "afd_criterion",
]  # fmt: skip
NextStepKind = Literal[
    "profile_after_startup", "start_mps", "yield_op_cost", "enable_graphs", "host_cause", "gpu_bottleneck",
    "nothing_to_overlap", "ffn_server", "late_record", "straggler", "dbo_cannot_pay", "measure_pays", "crowded", "did_not_pay",
    "overlap_missing", "one_microbatch", "overlap_works",
]  # fmt: skip


# ---- window figures -------------------------------------------------------------------------------

FIGURE = "figure"  # the key of a figure's declaration in its field's msgspec.Meta(extra=...)


def figure(source: str | Callable[[WindowMetrics], Any], digits: int | None = 3) -> msgspec.Meta:
    """A window figure's one declaration, on its field: where its value comes from (a WindowMetrics
    attribute, or a function of the metrics) and its rounding (None: a count or a flag, as it is)."""
    value = attrgetter(source) if isinstance(source, str) else source
    return msgspec.Meta(extra={FIGURE: (value, digits)})


class Figures(Struct):
    """A block of window figures (gpu, comm, host, graphs): every field that carries a figure() is
    built from a window's WindowMetrics and listed by every renderer that lists figures."""


F = TypeVar("F", bound=Figures)


class FigureField(NamedTuple):
    name: str
    source: Callable[[WindowMetrics], Any] | None  # None: a field that is not a figure (given by the builder)
    digits: int | None


_FIGURE_FIELDS: dict[type[Figures], tuple[FigureField, ...]] = {}


def figure_fields(cls: type[Figures]) -> tuple[FigureField, ...]:
    """A block's fields in order, each with its figure's declaration; read from the fields'
    annotations once per class."""
    found = _FIGURE_FIELDS.get(cls)
    if found is None:
        out = []
        for f in msgspec.structs.fields(cls):
            extras = [m.extra for m in getattr(f.type, "__metadata__", ()) if isinstance(m, msgspec.Meta) and m.extra]
            source, digits = extras[-1].get(FIGURE, (None, None)) if extras else (None, None)
            out.append(FigureField(f.name, source, digits))
        found = _FIGURE_FIELDS[cls] = tuple(out)
    return found


def figures_of(cls: type[F], m: WindowMetrics, **given: Any) -> F:
    """A block of figures of one window, every figure from its declaration; `given`: the fields
    that are not figures of the window (or a figure the caller decides, such as a rank's host.bound)."""
    values = []
    for name, source, digits in figure_fields(cls):
        if name in given:
            values.append(given[name])
        elif source is None:
            raise TypeError(f"{cls.__name__}.{name} is neither a figure nor given")
        else:
            value = source(m)
            values.append(value if digits is None else _r(value, digits))
    return cls(*values)


def figure_rows(window: Struct) -> Iterator[tuple[str, Any]]:
    """Every figure of a window (a rank's, a step's, the run's) as (`block.key`, its value), in the
    document's order: what the every-figure tables list."""
    for block in window.__struct_fields__:
        value = getattr(window, block)
        if isinstance(value, Figures):
            for name, source, _ in figure_fields(type(value)):
                if source is not None:
                    yield f"{block}.{name}", getattr(value, name)


class Gpu(Figures):
    utilization: Annotated[float | None, figure("utilization", 4)]
    busy_us: Annotated[float | None, figure("gpu_busy_us")]
    span_us: Annotated[float | None, figure("span_us")]
    compute_busy_us: Annotated[float | None, figure("compute_busy_us")]
    copy_busy_us: Annotated[float | None, figure("copy_busy_us")]
    kernels: Annotated[Count, figure("kernels", None)]


class Comm(Figures):
    busy_us: Annotated[float | None, figure("comm_busy_us")]
    hidden_us: Annotated[float | None, figure("comm_hidden_us")]
    hidden_fraction: Annotated[float | None, figure("comm_hidden_fraction", 4)]
    exposed_us: Annotated[float | None, figure("comm_exposed_us")]
    hidden_under_other_ubatch_us: Annotated[float | None, figure("comm_hidden_cross_us")]
    hidden_under_other_ubatch_fraction: Annotated[float | None, figure("comm_hidden_cross_fraction", 4)]
    kernels: Annotated[Count, figure("comm_kernels", None)]


class Host(Figures):
    # A step's own test; a rank's and the run's is their verdict's (given by rank_block and build_document).
    bound: Annotated[bool | None, figure(is_host_bound, None)]
    idle_us: Annotated[float | None, figure("host_idle_us")]
    idle_fraction: Annotated[float | None, figure("host_idle_fraction", 4)]
    idle_gaps: Annotated[Count, figure("host_idle_gaps", None)]
    all_idle_gaps: Annotated[Count, figure("idle_gaps", None)]
    launches: Annotated[Count, figure("launches", None)]
    launch_us: Annotated[float | None, figure("launch_us")]
    median_launch_us: Annotated[float | None, figure("median_launch_us")]
    median_kernel_us: Annotated[float | None, figure("median_kernel_us")]
    median_queue_us: Annotated[float | None, figure("median_queue_us")]
    long_graph_launches: Annotated[Count, figure("long_graph_launches", None)]
    max_graph_launch_us: Annotated[float | None, figure("max_graph_launch_us")]


class Graphs(Figures):
    launches: Annotated[Count, figure("graph_launches", None)]
    replayed_kernels: Annotated[Count, figure("replayed_kernels", None)]
    replayed_kernel_fraction: Annotated[float | None, figure("replayed_kernel_fraction", 4)]
    replayed_gpu_fraction: Annotated[float | None, figure("replayed_gpu_fraction", 4)]


class StepGraphs(Graphs):
    """A rank's and the run's graphs block: the figures, then its steps by how they reached the GPU."""

    steps_replayed: Count
    steps_captured: Count  # captured graphs (recorded, not run)
    steps_eager: Count
    captured_launches: Count


def graph_step_counts(tables: list[StepTable]) -> dict[str, int]:
    """Steps (a rank's, or every rank's) by how they reached the GPU: replayed graphs, captured
    graphs (recorded, not run), eager."""
    steps = sum(len(t) for t in tables)
    replayed = sum(int(t.replayed.sum()) for t in tables)
    captured = sum(int(((t.captured_launches > 0) & ~t.replayed).sum()) for t in tables)
    return {
        "steps_replayed": replayed,
        "steps_captured": captured,
        "steps_eager": steps - replayed - captured,
        "captured_launches": sum(int(t.captured_launches.sum()) for t in tables),
    }


# ---- the blocks -----------------------------------------------------------------------------------


class ReasonBlock(Struct):
    """A reason of a verdict (version 6): its kind, whether a share decided the label within 2 points
    of its line, and its words (render/wording.py)."""

    kind: ReasonKind
    borderline: bool
    text: str


class NextStepBlock(Struct):
    """The one action the verdict's evidence supports (version 6), with the figures it follows from in its words."""

    kind: NextStepKind
    text: str


class PaysBlock(Struct):
    """Does DBO pay (version 8; analysis/verdict/decision.py Pays): from one arm not measured; what the arm
    shows of the balance, per step (null: not in this trace), and its words."""

    measured: bool
    hidden_per_step_us: float | None
    hidden_of: Literal["round_trips", "comm"]
    handover_per_step_us: float | None
    startup_per_step_us: float | None
    yield_op_per_step_us: float | None
    imbalance_per_step_us: float | None
    text: str


# A reason as a document holds it: version 6 a ReasonBlock, versions 3 to 5 its text alone.
ReasonItem = str | ReasonBlock


class VerdictBlock(Struct):
    label: Label
    qualifier: QualifierKey | None
    headline: str | None
    findings: list[QualifierKey]
    reasons: list[ReasonItem]
    next_step: NextStepBlock | None | UnsetType = UNSET  # version 6
    pays: PaysBlock | UnsetType = UNSET  # version 8: a microbatched run's or rank's


class PhaseVerdict(Struct):
    """A phase's verdict: its own where every rank has the phase, else no label and each rank's."""

    label: Label | None
    qualifier: QualifierKey | None
    headline: str | None
    findings: list[QualifierKey]
    reasons: list[ReasonItem]
    per_rank: list[str] | UnsetType = UNSET  # only without a label of its own
    next_step: NextStepBlock | None | UnsetType = UNSET  # version 6


class TimeBlock(Struct):
    """Where the window's time went; the buckets add up to window_us (docs/analysis.md)."""

    window_us: float
    compute_us: float
    comm_exposed_us: float
    copy_us: float
    host_idle_us: float
    other_idle_us: float


class HostTestBlock(Struct):
    fraction: float | None
    basis: str


class Share(Struct):
    us: float | None
    share: float | None


class NamedShare(Struct):
    name: str
    us: float | None
    share: float | None


class HostCausesBlock(Struct):
    """What the host did while the GPU waited (docs/analysis.md, "Host time"); the causes add up to host_idle_us."""

    host_idle_us: float | None
    causes: dict[str, Share]  # by analysis.host_time.CAUSES, in its order
    launch_calls: Count
    sync_calls: Count
    named: list[NamedShare]
    cpu_ops: list[NamedShare]
    largest: str | None
    top: NamedShare | None
    line: str | None
    # version 5: the CPU operators' time by the innermost operator at each instant (beside cpu_ops,
    # which names the top-level one)
    cpu_ops_innermost: list[NamedShare] | UnsetType = UNSET


class StepCauses(Struct):
    """A step's causes, compact (one per step): the time of each cause and the largest item."""

    host_idle_us: float | None
    causes_us: dict[str, float | None]
    launch_calls: Count
    top: NamedShare | None


class SpreadBlock(Struct):
    median: float | None
    p90: float | None
    p99: float | None
    max: float | None


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
    verdict: PhaseVerdict
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
    host_frame: StepFrameBlock | UnsetType = UNSET


class StepFrameBlock(Struct):
    """A step's host idle in its most-sampled project frame (docs/analysis.md, "Host time by Python frame")."""

    project: str | None  # `module:function`; null: the stacks there had no project frame
    us: float | None
    sampled_us: float | None  # the step's host idle that had a sample


class StallBlock(Struct):
    """A step left out of the verdicts (docs/analysis.md, "Steady state and stalls")."""

    cause: StallCause
    extra_us: float | None  # its period less its phase's steady median (null: no steady step in the phase)
    compile_us: float
    capture_us: float
    compile_ranges: list[NameUs]
    phase_median_us: float | None
    text: str


class NameUs(Struct):
    name: str
    us: float


class BehindBlock(Struct):
    """Step windows that overlap: the GPU runs behind the CPU (docs/analysis.md, "Step time")."""

    steps: Count
    overlapping: Count
    windows_us: float
    wall_us: float
    median_overlap_us: float


class LaunchDelayBlock(Struct):
    """Launch call end to activity start (docs/analysis.md, "Launch-to-start delay")."""

    activities: Count
    median_us: float
    p90_us: float
    max_us: float
    min_us: float
    first_us: float
    queued_in_host_idle_us: float
    clock_offset_suspect: bool


class ClocksBlock(Struct):
    """The GPU clock's offsets from the CPU's the events allow (docs/analysis.md, "The GPU's clock")."""

    lower_us: float | None  # from blocking calls; null: none bounds it
    upper_us: float | None  # from launches; null: no launch call in the trace
    blocking_calls: Count
    launched: Count
    shift_us: float  # subtracted from every GPU timestamp: the skew proven (0: none)
    host_idle_low_us: float | None  # the window's host idle at the ends of the offsets allowed (null: not wide)
    host_idle_high_us: float | None
    lag_first_us: float | None  # launch call start to activity start, the first launched activity's
    lag_last_us: float | None
    gpu_behind: bool  # the lag grew: a queue building, not a constant offset


class IncompleteBlock(Struct):
    """The trace lacks GPU work: its host idle is an upper bound (docs/analysis.md, "Incomplete traces")."""

    sampled: bool
    sliced: bool
    launch_coverage: float  # GPU activities whose launch call is in the trace
    correlation_coverage: float | None  # API calls held / the span of their correlation ids
    head_wait_us: float | None
    host_idle_upper_bound: bool


class RoundTripsBlock(Struct):
    source: str
    per_step: float | None
    layers: Number | None
    per_layer: float | None
    step_us: float | None
    per_round_trip_us: float | None
    comm_per_round_trip_us: float | None
    compute_per_round_trip_us: float | None
    ratio: float | None
    criterion_met: bool | None
    microbatched: bool
    # version 5, where the ranks' collectives were matched: comm per round trip apart (medians over steps)
    wait_per_round_trip_us: float | None | UnsetType = UNSET
    transfer_per_round_trip_us: float | None | UnsetType = UNSET


class RoundTripParts(Struct):
    """Medians over the round trips matched to the FFN's kernels (docs/analysis.md)."""

    matched: Int  # round trips matched to the FFN's receive and send
    transfer_us: float | None
    ffn_us: float | None  # the FFN's compute and queueing
    wait_us: float | None  # the attention's receive kernel before the FFN began sending back
    # version 7: of transfer_us, the FFN's answer waiting for the attention's receive to begin
    late_us: float | None | UnsetType = UNSET
    ffn_compute_us: float | None = None  # of ffn_us, the FFN's compute kernels
    ffn_queue_us: float | None = None  # of ffn_us, the rest: the FFN queueing or waiting


class DisaggregatedBlock(Struct):
    """An AFD attention rank's round trips: a data-plane send's start to its receive's end."""

    round_trips: Int
    steps: Int
    per_step: float
    per_step_kernels: float  # data-plane SendRecv kernels per step (2 per round trip)
    per_layer: float | None
    control_kernels: Int  # SendRecv kernels off the compute stream (control plane)
    unpaired: Int
    microbatched: bool
    microbatches_told: dict[str, Int]  # steps by how their microbatches were told apart
    median_us: float
    # of the round trips' time less the host's lag, the other microbatch's compute: (hidden_us -
    # lag_hidden_us) / (total_us - host_lag_total_us) from version 8; hidden_us / total_us before
    hidden_share: float | None
    hidden_us: float
    total_us: float
    compute_per_microbatch_us: float | None
    median_exposed_us: float  # round trip less the host's lag (version 8) and the other microbatch's compute in it
    criterion_ratio: float | None
    criterion_met: bool | None
    receive_kernel_us: float  # median receive kernel: the attention's wait and the return transfer
    parts: RoundTripParts | None  # with the FFN's trace
    # version 8: the host's lag, the send kernel's end to the receive kernel's launch call (median and
    # summed), the other microbatch's compute inside it, and the CPU op that ran through it (its share)
    host_lag_median_us: float | UnsetType = UNSET
    host_lag_total_us: float | UnsetType = UNSET
    lag_hidden_us: float | UnsetType = UNSET
    lag_op: NamedShare | None | UnsetType = UNSET


class TimeSlicingBlock(Struct):
    """The attention's round trips against their transfer (docs/analysis.md, "GPU sharing")."""

    sliced: bool  # the roles' CUDA contexts time-slice one GPU (the rule held, MPS not seen answering)
    round_trip_us: float  # medians over the round trips
    receive_us: float
    send_us: float
    ffn_compute_us: float | None  # the FFN's compute inside the round trip, with its trace
    ratio: float | None  # (receive - FFN compute) / send
    text: str | None  # the report's line where sliced


class PairBlock(Struct):
    """Both roles on the attention's clock, over its steps (docs/analysis.md, "Both roles")."""

    steps: Count
    ffn_compute_per_step_us: float | None
    ffn_compute_per_round_trip_us: float | None
    ffn_queue_per_round_trip_us: float | None
    round_trips_per_step: float | None
    attention_busy: float | None  # shares of the steps' time each side's GPU work ran
    ffn_busy: float | None
    both_busy: float | None


class RolesBlock(Struct):
    roles: list[str]
    shared_gpu: bool | None
    mps: bool | None  # verified: the MPS control daemon answered (true), did not (false), not known (null)
    ffn_window_restricted: bool
    shared_from: str | None = None  # where shared_gpu came from
    mps_daemon: str | None = None  # answered / not running / unknown (the manifest's verified field)
    time_slicing: TimeSlicingBlock | None = None
    pair: PairBlock | None = None  # with both roles' traces


class ContentionKernel(Struct):
    name: str
    kind: str
    alone: Count
    overlapped: Count
    median_alone_us: float | None
    median_overlapped_us: float | None
    slowdown: float | None


class ContentionBlock(Struct):
    compute_slowdown: float | None
    comm_slowdown: float | None
    compute_kernels_overlapped: Count | None
    comm_kernels_overlapped: Count | None
    serial_estimate_us: float | None
    busy_us: float | None
    saved_us: float | None
    comm_transfer_slowdown: float | None  # version 3: comm_slowdown less the waits for peers
    top: list[ContentionKernel]


class ExposedCommReasons(Struct):
    """Exposed comm time, and its share by reason (analysis.exposure.REASONS, in that order, as `<reason>_us`)."""

    exposed_us: float | None
    late_record_us: float | None
    crowded_us: float | None
    held_us: float | None
    host_us: float | None
    waiting_us: float | None
    nothing_us: float | None
    unknown_us: float | None
    peer_us: float | None

    def by_reason(self) -> Iterator[tuple[str, float | None]]:
        """(reason, us) for every reason, in the document's order."""
        for name in self.__struct_fields__[1:]:
            yield name[: -len("_us")], getattr(self, name)


class HeldCause(Struct):
    kernels: Count
    delay_us: float | None


class Holder(Struct):
    name: str
    kernels: Count
    delay_us: float | None


class LateRecordExample(Struct):
    record_call: str
    thread: Int
    ubatch: Int
    after_holder_launch_us: float | None
    holder: str
    comm_kernel: str
    delay_us: float | None


class HeldBackBlock(Struct):
    comm_kernels_examined: Count
    kernels: Count
    delay_us: float | None
    median_delay_us: float | None
    by_cause: dict[str, HeldCause]
    holders: list[Holder]
    late_record_example: LateRecordExample | None

    def __post_init__(self) -> None:
        if LATE_RECORD in self.by_cause and self.late_record_example is None:
            raise ValueError("late_record_example is missing (a late record is shown with its example)")


class CommOperation(Struct):
    ubatch: Int
    index: Int
    steps: Count
    median_us: float | None
    hidden_fraction: float | None
    median_exposed_us: float | None
    reason: Reason | None
    layer: Count | None | UnsetType = UNSET  # version 5: its layer and role, where the layers tell them
    role: Role | None | UnsetType = UNSET
    exposed_fraction: float | None | UnsetType = UNSET  # version 8: of its time (all steps), not under compute


class NameCount(Struct):
    name: str
    count: Count


class NameCountTotal(Struct):
    name: str
    count: Count
    total_us: float | None


class KernelRow(Struct):
    name: str
    count: Count
    total_us: float | None
    mean_us: float | None
    median_us: float | None
    min_us: float | None
    max_us: float | None
    share: float | None


class KernelSummaryBlock(Struct):
    kernels: Count
    names: Count
    total_us: float | None
    rows: list[KernelRow]


class CpuRange(Struct):
    name: str
    kind: str
    count: Count
    total_us: float | None
    host_idle_us: float | None
    share: float | None


class Attribution(Struct, kw_only=True):
    # Version 3 only (a review archive's): repeats of the rank's microbatch_source and steps_source,
    # kept as read so that its --json is the stored document; never written since version 4.
    ubatch_source: str | UnsetType = UNSET
    step_source: str | UnsetType = UNSET
    profile_all_threads: bool | None


class MostlyAt(Struct):
    ubatch: Int
    index: Int
    wait_us: float | None


class PeerWait(Struct):
    """A rank's waits for its peers in brief, for a headline (analysis/cross_rank/collective_waits.py)."""

    wait_us: float | None
    wait_share: float | None
    transfer_us: float | None
    waited_mostly_for: Int | None
    mostly_at: MostlyAt | None
    significant: bool
    # version 5: its comm time apart into waiting and transfer, each hidden (under its compute) or exposed
    hidden_wait_us: float | None | UnsetType = UNSET
    hidden_transfer_us: float | None | UnsetType = UNSET
    hidden_share_of_transfer: float | None | UnsetType = UNSET  # hidden transfer / transfer: what overlap hid of real comm
    exposed_wait_us: float | None | UnsetType = UNSET
    exposed_transfer_us: float | None | UnsetType = UNSET


class StackRowBlock(Struct):
    """Host idle of one cause spent in one sampled Python stack shape (docs/analysis.md, "Host time by Python frame")."""

    cause: str
    project: str | None  # the innermost project frame, `module:function`
    library: str | None  # the library call it made (the outermost library frame below it)
    inner: str | None  # the innermost library frame
    us: float | None
    share: float | None  # of the host idle measured


class StackClockBlock(Struct):
    method: str  # "anchors" or "start"
    offset_us: float | None  # trace us = py-spy us + offset_us
    accuracy_us: float | None
    anchors: str | None
    edges: Count
    overlap: float | None
    startup_us: float | None


class HostStacksBlock(Struct):
    """The host-caused GPU idle by sampled Python frame over a window (the rank's, a phase's)."""

    samples: str
    rate_hz: float | None
    clock: StackClockBlock
    host_idle_us: float | None
    sampled_us: float | None
    untraced_us: float | None  # host_time's untraced bucket
    unexplained_us: float | None  # untraced and without a sample either
    by_cause_us: dict[str, float | None]
    rows: list[StackRowBlock]
    line: str


class RankStacksBlock(Struct):
    window: HostStacksBlock
    phases: dict[str, HostStacksBlock]


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
    comm_operations: list[CommOperation]
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
    # version 5: DBO's own cost, the split (render/ledger.py); absent from a version 3 or 4 document
    dbo_ledger: LedgerBlock | None | UnsetType = UNSET
    comm_layers: list[LayerOpsRow] | UnsetType = UNSET  # version 5: comm operations per layer, alike grouped
    sm_evidence: SmEvidenceBlock | None | UnsetType = UNSET  # version 5: what held-back comm's holder occupied
    clocks: ClocksBlock | None | UnsetType = UNSET  # within version 7: the GPU clock's offsets the events allow
    incomplete: IncompleteBlock | None | UnsetType = UNSET  # within version 7: the trace lacks GPU work (null: whole)


class OptionsBlock(Struct):
    comm_kernels: list[str]
    comm_streams: list[Int]
    ubatch_patterns: list[str]
    layers: Number | None
    step_marker: str | None
    comm_kernels_only: bool


class CrossStep(Struct):
    position: Int
    skew_us: float
    last_rank: Int
    starts_us: dict[str, float]
    straggler: bool  # version 3


class AlignmentBlock(Struct):
    method: str | None
    per_rank: dict[str, str]
    accuracy_us: float | None
    offset_us: dict[str, float]
    note: str | None


class ByOp(Struct):
    ubatch: Int
    index: Int
    label: str
    wait_us: float | None


class RankWaitsBlock(Struct):
    comm_us: float | None
    matched_us: float | None
    wait_us: float | None
    wait_share: float | None
    transfer_us: float | None
    waited_for_us: dict[str, float | None]
    by_op: list[ByOp]
    by_step_us: dict[str, float | None]
    last_ops: Count
    caused_us: float | None


class StepWaits(Struct):
    step: Int
    operations: Count
    straggler: Int | None
    max_skew_us: float | None
    wait_us: dict[str, float | None]
    last_ops: dict[str, Count]
    caused_us: dict[str, float | None]


class UbatchWaits(Struct):
    ubatch: Int
    operations: Count
    straggler: Int | None
    max_skew_us: float | None
    wait_us: dict[str, float | None]
    last_ops: dict[str, Count]
    caused_us: dict[str, float | None]


class HeldBackMost(Struct):
    rank: Int
    ubatch: Int
    caused_us: float | None
    last_ops: Count
    operations: Count


class OperationRank(Struct):
    arrival_us: float  # from zero_us
    kernel_us: float | None
    wait_us: float | None
    transfer_us: float | None
    ubatch: Int
    step: Int
    op_index: Int


class OperationWaits(Struct):
    channel: str
    position: Int
    last_rank: Int
    skew_us: float | None
    ranks: dict[str, OperationRank]


class WaitsBlock(Struct):
    threshold_us: float
    zero_us: float  # arrivals are microseconds after this instant of the shared clock
    median_end_spread_us: float | None
    held_back_most: HeldBackMost | None
    ranks: dict[str, RankWaitsBlock]
    steps: list[StepWaits]
    ubatches: list[UbatchWaits]
    operations: list[OperationWaits]


class CrossRankBlock(Struct):
    ranks: list[Int]
    summary: str
    median_skew_us: float
    max_skew_us: float
    last_counts: dict[str, Count]
    exposed_comm_us: dict[str, float]
    steps: list[CrossStep]
    notes: list[str]
    # version 3
    alignment: AlignmentBlock | None
    straggler_threshold_us: float
    median_step_us: float | None
    late_counts: dict[str, Count]
    lines: list[str]
    waits: WaitsBlock | None


class ProfilerBlock(Struct):
    """The profiler's own cost (analysis/compare/unprofiled.py): the recording's timed repeats, the profiler
    off, against its profiled steps."""

    profiled_period_us: float | None  # the median start-to-start period of the steady steps below
    periods: Count | None  # how many periods that median is of
    steps_of: str | None  # "decode", or "all" where no step is a decode step
    unprofiled_tpot_ms: float | None  # the mean over the repeats of each one's median TPOT
    repeats: Count
    timed_by: str
    overhead: float | None  # profiled period / the unprofiled step (basis) - 1; null: not comparable
    large: bool  # overhead >= OVERHEAD_LARGE: the host time reported may be partly the profiler's
    # version 8: the unprofiled step the overhead is against (ITL where the repeats have it, else TPOT),
    # the ITL median, and whether the profiled period fell below it (not comparable: no overhead given)
    basis: Literal["ITL", "TPOT"] | None | UnsetType = UNSET
    unprofiled_itl_ms: float | None | UnsetType = UNSET
    below: bool | UnsetType = UNSET
    tpot_prefills: bool | UnsetType = UNSET  # no ITL, and the load's prefills interleave (or may): no overhead


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


# ---- building it from a Report ----------------------------------------------------------------------


def round_trips_block(rt: RoundTrips | None) -> RoundTripsBlock | None:
    if rt is None:
        return None
    return RoundTripsBlock(
        source=rt.source,
        per_step=_r(rt.per_step),
        layers=rt.layers,
        per_layer=_r(rt.per_layer),
        step_us=_r(rt.step_us),
        per_round_trip_us=_r(rt.per_round_trip_us),
        comm_per_round_trip_us=_r(rt.comm_per_round_trip_us),
        compute_per_round_trip_us=_r(rt.compute_per_round_trip_us),
        ratio=_r(rt.ratio, 4),
        criterion_met=rt.criterion_met,
        microbatched=rt.microbatched,
        wait_per_round_trip_us=_r(rt.wait_per_round_trip_us),
        transfer_per_round_trip_us=_r(rt.transfer_per_round_trip_us),
    )


def disaggregated_block(a: AfdRoundTrips | None) -> DisaggregatedBlock | None:
    if a is None:
        return None
    parts = None
    if a.parts is not None:
        parts = RoundTripParts(
            matched=a.ffn_matched,
            transfer_us=_r(a.median_part("transfer_us")),
            ffn_us=_r(a.median_part("ffn_us")),
            wait_us=_r(a.median_part("wait_us")),
            late_us=_r(a.median_part("late_us")),
            ffn_compute_us=_r(a.median_part("compute_us")),
            ffn_queue_us=_r(a.median_part("queue_us")),
        )
    return DisaggregatedBlock(
        round_trips=len(a.rows),
        steps=a.steps,
        per_step=round(a.per_step, 3),
        per_step_kernels=round(a.per_step_kernels, 3),
        per_layer=_r(a.per_layer),
        control_kernels=a.control_kernels,
        unpaired=a.unpaired,
        microbatched=a.microbatched,
        microbatches_told=dict(a.microbatches_told),
        median_us=round(a.median_us, 3),
        hidden_share=_r(a.hidden_share, 4),
        hidden_us=round(a.hidden_us, 3),
        total_us=round(a.total_us, 3),
        compute_per_microbatch_us=_r(a.compute_per_microbatch_us),
        median_exposed_us=round(a.median_exposed_us, 3),
        criterion_ratio=_r(a.criterion_ratio, 4),
        criterion_met=a.criterion_met,
        receive_kernel_us=round(a.median_receive_us, 3),
        parts=parts,
        host_lag_median_us=round(a.host_lag_median_us, 3),
        host_lag_total_us=round(a.host_lag_total_us, 3),
        lag_hidden_us=round(a.lag_hidden_us, 3),
        lag_op=None if a.lag_op is None else NamedShare(name=a.lag_op[0], us=None, share=_r(a.lag_op[1], 4)),
    )


def profiler_block(u: Unprofiled | None) -> ProfilerBlock | UnsetType:
    if u is None:
        return UNSET
    return ProfilerBlock(
        profiled_period_us=None if u.profiled_step_ms is None else round(u.profiled_step_ms * 1000.0, 3),
        periods=u.profiled_periods,
        steps_of=u.profiled_phase,
        unprofiled_tpot_ms=_r(u.tpot_median_ms, 4),
        repeats=u.repeats,
        timed_by=u.tool,
        overhead=_r(u.profiler_overhead, 4),
        large=u.overhead_large,
        basis=cast("Literal['ITL', 'TPOT'] | None", u.overhead_basis),
        unprofiled_itl_ms=_r(u.itl_median_ms, 4),
        below=u.overhead_below,
        tpot_prefills=u.tpot_prefills,
    )


def roles_block(info: RolesInfo | None) -> RolesBlock | None:
    if info is None:
        return None
    ts, p = info.time_slicing, info.pair
    return RolesBlock(
        list(info.roles),
        info.shared_gpu,
        info.mps,
        info.ffn_window_restricted,
        shared_from=info.sharing.shared_from if info.sharing is not None else None,
        mps_daemon=info.sharing.mps_daemon if info.sharing is not None else None,
        time_slicing=None if ts is None else TimeSlicingBlock(
            ts.sliced, round(ts.round_trip_us, 3), round(ts.receive_us, 3), round(ts.send_us, 3), _r(ts.ffn_compute_us),
            _r(ts.ratio, 2), time_slicing_text(ts),
        ),
        pair=None if p is None else PairBlock(
            p.steps, _r(p.ffn_compute_per_step_us), _r(p.ffn_compute_per_round_trip_us), _r(p.ffn_queue_per_round_trip_us),
            _r(p.round_trips_per_step), _r(p.attention_busy, 4), _r(p.ffn_busy, 4), _r(p.both_busy, 4),
        ),
    )  # fmt: skip


def time_block(b: TimeBuckets) -> TimeBlock:
    return TimeBlock(
        window_us=round(float(b.window_us), 3),
        compute_us=round(float(b.compute_us), 3),
        comm_exposed_us=round(float(b.comm_exposed_us), 3),
        copy_us=round(float(b.copy_us), 3),
        host_idle_us=round(float(b.host_idle_us), 3),
        other_idle_us=round(float(b.other_idle_us), 3),
    )


def contention_block(x: Contention | None, transfer_slowdown: float | None = None) -> ContentionBlock | None:
    if x is None:
        return None
    return ContentionBlock(
        compute_slowdown=_r(x.compute_slowdown, 4),
        comm_slowdown=_r(x.comm_slowdown, 4),
        compute_kernels_overlapped=x.compute_overlapped,
        comm_kernels_overlapped=x.comm_overlapped,
        serial_estimate_us=_r(x.serial_estimate_us),
        busy_us=_r(x.busy_us),
        saved_us=_r(x.saved_us),
        comm_transfer_slowdown=_r(transfer_slowdown, 4),
        top=[
            ContentionKernel(
                name=k.name,
                kind=k.kind,
                alone=k.alone,
                overlapped=k.overlapped,
                median_alone_us=_r(k.median_alone_us),
                median_overlapped_us=_r(k.median_overlapped_us),
                slowdown=_r(k.slowdown, 4),
            )
            for k in x.top
        ],
    )


def exposure_block(x: Exposure | None) -> ExposedCommReasons | None:
    if x is None:
        return None
    return ExposedCommReasons(exposed_us=_r(x.exposed_us), **{f"{reason}_us": _r(t) for reason, t in x.by_reason_us.items()})


def held_back_block(x: HeldSummary | None) -> HeldBackBlock | None:
    if x is None:
        return None
    late = x.late_record
    return HeldBackBlock(
        comm_kernels_examined=x.comm_kernels,
        kernels=x.kernels,
        delay_us=_r(x.delay_us),
        median_delay_us=_r(x.median_delay_us),
        by_cause={cause: HeldCause(kernels=n, delay_us=_r(us)) for cause, (n, us) in x.by_cause.items()},
        holders=[Holder(name=name, kernels=n, delay_us=_r(us)) for name, n, us in x.holders],
        late_record_example=None
        if late is None
        else LateRecordExample(
            record_call=late.record_call,
            thread=late.thread,
            ubatch=late.ubatch,
            after_holder_launch_us=_r(late.after_holder_launch_us),
            holder=late.holder,
            comm_kernel=late.comm_kernel,
            delay_us=_r(late.delay_us),
        ),
    )


def host_causes_block(c: HostCauses | None, line: str | None = None) -> HostCausesBlock | None:
    if c is None:
        return None

    def share(us: float) -> float | None:
        return _r(c.share_of(us), 4)

    top = c.top
    largest = c.largest
    return HostCausesBlock(
        host_idle_us=_r(c.host_idle_us),
        causes={key: Share(us=_r(c.us(k)), share=_r(c.share(k), 4)) for k, key in enumerate(CAUSES)},
        launch_calls=c.launch_calls,
        sync_calls=c.sync_calls,
        named=[NamedShare(name=n, us=_r(t), share=share(t)) for n, t in c.named],
        cpu_ops=[NamedShare(name=n, us=_r(t), share=share(t)) for n, t in c.cpu_ops],
        largest=None if largest is None else CAUSES[largest],
        top=None if top is None else NamedShare(name=top_item_name(top), us=_r(top.us), share=share(top.us)),
        line=line,
        cpu_ops_innermost=[NamedShare(name=n, us=_r(t), share=share(t)) for n, t in c.cpu_ops_inner],
    )


def host_stacks_block(h: HostStacks, head: str) -> HostStacksBlock:
    c = h.clock
    return HostStacksBlock(
        samples=h.samples,
        rate_hz=h.rate_hz,
        clock=StackClockBlock(
            method=c.method, offset_us=_r(c.offset_us), accuracy_us=_r(c.accuracy_us), anchors=c.anchors, edges=c.edges,
            overlap=_r(c.overlap, 4), startup_us=_r(c.startup_us),
        ),  # fmt: skip
        host_idle_us=_r(h.host_idle_us),
        sampled_us=_r(h.sampled_us),
        untraced_us=_r(h.unexplained_before_us),
        unexplained_us=_r(h.unexplained_us),
        by_cause_us={k: _r(v) for k, v in h.by_cause_us.items()},
        rows=[
            StackRowBlock(cause=r.cause, project=r.project, library=r.library, inner=r.inner, us=_r(r.us), share=_r(r.share, 4))
            for r in h.rows
        ],
        line=stacks_line(h, head),
    )


def rank_stacks_block(s: RankStacks | None, rank: int) -> RankStacksBlock | UnsetType:
    if s is None:
        return UNSET
    return RankStacksBlock(
        window=host_stacks_block(s.window, f"rank {rank}"),
        phases={p: host_stacks_block(h, f"rank {rank} {p}") for p, h in s.phases.items()},
    )


def kernel_summary_block(k: KernelSummary | None) -> KernelSummaryBlock | None:
    if k is None:
        return None
    return KernelSummaryBlock(
        kernels=k.kernels,
        names=k.names,
        total_us=_r(k.total_us),
        rows=[
            KernelRow(
                name=row.name,
                count=row.count,
                total_us=_r(row.total_us),
                mean_us=_r(row.mean_us),
                median_us=_r(row.median_us),
                min_us=_r(row.min_us),
                max_us=_r(row.max_us),
                share=_r(row.share, 4),
            )
            for row in k.rows
        ],
    )


def cpu_range_block(rows: tuple[CpuRangeRow, ...]) -> list[CpuRange]:
    return [
        CpuRange(
            name=row.name,
            kind=row.kind,
            count=row.count,
            total_us=_r(row.total_us),
            host_idle_us=_r(row.host_idle_us),
            share=_r(row.share, 4),
        )
        for row in rows
    ]


def spread_block(x: Spread | None) -> SpreadBlock | None:
    if x is None:
        return None
    return SpreadBlock(median=_r(x.median_us), p90=_r(x.p90_us), p99=_r(x.p99_us), max=_r(x.max_us))


def step_causes_block(c: HostCauses | None) -> StepCauses | None:
    if c is None:
        return None
    top = c.top
    return StepCauses(
        host_idle_us=_r(c.host_idle_us),
        causes_us={key: _r(c.by_cause_us[k]) for k, key in enumerate(CAUSES)},
        launch_calls=c.launch_calls,
        top=None if top is None else NamedShare(name=top_item_name(top), us=_r(top.us), share=_r(c.share_of(top.us), 4)),
    )


def _vocabulary(v: Verdict) -> tuple[Label, QualifierKey | None, list[QualifierKey]]:
    """The verdict's label, qualifier and findings as the document types them: analysis.verdict's
    LABELS and QUALIFIERS (a test keeps them equal)."""
    qualifier = None if v.qualifier is None else v.qualifier.key
    return LABEL_VALUE[v.label], cast("QualifierKey | None", qualifier), cast("list[QualifierKey]", list(v.findings))


def _reasons(v: Verdict) -> list[ReasonItem]:
    return [ReasonBlock(kind=cast(ReasonKind, r.kind), borderline=r.borderline, text=reason_text(r)) for r in v.reasons]


def _next_step(v: Verdict) -> NextStepBlock | None:
    n = v.next_step
    return None if n is None else NextStepBlock(kind=cast(NextStepKind, n.kind), text=next_step_text(n))


def _pays(v: Verdict) -> PaysBlock | UnsetType:
    p = v.pays
    if p is None:
        return UNSET
    return PaysBlock(
        measured=p.measured, hidden_per_step_us=_r(p.hidden_per_step_us), hidden_of=cast("Literal['round_trips', 'comm']", p.hidden_of),
        handover_per_step_us=_r(p.handover_per_step_us), startup_per_step_us=_r(p.startup_per_step_us),
        yield_op_per_step_us=_r(p.yield_op_per_step_us), imbalance_per_step_us=_r(p.imbalance_per_step_us),
        text=pays_text(p),
    )  # fmt: skip


def verdict_block(v: Verdict) -> VerdictBlock:
    label, qualifier, findings = _vocabulary(v)
    return VerdictBlock(
        label=label, qualifier=qualifier, headline=headline(v), findings=findings, reasons=_reasons(v), next_step=_next_step(v),
        pays=_pays(v),
    )  # fmt: skip


def phase_verdict_block(p: PhaseReport) -> PhaseVerdict:
    v = p.verdict
    if v is None:
        return PhaseVerdict(
            label=None, qualifier=None, headline=None, findings=[], reasons=[], per_rank=[label_text(label) for label in p.per_rank or []], next_step=None
        )
    label, qualifier, findings = _vocabulary(v)
    return PhaseVerdict(
        label=label, qualifier=qualifier, headline=headline(v), findings=findings, reasons=_reasons(v), next_step=_next_step(v)
    )


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
        host_frame=UNSET if frame is None else StepFrameBlock(frame.project, _r(frame.us), _r(frame.sampled_us)),
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
    return StallBlock(
        cause=cast(StallCause, st.cause),
        extra_us=_r(st.extra_us),
        compile_us=_r(st.compile_us) or 0.0,
        capture_us=_r(st.capture_us) or 0.0,
        compile_ranges=[NameUs(name=n, us=_r(u) or 0.0) for n, u in st.compile_ranges],
        phase_median_us=_r(st.phase_median_us),
        text=stall_text(st),
    )


def clocks_block(b: ClockBounds | None) -> ClocksBlock | None:
    if b is None:
        return None
    return ClocksBlock(
        lower_us=_r(b.lower_us), upper_us=_r(b.upper_us), blocking_calls=b.blocking_calls, launched=b.launched,
        shift_us=_r(b.shift_us) or 0.0, host_idle_low_us=_r(b.host_idle_low_us), host_idle_high_us=_r(b.host_idle_high_us),
        lag_first_us=_r(b.lag_first_us), lag_last_us=_r(b.lag_last_us), gpu_behind=b.lag_grows,
    )  # fmt: skip


def incomplete_block(x: Incomplete | None) -> IncompleteBlock | None:
    if x is None:
        return None
    return IncompleteBlock(
        sampled=x.sampled, sliced=x.sliced, launch_coverage=round(x.launch_coverage, 4),
        correlation_coverage=None if x.correlation_coverage is None else round(x.correlation_coverage, 4),
        head_wait_us=_r(x.head_wait_us), host_idle_upper_bound=True,
    )  # fmt: skip


def launch_delay_block(x: LaunchDelay | None) -> LaunchDelayBlock | None:
    if x is None:
        return None
    return LaunchDelayBlock(
        activities=x.activities,
        median_us=_r(x.median_us) or 0.0,
        p90_us=_r(x.p90_us) or 0.0,
        max_us=_r(x.max_us) or 0.0,
        min_us=_r(x.min_us) or 0.0,
        first_us=_r(x.first_us) or 0.0,
        queued_in_host_idle_us=_r(x.queued_in_host_idle_us) or 0.0,
        clock_offset_suspect=x.clock_offset_suspect,
    )


def behind_block(b: Behind | None) -> BehindBlock | None:
    if b is None:
        return None
    return BehindBlock(
        steps=b.steps,
        overlapping=b.overlapping,
        windows_us=_r(b.windows_us) or 0.0,
        wall_us=_r(b.wall_us) or 0.0,
        median_overlap_us=_r(b.median_overlap_us) or 0.0,
    )


def peer_wait_block(r: RankWaits, view: CrossRank, split: WaitSplit | None = None) -> PeerWait:
    top, mostly = r.most_waited_for, r.most_waited_at
    return PeerWait(
        hidden_wait_us=None if split is None else _r(split.hidden_wait_us),
        hidden_transfer_us=None if split is None else _r(split.hidden_transfer_us),
        hidden_share_of_transfer=None if split is None else _r(split.hidden_share_of_transfer, 4),
        exposed_wait_us=None if split is None else _r(split.exposed_wait_us),
        exposed_transfer_us=None if split is None else _r(split.exposed_transfer_us),
        wait_us=_r(r.wait_us),
        wait_share=_r(r.wait_share, 4),
        transfer_us=_r(r.transfer_us),
        waited_mostly_for=None if top is None else top[0],
        mostly_at=None if mostly is None else MostlyAt(ubatch=mostly[0][0], index=mostly[0][1], wait_us=_r(mostly[1])),
        significant=r.wait_us > view.threshold_us,
    )


def rank_block(r: RankReport, cross_rank: CrossRank | None = None, lazy_steps: bool = False) -> RankBlock:
    """lazy_steps: its step blocks built when read (build_document)."""
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
        comm_operations=[
            CommOperation(
                ubatch=o.ubatch,
                index=o.index,
                steps=o.steps,
                median_us=_r(o.median_us),
                hidden_fraction=_r(o.hidden_fraction, 4),
                median_exposed_us=_r(o.median_exposed_us),
                reason=cast("Reason | None", o.reason),  # one of analysis.exposure.REASONS
                layer=o.layer,
                role=cast("Role | None", o.role),
                exposed_fraction=_r(o.exposed_fraction, 4),
            )
            for o in r.operations
        ],
        comm_kernel_names=[NameCount(name=n, count=k) for n, k in r.comm_kernels],
        top_compute_kernels=[NameCountTotal(name=n, count=k, total_us=_r(t)) for n, k, t in r.top_compute_kernels],
        kernel_summary=kernel_summary_block(r.kernel_summary),
        cpu_range_summary=cpu_range_block(r.cpu_ranges),
        round_trips=round_trips_block(r.round_trips),
        steps=step_blocks(r, lazy_steps),
        verdict=verdict_block(r.verdict),
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


def step_blocks(r: RankReport, lazy: bool) -> list[StepBlock]:
    """A rank's step blocks, each numbered from 1; lazy: each built when read (a LazyList)."""
    if not lazy:
        return [step_block(s, r.rank, i + 1) for i, s in enumerate(r.steps)]
    steps = r.steps
    return cast("list[StepBlock]", LazyList(len(steps), lambda i: step_block(steps[i], r.rank, i + 1)))


def _sources(values: list[str]) -> str:
    unique = list(dict.fromkeys(values))
    return unique[0] if len(unique) == 1 else "; ".join(f"rank {i}: {v}" for i, v in enumerate(values))


def build_document(report: Report, lazy_steps: bool = False) -> ReportDocument:
    """lazy_steps: the per-step blocks (the ranks' and the run's) are built when a renderer reads
    them: the terminal shows 20 and the Markdown 200 of a run's 100,000. Such a document cannot be
    encoded (--json and --html build theirs whole)."""
    m = report.total
    ranks = [rank_block(r, report.cross_rank, lazy_steps) for r in report.ranks]
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
        verdict=verdict_block(report.verdict),
        options=OptionsBlock(
            comm_kernels=list(report.options.comm_patterns),
            comm_streams=list(report.options.comm_streams),
            ubatch_patterns=list(report.options.ubatch_patterns),
            layers=report.options.layers,
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
    )


def _keyed(values: dict[int, Any], digits: int | None = None) -> dict[str, Any]:
    """A dict by rank (or step) as the JSON holds it: keys as strings, in order, values rounded."""
    return {str(k): v if digits is None else round(v, digits) for k, v in sorted(values.items())}


def cross_rank_block(view: CrossRank | None) -> CrossRankBlock | None:
    if view is None:
        return None
    return CrossRankBlock(
        ranks=view.ranks,
        summary=cross_rank_summary(view),
        median_skew_us=round(view.median_skew_us, 3),
        max_skew_us=round(view.max_skew_us, 3),
        last_counts=_keyed(view.last_counts),
        exposed_comm_us=_keyed(view.exposed_comm_us, 3),
        steps=[
            CrossStep(
                position=s.position,
                skew_us=round(s.skew_us, 3),
                last_rank=s.last_rank,
                starts_us=_keyed(s.starts_us, 3),
                straggler=s.straggler,
            )
            for s in view.steps
        ],
        notes=[cross_note_text(n) for n in view.notes],
        alignment=alignment_block(view.alignment),
        straggler_threshold_us=round(view.threshold_us, 3),
        median_step_us=None if view.median_step_us is None else round(view.median_step_us, 3),
        late_counts=_keyed(view.late_counts),
        lines=wait_lines(view),
        waits=waits_block(view.waits, view.layers),
    )


def alignment_block(a: Alignment | None) -> AlignmentBlock | None:
    if a is None:
        return None
    return AlignmentBlock(
        method=a.method,
        per_rank=_keyed(a.per_rank),
        accuracy_us=a.accuracy_us,
        offset_us=_keyed(a.offset_us, 3),
        note=a.note,
    )


def _rounded(values: dict[int, float]) -> dict[str, float | None]:
    return {str(k): _r(v) for k, v in sorted(values.items())}


def rank_waits_block(r: RankWaits, layers: int | None = None) -> RankWaitsBlock:
    return RankWaitsBlock(
        comm_us=_r(r.comm_us),
        matched_us=_r(r.matched_us),
        wait_us=_r(r.wait_us),
        wait_share=_r(r.wait_share, 4),
        transfer_us=_r(r.transfer_us),
        waited_for_us=_rounded(r.waited_for_us),
        by_op=[
            ByOp(ubatch=ub, index=k, label=op_label(ub, k, layers, r.ops_per_ubatch), wait_us=_r(us))
            for (ub, k), us in sorted(r.by_op_us.items(), key=lambda kv: (-kv[1], kv[0]))
        ],
        by_step_us=_rounded(r.by_step_us),
        last_ops=r.last_ops,
        caused_us=_r(r.caused_us),
    )


G = TypeVar("G", StepWaits, UbatchWaits)


def group_waits_block(cls: type[G], g: GroupWaits) -> G:
    return cls(
        g.key,
        operations=g.ops,
        straggler=g.straggler,
        max_skew_us=_r(g.max_skew_us),
        wait_us=_rounded(g.wait_us),
        last_ops=_keyed(g.last_ops),
        caused_us=_rounded(g.caused_us),
    )


def held_back_most_block(most: tuple[int, int, float, int, int] | None) -> HeldBackMost | None:
    if most is None:
        return None
    rank, ubatch, us, last_ops, ops = most
    return HeldBackMost(rank=rank, ubatch=ubatch, caused_us=_r(us), last_ops=last_ops, operations=ops)


def operation_waits_block(o: MatchedOp) -> OperationWaits:
    return OperationWaits(
        channel=o.channel,
        position=o.position,
        last_rank=o.last_rank,
        skew_us=_r(o.skew_us),
        ranks={
            str(r): OperationRank(
                arrival_us=round(o.arrival_us[i], 3),
                kernel_us=_r(o.kernel_us[i]),
                wait_us=_r(o.wait_us[i]),
                transfer_us=_r(o.kernel_us[i] - o.wait_us[i]),
                ubatch=o.ubatch[i],
                step=o.step[i],
                op_index=o.op_index[i],
            )
            for i, r in enumerate(o.ranks)
        },
    )


def waits_block(w: PeerWaits | None, layers: int | None = None) -> WaitsBlock | None:
    if w is None:
        return None
    return WaitsBlock(
        threshold_us=round(w.threshold_us, 3),
        zero_us=w.zero_us,
        median_end_spread_us=_r(w.median_end_spread_us),
        held_back_most=held_back_most_block(w.held_back_most),
        ranks={str(k): rank_waits_block(r, layers) for k, r in sorted(w.ranks.items())},
        steps=[group_waits_block(StepWaits, g) for g in w.steps],
        ubatches=[group_waits_block(UbatchWaits, g) for g in w.ubatches],
        operations=[operation_waits_block(o) for o in w.ops],
    )
