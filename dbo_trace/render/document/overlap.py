"""How the microbatches overlapped: contention, why comm was exposed, held-back comm and the comm operations."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields

from dbo_trace.analysis.overlap.contention import Contention
from dbo_trace.analysis.overlap.exposure import LATE_RECORD, Exposure
from dbo_trace.analysis.overlap.held import HeldSummary, LateRecord
from dbo_trace.render.document.base import Count, Struct, _r
from dbo_trace.render.document.held import rounded


@dataclass(frozen=True, kw_only=True)
class ContentionBlock(Contention):
    """The analysis's Contention as it is, rounded (render/document/held.py; slowdowns to 4 decimals,
    its top kernels' too), and the rank's comm slowdown less the waits for peers after it."""

    comm_transfer_slowdown: float | None  # version 3; the rank's (analysis/report.py, after the peer waits)
    # version 9 (saved_us never negative, null where the kernels' sum and union are within 1%; the
    # serial estimate sums names' mean alone times): an older archive's block lacks it, read as None
    # (not measured; the archive's version check reads the strict decoding, where it is absent)
    kernels_us: float | None = None  # type: ignore[assignment]  # the analysis always has it; an old archive may not


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
    block = ContentionBlock(**{f.name: getattr(x, f.name) for f in fields(x)}, comm_transfer_slowdown=transfer_slowdown)
    return rounded(block, compute_slowdown=4, comm_slowdown=4, comm_transfer_slowdown=4, slowdown=4)


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
