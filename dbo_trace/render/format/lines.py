"""A summary's lines: the verdict's, the AFD pair's, the host's, contention, exposure, held-back comm, the ledger and the what-ifs."""

from __future__ import annotations

from msgspec import UnsetType

from dbo_trace.analysis.afd.gpu_sharing import SLICED_MIN_US, SLICED_RATIO
from dbo_trace.analysis.compare.unprofiled import OVERHEAD_PERIODS_AT_LEAST
from dbo_trace.analysis.overlap.held_sms import LaunchShape, SmEvidence
from dbo_trace.render.document import (
    DisaggregatedBlock,
    ProfilerBlock,
    HostCausesBlock,
    NamedShare,
    NextStepBlock,
    PaysBlock,
    RankBlock,
    ReportDocument,
    VerdictBlock,
)
from dbo_trace.render.document.pipeline import DboWhatIfBlock, PipelineBlock
from dbo_trace.render.document.ledger import LedgerBlock
from dbo_trace.render.format.filtering import per_rank_labels
from dbo_trace.render.format.numbers import _amount, cut, ms, num, pct, tri, us
from dbo_trace.render.names import display_names
from dbo_trace.render.words.notes import LINE_NAMES
from dbo_trace.render.words.verdict import counted


def headline(verdict: VerdictBlock) -> str:
    """The verdict's first line: its label and the dominant finding (analysis/verdict/decision.py)."""
    return verdict.headline or verdict.label or "-"


def reason_lines(verdict: VerdictBlock) -> list[str]:
    """The verdict's reasons in words (a document before version 6 holds the words alone)."""
    return [r if isinstance(r, str) else r.text for r in verdict.reasons]


def next_step_line(verdict: VerdictBlock) -> str | None:
    """The verdict's next step (absent from documents before version 6)."""
    n = verdict.next_step
    return n.text if isinstance(n, NextStepBlock) else None


def pays_line(verdict: VerdictBlock) -> str | None:
    """Does DBO pay, where the verdict answers it (a microbatched run's or rank's, version 8 on)."""
    pays = getattr(verdict, "pays", None)
    return pays.text if isinstance(pays, PaysBlock) else None


_BOUND_WORDS = {"round_trip": "one microbatch's round trip", "ffn_busy": "the FFN busy with both microbatches",
                "attention_busy": "the attention busy with both microbatches"}  # fmt: skip


def pipeline_line(d: ReportDocument) -> str | None:
    """The step as a pipeline in words (the document's pipeline block, version 9): per layer the visits
    and the hops, and which bound held the step."""
    p = d.pipeline
    if not isinstance(p, PipelineBlock):
        return None
    if not p.has_ffn:
        return (
            f"pipeline (per layer, medians of the steady steps): attention {us(p.attention_us)}, round trip "
            f"{us(p.round_trip_us)} (no FFN trace: its visit and the hops are not told apart); layer loop "
            f"{ms(p.loop_us)} of the {ms(p.period_us)} step"
        )
    visits = (
        f"attention {us(p.attention_us)}, hop out {us(p.hop_out_us)}, FFN {us(p.ffn_us)}, "
        f"hop back {us(p.hop_back_us)}"
    )
    loop = f"layer loop {ms(p.loop_us)} of the {ms(p.period_us)} step ({us(p.loop_us / p.layers)} per layer)"
    if p.bounds_us is None:
        return f"pipeline (per layer, medians of the steady steps): {visits}; serial, the roles take turns; {loop}"
    bounds = ", ".join(f"{_BOUND_WORDS.get(k, k)} {us(v)}" for k, v in p.bounds_us.items())
    held = _BOUND_WORDS.get(p.bound, p.bound)
    return (
        f"pipeline (per layer, medians of the steady steps): {visits}; bounds: {bounds}; {held} held the step; {loop}"
    )


def predicted_line(d: ReportDocument) -> str | None:
    """DBO's effect predicted from this arm (the document's dbo_what_if, version 9), in words."""
    w = d.dbo_what_if
    if isinstance(d.dbo_what_if_not, str):
        return d.dbo_what_if_not
    if not isinstance(w, DboWhatIfBlock):
        return None
    other = "with DBO" if w.given == "off" else "without DBO"
    low, high = w.interval
    call = {"pays": "DBO pays", "costs": "DBO costs"}.get(w.call, "no call: the interval holds 0")
    caveats = f"; widened: {'; '.join(w.caveats)}" if w.caveats else ""
    return (
        f"a model, from this {'DBO-off' if w.given == 'off' else 'DBO'} arm: {other} the step would take "
        f"{w.period_ms:.2f} ms against {w.measured_period_ms:.2f} ms measured: DBO {w.change * 100:+.1f}% "
        f"[{low * 100:+.1f}, {high * 100:+.1f}], {call}; {w.calibration}{caveats}"
    )


