"""The verdict in words: its headline, each reason, the dominant finding and the next step, from the
typed verdict (analysis/verdict/decision.py). The one place a verdict's sentences are written: the document
(render/document/verdict.py) puts them beside their kinds, and every renderer prints those."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dbo_trace.analysis.host.expensive import ExpensiveCall
from dbo_trace.render.words.exposure import REASON_SHORT
from dbo_trace.analysis.host.host_time import LAUNCH, HostCauses, TopItem
from dbo_trace.analysis.overlap.queueing import CLOCK_OFFSET_US, LaunchDelay
from dbo_trace.analysis.afd.round_trips import AfdRoundTrips
from dbo_trace.analysis.afd.pipeline import StepOverlap
from dbo_trace.analysis.afd.gpu_sharing import MPS_NOT_RUNNING, TimeSlicing
from dbo_trace.analysis.steps.stalls import CAPTURE, COMPILE, Stall
from dbo_trace.analysis.verdict.decision import (
    BORDERLINE,
    GPU_BOUND_BUSY,
    HOST_BOUND_IDLE,
    OVERLAPPED_HIDDEN,
    Pays,
    HIDDEN_ROUND_TRIPS,
    Label,
    Verdict,
)
from dbo_trace.analysis.verdict.reasons import (
    AfdCriterion,
    CaptureFinding,
    CaptureReason,
    CommCrowded,
    CommOverlap,
    Criterion,
    CrowdedFinding,
    ExposedCommFinding,
    MeasurePays,
    DidNotPay,
    DidNotPayFinding,
    EnableGraphs,
    ExpensiveCalls,
    FixLateRecord,
    GpuBottleneck,
    GpuBoundFinding,
    GpuBusy,
    GraphReplays,
    HostBoundFinding,
    HostCause,
    HostIdle,
    LateRecordFinding,
    LaunchCost,
    LongGraphLaunches,
    NextStep,
    NoComm,
    NothingToOverlap,
    OneMicrobatch,
    FfnServer,
    OverlapMissing,
    OverlapWorks,
    PeerWaitFinding,
    ProfileAfterStartup,
    ProfiledThreads,
    ProfilerOverhead,
    Qualifier,
    Reason,
    RoundTripFinding,
    RoundTripsHidden,
    RunningBehind,
    StallsReason,
    StartMps,
    StepRoundTrips,
    Straggler,
    TimeSliced,
    YieldOpCost,
)
from dbo_trace.analysis.verdict.evidence_types import HostBasis, HostTest, GpuWork, StalledStep
from dbo_trace.render.words.notes import cut_name, top_item_name

NAME_MOST = 60  # an operator's name in a sentence: a compiled graph's runs to hundreds of characters


# ---- numbers in prose -----------------------------------------------------------------------------


# A label's words: the label as the document writes it (its value; the schema's Label).
LABEL_WORDS = {label: label.value for label in Label}
# What the host test divided by, as every report says it.
HOST_BASIS_WORDS = {
    HostBasis.IN_STEPS: "in-step host idle / time in steps (steps from markers)",
    HostBasis.WINDOW: "host idle / profiled window (steps inferred)",
}


def label_text(label: Label) -> str:
    return LABEL_WORDS[label]


def host_basis_text(basis: HostBasis) -> str:
    return HOST_BASIS_WORDS[basis]


def pct_text(x: float | None) -> str:
    """A share in prose ("n/a" where there is none); tables print "-" (render/format/numbers.py pct)."""
    return "n/a" if x is None else f"{100 * x:.0f}%"


def counted(n: int, noun: str) -> str:
    """A count with its noun in the right number, digits grouped: "1 gap", "2,401 gaps", "1 launch"."""
    plural = noun if n == 1 else (noun + "es" if noun.endswith(("s", "sh", "ch", "x")) else noun + "s")
    return f"{n:,} {plural}"


def ms(us: float) -> str:
    return f"{us / 1000:.2f} ms"


# ---- what analysis measured, in words ------------------------------------------------------------------


def host_cause_text(causes: HostCauses | None) -> str | None:
    """The host-bound headline's cause: the largest item of the host-time split, with its share
    ("61% of it in gpu_model_runner: preprocess", "4% of it launch calls"). Names are cut: a
    compiled graph's operator name runs to hundreds of characters."""
    top = causes.top if causes is not None else None
    if causes is None or top is None or causes.host_idle_us <= 0:
        return None
    return _cause_text(top, causes.host_idle_us)


def _cause_text(top: TopItem, host_idle_us: float) -> str:
    where = top_item_name(top) if top.name is None else f"in {cut_name(top_item_name(top), 48)}"
    return f"{100 * top.us / host_idle_us:.0f}% of it {where}"


