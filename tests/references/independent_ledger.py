#!/usr/bin/env python3
"""Independent reference computation of dbo-trace's DBO ledger figures.

Written from docs/analysis.md ("The DBO ledger", "What-if estimates", "Held-back
communication" / "SM evidence", "Which microbatch", "Who is communication", "Steps",
"Round trips and the DBO criterion", "Why comm is exposed", "Across ranks") and
docs/bundle-format.md only.  Standard library only, plain loops.

Usage: python3 independent_ledger.py BUNDLE_DIR [BUNDLE_DIR ...]
Prints one JSON object: {BUNDLE_DIR: figures}.

Times are microseconds on the trace clock unless a key says otherwise; every
figure is rounded to 3 decimals at output time.  NOTES.md says which reading of
the docs each choice follows.
"""
import gzip
import json
import math
import os
import re
import sys

# ---------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    n = len(xs)
    if n == 0:
        return None
    m = n // 2
    if n % 2:
        return xs[m]
    return (xs[m - 1] + xs[m]) / 2.0


def percentile(xs, p):
    """numpy's default ('linear') percentile."""
    xs = sorted(x for x in xs if x is not None)
    n = len(xs)
    if n == 0:
        return None
    pos = (n - 1) * p / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return xs[lo] + (xs[hi] - xs[lo]) * frac