def disaggregated_lines(b: DisaggregatedBlock) -> list[str]:
    """An AFD attention rank's round trips in words (the document's disaggregated block)."""
    per = f"{num(b.per_step)} per step" + (f" ({num(b.per_layer)} per layer)" if b.per_layer is not None else "")
    told = ", ".join(f"{k}: {v} steps" for k, v in b.microbatches_told.items())
    lag = b.host_lag_total_us if isinstance(b.host_lag_total_us, float) else 0.0
    less = " less the host's lag" if lag > 0 else ""
    first = (
        f"disaggregated round trips (send start to its receive's end): {b.round_trips}, {per}, median {ms(b.median_us)}; "
        f"{pct(b.hidden_share)} of their time{less} under the other microbatch's compute; microbatches by {told}"
    )
    lines = [first]
    if lag > 0 and isinstance(b.host_lag_median_us, float):
        op = b.lag_op if isinstance(b.lag_op, NamedShare) else None
        held = f"; through {pct(op.share)} of it the CPU op {op.name} ran" if op is not None else ""
        lines.append(
            f"the host's lag (the send kernel's end to the receive kernel's launch call): {ms(b.host_lag_median_us)} a "
            f"round trip (median), {pct(lag / b.total_us if b.total_us > 0 else None)} of the round trips' time{held}; "
            "the criterion and the hidden share are of the rest"
        )
    if b.parts is not None:
        ffn = f"FFN compute and queueing {ms(b.parts.ffn_us)}"
        if b.parts.ffn_compute_us is not None:
            ffn = f"FFN compute {ms(b.parts.ffn_compute_us)}, FFN queueing or waiting {ms(b.parts.ffn_queue_us)}"
        late = ""
        if isinstance(b.parts.late_us, float):
            late = f" ({ms(b.parts.late_us)} of it the FFN's answer waiting for the attention to post its receive)"
        lines.append(
            f"parts (medians over the {b.parts.matched} matched to the FFN's kernels): transfer {ms(b.parts.transfer_us)}"
            f"{late}, {ffn}, attention waiting in its receive {ms(b.parts.wait_us)}"
        )
    else:
        lines.append(f"no FFN trace: the receive kernel ({ms(b.receive_kernel_us)} median) holds the wait and the FFN's time")
    if b.criterion_ratio is not None:
        lines.append(
            f"per-microbatch compute {ms(b.compute_per_microbatch_us)} per layer against a round trip's exposed "
            f"{ms(b.median_exposed_us)} (ratio {num(b.criterion_ratio)}, medians): criterion {tri(b.criterion_met)}"
        )
    return lines


def roles_lines(d: ReportDocument) -> list[str]:
    """A disaggregated run's roles: each rank's and where it came from, both roles' figures over the
    attention's steps, and the round trip against its transfer (the document's roles block)."""
    roles = d.roles
    if roles is None:
        return []
    ranks = [f"rank {r.rank} {r.role}" + (f" (from {r.role_source})" if r.role_source else "") for r in d.ranks if r.role]
    lines = ["roles: " + "; ".join(ranks)] if ranks else []
    p = roles.pair
    if p is not None:
        lines.append(
            f"both roles over the attention's {p.steps} steps: FFN compute {ms(p.ffn_compute_per_step_us)} per step, "
            f"{ms(p.ffn_compute_per_round_trip_us)} per round trip"
            + (f" (FFN queueing or waiting {ms(p.ffn_queue_per_round_trip_us)})" if p.ffn_queue_per_round_trip_us is not None else "")
            + f"; GPU busy: attention {pct(p.attention_busy)}, FFN {pct(p.ffn_busy)}, both at once {pct(p.both_busy)}"
        )
    ts = roles.time_slicing
    if ts is not None and not ts.sliced:  # where sliced, the verdict's first reason says it
        mps = {"answered": "MPS answered", "not running": "MPS not running"}.get(roles.verified_mps() or "", "MPS not verified")
        one = "one GPU" if roles.shared_gpu else ("not one GPU" if roles.shared_gpu is False else "one GPU or not: not known")
        less = f", less the FFN's {ms(ts.ffn_compute_us)} compute," if ts.ffn_compute_us is not None else ""
        lines.append(
            f"GPU sharing: {one}, {mps}; a round trip's receive waits {ms(ts.receive_us)}{less} against a {us(ts.send_us)} "
            f"send: {num(ts.ratio, 1)} times its transfer, no sign of time-slicing (that shows as a wait of "
            f"{SLICED_RATIO:g} times the transfer and over {ms(SLICED_MIN_US)})"
        )
    return lines


