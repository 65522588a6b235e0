"""Microbatches from launching threads (attribution._from_threads), computed with grouped numpy,
against a plain per-step reference written from the rule in its docstring: in each step where
exactly two non-main threads launched at least THREAD_MIN_LAUNCHES kernels each, within
THREAD_BALANCE of each other, the one that launched first is ub0 and the other ub1; every call of
theirs in that step takes that microbatch."""

from types import SimpleNamespace

import numpy as np
import pytest

from dbo_trace.analysis.steps import attribution as a
from dbo_trace.trace.timeline import Intervals

NAMES = ["cudaLaunchKernel", "cudaGraphLaunch", "cudaMemcpyAsync", "cudaStreamSynchronize"]


def reference(start, lane, name, step, main):
    ubatch = np.full(len(start), -1, np.int8)
    launch = [NAMES[n] in ("cudaLaunchKernel", "cudaGraphLaunch") for n in name]
    for s in sorted(set(step.tolist()) - {-1}):
        calls = [i for i in range(len(start)) if step[i] == s]
        firsts, counts = {}, {}
        for i in sorted(calls, key=lambda i: (start[i], i)):  # time order, ties in call order
            if launch[i] and lane[i] not in main:
                firsts.setdefault(lane[i], len(firsts))
                counts[lane[i]] = counts.get(lane[i], 0) + 1
        threads = [t for t in counts if counts[t] >= a.THREAD_MIN_LAUNCHES]
        if len(threads) != 2 or max(counts[t] for t in threads) > a.THREAD_BALANCE * min(counts[t] for t in threads):
            continue
        order = sorted(threads, key=firsts.get)
        for i in calls:
            if lane[i] in order:
                ubatch[i] = order.index(lane[i])
    return ubatch


@pytest.mark.parametrize("seed", range(60))
def test_grouped_threads_agree_with_the_per_step_rule(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    start = np.sort(rng.integers(0, 60, n).astype(float))  # many ties in time
    lane = rng.choice([1, 2, 3, 7, 8, 9][: int(rng.integers(1, 7))], n)
    name = rng.choice(len(NAMES), n, p=[0.6, 0.1, 0.15, 0.15])
    step = np.sort(rng.integers(-1, int(rng.integers(1, 12)), n))
    step[rng.random(n) < 0.1] = -1
    main = {1} if seed % 2 else set()
    order = rng.permutation(n)  # calls need not come in time order
    start, lane, name, step = start[order], lane[order], name[order], step[order]
    tl = SimpleNamespace(names=NAMES, calls=Intervals(start, start + 1, name, lane, np.arange(n)))
    ubatch = np.full(n, -1, np.int8)
    found = a._from_threads(tl, step, main, ubatch)
    expected = reference(start, lane, name, step, main)
    assert ubatch.tolist() == expected.tolist()
    assert found == bool((expected >= 0).any())