def stall_text(st: Stall) -> str:
    """A stall's cause in words, with its numbers."""
    if st.cause == COMPILE:
        names = ", ".join(r.name for r in st.compile_ranges)
        return f"compile/JIT {st.compile_us / 1000:.2f} ms ({names})" if names else f"compile/JIT {st.compile_us / 1000:.2f} ms"
    if st.cause == CAPTURE:
        return f"graph capture {st.capture_us / 1000:.2f} ms"
    if st.phase_median_us:
        return f"outlier ({(st.extra_us or 0.0) / st.phase_median_us + 1:.1f}x its phase's median)"
    return "outlier"


def expensive_text(e: ExpensiveCall) -> str:
    kind = "range" if e.annotation else "CPU op"
    n = e.calls_per_step
    per_step = "" if n is None else f", {n:.0f} calls per step" if n == round(n) or n >= 10 else f", {n:.1f} calls per step"
    share = f", {100 * e.step_share:.0f}% of the step time" if e.step_share is not None else ""
    if e.step_share is not None and e.thread_share is not None and (e.threads_per_step or 1) > 1:
        # several threads in it at once (the microbatch threads): wall time, and a thread's own
        share = (
            f", in it {100 * e.step_share:.0f}% of the step time (wall time any of its "
            f"{e.threads_per_step:.0f} threads was), {100 * e.thread_share:.0f}% per thread"
        )
    return (
        f"{cut_name(e.name, NAME_MOST)} ({kind}) {e.median_us / 1000:.2f} ms per call (median of {e.calls:,}){per_step}{share}; "
        f"the GPU work it launched {e.kernel_us_per_call:.0f} us per call"
        + (" (with microbatches a yield's call also holds the other microbatch's turn)" if e.yields else "")
    )


MPS_ADVICE = (
    "start the MPS control daemon (nvidia-cuda-mps-control -d, with CUDA_MPS_PIPE_DIRECTORY and "
    "CUDA_MPS_LOG_DIRECTORY set for both servers) so that both roles run on the GPU at once"
)


def _slicing_figures(ts: TimeSlicing) -> str:
    ffn = f", less the FFN's {ts.ffn_compute_us / 1000:.2f} ms compute," if ts.ffn_compute_us else ""
    whose = f"microbatch {ts.microbatch}'s round trips (the one that waited most): " if ts.microbatch is not None else ""
    return (
        f"{whose}a round trip takes {ts.round_trip_us / 1000:.2f} ms; its receive kernel waits "
        f"{ts.receive_us / 1000:.2f} ms{ffn} against a {ts.send_us:.0f} us send ({ts.ratio or 0.0:.0f}x its transfer)"
    )


def _slicing_head(ts: TimeSlicing) -> str:
    mps = "MPS not running" if ts.mps_daemon == MPS_NOT_RUNNING else "no MPS daemon seen answering"
    if ts.shared_gpu:
        return f"both roles share one GPU ({mps}) and their CUDA contexts time-slice it"
    return f"the round trip is far above its transfer: if both roles share one GPU ({mps}), their CUDA contexts time-slice it"


def time_slicing_text(ts: TimeSlicing) -> str | None:
    """The roles' GPU sharing in one line where they time-slice it (None where they do not): the
    roles block's, which says what to do too."""
    if not ts.sliced or ts.ratio is None:
        return None
    return f"{_slicing_head(ts)}: {_slicing_figures(ts)}; {MPS_ADVICE}"


def running_behind_text(delay: LaunchDelay) -> str:
    """The GPU ran behind the host: the idle that was not the host's, and the lag."""
    share = delay.queued_in_host_idle_us / delay.window_us if delay.window_us > 0 else 0.0
    grew = (
        f"grew from {delay.first_us / 1000:.2f} ms to {delay.last_us / 1000:.2f} ms over the window"
        if delay.last_us > delay.first_us + max(CLOCK_OFFSET_US, 0.1 * delay.first_us)
        else f"was {delay.first_us / 1000:.2f} ms at the first activity and {delay.last_us / 1000:.2f} ms at the last"
    )
    return (
        f"the GPU ran behind the host: {delay.queued_in_host_idle_us / 1000:.2f} ms ({100 * share:.0f}% of the "
        f"window) of GPU idle came after its next work had been launched, so it is not counted as waiting for "
        f"the host; the lag from launch to start {grew}" + _queue_or_clocks(delay)
    )  # fmt: skip


