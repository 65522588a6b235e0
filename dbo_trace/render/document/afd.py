"""A disaggregated (AFD) run and the profiler's cost in the document: round trips, the FFN's parts, the pair, the roles."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal, cast

from msgspec import UNSET, UnsetType

from dbo_trace.analysis.afd.pair_compute import PairFigures
from dbo_trace.analysis.afd.roles import RolesInfo
from dbo_trace.analysis.afd.round_trips import AfdRoundTrips
from dbo_trace.analysis.compare.unprofiled import Unprofiled
from dbo_trace.analysis.metrics import RoundTrips
from dbo_trace.render.document.base import Count, Int, Struct, _r
from dbo_trace.render.document.held import rounded
from dbo_trace.render.document.host import NamedShare
from dbo_trace.render.words.verdict import time_slicing_text


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
    # version 9: of the round trips' time less the lag, under the other microbatch's compute or beside
    # its round trip (the label's share), and the time beside its round trips, summed
    overlapped_share: float | None | UnsetType = UNSET
    beside_us: float | UnsetType = UNSET


class TimeSlicingBlock(Struct):
    """The attention's round trips against their transfer (docs/analysis.md, "GPU sharing")."""

    sliced: bool  # the roles' CUDA contexts time-slice one GPU (the rule held, MPS not seen answering)
    round_trip_us: float  # medians over the round trips
    receive_us: float
    send_us: float
    ffn_compute_us: float | None  # the FFN's compute inside the round trip, with its trace
    ratio: float | None  # (receive - FFN compute) / send
    text: str | None  # the report's line where sliced


@dataclass(frozen=True, kw_only=True)
class RolesBlock(RolesInfo):
    """A disaggregated run's roles and their GPU (docs/analysis.md, "Both roles" and "GPU sharing"):
    the analysis's RolesInfo as it is, rounded (render/document/held.py), its GpuSharing within it
    (version 11), and the time-slicing with its sentence."""

    time_slicing: TimeSlicingBlock | None = None  # type: ignore[assignment]  # TimeSlicing's figures and the report's line
    # versions before 11 wrote GpuSharing's two words flat beside the figures; version 11 holds them in
    # `sharing` (the version check reads the strict decoding: each in its own versions only)
    shared_from: str | None | UnsetType = UNSET
    mps_daemon: str | None | UnsetType = UNSET

    def verified_mps(self) -> str | None:
        """The manifest's verified MPS state (answered / not running / unknown): sharing's, or the
        flat key an older document wrote; None: nothing told."""
        if self.sharing is not None:
            return self.sharing.mps_daemon
        return self.mps_daemon if isinstance(self.mps_daemon, str) else None


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
    too_few: bool | UnsetType = UNSET  # version 9: fewer than 5 profiled periods: no overhead


# The analysis's own, rounded (render/document/held.py): the DBO arithmetic (its wait and transfer
# apart from version 5, where the ranks' collectives were matched), both roles on the attention's clock.
RoundTripsBlock = RoundTrips
PairBlock = PairFigures


# ---- building it from a Report ----------------------------------------------------------------------


def round_trips_block(rt: RoundTrips | None) -> RoundTrips | None:
    return None if rt is None else rounded(rt, ratio=4)


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
        overlapped_share=_r(a.overlapped_share, 4),
        beside_us=round(a.beside_total_us, 3),
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
        too_few=u.overhead_too_few,
    )


def roles_block(info: RolesInfo | None) -> RolesBlock | None:
    if info is None:
        return None
    held, ts = rounded(info, attention_busy=4, ffn_busy=4, both_busy=4), info.time_slicing
    return RolesBlock(
        **{f.name: getattr(held, f.name) for f in fields(RolesInfo) if f.name != "time_slicing"},
        time_slicing=None if ts is None else TimeSlicingBlock(
            ts.sliced, round(ts.round_trip_us, 3), round(ts.receive_us, 3), round(ts.send_us, 3), _r(ts.ffn_compute_us),
            _r(ts.ratio, 2), time_slicing_text(ts),
        ),
    )  # fmt: skip