def profiler_lines(d: ReportDocument) -> list[str]:
    """The profiler's own cost, where the recording has timed repeats (where it is large, what that
    means for the verdict is the verdict's reason profiler_overhead)."""
    p = d.profiler
    if not isinstance(p, ProfilerBlock) or p.profiled_period_us is None:
        return []
    basis = p.basis if isinstance(p.basis, str) else "TPOT"  # before version 8: TPOT
    unprofiled = p.unprofiled_itl_ms if basis == "ITL" and isinstance(p.unprofiled_itl_ms, float) else p.unprofiled_tpot_ms
    if unprofiled is None:
        return []
    steps = "decode steps" if p.steps_of == "decode" else "steps"
    period = f"the profiled {steps}' period {ms(p.profiled_period_us)} (median of {p.periods}, start to start)"
    against = f"{unprofiled:.2f} ms unprofiled ({basis}, mean of {p.repeats} repeats' medians, {p.timed_by})"
    if p.overhead is not None:
        return [f"profiler overhead {100 * p.overhead:+.0f}%: {period} against {against}"]
    if p.too_few is True:
        return [f"profiler overhead not measured: too few profiled steps ({period}; it takes {OVERHEAD_PERIODS_AT_LEAST})"]
    if p.tpot_prefills is True:
        return [
            f"profiler overhead not measured: the repeats have no ITL median, and their TPOT ({unprofiled:.2f} ms) "
            "holds the prefills that interleave as requests arrive (or may: the load is not known), where "
            f"{period} is a decode step's; not like with like"
        ]
    if p.below is True or p.profiled_period_us / 1000.0 < unprofiled:
        return [
            f"profiler overhead not measured: {period} is below {against}; they are not like with like"
            + (" (TPOT holds the prefills that interleave as requests arrive)" if basis == "TPOT" else "")
        ]
    return []


def host_cause_lines(d: ReportDocument) -> list[str]:
    """Under a host-bound verdict: what the host did while the GPU waited, per host-bound phase
    (the run's own line where there are no phases)."""
    if d.verdict.label != "host-bound":
        return []
    lines = [
        ph.host_causes.line
        for ph in d.phases.values()
        if ph.host_causes is not None and "host-bound" in (ph.verdict.label, *per_rank_labels(ph.verdict))
    ]
    run = d.host_causes
    shown = [line for line in lines if line is not None] or ([run.line] if run is not None and run.line else [])
    inner = _innermost_line(run) if run is not None else None
    return shown + ([inner] if shown and inner else [])


def _innermost_line(c: HostCausesBlock) -> str | None:
    """The CPU operators' time by the innermost operator, where that names something the top-level
    ones do not (a compile inside a custom op, the aten op a wrapper spends its time in)."""
    inner = [] if isinstance(c.cpu_ops_innermost, UnsetType) else c.cpu_ops_innermost
    shown = [x for x in inner[:LINE_NAMES] if (x.share or 0.0) >= 0.005]
    if not shown or [x.name for x in shown] == [x.name for x in c.cpu_ops[: len(shown)]]:
        return None
    items = ", ".join(f"{x.name} {pct(x.share)}" for x in shown)
    return f"the CPU operators' time by the innermost operator running (inside the top-level ones): {items}"


def host_stack_lines(d: ReportDocument) -> list[str]:
    """Each rank's host idle by sampled Python frame, where it has samples (whatever the verdict)."""
    return [r.host_stacks.window.line for r in d.ranks if not isinstance(r.host_stacks, UnsetType)]


def all_notes(d: ReportDocument) -> list[str]:
    """Every rank's notes and the warnings, each once, in order (what every text renderer lists)."""
    return list(dict.fromkeys([n for r in d.ranks for n in r.notes] + d.warnings))