def _queue_or_clocks(delay: LaunchDelay) -> str:
    """Whether the lag is a queue or the clocks, as far as the events tell (analysis/host/gpu_clock.py)."""
    b = delay.clocks
    if b is not None and b.consistent and b.upper_us is not None and not b.wide:
        how = f" and {counted(b.blocking_calls, 'blocking call')}" if b.blocking_calls and b.lower_us is not None else ""
        lo = f"{b.lower_us:+.0f}" if b.lower_us is not None else "?"
        return f" (the launches{how} pin the GPU clock's offset to {lo}..{b.upper_us:+.0f} us: a queue, not an offset)"
    if b is not None and b.wide and b.gpu_behind and b.upper_us is not None:
        return (
            f" (the clocks allow an offset of at most {b.upper_us / 1000:.2f} ms, and the lag grew: a queue, queued "
            "behind work from before the window)"
        )
    if delay.clock_offset_suspect:
        return " (never under 1 ms: queued behind work from before the window, or the GPU's clock offset from the CPU's)"
    return ""


def round_trip_text(afd: AfdRoundTrips, overlap: StepOverlap | None = None) -> str:
    """The disaggregated round trip in words: how much of it overlapped the other microbatch, and, where
    the pipeline measured them, the step's three overlap figures (docs/analysis.md, "The step as a
    pipeline (AFD)")."""
    per = f"{afd.per_step:.0f} per step" + (f", {afd.per_layer:.1f} per layer" if afd.per_layer else "")
    less = ", less the host's lag," if afd.host_lag_total_us > 0 else ""
    head = f"{pct_text(afd.overlapped_share)} of the FFN round trips' time{less} overlapped the other microbatch"
    if not afd.microbatched:
        head = "one microbatch: each FFN round trip exposed whole, its send and receive back to back"
    elif overlap is not None:
        exposed = f", {ms(overlap.exposed_us)} of comm exposed" if overlap.exposed_us is not None else ""
        head += (
            f": per step {ms(overlap.hidden_us)} under its compute, {ms(overlap.beside_us)} beside its round trip"
            f"{exposed}"
        )
    else:
        head += f" ({pct_text(afd.hidden_share)} under its compute)"
    lag = ""
    if afd.host_lag_total_us > 0 and afd.host_lag_median_us > 0:
        op = f", in {cut_name(afd.lag_op[0], NAME_MOST)}" if afd.lag_op is not None and afd.lag_op[1] >= 0.5 else ""
        lag = f", of it {ms(afd.host_lag_median_us)} the host's lag before the receive's launch{op}"
    return f"{head} ({per}, median {ms(afd.median_us)}{lag})"


ITS_STEADY_TIME = "its steady steps' time"


def _work_time(w: GpuWork) -> str:
    return f"the {w.phase} phase's steady steps' time" if w.phase else "the steady steps' time"


# ---- dispatch by type -----------------------------------------------------------------------------


def _by_type(table: dict[type, Callable[[Any], str]], x: object) -> str:
    write = table.get(type(x))
    if write is None:
        raise TypeError(f"no wording for {type(x).__name__}")
    return write(x)


# ---- reasons ------------------------------------------------------------------------------------


def _borderline(share: float, line: float, between: str) -> str:
    return (
        f"; borderline: {100 * share:.1f}% is within {100 * BORDERLINE:.0f} points of the {100 * line:.0f}% line between "
        f"{between}; a window on the other side of it by as little is alike, not different"
    )


def _capture(r: CaptureReason) -> str:
    line = (
        f"graph capture: {r.captured_launches} launches in {r.windows} captures were recorded into graphs, not run "
        f"({r.capture_us / 1000:.2f} ms capturing; {pct_text(r.share)} of the GPU's host-idle time)"
    )
    return f"the trace is mostly {line}" if r.dominant else line


def _stalled_step(s: StalledStep) -> str:
    st = s.stall
    where = f"rank {s.rank} step {s.number}" if s.rank is not None else f"step {s.number}"
    cost = f", +{st.extra_us / 1000:.2f} ms" if st.extra_us is not None and st.extra_us > 0 else ""
    host = _cause_text(*s.host_cause) if s.host_cause is not None and s.host_cause[1] > 0 else None
    frame = s.frame
    python = (
        f"; Python sampled there: {frame.us / frame.sampled_us:.0%} in {frame.project}"
        if frame is not None and frame.project and frame.sampled_us > 0
        else ""
    )
    return (
        f"{where} ({s.phase or 'step'}, {s.period_us / 1000:.2f} ms{cost}): {stall_text(st)}"
        + (f", GPU idle for the host: {host}" if host else "")
        + python
    )


def _stalls(r: StallsReason) -> str:
    s = r.stalls
    more = f"; {s.stalled - len(s.named)} more" if s.stalled > len(s.named) else ""
    return (
        f"stalls, left out of the verdict: {s.stalled} of {s.steps} {'step' if s.steps == 1 else 'steps'} "
        f"({s.extra_us / 1000:.2f} ms beyond their phases' steady medians): " + "; ".join(map(_stalled_step, s.named)) + more
    )


