"""One rank's analysis: its shared state once, then each analysis over it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from itertools import repeat

import numpy as np

from dbo_trace.analysis import classify as c
from dbo_trace.analysis.accounting import B_COMM, B_COMPUTE, B_COPY, B_HOST, Partition, TimeBuckets, partition, window_of
from dbo_trace.analysis.steps.attribution import (
    SOURCE_HOOK_NVTX,
    SOURCE_HOOK_RANGES,
    Attribution,
    attribute,
)
from dbo_trace.analysis.host.capture import Capture, capture_windows, graph_capture
from dbo_trace.analysis.overlap.contention import Contention, comm_kernel_names, contention, top_kernels
from dbo_trace.analysis.afd.attention_side import rank_round_trips
from dbo_trace.analysis.afd.verdict_model import RoundTripShares
from dbo_trace.analysis.afd.effect import SpanParts, span_of, span_parts
from dbo_trace.analysis.host.expensive import ExpensiveCall, expensive_calls
from dbo_trace.analysis.overlap.exposure import Exposure, exposure
from dbo_trace.analysis.host.gpu_clock import ClockBounds, blocking_kinds, clock_bounds, incomplete
from dbo_trace.analysis.overlap.held import HeldSummary, held_back, summarize
from dbo_trace.analysis.overlap.held_sms import held_sm_evidence
from dbo_trace.analysis.host.host_time import UNTRACED, HostCauses, host_pieces
from dbo_trace.analysis.intervals import difference, intersection, union
from dbo_trace.analysis.ledger import YIELD_OP, Ledger, YieldOpCalls, ledger, yield_op_calls
from dbo_trace.analysis.metrics import (
    MetricColumns,
    RoundTrips,
    WindowMetrics,
    WindowTime,
    WindowTimes,
    gpu_waited_on_call,
    grouped_window_metrics,
    round_trips,
    window_metrics,
)
from dbo_trace.analysis.model import MarkedPeriod, Options, PhaseReport, RankAnalysis, RankDetail, Recording, StepReports
from dbo_trace.analysis.model import StepTable, comm_patterns_of, layers_of
from dbo_trace.analysis.afd.role_evidence import RoleCall
from dbo_trace.analysis.overlap.operations import OperationRow, operation_ids, operation_rows
from dbo_trace.analysis.host.python_frames import RankStacks, StepFrame, log_natives, rank_host_stacks
from dbo_trace.analysis.overlap.queueing import LaunchDelay, launch_delay
from dbo_trace.analysis.afd.roles import ATTENTION, FFN
from dbo_trace.analysis.afd.round_trips import AfdRoundTrips
from dbo_trace.analysis.steps.stalls import (
    Stall,
    behind,
    compile_ranges,
    find_stalls,
    in_periods,
    step_periods,
    top_compile_names,
)
from dbo_trace.analysis.steps.microbatched import kernels_microbatched, microbatch_source, source_microbatched
from dbo_trace.analysis.steps.periods import marked_periods_of
from dbo_trace.analysis.steps.sources import DECODE, PHASES, SOURCE_VLLM, Steps, decode_requests, vllm_steps
from dbo_trace.analysis.host.summaries import cpu_range_summary, kernel_summary, spread
from dbo_trace.analysis.verdict.evidence import rank_context, step_verdict
from dbo_trace.analysis.verdict.evidence_types import HostBasis, HostTest, host_test_of
from dbo_trace.bundle import EV_STEP_BEGIN
from dbo_trace.trace.eventlog import EventLogData
from dbo_trace.trace.pystacks import StackSamples
from dbo_trace.trace.timeline import Timeline


def _profiled_microbatch_threads(tl: Timeline, att: Attribution) -> bool:
    """The profiler saw a microbatch thread's CPU ops (profile_all_threads): only then can its own
    cost be blamed for host time. A worker thread of another kind (autograd, say) is no evidence."""
    if not kernels_microbatched(att.source) or not len(tl.cpu):
        return False
    lanes = set(np.unique(tl.calls.lane[att.call_ubatch >= 0]).tolist())
    if att.source in (SOURCE_HOOK_RANGES, SOURCE_HOOK_NVTX):
        return True  # the dbo ranges are CPU ranges of the microbatch threads
    ops = tl.cpu.lane[~tl.cpu_is_annotation]
    return bool(lanes and np.isin(ops, list(lanes - {tl.pid})).any())


def operations_per_step(op_ids: np.ndarray, step: np.ndarray, n_steps: int) -> np.ndarray:
    counted = op_ids >= 0
    if not counted.any():
        return np.zeros(n_steps, np.int64)
    _ids, first = np.unique(op_ids[counted], return_index=True)
    return np.bincount(step[counted][first], minlength=n_steps)


def analyze_rank(
    tl: Timeline, logs: list[EventLogData], options: Options, *, recording: Recording = Recording(), role_call: RoleCall | None = None,
    rank: int | None = None, samples: list[StackSamples] | None = None, partner: Steps | None = None,
) -> RankAnalysis:
    """One rank's analysis: its shared state once (rank_detail), then each analysis over it. Its
    verdict is decided with the others' (analysis/report.py combine). recording: what the manifests
    said; role_call: the rank's role and where it came from (afd/role_evidence.py resolve_role).
    rank: the rank's number as the caller settled it (trace/load.py settle_ranks); None: the one its
    trace claims. samples: the process's sampled Python stacks (py-spy), if any. partner: an AFD FFN
    rank's steps, its attention's on its clock (steps/sources.py partner_steps)."""
    d = rank_detail(tl, logs, options, partner, recording)
    read = rank_clock_bounds(d)
    if (skew := read.skew_us) is not None:
        # the events prove the GPU's timestamps off the CPU's: every figure is taken on the CPU's clock
        tl = tl.shifted_gpu(skew)
        d = rank_detail(tl, logs, options, partner, recording)
    clocks = analysed_clocks(d, read, skew or 0.0)
    gaps = incomplete(
        gpu_start=tl.gpu.start, launch_index=d.attribution.gpu_launch_index, call_end=tl.calls.end,
        call_correlation=tl.calls.correlation, clocks=clocks,
    )  # fmt: skip
    capture = graph_capture(
        call_start=tl.calls.start, call_end=tl.calls.end, call_lane=tl.calls.lane, call_kind=d.call_kind, part=d.partition
    )
    table = step_table(d, capture)
    role = role_call.role if role_call is not None else None
    yields = rank_yield_op_calls(d)
    yield_op = yields.figures if yields is not None else None  # its figures are the rank's, its share each window's
    afd = rank_round_trips(d, table) if role == ATTENTION or (recording.disaggregated and role is None) else None
    whole = whole_window(d, table, _afd_cross(d, afd), served=role == FFN)
    ubatch_source = microbatch_source(d.attribution.source, afd is not None and afd.microbatched)
    # its steps and phases are judged as the run is: where it has round trips, overlap is theirs
    shares = RoundTripShares(afd, table.index) if afd is not None else None
    # two microbatches ran: the kernels' microbatches, or the event log's step paths (a full-graph
    # replay's kernels cannot be told apart): the steps and phases are asked the overlap question
    context = rank_context(d.attribution.source, table.path, afd, role, yield_op)
    starts, steady, marked = steady_step_starts(d, table)
    marked_periods = rank_marked_periods(marked, steady, d.attribution.steps.source)
    phases = [phase_report(d, table, p, at, marked_periods) for p in PHASES if len(at := table.of_phase(p))]
    exposed = rank_exposure(d) if d.has_comm else None
    late = behind(table.start_us, table.end_us)
    delay = rank_launch_delay(d, clocks)
    stacks, stack_notes = (None, []) if not samples else stacks_of(d, samples, logs, whole, phases, table)
    frames: list[StepFrame | None] | None = list(stacks.steps) if stacks is not None and len(stacks.steps) == len(table) else None
    return RankAnalysis(
        rank=tl.claimed_rank if rank is None else rank,
        source=str(tl.source),
        attribution=ubatch_source,
        step_source=d.attribution.steps.source,
        profile_all_threads=_profiled_microbatch_threads(tl, d.attribution),
        steps=StepReports(table, d.host_pieces, partial(step_verdict, context), shares, frames),
        total=whole.total,
        round_trips=_round_trips(table, d.attribution.layers, d.microbatched, afd),
        graph_api=graph_api(tl),
        role=role,
        role_source=role_call,
        expensive_calls=rank_expensive(d, afd is not None and afd.microbatched),
        afd=afd,
        window=whole.window,
        in_steps=whole.in_steps,
        host_test=whole.host_test,
        steady=whole.steady,
        behind=late,
        launch_delay=delay,
        clocks=clocks,
        incomplete=gaps,
        phases=phases,
        steps_inferred=d.attribution.steps.inferred,
        contention=rank_contention(d) if d.microbatched else None,
        comm_kernels=comm_kernel_names(d.kernel_kind, tl.gpu.name, tl.names),
        host_causes=whole.causes,
        host_causes_window=whole.causes_window,
        kernel_summary=kernel_summary(tl.names, tl.gpu.name, tl.gpu.end - tl.gpu.start, tl.gpu_is_copy),
        cpu_ranges=cpu_range_summary(d.host_pieces, tl.cpu.name, tl.cpu.end - tl.cpu.start, whole.window.host_idle_us),
        top_compute_kernels=top_kernels(d.kernel_kind, tl.gpu.name, tl.gpu.end - tl.gpu.start, tl.names, c.COMPUTE),
        exposure=exposed,
        held_back=held_summary(d),
        operations=rank_operations(d, exposed, rank_layers(d, afd)) if d.microbatched else [],
        notes=[
            *d.attribution.notes,
            # an FFN has no microbatch of its own: whether the pair ran two is its attention's to say
            *(
                [d.attribution.no_microbatch]
                if d.attribution.no_microbatch and not source_microbatched(ubatch_source) and role != FFN
                else []
            ),
            *([late] if late is not None else []),
            *([delay] if delay is not None and delay.noted else []),
            *([clocks] if clocks.noted else []),
            *([gaps] if gaps is not None else []),
            *tl.warnings,
            *stack_notes,
        ],
        capture=capture if capture.found else None,
        host_stacks=stacks,
        yield_ops=yield_op,
        ledger=rank_ledger(d, logs, table, rank_layers(d, afd), yields),
        sm_evidence=held_sm_evidence(d.held, tl, comm_sms=recording.comm_sms, env_recorded=recording.env_recorded),
        span_parts=rank_span_parts(d, starts, steady),
        decode_requests=rank_decode_requests(marked, steady),
        marked_periods=marked_periods,
        window_context=context,
        detail=d,
    )


def stacks_of(
    d: RankDetail, samples: list[StackSamples], logs: list[EventLogData], whole: WholeWindow, phases: list[PhaseReport],
    steps: StepTable,
) -> tuple[RankStacks | None, list[str]]:
    """Host idle by sampled Python frame (analysis/host/python_frames.py): over the window and per phase."""
    tl = d.timeline
    by_phase = []
    for p in phases:
        mine = steps.of_phase(p.phase)
        if p.host_causes is not None and len(mine):
            lo = steps.start_us[mine]
            hi = steps.end_us[mine]
            by_phase.append((p.phase, lo, hi, p.host_causes.host_idle_us, p.host_causes.us(UNTRACED)))
    return rank_host_stacks(
        samples=samples, pieces=d.host_pieces, pid=tl.pid, base_time_ns=tl.base_time_ns, names=tl.names,
        call_lane=tl.calls.lane, cpu_start=tl.cpu.start, cpu_end=tl.cpu.end, cpu_name=tl.cpu.name, cpu_lane=tl.cpu.lane,
        cpu_is_annotation=tl.cpu_is_annotation, log_native=log_natives([r for g in logs for r in g.records], [g.header for g in logs]),
        window=d.window_us, host_idle_us=whole.window.host_idle_us, untraced_us=whole.causes_window.us(UNTRACED),
        phases=by_phase, steps=(steps.start_us, steps.end_us),
    )  # fmt: skip


def rank_detail(
    tl: Timeline, logs: list[EventLogData], options: Options, partner: Steps | None = None, recording: Recording = Recording()
) -> RankDetail:
    """What the rank's analyses share, each computed once: the attribution, every activity's and
    call's kind, the launching threads, the window's partition into time buckets, the step windows,
    the comm operations, the held-back comm and the host-idle pieces."""
    att = attribute(tl, logs, list(options.ubatch_patterns), layers_of(options, recording), options.step_marker, partner)
    rules = c.CommRules(
        extra_patterns=comm_patterns_of(options, recording), streams=options.comm_streams, replace_builtin=options.comm_only
    )
    kinds = c.kernel_kinds(tl.names, tl.gpu.name, tl.gpu_is_copy, tl.gpu.lane, rules)
    call_kind = c.call_kinds(tl.names, tl.calls.name)
    launched = att.gpu_launch_index >= 0
    li = np.clip(att.gpu_launch_index, 0, None)
    launch_kind = np.where(launched, call_kind[li] if len(call_kind) else -1, -1)
    launch_lane = np.where(launched, tl.calls.lane[li] if len(tl.calls) else -1, -1)
    lo, hi = window_of((tl.gpu.start, tl.gpu.end), (tl.calls.start, tl.calls.end), (tl.cpu.start, tl.cpu.end))
    part = partition(
        lo=lo, hi=hi, start=tl.gpu.start, end=tl.gpu.end, kind=kinds, launch_start=att.gpu_launch_start,
        launch_end=_launch_end(tl, att),
    )
    step_start, step_end = _step_windows(tl, att)
    is_comm = kinds == c.COMM
    held = None
    if kernels_microbatched(att.source) and is_comm.any():
        held = held_back(
            gpu_start=tl.gpu.start, gpu_end=tl.gpu.end, gpu_stream=tl.gpu.lane, kinds=kinds, ubatch=att.gpu_ubatch,
            launch_index=att.gpu_launch_index, call_start=tl.calls.start, call_end=tl.calls.end,
            call_thread=tl.calls.lane, call_kind=call_kind,
        )  # fmt: skip
    pieces = host_pieces(
        part=part, names=tl.names, gpu_start=tl.gpu.start, gpu_launch_start=att.gpu_launch_start,
        gpu_launch_index=att.gpu_launch_index, gpu_step=att.gpu_step, call_start=tl.calls.start, call_end=tl.calls.end,
        call_name=tl.calls.name, call_lane=tl.calls.lane, call_kind=call_kind, call_step=att.call_step,
        call_ubatch=att.call_ubatch, cpu_start=tl.cpu.start, cpu_end=tl.cpu.end, cpu_name=tl.cpu.name,
        cpu_lane=tl.cpu.lane, cpu_is_annotation=tl.cpu_is_annotation, step_lo=att.steps.start, step_hi=att.steps.end,
        steps_marked=not att.steps.inferred,
    )  # fmt: skip
    return RankDetail(
        timeline=tl,
        attribution=att,
        kernel_kind=kinds,
        call_kind=call_kind,
        launch_kind=launch_kind,
        partition=part,
        held=held,
        host_pieces=pieces,
        log_step_begins_ns=_log_step_begins(logs),
        launch_lane=launch_lane,
        call_us=tl.calls.end - tl.calls.start,
        call_gpu_waited=gpu_waited_on_call(
            call_start=tl.calls.start, call_end=tl.calls.end, gpu_start=tl.gpu.start, launch_index=att.gpu_launch_index
        ),
        step_start_us=step_start,
        step_end_us=step_end,
        operation=operation_ids(
            step=att.gpu_step, lane=launch_lane, launch_start=att.gpu_launch_start, start=tl.gpu.start, is_comm=is_comm
        ),
        window_us=(lo, hi),
    )


def steady_step_starts(d: RankDetail, table: StepTable) -> tuple[np.ndarray, np.ndarray, Steps | None]:
    """Where its steps start and which are steady, for DBO's effect (analysis/afd/effect.py): vLLM's
    `execute_*` annotations where the trace has them (an event log's steps start inside them, at a
    phase of the step that moves with DBO on and off), else the step source's; a step that starts
    inside a stalled step's window is not steady. Returns (starts, steady, the annotations or None)."""
    marked = vllm_steps(d.timeline)
    if marked is None or len(marked) < 2:
        return table.start_us, ~table.stalled, None
    stalled = table.stalled
    u_lo, u_hi = union(table.start_us[stalled], table.end_us[stalled])
    at = np.searchsorted(u_lo, marked.start, side="right") - 1
    inside = (at >= 0) & (marked.start < u_hi[np.maximum(at, 0)]) if len(u_lo) else np.zeros(len(marked), bool)
    return marked.start, ~inside, marked


