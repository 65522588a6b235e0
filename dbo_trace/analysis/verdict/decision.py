"""The verdict: the evidence in, one decision, a Verdict out (docs/analysis.md, "Verdict").

`decide(evidence)` picks the label by one order of precedence, lists the reasons (each typed: its
kind and figures, and whether a share decided it within BORDERLINE of its line), names the dominant
finding and the one next step the evidence supports. Nothing edits a Verdict afterwards: what a
later analysis measures (a peer's waits, the round trips' parts) is evidence before the one decision,
and a step's, a phase's, a rank's and the run's verdicts are all made here. Their words are
render/words/verdict.py's. How the window's comm could overlap is the evidence's overlap model
(verdict/evidence_types.py OverlapModel: the kernels', or round trips between two sides), which
decide() asks without knowing which it is.

Labels, in order of precedence (docs/analysis.md explains each threshold):
  graph-capture     host-bound, with most of the GPU's host-idle time inside graph captures
  host-bound        the GPU sat idle waiting for launches for >= HOST_BOUND_IDLE of the time measured
                    (a rank: in-step time where steps are markers, else the whole window)
  gpu-bound         no communication, and the main phase's steady steps kept the GPU working for
                    >= GPU_BOUND_BUSY of their time
  no-communication  no communication kernel ran
  overlapped        >= OVERLAPPED_HIDDEN of the overlap model's share: comm time concurrent with
                    compute, or a round-trip model's time under the other microbatch's compute
  single-batch      otherwise, where no step ran two microbatches: the overlap question has no subject
  not-overlapped    otherwise

Apart from the label, a microbatched run's verdict answers whether DBO pays (`pays`): from one arm
it is not measured (its hidden time and DBO's own costs, and the recording that would settle it);
the wall clock of the same load with DBO off (`dbo-trace compare`) answers it.
"""

from __future__ import annotations

from dataclasses import dataclass

from dbo_trace.analysis.compare.unprofiled import OVERHEAD_LARGE
from dbo_trace.analysis.host.host_time import CPU_OP, LAUNCH, OTHER_CALL, STARTUP, UNTRACED, HostCauses
from dbo_trace.analysis.ledger import YIELD_OP
from dbo_trace.analysis.metrics import WindowMetrics
from dbo_trace.analysis.overlap.kernel_model import KERNEL_OVERLAP
from dbo_trace.analysis.verdict.evidence_types import HIDDEN_COMM as HIDDEN_COMM
from dbo_trace.analysis.verdict.evidence_types import HIDDEN_ROUND_TRIPS as HIDDEN_ROUND_TRIPS
from dbo_trace.analysis.verdict.evidence_types import HiddenOf
from dbo_trace.analysis.verdict.evidence_types import Evidence, GpuWork, OverlapModel, _Word, gpu_work_of
from dbo_trace.analysis.verdict.reasons import (
    CaptureFinding,
    CaptureReason,
    CommCrowded,
    CrowdedFinding,
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
    LateRecordFinding,
    LaunchCost,
    LongGraphLaunches,
    NextStep,
    NoComm,
    NothingToOverlap,
    OverlapMissing,
    OverlapWorks,
    PeerWaitFinding,
    ProfileAfterStartup,
    ProfiledThreads,
    ProfilerOverhead,
    Qualifier,
    Reason,
    RunningBehind,
    StallsReason,
    StartMps,
    Straggler,
    TimeSliced,
    YieldOpCost,
    host_idle_of,
)


class Label(_Word):
    """A verdict's label, by the order of precedence above. Its value is the document's (the schema's
    Label); its words are render's (render/words/verdict.py)."""

    GRAPH_CAPTURE = "graph-capture"
    HOST_BOUND = "host-bound"
    GPU_BOUND = "gpu-bound"
    NO_COMMUNICATION = "no-communication"
    OVERLAPPED = "overlapped"
    SINGLE_BATCH = "single-batch"  # comm, one microbatch per step: nothing of the step could overlap it by DBO
    NOT_OVERLAPPED = "not-overlapped"


LABELS = tuple(label.value for label in Label)

