"""Each microbatch's compute and comm stretches (analysis/overlap/busy.py, the Perfetto export's microbatch
lanes) against a plain merge written here: sort one pair's intervals by start, join each to the
last stretch where it starts at or before that stretch's end."""


import numpy as np
import pytest
from conftest import SAMPLES
from work import calls_made, elements_passed, peak_bytes

from dbo_trace.analysis.steps.attribution import PHASE_COMM, PHASE_COMPUTE, PHASE_NONE, PHASE_WAIT
from dbo_trace.analysis.overlap.busy import microbatch_busy
from dbo_trace.analysis.model import Options
from dbo_trace.app.pipeline import analyze_paths


def merged(pairs):
    out = []
    for s, e in sorted(pairs, key=lambda p: p[0]):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [tuple(x) for x in out]


def reference(start, end, ubatch, phase, selected):
    return {
        (u, p): merged(
            [(float(s), float(e)) for s, e, ub, ph, k in zip(start, end, ubatch, phase, selected) if k and ub == u and ph == p]
        )
        for u in (0, 1)
        for p in (PHASE_COMPUTE, PHASE_COMM)
    }


def as_lists(busy):
    return {key: list(zip(s.tolist(), e.tolist())) for key, (s, e) in busy.items()}


def test_random_activities_against_the_plain_merge():
    rng = np.random.default_rng(11)
    for _ in range(200):
        n = int(rng.integers(0, 60))
        start = np.sort(rng.integers(0, 400, n).astype(float)) + 5e12  # trace-clock magnitudes
        end = start + rng.integers(0, 40, n)  # zero-length ones too
        ubatch = rng.integers(-1, 3, n).astype(np.int8)  # -1 unknown and 2 are no lane of the export
        phase = rng.choice([PHASE_NONE, PHASE_COMPUTE, PHASE_COMM, PHASE_WAIT], n)
        selected = rng.random(n) < 0.8
        got = microbatch_busy(start=start, end=end, ubatch=ubatch, phase=phase, selected=selected)
        assert as_lists(got) == reference(start, end, ubatch, phase, selected)


def test_a_real_dbo_run_has_both_microbatches_lanes_and_they_are_the_merge():
    (rank,) = analyze_paths([SAMPLES / "overlap"], Options(comm_patterns=("spin_kernel",))).ranks
    d = rank.detailed()
    tl, att = d.timeline, d.attribution
    arrays = dict(start=tl.gpu.start, end=tl.gpu.end, ubatch=att.gpu_ubatch, phase=att.gpu_phase, selected=att.gpu_step >= 0)
    got = as_lists(microbatch_busy(**arrays))
    assert got == reference(**arrays)
    assert all(len(stretches) > 0 for stretches in got.values()), "the sample runs both microbatches' compute and comm"


def test_the_work_grows_with_the_activities():
    """Linear (one sort): 8x the activities, 8x the array elements handed to the analysis and the
    memory held, the same calls (tests/helpers/work.py: counted, so a loaded machine cannot change it; the
    timing is benchmarks/bench_growth.py's)."""
    rng = np.random.default_rng(3)

    def arrays(n):
        start = np.cumsum(rng.random(n) * 10.0)
        return dict(
            start=start,
            end=start + rng.random(n) * 30.0,
            ubatch=rng.integers(-1, 2, n).astype(np.int8),
            phase=rng.choice([PHASE_COMPUTE, PHASE_COMM], n),
            selected=np.ones(n, bool),
        )

    small, large = arrays(50_000), arrays(400_000)
    for measure, limit in ((elements_passed, 8.5), (peak_bytes, 8.5), (calls_made, 1.1)):
        a, b = (measure(lambda x=x: microbatch_busy(**x)) for x in (small, large))
        assert a > 0 and b / a <= limit, f"{measure.__name__}: 8x the activities gave {b / a:.2f}x"


@pytest.mark.parametrize("n", [0, 1])
def test_no_or_one_activity(n):
    got = microbatch_busy(
        start=np.zeros(n), end=np.ones(n), ubatch=np.zeros(n, np.int8), phase=np.full(n, PHASE_COMM), selected=np.ones(n, bool)
    )
    assert as_lists(got)[(0, PHASE_COMM)] == ([(0.0, 1.0)] if n else [])
    assert as_lists(got)[(1, PHASE_COMPUTE)] == []