def rank_decode_requests(marked: Steps | None, steady: np.ndarray) -> float | None:
    """The steady decode steps' median decode requests a step, from vLLM's annotations: its load
    as its trace shows it (compare pairs arms by it where their manifests do not say)."""
    if marked is None:
        return None
    counts = [
        n
        for i, (label, phase) in enumerate(zip(marked.label, marked.phase))
        if steady[i] and phase == DECODE and (n := decode_requests(label)) is not None
    ]
    return float(np.median(counts)) if counts else None


def rank_marked_periods(marked: Steps | None, steady: np.ndarray, source: str) -> tuple[MarkedPeriod, ...]:
    """Its steady annotated steps' periods (start to the next annotation's start), phases and tokens;
    none where it has no annotations, or where its steps are the annotations already (its own steps,
    stalls and all, are then the same sample)."""
    if marked is None:
        return ()
    if source.startswith(SOURCE_VLLM):
        return ()
    out = []
    for i in range(len(marked) - 1):
        if not steady[i]:
            continue
        ctx, gen = marked.context_tokens[i], marked.generation_tokens[i]
        tokens = None if ctx is None and gen is None else (ctx or 0) + (gen or 0)
        out.append(MarkedPeriod(float(marked.start[i + 1] - marked.start[i]), marked.phase[i], tokens))
    return tuple(out)