HOST_BOUND_IDLE = 0.5  # "the GPU mostly waits on the host"
HOST_NOTABLE_IDLE = 0.2  # worth a reason even when not host-bound
GPU_BOUND_BUSY = 0.8  # the GPU worked (busy, exposed comm left out) this share of the steady steps' time
OVERLAPPED_HIDDEN = 0.2  # partial overlap is overlap; its share is stated
CAPTURE_DOMINANT = 0.5  # of the window's host-idle time inside capture windows
# A share this close to a line decides the label but says so: 20.05% and 19.83% hidden are alike,
# whatever side of 20% each falls (one rule for steps and runs alike).
BORDERLINE = 0.02
HEADLINE_SHARE = 0.05  # a held-back cause or a peer wait is named when it costs >= this share of the window
PAID_LITTLE = 0.05  # "DBO did not pay": overlap saved < this share of the serial estimate
# Of the host-caused idle, the share a graph replay skips (launch calls, other CUDA calls, CPU
# operators, microbatch thread start-up) at least this: "enable graphs" is what the evidence supports.
REPLAY_SKIPS = 0.5
YIELD_OP_NOTABLE = 0.2  # of the host-caused idle: the yield op is the next step only with at least this share


# ---- does DBO pay ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PaysFigures:
    """Does DBO pay, from one arm: not measured. What the arm shows of the two sides of the
    balance: the time DBO hid per step, and DBO's own costs per step from the ledger (None: not in
    this trace; a graph replay runs no microbatch thread and no yield op). Only the wall clock of the
    same load with DBO off (`dbo-trace compare OFF ON`, or `dbo-trace sweep`) settles it. The
    document's verdict.pays holds them as they are (render/document/verdict.py)."""

    measured: bool  # False: one arm (compare measures it)
    hidden_per_step_us: float | None
    hidden_of: HiddenOf
    handover_per_step_us: float | None = None  # the microbatch threads' hand-overs (ledger, median per step)
    startup_per_step_us: float | None = None  # thread start-up (ledger, median per step)
    # the yield op's own cost: every microbatch thread in it at once, hand-overs included (median per
    # step); its wait for the other microbatch's turn apart, the other microbatch's work, not DBO's cost
    yield_op_per_step_us: float | None = None
    yield_wait_per_step_us: float | None = None
    imbalance_per_step_us: float | None = None  # the longer microbatch's compute less the shorter's (ledger)

    @property
    def costs_known(self) -> bool:
        return any(x is not None for x in (self.handover_per_step_us, self.startup_per_step_us, self.yield_op_per_step_us))


@dataclass(frozen=True, kw_only=True)
class Pays(PaysFigures):
    """The balance's figures, and a round-trip model's other two per step (its pipeline's, which the
    document writes in its overlap block): round trips' time beside the other microbatch's round
    trips, and the comm alone."""

    beside_per_step_us: float | None = None
    exposed_per_step_us: float | None = None


def model_of(e: Evidence) -> OverlapModel:
    """The evidence's overlap model: its own, else the kernels'."""
    return e.overlap_model if e.overlap_model is not None else KERNEL_OVERLAP


def pays_of(e: Evidence, gpu: GpuWork) -> Pays | None:
    """A microbatched run's or rank's (not a server's, not a step's or phase's): its hidden time and
    DBO's costs per step; None where there are no microbatches or no communication."""
    m, model = e.metrics, model_of(e)
    if e.findings is None or not e.dbo_ran or m.comm_busy_us <= 0 or model.serves:
        return None
    hidden = model.hidden(e)
    led = e.ledger
    y = e.yield_op
    two_threads = y is not None and (y.threads_per_step or 0) >= 2
    return Pays(
        measured=False, hidden_per_step_us=hidden.hidden_us, hidden_of=hidden.of, beside_per_step_us=hidden.beside_us,
        exposed_per_step_us=hidden.exposed_us,
        handover_per_step_us=led.handover_per_step_us if led is not None else None,
        startup_per_step_us=led.startup_us if led is not None else None,
        yield_op_per_step_us=y.own_per_step_us if y is not None and two_threads else None,
        yield_wait_per_step_us=y.wait_per_step_us if y is not None and two_threads else None,
        imbalance_per_step_us=led.excess_us if led is not None else None,
    )  # fmt: skip


# ---- the verdict --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    label: Label
    reasons: tuple[Reason, ...] = ()
    qualifier: Qualifier | None = None  # the dominant finding; None where nothing stands out
    findings: tuple[str, ...] = ()  # every qualifier that held, in QUALIFIERS order
    next_step: NextStep | None = None
    pays: Pays | None = None  # a microbatched run's or rank's: does DBO pay (from one arm: not measured)

    @property
    def borderline(self) -> bool:
        return any(r.borderline for r in self.reasons)


