"""The verdict: one label from a small set, with reasons that cite the numbers.

Labels, in order of precedence (docs/analysis.md explains each threshold):
  host-bound        the GPU sat idle waiting for launches for >= HOST_BOUND_IDLE of the time measured
                    (a rank: in-step time where steps are markers, else the whole window)
  no-communication  no communication kernel ran
  overlapped        >= OVERLAPPED_HIDDEN of comm time ran concurrently with compute
  not-overlapped    otherwise

The headline is the label and, where one exists, a qualifier naming the dominant finding, chosen by
one fixed order (QUALIFIERS; docs/analysis.md, "Headline"). Every renderer prints verdict.headline.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from dbo_trace.analysis.accounting import TimeBuckets
from dbo_trace.analysis.host_time import LAUNCH, HostCauses
from dbo_trace.analysis.metrics import RoundTrips, WindowMetrics
from dbo_trace.analysis.peers import WaitSplit
from dbo_trace.analysis.roundtrips import AfdRoundTrips

HOST_BOUND = "host-bound"
NO_COMMUNICATION = "no-communication"
OVERLAPPED = "overlapped"
NOT_OVERLAPPED = "not-overlapped"
LABELS = (HOST_BOUND, NO_COMMUNICATION, OVERLAPPED, NOT_OVERLAPPED)

HOST_REASON = "GPU idle waiting for the host"  # the host-time reason begins so
HOST_BOUND_IDLE = 0.5  # "the GPU mostly waits on the host"
HOST_NOTABLE_IDLE = 0.2  # worth a reason even when not host-bound
OVERLAPPED_HIDDEN = 0.2  # partial overlap is overlap; its share is stated
# A share this close to a line decides the label but says so: 20.05% and 19.83% hidden are alike,
# whatever side of 20% each falls (one rule for steps and runs alike).
BORDERLINE = 0.02
BORDERLINE_TEXT = "borderline"


# The qualifiers, in the order the headline looks for them: the first that holds is named.
Q_HOST_BOUND = "host_bound"  # the label is host-bound: how much (and, once measured, why)
Q_LATE_RECORD = "late_record"  # a bug in the code under study: comm waited on an event recorded too late
Q_PEER_WAIT = "peer_wait"  # the time went waiting for another rank (cross-rank waits fill it where measured)
Q_ROUND_TRIP = "round_trip"  # a disaggregated (AFD) run: how much of the FFN round trip the other microbatch hid
Q_DID_NOT_PAY = "did_not_pay"  # overlapped, yet overlap saved little against the serial estimate
Q_CROWDED = "crowded"  # comm ready beside the other microbatch's compute, with no free SMs
QUALIFIERS = (Q_HOST_BOUND, Q_LATE_RECORD, Q_PEER_WAIT, Q_ROUND_TRIP, Q_DID_NOT_PAY, Q_CROWDED)

HEADLINE_SHARE = 0.05  # a held-back cause or a peer wait is named when it costs >= this share of the window
PAID_LITTLE = 0.05  # "DBO did not pay": overlap saved < this share of the serial estimate


HOST_BASIS_IN_STEPS = "in-step host idle / time in steps (steps from markers)"
HOST_BASIS_WINDOW = "host idle / profiled window (steps inferred)"


@dataclass(frozen=True)
class HostTest:
    """What the host-bound verdict measured: in-step host idle where steps are real markers,
    the whole window where they were inferred."""

    fraction: float | None
    basis: str
    host_idle_us: float | None = None  # the fraction's numerator and denominator, which its sentence quotes
    measured_us: float | None = None


def host_test_of(steps_inferred: bool, window: TimeBuckets, in_steps: TimeBuckets) -> HostTest:
    """The host test of a rank, or of ranks whose buckets are added: in-step host idle over time in
    steps, where steps are markers (for ranks: every rank's) and took time; else over the window."""
    if steps_inferred or in_steps.window_us <= 0:
        frac = window.host_idle_us / window.window_us if window.window_us > 0 else None
        return HostTest(frac, HOST_BASIS_WINDOW, window.host_idle_us, window.window_us)
    return HostTest(in_steps.host_idle_us / in_steps.window_us, HOST_BASIS_IN_STEPS, in_steps.host_idle_us, in_steps.window_us)


@dataclass(frozen=True)
class Findings:
    """What the headline may name, from the same figures the report prints (a rank's, or the ranks'
    added: each rank is its own GPU). None: not measured here (no microbatches, one rank, ...)."""

    window_us: float = 0.0  # the profiled window (all ranks' windows added)
    late_record_us: float = 0.0  # exposed comm whose kernel waited on a late event record (exposure)
    crowded_us: float = 0.0  # exposed comm whose kernel found no free SMs (exposure)
    saved_us: float | None = None  # overlap's saving: serial estimate - GPU busy (contention)
    serial_estimate_us: float | None = None
    host_cause: str | None = None  # slot: the host-time attribution's dominant cause, in words
    peer_wait_us: float | None = None  # slot: time this rank (or the run) waited for a peer rank
    peer_rank: int | None = None  # the rank waited for


@dataclass(frozen=True)
class Qualifier:
    key: str  # one of QUALIFIERS
    text: str  # the finding in words, with its numbers


@dataclass(frozen=True)
class Verdict:
    label: str
    reasons: list[str] = field(default_factory=list)
    qualifier: Qualifier | None = None  # the dominant finding; None where nothing stands out
    findings: list[str] = field(default_factory=list)  # every qualifier that held, in QUALIFIERS order

    @property
    def headline(self) -> str:
        """The first line of every report: the label, and the dominant finding in brackets."""
        return self.label if self.qualifier is None else f"{self.label} ({self.qualifier.text})"


def _ms(us: float) -> str:
    return f"{us / 1000:.2f} ms"


def qualifiers(label: str, host_fraction: float | None, f: Findings) -> list[Qualifier]:
    """Every finding that holds, in QUALIFIERS order; the first is the headline's (docs/analysis.md)."""
    out: list[Qualifier] = []
    if label == HOST_BOUND:
        cause = f": {f.host_cause}" if f.host_cause else ""
        out.append(Qualifier(Q_HOST_BOUND, f"GPU idle waiting for the host {pct_text(host_fraction)}{cause}"))
    if label == NO_COMMUNICATION:
        return out  # nothing to hold back, wait on or overlap
    notable = HEADLINE_SHARE * f.window_us
    if f.late_record_us > 0 and f.late_record_us >= notable:
        out.append(Qualifier(Q_LATE_RECORD, f"comm held back by a late event record: {_ms(f.late_record_us)} of comm exposed"))
    if f.peer_wait_us is not None and f.peer_wait_us > 0 and f.peer_wait_us >= notable:
        peer = f"rank {f.peer_rank}" if f.peer_rank is not None else "a peer rank"
        out.append(Qualifier(Q_PEER_WAIT, f"waiting for {peer}: {_ms(f.peer_wait_us)}"))
    if label == OVERLAPPED and f.saved_us is not None and f.serial_estimate_us:
        share = f.saved_us / f.serial_estimate_us
        if share < PAID_LITTLE:
            what = (
                f"overlap saved {_ms(f.saved_us)} of a {_ms(f.serial_estimate_us)} serial estimate, {pct_text(share)}"
                if f.saved_us >= 0
                else f"overlap took {_ms(-f.saved_us)} longer than the {_ms(f.serial_estimate_us)} serial estimate"
            )
            out.append(Qualifier(Q_DID_NOT_PAY, f"DBO did not pay: {what}"))
    if f.crowded_us > 0 and f.crowded_us >= notable:
        out.append(Qualifier(Q_CROWDED, f"comm held back by SM-hungry compute: {_ms(f.crowded_us)} of comm exposed"))
    return out


def pct_text(x: float | None) -> str:
    """A share in prose ("n/a" where there is none); tables print "-" (render/format.py pct)."""
    return "n/a" if x is None else f"{100 * x:.0f}%"


def is_host_bound(m: WindowMetrics) -> bool:
    return (m.host_idle_fraction or 0.0) >= HOST_BOUND_IDLE


def decide(
    m: WindowMetrics,
    rt: RoundTrips | None = None,
    profile_all_threads: bool = False,
    host: HostTest | None = None,
    microbatched: bool = False,
    findings: Findings | None = None,
    graph_api: str = "CUDA",
    causes: HostCauses | None = None,
) -> Verdict:
    """host: what the host-bound test measures (a rank's in-step or whole-window fraction); without
    it, the window of m. microbatched: the DBO lines (other microbatch, round-trip criterion) apply.
    findings: what the headline may name (a rank's and the run's verdicts); without, the label alone.
    causes: what the host did meanwhile (analysis/host_time.py): the launch line follows its numbers."""
    reasons: list[str] = []
    host_frac = (host.fraction if host is not None else m.host_idle_fraction) or 0.0
    hidden = m.comm_hidden_fraction

    if host_frac >= HOST_BOUND_IDLE:
        label = HOST_BOUND
    elif m.comm_busy_us <= 0:
        label = NO_COMMUNICATION
    elif hidden is not None and hidden >= OVERLAPPED_HIDDEN:
        label = OVERLAPPED
    else:
        label = NOT_OVERLAPPED

    if host_frac >= HOST_NOTABLE_IDLE or label == HOST_BOUND:
        basis = ""
        if host is not None:
            measured = (
                f"{host.host_idle_us / 1000:.2f} of {host.measured_us / 1000:.2f} ms, "
                if host.host_idle_us is not None and host.measured_us is not None
                else ""
            )
            basis = f" ({measured}{host.basis})"
        reasons.append(
            f"{HOST_REASON} {pct_text(host_frac)}{basis}; over the window {m.host_idle_us / 1000:.2f} ms in "
            f"{counted(m.host_idle_gaps, 'gap')} whose next kernel was launched after the GPU went idle; "
            f"GPU busy {pct_text(m.utilization)} of the window"
        )
        if m.median_launch_us is not None and m.median_kernel_us is not None:
            medians = (
                f"median launch call {m.median_launch_us:.1f} us against median kernel {m.median_kernel_us:.1f} us "
                f"({counted(m.launches, 'launch')} in all, {m.launch_us / 1000:.2f} ms of launch calls)"
            )
            reasons.append(medians if causes is None else _launch_text(causes, medians))
        if profile_all_threads:
            reasons.append(
                "the microbatch threads were profiled (profile_all_threads): the profiler's own CPU cost adds host time"
            )
    if m.comm_busy_us <= 0:
        reasons.append("no communication kernel ran (see --comm-kernels / --comm-stream if yours are not recognised)")
    else:
        text = (
            f"{pct_text(hidden)} of communication ({m.comm_hidden_us / 1000:.2f} of {m.comm_busy_us / 1000:.2f} ms) "
            f"ran concurrently with compute; {m.comm_exposed_us / 1000:.2f} ms exposed"
        )
        if microbatched and m.comm_hidden_cross_fraction is not None:
            text += f"; {pct_text(m.comm_hidden_cross_fraction)} under the other microbatch's compute"
        reasons.append(text)
    if m.long_graph_launches:
        reasons.append(
            f"{counted(m.long_graph_launches, graph_api.lower() + 'GraphLaunch call')} took >= 1 ms "
            f"(longest {(m.max_graph_launch_us or 0) / 1000:.2f} ms)"
        )
    if m.graph_launches:
        reasons.append(
            f"{graph_api} graphs replayed: {counted(m.graph_launches, 'launch')}, {pct_text(m.replayed_kernel_fraction)} of kernels"
        )
    if microbatched and rt is not None and rt.ratio is not None:
        reasons.append(_criterion_text(rt, label, hidden))
    found = qualifiers(label, host_frac, findings) if findings is not None else []
    reasons += _borderline(host_frac, hidden if label in (OVERLAPPED, NOT_OVERLAPPED) else None)
    return Verdict(label, reasons, found[0] if found else None, [q.key for q in found])


def _borderline(host_frac: float | None, hidden: float | None) -> list[str]:
    """A sentence for each share decided within BORDERLINE of its line (host-caused idle against
    host-bound, hidden comm or round trip against overlapped)."""
    lines = [
        (host_frac, HOST_BOUND_IDLE, f"{HOST_BOUND} and not"),
        (hidden, OVERLAPPED_HIDDEN, f"{OVERLAPPED} and {NOT_OVERLAPPED}"),
    ]
    return [
        f"{BORDERLINE_TEXT}: {100 * share:.1f}% is within {100 * BORDERLINE:.0f} points of the {100 * line:.0f}% line "
        f"between {between}; a window on the other side of it by as little is alike, not different"
        for share, line, between in lines
        if share is not None and abs(share - line) < BORDERLINE
    ]


def _launch_text(causes: HostCauses, medians: str) -> str:
    """Launching is named as the cause only where launch calls are the largest cause of the idle."""
    share = pct_text(causes.share(LAUNCH))
    # the share's own numbers, from the breakdown it comes from (the host-time split), never the window's
    of = f"{causes.us(LAUNCH) / 1000:.2f} of {causes.host_idle_us / 1000:.2f} ms, in {counted(causes.launch_calls, 'call')}"
    if causes.launches_lead:
        return f"the host spent most of the GPU's idle time launching kernels ({share} of it in launch calls: {of}); {medians}"
    return f"launch calls are {share} of the host-caused GPU idle ({of}), not its main cause; {medians}"


def counted(n: int, noun: str) -> str:
    """A count with its noun in the right number, digits grouped: "1 gap", "2,401 gaps", "1 launch"."""
    plural = noun if n == 1 else (noun + "es" if noun.endswith(("s", "sh", "ch", "x")) else noun + "s")
    return f"{n:,} {plural}"


def _criterion_text(rt: RoundTrips, label: str, hidden: float | None) -> str:
    """The round-trip criterion says what *could* hide; it must not read as success where nothing did."""
    head = (
        f"per-microbatch compute {rt.compute_per_round_trip_us:.0f} us against a comm round trip of "
        f"{rt.comm_per_round_trip_us:.0f} us (ratio {rt.ratio:.2f})"
    )
    if label == HOST_BOUND:
        return f"{head}: moot while the step is host-bound; fix the host side first"
    if rt.criterion_met:
        could = "could hide the whole round trip"
    else:
        could = f"could hide at most {pct_text(rt.ratio)} of it"
    if hidden is None or hidden < OVERLAPPED_HIDDEN:
        return f"{head}: the other microbatch's compute {could}, but only {pct_text(hidden)} did"
    return f"{head}: the other microbatch's compute {could}"


HIDDEN_COMM_TEXT = " ran concurrently with compute; "  # in the comm sentence decide() words
CRITERION_TEXT = "per-microbatch compute "  # how the criterion sentence begins


def with_wait_split(v: Verdict, split: WaitSplit | None, rt: RoundTrips | None) -> Verdict:
    """Where the ranks' collectives were matched, the comm sentences say how much of the comm time
    was waiting for a peer rank: hidden comm that was waiting hid no transfer, and a round trip that
    was mostly waiting is not a slow network (docs/analysis.md, "Wait and transfer")."""
    if split is None:
        return v
    reasons = []
    hidden = split.hidden_wait_us + split.hidden_transfer_us
    of = "of the matched collectives' hidden time" if split.partial else "of the hidden comm"
    for reason in v.reasons:
        if HIDDEN_COMM_TEXT in reason and hidden > 0 and split.transfer_us > 0:
            share = split.hidden_share_of_transfer
            reason += (
                f"; {of}, {split.hidden_wait_us / 1000:.2f} ms was waiting for a peer rank: "
                f"{pct_text(share)} of the transfer ({split.hidden_transfer_us / 1000:.2f} of "
                f"{split.transfer_us / 1000:.2f} ms) ran under compute"
            )
        elif reason.startswith(CRITERION_TEXT) and rt is not None and rt.wait_per_round_trip_us is not None:
            transfer = rt.transfer_per_round_trip_us or 0.0
            against = (
                f"; against the transfer alone the ratio is {rt.compute_per_round_trip_us / transfer:.2f}" if transfer > 0 else ""
            )
            reason += (
                f" (the round trip's comm, medians over steps: transfer {transfer:.0f} us, "
                f"waiting for a peer rank {rt.wait_per_round_trip_us:.0f} us{against})"
            )
        reasons.append(reason)
    return replace(v, reasons=reasons)


def round_trip_text(afd: AfdRoundTrips) -> str:
    """The disaggregated round trip in words: how much of it the other microbatch's compute hid."""
    per = f"{afd.per_step:.0f} per step" + (f", {afd.per_layer:.1f} per layer" if afd.per_layer else "")
    head = f"{pct_text(afd.hidden_share)} of the FFN round trip hidden under the other microbatch's compute"
    if not afd.microbatched:
        head = "FFN round trip not hidden: one microbatch, its send and receive back to back"
    return f"{head} ({per}, median {_ms(afd.median_us)})"


def _overlap_borderline(reason: str) -> bool:
    """The borderline sentence on the kernel-overlap share (an AFD rank's round-trip share replaces it)."""
    return reason.startswith(BORDERLINE_TEXT) and f"between {OVERLAPPED}" in reason


def with_round_trip_share(v: Verdict, share: float | None, microbatched: bool) -> Verdict:
    """A step's or a phase's verdict on a disaggregated rank: overlapped or not by its own round
    trips' hidden share (as the run's, with_round_trips), the share said in a reason."""
    if v.label not in (OVERLAPPED, NOT_OVERLAPPED) or share is None:
        return v
    label = OVERLAPPED if microbatched and share >= OVERLAPPED_HIDDEN else NOT_OVERLAPPED
    text = f"disaggregated: {pct_text(share)} of its FFN round trips' time under the other microbatch's compute"
    reasons = [r for r in v.reasons if not _overlap_borderline(r)]
    return replace(v, label=label, reasons=[text, *reasons, *_borderline(None, share)])


def with_round_trips(v: Verdict, afd: AfdRoundTrips | None) -> Verdict:
    """A disaggregated run's verdict: its sends and receives run on the compute stream, so no comm
    kernel overlaps compute and the kernel-overlap share is 0% by construction. Overlap there is the
    other microbatch's compute during a round trip: the label (unless host-bound or a capture)
    follows the hidden share of the round trips, and the headline names it (docs/analysis.md)."""
    if afd is None:
        return v
    label = v.label
    near: list[str] = []
    if label in (OVERLAPPED, NOT_OVERLAPPED):
        label = OVERLAPPED if (afd.hidden_share or 0.0) >= OVERLAPPED_HIDDEN else NOT_OVERLAPPED
        near = _borderline(None, afd.hidden_share)  # the round trips' share decides now, not the kernels'
    text = round_trip_text(afd)
    # the comm-kernel criterion (comm busy per round trip) measures the wrong thing here: replaced,
    # and so is a borderline note on the kernel-overlap share (the round trips' is the one that decides)
    reasons = [r for r in v.reasons if not r.startswith(CRITERION_TEXT) and not _overlap_borderline(r)] + near
    # before the kernel-overlap sentence, which reads "0% ... concurrently with compute" here
    at = next((i for i, r in enumerate(reasons) if HIDDEN_COMM_TEXT in r), len(reasons))
    reasons.insert(
        at, f"disaggregated: {text}; kernel overlap (below) cannot see it, the sends and receives run on the compute stream"
    )
    if afd.criterion_ratio is not None:
        met = "could cover" if afd.criterion_met else f"could cover at most {pct_text(afd.criterion_ratio)} of"
        reasons.append(
            f"per-microbatch compute {(afd.compute_per_microbatch_us or 0.0) / 1000:.2f} ms against a round trip's "
            f"exposed {afd.median_exposed_us / 1000:.2f} ms (ratio {afd.criterion_ratio:.2f}): one microbatch's compute {met} "
            "the other's round trip"
        )
    found = [q for q in ([v.qualifier] if v.qualifier else []) if q.key != Q_ROUND_TRIP]
    keys = [k for k in v.findings if k != Q_ROUND_TRIP]
    if label != NO_COMMUNICATION:
        keys = sorted(keys + [Q_ROUND_TRIP], key=QUALIFIERS.index)
    qualifier = v.qualifier
    if keys and keys[0] == Q_ROUND_TRIP:
        qualifier = Qualifier(Q_ROUND_TRIP, text)
    elif not found:
        qualifier = None
    return Verdict(label, reasons, qualifier, keys)