def rnd(obj):
    """Round every float to 3 decimals, recursively."""
    if isinstance(obj, float):
        if obj != obj or obj in (float("inf"), float("-inf")):
            return None
        return round(obj, 3)
    if isinstance(obj, dict):
        return {k: rnd(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [rnd(v) for v in obj]
    return obj


def union(ivs):
    out = []
    for a, b in sorted(ivs):
        if b < a:
            continue
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1][1] = b
        else:
            out.append([a, b])
    return out


def total(ivs):
    t = 0.0
    for a, b in ivs:
        t += b - a
    return t


def intersect(A, B):
    """A, B: merged (sorted, disjoint) lists."""
    out = []
    i = j = 0
    while i < len(A) and j < len(B):
        a0, a1 = A[i]
        b0, b1 = B[j]
        lo = a0 if a0 > b0 else b0
        hi = a1 if a1 < b1 else b1
        if lo < hi:
            out.append([lo, hi])
        if a1 < b1:
            i += 1
        else:
            j += 1
    return out


def subtract(A, B):
    """A minus B, both merged lists."""
    out = []
    j = 0
    for a0, a1 in A:
        cur = a0
        while j < len(B) and B[j][1] <= cur:
            j += 1
        k = j
        while k < len(B) and B[k][0] < a1:
            b0, b1 = B[k]
            if b0 > cur:
                out.append([cur, b0])
            if b1 > cur:
                cur = b1
            if cur >= a1:
                break
            k += 1
        if cur < a1:
            out.append([cur, a1])
    return out


# ---------------------------------------------------------------------------
# "Who is communication" (docs/analysis.md)
# ---------------------------------------------------------------------------

BUILTIN_COMM = [
    # NCCL / RCCL
    r"^nccl", r"ncclDevKernel", r"ncclKernel", r"rccl",
    # DeepEP
    r"deep_ep", r"deepep", r"::ep::", r"ep::(intranode|internode|internode_ll)",
    r"notify_dispatch", r"notify_combine", r"cached_notify",
    # pplx / all-to-all
    r"pplx", r"all_to_all", r"alltoall",
    # NVSHMEM
    r"nvshmem",
    # custom all-reduce
    r"cross_device_reduce", r"custom_all_reduce", r"all_reduce",
    # all-gather / reduce-scatter
    r"all_gather", r"reduce_scatter",
    # dispatch / combine (the named ones and "the other prefix/suffix pairs")
    r"(moe|ep|a2a|all2all)_(dispatch|combine)", r"(dispatch|combine)_kernel",
    # symmetric memory
    r"symm_mem", r"multimem", r"two_shot", r"one_shot_all",
]


def make_classifier(manifest):
    pats = [re.compile(p, re.I) for p in BUILTIN_COMM]
    for p in (manifest or {}).get("comm_kernels") or []:
        pats.append(re.compile(p, re.I))

    def is_comm(name):
        for p in pats:
            if p.search(name):
                return True
        return False

    return is_comm


LAUNCH_NAMES = {
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
    "cudaLaunchCooperativeKernel", "cudaLaunchCooperativeKernelMultiDevice",
    "cuLaunchCooperativeKernel", "hipLaunchKernel", "hipExtLaunchKernel",
    "hipModuleLaunchKernel", "hipExtModuleLaunchKernel", "hipLaunchCooperativeKernel",
}
GRAPH_LAUNCH = {"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"}

# ---------------------------------------------------------------------------
# loading
# ---------------------------------------------------------------------------


def load_json_any(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        d = json.load(f)
    if isinstance(d, list):
        d = {"traceEvents": d}
    return d


def load_manifest(bundle):
    p = os.path.join(bundle, "manifest.json")
    if os.path.exists(p):
        with open(p) as f:
            return json.load(f)
    return {}


def load_event_logs(bundle, manifest):
    logs = {}
    paths = []
    if manifest.get("events"):
        paths = [os.path.join(bundle, p) for p in manifest["events"]]
    else:
        d = os.path.join(bundle, "events")
        if os.path.isdir(d):
            paths = [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith(".jsonl")]
    for p in paths:
        with open(p) as f:
            lines = f.read().split("\n")
        header = json.loads(lines[0])
        recs = []
        for ln in lines[1:]:
            ln = ln.strip()
            if not ln:
                continue
            try:
                recs.append(json.loads(ln))
            except ValueError:
                continue  # a line cut by a kill
        logs[header["pid"]] = {"header": header, "records": recs, "path": p}
    return logs


def load_rank(path, is_comm):
    d = load_json_any(path)
    ev = d["traceEvents"]
    base = d.get("baseTimeNanoseconds")
    di = d.get("distributedInfo") or {}
    acts = []  # GPU activities
    calls = []  # CUDA runtime / driver calls
    cpu = []  # cpu_op, user_annotation, python_function
    window_lo = None
    window_hi = None
    pids = {}
    for e in ev:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat")
        ts = float(e["ts"])
        dur = float(e.get("dur", 0.0))
        if cat in ("kernel", "gpu_memset", "gpu_memcpy", "Kernel", "Memset", "Memcpy"):
            a = e.get("args", {})
            kind = "kernel" if cat in ("kernel", "Kernel") else "copy"
            cls = "copy" if kind == "copy" else ("comm" if is_comm(e["name"]) else "compute")
            acts.append({
                "name": e["name"], "start": ts, "end": ts + dur, "dur": dur,
                "stream": a.get("stream"), "corr": a.get("correlation"), "cls": cls,
                "args": a, "device": a.get("device"),
            })
        elif cat in ("cuda_runtime", "cuda_driver", "Runtime", "Driver"):
            a = e.get("args", {})
            calls.append({"name": e["name"], "tid": e["tid"], "pid": e["pid"], "start": ts,
                          "end": ts + dur, "corr": a.get("correlation")})
            pids[e["pid"]] = pids.get(e["pid"], 0) + 1
        elif cat in ("cpu_op", "user_annotation", "python_function", "Operator"):
            cpu.append({"name": e["name"], "tid": e["tid"], "start": ts, "end": ts + dur, "cat": cat})
        else:
            continue
        if window_lo is None or ts < window_lo:
            window_lo = ts
        if window_hi is None or ts + dur > window_hi:
            window_hi = ts + dur
    acts.sort(key=lambda x: (x["start"], x["end"]))
    calls.sort(key=lambda x: x["start"])
    by_corr = {}
    for c in calls:
        if c["corr"] is not None:
            by_corr.setdefault(c["corr"], c)
    for a in acts:
        a["call"] = by_corr.get(a["corr"])
        a["replayed"] = bool(a["call"] and a["call"]["name"] in GRAPH_LAUNCH)
    pid = max(pids, key=lambda k: pids[k]) if pids else None
    devs = {p.get("id"): p for p in d.get("deviceProperties") or []}
    kdev = [a["device"] for a in acts if a["device"] is not None]
    dev = devs.get(kdev[0]) if kdev else None
    if dev is None and devs:
        dev = devs[sorted(devs)[0]]
    return {
        "path": path, "base": base, "rank": di.get("rank"), "world": di.get("world_size"),
        "acts": acts, "calls": calls, "cpu": cpu, "pid": pid, "device": dev,
        "window": [window_lo, window_hi],
    }


# ---------------------------------------------------------------------------
# Steps (event log's step_begin / step_end) and "Which microbatch"
# ---------------------------------------------------------------------------


def log_steps(log):
    """Per step number: begin/end ns, path, tokens, microbatch threads and their records."""
    steps = {}
    for r in log["records"]:
        t, kind, ident, ntid, ub, step, detail = r[:7]
        s = steps.setdefault(step, {"number": step, "begin_ns": None, "end_ns": None, "path": None,
                                    "tokens": None, "recs": []})
        if kind == "step_begin":
            s["begin_ns"] = t
            if isinstance(detail, dict):
                s["path"] = detail.get("path")
                s["tokens"] = detail.get("tokens")
        elif kind == "step_end":
            s["end_ns"] = t
        s["recs"].append(r)
    out = []
    for n in sorted(steps):
        s = steps[n]
        if s["begin_ns"] is None:
            continue
        if s["end_ns"] is None:
            s["end_ns"] = max(r[0] for r in s["recs"])
        s["recs"].sort(key=lambda r: r[0])
        out.append(s)
    return out


def ub_running_intervals(step):
    """Per microbatch: the ns intervals its thread had the Python turn (ub_run/resume .. yield/ub_exit)."""
    out = {}
    open_at = {}
    for r in step["recs"]:
        t, kind, ident, ntid, ub = r[0], r[1], r[2], r[3], r[4]
        if ub is None or ub < 0:
            continue
        if kind in ("ub_run", "resume"):
            open_at[ub] = t
        elif kind in ("yield", "ub_exit"):
            if ub in open_at:
                out.setdefault(ub, []).append((open_at.pop(ub), t))
    for ub, t in open_at.items():
        out.setdefault(ub, []).append((t, step["end_ns"]))
    return out


def ub_comm_phases(step):
    """Per microbatch: the ns intervals of its comm phases (stream 'comm' .. stream 'compute' / ub_exit)."""
    out = {}
    open_at = {}
    for r in step["recs"]:
        t, kind, ub, detail = r[0], r[1], r[4], r[6]
        if ub is None or ub < 0:
            continue
        out.setdefault(ub, out.get(ub, []))
        if kind == "stream" and detail == "comm":
            if ub not in open_at:
                open_at[ub] = t
        elif (kind == "stream" and detail == "compute") or kind == "ub_exit":
            if ub in open_at:
                out[ub].append((open_at.pop(ub), t))
    for ub, t in open_at.items():
        out[ub].append((t, step["end_ns"]))
    return out


def attach_steps(rk, log, main_tid):
    """Join the rank's calls to the log's steps (a call belongs to the step whose CPU window holds
    its start) and give every launching thread of a step its microbatch (by which microbatch thread
    held the Python turn when the call was made: the vote of docs 'Which microbatch' 1)."""
    base = rk["base"]
    steps = log_steps(log)
    for s in steps:
        s["begin"] = (s["begin_ns"] - base) / 1000.0
        s["end"] = (s["end_ns"] - base) / 1000.0
        s["running"] = {u: [((a - base) / 1000.0, (b - base) / 1000.0) for a, b in v]
                        for u, v in ub_running_intervals(s).items()}
        s["phases"] = {u: [((a - base) / 1000.0, (b - base) / 1000.0) for a, b in v]
                       for u, v in ub_comm_phases(s).items()}
        s["calls"] = []
    begins = [s["begin"] for s in steps]
    import bisect
    for c in rk["calls"]:
        i = bisect.bisect_right(begins, c["start"]) - 1
        c["step"] = None
        c["ub"] = None
        if i >= 0 and steps[i]["begin"] <= c["start"] <= steps[i]["end"]:
            c["step"] = steps[i]["number"]
            steps[i]["calls"].append(c)
    by_num = {s["number"]: s for s in steps}
    # launching threads per step
    for s in steps:
        launch_tids = {}
        for a in rk["acts"]:
            pass
        s["tid_ub"] = {}
        s["tid_ub_launch_order"] = {}
    for a in rk["acts"]:
        c = a["call"]
        a["step"] = c["step"] if c else None
    for s in steps:
        launched = {}
        first_launch = {}
        for a in rk["acts"]:
            c = a["call"]
            if c is None or c["step"] != s["number"]:
                continue
            if a["cls"] == "copy" and False:
                continue
            launched[c["tid"]] = launched.get(c["tid"], 0) + 1
            if c["tid"] not in first_launch or c["start"] < first_launch[c["tid"]]:
                first_launch[c["tid"]] = c["start"]
        # vote (event log)
        votes = {}
        for c in s["calls"]:
            if c["tid"] == main_tid or c["tid"] not in launched:
                continue
            t_us = c["start"]
            for ub, ivs in s["running"].items():
                for a0, a1 in ivs:
                    if a0 <= t_us <= a1:
                        v = votes.setdefault(c["tid"], {})
                        v[ub] = v.get(ub, 0) + 1
        for tid, v in votes.items():
            best = sorted(v.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
            s["tid_ub"][tid] = best
        # launching threads (docs 'Which microbatch' 5), as a cross-check only
        others = [t for t in launched if t != main_tid and launched[t] >= 2]
        if len(others) == 2:
            n0, n1 = launched[others[0]], launched[others[1]]
            if max(n0, n1) <= 4 * min(n0, n1):
                order = sorted(others, key=lambda t: first_launch[t])
                s["tid_ub_launch_order"] = {order[0]: 0, order[1]: 1}
        for c in s["calls"]:
            c["ub"] = s["tid_ub"].get(c["tid"])
    for a in rk["acts"]:
        c = a["call"]
        a["ub"] = c["ub"] if c else None
    return steps, by_num


# ---------------------------------------------------------------------------
# per-step GPU figures, steps reported, periods
# ---------------------------------------------------------------------------


def step_figures(rk, steps):
    """Reported steps (launched GPU work), windows, periods, compute/comm busy."""
    acts_by_step = {}
    for a in rk["acts"]:
        if a["step"] is not None:
            acts_by_step.setdefault(a["step"], []).append(a)
    rep = []
    for s in steps:
        acts = acts_by_step.get(s["number"])
        if not acts:
            continue
        s["acts"] = acts
        s["window_end"] = max(s["end"], max(a["end"] for a in acts))
        s["window_us"] = s["window_end"] - s["begin"]
        comp = union([[a["start"], a["end"]] for a in acts if a["cls"] == "compute"])
        comm = union([[a["start"], a["end"]] for a in acts if a["cls"] == "comm"])
        s["compute_iv"] = comp
        s["comm_iv"] = comm
        s["compute_busy_us"] = total(comp)
        s["comm_busy_us"] = total(comm)
        s["comm_hidden_us"] = total(intersect(comm, comp))
        rep.append(s)
    for i, s in enumerate(rep):
        if i + 1 < len(rep):
            s["period_us"] = rep[i + 1]["begin"] - s["begin"]
        else:
            s["period_us"] = s["window_us"]
    return rep


COMPILE_PAT = re.compile(
    r"dynamo|entire_frame_compile|backend_compile|inductor_compile|compile_fx|async_compile\.|"
    r"\(dynamo_timed\)|autotun|benchmark_all_configs|triton\.compile|triton_compile|compile_inner")
COMPILE_EXCL = re.compile(r"TorchDynamo Cache Lookup|Torch-Compiled Region|Call CompiledFxGraph|triton_poi_fused")


def stalls(rk, rep):
    """'Steady state and stalls': compile and outlier stalls (graph capture: none in the log path here)."""
    comp = union([[c["start"], c["end"]] for c in rk["cpu"]
                  if COMPILE_PAT.search(c["name"]) and not COMPILE_EXCL.search(c["name"])])
    out = {}
    for s in rep:
        lo, hi = s["begin"], s["begin"] + s["period_us"]
        cu = total(intersect(comp, [[lo, hi]]))
        if cu >= 1000 and cu >= 0.05 * s["period_us"]:
            out[s["number"]] = "compile"
    if len(rep) - 1 >= 4:
        for s in rep:
            others = [t["period_us"] for t in rep if t is not s]
            med = median(others)
            mad = median([abs(x - med) for x in others])
            if s["period_us"] > med + 3.5 * 1.4826 * mad and s["period_us"] > 2 * med:
                out.setdefault(s["number"], "outlier")
    elif len(rep) == 3:
        for s in rep:
            others = [t["period_us"] for t in rep if t is not s]
            if s["period_us"] > 10 * median(others):
                out.setdefault(s["number"], "outlier")
    return out


# ---------------------------------------------------------------------------
# 1. Hand-overs, start-up, share (the DBO ledger)
# ---------------------------------------------------------------------------


def handovers_of_step(step):
    """Hand-overs in one logged step: each microbatch yield to the next resume/ub_run of another
    microbatch's thread (the next resume/ub_run of any microbatch thread after the yield; if it is the
    yielding thread's own, no hand-over).  Latency in us from the two time.time_ns() values."""
    recs = [r for r in step["recs"] if r[4] is not None and r[4] >= 0]
    out = []
    yields = 0
    last_layer = {}
    for i, r in enumerate(recs):
        if r[1] == "layer":
            last_layer[r[4]] = r[6]
        if r[1] != "yield":
            continue
        yields += 1
        nxt = None
        for q in recs[i + 1:]:
            if q[1] in ("resume", "ub_run") and q[0] >= r[0]:
                nxt = q
                break
        if nxt is None or nxt[4] == r[4]:
            continue
        out.append({"from_ub": r[4], "to_ub": nxt[4], "yield_ns": r[0],
                    "latency_us": (nxt[0] - r[0]) / 1000.0, "layer": last_layer.get(r[4])})
    return out, yields


def startup_of_step(step):
    """step_begin to the first ub_run in the step (us)."""
    runs = [r[0] for r in step["recs"] if r[1] == "ub_run"]
    if not runs:
        return None
    return (min(runs) - step["begin_ns"]) / 1000.0


def handover_summary(steps_list):
    allh = []
    per_step = []
    for s in steps_list:
        h, _ = handovers_of_step(s)
        allh += [x["latency_us"] for x in h]
        if h:
            per_step.append(sum(x["latency_us"] for x in h))
    return {
        "steps": len(steps_list), "handovers": len(allh), "median_us": median(allh),
        "p90_us": percentile(allh, 90), "per_step_us": median(per_step),
    }


def ledger(rk, rep, all_steps, steady_numbers, startup_idle):
    steps_out = []
    allh = []
    per_step_sum = []
    yields_ps = []
    startups = []
    shares = []
    by_layer = {}
    for s in rep:
        h, y = handovers_of_step(s)
        st = startup_of_step(s)
        lat = [x["latency_us"] for x in h]
        allh += lat
        hs = sum(lat)
        if h:
            per_step_sum.append(hs)
        yields_ps.append(y)
        if st is not None:
            startups.append(st)
        share = None
        if y and s["period_us"]:
            share = (hs + (st or 0.0)) / s["period_us"]
            shares.append(share)
        for x in h:
            L = by_layer.setdefault(x["layer"], {"lat": [], "steps": set()})
            L["lat"].append(x["latency_us"])
            L["steps"].add(s["number"])
        steps_out.append({
            "number": s["number"], "index": rep.index(s) + 1, "yields": y, "handovers": len(h),
            "handover_median_us": median(lat), "handover_p90_us": percentile(lat, 90),
            "handover_us": hs, "startup_us": st, "period_us": s["period_us"],
            "window_us": s["window_us"], "share": share,
            "handover_layers_assigned": sum(1 for x in h if x["layer"] is not None),
        })
    layers = []
    for L in sorted(by_layer, key=lambda v: (v is None, v)):
        d = by_layer[L]
        layers.append({"layer": L, "handovers": len(d["lat"]), "median_us": median(d["lat"]),
                       "p90_us": percentile(d["lat"], 90),
                       "per_step_us": sum(d["lat"]) / len(d["steps"])})
    rep_nums = {s["number"] for s in rep}
    unprof = [s for s in all_steps if s["number"] not in rep_nums and s["path"] != "graph_capture"]
    return {
        "source": "event log (yield -> other microbatch's resume/ub_run)",
        "handovers": len(allh), "median_handover_us": median(allh),
        "p90_handover_us": percentile(allh, 90), "handover_per_step_us": median(per_step_sum),
        "yields_per_step": median(yields_ps), "startup_us": median(startups),
        "startup_gpu_idle_us": startup_idle.get("ubatch_startup_us"),
        "startup_gpu_idle_share_of_host_idle": startup_idle.get("share_of_host_idle"),
        "host_idle_measured_us": startup_idle.get("host_idle_us"),
        "share": median(shares),
        "unprofiled": handover_summary(unprof) if unprof else None,
        "layers": layers, "steps": steps_out,
    }


# ---------------------------------------------------------------------------
# 2. Split and imbalance
# ---------------------------------------------------------------------------


def split(rep):
    per = []
    toks = []
    for s in rep:
        ubs = {}
        for a in s["acts"]:
            if a["cls"] == "compute" and a["ub"] is not None:
                ubs.setdefault(a["ub"], []).append([a["start"], a["end"]])
        comp = {u: total(union(v)) for u, v in ubs.items()}
        cu = [comp[u] for u in sorted(comp)] if comp else None
        imb = exc = None
        if cu and len(cu) >= 2 and max(cu) > 0:
            exc = max(cu) - min(cu)
            imb = exc / max(cu)
        per.append({"number": s["number"], "tokens": s["tokens"], "compute_us": cu,
                    "imbalance": imb, "excess_us": exc})
        if s["tokens"]:
            toks.append(s["tokens"])
    tok_med = None
    if toks:
        n = max(len(t) for t in toks)
        tok_med = [median([t[i] for t in toks if len(t) > i]) for i in range(n)]
    cus = [p["compute_us"] for p in per if p["compute_us"]]
    cu_med = None
    if cus:
        n = max(len(c) for c in cus)
        cu_med = [median([c[i] for c in cus if len(c) > i]) for i in range(n)]
    return {"tokens": tok_med, "compute_us": cu_med,
            "imbalance": median([p["imbalance"] for p in per]),
            "excess_us": median([p["excess_us"] for p in per]), "steps": per}


# ---------------------------------------------------------------------------
# Cross-rank: one clock, matching, waits (needed for the 'peer' exposure reason)
# ---------------------------------------------------------------------------

ACCURACY_US = 5.0  # baseTimeNanoseconds on one host


def cross_rank_waits(ranks):
    """Returns {(rank_index, id(kernel)): wait_us} and a summary."""
    waits = {}
    summary = {"matched_collectives": 0, "channels": {}, "notes": []}
    if len(ranks) < 2:
        return waits, None
    if any(r["base"] is None for r in ranks):
        summary["notes"].append("no baseTimeNanoseconds: not aligned")
        return waits, summary
    base0 = ranks[0]["base"]

    def channels(rk):
        ch = {}
        stream_order = []
        for a in rk["acts"]:
            if a["cls"] != "comm":
                continue
            pg = a["args"].get("Process Group Name")
            if pg is None:
                if a["stream"] not in stream_order:
                    stream_order.append(a["stream"])
                key = "stream #%d" % stream_order.index(a["stream"])
            else:
                key = "pg " + str(pg)
            ch.setdefault(key, []).append(a)
        for k in ch:
            ch[k].sort(key=lambda a: a["start"])
        return ch

    def shared(rk, t):
        return t + (rk["base"] - base0) / 1000.0

    chs = [channels(r) for r in ranks]
    tot_wait = [0.0] * len(ranks)
    tot_comm = [0.0] * len(ranks)
    for ri, rk in enumerate(ranks):
        for a in rk["acts"]:
            if a["cls"] == "comm":
                tot_comm[ri] += a["dur"]
    for key, ref in chs[0].items():
        pairs_by_rank = {}
        for ri in range(1, len(ranks)):
            oth = chs[ri].get(key)
            if not oth:
                summary["notes"].append("%s: rank %d has none" % (key, ri))
                continue
            best = None
            shorter = min(len(ref), len(oth))
            durs = sorted([a["dur"] for a in ref] + [a["dur"] for a in oth])
            tol = max(50.0, median(durs) / 4.0)
            for d in range(-8, 9):
                pr = []
                ok = True
                for i, a in enumerate(ref):
                    j = i + d
                    if 0 <= j < len(oth):
                        b = oth[j]
                        if a["name"] != b["name"] or a["args"].get("Collective name") != b["args"].get("Collective name"):
                            ok = False
                            break
                        pr.append((a, b))
                if not ok or len(pr) < shorter / 2.0:
                    continue
                md = median([abs(shared(ranks[0], a["end"]) - shared(ranks[ri], b["end"])) for a, b in pr])
                if md <= tol and (best is None or md < best[0]):
                    best = (md, d, pr)
            if best is None:
                summary["notes"].append("%s: rank %d refused" % (key, ri))
                continue
            summary["channels"]["%s rank %d" % (key, ri)] = {"shift": best[1], "median_end_diff_us": best[0],
                                                            "pairs": len(best[2])}
            pairs_by_rank[ri] = {id(a): b for a, b in best[2]}
        for a in ref:
            members = [(0, a)]
            for ri, mp in pairs_by_rank.items():
                if id(a) in mp:
                    members.append((ri, mp[id(a)]))
            if len(members) != len(ranks):
                continue
            summary["matched_collectives"] += 1
            last = max(shared(ranks[ri], k["start"]) for ri, k in members)
            for ri, k in members:
                w = min(last - shared(ranks[ri], k["start"]), k["dur"])
                w = max(w, 0.0)
                waits[(ri, id(k))] = w
                tot_wait[ri] += w
    summary["ranks"] = [{"rank": ranks[i]["rank"], "wait_us": tot_wait[i], "comm_kernel_us": tot_comm[i],
                         "wait_share": (tot_wait[i] / tot_comm[i]) if tot_comm[i] else None}
                        for i in range(len(ranks))]
    return waits, summary


# ---------------------------------------------------------------------------
# Held-back communication
# ---------------------------------------------------------------------------

EVENT_RECORD = re.compile(r"^(cudaEventRecord|cuEventRecord|hipEventRecord)")
STREAM_WAIT = re.compile(r"^(cudaStreamWaitEvent|cuStreamWaitEvent|hipStreamWaitEvent)")


def held_back(rk):
    acts = rk["acts"]
    prev_end = {}
    by_stream = {}
    for a in acts:
        by_stream.setdefault(a["stream"], []).append(a)
    for st, lst in by_stream.items():
        lst.sort(key=lambda a: (a["start"], a["end"]))
        for i, a in enumerate(lst):
            prev_end[id(a)] = lst[i - 1]["end"] if i > 0 else None
    calls_by_tid = {}
    for c in rk["calls"]:
        calls_by_tid.setdefault(c["tid"], []).append(c)
    compute = [a for a in acts if a["cls"] == "compute" and a["ub"] is not None and a["call"]]
    results = []
    for k in acts:
        if k["cls"] != "comm" or k["replayed"] or k["ub"] is None or k["call"] is None:
            continue
        ready = k["call"]["end"]
        pe = prev_end[id(k)]
        if pe is not None and pe > ready:
            ready = pe
        own = [c for c in compute if c["ub"] == k["ub"] and c["step"] == k["step"]
               and c["call"]["start"] < k["call"]["start"]]
        if own:
            last = max(own, key=lambda c: c["call"]["start"])
            if last["end"] > ready:
                ready = last["end"]
        rec = {"kernel": k, "ready": ready, "delay": k["start"] - ready, "held": False}
        results.append(rec)
        if k["start"] < ready + 20.0:
            continue
        cands = []
        for h in compute:
            if h["ub"] == k["ub"] or h["step"] != k["step"]:
                continue
            if h["start"] > ready + 25.0 or h["end"] <= ready:
                continue
            tail = max(0.1 * h["dur"], 10.0)
            if not (h["end"] - tail <= k["start"] <= h["end"] + 25.0):
                continue
            cands.append(h)
        if not cands:
            continue
        h = min(cands, key=lambda x: abs(k["start"] - x["end"]))
        rec["held"] = True
        rec["holder"] = h
        if k["start"] < h["end"] or h["call"]["start"] > k["call"]["start"]:
            rec["cause"] = "crowded"
        else:
            cause = "held"
            mine = calls_by_tid.get(k["call"]["tid"], [])
            recs_ = [c for c in mine if EVENT_RECORD.match(c["name"])
                     and c["start"] > h["call"]["start"] and c["start"] < k["call"]["start"]]
            for r_ in recs_:
                w = [c for c in mine if STREAM_WAIT.match(c["name"]) and c["start"] > r_["start"]
                     and c["start"] < k["call"]["start"]]
                if w:
                    cause = "late_record"
                    rec["late_record_call"] = {"name": r_["name"], "tid": r_["tid"],
                                               "after_holder_launch_us": r_["start"] - h["call"]["start"]}
                    break
            rec["cause"] = cause
    return results


# ---------------------------------------------------------------------------
# Why comm is exposed (pieces with reasons)
# ---------------------------------------------------------------------------


def exposure(rk, held, waits, rank_index):
    acts = rk["acts"]
    comp_all = union([[a["start"], a["end"]] for a in acts if a["cls"] == "compute"])
    comm = sorted([a for a in acts if a["cls"] == "comm"], key=lambda a: (a["start"], a["end"]))
    held_by = {id(r["kernel"]): r for r in held}
    assigned = []
    pieces = []  # {kernel, lo, hi, reason}
    compute_by_step = {}
    for a in acts:
        if a["cls"] == "compute":
            compute_by_step.setdefault(a["step"], []).append(a)
    for k in comm:
        exp = subtract([[k["start"], k["end"]]], comp_all)
        exp = subtract(exp, assigned) if assigned else exp
        if not exp:
            continue
        assigned = union(assigned + [list(x) for x in exp])
        w = waits.get((rank_index, id(k)))
        peer_iv = [[k["start"], k["start"] + w]] if (w is not None and w > ACCURACY_US) else []
        hr = held_by.get(id(k))
        for lo, hi in exp:
            seg = [[lo, hi]]
            pp = intersect(seg, peer_iv) if peer_iv else []
            for a0, a1 in pp:
                pieces.append({"kernel": k, "lo": a0, "hi": a1, "reason": "peer"})
            rest = subtract(seg, pp) if pp else seg
            if not rest:
                continue
            kind = "next compute of the other microbatch" if k["ub"] is not None else "next compute"
            if hr and hr.get("held"):
                reason = hr["cause"]
                nxt = hr["holder"]
                kind = "holder (held back)"
            else:
                cands = [c for c in compute_by_step.get(k["step"], [])
                         if c["start"] >= lo and (k["ub"] is None or c["ub"] != k["ub"])]
                nxt = min(cands, key=lambda c: c["start"]) if cands else None
                if k["step"] is None:
                    nxt = None
                if nxt is None:
                    reason = "nothing"
                elif nxt["call"] is None:
                    reason = "unknown"
                elif nxt["call"]["start"] > lo:
                    reason = "host"
                else:
                    reason = "waiting"
            for a0, a1 in rest:
                pieces.append({"kernel": k, "lo": a0, "hi": a1, "reason": reason, "could_hide": nxt,
                               "could_hide_kind": kind})
    return pieces


# ---------------------------------------------------------------------------
# 3. Comm operations (round trips, layer and role)
# ---------------------------------------------------------------------------


def comm_operations(rk, rep, layers, pieces):
    comp_all = union([[a["start"], a["end"]] for a in rk["acts"] if a["cls"] == "compute"])
    pieces_by_k = {}
    for p in pieces:
        pieces_by_k.setdefault(id(p["kernel"]), []).append(p)
    all_sendrecv = True
    named_other = False
    for a in rk["acts"]:
        if a["cls"] == "comm":
            if "SendRecv" not in a["name"] and not re.search(r"nccl.*(Send|Recv)", a["name"]):
                all_sendrecv = False
            cn = a["args"].get("Collective name")
            if cn and cn not in ("send", "recv", "_send", "_recv"):
                named_other = True
    sendrecv_roles = all_sendrecv and not named_other
    per_step_ops = []
    unassigned = 0
    for s in rep:
        ops = {}
        base = None
        for ub, ph in s["phases"].items():
            for k, (p0, p1) in enumerate(ph):
                ops[(ub, k)] = {"ub": ub, "place": k, "kernels": [], "lo_ns": p0, "hi_ns": p1}  # trace us
        source = "event log comm phases" if ops else "launch runs"
        comm_k = [a for a in s["acts"] if a["cls"] == "comm"]
        if ops:
            for a in comm_k:
                t_us = a["call"]["start"]
                hit = None
                for key, o in ops.items():
                    if o["ub"] == a["ub"] and o["lo_ns"] <= t_us <= o["hi_ns"]:
                        hit = o
                        break
                if hit is None:
                    unassigned += 1
                else:
                    hit["kernels"].append(a)
        else:
            # runs of comm kernels launched back to back by one thread, no compute launched between
            by_tid = {}
            for a in s["acts"]:
                if a["cls"] in ("comm", "compute") and a["call"]:
                    by_tid.setdefault(a["call"]["tid"], []).append(a)
            placecount = {}
            for tid, lst in by_tid.items():
                lst.sort(key=lambda a: (a["call"]["start"], a["start"]))
                cur = None
                for a in lst:
                    if a["cls"] == "compute":
                        cur = None
                        continue
                    if cur is None:
                        ub = a["ub"]
                        k = placecount.get(ub, 0)
                        placecount[ub] = k + 1
                        cur = {"ub": ub, "place": k, "kernels": []}
                        ops[(ub, k, tid)] = cur
                    cur["kernels"].append(a)
        per_ub = {}
        for o in ops.values():
            per_ub[o["ub"]] = per_ub.get(o["ub"], 0) + 1
        other_comp = {}
        for a in s["acts"]:
            if a["cls"] == "compute":
                other_comp.setdefault(a["ub"], []).append([a["start"], a["end"]])
        rows = []
        for key in sorted(ops, key=lambda k: (k[0] if k[0] is not None else -1, k[1])):
            o = ops[key]
            n_ub = per_ub[o["ub"]]
            layer = role = None
            if layers:
                if n_ub == 2 * layers:
                    layer = o["place"] // 2
                    if sendrecv_roles:
                        role = "send" if o["place"] % 2 == 0 else "recv"
                    else:
                        role = "dispatch" if o["place"] % 2 == 0 else "combine"
                elif n_ub == layers:
                    layer = o["place"]
                    role = "round trip"
            busy_iv = union([[a["start"], a["end"]] for a in o["kernels"]])
            busy = total(busy_iv)
            hid_any = total(intersect(busy_iv, comp_all))
            oth = []
            for u, ivs in other_comp.items():
                if u is not None and u != o["ub"]:
                    oth += ivs
            oth = union(oth)
            hid_other = total(intersect(busy_iv, oth))
            reasons = {}
            could = []
            for a in o["kernels"]:
                for p in pieces_by_k.get(id(a), []):
                    reasons[p["reason"]] = reasons.get(p["reason"], 0.0) + (p["hi"] - p["lo"])
                    ch = p.get("could_hide")
                    if ch is not None:
                        could.append({"reason": p["reason"], "kind": p["could_hide_kind"],
                                      "name": ch["name"], "ub": ch["ub"],
                                      "start_rel_us": ch["start"] - s["begin"]})
            covering = {}
            for c in s["acts"]:
                if c["cls"] == "compute" and c["ub"] != o["ub"]:
                    ov = total(intersect(busy_iv, [[c["start"], c["end"]]]))
                    if ov > 0:
                        cv = covering.setdefault(c["name"], {"ub": c["ub"], "kernels": 0, "overlap_us": 0.0})
                        cv["kernels"] += 1
                        cv["overlap_us"] += ov
            top = max(reasons.items(), key=lambda kv: kv[1])[0] if reasons else None
            rows.append({
                "step": s["number"], "ub": o["ub"], "place": o["place"], "layer": layer, "role": role,
                "kernels": len(o["kernels"]), "kernel_names": sorted(set(a["name"] for a in o["kernels"])),
                "busy_us": busy, "hidden_us": hid_any, "hidden_under_other_ub_us": hid_other,
                "exposed_us": busy - hid_any, "exposed_reasons_us": reasons, "reason": top,
                "covered_by_other_ub_compute": covering,
                "could_have_hidden": could[:3],
                "source": source,
            })
        per_step_ops.append({"number": s["number"], "index": rep.index(s) + 1, "operations": len(ops),
                             "round_trips": len(ops) / 2.0, "ops": rows, "source": source,
                             "per_ub": per_ub})
    # summary over steps per (ub, place)
    summ = {}
    for st in per_step_ops:
        for r in st["ops"]:
            summ.setdefault((r["ub"] if r["ub"] is not None else -1, r["place"]), []).append(r)
    table = []
    for key in sorted(summ):
        rs = summ[key]
        busy = sum(r["busy_us"] for r in rs)
        reasons = {}
        for r in rs:
            for k, v in r["exposed_reasons_us"].items():
                reasons[k] = reasons.get(k, 0.0) + v
        table.append({
            "ub": rs[0]["ub"], "place": rs[0]["place"], "layer": rs[0]["layer"], "role": rs[0]["role"],
            "steps": len(rs), "median_us": median([r["busy_us"] for r in rs]),
            "hidden_fraction": (sum(r["hidden_us"] for r in rs) / busy) if busy else None,
            "hidden_fraction_median_of_steps": median([(r["hidden_us"] / r["busy_us"]) if r["busy_us"] else None for r in rs]),
            "hidden_under_other_ub_fraction": (sum(r["hidden_under_other_ub_us"] for r in rs) / busy) if busy else None,
            "median_hidden_us": median([r["hidden_us"] for r in rs]),
            "median_exposed_us": median([r["exposed_us"] for r in rs]),
            "reason": max(reasons.items(), key=lambda kv: kv[1])[0] if reasons else None,
            "exposed_reasons_us": reasons,
        })
    # per layer
    lay = {}
    for t in table:
        if t["layer"] is None:
            continue
        L = lay.setdefault(t["layer"], {"ops": 0, "time": 0.0, "hid": 0.0, "exp": 0.0, "reasons": {}})
        L["ops"] += 1
        L["time"] += t["median_us"] or 0.0
        L["hid"] += (t["median_us"] or 0.0) * (t["hidden_fraction"] or 0.0)
        L["exp"] += t["median_exposed_us"] or 0.0
        L["reasons"][t["reason"]] = L["reasons"].get(t["reason"], 0.0) + (t["median_exposed_us"] or 0.0)
    comm_layers = []
    for L in sorted(lay):
        d = lay[L]
        top = max(d["reasons"].items(), key=lambda kv: kv[1])[0] if d["reasons"] else None
        comm_layers.append({"layer": L, "operations": d["ops"], "median_us": d["time"],
                            "hidden_fraction": d["hid"] / d["time"] if d["time"] else None,
                            "median_exposed_us": d["exp"], "reason": top})
    return per_step_ops, table, comm_layers, unassigned


# ---------------------------------------------------------------------------
# 4. SM evidence
# ---------------------------------------------------------------------------


def shape(k):
    a = k["args"]
    grid = a.get("grid")
    block = a.get("block")
    if grid is None or block is None:
        return None
    ctas = 1
    for g in grid:
        ctas *= g
    threads = 1
    for b in block:
        threads *= b
    return {"name": k["name"], "grid": grid, "block": block, "ctas": ctas, "threads": threads,
            "registers_per_thread": a.get("registers per thread"),
            "shared_memory": a.get("shared memory")}


def sm_evidence(rk, held, manifest):
    crowded = [r for r in held if r.get("held") and r.get("cause") == "crowded"]
    if not crowded:
        return None
    count = {}
    for r in crowded:
        count[r["holder"]["name"]] = count.get(r["holder"]["name"], 0) + 1
    name = sorted(count.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
    first = min([r for r in crowded if r["holder"]["name"] == name], key=lambda r: r["kernel"]["start"])
    H = shape(first["holder"])
    C = shape(first["kernel"])
    dev = rk["device"] or {}
    sms = dev.get("numSms")
    mt = dev.get("maxThreadsPerMultiprocessor")
    mr = dev.get("regsPerMultiprocessor")
    ms = dev.get("sharedMemPerMultiprocessor")
    env = manifest.get("env") if isinstance(manifest.get("env"), dict) else None
    out = {"holder": H, "comm": C, "held": count[name], "sms": sms,
           "comm_sms": (env or {}).get("VLLM_DBO_COMM_SMS"), "env_recorded": env is not None,
           "first_pair_comm_start_us": first["kernel"]["start"], "first_pair_holder_end_us": first["holder"]["end"],
           "device": {"maxThreadsPerMultiprocessor": mt, "regsPerMultiprocessor": mr,
                      "sharedMemPerMultiprocessor": ms}}
    if H is None or sms is None:
        return out

    def regs_per_cta(S):
        warps_threads = int(math.ceil(S["threads"] / 32.0)) * 32
        return (S["registers_per_thread"] or 0) * warps_threads

    lims = []
    if mt:
        lims.append(mt // H["threads"])
    rpc = regs_per_cta(H)
    if mr and rpc:
        lims.append(mr // rpc)
    if ms and H["shared_memory"]:
        lims.append(ms // H["shared_memory"])
    per_sm = min(lims) if lims else None
    out["per_sm"] = per_sm
    out["holder_registers_per_cta"] = rpc
    if per_sm:
        out["waves"] = H["ctas"] / float(sms * per_sm)
        resident = min(per_sm, int(math.ceil(H["ctas"] / float(sms))))
        out["resident_per_sm"] = resident
        out["left_shared_memory"] = ms - resident * (H["shared_memory"] or 0) if ms is not None else None
        out["left_registers"] = mr - resident * rpc if mr is not None else None
        out["left_threads"] = mt - resident * H["threads"] if mt is not None else None
        if C is not None:
            crpc = regs_per_cta(C)
            out["comm_registers_per_cta"] = crpc
            out["comm_fits"] = ((C["shared_memory"] or 0) <= out["left_shared_memory"]
                                and crpc <= out["left_registers"] and C["threads"] <= out["left_threads"])
    else:
        out["waves"] = None
        out["comm_fits"] = None
    return out


# ---------------------------------------------------------------------------
# host idle and the 'ubatch_startup' host-time cause (for startup_gpu_idle_us)
# ---------------------------------------------------------------------------

MARKER = re.compile(r"^(ProfilerStep#|dbo:|execute_)")


def host_startup_idle(rk, rep, steady_numbers, main_tid):
    acts = rk["acts"]
    lo, hi = rk["window"]
    busy = union([[a["start"], a["end"]] for a in acts])
    starts = {}
    for a in acts:
        starts.setdefault(a["start"], []).append(a)
    gaps = []
    cur = lo
    for b0, b1 in busy:
        if b0 > cur:
            gaps.append((cur, b0))
        cur = max(cur, b1)
    tail = (cur, hi) if hi > cur else None
    host_stretches = []  # (a, b, ending activity or None)
    for g0, g1 in gaps:
        enders = [a for a in starts.get(g1, []) if a["call"] is not None]
        if not enders:
            continue  # other_idle: launch not in the trace
        e = min(enders, key=lambda a: a["call"]["start"])
        if e["call"]["start"] > g0:
            host_stretches.append((g0, g1, e))
    if tail:
        host_stretches.append((tail[0], tail[1], None))
    # thread merging: CPU-op-only tids -> the calling tid whose calls they hold most
    call_tids = set(c["tid"] for c in rk["calls"])
    launch_tids = set(a["call"]["tid"] for a in rk["acts"] if a["call"] is not None)
    cpu_by_tid = {}
    for c in rk["cpu"]:
        cpu_by_tid.setdefault(c["tid"], []).append(c)
    merged_to = {}
    for tid, evs in cpu_by_tid.items():
        if tid in call_tids:
            continue
        runs = union([[e["start"], e["end"]] for e in evs])
        hold = {}
        import bisect
        rs = [r[0] for r in runs]
        for c in rk["calls"]:
            # only the calls of threads that launched GPU work vote (see NOTES.md: a literal reading
            # lets NCCL's watchdog thread, polling cudaEventQuery, win a microbatch thread's ops)
            if c["tid"] not in launch_tids:
                continue
            i = bisect.bisect_right(rs, c["start"]) - 1
            if i >= 0 and runs[i][0] <= c["start"] < runs[i][1]:
                hold[c["tid"]] = hold.get(c["tid"], 0) + 1
        if hold:
            merged_to[tid] = sorted(hold.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
    events_of = {}
    for c in rk["calls"]:
        events_of.setdefault(c["tid"], []).append([c["start"], c["end"]])
    for c in rk["cpu"]:
        if c["cat"] == "user_annotation" and MARKER.match(c["name"]):
            continue
        t = merged_to.get(c["tid"], c["tid"])
        events_of.setdefault(t, []).append([c["start"], c["end"]])
    ev_union = {t: union(v) for t, v in events_of.items()}
    # main thread: the most CUDA calls
    ncalls = {}
    for c in rk["calls"]:
        ncalls[c["tid"]] = ncalls.get(c["tid"], 0) + 1
    main_by_calls = sorted(ncalls.items(), key=lambda kv: (-kv[1], kv[0]))[0][0] if ncalls else None
    step_by_num = {s["number"]: s for s in rep}
    # start-up windows of the microbatched steps
    su_windows = []
    for s in rep:
        ub_tids = [t for t in s["tid_ub"]]
        if not ub_tids:
            continue
        firsts = []
        for t in ub_tids:
            fc = [c["start"] for c in s["calls"] if c["tid"] == t]
            if fc:
                firsts.append(min(fc))
        if firsts:
            su_windows.append([s["begin"], max(firsts)])
    su_windows = union(su_windows)
    cpu_windows = union([[s["begin"], s["end"]] for s in rep])
    measured = union([[s["begin"], s["window_end"]] for s in rep if s["number"] in steady_numbers])
    tot_host = 0.0
    tot_startup = 0.0
    tot_untraced = 0.0
    tot_between = 0.0
    for g0, g1, e in host_stretches:
        seg = intersect([[g0, g1]], measured)
        if not seg:
            continue
        tot_host += total(seg)
        if e is None:
            followed = [main_by_calls]
        else:
            followed = [e["call"]["tid"]]
            s = step_by_num.get(e["step"])
            if s is not None and s["tid_ub"]:
                for t, u in sorted(s["tid_ub"].items(), key=lambda kv: kv[1]):
                    if t not in followed:
                        followed.append(t)
        inev = union(sum([ev_union.get(t, []) for t in followed], []))
        free = subtract(seg, inev)
        su = intersect(free, su_windows)
        tot_startup += total(su)
        rest = subtract(free, su)
        bs = subtract(rest, cpu_windows)
        tot_between += total(bs)
        tot_untraced += total(rest) - total(bs)
    return {"host_idle_us": tot_host, "ubatch_startup_us": tot_startup,
            "share_of_host_idle": (tot_startup / tot_host) if tot_host else None,
            "between_steps_us": tot_between, "untraced_us": tot_untraced,
            "merged_cpu_tids": {str(k): v for k, v in merged_to.items()}}


# ---------------------------------------------------------------------------
# one rank, all figures
# ---------------------------------------------------------------------------


def analyse_rank(rk, log, manifest, layers):
    main_tid = log["header"].get("main_native_tid") if log else None
    steps, by_num = attach_steps(rk, log, main_tid)
    rep = step_figures(rk, steps)
    st = stalls(rk, rep)
    steady = {s["number"] for s in rep if s["number"] not in st} or {s["number"] for s in rep}
    # agreement of the two microbatch methods
    agree = disagree = 0
    for s in rep:
        for t, u in s["tid_ub"].items():
            v = s["tid_ub_launch_order"].get(t)
            if v is None:
                continue
            if v == u:
                agree += 1
            else:
                disagree += 1
    if layers is None:
        mx = [r[6] for r in log["records"] if r[1] == "layer" and isinstance(r[6], int)]
        layers = (max(mx) + 1) if mx else None
    return {"steps_all": steps, "rep": rep, "stalls": st, "steady": steady, "main_tid": main_tid,
            "method_agreement": {"threads_agree": agree, "threads_disagree": disagree},
            "layers": layers}


def round_trip_arith(rep, per_step_ops):
    ops_by = {p["number"]: p for p in per_step_ops}
    rows = []
    for s in rep:
        p = ops_by.get(s["number"])
        rt = p["round_trips"] if p else 0
        row = {"number": s["number"], "step_us": s["period_us"], "window_us": s["window_us"], "round_trips": rt,
               "comm_busy_us": s["comm_busy_us"], "compute_busy_us": s["compute_busy_us"]}
        if rt:
            row["per_round_trip_us"] = s["period_us"] / rt
            row["per_round_trip_window_us"] = s["window_us"] / rt
            row["comm_per_round_trip_us"] = s["comm_busy_us"] / rt
            row["compute_per_microbatch_us"] = s["compute_busy_us"] / rt
            row["ratio"] = (row["compute_per_microbatch_us"] / row["comm_per_round_trip_us"]
                            if row["comm_per_round_trip_us"] else None)
        rows.append(row)

    def med(k):
        return median([r.get(k) for r in rows])
    C, R = med("compute_per_microbatch_us"), med("comm_per_round_trip_us")
    return {"step_us": med("step_us"), "window_us": med("window_us"), "round_trips": med("round_trips"),
            "ratio": (C / R) if (C is not None and R) else None,
            "criterion_met": (C >= R) if (C is not None and R is not None) else None,
            "per_round_trip_window_us": med("per_round_trip_window_us"),
            "per_round_trip_us": med("per_round_trip_us"), "comm_per_round_trip_us": med("comm_per_round_trip_us"),
            "compute_per_microbatch_us": med("compute_per_microbatch_us"), "ratio_median_of_steps": med("ratio"),
            "steps": rows}


def analyse_bundle(bundle):
    manifest = load_manifest(bundle)
    is_comm = make_classifier(manifest)
    tpaths = manifest.get("traces")
    if tpaths:
        tpaths = [os.path.join(bundle, p) for p in tpaths]
    else:
        td = os.path.join(bundle, "traces")
        tpaths = [os.path.join(td, f) for f in sorted(os.listdir(td)) if ".json" in f]
    logs = load_event_logs(bundle, manifest)
    ranks = [load_rank(p, is_comm) for p in tpaths]
    for i, r in enumerate(ranks):
        if r["rank"] is None:
            r["rank"] = i
    ranks.sort(key=lambda r: r["rank"])
    layers = manifest.get("layers")
    waits, xsum = cross_rank_waits(ranks)
    out_ranks = []
    run_rows = []
    for ri, rk in enumerate(ranks):
        log = logs.get(rk["pid"])
        if log is None:
            out_ranks.append({"rank": rk["rank"], "error": "no event log for pid %s" % rk["pid"]})
            continue
        A = analyse_rank(rk, log, manifest, layers)
        rep = A["rep"]
        held = held_back(rk)
        pieces = exposure(rk, held, waits, ri)
        pieces_nopeer = exposure(rk, held, {}, ri) if waits else pieces
        per_step_ops, op_table, comm_layers, unassigned = comm_operations(rk, rep, A["layers"], pieces)
        su_idle = host_startup_idle(rk, rep, A["steady"], A["main_tid"])
        led = ledger(rk, rep, A["steps_all"], A["steady"], su_idle)
        sp = split(rep)
        ev = sm_evidence(rk, held, manifest)
        arith = round_trip_arith(rep, per_step_ops)
        # exposure totals, per step
        rep_nums = {s["number"] for s in rep}
        reasons = {}
        crowded_by_step = {n: 0.0 for n in rep_nums}
        for p in pieces:
            reasons[p["reason"]] = reasons.get(p["reason"], 0.0) + (p["hi"] - p["lo"])
            if p["reason"] == "crowded" and p["kernel"]["step"] in crowded_by_step:
                crowded_by_step[p["kernel"]["step"]] += p["hi"] - p["lo"]
        crowded_np = {n: 0.0 for n in rep_nums}
        for p in pieces_nopeer:
            if p["reason"] == "crowded" and p["kernel"]["step"] in crowded_np:
                crowded_np[p["kernel"]["step"]] += p["hi"] - p["lo"]
        hb = [r for r in held if r.get("held")]
        causes = {}
        for r in hb:
            c = causes.setdefault(r["cause"], {"kernels": 0, "delay_us": 0.0})
            c["kernels"] += 1
            c["delay_us"] += r["delay"]
        holders = {}
        for r in hb:
            holders[r["holder"]["name"]] = holders.get(r["holder"]["name"], 0) + 1
        late_ex = next((r.get("late_record_call") for r in hb if r.get("cause") == "late_record"), None)
        held_out = {"comm_kernels": sum(1 for a in rk["acts"] if a["cls"] == "comm"),
                    "considered": len(held), "held": len(hb),
                    "delay_us": sum(r["delay"] for r in hb),
                    "median_delay_us": median([r["delay"] for r in hb]),
                    "by_cause": causes, "holders": holders, "late_record_example": late_ex}
        # comm busy/hidden whole rank
        comm_u = union([[a["start"], a["end"]] for a in rk["acts"] if a["cls"] == "comm"])
        comp_u = union([[a["start"], a["end"]] for a in rk["acts"] if a["cls"] == "compute"])
        rank_out = {
            "rank": rk["rank"], "pid": rk["pid"], "trace": os.path.basename(rk["path"]),
            "event_log": os.path.basename(log["path"]),
            "steps_reported": [s["number"] for s in rep], "stalls": A["stalls"],
            "layers": A["layers"], "microbatch_method_check": A["method_agreement"],
            "comm": {"busy_us": total(comm_u), "hidden_us": total(intersect(comm_u, comp_u)),
                     "exposed_us": total(subtract(comm_u, comp_u))},
            "dbo_ledger": led, "split": sp,
            "round_trips": arith,
            "comm_operations": op_table, "comm_layers": comm_layers,
            "comm_operations_per_step": per_step_ops, "comm_kernels_outside_phases": unassigned,
            "exposed_comm_reasons_us": reasons,
            "crowded_exposed_per_step_us": {str(k): v for k, v in sorted(crowded_by_step.items())},
            "crowded_exposed_without_peer_precedence_per_step_us": {str(k): v for k, v in sorted(crowded_np.items())},
            "held_back_comm": held_out, "sm_evidence": ev,
            "host_startup": su_idle,
        }
        out_ranks.append(rank_out)
        run_rows.append({"rank": rk["rank"], "arith": arith, "led": led, "crowded": crowded_by_step,
                         "crowded_np": crowded_np,
                         "sms": (rk["device"] or {}).get("numSms"), "rep": rep})
    run = run_level(run_rows)
    return {"bundle": bundle, "env_recorded": isinstance(manifest.get("env"), dict),
            "VLLM_DBO_COMM_SMS": (manifest.get("env") or {}).get("VLLM_DBO_COMM_SMS") if isinstance(manifest.get("env"), dict) else None,
            "layers_manifest": manifest.get("layers"), "ranks": out_ranks,
            "cross_rank": xsum, "run": run}


# ---------------------------------------------------------------------------
# 5. What-if (model)
# ---------------------------------------------------------------------------


def what_if(step, N, C, R, crowded_ps, sms, handover_ps, round_trip_values=(100.0, 5000.0), sms_values=(20,)):
    out = []
    if None in (step, N, C, R):
        return out
    for X in round_trip_values:
        pred = step - N * (max(C, R) - max(C, X))
        out.append({"what": "round-trip=%gus" % X, "step_us": step, "predicted_us": pred,
                    "change": pred / step - 1.0,
                    "assumptions": "each round trip costs max(C, R) overlapped; the rest of the step unchanged"})
    for n in sms_values:
        if sms and sms > n and crowded_ps is not None:
            extra = C * N * n / float(sms - n)
            pred = step - crowded_ps + extra
            out.append({"what": "sms=%d" % n, "step_us": step, "predicted_us": pred, "change": pred / step - 1.0,
                        "crowded_recovered_us": crowded_ps, "compute_cost_us": extra, "sms_total": sms,
                        "assumptions": "crowded exposed comm hides entirely; compute slows by N/(SMs-N)"})
    if handover_ps is not None:
        pred = step - handover_ps
        out.append({"what": "no hand-overs", "step_us": step, "predicted_us": pred, "change": pred / step - 1.0,
                    "assumptions": "bound: every hand-over on the critical path"})
    return out


def run_level(rows):
    if not rows:
        return None
    per_rank = {}
    KEYS = ("step_us", "window_us", "round_trips", "comm_per_round_trip_us", "compute_per_microbatch_us",
            "per_round_trip_us", "per_round_trip_window_us")
    for k in KEYS:
        per_rank[k] = [r["arith"][k] for r in rows]
    # reading A (chosen): median over ranks of each rank's median over steps
    A = {k: median(v) for k, v in per_rank.items()}
    # reading B: median over every (rank, step) pooled
    pooled = {}
    for k in KEYS:
        pooled[k] = median([s.get(k) for r in rows for s in r["arith"]["steps"]])
    crowded_total = sum(sum(r["crowded"].values()) for r in rows)
    rank_steps = sum(len(r["crowded"]) for r in rows)
    crowded_ps = crowded_total / rank_steps if rank_steps else None
    crowded_np_ps = (sum(sum(r["crowded_np"].values()) for r in rows) / rank_steps) if rank_steps else None
    ho = median([r["led"]["handover_per_step_us"] for r in rows])
    sms = rows[0]["sms"]
    res = {"ranks": len(rows), "arith_median_over_ranks": A, "arith_pooled": pooled,
           "crowded_total_us": crowded_total, "rank_steps": rank_steps, "crowded_per_step_us": crowded_ps,
           "crowded_per_step_without_peer_precedence_us": crowded_np_ps,
           "handover_per_step_us": ho, "sms": sms}
    C, R = A["compute_per_microbatch_us"], A["comm_per_round_trip_us"]
    res["criterion_ratio"] = (C / R) if (C is not None and R) else None
    res["criterion_met"] = (C >= R) if (C is not None and R is not None) else None
    res["what_if"] = what_if(A["step_us"], A["round_trips"], C, R, crowded_ps, sms, ho)
    res["what_if_window_step"] = what_if(A["window_us"], A["round_trips"], C, R, crowded_ps, sms, ho)
    res["what_if_sms_crowded_without_peer_precedence"] = {
        "period": what_if(A["step_us"], A["round_trips"], C, R, crowded_np_ps, sms, None, round_trip_values=()),
        "window": what_if(A["window_us"], A["round_trips"], C, R, crowded_np_ps, sms, None, round_trip_values=())}
    res["what_if_pooled_reading"] = what_if(pooled["step_us"], pooled["round_trips"], pooled["compute_per_microbatch_us"],
                                            pooled["comm_per_round_trip_us"], crowded_ps, sms, ho)
    # the validation model: an arm run serially predicts its overlapped arm at step - N*min(C,R)
    if None not in (A["step_us"], A["round_trips"], C, R):
        res["if_this_arm_were_serial_overlapped_prediction_us"] = A["step_us"] - A["round_trips"] * min(C, R)
        res["if_this_arm_were_serial_overlapped_prediction_window_us"] = A["window_us"] - A["round_trips"] * min(C, R)
    return res


# ---------------------------------------------------------------------------


def main(argv):
    out = {}
    for b in argv[1:]:
        out[b] = rnd(analyse_bundle(b))
    json.dump(out, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
