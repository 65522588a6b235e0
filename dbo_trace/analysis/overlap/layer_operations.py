"""Which layer each communication operation belongs to: each operation's (layer, role) from its place
in its microbatch's step, and the operations per layer, consecutive layers that say the same
together (docs/analysis.md, "The DBO ledger")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


# -- comm operations by layer and role ----------------------------------------------------------

Role = Literal["dispatch", "combine", "send", "recv", "round trip"]  # the document writes it as it is
DISPATCH: Role = "dispatch"
COMBINE: Role = "combine"
SEND: Role = "send"
RECV: Role = "recv"
ROUND_TRIP: Role = "round trip"


@dataclass(frozen=True)
class LayerOps:
    """One layer's comm operations, both microbatches (or layers alike, first..last)."""

    first_layer: int
    last_layer: int  # layers first..last said the same (the first one's figures)
    operations: int  # per layer
    median_us: float  # the layer's operations' median times, added
    hidden_fraction: float | None  # of that time, under compute
    median_exposed_us: float  # the operations' median exposed times, added
    reason: str | None  # the reason of the operation with the most exposed time
    exposed_fraction: float | None = None  # of the layer's time, not under compute: hidden_fraction's basis


def operation_places(
    ubatch: list[int], index: list[int], layers: int | None, sendrecv: bool
) -> list[tuple[int | None, Role | None]]:
    """Each comm operation's (layer, role) from its place k in its microbatch's step: with 2 operations
    per layer, dispatch and combine (send and receive where every comm kernel is a SendRecv); with one,
    a round trip. None where the layers are unknown or the count does not fit them."""
    per_ub: dict[int, int] = {}
    for u, k in zip(ubatch, index):
        per_ub[u] = max(per_ub.get(u, 0), k + 1)
    out: list[tuple[int | None, Role | None]] = []
    for u, k in zip(ubatch, index):
        n = per_ub[u]
        if not layers or u < 0:
            out.append((None, None))
        elif n == 2 * layers:
            first, second = (SEND, RECV) if sendrecv else (DISPATCH, COMBINE)
            out.append((k // 2, first if k % 2 == 0 else second))
        elif n == layers:
            out.append((k, ROUND_TRIP))
        else:
            out.append((None, None))
    return out


def _alike(a: LayerOps, b: LayerOps) -> bool:
    """Two layers' rows say the same: times within 10%, hidden shares within 5 points, one reason."""

    def near(x: float, y: float) -> bool:
        return abs(x - y) <= 0.1 * max(abs(x), abs(y), 1e-9)

    hidden = (a.hidden_fraction is None) == (b.hidden_fraction is None) and (
        a.hidden_fraction is None or abs(a.hidden_fraction - (b.hidden_fraction or 0.0)) <= 0.05
    )
    exposed = near(a.median_exposed_us, b.median_exposed_us) or max(a.median_exposed_us, b.median_exposed_us) < 1.0
    return a.operations == b.operations and near(a.median_us, b.median_us) and hidden and exposed and a.reason == b.reason


def layer_operations(
    layer: list[int | None],
    median_us: list[float],
    hidden_fraction: list[float | None],
    median_exposed_us: list[float],
    reason: list[str | None],
    exposed_fraction: list[float | None] | None = None,
) -> list[LayerOps]:
    """The comm operations per layer (rows of operation_rows with their places), consecutive layers
    that say the same grouped into one row (first..last, the first layer's figures)."""
    by_layer: dict[int, list[int]] = {}
    for i, lay in enumerate(layer):
        if lay is not None:
            by_layer.setdefault(lay, []).append(i)
    rows = []
    for lay in sorted(by_layer):
        ix = by_layer[lay]
        busy = sum(median_us[i] for i in ix)
        known = [i for i in ix if hidden_fraction[i] is not None]
        hidden = sum(median_us[i] * (hidden_fraction[i] or 0.0) for i in known) if known else None
        shares = exposed_fraction or [None] * len(layer)
        told = [i for i in ix if shares[i] is not None]
        exposed = sum(median_us[i] * (shares[i] or 0.0) for i in told) if told else None
        # the reason most of the layer's exposed time has: each operation's exposed time under its reason
        by_reason: dict[str, float] = {}
        for i in ix:
            why = reason[i]
            if why is not None and median_exposed_us[i] > 0:
                by_reason[why] = by_reason.get(why, 0.0) + median_exposed_us[i]
        rows.append(
            LayerOps(
                first_layer=lay,
                last_layer=lay,
                operations=len(ix),
                median_us=busy,
                hidden_fraction=None if hidden is None or busy <= 0 else hidden / busy,
                median_exposed_us=sum(median_exposed_us[i] for i in ix),
                reason=max(by_reason, key=lambda k: by_reason[k]) if by_reason else None,
                exposed_fraction=None if exposed is None or busy <= 0 else exposed / busy,
            )
        )
    grouped: list[LayerOps] = []
    for row in rows:
        if grouped and grouped[-1].last_layer == row.first_layer - 1 and _alike(grouped[-1], row):
            grouped[-1] = LayerOps(**{**grouped[-1].__dict__, "last_layer": row.first_layer})
        else:
            grouped.append(row)
    return grouped
