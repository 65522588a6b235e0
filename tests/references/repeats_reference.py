"""An independent reference for the timed repeats' figures, written from the definitions in
dbo_trace/record/bench.py's docstring and docs/recording.md ("Timed repeats") alone, not from
record/loadgen.py.

Each request is given as what a client saw: ttft_s (send to its first chunk), chunk_times_s (every
chunk's time from the send, the first one included) and its output tokens. A repeat's figures:
- duration_s: given (first request sent to the last answer);
- output_throughput: output tokens of all completed requests / duration;
- request_throughput: completed requests / duration;
- TTFT: per request, its first chunk's time; latency (E2EL): its last chunk's time;
- TPOT: per request with more than one token, (latency - TTFT) / (tokens - 1);
- ITL: the gaps between consecutive chunks, of all requests together;
- of each: mean, median and the 99th percentile (numpy, linear interpolation), in ms;
  an empty list gives None.
"""

from __future__ import annotations

import math
import statistics


def _linear_percentile(values: list[float], q: float) -> float:
    """The q-th percentile between the closest ranks (numpy's default, 'linear'), by hand."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _stats(values_s: list[float]) -> dict[str, float | None]:
    if not values_s:
        return {"mean": None, "median": None, "p99": None}
    ms = [v * 1000.0 for v in values_s]
    return {
        "mean": statistics.fmean(ms),
        "median": statistics.median(ms),
        "p99": _linear_percentile(ms, 99),
    }


def reference_repeat(requests: list[dict], duration_s: float) -> dict:
    ttfts, latencies, tpots, itls = [], [], [], []
    tokens_total = 0
    for req in requests:
        times = list(req["chunk_times_s"])
        ttft, latency, tokens = times[0], times[-1], req["tokens"]
        ttfts.append(ttft)
        latencies.append(latency)
        tokens_total += tokens
        if tokens > 1:
            tpots.append((latency - ttft) / (tokens - 1))
        itls.extend(b - a for a, b in zip(times, times[1:]))
    out: dict = {
        "completed": len(requests),
        "total_output_tokens": tokens_total,
        "output_throughput": tokens_total / duration_s,
        "request_throughput": len(requests) / duration_s,
    }
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", latencies)):
        for stat, value in _stats(values).items():
            out[f"{stat}_{name}_ms"] = value
    return out


def fake_server_requests(n: int, tokens: int, first_s: float, gap_s: float) -> list[dict]:
    """What tests/helpers/fake_server.py --stream-delays FIRST,GAP,DONE streams to its first n
    requests (its docstring): request k's first chunk after FIRST * (1 + (k - 1) % 2), chunk i
    GAP * (1 + i % 3) after chunk i - 1."""
    out = []
    for k in range(1, n + 1):
        t = first_s * (1 + (k - 1) % 2)
        times = [t]
        for i in range(1, tokens):
            t += gap_s * (1 + i % 3)
            times.append(t)
        out.append({"chunk_times_s": times, "tokens": tokens})
    return out