def rank_span_parts(d: RankDetail, starts: np.ndarray, steady: np.ndarray) -> SpanParts | None:
    """Its steady steps' mean period cut into parts (analysis/afd/effect.py): what `compare` takes apart."""
    span = span_of(starts, steady)
    if span is None:
        return None
    tl = d.timeline
    lo, hi, n = span
    return span_parts(
        d.partition, lo, hi, n, start=tl.gpu.start, end=tl.gpu.end, name=tl.gpu.name,
        compute=d.kernel_kind == c.COMPUTE, names=tl.names,
    )  # fmt: skip


def rank_layers(d: RankDetail, afd: AfdRoundTrips | None) -> int | None:
    """The rank's layers: --layers or the event log's, else a disaggregated rank's (one FFN round trip
    per layer and microbatch), so its comm operations and hand-overs are labelled by layer too."""
    return d.attribution.layers or (afd.layers if afd is not None else None)


def rank_yield_op_calls(d: RankDetail) -> YieldOpCalls | None:
    """The yield op's calls in a rank's steps (analysis/ledger.py), DBO on or off."""
    tl, att = d.timeline, d.attribution
    yield_name = [i for i, n in enumerate(tl.names) if n == YIELD_OP]
    return yield_op_calls(
        step_start_us=att.steps.start,
        step_end_us=att.steps.end,
        cpu_start=tl.cpu.start,
        cpu_end=tl.cpu.end,
        cpu_lane=tl.cpu.lane,
        cpu_is_yield_op=np.isin(tl.cpu.name, yield_name) & ~tl.cpu_is_annotation,
    )


