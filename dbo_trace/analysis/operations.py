"""The communication operations of a DBO run, one row per (microbatch, k-th operation of the step):
dispatch and combine per layer and microbatch, or each NCCL collective. Medians over steps of the
operation's busy time, the share of it hidden under compute, and the main reason it was exposed.

An operation is a run of comm kernels launched back to back by one thread (report.comm_operations
counts them the same way). Pure: arrays in, rows out.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from dbo_trace.analysis import classify as c
from dbo_trace.analysis.exposure import Exposure
from dbo_trace.analysis.intervals import covered_within, grouped_sum, grouped_union, run_firsts, union


@dataclass(frozen=True)
class OperationRow:
    ubatch: int  # -1: microbatches unknown
    index: int  # the k-th operation of that microbatch in a step (0-based)
    steps: int  # steps that had it
    median_us: float  # busy time of the operation's kernels
    hidden_fraction: float | None  # of its busy time, under compute (all steps)
    median_exposed_us: float
    reason: str | None  # the exposure reason with the most time, where exposed
    layer: int | None = None  # its layer and role (dispatch/combine, send/recv): ledger.operation_places
    role: str | None = None


def operation_ids(
    *,
    step: np.ndarray,  # (n_gpu,) int64, -1 in none
    lane: np.ndarray,  # (n_gpu,) int64: the launching thread, -1 unknown
    launch_start: np.ndarray,  # (n_gpu,) float64, NaN unknown
    start: np.ndarray,  # (n_gpu,) float64
    is_comm: np.ndarray,  # (n_gpu,) bool
) -> np.ndarray:
    """Per GPU activity, the id of the comm operation it is part of (-1: not comm or in no step)."""
    ids = np.full(len(step), -1, np.int64)
    keep = np.flatnonzero(step >= 0)
    if not len(keep):
        return ids
    order = keep[np.lexsort((start[keep], np.nan_to_num(launch_start[keep], nan=-np.inf), lane[keep], step[keep]))]
    s, ln, comm = step[order], lane[order], is_comm[order]
    same = np.r_[False, (s[1:] == s[:-1]) & (ln[1:] == ln[:-1])]
    begins = comm & ~(same & np.r_[False, comm[:-1]])
    running = np.cumsum(begins) - 1
    ids[order[comm]] = running[comm]
    return ids


def _first_kernels(op: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(positions of the operations' kernels sorted by operation then start, operation ids ascending,
    each one's first kernel: the earliest start, the lowest index on ties, as argmin picks)."""
    sel = np.flatnonzero(op >= 0)
    by_op = sel[np.lexsort((start[sel], op[sel]))]
    heads = run_firsts(op[by_op])
    return by_op, op[by_op][heads], by_op[heads]


def _places(
    ids: np.ndarray, first: np.ndarray, step: np.ndarray, ubatch: np.ndarray, start: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The operations (ids, with their first kernels) in order of (step, microbatch, first start, id),
    and each one's place k in its microbatch's operations of its step (0-based)."""
    order = np.lexsort((ids, start[first], ubatch[first], step[first]))
    st, ub = step[first][order], ubatch[first][order]
    heads = np.flatnonzero(np.r_[True, (st[1:] != st[:-1]) | (ub[1:] != ub[:-1])])
    k = np.empty(len(ids), np.int64)
    k[order] = np.arange(len(order)) - np.repeat(heads, np.diff(np.r_[heads, len(order)]))
    return order, k


def operation_index(
    *,
    op: np.ndarray,  # (n_gpu,) int64: operation_ids
    step: np.ndarray,  # (n_gpu,) int64, -1 in none
    ubatch: np.ndarray,  # (n_gpu,) int8, -1 unknown
    start: np.ndarray,  # (n_gpu,) float64
) -> np.ndarray:
    """Per GPU activity, the k-th comm operation of its microbatch in its step (-1: none): the index
    of operation_rows' rows, which the cross-rank waits are told by."""
    out = np.full(len(op), -1, np.int64)
    by_op, ids, first = _first_kernels(op, start)
    if len(ids):
        _order, k = _places(ids, first, step, ubatch, start)
        out[by_op] = k[np.searchsorted(ids, op[by_op])]
    return out


def operation_rows(
    *,
    start: np.ndarray,  # (n_gpu,) float64
    end: np.ndarray,  # (n_gpu,) float64
    kind: np.ndarray,  # (n_gpu,) int8: classify.COMPUTE / COMM / COPY
    ubatch: np.ndarray,  # (n_gpu,) int8, -1 unknown
    step: np.ndarray,  # (n_gpu,) int64, -1 in none
    op: np.ndarray,  # (n_gpu,) int64: operation_ids
    exposure: Exposure | None,
) -> list[OperationRow]:
    exposed_of: dict[int, dict[str, float]] = {}  # per operation, exposed us by reason, added in stretch order
    if exposure is not None and exposure.stretch_kernel:
        stretch_op = op[np.asarray(exposure.stretch_kernel, np.int64)].tolist()
        for o, t, r in zip(stretch_op, exposure.stretch_us, exposure.stretch_reason):
            if o >= 0:
                mine = exposed_of.get(o)
                if mine is None:
                    mine = exposed_of[o] = {}
                mine[r] = mine.get(r, 0) + t
    sel = np.flatnonzero(op >= 0)
    if not len(sel):
        return []
    # Every operation at once, over arrays sorted by operation: its first kernel, its busy time (the
    # union of its kernels, summed as intervals.length sums it) and the part of that under compute
    # (prefix sums over one union of all compute): sorts and searches, not a union over all compute
    # per operation.
    _by_op, ids, first = _first_kernels(op, start)
    merged_op, m_start, m_end = grouped_union(op[sel], start[sel], end[sel])
    m_heads = run_firsts(merged_op)  # the same operations, in the same (ascending) order as ids
    busy_of = grouped_sum(m_heads, m_end - m_start)
    compute_start, compute_end = union(start[kind == c.COMPUTE], end[kind == c.COMPUTE])
    hidden_of = np.add.reduceat(covered_within(m_start, m_end, compute_start, compute_end), m_heads)
    at = {o: i for i, o in enumerate(ids.tolist())}
    busy_list, hidden_list = busy_of.tolist(), hidden_of.tolist()
    order, k = _places(ids, first, step, ubatch, start)
    groups: dict[tuple[int, int], list[int]] = {}  # (microbatch, k) -> its operations, in step order
    for o, ub, place in zip(ids[order].tolist(), ubatch[first][order].tolist(), k[order].tolist()):
        groups.setdefault((ub, place), []).append(o)
    rows = []
    for (ub, index), ops in sorted(groups.items()):
        busy, hidden, exposed, reasons = [], 0.0, [], Counter[str]()
        for o in ops:
            busy.append(busy_list[at[o]])
            hidden += hidden_list[at[o]]
            mine = exposed_of.get(o)
            exposed.append(sum(mine.values()) if mine else 0)
            if mine:
                reasons.update(mine)
        total = float(np.sum(busy))
        rows.append(
            OperationRow(
                ubatch=ub,
                index=index,
                steps=len(ops),
                median_us=float(np.median(busy)),
                hidden_fraction=hidden / total if total > 0 else None,
                median_exposed_us=float(np.median(exposed)),
                reason=reasons.most_common(1)[0][0] if reasons else None,
            )
        )
    return rows