def time_line(rank: RankBlock) -> str:
    """Where one rank's window went, bucket by bucket (they add up to the window)."""
    t, w = rank.time, rank.time.window_us or 0.0

    def share(us: float) -> str:
        return pct(us / w) if w else "-"

    host = rank.host_test
    return (
        f"rank {rank.rank} time ({ms(w)} window): compute {share(t.compute_us)}, exposed comm "
        f"{share(t.comm_exposed_us)}, copy {share(t.copy_us)}, GPU idle waiting on the host {share(t.host_idle_us)}, "
        f"idle waiting on a dependency {share(t.other_idle_us)}; host-bound test: {pct(host.fraction)} ({host.basis})"
    )


def contention_line(rank: RankBlock) -> str | None:
    """What overlap cost on one rank, in words (docs/analysis.md, "What overlap costs")."""
    x = rank.contention
    if x is None:
        return None
    parts = []
    for kind, slow, n, transfer in (
        ("compute", x.compute_slowdown, x.compute_kernels_overlapped, None),
        ("comm", x.comm_slowdown, x.comm_kernels_overlapped, x.comm_transfer_slowdown),
    ):
        if slow is not None:
            split = "" if transfer is None else f"; their transfers {100 * transfer:+.0f}%, the rest waiting for a peer rank"
            parts.append(f"{kind} kernels {100 * slow:+.0f}% ({n} overlapped{split})")
    cost = (
        "; ".join(parts) + " against their time alone"
        if parts
        else "no kernel ran both alone and beside the other microbatch, so no slowdown to measure"
    )
    summed = x.kernels_us if isinstance(x.kernels_us, (int, float)) else None  # absent before version 9
    if x.saved_us is None and summed is not None:
        saved = f"no overlap saved (kernels' time summed {ms(summed)}, GPU busy {ms(x.busy_us)}: their union, within 1%)"
    else:
        of_sum = "" if summed is None else f", kernels' time summed {ms(summed)}"
        saved = f"overlap saved {ms(x.saved_us)} (serial estimate {ms(x.serial_estimate_us)}, GPU busy {ms(x.busy_us)}{of_sum})"
    return f"rank {rank.rank} overlap cost: {cost}; {saved}"


def top_compute_line(rank: RankBlock, most: int = 3) -> str | None:
    top = rank.top_compute_kernels
    if not top:
        return None
    names = display_names([k.name for k in top[:most]], 50)
    shown = ", ".join(f"{name} x{k.count} {ms(k.total_us)}" for name, k in zip(names, top[:most]))
    return f"rank {rank.rank} top compute kernels: {shown}"


def comm_kernels_line(rank: RankBlock, most: int = 3) -> str:
    found = rank.comm_kernel_names
    if not found:
        return f"rank {rank.rank} communication kernels: none recognised"
    names = display_names([k.name for k in found[:most]], 60)
    shown = ", ".join(f"{name} x{k.count}" for name, k in zip(names, found[:most]))
    more = f" and {len(found) - most} more" if len(found) > most else ""
    return f"rank {rank.rank} communication kernels: {shown}{more}"


def exposure_line(rank: RankBlock) -> str | None:
    """Why one rank's comm was exposed, the largest causes first (docs/analysis.md)."""
    from dbo_trace.analysis.steps.microbatched import kernels_microbatched
    from dbo_trace.render.words.exposure import REASON_TEXT, REASON_TEXT_NO_UBATCH

    x = rank.exposed_comm_reasons
    if x is None or not x.exposed_us:
        return None
    from dbo_trace.analysis.overlap.exposure import WAITING
    from dbo_trace.analysis.afd.roles import ATTENTION

    # the round trips' (or the served) microbatches are not the kernels': the exposure was measured without them
    text = REASON_TEXT if kernels_microbatched(rank.microbatch_source) else REASON_TEXT_NO_UBATCH
    if rank.role == ATTENTION:
        # the dependency the attention's queued compute waits on is the receive of the FFN's answer
        text = {**text, WAITING: "compute was queued but waited for the FFN's answer (the round trip's receive)"}
    by_reason = dict(x.by_reason())
    parts = sorted(((t, r) for r in text if (t := by_reason.get(r) or 0) > 0), reverse=True)
    why = "; ".join(f"{ms(t)} {text[r]}" for t, r in parts)
    return f"rank {rank.rank} exposed comm {ms(x.exposed_us)}: {why}"


