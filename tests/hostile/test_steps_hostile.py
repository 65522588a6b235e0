"""Training iterations from hostile `Optimizer.step#` ranges: work linear in the ranges however many
distinct names they carry, and the iterations as docs/analysis.md defines them."""

from pathlib import Path

import numpy as np
from work import calls_made, elements_passed, peak_bytes

from dbo_trace.analysis.steps.sources import optimizer_steps
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


def test_many_distinct_optimizer_names_take_linear_work():
    """8x the ranges, each under its own name: linear is 8x the elements handed to the analysis, the
    calls and the memory; a pass over all ranges per name, 64x the elements (counted: tests/helpers/work.py;
    timed: benchmarks/bench_growth.py)."""
    for n in (2_000, 16_000):
        steps = optimizer_steps(_distinct_optimizers(n))
        assert steps is not None and len(steps) == 1  # each optimizer stepped once: one iteration, ending at the last
        assert steps.end[0] == (n - 1) * 10 + 5
    small, large = _distinct_optimizers(2_000), _distinct_optimizers(16_000)
    for measure in (elements_passed, calls_made, peak_bytes):
        a, b = (measure(lambda x=x: optimizer_steps(x)) for x in (small, large))
        assert a > 0 and b / a <= 9.0, f"{measure.__name__}: 8x the ranges gave {b / a:.2f}x"


def test_two_optimizers_end_each_iteration_at_the_later_step():
    # SGD steps at 10, 30, 50; Adam right after each; a third optimizer steps once (not the clock).
    names = ["Optimizer.step#SGD.step", "Optimizer.step#Adam.step", "Optimizer.step#Rare.step"]
    start = [10, 12, 30, 32, 50, 52, 60]
    end = [11, 14, 31, 35, 51, 53, 61]
    name = [0, 1, 0, 1, 0, 1, 2]
    steps = optimizer_steps(_timeline(names, start, end, name))
    assert list(steps.end) == [14, 35, 53]
    assert list(steps.start) == [10, 14, 35]