def near(share: float | None, line: float) -> bool:
    return share is not None and abs(share - line) < BORDERLINE


def is_host_bound(m: WindowMetrics) -> bool:
    return (m.host_idle_fraction or 0.0) >= HOST_BOUND_IDLE


def _capture_share(e: Evidence) -> float | None:
    c = e.capture
    if c is None or not c.found:
        return None
    return c.host_idle_us / e.capture_idle_us if e.capture_idle_us > 0 else 0.0


def _label(e: Evidence, host_frac: float, work: float | None, overlap: float | None) -> Label:
    m = e.metrics
    if host_frac >= HOST_BOUND_IDLE:
        share = _capture_share(e)
        return Label.GRAPH_CAPTURE if share is not None and share >= CAPTURE_DOMINANT else Label.HOST_BOUND
    if m.comm_busy_us <= 0:
        return Label.GPU_BOUND if work is not None and work >= GPU_BOUND_BUSY else Label.NO_COMMUNICATION
    if overlap is not None and overlap >= OVERLAPPED_HIDDEN:
        return Label.OVERLAPPED  # without microbatches too: comm on its own stream under compute is overlap
    # a server's comm is another rank's requests: whether DBO ran is that rank's to say
    return Label.NOT_OVERLAPPED if e.dbo_ran or model_of(e).serves else Label.SINGLE_BATCH


def decide(e: Evidence) -> Verdict:
    """The one decision: the label, every reason with its figures, the dominant finding and the next step."""
    m = e.metrics
    host_frac = (e.host.fraction if e.host is not None else m.host_idle_fraction) or 0.0
    gpu = e.gpu if e.gpu is not None else gpu_work_of(m)
    work = gpu.share
    overlap = model_of(e).label_share(e)
    label = _label(e, host_frac, work, overlap)
    overlap_decides = label in (Label.OVERLAPPED, Label.NOT_OVERLAPPED, Label.SINGLE_BATCH)
    reasons = _reasons(e, label, host_frac, gpu, overlap_decides)
    found = _findings(e, label, host_frac, gpu) if e.findings is not None else []
    return Verdict(
        label,
        tuple(reasons),
        found[0] if found else None,
        tuple(q.key for q in found),
        next_step(e, label, host_frac, gpu, found),
        pays_of(e, gpu),
    )


def _reasons(e: Evidence, label: Label, host_frac: float, gpu: GpuWork, overlap_decides: bool) -> list[Reason]:
    m = e.metrics
    out: list[Reason] = []
    capture = e.capture if e.capture is not None and e.capture.found else None
    capture_reason = None
    if capture is not None:
        capture_reason = CaptureReason(
            windows=capture.windows, captured_launches=capture.captured_launches, capture_us=capture.capture_us,
            share=_capture_share(e), dominant=label == Label.GRAPH_CAPTURE,
        )  # fmt: skip
    if e.time_slicing is not None:
        out.append(TimeSliced(slicing=e.time_slicing))  # first: it dominates every other figure of the run
    if label == Label.GRAPH_CAPTURE and capture_reason is not None:
        out.append(capture_reason)  # the trace is mostly capture, its stalls are the capture itself
    elif e.stalls is not None:
        out.append(StallsReason(stalls=e.stalls))  # first: every figure below is the steady state's
    if host_frac >= HOST_NOTABLE_IDLE or label in (Label.HOST_BOUND, Label.GRAPH_CAPTURE):
        out.append(host_idle_of(e, host_frac, lambda f: near(f, HOST_BOUND_IDLE)))
    out += [RunningBehind(rank=rank, delay=delay) for rank, delay in e.running_behind]  # idle that is not the host's
    if e.expensive:
        out.append(ExpensiveCalls(calls=e.expensive))  # a cost per call, beside the idle it caused
    if (host_frac >= HOST_NOTABLE_IDLE or label in (Label.HOST_BOUND, Label.GRAPH_CAPTURE)) and (
        m.median_launch_us is not None and m.median_kernel_us is not None
    ):
        out.append(
            LaunchCost(
                median_launch_us=m.median_launch_us, median_kernel_us=m.median_kernel_us, launches=m.launches,
                launch_us=m.launch_us, causes=e.causes,
            )
        )  # fmt: skip
    if e.profile_all_threads and (host_frac >= HOST_NOTABLE_IDLE or label in (Label.HOST_BOUND, Label.GRAPH_CAPTURE)):
        out.append(ProfiledThreads())
    if e.profiler_overhead is not None and e.profiler_overhead >= OVERHEAD_LARGE:
        out.append(ProfilerOverhead(overhead=e.profiler_overhead, host_bound=label == Label.HOST_BOUND))
    bound = gpu.share is not None and gpu.share >= GPU_BOUND_BUSY
    if label not in (Label.HOST_BOUND, Label.GRAPH_CAPTURE) and (bound or near(gpu.share, GPU_BOUND_BUSY)):
        # the label's test where nothing communicated; beside an overlap label, the headline's finding
        out.append(GpuBusy(work=gpu, borderline=m.comm_busy_us <= 0 and near(gpu.share, GPU_BOUND_BUSY)))
    out += _comm_reasons(e, overlap_decides)
    if m.long_graph_launches:
        out.append(LongGraphLaunches(api=e.graph_api, count=m.long_graph_launches, longest_us=m.max_graph_launch_us or 0.0))
    if m.graph_launches:
        out.append(GraphReplays(api=e.graph_api, launches=m.graph_launches, replayed=m.replayed_kernel_fraction))
    criterion = model_of(e).criterion(e, label == Label.HOST_BOUND)
    if criterion is not None:
        out.append(criterion)
    if capture_reason is not None and label != Label.GRAPH_CAPTURE:
        out.append(capture_reason)
    return out