def cross_rank_lines(d: ReportDocument) -> list[str]:
    """The cross-rank view: who the others waited for, who waited for whom, and the notes."""
    cross = d.cross_rank
    if cross is None:
        return []
    a = cross.alignment
    how = []
    if a is not None and a.method:
        accuracy = "" if a.accuracy_us is None else f" (expected accuracy {a.accuracy_us:g} us)"
        how = [f"ranks aligned by {a.method}{accuracy}"]
    return [cross.summary, *how, *cross.lines]


def held_back_line(rank: RankBlock) -> str | None:
    """Comm kernels that waited for the other microbatch's compute to end, and why (docs/analysis.md)."""
    x = rank.held_back_comm
    if x is None or not x.kernels:
        return None
    from dbo_trace.analysis.overlap.exposure import CROWDED, HELD, LATE_RECORD

    causes = x.by_cause
    parts = []
    late = x.late_record_example
    if LATE_RECORD in causes and late is not None:  # the document holds the example with the cause
        c = causes[LATE_RECORD]
        who = f"ub{late.ubatch}'s thread" if late.ubatch >= 0 else f"thread {late.thread}"
        parts.append(
            f"{c.kernels} waited on an event recorded too late ({ms(c.delay_us)}; e.g. {late.record_call} by "
            f"{who} {ms(late.after_holder_launch_us)} after {display_names([late.holder], 40)[0]} was launched)"
        )
    if CROWDED in causes:
        c = causes[CROWDED]
        parts.append(f"{c.kernels} found no free SMs beside it ({ms(c.delay_us)}; an SM-hungry kernel)")
    if HELD in causes:
        c = causes[HELD]
        parts.append(f"{c.kernels} for a reason the trace does not show ({ms(c.delay_us)})")
    names = display_names([h.name for h in x.holders[:2]], 40)
    holders = ", ".join(f"{name} x{h.kernels}" for name, h in zip(names, x.holders[:2]))
    return (
        f"rank {rank.rank} comm held back: {x.kernels} of {x.comm_kernels_examined} comm kernels were ready "
        f"beside the other microbatch's compute but started as it ended, their starts delayed {ms(x.delay_us)} "
        f"in all (median {ms(x.median_delay_us)} each; the delays overlap each other and the compute, so they add "
        f"up past the exposed time they caused, which the exposed comm line splits): " + "; ".join(parts)
        + f". Held by: {holders}"
    )


def sm_evidence_line(rank: RankBlock) -> str | None:
    """The held-back comm's holder: its launch against the SMs (docs/analysis.md, "SM evidence")."""
    x = rank.sm_evidence if isinstance(rank.sm_evidence, SmEvidence) else None
    if x is None:
        return None
    h = x.holder

    def shape(s: LaunchShape) -> str:
        dims = ",".join(map(str, s.grid))
        regs = "-" if s.registers_per_thread is None else f"{s.registers_per_thread}"
        smem = _amount(s.shared_memory, " B")
        return (
            f"grid [{dims}] = {counted(s.ctas, 'CTA')} of {counted(s.threads, 'thread')}, {regs} registers per thread, "
            f"{smem} shared memory each"
        )

    parts = [
        f"rank {rank.rank} SM evidence: the kernel that held back {counted(x.held, 'comm kernel')}, {cut(h.name, 40)}, "
        f"ran {shape(h)}"
    ]
    if x.sms is not None and x.per_sm is not None:
        parts.append(
            f"on {x.sms} SMs, at most {x.per_sm} of its CTAs fit one SM ({num(x.waves)} wave{'' if x.waves == 1 else 's'}); "
            f"beside it an SM has {_amount(x.left_shared_memory, ' B')} shared memory, {_amount(x.left_registers)} "
            f"registers and {_amount(x.left_threads)} threads left"
        )
    if x.comm is not None:
        verdict = {
            # the counts are an upper bound: where they let it in but the trace shows it held back, say
            # which of the two is the measurement, so the line does not contradict "no free SMs" above it
            True: "fits there by these counts, yet the trace shows it did not start beside it: something these counts "
            "leave out kept it off the SMs (allocation granularities, the shared-memory carveout the holder set, "
            "the block scheduler)",
            False: "does not fit there",
            None: "cannot be placed by these counts",
        }
        parts.append(f"one CTA of the comm kernel {cut(x.comm.name, 40)} ({shape(x.comm)}) {verdict[x.comm_fits]}")
    if x.comm_sms is not None:
        parts.append(f"the recording set VLLM_DBO_COMM_SMS={x.comm_sms}")
    elif x.env_recorded:
        parts.append("VLLM_DBO_COMM_SMS was not set in the recording's environment (vLLM's default: 20 on CUDA)")
    else:
        parts.append("the recording's environment is not known (VLLM_DBO_COMM_SMS unknown)")
    return "; ".join(parts)


