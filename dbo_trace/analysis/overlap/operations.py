"""The communication operations of a DBO run, one row per (microbatch, k-th operation of the step):
dispatch and combine per layer and microbatch, or each NCCL collective. Medians over steps of the
operation's busy time, the share of it hidden under compute, and the main reason it was exposed.

An operation is a run of comm kernels launched back to back by one thread (rank.operations_per_step
counts them the same way). Pure: arrays in, rows out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np

from dbo_trace.analysis import classify as c
from dbo_trace.analysis.overlap.exposure import Exposure, ExposureReason
from dbo_trace.analysis.overlap.layer_operations import Role, operation_places
from dbo_trace.analysis.intervals import covered_within, grouped_median, grouped_sum, grouped_union, run_firsts, union


@dataclass(frozen=True)
class OperationRow:
    ubatch: int  # -1: microbatches unknown
    index: int  # the k-th operation of that microbatch in a step (0-based)
    steps: int  # steps that had it
    median_us: float  # busy time of the operation's kernels
    hidden_fraction: float | None  # of its busy time, under compute (all steps)
    median_exposed_us: float
    reason: ExposureReason | None  # the exposure reason with the most time, where exposed
    layer: int | None = None  # its layer and role (dispatch/combine, send/recv): ledger.operation_places
    role: Role | None = None
    # of its busy time (all steps), exposed: the same basis as hidden_fraction, so that the two add up
    # to the whole (the median exposed time is a median over steps and does not)
    exposed_fraction: float | None = None


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
    layers: int | None = None,
    sendrecv: bool = False,
) -> list[OperationRow]:
    """layers, sendrecv: each row's layer and role (layer_operations.operation_places)."""
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
    # The rows: the operations grouped by (microbatch, k-th of the step), each group in step order
    # (_places' order, kept by a stable sort), groups ascending; every figure a grouped reduction.
    order, k = _places(ids, first, step, ubatch, start)
    ub_of = ubatch[first].astype(np.int64)
    seq = order[np.lexsort((k[order], ub_of[order]))]  # stable: step order within a group
    g_ub, g_k = ub_of[seq], k[seq]
    heads = np.flatnonzero(np.r_[True, (g_ub[1:] != g_ub[:-1]) | (g_k[1:] != g_k[:-1])])
    sizes = np.diff(np.r_[heads, len(seq)])
    n_groups = len(heads)
    group_of = np.empty(len(ids), np.int64)  # per operation (position in ids), its group
    group_of[seq] = np.repeat(np.arange(n_groups), sizes)
    rank_of = np.empty(len(ids), np.int64)  # per operation, its place in the groups' sequence
    rank_of[seq] = np.arange(len(seq))
    busy = busy_of[seq]
    total = grouped_sum(heads, busy)  # np.sum of each group's busy times, to the last bit
    hidden = np.add.reduceat(hidden_of[seq], heads)  # added one by one, in step order
    exposed_of = np.zeros(len(ids))  # per operation, its exposed time
    reason_of: list[ExposureReason | None] = [None] * n_groups
    if exposure is not None and exposure.stretch_kernel:
        stretch_op = op[np.asarray(exposure.stretch_kernel, np.int64)]
        mine = np.flatnonzero(stretch_op >= 0)  # the stretches of an operation, in stretch order
        at = np.searchsorted(ids, stretch_op[mine])
        t = np.asarray(exposure.stretch_us, np.float64)[mine]
        names, code = np.unique(np.asarray(exposure.stretch_reason, dtype=object)[mine], return_inverse=True)
        # Per operation, each reason's time added in stretch order, then the reasons' totals in the
        # order each first appears (a dict's order): as the per-operation dict did.
        pair = at * len(names) + code
        pairs, first_at, pair_code = np.unique(pair, return_index=True, return_inverse=True)
        pair_t = np.zeros(len(pairs))
        np.add.at(pair_t, pair_code, t)
        pair_op = pairs // len(names)
        by_first = np.lexsort((first_at, pair_op))
        np.add.at(exposed_of, pair_op[by_first], pair_t[by_first])
        # Per group, each reason's time over its operations (added in step order, as a Counter's
        # update did), the largest winning; a tie goes to the reason met first, as most_common's.
        met = rank_of[pair_op] * len(exposure.stretch_kernel) + first_at  # when the group met it
        g_pair = group_of[pair_op] * len(names) + pairs % len(names)
        in_seq = np.lexsort((met, g_pair))
        gp, gp_at = np.unique(g_pair[in_seq], return_index=True)
        gp_t = np.zeros(len(gp))
        np.add.at(gp_t, np.searchsorted(gp, g_pair[in_seq]), pair_t[in_seq])
        gp_met = met[in_seq][gp_at]
        gp_group = gp // len(names)
        best = np.lexsort((gp_met, -gp_t, gp_group))
        winners = best[run_firsts(gp_group[best])]
        for g, r in zip(gp_group[winners].tolist(), (gp[winners] % len(names)).tolist()):
            reason_of[g] = cast(ExposureReason, str(names[r]))  # names: the exposure's reasons
    group = np.repeat(np.arange(n_groups), sizes)
    median_busy = grouped_median(group, n_groups, busy)
    median_exposed = grouped_median(group, n_groups, exposed_of[seq])
    exposed = np.add.reduceat(exposed_of[seq], heads)
    ubs, places = g_ub[heads].tolist(), g_k[heads].tolist()
    layer_roles = operation_places(ubs, places, layers, sendrecv)
    return [
        OperationRow(
            ubatch=ub,
            index=index,
            steps=n,
            median_us=med,
            hidden_fraction=h / tot if tot > 0 else None,
            median_exposed_us=med_exp,
            reason=reason,
            exposed_fraction=x / tot if tot > 0 else None,
            layer=layer,
            role=role,
        )
        for ub, index, n, med, h, tot, med_exp, reason, x, (layer, role) in zip(
            ubs,
            places,
            sizes.tolist(),
            median_busy.tolist(),
            hidden.tolist(),
            total.tolist(),
            median_exposed.tolist(),
            reason_of,
            exposed.tolist(),
            layer_roles,
        )
    ]