def _comm_reasons(e: Evidence, overlap_decides: bool) -> list[Reason]:
    """Communication: none, or the overlap model's (the kernels' overlap, or round trips whose overlap the
    kernels' cannot see)."""
    if e.metrics.comm_busy_us <= 0:
        return [NoComm()]
    return [model_of(e).comm_reason(e, lambda share: overlap_decides and near(share, OVERLAPPED_HIDDEN))]


def _findings(e: Evidence, label: Label, host_frac: float, gpu: GpuWork) -> list[Qualifier]:
    """Every finding that holds, in QUALIFIERS order; the first is the headline's (docs/analysis.md)."""
    f = e.findings
    assert f is not None
    out: list[Qualifier] = []
    if label == Label.GRAPH_CAPTURE:
        out.append(CaptureFinding(share=_capture_share(e)))
    if label in (Label.HOST_BOUND, Label.GRAPH_CAPTURE):
        out.append(HostBoundFinding(fraction=host_frac, causes=e.causes))
    elif gpu.share is not None and gpu.share >= GPU_BOUND_BUSY:
        out.append(GpuBoundFinding(work=gpu))
    if label in (Label.NO_COMMUNICATION, Label.GPU_BOUND):
        return out  # nothing to hold back, wait on or overlap
    notable = HEADLINE_SHARE * f.window_us
    if f.late_record_us > 0 and f.late_record_us >= notable:
        out.append(LateRecordFinding(exposed_us=f.late_record_us))
    if f.peer_wait_us is not None and f.peer_wait_us > 0 and f.peer_wait_us >= notable:
        out.append(PeerWaitFinding(wait_us=f.peer_wait_us, rank=f.peer_rank))
    own = model_of(e).finding(e)
    if own is not None:
        out.append(own)
    if label == Label.OVERLAPPED and f.saved_us is not None and f.serial_estimate_us:
        if f.saved_us / f.serial_estimate_us < PAID_LITTLE:
            out.append(DidNotPayFinding(saved_us=f.saved_us, serial_estimate_us=f.serial_estimate_us))
    if f.crowded_us > 0 and f.crowded_us >= notable:
        out.append(CrowdedFinding(exposed_us=f.crowded_us))
    per_step = _exposed_per_step(gpu)
    exposed = model_of(e).exposed_finding(e, gpu, per_step) if label == Label.SINGLE_BATCH and per_step is not None else None
    if exposed is not None:
        out.append(exposed)
    return out


def _exposed_per_step(gpu: GpuWork) -> float | None:
    """Exposed comm per steady step (of the main phase, where phases are annotated)."""
    return gpu.comm_exposed_us / gpu.steps if gpu.steps > 0 else None