def rank_ledger(
    d: RankDetail, logs: list[EventLogData], steps: StepTable, layers: int | None = None, yields: YieldOpCalls | None = None
) -> Ledger | None:
    """The ledger over a rank's shared state (analyze_rank's one call); layers: as rank_layers; yields:
    rank_yield_op_calls."""
    tl, att = d.timeline, d.attribution
    usable = [log.records for log in logs if log.pid is None or tl.pid is None or log.pid == tl.pid]
    return ledger(
        log_records=usable,
        base_time_ns=tl.base_time_ns,
        step_start_us=att.steps.start,
        step_end_us=att.steps.end,
        step_index=steps.index,
        step_us=steps.period_us,
        layers=layers or att.layers,
        yield_calls=yields,
        gpu_start=tl.gpu.start,
        gpu_end=tl.gpu.end,
        gpu_is_compute=d.kernel_kind == c.COMPUTE,
        gpu_step=att.gpu_step,
        gpu_ubatch=att.gpu_ubatch,
    )


def _step_windows(tl: Timeline, att: Attribution) -> tuple[np.ndarray, np.ndarray]:
    """Each step's window: from its CPU start until the last GPU work it launched ends (a graph
    replay's CPU window is only the launch)."""
    own_end = np.full(len(att.steps), -np.inf)
    stepped = att.gpu_step >= 0
    np.maximum.at(own_end, att.gpu_step[stepped], tl.gpu.end[stepped])
    return att.steps.start, np.maximum(att.steps.end, own_end)


