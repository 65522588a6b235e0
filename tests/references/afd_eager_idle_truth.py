"""An independent count, written from the raw trace by a reviewer who had not read dbo_trace/: an
AFD attention trace's GPU idle inside its decode steps (execute_* annotations), each idle stretch
given to the innermost CPU operator open on the launching thread at that moment ("no op recorded"
where none is). Plain json + numpy; the reviewer's reading of samples/afd-eager: the idle is 94% of
the step, and vllm::manual_dbo_yield, which launches no GPU work, holds 45% of it."""

from __future__ import annotations

import bisect
import collections
import gzip
import json

NO_OP = "no op recorded"


def _union(intervals):
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def _idle_in(busy, a, b):
    gaps, cur = [], a
    for s, t in busy:
        if t <= a:
            continue
        if s >= b:
            break
        if s > cur:
            gaps.append((cur, min(s, b)))
        cur = max(cur, t)
    if cur < b:
        gaps.append((cur, b))
    return gaps


def _innermost_segments(ops):
    """The thread's time cut where the innermost open operator changes: (start, end, name | None)."""
    segs, stack = [], []
    cur = ops[0]["ts"] if ops else 0

    def emit(a, b):
        if b > a:
            segs.append((a, b, stack[-1]["name"] if stack else None))

    for e in ops:
        while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
            end = stack[-1]["ts"] + stack[-1]["dur"]
            emit(cur, end)
            cur = end
            stack.pop()
        emit(cur, e["ts"])
        cur = e["ts"]
        stack.append(e)
    while stack:
        end = stack[-1]["ts"] + stack[-1]["dur"]
        emit(cur, end)
        cur = end
        stack.pop()
    return segs


def idle_by_op(trace_path) -> tuple[float, dict[str, float]]:
    """(the GPU-idle share of the steps' time, {innermost op: its share of that idle})."""
    with gzip.open(trace_path, "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = sorted(
        (e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("execute_")), key=lambda e: e["ts"]
    )
    main = (steps[0]["pid"], steps[0]["tid"])  # the thread that runs the step launches its kernels
    busy = _union((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    ops = sorted(
        (e for e in events if e.get("cat") == "cpu_op" and (e["pid"], e["tid"]) == main), key=lambda e: (e["ts"], -e["dur"])
    )
    segs = _innermost_segments(ops)
    starts = [s[0] for s in segs]
    acc: collections.Counter[str] = collections.Counter()
    idle = total = 0.0
    for step in steps:
        a, b = step["ts"], step["ts"] + step["dur"]
        total += b - a
        for lo, hi in _idle_in(busy, a, b):
            idle += hi - lo
            i = max(bisect.bisect_right(starts, lo) - 1, 0)
            c = lo
            while c < hi:
                if i < len(segs) and segs[i][0] <= c < segs[i][1]:
                    e = min(hi, segs[i][1])
                    acc[segs[i][2] or NO_OP] += e - c
                    c = e
                    i += 1
                else:  # between segments: the next one's start, or the gap's end
                    nxt = next((s[0] for s in segs[i:] if s[0] > c), hi)
                    e = min(hi, nxt)
                    acc[NO_OP] += e - c
                    c = e
                    while i < len(segs) and segs[i][1] <= c:
                        i += 1
    spent = sum(acc.values())
    return idle / total, {name: us / spent for name, us in acc.items()}