def _replay_skips(c: HostCauses | None) -> float | None:
    """The share of the host-caused idle a graph replay skips: the step's launch calls, other CUDA
    calls and CPU operators, and the microbatch threads' start-up (a replay runs no thread)."""
    if c is None or c.host_idle_us <= 0:
        return None
    by = c.by_cause_us
    return (by[LAUNCH] + by[OTHER_CALL] + by[CPU_OP] + by[STARTUP]) / c.host_idle_us


def _yield_op_leads(e: Evidence) -> bool:
    """The yield op is the largest item of the host-caused GPU idle, and a notable share of it."""
    c = e.causes
    if e.yield_op is None or c is None or not c.cpu_ops or c.top is None or c.host_idle_us <= 0:
        return False
    name, us = c.cpu_ops[0]
    return name == YIELD_OP and us >= c.top.us and us >= YIELD_OP_NOTABLE * c.host_idle_us


def next_step(e: Evidence, label: Label, host_frac: float, gpu: GpuWork, found: list[Qualifier]) -> NextStep:
    """The one action the evidence supports, by a fixed order: what makes every other figure moot
    comes first (a capture, GPU time-slicing, the host), then what the findings name, then the
    DBO arithmetic (docs/analysis.md, "Next step")."""
    m, f = e.metrics, e.findings
    keys = {q.key: q for q in found}
    if label == Label.GRAPH_CAPTURE:
        return ProfileAfterStartup(finding=CaptureFinding(share=_capture_share(e)))  # a step's verdict lists no findings
    if e.time_slicing is not None:
        return StartMps(slicing=e.time_slicing)
    c = e.causes
    if (label == Label.HOST_BOUND or host_frac >= HOST_NOTABLE_IDLE) and _yield_op_leads(e):
        # the plugin calls it at every layer, DBO on or off: where it leads a notable host idle, a
        # cheaper call is the step's gain whatever the microbatches do
        assert e.yield_op is not None and c is not None
        two_threads = (e.yield_op.threads_per_step or 0) >= 2  # the op's own evidence: two microbatch threads in it
        return YieldOpCost(ops=e.yield_op, share=c.share_of(c.cpu_ops[0][1]), microbatched=e.dbo_ran or two_threads)
    if label == Label.HOST_BOUND:
        skipped = _replay_skips(c)
        if m.graph_launches == 0 and skipped is not None and skipped >= REPLAY_SKIPS:
            return EnableGraphs(host_fraction=host_frac, skipped=skipped, graph_api=e.graph_api)
        top = c.top if c is not None else None
        return HostCause(
            host_fraction=host_frac, host_idle_us=c.host_idle_us if c is not None else 0.0, largest=top,
            replayed=m.replayed_kernel_fraction if m.graph_launches else None,
            untraced_leads=c is not None and top is not None and c.us(UNTRACED) >= top.us,
        )  # fmt: skip
    if gpu.share is not None and gpu.share >= GPU_BOUND_BUSY:
        return GpuBottleneck(work=gpu, top_kernel=e.top_kernel)
    if m.comm_busy_us <= 0:
        return NothingToOverlap(work=gpu)
    own = model_of(e).own_step(e)  # a server's: what DBO hides is the served rank's to say
    if own is not None:
        return own
    late = keys.get(LateRecordFinding.key)
    if isinstance(late, LateRecordFinding):
        return FixLateRecord(finding=late)
    peer = keys.get(PeerWaitFinding.key)
    if isinstance(peer, PeerWaitFinding):
        return Straggler(finding=peer)
    missed = model_of(e).criterion_missed(e)  # one microbatch's compute below the round trip it should hide
    if missed is not None:
        return missed
    crowded = keys.get(CrowdedFinding.key)
    if isinstance(crowded, CrowdedFinding):
        return CommCrowded(finding=crowded, holder=f.crowding_kernel if f is not None else None)
    paid = keys.get(DidNotPayFinding.key)
    if isinstance(paid, DidNotPayFinding):
        return DidNotPay(finding=paid)
    if label == Label.NOT_OVERLAPPED:
        return OverlapMissing(hidden=model_of(e).label_share(e), exposed_us=m.comm_exposed_us)
    if label == Label.SINGLE_BATCH:
        return model_of(e).one_microbatch(e, _exposed_per_step(gpu))
    largest = f.exposed_by_reason_us[0] if f is not None and f.exposed_by_reason_us else None
    return OverlapWorks(hidden=model_of(e).label_share(e), largest_exposed=largest)
