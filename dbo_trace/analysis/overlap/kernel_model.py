"""The comm kernels' overlap with compute, as the verdict asks it (verdict/evidence_types.py
OverlapModel): the share of comm time concurrent with compute decides the label; the round-trip
criterion is one microbatch's compute against the comm per round trip (docs/analysis.md, "Verdict",
"Round trips and the DBO criterion"). The model of every window that has no other."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dbo_trace.analysis.verdict.evidence_types import HIDDEN_COMM, Evidence, GpuWork, HiddenPerStep
from dbo_trace.analysis.verdict.reasons import (
    CommOverlap,
    Criterion,
    ExposedCommFinding,
    MeasurePays,
    NextStep,
    OneMicrobatch,
    Qualifier,
    Reason,
)


@dataclass(frozen=True)
class KernelOverlap:
    """The kernels' overlap: comm on its own stream under compute, with or without microbatches."""

    @property
    def serves(self) -> bool:
        return False

    def label_share(self, e: Evidence) -> float | None:
        return e.metrics.comm_hidden_fraction

    def comm_reason(self, e: Evidence, near_line: Callable[[float | None], bool]) -> Reason:
        m = e.metrics
        hidden = m.comm_hidden_fraction
        return CommOverlap(
            hidden=hidden, hidden_us=m.comm_hidden_us, busy_us=m.comm_busy_us, exposed_us=m.comm_exposed_us,
            cross=m.comm_hidden_cross_fraction if e.microbatched else None, split=e.wait_split, borderline=near_line(hidden),
        )  # fmt: skip

    def criterion(self, e: Evidence, host_bound: bool) -> Reason | None:
        rt = e.round_trips
        if not e.microbatched or rt is None or rt.ratio is None:
            return None
        return Criterion(
            round_trips=rt, host_bound=host_bound, hidden=e.metrics.comm_hidden_fraction,
            peers_split=e.wait_split is not None and rt.wait_per_round_trip_us is not None,
        )  # fmt: skip

    def finding(self, e: Evidence) -> Qualifier | None:
        return None

    def exposed_finding(self, e: Evidence, gpu: GpuWork, per_step_us: float) -> Qualifier | None:
        return ExposedCommFinding(per_step_us=per_step_us, share=gpu.comm_exposed_us / gpu.span_us if gpu.span_us > 0 else None)

    def hidden(self, e: Evidence) -> HiddenPerStep:
        """The comm under the other microbatch's compute (any compute where the kernels' microbatches are
        unknown), times comm per round trip times round trips per step."""
        m, rt = e.metrics, e.round_trips
        if rt is None:
            return HiddenPerStep(None, HIDDEN_COMM)
        share = m.comm_hidden_cross_fraction if m.comm_hidden_cross_fraction is not None else m.comm_hidden_fraction
        return HiddenPerStep(share * rt.comm_per_round_trip_us * rt.per_step if share is not None else None, HIDDEN_COMM)

    def criterion_missed(self, e: Evidence) -> NextStep | None:
        rt = e.round_trips
        if not e.microbatched or rt is None or rt.ratio is None or rt.ratio >= 1.0:
            return None
        return MeasurePays(
            compute_us=rt.compute_per_round_trip_us, round_trip_us=rt.comm_per_round_trip_us, ratio=rt.ratio, disaggregated=False
        )

    def own_step(self, e: Evidence) -> NextStep | None:
        return None

    def one_microbatch(self, e: Evidence, exposed_per_step_us: float | None) -> NextStep:
        m = e.metrics
        return OneMicrobatch(exposed_us=m.comm_exposed_us, span_us=m.span_us, exposed_per_step_us=exposed_per_step_us, afd=None)


KERNEL_OVERLAP = KernelOverlap()