def metrics_of(
    d: RankDetail, *, gpu: np.ndarray, calls: np.ndarray, windows: tuple[np.ndarray, np.ndarray],
    untold_cross_us: float | None = None, served: bool = False,
) -> WindowMetrics:  # fmt: skip
    """The figures of the selected activities and calls (gpu: (n_gpu,) bool, calls: (n_calls,) bool)
    over the union of the windows (lo, hi); untold_cross_us, served: metrics.window_metrics'."""
    tl, att = d.timeline, d.attribution
    return window_metrics(
        start=tl.gpu.start[gpu],
        end=tl.gpu.end[gpu],
        kind=d.kernel_kind[gpu],
        ubatch=att.gpu_ubatch[gpu],
        launch_start=att.gpu_launch_start[gpu],
        launch_kind=d.launch_kind[gpu],
        call_kind=d.call_kind[calls],
        call_dur=d.call_us[calls],
        call_waited=d.call_gpu_waited[calls],
        time=window_time(d.partition, *windows),
        untold_cross_us=untold_cross_us,
        served=served,
    )


def step_table(d: RankDetail, capture: Capture) -> StepTable:
    """Every step with GPU activity: its figures as columns, of all steps at once over sorted arrays
    (the cost grows with events, not events x steps); its verdict and host causes are made when it
    is read (model.StepReports)."""
    tl, att = d.timeline, d.attribution
    n_steps = len(att.steps)
    step_lo, step_hi = d.step_start_us, d.step_end_us
    per_step = grouped_window_metrics(
        group=att.gpu_step,
        n=n_steps,
        start=tl.gpu.start,
        end=tl.gpu.end,
        kind=d.kernel_kind,
        ubatch=att.gpu_ubatch,
        launch_start=att.gpu_launch_start,
        launch_kind=d.launch_kind,
        call_group=att.call_step,
        call_kind=d.call_kind,
        call_dur=d.call_us,
        call_waited=d.call_gpu_waited,
        times=window_times(d.partition, step_lo, step_hi),
    )
    ops = operations_per_step(d.operation, att.gpu_step, n_steps)
    captured_launch = capture.call_captured & np.isin(d.call_kind, (c.CALL_LAUNCH, c.CALL_GRAPH_LAUNCH)) & (att.call_step >= 0)
    captured_per_step = np.bincount(att.call_step[captured_launch], minlength=n_steps)
    has_gpu = np.bincount(att.gpu_step[att.gpu_step >= 0], minlength=n_steps) > 0
    shown = np.flatnonzero(has_gpu)
    logged = np.asarray(att.comm_phases)[shown] if att.comm_phases is not None else np.full(len(shown), -1)
    picked = shown.tolist()
    lo, hi = step_lo[shown], step_hi[shown]
    periods, phases = step_periods(lo, hi), [att.steps.phase[i] for i in picked]
    return StepTable(
        index=shown.astype(np.int64),
        start_us=lo,
        end_us=hi,
        period_us=periods,
        comm_ops=np.where(logged >= 0, logged, ops[shown]).astype(np.int64),
        comm_ops_from_log=logged >= 0,
        captured_launches=captured_per_step[shown].astype(np.int64),
        metrics=MetricColumns({k: v[shown] for k, v in per_step.columns.items()}),
        label=[att.steps.label[i] for i in picked],
        path=[att.steps.path[i] for i in picked],
        phase=phases,
        context_tokens=[att.steps.context_tokens[i] for i in picked],
        generation_tokens=[att.steps.generation_tokens[i] for i in picked],
        stalls=step_stalls(d, lo, hi, periods, phases),
    )


def step_stalls(
    d: RankDetail, lo: np.ndarray, hi: np.ndarray, period_us: np.ndarray, phase: list[str | None]
) -> dict[int, Stall]:
    """The steps' stalls by position (analysis/steps/stalls.py): compile/JIT ranges and graph captures
    inside a step's period, and periods that are outliers against their phase. lo, hi, period_us:
    (n_steps,) float64, the steps' windows and periods; phase: each step's."""
    if not len(lo):
        return {}
    tl = d.timeline
    jit = compile_ranges(tl.names, tl.cpu.name)
    c_start, c_end = tl.cpu.start[jit], tl.cpu.end[jit]
    w_start, w_end, _lanes = capture_windows(tl.calls.start, tl.calls.end, tl.calls.lane, d.call_kind)
    return find_stalls(
        period_us=period_us,
        phase=phase,
        compile_us=in_periods(lo, hi, c_start, c_end),
        capture_us=in_periods(lo, hi, w_start, w_end),
        compile_names=top_compile_names(lo, hi, c_start, c_end, tl.cpu.name[jit], tl.names),
    )


@dataclass(frozen=True)
class WholeWindow:
    """A rank's figures over its profiled window and over its steps' union, and the host test between them."""

    total: WindowMetrics
    window: TimeBuckets
    in_steps: TimeBuckets
    host_test: HostTest
    causes: HostCauses  # over what the host test measured
    causes_window: HostCauses
    steady: TimeBuckets  # what the host test measured: the steady steps' union, or the window less the stalls'