RANK_LINES = (time_line, contention_line, exposure_line, held_back_line, sm_evidence_line, comm_kernels_line, top_compute_line)


def ledger_lines(rank: int, b: LedgerBlock | None) -> list[str]:
    """The ledger in sentences, one per figure group (terminal and Markdown alike)."""
    if b is None:
        return []
    out = []
    if b.source is not None:
        startup = ""
        if b.startup_us is not None:
            startup = f"; thread start-up {ms(b.startup_us)} per step"
            if b.startup_gpu_idle_us:
                startup += f" ({ms(b.startup_gpu_idle_us)} of GPU idle in start-up over the steps)"
        out.append(
            f"rank {rank} DBO overhead: {num(b.yields_per_step, 0)} yields per step; hand-over (a yield to the other "
            f"microbatch's resume) median {us(b.median_handover_us)}, p90 {us(b.p90_handover_us)}, "
            f"{ms(b.handover_per_step_us)} per step{startup}; {pct(b.share)} of the step (medians over "
            f"{len([s for s in b.steps if s.handovers])} steps; from the {b.source})"
        )
    u = b.unprofiled
    if u is not None:
        out.append(
            f"rank {rank} hand-overs outside the profiled window ({u.steps} step{'' if u.steps == 1 else 's'} "
            "the event log saw, without the "
            f"profiler's cost): median {us(u.median_us)}, p90 {us(u.p90_us)}, {ms(u.per_step_us)} per step"
        )
    y = b.yield_op
    why = "a cost where DBO is off, a wait for the other microbatch where it yields"
    if y is not None and y.own_per_step_us is not None and y.wait_per_step_us is not None and (y.threads_per_step or 1) > 1:
        why = (
            f"its own cost {ms(y.own_per_step_us)} per step, every thread in it at once; "
            f"{ms(y.wait_per_step_us)} waiting for the other microbatch's turn"
        )
    if y is not None:
        if y.wall_per_step_us is not None and y.thread_per_step_us is not None and (y.threads_per_step or 1) > 1:
            # threads in it at once: the wall time, then one thread's; never their sum, which exceeds the step
            inside = (
                f"in it {ms(y.wall_per_step_us)} per step ({pct(y.wall_share)} of the step: wall time any of its "
                f"{num(y.threads_per_step, 0)} threads was), {ms(y.thread_per_step_us)} per thread ({pct(y.thread_share)})"
            )

        else:
            inside = f"{ms(y.wall_per_step_us if y.wall_per_step_us is not None else y.per_step_us)} per step in it"
        out.append(
            f"rank {rank} yield op {y.name}: {y.calls} calls, median {us(y.median_us)} each, "
            f"{num(y.per_step, 0)} per step, {inside} ({why})"
        )
    sp = b.split
    parts = []
    if sp.tokens:
        parts.append(" / ".join(num(t, 0) for t in sp.tokens) + " tokens per microbatch")
    if sp.compute_us:
        parts.append(
            "compute " + " / ".join(ms(c) for c in sp.compute_us) + f", imbalance {pct(sp.imbalance)} "
            f"({ms(sp.excess_us)} of the longer microbatch's compute the other cannot cover)"
        )
    if parts:
        out.append(f"rank {rank} split (medians over steps): " + "; ".join(parts))
    return out


def what_if_lines(d: ReportDocument) -> list[str]:
    """The model's estimates, each labelled as one (docs/analysis.md, "What-if estimates")."""
    rows = d.what_if if isinstance(d.what_if, list) else []
    return [
        f"what-if, {x.what}: {x.assumptions}"  # asked, no estimate: why (render/document/ledger.py)
        if x.predicted_us is None
        else f"what-if, {x.what}: step {ms(x.predicted_us)} against {ms(x.step_us)} measured "
        f"({'-' if x.change is None else f'{100 * x.change:+.0f}%'}); {x.assumptions}"
        for x in rows
    ]
