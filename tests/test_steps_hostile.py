"""Training iterations from hostile `Optimizer.step#` ranges: time linear in the ranges however many
distinct names they carry, and the iterations as docs/analysis.md defines them."""

import os
import time
from pathlib import Path

import numpy as np

from dbo_trace.analysis.steps import optimizer_steps
from dbo_trace.trace.timeline import Intervals, Timeline


def _intervals(start, end, name):
    n = len(start)
    return Intervals(
        np.asarray(start, float),
        np.asarray(end, float),
        np.asarray(name, np.int64),
        np.ones(n, np.int64),
        np.full(n, -1, np.int64),
    )


def _timeline(names, start, end, name):
    empty = _intervals([], [], [])
    return Timeline(
        Path("t.json"),
        0,
        1,
        names,
        empty,
        np.zeros(0, bool),
        empty,
        _intervals(start, end, name),
        np.ones(len(start), bool),
        None,
    )


def _distinct_optimizers(n):
    """n optimizer steps, each under its own name (each steps once: all are the clock)."""
    names = [f"Optimizer.step#O{i}.step" for i in range(n)]
    start = np.arange(n) * 10.0
    return _timeline(names, start, start + 5, np.arange(n))


def test_many_distinct_optimizer_names_take_linear_time():
    optimizer_steps(_distinct_optimizers(100))  # warm
    times = []
    for n in (2_000, 16_000):
        tl = _distinct_optimizers(n)
        best = float("inf")
        for _ in range(3):  # the best of three in CPU time: a loaded machine's pauses do not count
            started = time.process_time()
            steps = optimizer_steps(tl)
            best = min(best, time.process_time() - started)
        times.append(best)
        assert steps is not None and len(steps) == 1  # each optimizer stepped once: one iteration, ending at the last
        assert steps.end[0] == (n - 1) * 10 + 5
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    # 8x the ranges: linear is 8x, a pass over all ranges per name 64x.
    assert times[1] < 0.05 or times[1] / times[0] < 24, f"{times} (load {load})"


def test_two_optimizers_end_each_iteration_at_the_later_step():
    # SGD steps at 10, 30, 50; Adam right after each; a third optimizer steps once (not the clock).
    names = ["Optimizer.step#SGD.step", "Optimizer.step#Adam.step", "Optimizer.step#Rare.step"]
    start = [10, 12, 30, 32, 50, 52, 60]
    end = [11, 14, 31, 35, 51, 53, 61]
    name = [0, 1, 0, 1, 0, 1, 2]
    steps = optimizer_steps(_timeline(names, start, end, name))
    assert list(steps.end) == [14, 35, 53]
    assert list(steps.start) == [10, 14, 35]