def whole_window(d: RankDetail, steps: StepTable, untold_cross_us: float | None = None, served: bool = False) -> WholeWindow:
    """untold_cross_us, served: the total's cross-microbatch hidden comm where none is told (_afd_cross)."""
    tl = d.timeline
    lo, hi = d.window_us
    whole = (np.array([lo]), np.array([hi]))
    gpu, calls = np.ones(len(tl.gpu), bool), np.ones(len(tl.calls), bool)
    total = metrics_of(d, gpu=gpu, calls=calls, windows=whole, untold_cross_us=untold_cross_us, served=served)
    part = d.partition
    window = TimeBuckets.from_row(hi - lo, part.measure(*whole)[0])
    reported = steps.index
    steps_union = union(d.step_start_us[reported], d.step_end_us[reported]) if len(reported) else (np.empty(0), np.empty(0))
    in_steps = _buckets_over(part, steps_union)
    # The host test and its causes over the steady state: the stalls' windows left out
    stalled = steps.stalled
    steady_steps = steps.steady_or_all(np.arange(len(steps)))
    if d.attribution.steps.inferred or in_steps.window_us <= 0:
        stall_union = union(steps.start_us[stalled], steps.end_us[stalled])
        region = difference(whole, stall_union) if stalled.any() else whole
        steady_window = _buckets_over(part, region)
        steady = steady_window
    else:
        region = union(steps.start_us[steady_steps], steps.end_us[steady_steps])
        steady = _buckets_over(part, region)
        steady_window = window
    host_test = host_test_of(d.attribution.steps.inferred, steady_window, steady)
    causes_window = d.host_pieces.causes_in(*whole, np.array([window.host_idle_us]))[0]
    causes = (
        causes_window
        if not stalled.any() and host_test.basis == HostBasis.WINDOW
        else d.host_pieces.causes_in_union(region[0], region[1], steady.host_idle_us)
    )
    return WholeWindow(total, window, in_steps, host_test, causes, causes_window, steady)


def _buckets_over(part: Partition, region: tuple[np.ndarray, np.ndarray]) -> TimeBuckets:
    """The buckets over a union of windows (disjoint, sorted, or any: they are merged)."""
    u = union(*region) if len(region[0]) else region
    return TimeBuckets.from_row(float((u[1] - u[0]).sum()), part.measure_union(*u) if len(u[0]) else np.zeros(5))


def rank_clock_bounds(d: RankDetail) -> ClockBounds:
    """The GPU clock's offsets the events allow (analysis/host/gpu_clock.py)."""
    tl = d.timeline
    return clock_bounds(
        gpu_start=tl.gpu.start, gpu_end=tl.gpu.end, launch_index=d.attribution.gpu_launch_index,
        replayed=d.launch_kind == c.CALL_GRAPH_LAUNCH, to_host=copies_to_host(tl), call_start=tl.calls.start,
        call_end=tl.calls.end,
        call_lane=tl.calls.lane, call_kind=d.call_kind, call_blocking=blocking_kinds(tl.names, tl.calls.name),
    )  # fmt: skip


def copies_to_host(tl: Timeline) -> np.ndarray:
    """(n_gpu,) bool: the copies from the device to the host (Kineto's and Nsight's "Memcpy DtoH")."""
    to_host = c.per_name(tl.names, tl.gpu.name, lambda n: "DtoH" in n or "Device -> Host" in n)
    copies: np.ndarray = tl.gpu_is_copy & (to_host[tl.gpu.name] if len(tl.names) else np.zeros(len(tl.gpu), bool))
    return copies


def _launch_end(tl: Timeline, att: Attribution) -> np.ndarray:
    """Each GPU activity's launching call's end (NaN where none is known)."""
    li = att.gpu_launch_index
    end: np.ndarray = np.where(li >= 0, tl.calls.end[np.clip(li, 0, None)] if len(tl.calls) else np.nan, np.nan)
    return end


def _window_host_idle(part: Partition, lo: float, hi: float) -> float:
    return float(part.measure(np.array([lo]), np.array([hi]))[0, B_HOST]) if len(part.bounds) else 0.0


def host_idle_at(d: RankDetail, offset_us: float) -> float:
    """The window's host idle were the GPU's timestamps offset_us ahead of the CPU's."""
    tl, att = d.timeline, d.attribution
    start, end = tl.gpu.start - offset_us, tl.gpu.end - offset_us
    lo, hi = window_of((start, end), (tl.calls.start, tl.calls.end), (tl.cpu.start, tl.cpu.end))
    part = partition(
        lo=lo, hi=hi, start=start, end=end, kind=d.kernel_kind, launch_start=att.gpu_launch_start, launch_end=_launch_end(tl, att)
    )
    return _window_host_idle(part, lo, hi)


def analysed_clocks(d: RankDetail, read: ClockBounds, shift_us: float) -> ClockBounds:
    """The clocks as analysed, a new value of the bounds as read (which decided the shift): the shift
    d was analysed with and, where the launches leave the GPU's clock room (ClockBounds.wide), the
    host idle as analysed and were the GPU's clock as far ahead as they allow."""
    low = high = None
    if read.wide and read.upper_us is not None:
        # offsets are of the timeline as analysed (already shifted by shift_us)
        at = [_window_host_idle(d.partition, *d.window_us), host_idle_at(d, read.upper_us - shift_us)]  # as analysed: d's own
        low, high = min(at), max(at)
    return replace(read, shift_us=shift_us, host_idle_low_us=low, host_idle_high_us=high)


