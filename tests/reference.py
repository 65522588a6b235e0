"""An independent, deliberately plain computation of the headline numbers from a raw trace.

json.load, dicts and Python loops: nothing shared with dbo_trace's numpy code.
Steps are the ProfilerStep#N windows; a kernel belongs to the step whose
window holds its launching runtime call (joined by correlation id).
"""

from __future__ import annotations

import gzip
import json
import re


def load(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def merged(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def covered(intervals):
    return sum(e - s for s, e in merged(intervals))


def both(a, b):
    """Time covered by both sets, by walking two merged lists."""
    a, b = merged(a), merged(b)
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def headline(path, comm_regex):
    doc = load(path)
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    steps = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") == "user_annotation" and re.match(r"ProfilerStep#\d+$", e["name"])
    )
    launch = {}
    graph_corr = set()
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            launch[e["args"]["correlation"]] = e
            if e["name"] == "cudaGraphLaunch":
                graph_corr.add(e["args"]["correlation"])
    per_step = {i: [] for i in range(len(steps))}
    for e in events:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        call = launch.get(e["args"].get("correlation"))
        t = call["ts"] if call else e["ts"]
        for i, (s0, s1) in enumerate(steps):
            if s0 <= t <= s1:
                per_step[i].append(e)
    rx = re.compile(comm_regex)
    totals = dict(
        comm=0.0,
        compute=0.0,
        hidden=0.0,
        busy=0.0,
        span=0.0,
        host_idle=0.0,
        kernels=0,
        comm_kernels=0,
        replayed=0,
        graph_launches=len(graph_corr),
    )
    for kernels in per_step.values():
        if not kernels:
            continue
        comm = [(k["ts"], k["ts"] + k["dur"]) for k in kernels if k["cat"] == "kernel" and rx.search(k["name"])]
        compute = [(k["ts"], k["ts"] + k["dur"]) for k in kernels if k["cat"] == "kernel" and not rx.search(k["name"])]
        everything = [(k["ts"], k["ts"] + k["dur"]) for k in kernels]
        totals["comm"] += covered(comm)
        totals["compute"] += covered(compute)
        totals["hidden"] += both(comm, compute)
        totals["busy"] += covered(everything)
        totals["span"] += max(e for _, e in everything) - min(s for s, _ in everything)
        totals["kernels"] += sum(1 for k in kernels if k["cat"] == "kernel")
        totals["comm_kernels"] += len(comm)
        totals["replayed"] += sum(1 for k in kernels if k["cat"] == "kernel" and k["args"].get("correlation") in graph_corr)
        # Host-caused idle: a gap whose next kernel's launch call started after the gap began.
        ordered = sorted(kernels, key=lambda k: k["ts"])
        busy_until = ordered[0]["ts"] + ordered[0]["dur"]
        for k in ordered[1:]:
            if k["ts"] > busy_until:
                call = launch.get(k["args"].get("correlation"))
                if call is not None and call["ts"] > busy_until:
                    totals["host_idle"] += k["ts"] - busy_until
            busy_until = max(busy_until, k["ts"] + k["dur"])
    totals["steps"] = sum(1 for v in per_step.values() if v)
    return totals
