"""The analysis grows with the events, not faster: each shape of trace, tiled in memory from a real
recording, is analysed at N and 8N copies; a linear analysis takes about 8x as long, a quadratic one
about 64x. The test fails above 16x (issue 21).

Shapes (benchmarks/bench_report.py builds the same from JSON):
  a         samples/hostbound (~1 us kernels, two microbatch threads), ten long steps
  b         samples/overlap, one ProfilerStep per recorded step, no comm declared
  d         the DBO shape: samples/overlap with its comm kernels (4 layers x dispatch/combine per
            microbatch, vLLM 0.33's UBatchContext on an H200), one step per recorded step
  d-threads samples/overlap-stock-profiler: microbatches from the launching threads
  nccl      samples/two-gpu-overlap rank 0: real NCCL all-to-all between microbatches
  no-markers, one-step, duplicate-correlation: shape d without step markers (steps from idle
            gaps), with one step spanning everything, with every copy's correlation ids repeated

Time is CPU time of this process (time.process_time: other processes' load does not count), the best
of 3 at each size. N is chosen per shape so that 8N takes 0.1-0.3 s here: large enough that a
quadratic term shows over the fixed cost of an analysis. The code before issue 21 (fb7505c), whose
operation and exposure analyses were quadratic, measured 21-24x on d, d-threads, nccl, no-markers,
one-step and duplicate-correlation at these sizes (a 9.0x, b 6.7x: they have no comm operations);
this code 6-9x (docs/performance.md).
"""

from __future__ import annotations

import time

import pytest
from conftest import SAMPLES
from tiling import tiled

from dbo_trace.analysis.report import Options, analyze_rank
from dbo_trace.trace.load import read_timeline

LIMIT = 16.0  # linear ~8 (less where a fixed cost remains), quadratic ~64
REPEATS = 3

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