def _host_basis(t: HostTest | None) -> str:
    if t is None:
        return ""
    measured = (
        f"{t.host_idle_us / 1000:.2f} of {t.measured_us / 1000:.2f} ms, "
        if t.host_idle_us is not None and t.measured_us is not None
        else ""
    )
    return f" ({measured}{host_basis_text(t.basis)})"


def _host_idle(r: HostIdle) -> str:
    whose = f"the {r.role}'s " if r.role else ""
    text = (
        f"{whose}GPU idle waiting for the host {'at most ' if r.upper_bound else ''}{pct_text(r.fraction)}{_host_basis(r.test)}; over the "
        f"window {r.window_idle_us / 1000:.2f} ms in {counted(r.gaps, 'gap')} whose next kernel was launched after the "
        f"GPU went idle; GPU busy {pct_text(r.utilization)} of the window"
        + ("; an upper bound: the trace is incomplete (sampled or cut), and GPU work it lacks may fill that idle"
           if r.upper_bound else "")
    )  # fmt: skip
    for o in r.apart:  # the roles share one GPU: each role's own, never added
        text += (
            f"; the {o.role} apart (the roles share one GPU: their figures are not added): GPU idle waiting for the host "
            f"{pct_text(o.fraction) if o.fraction is not None else '-'}{_host_basis(o.test)}, GPU busy {pct_text(o.utilization)} of its window"
        )  # fmt: skip
    return text + (_borderline(r.fraction, HOST_BOUND_IDLE, f"{label_text(Label.HOST_BOUND)} and not") if r.borderline else "")


def _expensive(r: ExpensiveCalls) -> str:
    return "expensive calls (far more per call than the GPU work they launch): " + "; ".join(map(expensive_text, r.calls))


def _launch(r: LaunchCost) -> str:
    medians = (
        f"median launch call {r.median_launch_us:.1f} us against median kernel {r.median_kernel_us:.1f} us "
        f"({counted(r.launches, 'launch')} in all, {r.launch_us / 1000:.2f} ms of launch calls)"
    )
    c = r.causes
    if c is None:
        return medians
    share = pct_text(c.share(LAUNCH))
    # the share's own numbers, from the breakdown it comes from (the host-time split), never the window's
    of = f"{c.us(LAUNCH) / 1000:.2f} of {c.host_idle_us / 1000:.2f} ms, in {counted(c.launch_calls, 'call')}"
    if c.launches_lead:  # launching is named as the cause only where launch calls are the largest cause
        return f"the host spent most of the GPU's idle time launching kernels ({share} of it in launch calls: {of}); {medians}"
    return f"launch calls are {share} of the host-caused GPU idle ({of}), not its main cause; {medians}"


def _busy(w: GpuWork, of: str) -> str:
    """The GPU-bound test's share: GPU busy, exposed comm left out (said where there was some)."""
    return f"GPU busy {pct_text(w.share)} of {of}" + (", exposed comm left out" if w.comm_exposed_us > 0 else "")


def _gpu_busy(r: GpuBusy) -> str:
    w = r.work
    text = (
        f"{_busy(w, _work_time(w))} ({w.working_us / 1000:.2f} of {w.span_us / 1000:.2f} ms "
        f"over {counted(w.steps, 'step')})"
    )
    return text + (_borderline(w.share or 0.0, GPU_BOUND_BUSY, f"{label_text(Label.GPU_BOUND)} and {label_text(Label.NO_COMMUNICATION)}") if r.borderline else "")


def _comm_overlap(r: CommOverlap) -> str:
    text = (
        f"{pct_text(r.hidden)} of communication ({r.hidden_us / 1000:.2f} of {r.busy_us / 1000:.2f} ms) "
        f"ran concurrently with compute; {r.exposed_us / 1000:.2f} ms exposed"
    )
    if r.cross is not None:
        text += f"; {pct_text(r.cross)} under the other microbatch's compute"
    x = r.split
    if x is not None and x.hidden_wait_us + x.hidden_transfer_us > 0 and x.transfer_us > 0:
        of = "of the matched collectives' hidden time" if x.partial else "of the hidden comm"
        text += (
            f"; {of}, {x.hidden_wait_us / 1000:.2f} ms was waiting for a peer rank: "
            f"{pct_text(x.hidden_share_of_transfer)} of the transfer ({x.hidden_transfer_us / 1000:.2f} of "
            f"{x.transfer_us / 1000:.2f} ms) ran under compute"
        )
    if r.borderline and r.hidden is not None:
        text += _borderline(r.hidden, OVERLAPPED_HIDDEN, _overlap_labels(r.cross is not None))
    return text


