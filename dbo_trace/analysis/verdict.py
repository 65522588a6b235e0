"""The verdict: one label from a small set, with reasons that cite the numbers.

Labels, in order of precedence (docs/analysis.md explains each threshold):
  host-bound        the GPU sat idle waiting for launches for >= HOST_BOUND_IDLE of the time measured
                    (a rank: in-step time where steps are markers, else the whole window)
  no-communication  no communication kernel ran
  overlapped        >= OVERLAPPED_HIDDEN of comm time ran concurrently with compute
  not-overlapped    otherwise
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dbo_trace.analysis.host_time import LAUNCH, HostCauses
from dbo_trace.analysis.metrics import RoundTrips, WindowMetrics

if TYPE_CHECKING:
    from dbo_trace.analysis.report import HostTest

HOST_BOUND = "host-bound"
NO_COMMUNICATION = "no-communication"
OVERLAPPED = "overlapped"
NOT_OVERLAPPED = "not-overlapped"
LABELS = (HOST_BOUND, NO_COMMUNICATION, OVERLAPPED, NOT_OVERLAPPED)

HOST_BOUND_IDLE = 0.5  # "the GPU mostly waits on the host"
HOST_NOTABLE_IDLE = 0.2  # worth a reason even when not host-bound
OVERLAPPED_HIDDEN = 0.2  # partial overlap is overlap; its share is stated


@dataclass
class Verdict:
    label: str
    reasons: list[str] = field(default_factory=list)


def pct_text(x: float | None) -> str:
    """A share in prose ("n/a" where there is none); tables print "-" (render/format.py pct)."""
    return "n/a" if x is None else f"{100 * x:.0f}%"


def is_host_bound(m: WindowMetrics) -> bool:
    return (m.host_idle_fraction or 0.0) >= HOST_BOUND_IDLE


def decide(
    m: WindowMetrics,
    rt: RoundTrips | None = None,
    profile_all_threads: bool = False,
    host: "HostTest | None" = None,
    microbatched: bool = False,
    causes: HostCauses | None = None,
) -> Verdict:
    """host: what the host-bound test measures (a rank's in-step or whole-window fraction); without
    it, the window of m. microbatched: the DBO lines (other microbatch, round-trip criterion) apply.
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
        basis = f" ({host.basis})" if host is not None else ""
        reasons.append(
            f"GPU idle waiting for the host {pct_text(host_frac)}{basis}; {m.host_idle_us / 1000:.2f} ms in "
            f"{m.host_idle_gaps} gaps whose next kernel was launched after the GPU went idle; "
            f"GPU busy {pct_text(m.utilization)} of the window"
        )
        if m.median_launch_us is not None and m.median_kernel_us is not None:
            medians = (
                f"median launch call {m.median_launch_us:.1f} us against median kernel {m.median_kernel_us:.1f} us "
                f"({m.launches} launches, {m.launch_us / 1000:.2f} ms of launch calls)"
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
            f"{m.long_graph_launches} cudaGraphLaunch calls took >= 1 ms (longest {(m.max_graph_launch_us or 0) / 1000:.2f} ms)"
        )
    if m.graph_launches:
        reasons.append(f"CUDA graphs replayed: {m.graph_launches} launches, {pct_text(m.replayed_kernel_fraction)} of kernels")
    if microbatched and rt is not None and rt.ratio is not None:
        reasons.append(_criterion_text(rt, label, hidden))
    return Verdict(label, reasons)


def _launch_text(causes: HostCauses, medians: str) -> str:
    """Launching is named as the cause only where launch calls are the largest cause of the idle."""
    share = pct_text(causes.share(LAUNCH))
    if causes.launches_lead:
        return f"the host spent most of the GPU's idle time launching kernels ({share} of it in launch calls); {medians}"
    return f"launch calls are {share} of the host-caused GPU idle, not its main cause; {medians}"


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
