"""Guard (issue 24 item 7): the exposure analysis stays near-linear on the pathologies that made it
quadratic: no step markers (every kernel in no step), one step spanning everything, and duplicate
correlation ids (every kernel resolved to one launch). For each exposed comm stretch the analysis
looked at every compute kernel of the step, or of the whole trace when steps are unknown.

The input is a real sample's analysed arrays (samples/overlap: the GPU activities, their kinds,
microbatches, steps and launches, and the exposed-comm stretches) tiled in time, at N copies and
4N. Linear work grows 4x, n log n a little more; the test fails past 4^(log 16 / log 8) = 6.3x,
the growth of time^(4/3) (16x per 8x), which a per-stretch scan of all kernels exceeds (16x). The
time is the process's CPU time, the best of three runs, so that a busy machine's pauses do not count.
"""

import time

import numpy as np
import pytest
from conftest import SAMPLES

from dbo_trace.analysis import classify as c
from dbo_trace.analysis.accounting import B_COMM
from dbo_trace.analysis.exposure import exposure
from dbo_trace.analysis.model import Options
from dbo_trace.pipeline import analyze_paths

N = 600  # copies of the sample (80 comm and 80 compute kernels each); 4N: 192,000 kernels, tens of ms of CPU a run
LIMIT = 4 ** (np.log(16) / np.log(8))  # 6.35x for 4x the input


@pytest.fixture(scope="module")
def sample_arrays():
    (rank,) = analyze_paths([SAMPLES / "overlap"], Options()).ranks
    d = rank.detailed()
    tl, att = d.timeline, d.attribution
    lo, hi = float(min(tl.gpu.start.min(), tl.calls.start.min())), float(max(tl.gpu.end.max(), tl.calls.end.max()))
    seg_start, seg_end = d.partition.spans(B_COMM, lo, hi)
    assert len(seg_start) > 10 and (d.kernel_kind == c.COMM).sum() > 10
    return {
        "span": hi - lo + 1.0,
        "seg": (seg_start, seg_end),
        "gpu": (tl.gpu.start, tl.gpu.end, d.kernel_kind, att.gpu_ubatch, att.gpu_step, att.gpu_launch_start),
    }


def tiled(a, copies, pathology):
    """The sample repeated `copies` times, each shifted by the sample's span, with the pathology."""
    shift = a["span"]
    start, end, kind, ubatch, step, launch = a["gpu"]
    offsets = np.repeat(np.arange(copies) * shift, len(start))
    steps_per_copy = int(step.max()) + 1
    out_step = np.tile(step, copies) + np.repeat(np.arange(copies) * steps_per_copy, len(step))
    out_step[np.tile(step, copies) < 0] = -1
    out_launch = np.tile(launch, copies) + offsets
    if pathology == "no step markers":
        out_step[:] = -1
    elif pathology == "one step spanning everything":
        out_step[:] = 0
    elif pathology == "duplicate correlation ids":  # every kernel matched to the one first launch
        out_step[:] = -1
        out_launch[:] = np.nanmin(launch)
    seg_offsets = np.repeat(np.arange(copies) * shift, len(a["seg"][0]))
    return {
        "seg_start": np.tile(a["seg"][0], copies) + seg_offsets,
        "seg_end": np.tile(a["seg"][1], copies) + seg_offsets,
        "start": np.tile(start, copies) + offsets,
        "end": np.tile(end, copies) + offsets,
        "kind": np.tile(kind, copies),
        "ubatch": np.tile(ubatch, copies),
        "step": out_step,
        "launch_start": out_launch,
    }


def best_of_three(args) -> float:
    times = []
    for _ in range(3):
        started = time.process_time()  # CPU time: a loaded machine's waits do not count
        exposure(**args)
        times.append(time.process_time() - started)
    return min(times)


@pytest.mark.parametrize("pathology", ["no step markers", "one step spanning everything", "duplicate correlation ids"])
def test_exposure_time_grows_near_linearly(sample_arrays, pathology):
    assert_near_linear(sample_arrays, pathology)


def assert_near_linear(sample_arrays, pathology):
    import os

    small = tiled(sample_arrays, N, pathology)
    large = tiled(sample_arrays, 4 * N, pathology)
    assert len(large["seg_start"]) == 4 * len(small["seg_start"])
    best_of_three(small)  # warm: imports, caches
    t_small, t_large = best_of_three(small), best_of_three(large)
    growth = t_large / t_small
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    assert growth <= LIMIT, (
        f"{pathology}: {t_small:.3f} s at N, {t_large:.3f} s at 4N: {growth:.1f}x (limit {LIMIT:.1f}x; load {load})"
    )


def test_with_the_steps_kept_the_time_grows_linearly_today(sample_arrays):
    """The control: the same measure passes where each stretch's scan is one step's compute (so a
    failure above is the pathology's, not the machine's)."""
    assert_near_linear(sample_arrays, "steps kept")


def test_the_tiled_input_keeps_the_samples_answer(sample_arrays):
    """Tiling is faithful: with the steps kept, N copies expose N times the sample's comm."""
    one = exposure(**tiled(sample_arrays, 1, "steps kept"))
    many = exposure(**tiled(sample_arrays, 5, "steps kept"))
    assert many.exposed_us == pytest.approx(5 * one.exposed_us, rel=1e-9)
    for reason, t in one.by_reason_us.items():
        assert many.by_reason_us[reason] == pytest.approx(5 * t, rel=1e-6, abs=1e-6)