def _round_trips_hidden(r: RoundTripsHidden) -> str:
    text = (
        f"disaggregated: {round_trip_text(r.afd, r.overlap)}; kernel overlap cannot see it (the tables' hidden is a dash "
        "here): the sends and receives run on the compute stream"
    )
    if r.borderline:
        text += _borderline(r.afd.overlapped_share or 0.0, OVERLAPPED_HIDDEN, _overlap_labels(r.afd.microbatched))
    return text


def _overlap_labels(microbatched: bool) -> str:
    other = Label.NOT_OVERLAPPED if microbatched else Label.SINGLE_BATCH
    return f"{label_text(Label.OVERLAPPED)} and {label_text(other)}"


def _step_round_trips(r: StepRoundTrips) -> str:
    text = (
        f"disaggregated: {pct_text(r.share)} of its FFN round trips' time overlapped the other microbatch (under its "
        "compute or beside its round trip)"
    )
    return text + (_borderline(r.share, OVERLAPPED_HIDDEN, f"{label_text(Label.OVERLAPPED)} and {label_text(Label.NOT_OVERLAPPED)}") if r.borderline else "")


def _criterion(r: Criterion) -> str:
    """The round-trip criterion says what *could* hide; it must not read as success where nothing did."""
    rt = r.round_trips
    head = (
        f"per-microbatch compute {rt.compute_per_round_trip_us:.0f} us against a comm round trip of "
        f"{rt.comm_per_round_trip_us:.0f} us (ratio {rt.ratio:.2f})"
    )
    if r.host_bound:
        text = f"{head}: moot while the step is host-bound; fix the host side first"
    else:
        could = "could hide the whole round trip" if rt.criterion_met else f"could hide at most {pct_text(rt.ratio)} of it"
        if r.hidden is None or r.hidden < OVERLAPPED_HIDDEN:
            text = f"{head}: the other microbatch's compute {could}, but only {pct_text(r.hidden)} did"
        else:
            text = f"{head}: the other microbatch's compute {could}"
    if r.peers_split and rt.wait_per_round_trip_us is not None:
        transfer = rt.transfer_per_round_trip_us or 0.0
        ratio = rt.compute_per_round_trip_us / transfer if transfer > 0 else None
        against = f"; against the transfer alone the ratio is {ratio:.2f}" if ratio is not None else ""
        text += (
            f" (the round trip's comm, medians over steps: transfer {transfer:.0f} us, "
            f"waiting for a peer rank {rt.wait_per_round_trip_us:.0f} us{against})"
        )
    return text


def _afd_criterion(r: AfdCriterion) -> str:
    a = r.afd
    ratio = a.criterion_ratio or 0.0
    met = "could cover" if a.criterion_met else f"could cover at most {pct_text(ratio)} of"
    return (
        f"per-microbatch compute {(a.compute_per_microbatch_us or 0.0) / 1000:.2f} ms per layer against a round trip's "
        f"exposed {a.median_exposed_us / 1000:.2f} ms (ratio {ratio:.2f}, medians): one microbatch's compute {met} "
        "the other's round trip; a bound on what can hide, not whether DBO pays"
    )


def _long_graph_launches(r: LongGraphLaunches) -> str:
    return f"{counted(r.count, r.api.lower() + 'GraphLaunch call')} took >= 1 ms (longest {r.longest_us / 1000:.2f} ms)"


def _graph_replays(r: GraphReplays) -> str:
    return f"{r.api} graphs replayed: {counted(r.launches, 'launch')}, {pct_text(r.replayed)} of kernels"


def _profiler_overhead(r: ProfilerOverhead) -> str:
    if r.host_bound:
        why = "the host-bound verdict may be partly the profiler's own doing"
    else:
        why = "the host time reported may be partly the profiler's own"
    return (
        f"{why}: the profiler stretched each step by {100 * r.overhead:.0f}% (it records every CPU op, every "
        "thread's where profile_all_threads is on); the unprofiled steps are the run's"
    )


