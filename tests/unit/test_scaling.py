"""The analysis grows with the events, not faster: each shape of trace, tiled in memory from a real
recording, is analysed at 2 and 16 copies and its work counted (tests/helpers/work.py), not timed: a loaded
machine's CPU time swells (caches and memory bandwidth are shared), a count does not.
benchmarks/bench_growth.py times the same shapes at larger sizes (issue 21: linear about 8x,
quadratic about 64x; the code before issue 21, fb7505c, measured 21-24x on the shapes with comm
operations, this code 6-9x: docs/performance.md).

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


Work: the array elements handed to the analysis's functions (every call of a function defined in
dbo_trace/analysis, each ndarray argument's size, arrays in tuple arguments and in dataclass
arguments, such as the rank's shared state RankDetail, too). A helper called once per item with
whole arrays, the usual shape of a quadratic path, makes that count grow with items x events. It
is exact and needs no repetition: 7.8-8.0x for 8x the copies on every shape here (under 8 where a
state object holds arrays that grow less than the events); the code before issue 21 gave 39-48x on
the six shapes with comm operations. The memory held at once is counted too (tracemalloc, numpy's
arrays included): an all-pairs temporary grows 64x. A loop that scans inline (a mask per step in
its body) is the benchmark's to see.
"""

from __future__ import annotations

import pytest
from conftest import SAMPLES
from tiling import tiled
from work import elements_passed, peak_bytes

from dbo_trace.analysis.model import Options
from dbo_trace.analysis.rank_analysis import analyze_rank
from dbo_trace.trace.load import read_timeline

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


@pytest.mark.parametrize("shape", list(SHAPES))
def test_analysis_work_grows_linearly(shape):
    sample, how, comm, _n = SHAPES[shape]
    (trace,) = sorted((SAMPLES / sample / "traces").glob("rank0*.json.gz"))
    recording = read_timeline(trace, 0)
    options = Options(comm_patterns=comm)
    inputs = [tiled(recording, copies, **how) for copies in (WORK_COPIES, 8 * WORK_COPIES)]
    counts = [elements_passed(lambda tl=tl: analyze_rank(tl, [], options)) for tl in inputs]
    assert counts[0] > 0, "the count saw the analysis run"
    ratio = counts[1] / counts[0]
    print(f"{shape}: {counts[0]:,} array elements to the analysis at {WORK_COPIES} copies, {counts[1]:,} at 8x: {ratio:.2f}x")
    assert ratio <= WORK_LIMIT, f"{shape}: 8x the events passed {ratio:.2f}x the array elements to the analysis"
    peaks = [peak_bytes(lambda tl=tl: analyze_rank(tl, [], options)) for tl in inputs]
    assert peaks[1] / peaks[0] <= WORK_LIMIT, f"{shape}: 8x the events held {peaks[1] / peaks[0]:.2f}x the memory"


def test_the_cross_rank_path_work_grows_linearly():
    """Both ranks of samples/two-gpu-overlap (real NCCL all-to-all between microbatches, every step
    with comm operations) at N and 8N copies, through matching, the waits, the wait/transfer split
    and the round trip's split: the ranks' analyses and their combination."""
    from tiling import tiled_ranks

    from dbo_trace.analysis.report import combine

    traces = sorted((SAMPLES / "two-gpu-overlap" / "traces").glob("rank*.json.gz"))
    recordings = [read_timeline(t, r) for r, t in enumerate(traces)]
    options = Options()
    n = WORK_COPIES

    def run(timelines):
        return combine([analyze_rank(tl, [], options, rank=r) for r, tl in enumerate(timelines)], options, ["x"], [])

    small, large = tiled_ranks(recordings, n), tiled_ranks(recordings, 8 * n)
    first = run(small)
    assert first.cross_rank is not None and first.cross_rank.waits is not None and len(first.cross_rank.waits.ops) == 80 * n
    assert all(r.wait_split is not None and r.round_trips.wait_per_round_trip_us is not None for r in first.ranks)
    for measure in (elements_passed, peak_bytes):
        a, b = (measure(lambda x=x: run(x)) for x in (small, large))
        print(f"two ranks: {measure.__name__} {a:,} at {n} copies, {b:,} at {8 * n}: {b / a:.2f}x")
        assert b / a <= WORK_LIMIT, f"{measure.__name__}: 8x the events gave {b / a:.2f}x"


AFD_STEPS = 8  # and 8x that: tests/helpers/afd_synth.py's pair, 4 layers, two microbatches


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
def test_the_afd_pair_work_grows_linearly(tmp_path, graphs):
    """An AFD pair with DBO (tests/helpers/afd_synth.py: attention and FFN traces on one host's clock) at N
    and 8N steps, through both ranks' analyses and what the pair tells together: the round trips
    (microbatches told by the launching threads eager, by DBO's kernel order under graphs), the
    FFN's parts of each, its trace cut to the attention's window, the pair's figures, time slicing."""
    from afd_synth import afd_pair, pair_analysis

    runs = []
    for steps in (AFD_STEPS, 8 * AFD_STEPS):
        afd_pair(tmp_path / str(steps), dbo=True, graphs=graphs, layers=4, steps=steps, yield_us=5.0)
        runs.append(pair_analysis(tmp_path / str(steps)))
    report = runs[0]()
    (att,) = [r for r in report.ranks if r.afd is not None]
    assert len(att.afd.rows) == AFD_STEPS * 2 * 4 and att.afd.parts is not None and att.afd.parts.matched.all()
    assert report.roles is not None and report.roles.pair is not None and report.roles.pair.steps == AFD_STEPS
    for measure in (elements_passed, peak_bytes):
        a, b = (measure(run) for run in runs)
        print(f"afd pair: {measure.__name__} {a:,} at {AFD_STEPS} steps, {b:,} at {8 * AFD_STEPS}: {b / a:.2f}x")
        assert b / a <= WORK_LIMIT, f"{measure.__name__}: 8x the steps gave {b / a:.2f}x"
