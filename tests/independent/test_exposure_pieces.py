"""Exposed comm cut into pieces by reason (analysis/overlap/exposure.py), against a plain per-stretch
reference of the rule in its docstring: each stretch's comm kernel (the latest-starting of the 16
comm kernels before its middle still running there), the part spent waiting for a peer first, the
rest with the hold's cause or the compute state; each reason's total added in stretch order. The
totals must agree to the last bit (they are added in the same order)."""

import numpy as np
import pytest

from dbo_trace.analysis import classify as c
from dbo_trace.analysis.overlap import exposure as x


def reference(seg_start, seg_end, start, end, kind, ubatch, step, launch_start, held, peer_until):
    comm = sorted(np.flatnonzero(kind == c.COMM).tolist(), key=lambda i: start[i])
    by = {r: 0.0 for r in x.REASONS}
    kernels, lengths, reasons = [], [], []
    for s, e in zip(seg_start.tolist(), seg_end.tolist()):
        mid = 0.5 * (s + e)
        before = [i for i in comm if start[i] <= mid][-16:]
        running = [i for i in before if end[i] >= mid]
        if not running:
            continue
        k = running[-1]
        wait = 0.0
        if peer_until is not None and peer_until[k] > s:
            wait = min(e, peer_until[k]) - s
        state = x._compute_states(np.array([k]), np.array([s + wait]), start, kind, ubatch, step, launch_start)[0]
        if wait > 0:
            by[x.PEER] += wait
            kernels.append(k), lengths.append(wait), reasons.append(x.PEER)
            if s + wait >= e:
                continue
        reason = held.get(k) or x.STATES[state]
        by[reason] += e - (s + wait)
        kernels.append(k), lengths.append(e - (s + wait)), reasons.append(reason)
    return by, tuple(kernels), tuple(lengths), tuple(reasons)


@pytest.mark.parametrize("seed", range(80))
def test_pieces_and_totals_agree_with_the_per_stretch_rule(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 150))
    start = np.sort(rng.uniform(0, 1000, n))
    end = start + rng.uniform(0, 60, n)
    kind = rng.choice([c.COMPUTE, c.COMM, c.COPY], n).astype(np.int8)
    ubatch = rng.integers(-1, 2, n).astype(np.int8)
    step = rng.integers(-1, 5, n)
    launch_start = np.where(rng.random(n) < 0.2, np.nan, start - rng.uniform(0, 20, n))
    m = int(rng.integers(0, 50))
    seg_start = np.sort(rng.uniform(0, 1000, m))
    seg_end = seg_start + rng.uniform(0, 30, m)
    held = {int(k): str(rng.choice([x.CROWDED, x.LATE_RECORD, x.HELD])) for k in np.flatnonzero(kind == c.COMM) if rng.random() < 0.3}
    peer_until = np.where(rng.random(n) < 0.4, start + rng.uniform(0, 40, n), np.nan) if seed % 2 else None
    got = x.exposure(
        seg_start=seg_start, seg_end=seg_end, start=start, end=end, kind=kind, ubatch=ubatch, step=step,
        launch_start=launch_start, held=held, peer_until=peer_until,
    )  # fmt: skip
    by, kernels, lengths, reasons = reference(seg_start, seg_end, start, end, kind, ubatch, step, launch_start, held, peer_until)
    assert got.by_reason_us == by and list(got.by_reason_us) == list(by)
    assert (got.stretch_kernel, got.stretch_us, got.stretch_reason) == (kernels, lengths, reasons)
    assert got.exposed_us == float(np.sum(seg_end - seg_start))
