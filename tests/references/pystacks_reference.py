"""A plain reading of a py-spy Chrome trace for the frame attribution (docs/analysis.md, "Host time by
Python frame"; docs/bundle-format.md, "pystacks"): json.load, replay each thread's B/E events into
stacks, and for each host-idle piece, sum the time its thread spent with each innermost project
frame. No numpy, nothing of dbo_trace.analysis.host.python_frames or dbo_trace.trace.pystacks: only the rules
as the docs state them. The host-idle pieces themselves are the analysis's (tests/references/host_time_reference.py
checks those).
"""

from __future__ import annotations

import bisect
import json
import re
from pathlib import Path

PROJECT_DIRS = ("vllm", "afd_plugin")


def kind(name: str, filename: str) -> str:
    if not filename:
        return "meta" if name.startswith(("process ", "thread (")) else "library"
    if filename.startswith("<"):
        return "library"
    dirs = filename.split("/")[:-1]
    if "dbo_trace" in dirs:
        return "library"
    if any(d in PROJECT_DIRS for d in dirs):
        return "project"
    if "/site-packages/" in filename or "/dist-packages/" in filename or re.search(r"/lib/python\d", filename):
        return "library"
    return "project"


def segments(path: Path) -> dict[tuple[int, int], list[tuple[float, float, tuple[tuple[str, str], ...]]]]:
    """Per (pid, tid): (start, end, stack outermost first) while the stack stayed the same."""
    events = json.loads(path.read_text())
    stacks: dict[tuple[int, int], list[tuple[str, str]]] = {}
    since: dict[tuple[int, int], float] = {}
    out: dict[tuple[int, int], list[tuple[float, float, tuple[tuple[str, str], ...]]]] = {}
    for e in events:
        key = (e["pid"], e["tid"])
        ts = e["ts"]
        st = stacks.setdefault(key, [])
        if key in since and ts > since[key] and st:
            out.setdefault(key, []).append((since[key], ts, tuple(st)))
        if key not in since or ts > since[key]:
            since[key] = ts
        frame = (e["name"], e["args"]["filename"])
        if e["ph"] == "B":
            st.append(frame)
        else:
            assert st and st[-1] == frame
            st.pop()
    return out


def innermost_project(stack: tuple[tuple[str, str], ...]) -> str | None:
    for name, filename in reversed(stack):
        if kind(name, filename) == "project":
            return name
    return None


def thread_for(lane: int, pid: int, segs: dict, natives: dict[int, int]) -> tuple[int, int] | None:
    """natives: thread ident -> native id (the hook event logs' headers)."""
    mine = [k for k in segs if k[0] == pid]
    for k in mine:
        if k[1] == lane or k[1] & 0xFFFFFFFF == lane or natives.get(k[1]) == lane:
            return k
    if lane == pid:
        main = []
        for k in mine:
            outer = [f for f in segs[k][0][2] if kind(*f) != "meta"]
            if outer and not ( outer[0][0].rsplit(".", 1)[-1] == "_bootstrap" and outer[0][1].endswith("threading.py")):
                main.append(k)
        if len(main) == 1:
            return main[0]
    return None


def natives_of(bundle: Path) -> dict[int, int]:
    out = {}
    for log in sorted((bundle / "events").glob("*.jsonl")):
        header = json.loads(log.read_text().splitlines()[0])
        out[header["main_ident"]] = header["main_native_tid"]
    return out


def project_time(
    path: Path, pid: int, offset_us: float, pieces: list[tuple[float, float, str, int]], natives: dict[int, int]
) -> dict[tuple[str, str | None], float]:
    """(cause, innermost project function) -> us of the pieces (lo, hi, cause, lane) on the trace clock."""
    segs = segments(path)
    totals: dict[tuple[str, str | None], float] = {}
    cache: dict[int, tuple[int, int] | None] = {}
    ends_of: dict[tuple[int, int], list[float]] = {}
    for lo, hi, cause, lane in pieces:
        if lane not in cache:
            cache[lane] = thread_for(lane, pid, segs, natives)
        key = cache[lane]
        if key is None:
            continue
        mine = segs[key]
        ends = ends_of.setdefault(key, [b for _, b, _ in mine])
        for a, b, stack in mine[bisect.bisect_right(ends, lo - offset_us) :]:
            a, b = a + offset_us, b + offset_us
            if a >= hi:
                break
            if b <= lo:
                continue
            t = min(b, hi) - max(a, lo)
            name = (cause, innermost_project(stack))
            totals[name] = totals.get(name, 0.0) + t
    return totals
