"""A disaggregated rank's overlap as the verdict asks it (verdict/evidence_types.py OverlapModel):
an attention rank's round trips to the FFN (their time under the other microbatch's compute or
beside its round trip decides; docs/analysis.md, "Disaggregated round trips (AFD)"), a step's or a
phase's own round trips, and an FFN server, which serves the attention's microbatches (whether DBO
ran is the attention rank's to say). Its sends and receives run on the compute stream, so the
kernels' overlap is 0% by construction and is not what decides."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dbo_trace.analysis.afd.pipeline import StepOverlap
from dbo_trace.analysis.afd.roles import FFN
from dbo_trace.analysis.afd.round_trips import AfdRoundTrips
from dbo_trace.analysis.overlap.kernel_model import KernelOverlap
from dbo_trace.analysis.verdict.evidence_types import HIDDEN_ROUND_TRIPS, Evidence, GpuWork, HiddenPerStep, OverlapModel
from dbo_trace.analysis.verdict.reasons import (
    AfdCriterion,
    FfnServer,
    MeasurePays,
    NextStep,
    OneMicrobatch,
    Qualifier,
    Reason,
    RoundTripFinding,
    RoundTripsHidden,
    StepRoundTrips,
)


@dataclass(frozen=True)
class RoundTripOverlap(KernelOverlap):
    """An AFD attention rank's (or the run's) round trips: the overlapped share decides, the criterion is
    per-microbatch compute against a round trip's exposed time, and the headline names them."""

    afd: AfdRoundTrips
    overlap: StepOverlap | None = None  # the pipeline's three figures per step (analysis/afd/pipeline.py)

    def label_share(self, e: Evidence) -> float | None:
        return self.afd.overlapped_share or 0.0

    def comm_reason(self, e: Evidence, near_line: Callable[[float | None], bool]) -> Reason:
        return RoundTripsHidden(afd=self.afd, overlap=self.overlap, borderline=near_line(self.afd.overlapped_share or 0.0))

    def criterion(self, e: Evidence, host_bound: bool) -> Reason | None:
        return AfdCriterion(afd=self.afd) if self.afd.criterion_ratio is not None else None

    def finding(self, e: Evidence) -> Qualifier | None:
        return RoundTripFinding(afd=self.afd, overlap=self.overlap)

    def exposed_finding(self, e: Evidence, gpu: GpuWork, per_step_us: float) -> Qualifier | None:
        return None  # its round trips' finding says it

    def hidden(self, e: Evidence) -> HiddenPerStep:
        """The round trips' rests' hidden time per step with round trips; the pipeline's, over the steady
        span, where measured (the figure every output gives), with its other two figures."""
        a, o = self.afd, self.overlap
        hidden = (a.hidden_us - a.lag_hidden_us) / a.steps if a.steps else None  # of the rest, as the share
        if o is None:
            return HiddenPerStep(hidden, HIDDEN_ROUND_TRIPS)
        return HiddenPerStep(o.hidden_us, HIDDEN_ROUND_TRIPS, o.beside_us, o.exposed_us)

    def criterion_missed(self, e: Evidence) -> NextStep | None:
        a = self.afd
        ratio = a.criterion_ratio
        if ratio is None or ratio >= 1.0 or a.compute_per_microbatch_us is None:
            return None
        return MeasurePays(
            compute_us=a.compute_per_microbatch_us, round_trip_us=a.median_exposed_us, ratio=ratio, disaggregated=True
        )

    def one_microbatch(self, e: Evidence, exposed_per_step_us: float | None) -> NextStep:
        m = e.metrics
        per_step = exposed_per_step_us
        return OneMicrobatch(exposed_us=m.comm_exposed_us, span_us=m.span_us, exposed_per_step_us=per_step, afd=self.afd)


@dataclass(frozen=True)
class AfdShare(KernelOverlap):
    """A disaggregated rank's step or phase: its own round trips' overlapped share (under the other
    microbatch's compute or beside its round trip; None: no round trip, and the kernels' decide)."""

    share: float | None
    microbatched: bool

    def label_share(self, e: Evidence) -> float | None:
        if self.share is None:
            return super().label_share(e)
        return self.share if self.microbatched else 0.0

    def comm_reason(self, e: Evidence, near_line: Callable[[float | None], bool]) -> Reason:
        if self.share is None:
            return super().comm_reason(e, near_line)
        return StepRoundTrips(share=self.share, borderline=near_line(self.share))


@dataclass(frozen=True)
class ServedOverlap(KernelOverlap):
    """An FFN server's rank (or one of its steps or phases): its comm is the attention's requests and its
    answers; what DBO hides is the attention's round trip, the attention rank's and the run's to say."""

    @property
    def serves(self) -> bool:
        return True

    def own_step(self, e: Evidence) -> NextStep | None:
        return FfnServer(exposed_us=e.metrics.comm_exposed_us, span_us=e.metrics.span_us)


def overlap_model(afd: AfdRoundTrips | None, role: str | None, overlap: StepOverlap | None = None) -> OverlapModel | None:
    """A rank's (or the run's) overlap model: its round trips', an FFN server's, else None (the kernels')."""
    if afd is not None:
        return RoundTripOverlap(afd, overlap)
    return ServedOverlap() if role == FFN else None


class RoundTripShares:
    """A disaggregated rank's round trips by step: what share of a step's (or a phase's) round-trip
    time the other microbatch's compute hid. Its steps and phases are judged by it, as the run is,
    not by kernel overlap, which the sends and receives on the compute stream make 0% by construction.
    index: the step table's index (a step's position -> the steps' numbering the rows' `step` uses)."""

    def __init__(self, afd: AfdRoundTrips, index: np.ndarray) -> None:
        rows = afd.rows
        n = int(index.max()) + 1 if len(index) else 0
        ok = (rows.step >= 0) & (rows.step < n)
        # the round trips less the host's lag (their rest), as the run's hidden share is
        self.total = np.bincount(rows.step[ok], weights=rows.rest_us[ok], minlength=n)  # (n,) by step index
        # under the other microbatch's compute or beside its round trip: the label's share, as the run's
        self.overlapped = np.bincount(rows.step[ok], weights=rows.rest_overlapped_us[ok], minlength=n)
        self.index = index
        self.microbatched = afd.microbatched

    def of(self, positions: np.ndarray) -> AfdShare:
        """Over the steps at these positions of the table."""
        ix = self.index[positions]
        t = float(self.total[ix].sum()) if len(ix) else 0.0
        return AfdShare(float(self.overlapped[ix].sum()) / t if t > 0 else None, self.microbatched)

    def by_step(self) -> list[AfdShare]:
        ix = self.index
        return [
            AfdShare(float(h) / float(t) if t > 0 else None, self.microbatched)
            for h, t in zip(self.overlapped[ix].tolist(), self.total[ix].tolist())
        ]
