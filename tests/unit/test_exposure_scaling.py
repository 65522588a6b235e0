"""Guard (issue 24 item 7): the exposure analysis stays linear on the pathologies that made it
quadratic: no step markers (every kernel in no step), one step spanning everything, and duplicate
correlation ids (every kernel resolved to one launch). For each exposed comm stretch the analysis
looked at every compute kernel of the step, or of the whole trace when steps are unknown.

The input is a real sample's analysed arrays (samples/overlap: the GPU activities, their kinds,
microbatches, steps and launches, and the exposed-comm stretches) tiled in time, at N copies and
4N. The work is counted, not timed (tests/helpers/work.py: a loaded machine cannot change a count): the
array elements handed to the analysis's functions grow 4x, the calls it makes (numpy's included)
not at all (a pass per stretch would make 4x), the memory it holds at once 4x (an all-pairs
temporary would take 16x). benchmarks/bench_growth.py times the same inputs.
"""


import numpy as np
import pytest
from conftest import SAMPLES
from work import calls_made, elements_passed, peak_bytes

from dbo_trace.analysis import classify as c
from dbo_trace.analysis.accounting import B_COMM
from dbo_trace.analysis.overlap.exposure import exposure
from dbo_trace.analysis.model import Options
from dbo_trace.app.pipeline import analyze_paths

N = 100  # copies of the sample (80 comm and 80 compute kernels each); 4N: 32,000 kernels
GROWTH = 4.5  # elements and memory for 4x the input: linear is 4.0 (measured 4.0 and 3.99)
CALLS = 1.1  # calls for 4x the input: a vectorized pass makes the same calls (measured 1.0)


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


@pytest.mark.parametrize("pathology", ["no step markers", "one step spanning everything", "duplicate correlation ids"])
def test_exposure_work_grows_linearly(sample_arrays, pathology):
    assert_near_linear(sample_arrays, pathology)


def assert_near_linear(sample_arrays, pathology):
    small = tiled(sample_arrays, N, pathology)
    large = tiled(sample_arrays, 4 * N, pathology)
    assert len(large["seg_start"]) == 4 * len(small["seg_start"])
    work = {
        what: [measure(lambda args=args: exposure(**args)) for args in (small, large)]
        for what, measure in (("elements", elements_passed), ("calls", calls_made), ("peak bytes", peak_bytes))
    }
    growth = {what: b / a for what, (a, b) in work.items()}
    assert work["elements"][0] > 0 and work["calls"][0] > 0, work
    assert growth["elements"] <= GROWTH and growth["peak bytes"] <= GROWTH, f"{pathology}: 4x the input: {growth}"
    assert growth["calls"] <= CALLS, f"{pathology}: 4x the input made {growth['calls']:.2f}x the calls (a pass per stretch?)"


def test_with_the_steps_kept_the_work_grows_linearly_today(sample_arrays):
    """The control: the same measure where each stretch's scan is one step's compute."""
    assert_near_linear(sample_arrays, "steps kept")


def test_the_tiled_input_keeps_the_samples_answer(sample_arrays):
    """Tiling is faithful: with the steps kept, N copies expose N times the sample's comm."""
    one = exposure(**tiled(sample_arrays, 1, "steps kept"))
    many = exposure(**tiled(sample_arrays, 5, "steps kept"))
    assert many.exposed_us == pytest.approx(5 * one.exposed_us, rel=1e-9)
    for reason, t in one.by_reason_us.items():
        assert many.by_reason_us[reason] == pytest.approx(5 * t, rel=1e-6, abs=1e-6)
