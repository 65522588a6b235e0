"""The analysis grows with the events, not faster: each shape of trace, tiled in memory from a real
recording, is analysed at N and 8N copies; a linear analysis takes about 8x as long, a quadratic one
about 64x. The test fails above 16x (issue 21). A second test counts work instead of timing it.

Shapes (benchmarks/bench_report.py builds the same from JSON):
  a         samples/hostbound (~1 us kernels, two microbatch threads), ten long steps
  b         samples/overlap, one ProfilerStep per recorded step, no comm declared
  d         the DBO shape: samples/overlap with its comm kernels (4 layers x dispatch/combine per
            microbatch, vLLM 0.33's UBatchContext on an H200), one step per recorded step
  d-threads samples/overlap-stock-profiler: microbatches from the launching threads
  nccl      samples/two-gpu-overlap rank 0: real NCCL all-to-all between microbatches
  two ranks samples/two-gpu-overlap, both ranks on one clock (tiling.tiled_ranks), through the
            cross-rank path: matching, the waits, the wait/transfer and round-trip splits
  no-markers, one-step, duplicate-correlation: shape d without step markers (steps from idle
            gaps), with one step spanning everything, with every copy's correlation ids repeated
  fresh-threads shape d with new CPU thread ids in every copy, the calls keeping the first's (as
            profile_all_threads records each step's new microbatch threads): the host-time split
            looked at every event per such thread (20x before the fix)

Time is CPU time of this process (time.process_time: other processes' load does not count), the best
of 3 at each size. N is chosen per shape so that 8N takes 0.1-0.3 s here: large enough that a
quadratic term shows over the fixed cost of an analysis. The code before issue 21 (fb7505c), whose
operation and exposure analyses were quadratic, measured 21-24x on d, d-threads, nccl, no-markers,
one-step and duplicate-correlation at these sizes (a 9.0x, b 6.7x: they have no comm operations);
this code 6-9x (docs/performance.md).

Work, counted independently of time: the array elements handed to the analysis's functions (every
call of a function defined in dbo_trace/analysis, each ndarray argument's size, arrays in tuple
arguments and in dataclass arguments, such as the rank's shared state RankDetail, too). A helper
called once per item with whole arrays, the usual shape of a quadratic path, makes that count grow
with items x events. It is exact and needs no repetition: 7.8-8.0x for 8x the copies on every shape
here (under 8 where a state object holds arrays that grow less than the events); the code before
issue 21 gave 39-48x on the six shapes with comm operations at 2 and 16 copies. It cannot see a
loop that scans inline (a mask per step in the loop body): the timing test is for those.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import SAMPLES
from tiling import tiled

import dbo_trace.analysis
from dbo_trace.analysis.model import Options
from dbo_trace.analysis.rank import analyze_rank
from dbo_trace.trace.load import read_timeline

LIMIT = 16.0  # linear ~8 (less where a fixed cost remains), quadratic ~64
REPEATS = 3
WORK_LIMIT = 10.0  # the work count is exact: 8 for linear work
WORK_COPIES = 2  # and needs no size to rise above a fixed cost: 2 and 16 copies

SPIN = ("spin_kernel",)  # the samples' emulated comm kernel, as their manifests declare it
SHAPES = {  # name: (sample, tiling, comm patterns, N copies)
    "a": ("hostbound", {"markers": "few"}, (), 8),
    "b": ("overlap", {}, (), 32),
    "d": ("overlap", {}, SPIN, 16),
    "d-threads": ("overlap-stock-profiler", {}, SPIN, 16),
    "nccl": ("two-gpu-overlap", {}, (), 16),
    "no-markers": ("overlap", {"markers": "none"}, SPIN, 16),
    "one-step": ("overlap", {"markers": "one"}, SPIN, 16),
    "duplicate-correlation": ("overlap", {"shift_correlation": False}, SPIN, 96),
    "fresh-threads": ("overlap", {"fresh_cpu_threads": True}, SPIN, 16),
}


def _best_time(run) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        t = time.process_time()
        run()
        best = min(best, time.process_time() - t)
    return best


@pytest.mark.parametrize("shape", list(SHAPES))
def test_analysis_grows_linearly(shape):
    sample, how, comm, n = SHAPES[shape]
    (trace,) = sorted((SAMPLES / sample / "traces").glob("rank0*.json.gz"))
    recording = read_timeline(trace, 0)
    options = Options(comm_patterns=comm)
    small, large = tiled(recording, n, **how), tiled(recording, 8 * n, **how)
    assert len(large.gpu) == 8 * len(small.gpu)
    first = analyze_rank(small, [], options)
    assert first.steps, "the shape has steps to analyse"
    t_small = _best_time(lambda: analyze_rank(small, [], options))
    t_large = _best_time(lambda: analyze_rank(large, [], options))
    ratio = t_large / max(t_small, 1e-9)
    print(f"{shape}: {t_small * 1000:.1f} ms at {n} copies, {t_large * 1000:.1f} ms at {8 * n}: {ratio:.1f}x")
    assert ratio <= LIMIT, f"{shape}: 8x the events took {ratio:.1f}x the time ({t_small:.3f} s to {t_large:.3f} s)"


ANALYSIS = str(Path(dbo_trace.analysis.__file__).parent)


def _elements(value, depth: int = 0) -> int:
    """The array elements in an argument: an array, the arrays of a tuple, and those a dataclass
    holds (a rank's state, RankDetail, its timeline and partition: two levels down), so that a
    helper called per item with the whole state counts its arrays too."""
    if isinstance(value, np.ndarray):
        return value.size
    if isinstance(value, tuple):
        return sum(x.size for x in value if isinstance(x, np.ndarray))
    if depth < 2 and dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(_elements(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value))
    return 0


def _elements_passed(run) -> int:
    """The array elements passed to functions of dbo_trace/analysis while run() runs."""
    total = 0

    def profile(frame, event, _arg):
        nonlocal total
        if event != "call" or not frame.f_code.co_filename.startswith(ANALYSIS):
            return
        code = frame.f_code
        for name in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]:
            if name != "self":  # a method's own object is not handed to it
                total += _elements(frame.f_locals.get(name))

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(previous)
    return total


@pytest.mark.parametrize("shape", list(SHAPES))
def test_analysis_work_grows_linearly(shape):
    sample, how, comm, _n = SHAPES[shape]
    (trace,) = sorted((SAMPLES / sample / "traces").glob("rank0*.json.gz"))
    recording = read_timeline(trace, 0)
    options = Options(comm_patterns=comm)
    counts = [
        _elements_passed(lambda copies=copies: analyze_rank(tiled(recording, copies, **how), [], options))
        for copies in (WORK_COPIES, 8 * WORK_COPIES)
    ]
    assert counts[0] > 0, "the count saw the analysis run"
    ratio = counts[1] / counts[0]
    print(f"{shape}: {counts[0]:,} array elements to the analysis at {WORK_COPIES} copies, {counts[1]:,} at 8x: {ratio:.2f}x")
    assert ratio <= WORK_LIMIT, f"{shape}: 8x the events passed {ratio:.2f}x the array elements to the analysis"


def test_the_cross_rank_path_grows_linearly():
    """Both ranks of samples/two-gpu-overlap (real NCCL all-to-all between microbatches, every step
    with comm operations) at N and 8N copies, through matching, the waits, the wait/transfer split
    and the round trip's split: the ranks' analyses and their combination."""
    from tiling import tiled_ranks

    from dbo_trace.analysis.report import combine

    traces = sorted((SAMPLES / "two-gpu-overlap" / "traces").glob("rank*.json.gz"))
    recordings = [read_timeline(t, r) for r, t in enumerate(traces)]
    options = Options()
    n = 8

    def run(timelines):
        return combine([analyze_rank(tl, [], options, rank=r) for r, tl in enumerate(timelines)], options, ["x"], [])

    small, large = tiled_ranks(recordings, n), tiled_ranks(recordings, 8 * n)
    first = run(small)
    assert first.cross_rank is not None and first.cross_rank.waits is not None and len(first.cross_rank.waits.ops) == 80 * n
    assert all(r.wait_split is not None and r.round_trips.wait_per_round_trip_us is not None for r in first.ranks)
    t_small, t_large = _best_time(lambda: run(small)), _best_time(lambda: run(large))
    ratio = t_large / max(t_small, 1e-9)
    print(f"two ranks: {t_small * 1000:.1f} ms at {n} copies, {t_large * 1000:.1f} ms at {8 * n}: {ratio:.1f}x")
    assert ratio <= LIMIT, f"8x the events took {ratio:.1f}x the time ({t_small:.3f} s to {t_large:.3f} s)"
