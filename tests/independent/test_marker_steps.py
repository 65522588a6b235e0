"""Steps from named CPU ranges (ProfilerStep#, --step-marker) as arrays, against the rule written
out per range (steps._from_rows): sorted by start, the longer first where two start together; a
range that begins inside the last kept one is not a step of its own; labels are the names."""

import numpy as np
import pytest
from test_steps_hostile import _timeline

from dbo_trace.analysis.steps import sources as s


@pytest.mark.parametrize("seed", range(50))
@pytest.mark.parametrize("nested", [False, True])
def test_marker_steps_are_the_per_range_rule(seed, nested):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    names = [f"ProfilerStep#{i}" for i in range(n)] + ["other", "ProfilerStep#x"]
    start = np.round(rng.uniform(0, 1000, n), 1) if nested else np.arange(n) * 10.0
    end = start + (rng.uniform(0, 80, n) if nested else rng.uniform(0, 10, n))
    if nested:
        start[rng.random(n) < 0.2] = start[0]  # ties in start, the longer first
    extra = [(5.0, 7.0, n), (3.0, 4.0, n + 1)]  # names no ProfilerStep rule accepts
    order = rng.permutation(n + len(extra))
    all_start = np.r_[start, [e[0] for e in extra]][order]
    all_end = np.r_[end, [e[1] for e in extra]][order]
    all_name = np.r_[np.arange(n), [e[2] for e in extra]][order]
    tl = _timeline(names, all_start, all_end, all_name)
    for got, match, source in (
        (s.profiler_steps(tl), s._PROFILER_STEP.match, s.SOURCE_PROFILER_STEP),
        (s.marker_steps(tl, r"Step#\d"), __import__("re").compile(r"Step#\d").search, s.SOURCE_MARKER),
    ):
        want = s._from_rows([(a, b, c) for a, b, c, _ in tl.cpu_ranges_named(match)], source)
        assert got.start.tolist() == want.start.tolist() and got.end.tolist() == want.end.tolist()
        assert (got.label, got.path, got.phase, got.source) == (want.label, want.path, want.phase, want.source)
        assert got.context_tokens == want.context_tokens and got.generation_tokens == want.generation_tokens
