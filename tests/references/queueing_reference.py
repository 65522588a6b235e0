"""The launch-to-start delay and the queued part of late-launched GPU idle (not host idle), computed plainly from
docs/analysis.md ("Launch-to-start delay") over a raw Kineto trace: json.load and loops."""

from __future__ import annotations

from headline_reference import CALLS, GPU, GRAPH_LAUNCHES, events_of

LATENCY_US = 20.0


def queueing(path):
    events = events_of(path)
    window_lo = min(e["ts"] for e in events)
    window_hi = max(e["end"] for e in events)
    launch = {e["args"]["correlation"]: e for e in events if e["cat"] in CALLS and "correlation" in e.get("args", {})}
    gpu = sorted((e for e in events if e["cat"] in GPU), key=lambda g: g["ts"])
    delays = []
    for g in gpu:
        call = launch.get(g.get("args", {}).get("correlation"))
        if call is not None and call["name"] not in GRAPH_LAUNCHES:
            delays.append(g["ts"] - call["end"])
    by_start = {}
    for g in gpu:
        call = launch.get(g.get("args", {}).get("correlation"))
        if call is not None:
            by_start.setdefault(g["ts"], []).append(call)
    queued = 0.0
    host_idle = 0.0
    busy_until = window_lo
    for g in gpu:
        if g["ts"] > busy_until:
            calls = by_start.get(g["ts"], [])
            if calls and min(c["ts"] for c in calls) > busy_until:  # a host-idle stretch (docs, "The accounting model")
                launched = min(c["end"] for c in calls) + LATENCY_US
                waited = max(0.0, g["ts"] - max(busy_until, launched))  # launched, then waited: not the host
                queued += waited
                host_idle += g["ts"] - busy_until - waited
        busy_until = max(busy_until, g["end"])
    host_idle += max(0.0, window_hi - busy_until)
    delays.sort()
    mid = len(delays) // 2
    median = delays[mid] if len(delays) % 2 else (delays[mid - 1] + delays[mid]) / 2
    return dict(queued=queued, host_idle=host_idle, median=median, low=delays[0], high=delays[-1], n=len(delays))
