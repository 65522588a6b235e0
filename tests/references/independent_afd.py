#!/usr/bin/env python3
"""Independent reference figures for an AFD attention-side bundle (dbo-trace docs/analysis.md).

Written from docs/analysis.md ("Steps", "Step time: period and window", "Which microbatch",
"Who is communication", "Overlap", "Graphs", "Round trips and the DBO criterion",
"Disaggregated round trips (AFD)", "Unprofiled timing", "Verdict") and docs/bundle-format.md
only.  Standard library, plain loops.  Readings chosen where the docs are silent: NOTES.md.

usage: python3 independent_afd.py BUNDLE_DIR [BUNDLE_DIR ...]
prints one JSON object {bundle_dir: figures}.
"""
import glob
import gzip
import json
import math
import os
import re
import sys


# ----------------------------------------------------------------------------- small helpers

def r3(x):
    if x is None:
        return None
    return round(float(x), 3)


def median(values):
    v = sorted(values)
    n = len(v)
    if n == 0:
        return None
    if n % 2 == 1:
        return v[n // 2]
    return (v[n // 2 - 1] + v[n // 2]) / 2.0


def mean(values):
    if not values:
        return None
    return sum(values) / len(values)


def sample_sd(values):
    n = len(values)
    if n < 2:
        return None
    m = mean(values)
    s = 0.0
    for x in values:
        s += (x - m) ** 2
    return math.sqrt(s / (n - 1))


def union(intervals):
    """Merge (start, end) pairs into a sorted list of disjoint intervals."""
    iv = sorted((s, e) for s, e in intervals if e > s)
    out = []
    for s, e in iv:
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def measure(merged):
    t = 0.0
    for s, e in merged:
        t += e - s
    return t


def intersect(a, b):
    """Intersection of two merged interval lists."""
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        s = max(a[i][0], b[j][0])
        e = min(a[i][1], b[j][1])
        if e > s:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a, b):
    """a minus b, both merged."""
    out = []
    j = 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            if cur >= e:
                break
            k += 1
        if cur < e:
            out.append((cur, e))
    return out


def clip(merged, lo, hi):
    return intersect(merged, [(lo, hi)])


# ----------------------------------------------------------------------------- classification

COMM_PATTERNS = [
    # NCCL / RCCL
    r"^nccl", r"nccldevkernel", r"ncclkernel", r"rccl",
    # DeepEP
    r"deep_ep", r"deepep", r"::ep::", r"ep::intranode", r"ep::internode", r"ep::internode_ll",
    r"notify_dispatch", r"notify_combine", r"cached_notify",
    # pplx / all-to-all
    r"pplx", r"all_to_all", r"alltoall",
    # NVSHMEM
    r"nvshmem",
    # custom all-reduce
    r"cross_device_reduce", r"custom_all_reduce", r"all_reduce",
    # all-gather / reduce-scatter
    r"all_gather", r"reduce_scatter",
    # dispatch / combine
    r"moe_dispatch", r"ep_combine", r"a2a_dispatch", r"all2all_combine", r"dispatch_kernel",
    r"combine_kernel",
    # symmetric memory
    r"symm_mem", r"multimem", r"two_shot", r"one_shot_all",
]

SENDRECV_RE = re.compile(r"sendrecv|ncclDevKernel_Send\b|ncclDevKernel_Recv\b|ncclKernel_Send|ncclKernel_Recv",
                         re.IGNORECASE)

LAUNCH_NAMES = {
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
    "cudaLaunchCooperativeKernelMultiDevice", "cuLaunchKernel", "cuLaunchKernelEx",
    "cuLaunchCooperativeKernel", "hipLaunchKernel", "hipExtLaunchKernel", "hipModuleLaunchKernel",
    "hipExtModuleLaunchKernel", "hipLaunchCooperativeKernel",
}
GRAPH_LAUNCH_NAMES = {"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"}

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
CALL_CATS = {"cuda_runtime", "cuda_driver", "runtime", "driver"}
HOST_CATS = {"cpu_op", "user_annotation", "python_function", "operator", "cpu_instant_event"}

EXEC_RE = re.compile(r"^execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)")
EXEC_DETAILED_RE = re.compile(r"^execute_(\d+)_context_(\d+)\(.*\)_generation_(\d+)\(")

COMPILE_RE = re.compile(
    r"(^|[^a-z])dynamo|entire_frame_compile|backend_compile|inductor_compile|compile_fx|"
    r"async_compile\.|\(dynamo_timed\)|autotun|benchmark_all_configs|triton\.compile|triton_compile|"
    r"compile_inner", re.IGNORECASE)
COMPILE_EXCLUDE_RE = re.compile(
    r"TorchDynamo Cache Lookup|Torch-Compiled Region|## Call CompiledFxGraph ##|^triton_poi_fused",
    re.IGNORECASE)


def is_comm_kernel(name, extra_res):
    low = name.lower()
    for p in COMM_PATTERNS:
        if re.search(p, low):
            return True
    for rx in extra_res:
        if rx.search(name):
            return True
    return False


def gpu_class(ev, extra_res):
    cat = ev["cat"].lower()
    if cat != "kernel":
        return "copy"
    if is_comm_kernel(ev["name"], extra_res):
        return "comm"
    return "compute"


# ----------------------------------------------------------------------------- loading

def load_trace(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    if isinstance(doc, list):
        return {"traceEvents": doc}
    return doc


def load_event_log(path):
    header = None
    rows = []
    with open(path) as f:
        for i, line in enumerate(f):
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                continue  # a last line cut by a kill
            if i == 0:
                header = obj
                continue
            rows.append(obj)
    return header, rows


class Rank:
    """One trace: its GPU activities, launch calls and CPU ranges on the trace clock (us)."""

    def __init__(self, doc, extra_res):
        self.base_ns = doc.get("baseTimeNanoseconds")
        self.gpu = []          # dicts: ts, end, name, cls, stream, corr
        self.calls = {}        # correlation -> call dict (ts, end, name, tid)
        self.call_list = []
        self.host = []         # cpu ops / annotations (name, ts, end, tid, cat)
        first = None
        last = None
        for e in doc.get("traceEvents", []):
            if e.get("ph") != "X":
                continue
            cat = str(e.get("cat", "")).lower()
            ts = e.get("ts")
            if ts is None:
                continue
            ts = float(ts)
            end = ts + float(e.get("dur", 0) or 0)
            counted = False
            if cat in GPU_CATS:
                args = e.get("args", {}) or {}
                self.gpu.append({
                    "ts": ts, "end": end, "name": e.get("name", ""),
                    "cls": gpu_class({"cat": cat, "name": e.get("name", "")}, extra_res),
                    "stream": args.get("stream", e.get("tid")),
                    "corr": args.get("correlation"),
                })
                counted = True
            elif cat in CALL_CATS:
                args = e.get("args", {}) or {}
                c = {"ts": ts, "end": end, "name": e.get("name", ""), "tid": e.get("tid"),
                     "corr": args.get("correlation")}
                self.call_list.append(c)
                if c["corr"] is not None:
                    self.calls[c["corr"]] = c
                counted = True
            elif cat in HOST_CATS:
                self.host.append({"ts": ts, "end": end, "name": e.get("name", ""), "tid": e.get("tid"),
                                  "cat": cat})
                counted = True
            if counted:
                first = ts if first is None or ts < first else first
                last = end if last is None or end > last else last
        self.window = (first, last)
        self.gpu.sort(key=lambda g: (g["ts"], g["end"]))
        for g in self.gpu:
            c = self.calls.get(g["corr"])
            g["launch"] = c
            g["replayed"] = bool(c is not None and c["name"] in GRAPH_LAUNCH_NAMES)
        corrs = [c["corr"] for c in self.call_list if isinstance(c["corr"], (int, float))]
        self.first_corr = min(corrs) if corrs else None


# ----------------------------------------------------------------------------- figures

def fig_window(rank):
    s, e = rank.window
    return {"start_us": s, "end_us": e, "window_us": e - s}


def fig_buckets(rank):
    """The five-bucket accounting of the whole window; returns figures and the host-idle intervals."""
    w0, w1 = rank.window
    comp = union([(g["ts"], g["end"]) for g in rank.gpu if g["cls"] == "compute"])
    comm = union([(g["ts"], g["end"]) for g in rank.gpu if g["cls"] == "comm"])
    copy = union([(g["ts"], g["end"]) for g in rank.gpu if g["cls"] == "copy"])
    allg = union([(g["ts"], g["end"]) for g in rank.gpu])
    allg = clip(allg, w0, w1)
    compute_t = measure(clip(comp, w0, w1))
    comm_exposed = subtract(clip(comm, w0, w1), comp)
    copy_only = subtract(subtract(clip(copy, w0, w1), comp), comm)
    busy = measure(allg)
    # idle stretches: the gaps of allg in the window
    gaps = []
    cur = w0
    for s, e in allg:
        if s > cur:
            gaps.append((cur, s))
        cur = max(cur, e)
    if cur < w1:
        gaps.append((cur, w1))
    # earliest launch call start of the activities starting exactly at a stretch's end
    starts = {}
    for g in rank.gpu:
        starts.setdefault(g["ts"], []).append(g)
    host_idle = []
    other_idle = []
    for s, e in gaps:
        enders = starts.get(e)
        if not enders:
            host_idle.append((s, e))  # the tail: nothing more ran
            continue
        launches = [g["launch"]["ts"] for g in enders if g["launch"] is not None]
        if not launches:
            other_idle.append((s, e))  # launch not in the trace
            continue
        if min(launches) > s:
            host_idle.append((s, e))
        else:
            other_idle.append((s, e))
    window = w1 - w0
    hidden = measure(intersect(comm, comp))
    comm_busy = measure(comm)
    return {
        "window_us": window,
        "compute_us": compute_t,
        "comm_exposed_us": measure(comm_exposed),
        "copy_us": measure(copy_only),
        "host_idle_us": measure(host_idle),
        "other_idle_us": measure(other_idle),
        "gpu_busy_us": busy,
        "gpu_utilization": busy / window if window > 0 else None,
        "comm_busy_us": comm_busy,
        "comm_hidden_us": hidden,
        "comm_hidden_fraction": hidden / comm_busy if comm_busy > 0 else None,
    }, union(host_idle), {
        "compute": clip(comp, w0, w1), "comm_exposed": comm_exposed, "copy": copy_only,
        "host_idle": union(host_idle), "other_idle": union(other_idle)}


def fig_step_buckets(steps, bucket_iv):
    """The window's buckets clipped to each steady step's window: medians of their shares."""
    steady = [s for s in steps if not s.get("stall")] or steps
    shares = {k: [] for k in bucket_iv}
    busy = []
    for s in steady:
        w = s["win_end"] - s["win_start"]
        if w <= 0:
            continue
        b = 0.0
        for k, iv in bucket_iv.items():
            t = measure(clip(iv, s["win_start"], s["win_end"]))
            shares[k].append(t / w)
            if k in ("compute", "comm_exposed", "copy"):
                b += t
        busy.append(b / w)
    out = {"gpu_busy_fraction_per_step_median": r3(median(busy))}
    for k, v in shares.items():
        out[k + "_share_per_step_median"] = r3(median(v))
    return out


def fig_steps(rank, logs, base_ns):
    """Steps from the hook event log (step_begin/step_end of the main thread), on the trace clock."""
    steps = []
    for header, rows in logs:
        main_ident = header.get("main_ident") if header else None
        begins = {}
        for r in rows:
            if len(r) < 7:
                continue
            t_ns, kind, ident, _native, _ub, step, detail = r[:7]
            if main_ident is not None and ident != main_ident and kind in ("step_begin", "step_end"):
                continue
            if kind == "step_begin":
                begins[step] = (t_ns, detail or {})
            elif kind == "step_end" and step in begins:
                b_ns, det = begins.pop(step)
                steps.append({
                    "number": step,
                    "cpu_start": (b_ns - base_ns) / 1000.0,
                    "cpu_end": (t_ns - base_ns) / 1000.0,
                    "path": det.get("path"),
                    "tokens": det.get("tokens"),
                })
    steps.sort(key=lambda s: s["cpu_start"])
    # GPU work belongs to the step whose CPU window holds its launching call's start
    for s in steps:
        s["gpu"] = []
        s["graph_launches"] = 0
        s["launch_calls"] = 0
    call_starts = sorted(rank.call_list, key=lambda c: c["ts"])
    j = 0
    for c in call_starts:
        while j < len(steps) and steps[j]["cpu_end"] < c["ts"]:
            j += 1
        if j < len(steps) and steps[j]["cpu_start"] <= c["ts"] <= steps[j]["cpu_end"]:
            if c["name"] in GRAPH_LAUNCH_NAMES:
                steps[j]["graph_launches"] += 1
            if c["name"] in LAUNCH_NAMES or c["name"] in GRAPH_LAUNCH_NAMES:
                steps[j]["launch_calls"] += 1
    for g in rank.gpu:
        c = g["launch"]
        if c is None:
            continue
        if rank.first_corr is not None and isinstance(g["corr"], (int, float)) and g["corr"] < rank.first_corr:
            continue
        for s in steps:  # few steps: plain scan
            if s["cpu_start"] <= c["ts"] <= s["cpu_end"]:
                s["gpu"].append(g)
                break
    steps = [s for s in steps if s["gpu"]]
    for s in steps:
        s["win_start"] = s["cpu_start"]
        s["win_end"] = max([s["cpu_end"]] + [g["end"] for g in s["gpu"]])
        s["window_us"] = s["win_end"] - s["win_start"]
    for i, s in enumerate(steps):
        if i + 1 < len(steps):
            s["period_us"] = steps[i + 1]["cpu_start"] - s["cpu_start"]
        else:
            s["period_us"] = s["window_us"]
    # phase from the vLLM execute_* annotation that holds the step's start
    ann = []
    for h in rank.host:
        m = EXEC_RE.match(h["name"])
        if m:
            n, m_ = int(m.group(1)), int(m.group(3))
        else:
            m2 = EXEC_DETAILED_RE.match(h["name"])
            if not m2:
                continue
            n, m_ = int(m2.group(2)), int(m2.group(3))
        phase = "prefill" if n > 0 and m_ == 0 else "decode" if n == 0 and m_ > 0 else "mixed" if n > 0 else None
        ann.append((h["ts"], h["end"], phase, h["name"]))
    for s in steps:
        s["phase"] = None
        s["execute_annotation"] = None
        for a0, a1, ph, nm in ann:
            if a0 <= s["cpu_start"] <= a1:
                s["phase"] = ph
                s["execute_annotation"] = (a0, a1, nm)
                break
    return steps


def fig_stalls(rank, steps):
    """Compile / capture / outlier stalls (docs "Steady state and stalls")."""
    compile_iv = union([(h["ts"], h["end"]) for h in rank.host
                        if COMPILE_RE.search(h["name"]) and not COMPILE_EXCLUDE_RE.search(h["name"])])
    # capture windows per thread
    cap = []
    open_by_tid = {}
    for c in sorted(rank.call_list, key=lambda c: c["ts"]):
        nm = c["name"]
        if nm in ("cudaStreamBeginCapture", "cuStreamBeginCapture", "hipStreamBeginCapture"):
            open_by_tid.setdefault(c["tid"], [c["ts"], 0])
            open_by_tid[c["tid"]][1] += 1
        elif nm in ("cudaStreamEndCapture", "cuStreamEndCapture", "hipStreamEndCapture"):
            if c["tid"] in open_by_tid:
                open_by_tid[c["tid"]][1] -= 1
                if open_by_tid[c["tid"]][1] <= 0:
                    cap.append((open_by_tid[c["tid"]][0], c["end"]))
                    del open_by_tid[c["tid"]]
    cap = union(cap)
    for s in steps:
        s["stall"] = None
        p0, p1 = s["cpu_start"], s["cpu_start"] + s["period_us"]
        cin = measure(clip(compile_iv, p0, p1))
        if cin >= 1000 and cin >= 0.05 * s["period_us"]:
            s["stall"] = "compile"
            continue
        gin = measure(clip(cap, p0, p1))
        if gin >= 1000 and gin >= 0.05 * s["period_us"]:
            s["stall"] = "graph capture"
    by_phase = {}
    for s in steps:
        by_phase.setdefault(s["phase"], []).append(s)
    for ph, group in by_phase.items():
        for s in group:
            if s["stall"]:
                continue
            others = [o["period_us"] for o in group if o is not s]
            if len(others) >= 4:
                m = median(others)
                mad = median([abs(x - m) for x in others])
                if s["period_us"] > m + 3.5 * 1.4826 * mad and s["period_us"] > 2 * m:
                    s["stall"] = "outlier"
            elif len(others) == 2:
                m = median(others)
                if s["period_us"] > 10 * m:
                    s["stall"] = "outlier"
    return {"compile_ranges": len(compile_iv), "capture_windows": len(cap),
            "stalls": [{"number": s["number"], "stall": s["stall"]} for s in steps if s["stall"]]}


def fig_step_times(steps):
    steady = [s for s in steps if not s.get("stall")]
    by_phase = {}
    for s in steps:
        by_phase.setdefault(s["phase"], []).append(s)
    phases = {}
    for ph, group in by_phase.items():
        st = [s for s in group if not s.get("stall")] or group
        phases[str(ph)] = {
            "steps": len(group),
            "stalled": len([s for s in group if s.get("stall")]),
            "median_period_us": r3(median([s["period_us"] for s in st])),
            "median_window_us": r3(median([s["window_us"] for s in st])),
        }
    return {
        "count": len(steps),
        "source": "hook event log (step_begin/step_end)",
        "paths": sorted(set(str(s["path"]) for s in steps)),
        "median_period_us": r3(median([s["period_us"] for s in steady])),
        "median_window_us": r3(median([s["window_us"] for s in steady])),
        "median_cpu_span_us": r3(median([s["cpu_end"] - s["cpu_start"] for s in steady])),
        "phases": phases,
    }


def fig_graphs(rank, steps):
    kernels = [g for g in rank.gpu if g["cls"] != "copy"]
    rep = [g for g in kernels if g["replayed"]]
    ksum = sum(g["end"] - g["ts"] for g in kernels)
    rsum = sum(g["end"] - g["ts"] for g in rep)
    per_step_launch = [s["graph_launches"] for s in steps]
    replayed_steps = 0
    for s in steps:
        ks = [g for g in s["gpu"] if g["cls"] != "copy"]
        if ks and len([g for g in ks if g["replayed"]]) * 2 > len(ks):
            replayed_steps += 1
    graph_launch_calls = len([c for c in rank.call_list if c["name"] in GRAPH_LAUNCH_NAMES])
    return {
        "graph_launch_calls": graph_launch_calls,
        "graph_replays_per_step_median": r3(median(per_step_launch)) if per_step_launch else None,
        "graph_replays_per_step_min": min(per_step_launch) if per_step_launch else None,
        "graph_replays_per_step_max": max(per_step_launch) if per_step_launch else None,
        "replayed_kernel_fraction": r3(len(rep) / len(kernels)) if kernels else None,
        "replayed_gpu_fraction": r3(rsum / ksum) if ksum > 0 else None,
        "steps_replayed": replayed_steps,
        "kernels_per_replay_median": r3(median([
            len([g for g in s["gpu"] if g["replayed"]]) / s["graph_launches"]
            for s in steps if s["graph_launches"]])) if any(s["graph_launches"] for s in steps) else None,
    }


def data_plane_streams(rank):
    comp_streams = set(g["stream"] for g in rank.gpu if g["cls"] == "compute")
    return comp_streams


def is_sendrecv(g):
    return g["cls"] != "copy" and bool(SENDRECV_RE.search(g["name"]))


def fig_sendrecv(rank, steps):
    comp_streams = data_plane_streams(rank)
    all_sr = [g for g in rank.gpu if is_sendrecv(g)]
    data = [g for g in all_sr if g["replayed"] or g["stream"] in comp_streams]
    ctrl = [g for g in all_sr if not (g["replayed"] or g["stream"] in comp_streams)]
    in_graph = [len([g for g in s["gpu"] if is_sendrecv(g) and g["replayed"]]) for s in steps]
    out_graph = [len([g for g in s["gpu"] if is_sendrecv(g) and not g["replayed"]]) for s in steps]
    in_step = set()
    for s in steps:
        for g in s["gpu"]:
            in_step.add(id(g))
    not_in_step = [g for g in all_sr if id(g) not in in_step]
    # the same, attributing by vLLM's execute_* range that holds the launch (the engine step)
    exec_ranges = [s["execute_annotation"] for s in steps if s["execute_annotation"]]
    per_exec_out = []
    per_exec_in = []
    for a0, a1, _nm in exec_ranges:
        n_in = n_out = 0
        for g in all_sr:
            c = g["launch"]
            if c is not None and a0 <= c["ts"] <= a1:
                if g["replayed"]:
                    n_in += 1
                else:
                    n_out += 1
        per_exec_in.append(n_in)
        per_exec_out.append(n_out)
    return {
        "total": len(all_sr),
        "replayed_from_graphs": len([g for g in all_sr if g["replayed"]]),
        "outside_graphs": len([g for g in all_sr if not g["replayed"]]),
        "data_plane": len(data),
        "control_plane": len(ctrl),
        "control_plane_streams": sorted(set(str(g["stream"]) for g in ctrl)),
        "data_plane_streams": len(set(g["stream"] for g in data)),
        "per_step_in_graphs_median": r3(median(in_graph)) if in_graph else None,
        "per_step_outside_graphs_median": r3(median(out_graph)) if out_graph else None,
        "in_no_step_window": len(not_in_step),
        "per_execute_range_in_graphs_median": r3(median(per_exec_in)) if per_exec_in else None,
        "per_execute_range_outside_graphs_median": r3(median(per_exec_out)) if per_exec_out else None,
    }, data


def ub_sequence(L):
    """DBO's data-kernel order S0 S1 (R0 S0 R1 S1)x(L-1) R0 R1 as microbatch ids."""
    seq = [0, 1]
    for _ in range(L - 1):
        seq += [0, 0, 1, 1]
    seq += [0, 1]
    return seq


def fig_round_trips(rank, steps, data_plane, layers_known):
    data_ids = set(id(g) for g in data_plane)
    per_step = []
    all_rts = []
    unpaired_total = 0
    modes = {}
    pattern_ok_steps = 0
    for s in steps:
        dk = sorted([g for g in s["gpu"] if id(g) in data_ids], key=lambda g: (g["ts"], g["end"]))
        if not dk:
            continue
        comp = sorted([g for g in s["gpu"] if g["cls"] == "compute"], key=lambda g: (g["ts"], g["end"]))
        n = len(dk)
        # rule 1: launching threads -- graph replays launch everything from one call: never two threads
        # here; a launch-thread rule would need every data kernel on a microbatch thread.
        mode = None
        ub = None
        between_first_two = False
        if n >= 2:
            for c in comp:
                if dk[0]["end"] <= c["ts"] < dk[1]["ts"]:
                    between_first_two = True
                    break
        L = layers_known if layers_known else (n // 4 if n % 4 == 0 and n >= 4 else None)
        if between_first_two and L and n == 4 * L:
            mode = "kernel order"
            ub = ub_sequence(L)
        elif not between_first_two:
            mode = "one microbatch"
            ub = [0] * n
        else:
            mode = "not told apart"
            ub = [0] * n
        modes[mode] = modes.get(mode, 0) + 1
        # send / receive per microbatch, k-th send with k-th receive
        role = [None] * n
        seen = {}
        for i in range(n):
            k = seen.get(ub[i], 0)
            role[i] = "send" if k % 2 == 0 else "recv"
            seen[ub[i]] = k + 1
        # compute microbatch: between data kernel k and k+1 (by start), k's after a receive,
        # k+1's after a send; before the first data kernel: the first's; after the last: as a receive
        comp_ub = []
        di = 0
        for c in comp:
            while di < n and dk[di]["ts"] <= c["ts"]:
                di += 1
            # dk[di-1] is the last data kernel started at or before c
            if mode != "kernel order":
                comp_ub.append(0)
                continue
            if di == 0:
                comp_ub.append(ub[0])
            else:
                k = di - 1
                if role[k] == "recv" or k + 1 >= n:
                    comp_ub.append(ub[k])
                else:
                    comp_ub.append(ub[k + 1])
        comp_iv = {0: union([(c["ts"], c["end"]) for c, u in zip(comp, comp_ub) if u == 0]),
                   1: union([(c["ts"], c["end"]) for c, u in zip(comp, comp_ub) if u == 1])}
        sends = {}
        recvs = {}
        for i in range(n):
            (sends if role[i] == "send" else recvs).setdefault(ub[i], []).append(dk[i])
        rts = []
        unpaired = 0
        for u in set(list(sends.keys()) + list(recvs.keys())):
            ss = sends.get(u, [])
            rr = recvs.get(u, [])
            m = min(len(ss), len(rr))
            unpaired += len(ss) - m + len(rr) - m
            for k in range(m):
                s0 = ss[k]["ts"]
                r1 = rr[k]["end"]
                t = r1 - s0
                if mode == "kernel order":
                    other = comp_iv[1 - u]
                    hid = measure(clip(other, s0, r1))
                else:
                    hid = 0.0
                rts.append({"ub": u, "send_start": s0, "recv_end": r1, "time": t, "hidden": hid,
                            "exposed": t - hid, "recv_dur": rr[k]["end"] - rr[k]["ts"]})
        unpaired_total += unpaired
        # check DBO's order on the trace: compute between send_k and the next send of the other ub,
        # none between a send and the other microbatch's receive
        if mode == "kernel order":
            ok = True
            for i in range(n - 1):
                has = any(dk[i]["end"] <= c["ts"] < dk[i + 1]["ts"] for c in comp)
                if role[i] == "send" and role[i + 1] == "recv" and ub[i] != ub[i + 1] and has:
                    ok = False
                if role[i] == "send" and role[i + 1] == "send" and not has:
                    ok = False
                if role[i] == "recv" and role[i + 1] == "send" and not has:
                    ok = False
            if ok:
                pattern_ok_steps += 1
        comm_busy = measure(union([(g["ts"], g["end"]) for g in s["gpu"] if g["cls"] == "comm"]))
        comp_busy = measure(union([(g["ts"], g["end"]) for g in s["gpu"] if g["cls"] == "compute"]))
        n_rt = len(rts)
        per_step.append({
            "number": s["number"], "mode": mode, "data_kernels": n, "round_trips": n_rt,
            "per_ub": {str(u): len([r for r in rts if r["ub"] == u]) for u in sorted(set(r["ub"] for r in rts))},
            "comm_busy_us": comm_busy, "compute_busy_us": comp_busy, "period_us": s["period_us"],
            "hidden_share": (sum(r["hidden"] for r in rts) / sum(r["time"] for r in rts)) if rts else None,
            "rt_median_us": median([r["time"] for r in rts]),
            "rt_time_sum_us": sum(r["time"] for r in rts),
            "hidden_sum_us": sum(r["hidden"] for r in rts),
            "unpaired": unpaired,
        })
        all_rts.extend(rts)
    steps_rt = [p for p in per_step if p["round_trips"] > 0]
    rt_per_step = median([p["round_trips"] for p in steps_rt]) if steps_rt else None
    ub_count = max([len(p["per_ub"]) for p in steps_rt]) if steps_rt else 0
    if layers_known:
        layers, layers_source = layers_known, "manifest/event log"
    else:
        per_ub = [p["per_ub"].get("0", 0) for p in steps_rt]
        layers = median(per_ub) if per_ub else None
        layers_source = "a microbatch's round trips per step (median)"
    total_time = sum(r["time"] for r in all_rts)
    total_hidden = sum(r["hidden"] for r in all_rts)
    microbatched = ub_count >= 2
    comp_per_ub = median([p["compute_busy_us"] / p["round_trips"] for p in steps_rt]) if steps_rt else None
    comm_per_rt = median([p["comm_busy_us"] / p["round_trips"] for p in steps_rt]) if steps_rt else None
    step_per_rt = median([p["period_us"] / p["round_trips"] for p in steps_rt]) if steps_rt else None
    med_exposed = median([r["exposed"] for r in all_rts]) if all_rts else None
    crit_ratio = (comp_per_ub / med_exposed) if (microbatched and med_exposed) else None
    generic_ratio = (comp_per_ub / comm_per_rt) if (microbatched and comm_per_rt) else None
    return {
        "steps_with_round_trips": len(steps_rt),
        "modes": modes,
        "dbo_order_verified_steps": pattern_ok_steps,
        "microbatches": ub_count,
        "round_trips_total": len(all_rts),
        "unpaired": unpaired_total,
        "round_trips_per_step": r3(rt_per_step),
        "layers": r3(layers),
        "layers_source": layers_source,
        "round_trips_per_layer": r3(rt_per_step / layers) if (rt_per_step and layers) else None,
        "round_trip_median_us": r3(median([r["time"] for r in all_rts])) if all_rts else None,
        "round_trip_mean_us": r3(mean([r["time"] for r in all_rts])) if all_rts else None,
        "round_trip_hidden_median_us": r3(median([r["hidden"] for r in all_rts])) if all_rts else None,
        "round_trip_exposed_median_us": r3(med_exposed),
        "receive_kernel_median_us": r3(median([r["recv_dur"] for r in all_rts])) if all_rts else None,
        "hidden_share": r3(total_hidden / total_time) if (total_time > 0 and microbatched) else (0.0 if total_time > 0 else None),
        "hidden_share_per_step": [r3(p["hidden_share"]) for p in steps_rt],
        "hidden_share_per_step_median": r3(median([p["hidden_share"] for p in steps_rt if p["hidden_share"] is not None])) if steps_rt else None,
        "hidden_share_per_step_min": r3(min([p["hidden_share"] for p in steps_rt])) if steps_rt else None,
        "hidden_share_per_step_max": r3(max([p["hidden_share"] for p in steps_rt])) if steps_rt else None,
        "hidden_per_step_median_us": r3(median([p["hidden_sum_us"] for p in steps_rt])) if steps_rt else None,
        "compute_busy_per_step_median_us": r3(median([p["compute_busy_us"] for p in steps_rt])) if steps_rt else None,
        "comm_busy_per_step_median_us": r3(median([p["comm_busy_us"] for p in steps_rt])) if steps_rt else None,
        "per_round_trip_step_time_us": r3(step_per_rt),
        "comm_per_round_trip_us": r3(comm_per_rt),
        "compute_per_microbatch_us": r3(comp_per_ub),
        "criterion_generic_ratio": r3(generic_ratio),
        "criterion_generic_met": (generic_ratio >= 1) if generic_ratio is not None else None,
        "criterion_afd_ratio": r3(crit_ratio),
        "criterion_afd_met": (crit_ratio >= 1) if crit_ratio is not None else None,
        "per_step": [{k: (r3(v) if isinstance(v, float) else v) for k, v in p.items()} for p in per_step],
    }


def fig_operations(rank, steps):
    """Generic count ("Round trips and the DBO criterion"): runs of comm kernels with no compute
    launched between them; replayed kernels ordered by when they ran."""
    per_step = []
    for s in steps:
        ks = sorted([g for g in s["gpu"] if g["cls"] != "copy"], key=lambda g: (g["ts"], g["end"]))
        ops = 0
        in_run = False
        for g in ks:
            if g["cls"] == "comm":
                if not in_run:
                    ops += 1
                    in_run = True
            else:
                in_run = False
        if ops:
            per_step.append(ops)
    m = median(per_step) if per_step else None
    return {"operations_per_step_median": r3(m), "round_trips_per_step_median": r3(m / 2.0) if m else None}


def fig_step_overlap(steps):
    """Kernel-level overlap per step over the kernels it launched (comm under any compute)."""
    shares = []
    busy_t = hid_t = 0.0
    for s in steps:
        comm = union([(g["ts"], g["end"]) for g in s["gpu"] if g["cls"] == "comm"])
        comp = union([(g["ts"], g["end"]) for g in s["gpu"] if g["cls"] == "compute"])
        b = measure(comm)
        h = measure(intersect(comm, comp))
        busy_t += b
        hid_t += h
        if b > 0:
            shares.append(h / b)
    return {
        "kernel_hidden_fraction_per_step_median": r3(median(shares)) if shares else None,
        "kernel_hidden_fraction_per_step_max": r3(max(shares)) if shares else None,
        "kernel_hidden_fraction_steps_total": r3(hid_t / busy_t) if busy_t > 0 else None,
        "kernel_hidden_us_steps_total": r3(hid_t),
        # the generic per-kernel microbatch attribution ("Which microbatch") finds none in graph
        # replays (one cudaGraphLaunch launches both microbatches' kernels): null, see NOTES.md
        "kernel_hidden_under_other_ubatch": None,
    }


def fig_host_test(steps, host_idle_iv):
    steady = [s for s in steps if not s.get("stall")] or steps
    win = union([(s["win_start"], s["win_end"]) for s in steady])
    t = measure(win)
    h = measure(intersect(host_idle_iv, win))
    per_step = []
    for s in steady:
        w = s["win_end"] - s["win_start"]
        per_step.append(measure(clip(host_idle_iv, s["win_start"], s["win_end"])) / w if w > 0 else 0)
    return {"basis": "in-step (event-log steps)", "time_in_steps_us": r3(t), "in_step_host_idle_us": r3(h),
            "in_step_host_fraction": r3(h / t) if t > 0 else None,
            "host_bound": (h / t >= 0.5) if t > 0 else None,
            "per_step_host_fraction_median": r3(median(per_step))}


def fig_microbatch_evidence(logs, steps):
    ub_threads = 0
    paths = {}
    for header, rows in logs:
        for r in rows:
            if len(r) >= 5 and r[1] == "ub_run":
                ub_threads += 1
    for s in steps:
        paths[str(s["path"])] = paths.get(str(s["path"]), 0) + 1
    # microbatch threads inside the profiled steps
    return {"event_log_step_paths_in_profile": paths,
            "event_log_tokens": sorted(set(json.dumps(s["tokens"]) for s in steps)),
            "event_log_ub_run_records_whole_log": ub_threads}


def fig_ubthreads_in_steps(logs, steps, base_ns):
    n = 0
    for header, rows in logs:
        for r in rows:
            if len(r) >= 5 and r[1] in ("ub_wait", "ub_run", "yield", "resume", "stream"):
                t = (r[0] - base_ns) / 1000.0
                for s in steps:
                    if s["cpu_start"] <= t <= s["cpu_end"]:
                        n += 1
                        break
    return n


def fig_unprofiled(manifest, profiled_step_median_us):
    reps = [r for r in (manifest.get("repeats") or []) if (r.get("completed") or 0) >= 1]
    if not reps:
        return None
    dur = [float(r["duration_s"]) for r in reps if r.get("duration_s") is not None]
    tpot = [float(r["median_tpot_ms"]) for r in reps if r.get("median_tpot_ms") is not None]
    itl = [float(r["median_itl_ms"]) for r in reps if r.get("median_itl_ms") is not None]
    tps = [float(r["output_throughput"]) for r in reps if r.get("output_throughput") is not None]
    tpot_mean = mean(tpot)
    overhead = None
    if profiled_step_median_us is not None and tpot_mean:
        overhead = (profiled_step_median_us / 1000.0) / tpot_mean - 1
    return {
        "n": len(reps),
        "durations_s": [r3(x) for x in dur],
        "duration_mean_s": r3(mean(dur)),
        "duration_sd_s": r3(sample_sd(dur)),
        "tpot_median_ms_per_repeat": [r3(x) for x in tpot],
        "tpot_median_ms_mean": r3(tpot_mean),
        "tpot_median_ms_sd": r3(sample_sd(tpot)),
        "itl_median_ms_mean": r3(mean(itl)),
        "output_tok_s_mean": r3(mean(tps)),
        "profiled_step_median_ms": r3(profiled_step_median_us / 1000.0) if profiled_step_median_us else None,
        "profiler_overhead": r3(overhead),
        "profiler_overhead_vs_median_of_tpots": r3((profiled_step_median_us / 1000.0) / median(tpot) - 1)
        if (profiled_step_median_us and tpot) else None,
    }


# ----------------------------------------------------------------------------- driver

def attention_traces(bundle, manifest):
    roles = manifest.get("roles") or {}
    paths = []
    if roles:
        for name, r in roles.items():
            if r.get("peer"):
                continue
            for p in r.get("traces") or []:
                paths.append(os.path.join(bundle, p))
    if not paths:
        for p in manifest.get("traces") or []:
            paths.append(os.path.join(bundle, p))
    if not paths:
        paths = sorted(glob.glob(os.path.join(bundle, "traces", "*.json*")))
        paths = [p for p in paths if p.endswith(".json") or p.endswith(".json.gz")]
    return paths


def analyse_bundle(bundle):
    with open(os.path.join(bundle, "manifest.json")) as f:
        manifest = json.load(f)
    extra = [re.compile(x, re.IGNORECASE) for x in (manifest.get("comm_kernels") or [])]
    logs = []
    for p in manifest.get("events") or sorted(glob.glob(os.path.join(bundle, "events", "*.jsonl"))):
        path = p if os.path.isabs(p) else os.path.join(bundle, p)
        if os.path.exists(path):
            logs.append(load_event_log(path))
    layers_known = manifest.get("layers")
    if not layers_known:
        layer_ids = set()
        for _h, rows in logs:
            for r in rows:
                if len(r) >= 7 and r[1] == "layer":
                    layer_ids.add(r[6])
        layers_known = len(layer_ids) or None
    out = {"ranks": []}
    for tp in attention_traces(bundle, manifest):
        doc = load_trace(tp)
        rank = Rank(doc, extra)
        del doc
        base_ns = rank.base_ns
        res = {"trace": os.path.relpath(tp, bundle)}
        res["window"] = {k: r3(v) for k, v in fig_window(rank).items()}
        buckets, host_idle_iv, bucket_iv = fig_buckets(rank)
        res["buckets"] = {k: r3(v) for k, v in buckets.items()}
        steps = fig_steps(rank, logs, base_ns)
        res["stall_check"] = fig_stalls(rank, steps)
        res["steps"] = fig_step_times(steps)
        res["steps"]["per_step"] = [{
            "number": s["number"], "path": s["path"], "phase": s["phase"], "stall": s["stall"],
            "period_us": r3(s["period_us"]), "window_us": r3(s["window_us"]),
            "graph_launches": s["graph_launches"],
        } for s in steps]
        res["graphs"] = fig_graphs(rank, steps)
        sr, data = fig_sendrecv(rank, steps)
        res["sendrecv"] = sr
        res["round_trips"] = fig_round_trips(rank, steps, data, layers_known)
        res["generic_operations"] = fig_operations(rank, steps)
        res["kernel_overlap"] = fig_step_overlap(steps)
        res["host_test"] = fig_host_test(steps, host_idle_iv)
        res["step_buckets"] = fig_step_buckets(steps, bucket_iv)
        ev = fig_microbatch_evidence(logs, steps)
        ev["microbatch_thread_records_inside_profiled_steps"] = fig_ubthreads_in_steps(logs, steps, base_ns)
        ev["kernel_order_microbatches"] = res["round_trips"]["microbatches"]
        ev["microbatched"] = bool(res["round_trips"]["microbatches"] >= 2 or any(
            p in ("eager_microbatched", "graph_capture", "graph_replay")
            for p in ev["event_log_step_paths_in_profile"]))
        res["microbatch_evidence"] = ev
        decode = res["steps"]["phases"].get("decode")
        prof_med = None
        if decode and decode["median_period_us"] is not None:
            prof_med = decode["median_period_us"]
        else:
            prof_med = res["steps"]["median_period_us"]
        res["unprofiled"] = fig_unprofiled(manifest, prof_med)
        out["ranks"].append(res)
    out["gpu_sharing"] = manifest.get("gpu_sharing")
    out["peer_traces"] = sum(len(r.get("traces") or []) for r in (manifest.get("roles") or {}).values()
                             if r.get("peer"))
    return out


def main(argv):
    if not argv:
        print("usage: independent_afd.py BUNDLE_DIR [BUNDLE_DIR ...]", file=sys.stderr)
        return 2
    result = {}
    for b in argv:
        result[b] = analyse_bundle(b)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
