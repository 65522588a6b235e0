"""Graph-capture windows from hostile call streams: begin/end unbalanced, nested, on many threads.
The work stays linear in the calls however many threads capture, and the windows are what
docs/analysis.md ("Graph capture") defines, computed here by a plain walk per thread."""

import numpy as np

from work import calls_made, elements_passed, peak_bytes

from dbo_trace.analysis import classify as c
from dbo_trace.analysis.host.capture import capture_windows

BEGIN, END, LAUNCH = c.CALL_CAPTURE_BEGIN, c.CALL_CAPTURE_END, c.CALL_LAUNCH


def _unclosed_on_many_threads(n):
    """n calls on n/4 threads: each thread begins a capture it never ends, then launches."""
    threads = n // 4
    start = np.arange(n, dtype=float)
    kind = np.full(n, LAUNCH)
    kind[:threads] = BEGIN
    return start, start + 0.5, np.arange(n) % threads, kind


def test_unclosed_captures_on_many_threads_take_linear_work():
    """8x the calls and threads: linear is 8x the elements handed to the analysis, the calls it makes
    and the memory it holds (a thread's few calls each); a pass over all calls per thread, 64x the
    elements (counted: tests/helpers/work.py; timed: benchmarks/bench_growth.py)."""
    small, large = _unclosed_on_many_threads(20_000), _unclosed_on_many_threads(160_000)
    for measure in (elements_passed, calls_made, peak_bytes):
        a, b = (measure(lambda x=x: capture_windows(*x)) for x in (small, large))
        assert a > 0 and b / a <= 9.0, f"{measure.__name__}: 8x the calls gave {b / a:.2f}x"


def _plain_windows(start, end, lane, kind):
    """Per thread, in time order: a window from a begin at depth 0 to the end that brings the depth
    back to 0; an end at depth 0 is ignored; one still open runs to the thread's last call's end."""
    out = []
    for t in sorted(set(lane.tolist())):
        calls = sorted((start[i], end[i], kind[i]) for i in range(len(start)) if lane[i] == t)
        depth, opened = 0, None
        for s, e, k in calls:
            if k == BEGIN:
                if depth == 0:
                    opened = s
                depth += 1
            elif k == END and depth > 0:
                depth -= 1
                if depth == 0:
                    out.append((opened, e, t))
        if depth > 0:
            out.append((opened, max(e for _s, e, _k in calls), t))
    return sorted(out)


def test_nested_and_unbalanced_captures_give_the_windows_of_a_plain_walk():
    rng = np.random.default_rng(7)
    n = 3_000
    start = np.sort(rng.uniform(0, 1e6, n))
    end = start + rng.uniform(0, 50, n)
    lane = rng.integers(0, 40, n)
    kind = rng.choice([BEGIN, END, LAUNCH], n, p=[0.2, 0.2, 0.6])
    w_start, w_end, w_lane = capture_windows(start, end, lane, kind)
    got = sorted(zip(w_start.tolist(), w_end.tolist(), w_lane.tolist()))
    assert got == _plain_windows(start, end, lane, kind)
    assert len(got) > 40  # nesting, stray ends and open captures all occurred