def rank_launch_delay(d: RankDetail, clocks: ClockBounds | None = None) -> LaunchDelay | None:
    """Launch-to-start delays and the host idle after the ending work's launch (analysis/overlap/queueing.py);
    clocks: the rank's (what tells a queue from an offset)."""
    tl, att = d.timeline, d.attribution
    launch_end = _launch_end(tl, att)
    part = d.partition
    return launch_delay(
        gpu_start=tl.gpu.start,
        launch_end=launch_end,
        replayed=d.launch_kind == c.CALL_GRAPH_LAUNCH,
        queued_start=part.queued_start,
        queued_end=part.queued_end,
        host_idle_us=float(part.measure(np.array([part.lo]), np.array([part.hi]))[0, B_HOST]) if len(part.bounds) else 0.0,
        window_us=part.hi - part.lo,
        clocks=clocks,
    )


def held_summary(d: RankDetail) -> HeldSummary | None:
    if d.held is None:
        return None
    tl, att = d.timeline, d.attribution
    return summarize(
        d.held, gpu_name=tl.gpu.name, names=tl.names, call_name=tl.calls.name, call_thread=tl.calls.lane,
        call_ubatch=att.call_ubatch, call_start=tl.calls.start, holder_launch_start=att.gpu_launch_start,
    )  # fmt: skip


def rank_exposure(d: RankDetail, *, peer_until: np.ndarray | None = None) -> Exposure:
    """Why the rank's comm was exposed (analysis/overlap/exposure.py); peer_until: (n_gpu,) float64, where a
    comm kernel waited for a peer rank, until when (NaN: it did not)."""
    tl, att = d.timeline, d.attribution
    lo, hi = d.window_us
    seg_start, seg_end = d.partition.spans(B_COMM, lo, hi)
    return exposure(
        seg_start=seg_start,
        seg_end=seg_end,
        start=tl.gpu.start,
        end=tl.gpu.end,
        kind=d.kernel_kind,
        ubatch=att.gpu_ubatch,
        step=att.gpu_step,
        launch_start=att.gpu_launch_start,
        held={} if d.held is None else d.held.causes(),
        peer_until=peer_until,
    )


def rank_contention(d: RankDetail, *, comm_wait_us: np.ndarray | None = None) -> Contention | None:
    """What overlap cost (analysis/overlap/contention.py); comm_wait_us: (n_gpu,) float64, each comm kernel's
    wait for its peer ranks, taken off its end (what slower transfers alone cost)."""
    tl = d.timeline
    end = tl.gpu.end if comm_wait_us is None else tl.gpu.end - comm_wait_us
    return contention(
        start=tl.gpu.start, end=end, kind=d.kernel_kind, ubatch=d.attribution.gpu_ubatch, name=tl.gpu.name, names=tl.names
    )


def rank_operations(d: RankDetail, exposed: Exposure | None, layers: int | None = None) -> list[OperationRow]:
    """The comm operations per (microbatch, place in the step), each with its layer and role where the
    layers (as rank_layers: --layers, the log's, a disaggregated rank's) divide them."""
    tl, att = d.timeline, d.attribution
    # Point-to-point: every comm kernel a SendRecv, none of a named collective but send/recv (an
    # NCCL all-to-all runs SendRecv kernels too; torch names it all_to_allv, vLLM's PyNccl names none).
    is_comm = d.kernel_kind == c.COMM
    comm_names = [tl.names[i] for i in np.unique(tl.gpu.name[is_comm]).tolist()]
    named = tl.comm_args().collective
    named = named[is_comm] if len(named) == len(is_comm) else np.zeros(0, np.int32)  # a timeline built without args
    collectives = {tl.names[i] for i in np.unique(named).tolist() if i >= 0}
    sendrecv = bool(comm_names) and all("SendRecv" in n for n in comm_names) and collectives <= {"send", "recv"}
    return operation_rows(
        start=tl.gpu.start, end=tl.gpu.end, kind=d.kernel_kind, ubatch=att.gpu_ubatch, step=att.gpu_step, op=d.operation,
        exposure=exposed, layers=layers or att.layers, sendrecv=sendrecv,
    )  # fmt: skip


def _log_step_begins(logs: list[EventLogData]) -> np.ndarray | None:
    begins = [r[0] for log in logs for r in log.records if r[1] == EV_STEP_BEGIN]
    return np.sort(np.array(begins, np.int64)) if begins else None


def window_times(part: Partition, lo: np.ndarray, hi: np.ndarray) -> WindowTimes:
    """Each window's time on its own (windows may overlap each other), all at once: as
    _window_time's, a column each."""
    rows = part.measure(lo, hi)
    host_gaps, all_gaps = part.gaps_in(lo, hi)
    busy = rows[:, B_COMPUTE] + rows[:, B_COMM] + rows[:, B_COPY]  # TimeBuckets.busy_us, in its order
    return WindowTimes(hi - lo, busy, rows[:, B_HOST].copy(), host_gaps.astype(np.int64), all_gaps.astype(np.int64))


def window_time(part: Partition, lo: np.ndarray, hi: np.ndarray) -> WindowTime:
    """Span, busy time and host-caused idle of a window (or a union of windows) from the rank's one timeline."""
    u_lo, u_hi = union(np.asarray(lo, float), np.asarray(hi, float))
    row = part.measure(u_lo, u_hi).sum(axis=0) if len(u_lo) else np.zeros(5)
    return _window_time(float((u_hi - u_lo).sum()), row, *part.host_gaps_in(u_lo, u_hi))