_REASONS: dict[type, Callable[[Any], str]] = {
    TimeSliced: lambda r: f"{_slicing_head(r.slicing)}: {_slicing_figures(r.slicing)}",
    RunningBehind: lambda r: (f"rank {r.rank}: " if r.rank is not None else "") + running_behind_text(r.delay),
    CaptureReason: _capture,
    StallsReason: _stalls,
    HostIdle: _host_idle,
    ExpensiveCalls: _expensive,
    LaunchCost: _launch,
    ProfiledThreads: lambda r: (
        "the microbatch threads were profiled (profile_all_threads): the profiler's own CPU cost adds host time"
    ),
    ProfilerOverhead: _profiler_overhead,
    GpuBusy: _gpu_busy,
    NoComm: lambda r: "no communication kernel ran (see --comm-kernels / --comm-stream if yours are not recognised)",
    CommOverlap: _comm_overlap,
    RoundTripsHidden: _round_trips_hidden,
    StepRoundTrips: _step_round_trips,
    LongGraphLaunches: _long_graph_launches,
    GraphReplays: _graph_replays,
    Criterion: _criterion,
    AfdCriterion: _afd_criterion,
}


def reason_text(r: Reason) -> str:
    return _by_type(_REASONS, r)


# ---- the headline -----------------------------------------------------------------------------------


def _did_not_pay(saved_us: float, serial_us: float) -> str:
    if saved_us > 0:
        return f"overlap saved {ms(saved_us)} of a {ms(serial_us)} serial estimate, {pct_text(saved_us / serial_us)}"
    return f"overlap saved nothing of a {ms(serial_us)} serial estimate"  # never negative (contention.py)


def _host_bound(q: HostBoundFinding) -> str:
    cause = host_cause_text(q.causes)
    return f"GPU idle waiting for the host {pct_text(q.fraction)}" + (f": {cause}" if cause else "")


def _gpu_bound(q: GpuBoundFinding) -> str:
    w = q.work
    return f"{w.phase}: {_busy(w, ITS_STEADY_TIME)}" if w.phase else _busy(w, _work_time(w))


def _peer_wait(q: PeerWaitFinding) -> str:
    return f"waiting for {f'rank {q.rank}' if q.rank is not None else 'a peer rank'}: {ms(q.wait_us)}"


_QUALIFIERS: dict[type, Callable[[Any], str]] = {
    CaptureFinding: lambda q: f"{pct_text(q.share)} of the GPU's host-idle time was the host capturing graphs",
    HostBoundFinding: _host_bound,
    GpuBoundFinding: _gpu_bound,
    LateRecordFinding: lambda q: f"comm held back by a late event record: {ms(q.exposed_us)} of comm exposed",
    PeerWaitFinding: _peer_wait,
    RoundTripFinding: lambda q: round_trip_text(q.afd, q.overlap),
    DidNotPayFinding: lambda q: f"DBO did not pay: {_did_not_pay(q.saved_us, q.serial_estimate_us)}",
    CrowdedFinding: lambda q: f"comm held back by SM-hungry compute: {ms(q.exposed_us)} of comm exposed",
    ExposedCommFinding: lambda q: (
        f"comm exposed {ms(q.per_step_us)} per step, {pct_text(q.share)} of the step"
    ),
}


def qualifier_text(q: Qualifier) -> str:
    return _by_type(_QUALIFIERS, q)


def headline(v: Verdict) -> str:
    """The first line of every report: the label, and the dominant finding in brackets (a GPU-bound
    finding beside another label says so)."""
    q = v.qualifier
    if q is None:
        return label_text(v.label)
    text = qualifier_text(q)
    if isinstance(q, GpuBoundFinding) and v.label != Label.GPU_BOUND:
        text = f"GPU-bound: {text}"
    return f"{label_text(v.label)} ({text})"


# ---- the next step ---------------------------------------------------------------------------------


def _start_mps(n: StartMps) -> str:
    return f"{MPS_ADVICE}: {_slicing_figures(n.slicing)}"


def _yield_op(n: YieldOpCost) -> str:
    y = n.ops
    if y.wall_per_step_us is not None and y.wall_share is not None:  # the wall time any thread was in it
        inside = f"in it {ms(y.wall_per_step_us)} per step, {pct_text(y.wall_share)} of the step"
    else:
        inside = f"{ms(y.per_step_us)} per step in it"
    if not n.microbatched:
        why = "DBO is off: one microbatch, no turn to wait for, so all of it is the op's own cost"
    elif y.own_per_step_us is not None and y.wait_per_step_us is not None and (y.threads_per_step or 0) >= 2:
        why = (
            f"with DBO on: its own cost {ms(y.own_per_step_us)} per step (both microbatch threads in it), "
            f"{ms(y.wait_per_step_us)} waiting for the other microbatch's turn"
        )
    else:
        why = "with DBO on a call also waits for the other microbatch's turn"
    return (
        f"the yield op {cut_name(y.name, NAME_MOST)} costs {ms(y.median_us)} per call, {y.per_step:.0f} calls per step, "
        f"{inside}: {pct_text(n.share)} of the GPU's host-caused idle ({why})"
    )


