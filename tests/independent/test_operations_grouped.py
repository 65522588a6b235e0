"""operation_rows by grouped reductions (issue 38) against a plain per-operation reference written
here from docs/analysis.md's definition of the comm operations table: per (microbatch, k-th
operation of the step), over the steps that have it, the median busy time (union of its kernels),
the hidden share of the summed busy time (under any compute kernel), the median exposed time, and
the exposure reason with the most time (the first met on a tie). Random operations, with exposure
stretches of few distinct lengths and reasons so that ties happen."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from headline_reference import covered, merged

from dbo_trace.analysis import classify as c
from dbo_trace.analysis.overlap.exposure import Exposure
from dbo_trace.analysis.overlap.operations import operation_ids, operation_rows

REASONS = ("late-record", "crowded", "host", "waiting")


def _covered(s, e, compute):
    """Length of [s, e] under the union of compute spans."""
    pieces = [(max(s, cs), min(e, ce)) for cs, ce in compute if min(e, ce) > max(s, cs)]
    return covered(pieces)


def reference(start, end, kind, ubatch, step, op, exposure):
    compute = [(s, e) for s, e, k in zip(start, end, kind) if k == c.COMPUTE]
    ops: dict[int, list[int]] = {}
    for i, o in enumerate(op):
        if o >= 0:
            ops.setdefault(int(o), []).append(i)
    info = {}
    for o, members in ops.items():
        first = min(members, key=lambda i: (start[i], i))
        spans = [(start[i], end[i]) for i in members]
        # busy: the union of its kernels; hidden: each merged piece's part under compute
        pieces = merged(spans)
        info[o] = dict(first=first, busy=covered(spans), hidden=sum(_covered(s, e, compute) for s, e in pieces))
    exposed: dict[int, dict[str, float]] = {}
    for k, t, r in zip(exposure.stretch_kernel, exposure.stretch_us, exposure.stretch_reason):
        o = int(op[k])
        if o >= 0:
            exposed.setdefault(o, {})
            exposed[o][r] = exposed[o].get(r, 0.0) + t
    # the k-th operation of its microbatch in its step, by first start
    by_place: dict[tuple[int, int], list[int]] = {}
    for o, v in info.items():
        f = v["first"]
        by_place.setdefault((int(step[f]), int(ubatch[f])), []).append(o)
    groups: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for (st, ub), members in by_place.items():
        for k, o in enumerate(sorted(members, key=lambda o: (start[info[o]["first"]], o))):
            groups.setdefault((ub, k), []).append((st, o))
    rows = []
    for (ub, k), members in sorted(groups.items()):
        members.sort()
        busy = [info[o]["busy"] for _, o in members]
        hidden = sum(info[o]["hidden"] for _, o in members)
        ex = [sum(exposed.get(o, {}).values()) for _, o in members]
        totals: dict[str, float] = {}
        for _, o in members:
            for r, t in exposed.get(o, {}).items():
                totals[r] = totals.get(r, 0.0) + t
        best = max(totals.values()) if totals else None
        reason = next((r for r, t in totals.items() if t == best), None)
        rows.append((ub, k, len(members), statistics.median(busy), hidden / sum(busy) if sum(busy) > 0 else None,
                     statistics.median(ex), reason))  # fmt: skip
    return rows


@pytest.mark.parametrize("seed", range(12))
def test_operation_rows_match_the_reference(seed):
    rng = np.random.default_rng(seed)
    n_steps, rows = int(rng.integers(1, 30)), []
    for st in range(n_steps):
        t0 = st * 1000.0
        for ub in (0, 1) if seed % 3 else (-1,):
            for j in range(int(rng.integers(0, 6))):
                for _ in range(int(rng.integers(1, 4))):  # an operation: comm kernels back to back
                    s = t0 + float(rng.integers(0, 900))
                    rows.append((s, s + float(rng.integers(1, 60)), c.COMM, ub, st, 100 + ub * 10 + j))
                s = t0 + float(rng.integers(0, 900))
                rows.append((s, s + float(rng.integers(1, 80)), c.COMPUTE, ub, st, 100 + ub * 10 + j))
    if not rows:
        return
    start, end, kind, ubatch, step, lane = (np.array(x) for x in zip(*rows))
    start, end, kind, ubatch, step, lane = (
        start.astype(float), end.astype(float), kind.astype(np.int8), ubatch.astype(np.int8), step.astype(np.int64), lane.astype(np.int64)
    )
    op = operation_ids(step=step, lane=lane, launch_start=start.copy(), start=start, is_comm=kind == c.COMM)
    comm = np.flatnonzero(kind == c.COMM)
    picks = rng.choice(comm, size=min(len(comm), int(rng.integers(0, 3 * len(comm) + 1)))) if len(comm) else []
    exposure = Exposure(
        exposed_us=0.0,
        stretch_kernel=tuple(int(k) for k in picks),
        stretch_us=tuple(float(rng.choice([1.0, 2.0, 4.0])) for _ in picks),
        stretch_reason=tuple(str(rng.choice(REASONS)) for _ in picks),
    )
    got = [
        (r.ubatch, r.index, r.steps, r.median_us, r.hidden_fraction, r.median_exposed_us, r.reason)
        for r in operation_rows(start=start, end=end, kind=kind, ubatch=ubatch, step=step, op=op, exposure=exposure)
    ]
    want = reference(start, end, kind, ubatch, step, op, exposure)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g[:3] == w[:3] and g[6] == w[6], (g, w)
        assert g[3] == pytest.approx(w[3]) and g[5] == pytest.approx(w[5])
        assert (g[4] is None) == (w[4] is None) and (g[4] is None or g[4] == pytest.approx(w[4])), (g, w)
