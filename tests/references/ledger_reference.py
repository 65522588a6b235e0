"""An independent, plain computation of the DBO ledger (docs/analysis.md, "The DBO ledger") from a
recording's raw files: json.load of the trace, the event log's lines, dicts and loops; nothing from
dbo_trace. Written from the docs' definitions:

- the profiled steps: the log's step_begin..step_end windows (time.time_ns - baseTimeNanoseconds,
  in us) that hold at least one CUDA runtime/driver call of the trace;
- a hand-over: a microbatch thread's `yield`, when the next `resume`/`ub_run` in the same step is
  another microbatch's (that one's time minus the yield's); a yield whose own thread resumes first
  is none;
- the layer of a hand-over: the yielding thread's last `layer` event in the step;
- thread start-up: step_begin to the step's first `ub_run`;
- a step's time: from its begin to the later of its end and the end of the last GPU activity whose
  launching call started inside it;
- compute per microbatch: the union of the step's compute kernels (kernels not matching the comm
  pattern) whose launching call came from that microbatch's thread.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics


def _records(path):
    lines = open(path).read().splitlines()
    recs = [json.loads(line) for line in lines[1:] if line.strip()]
    recs.sort(key=lambda r: r[0])
    return json.loads(lines[0]), recs


def _trace(path):
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def _p90(xs):
    xs = sorted(xs)
    pos = 0.9 * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _union_length(intervals):
    total, cur = 0.0, None
    for s, e in sorted(intervals):
        if cur is None or s > cur[1]:
            if cur is not None:
                total += cur[1] - cur[0]
            cur = [s, e]
        else:
            cur[1] = max(cur[1], e)
    if cur is not None:
        total += cur[1] - cur[0]
    return total


def ledger(trace_path, log_path, comm_pattern):
    doc = _trace(trace_path)
    base = int(doc["baseTimeNanoseconds"])
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X" and "ts" in e]
    calls = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    _header, recs = _records(log_path)

    def us(t_ns):
        return (t_ns - base) / 1000.0

    begins, ends = {}, {}
    for r in recs:
        if r[1] == "step_begin":
            begins[r[5]] = r
        elif r[1] == "step_end":
            ends[r[5]] = r
    windows = {}
    for step, b in begins.items():
        if step in ends:
            lo, hi = us(b[0]), us(ends[step][0])
            if any(lo <= c["ts"] <= hi for c in calls):
                windows[step] = (lo, hi)

    by_corr = {c["args"]["correlation"]: c for c in calls if "correlation" in c.get("args", {})}
    step_time, compute = {}, {}
    # A trace's CUDA calls carry one thread id for a thread's whole life (the native id it had when
    # the profiler first saw it, or the low 32 bits of its Python ident); the log gives each step's
    # microbatch threads by ident (a new native id every step, the idents reused).
    ident_of = {}
    for r in recs:
        if r[4] >= 0:
            ident_of.setdefault(r[3], r[2])
            ident_of.setdefault(r[2] & 0xFFFFFFFF, r[2])
    threads = {}  # step -> {ident: ub}
    for r in recs:
        if r[5] in windows and r[4] >= 0:
            threads.setdefault(r[5], {})[r[2]] = r[4]
    for step, (lo, hi) in windows.items():
        end = hi
        per_ub = {}
        for k in kernels:
            c = by_corr.get(k.get("args", {}).get("correlation"))
            if c is None or not (lo <= c["ts"] <= hi):
                continue
            end = max(end, k["ts"] + k["dur"])
            ub = threads.get(step, {}).get(ident_of.get(c["tid"]))
            if ub is not None and not re.search(comm_pattern, k["name"], re.IGNORECASE):
                per_ub.setdefault(ub, []).append((k["ts"], k["ts"] + k["dur"]))
        step_time[step] = end - lo
        compute[step] = {ub: _union_length(iv) for ub, iv in per_ub.items()}

    handovers = []  # (step, layer, latency us)
    yields, startup = {}, {}
    layer_of = {}
    in_step = [r for r in recs if r[5] in windows]
    for i, r in enumerate(in_step):
        step, kind, ub = r[5], r[1], r[4]
        if kind == "layer" and ub >= 0:
            layer_of[(step, ub)] = r[6]
        if kind == "ub_run" and step not in startup:
            startup[step] = (r[0] - begins[step][0]) / 1000.0
        if kind != "yield" or ub < 0:
            continue
        yields[step] = yields.get(step, 0) + 1
        for q in in_step[i + 1 :]:
            if q[5] != step or q[1] not in ("resume", "ub_run"):
                continue
            if q[4] != ub:
                handovers.append((step, layer_of.get((step, ub), -1), (q[0] - r[0]) / 1000.0))
            break

    # Outside the profiled window: the log's other steps, but those that captured a CUDA graph.
    outside = {s for s, b in begins.items() if s not in windows and (b[6] or {}).get("path") != "graph_capture"}
    out_lat, out_per_step = [], {}
    others = [r for r in recs if r[5] in outside]
    for i, r in enumerate(others):
        if r[1] != "yield" or r[4] < 0:
            continue
        for q in others[i + 1 :]:
            if q[5] != r[5] or q[1] not in ("resume", "ub_run"):
                continue
            if q[4] != r[4]:
                out_lat.append((q[0] - r[0]) / 1000.0)
                out_per_step[r[5]] = out_per_step.get(r[5], 0.0) + out_lat[-1]
            break

    lat = [h[2] for h in handovers]
    per_step = {}
    for step, _layer, x in handovers:
        per_step[step] = per_step.get(step, 0.0) + x
    shares = [(per_step.get(s, 0.0) + startup.get(s, 0.0)) / step_time[s] for s in windows if yields.get(s)]
    layers = {}
    for _step, layer, x in handovers:
        layers.setdefault(layer, []).append(x)
    comp = [tuple(c[u] for u in sorted(c)) for c in compute.values() if len(c) >= 2]
    tokens = [tuple(begins[s][6]["tokens"]) for s in windows if begins[s][6].get("tokens")]
    return {
        "handovers": len(lat),
        "median_us": statistics.median(lat) if lat else None,
        "p90_us": _p90(lat) if lat else None,
        "per_step_us": statistics.median(per_step.values()) if per_step else None,
        "yields_per_step": statistics.median(yields.values()) if yields else None,
        "startup_us": statistics.median(startup.values()) if startup else None,
        "share": statistics.median(shares) if shares else None,
        "layers": {k: statistics.median(v) for k, v in layers.items() if k >= 0},
        "tokens": [statistics.median(t[i] for t in tokens) for i in range(len(tokens[0]))] if tokens else None,
        "compute_us": [statistics.median(c[i] for c in comp) for i in range(len(comp[0]))] if comp else None,
        "imbalance": statistics.median((max(c) - min(c)) / max(c) for c in comp) if comp else None,
        "excess_us": statistics.median(max(c) - min(c) for c in comp) if comp else None,
        "unprofiled": None
        if not out_lat
        else {
            "steps": len(out_per_step),
            "handovers": len(out_lat),
            "median_us": statistics.median(out_lat),
            "p90_us": _p90(out_lat),
            "per_step_us": statistics.median(out_per_step.values()),
        },
    }