def _enable_graphs(n: EnableGraphs) -> str:
    return (
        f"enable {n.graph_api} graphs: the GPU waited for the host {pct_text(n.host_fraction)} of the time and no graph "
        f"was replayed; {pct_text(n.skipped)} of that wait was launch calls, CPU operators and microbatch thread "
        "start-up, which a replay of the captured step skips"
    )


def _host_cause(n: HostCause) -> str:
    replays = f" ({pct_text(n.replayed)} of kernels from graph replays)" if n.replayed is not None else ""
    cause = _cause_text(n.largest, n.host_idle_us) if n.largest is not None and n.host_idle_us > 0 else None
    largest = f"; start with its largest part: {cause}" if cause else ""
    if n.untraced_leads:  # what the profiler does not see, sampled stacks do
        largest += " (Python the profiler records nothing for: py-spy's samples, report --host-stacks, name it)"
    return f"the host kept the GPU waiting {pct_text(n.host_fraction)} of the time{replays}{largest}"


def _gpu_bottleneck(n: GpuBottleneck) -> str:
    w = n.work
    share = w.share or 0.0
    top = ""
    if n.top_kernel is not None:
        name, of_kernels = n.top_kernel
        top = f"; the kernel with the most GPU time, {cut_name(name, NAME_MOST)}, is {pct_text(of_kernels)} of kernel time"
    return (
        f"the GPU is the bottleneck: {_busy(w, _work_time(w))}; overlap or the host can win back "
        f"at most the other {pct_text(1.0 - share)}{top}"
    )


def _nothing_to_overlap(n: NothingToOverlap) -> str:
    return (
        "DBO has nothing to hide: no communication kernel ran; if this run communicates, name its kernels "
        "(--comm-kernels, --comm-stream)"
    )


def _measure_pays(n: MeasurePays, dbo_given: bool = False) -> str:
    per = "per layer" if n.disaggregated else "per round trip"
    trip = (
        f"the other's round trip ({ms(n.round_trip_us)} exposed per round trip, median)"
        if n.disaggregated
        else f"a comm round trip ({ms(n.round_trip_us)} of comm per round trip, median)"
    )
    return (
        f"measure whether DBO pays: record the same load with DBO off ({COMPARE_ADVICE}); this arm alone "
        f"cannot tell: one microbatch's compute ({ms(n.compute_us)} {per}) hides at most {pct_text(n.ratio)} of {trip}, "
        "and what DBO costs is only seen against the arm without it"
        + ("; --what-if dbo=off predicts it from this arm (a model, with its interval)"
           if n.disaggregated and not dbo_given else "")  # fmt: skip
    )


COMPARE_ADVICE = "dbo-trace compare OFF ON, or dbo-trace sweep"


def pays_text(p: Pays) -> str:
    """Does DBO pay, in words: from one arm, not measured, with the two sides of the balance it shows."""
    if p.hidden_per_step_us is None:
        hid = "what it hid is not measured"
    elif p.hidden_of == HIDDEN_ROUND_TRIPS and p.beside_per_step_us is not None:
        exposed = f", with {ms(p.exposed_per_step_us)} of comm exposed" if p.exposed_per_step_us is not None else ""
        hid = (
            f"per step the FFN round trips ran {ms(p.hidden_per_step_us)} under the other microbatch's compute and "
            f"{ms(p.beside_per_step_us)} beside its round trip{exposed}"
        )
    elif p.hidden_of == HIDDEN_ROUND_TRIPS:
        hid = f"the other microbatch's compute hid {ms(p.hidden_per_step_us)} of FFN round trips per step"
    else:
        hid = f"the other microbatch's compute hid {ms(p.hidden_per_step_us)} of comm per step"
    parts = [
        (label, us)
        for label, us in (
            ("hand-overs", p.handover_per_step_us), ("thread start-up", p.startup_per_step_us),
            ("the yield op's own cost (both microbatch threads in it, hand-overs included)", p.yield_op_per_step_us),
            ("microbatch imbalance", p.imbalance_per_step_us),
        )
        if us is not None
    ]  # fmt: skip
    if p.costs_known:
        costs = "DBO's own costs per step (medians, the ledger): " + ", ".join(f"{label} {ms(us)}" for label, us in parts)
        if p.yield_wait_per_step_us:
            costs += f" (in the yield op besides: {ms(p.yield_wait_per_step_us)} waiting for the other microbatch's turn, its work)"
    else:
        costs = "DBO's own costs are not in this trace (a graph replay runs no microbatch thread)"
    return f"not measured from one arm: {hid}; {costs}; the same load with DBO off settles it: {COMPARE_ADVICE}"


