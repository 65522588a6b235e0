"""How the microbatches overlapped: contention, why comm was exposed, held-back comm and the comm operations."""

from __future__ import annotations

from collections.abc import Iterator

from msgspec import UNSET, UnsetType

from dbo_trace.analysis.overlap.contention import Contention, KernelCost
from dbo_trace.analysis.overlap.exposure import LATE_RECORD, Exposure
from dbo_trace.analysis.overlap.held import HeldSummary, LateRecord
from dbo_trace.render.document.base import Count, Struct, _r
from dbo_trace.render.document.held import rounded


# A twin of analysis.overlap.contention.Contention, kept: kernels_us is a key of version 9, absent
# (UNSET) from an older archive's block, which a held dataclass cannot leave out of its --json, and
# comm_transfer_slowdown is the rank's (analysis/report.py, after the peer waits), not Contention's.
class ContentionBlock(Struct):
    compute_slowdown: float | None
    comm_slowdown: float | None
    compute_kernels_overlapped: Count | None
    comm_kernels_overlapped: Count | None
    serial_estimate_us: float | None
    busy_us: float | None
    saved_us: float | None
    comm_transfer_slowdown: float | None  # version 3: comm_slowdown less the waits for peers
    top: list[KernelCost]  # the analysis's, rounded (render/document/held.py)
    # version 9: the kernels' durations summed (busy_us is their union); saved_us is never negative,
    # null where the two are within 1%, and the serial estimate sums names' mean alone times
    kernels_us: float | None | UnsetType = UNSET


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


class HeldBackBlock(Struct):
    comm_kernels_examined: Count
    kernels: Count
    delay_us: float | None
    median_delay_us: float | None
    by_cause: dict[str, HeldCause]
    holders: list[Holder]
    late_record_example: LateRecord | None  # the analysis's, rounded (render/document/held.py)

    def __post_init__(self) -> None:
        if LATE_RECORD in self.by_cause and self.late_record_example is None:
            raise ValueError("late_record_example is missing (a late record is shown with its example)")


class NameCount(Struct):
    name: str
    count: Count


class NameCountTotal(Struct):
    name: str
    count: Count
    total_us: float | None


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
        kernels_us=_r(x.kernels_us),
        top=[rounded(k, slowdown=4) for k in x.top],
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
        late_record_example=None if late is None else rounded(late),
    )