def _window_time(span_us: float, row: np.ndarray, host_gaps: int, all_gaps: int) -> WindowTime:
    buckets = TimeBuckets.from_row(span_us, row)
    return WindowTime(span_us, buckets.busy_us, buckets.host_idle_us, host_gaps, all_gaps)


def phase_report(d: RankDetail, steps: StepTable, phase: str, at: np.ndarray, marked: Sequence[MarkedPeriod] = ()) -> PhaseReport:
    """A phase's figures over its steady steps (all of them where every one stalled); its step-time
    spread over all its steps' periods, stalls included; its verdict is judged in the run's context
    (analysis/report.py). at: its steps' positions; marked: its steady steps' periods by vLLM's
    annotations, where its steps are another source's: the median step's basis."""
    att = d.attribution
    steady = steps.steady_or_all(at)
    idx = steps.index[steady]
    windows = (steps.start_us[steady], steps.end_us[steady])
    m = metrics_of(d, gpu=np.isin(att.gpu_step, idx), calls=np.isin(att.call_step, idx), windows=windows)
    causes = d.host_pieces.causes_in_union(windows[0], windows[1], m.host_idle_us)
    by_marks = marked_periods_of([marked], phase)
    return PhaseReport(
        phase=phase,
        steps=len(at),
        median_step_us=float(np.median(by_marks or steps.period_us[steady])),
        metrics=m,
        verdict=None,  # judged in the run's context (analysis/report.py)
        host_causes=causes,
        step_spread=spread(by_marks or steps.period_us[at]),  # the annotations' steady periods where they are the basis
        stalls=int(steps.stalled[at].sum()),
    )


def _afd_cross(d: RankDetail, afd: AfdRoundTrips | None) -> float | None:
    """An AFD attention rank's comm under the other microbatch's compute, its kernels' microbatches as
    the round trips told them (a graph replay's launching threads cannot): where the attribution has
    none, the figure is this one, not unknown beside the round trips' hidden share (whole_window).
    None: no round trips of two microbatches."""
    if afd is None or not afd.microbatched or afd.kernel_ubatch is None or (d.attribution.gpu_ubatch >= 0).any():
        return None
    ub, start, end = afd.kernel_ubatch, d.timeline.gpu.start, d.timeline.gpu.end
    comm, compute = d.kernel_kind == c.COMM, d.kernel_kind == c.COMPUTE
    cross = 0.0
    for u in (0, 1):
        mine, other = comm & (ub == u), compute & (ub == 1 - u)
        lo, hi = intersection((start[mine], end[mine]), (start[other], end[other]))
        cross += float((hi - lo).sum())
    return cross


def rank_expensive(d: RankDetail, afd_microbatched: bool = False) -> list[ExpensiveCall]:
    """The CPU operators and ranges that cost far more per call than their GPU work (analysis/host/expensive.py)."""
    tl, att = d.timeline, d.attribution
    marked = not att.steps.inferred
    return expensive_calls(
        names=tl.names, cpu_start=tl.cpu.start, cpu_end=tl.cpu.end, cpu_name=tl.cpu.name, cpu_lane=tl.cpu.lane,
        cpu_is_annotation=tl.cpu_is_annotation, launch_start=att.gpu_launch_start, launch_lane=d.launch_lane,
        gpu_us=tl.gpu.end - tl.gpu.start, step_start=att.steps.start if marked else np.empty(0),
        step_end=att.steps.end if marked else np.empty(0), microbatched=d.microbatched or afd_microbatched,
    )  # fmt: skip


def _round_trips(
    steps: StepTable, layers: int | None, microbatched: bool, afd: AfdRoundTrips | None = None
) -> RoundTrips | None:
    if not len(steps):
        return None
    comm_busy, compute_busy = steps.metrics["comm_busy_us"], steps.metrics["compute_busy_us"]
    if afd is not None:  # a send and its receive are one round trip: two comm operations
        counts = dict(zip(*np.unique(afd.rows.step, return_counts=True)))
        # the SendRecv kernels' busy time is not what must hide: the round trip's exposed time is
        return round_trips(
            steps.period_us,
            np.array([2.0 * counts.get(i, 0) for i in steps.index.tolist()]),
            comm_busy,
            compute_busy,
            afd.layers,
            "disaggregated round trips (a data-plane send and its receive; comm per round trip: its exposed time)"
            + ("; layers: a microbatch's round trips per step" if afd.layers_inferred else ""),
            afd.microbatched,
            exposed_us=afd.median_exposed_us,
        )
    from_log = steps.comm_ops_from_log
    if from_log.all():
        source = "comm phases in the event log"
    elif not from_log.any():
        source = "comm operations (runs of comm kernels launched back to back)"
    else:
        source = "comm phases in the event log, comm operations where a step had none (graph replay)"
    return round_trips(
        steps.period_us,
        steps.comm_ops.astype(float),
        comm_busy,
        compute_busy,
        layers,
        source,
        microbatched,
    )


def graph_api(tl: Timeline) -> str:
    """HIP on ROCm traces (hipGraphLaunch), else CUDA: what the graph lines call the graphs."""
    return "HIP" if any(map(str.startswith, tl.names, repeat("hipGraphLaunch"))) else "CUDA"  # in C: 100,000 step names