def _crowded(n: CommCrowded) -> str:
    holder = f" ({cut_name(n.holder, 60)})" if n.holder else ""
    return (
        f"comm waited for free SMs: {ms(n.finding.exposed_us)} of comm exposed behind SM-hungry compute{holder}; SMs kept for "
        "comm (VLLM_DBO_COMM_SMS) let it start, and --what-if sms=N estimates the step with them"
    )


def _overlap_works(n: OverlapWorks) -> str:
    left = ""
    if n.largest_exposed is not None:
        reason, us = n.largest_exposed
        left = f"; what stays exposed is mostly {REASON_SHORT.get(reason, reason)} ({ms(us)})"
    return f"overlap works: {pct_text(n.hidden)} of comm hidden{left}"


def _one_microbatch(n: OneMicrobatch, dbo_given: bool = False) -> str:
    share = n.exposed_us / n.span_us if n.span_us > 0 else None
    per_step = f"{ms(n.exposed_per_step_us)} per step, " if n.exposed_per_step_us is not None else ""
    head = f"one microbatch per step: comm exposed {per_step}{ms(n.exposed_us)} over the window, {pct_text(share)} of it"
    if n.afd is not None:
        return (
            f"{head} (FFN round trips of {ms(n.afd.median_us)}, median, {n.afd.per_step:.0f} per step); whether a second "
            f"microbatch hides enough of it to pay for itself is measured by recording the same load with DBO on "
            f"({COMPARE_ADVICE})" + ("" if dbo_given else ", and predicted from this arm by a model: --what-if dbo=on")
        )
    return (
        f"{head}; nothing ran beside it to hide it: hiding it takes independent work beside it (a second "
        "microbatch, as DBO runs, or comm on its own stream)"
    )


def _ffn_server(n: FfnServer) -> str:
    share = n.exposed_us / n.span_us if n.span_us > 0 else None
    return (
        f"this rank serves the FFN: its comm ({ms(n.exposed_us)} exposed, {pct_text(share)} of the window) is its receives "
        "of the attention's requests, each running until the next request comes, and the sends of its answers; the "
        "round trip and what DBO hides of it are the attention rank's to say"
    )


_NEXT: dict[type, Callable[[Any], str]] = {
    ProfileAfterStartup: lambda n: (
        f"profile after start-up: {pct_text(n.finding.share)} of the GPU's host-idle time here was the host capturing graphs, "
        "whose launches are recorded, not run"
    ),
    StartMps: _start_mps,
    YieldOpCost: _yield_op,
    EnableGraphs: _enable_graphs,
    HostCause: _host_cause,
    GpuBottleneck: _gpu_bottleneck,
    NothingToOverlap: _nothing_to_overlap,
    FixLateRecord: lambda n: (
        f"record the comm's event before the other microbatch's compute is queued: {ms(n.finding.exposed_us)} of comm waited "
        "on an event recorded after it (late record)"
    ),
    Straggler: lambda n: f"look at {f'rank {n.finding.rank}' if n.finding.rank is not None else 'the slowest peer rank'} "
    f"first: {ms(n.finding.wait_us)} of comm was waiting for it",
    MeasurePays: _measure_pays,
    CommCrowded: _crowded,
    DidNotPay: lambda n: (
        f"DBO did not pay: {_did_not_pay(n.finding.saved_us, n.finding.serial_estimate_us)}; the overlapped kernels ran slower "
        "by about what overlap hid"
    ),
    OverlapMissing: lambda n: (
        f"overlap is missing: {pct_text(n.hidden)} of comm hidden, {ms(n.exposed_us)} exposed; the exposed-comm line says "
        "what held it back"
    ),
    OneMicrobatch: _one_microbatch,
    FfnServer: _ffn_server,
    OverlapWorks: _overlap_works,
}


def next_step_text(n: NextStep, dbo_given: bool = False) -> str:
    """The next step in words; dbo_given: --what-if dbo=on|off was given, so the step suggests no
    --what-if dbo= (the recording that settles it stays)."""
    if isinstance(n, OneMicrobatch):
        return _one_microbatch(n, dbo_given)
    if isinstance(n, MeasurePays):
        return _measure_pays(n, dbo_given)
    return _by_type(_NEXT, n)


def _check_complete() -> None:
    """Every kind has its words (a new kind without them fails at import, not in a report)."""
    from dbo_trace.analysis.verdict import reasons as verdict

    for base, table in ((verdict.Reason, _REASONS), (verdict.Qualifier, _QUALIFIERS), (verdict.NextStep, _NEXT)):
        kinds = {c for c in vars(verdict).values() if isinstance(c, type) and issubclass(c, base) and c is not base}
        missing = kinds - set(table)
        assert not missing, f"no wording for {sorted(c.__name__ for c in missing)}"


_check_complete()
