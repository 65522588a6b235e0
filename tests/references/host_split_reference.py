"""An independent computation of the host-time split, the kernel summary and the step-time spread.

Written from docs/analysis.md alone ("The accounting model", "Steps", "Which microbatch", "Host time:
what the CPU did while the GPU waited", "Summaries") and docs/report-schema.md, without reading the
package's implementation or its other references: json.load / gzip, dicts, lists, bisect and Python
loops, nothing from dbo_trace and no numpy.

What it covers (enough for the samples it is run on; anything else raises NotImplementedError rather
than guessing):
- one rank per trace file; a bundle folder's traces/ (one trace) and events/*.jsonl hook logs;
- steps from the hook event log's step_begin/step_end (placed on the trace clock by
  (t_ns - baseTimeNanoseconds) / 1000, docs/bundle-format.md), else vLLM's execute_* annotations,
  else ProfilerStep#N; steps that launched nothing are dropped;
- microbatches from the event log only (threads matched by native id, or through the "taken for"
  rule of "The threads followed"); the samples without a log have none.
"""

from __future__ import annotations

import bisect
import glob
import gzip
import json
import os
import re

LEGACY = {"Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset", "Runtime": "cuda_runtime", "Operator": "cpu_op"}
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
CALL_CATS = ("cuda_runtime", "cuda_driver")
OP_CATS = ("cpu_op", "python_function")
ANNOTATION_CATS = ("user_annotation",)
WINDOW_CATS = GPU_CATS + CALL_CATS + OP_CATS + ANNOTATION_CATS

VLLM_STEP = re.compile(r"^execute_(?:\d+_)?context_(\d+)\(.*\)_generation_(\d+)\(.*\)$")
PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")

KERNEL_LAUNCHES = {
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cuLaunchCooperativeKernel",
    "hipLaunchKernel",
    "hipExtLaunchKernel",
    "hipModuleLaunchKernel",
    "hipExtModuleLaunchKernel",
    "hipLaunchCooperativeKernel",
}  # plus cudaLaunchCooperativeKernel*
GRAPH_LAUNCHES = {"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"}
SYNCS = {
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cuStreamSynchronize",
    "cuCtxSynchronize",
    "cuEventSynchronize",
    "hipStreamSynchronize",
    "hipDeviceSynchronize",
    "hipEventSynchronize",
}

CAUSES = (
    "launch_calls",
    "synchronisation",
    "other_cuda_calls",
    "named",
    "cpu_ops",
    "ubatch_startup",
    "between_steps",
    "untraced",
)
KINDS = ("synchronisation", "launch_calls", "other_cuda_calls", "named", "cpu_ops")  # the order that decides


def plain_name(name):
    """cudaLaunchKernel_v7000 / _ptsz -> cudaLaunchKernel (nsys-style suffixes; Kineto has none)."""
    return re.sub(r"(_v\d+)?(_ptsz|_ptds)?$", "", name)


def call_kind(name):
    n = plain_name(name)
    if n in SYNCS:
        return "synchronisation"
    if re.match(r"^(cuda|cu|hip)Memcpy", n) and "Async" not in n:
        return "synchronisation"  # a blocking copy: the host waits on the GPU
    if n in KERNEL_LAUNCHES or n.startswith("cudaLaunchCooperativeKernel") or n in GRAPH_LAUNCHES:
        return "launch_calls"
    if re.match(r"^(cuda|cu|hip)Mem(cpy|set)", n):
        return "launch_calls"  # async copies and memsets are queued like kernels
    return "other_cuda_calls"


def is_marker(name):
    return bool(VLLM_STEP.match(name) or PROFILER_STEP.match(name) or name.startswith("dbo:"))


def load_trace(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as fh:
        doc = json.load(fh)
    raw = doc["traceEvents"] if isinstance(doc, dict) else doc
    base_ns = doc.get("baseTimeNanoseconds") if isinstance(doc, dict) else None
    events = []
    for e in raw:
        if e.get("ph") != "X" or "ts" not in e:
            continue
        cat = LEGACY.get(e.get("cat"), e.get("cat"))
        if cat not in WINDOW_CATS:
            continue
        ts = float(e["ts"])
        events.append(
            {
                "cat": cat,
                "name": str(e.get("name", "")),
                "ts": ts,
                "end": ts + float(e.get("dur", 0) or 0),
                "tid": e.get("tid"),
                "args": e.get("args") or {},
            }
        )
    return events, base_ns


def read_log(paths, base_ns):
    """Steps (start, end, path) and each microbatch's native thread id from the hook event logs, on
    the trace clock (us)."""
    if base_ns is None:
        raise NotImplementedError("an event log without the trace's baseTimeNanoseconds")
    steps = {}
    for p in paths:
        with open(p) as fh:
            lines = [json.loads(line) for line in fh if line.strip()]
        for rec in lines[1:]:
            t_ns, kind, _ident, native, ub, step = rec[:6]
            t = (t_ns - base_ns) / 1000.0
            if kind == "step_begin":
                steps[(p, step)] = {"start": t, "end": None, "path": (rec[6] or {}).get("path"), "ub_native": {}}
            elif kind == "step_end" and (p, step) in steps:
                steps[(p, step)]["end"] = t
            if ub is not None and ub >= 0 and (p, step) in steps:
                steps[(p, step)]["ub_native"][ub] = native
    out = [s for s in steps.values() if s["end"] is not None]
    out.sort(key=lambda s: s["start"])
    return out


def merged(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def runs_of(events):
    """Outermost runs: sorted by start, the longer first at a tie; an event starting at or after the
    end of every earlier one begins a new run, named by its first event. Returns (starts, runs)."""
    runs = []
    for e in sorted(events, key=lambda e: (e["ts"], -(e["end"] - e["ts"]))):
        if runs and e["ts"] < runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], e["end"])
        else:
            runs.append([e["ts"], e["end"], e["name"]])
    return [r[0] for r in runs], runs


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def linear_percentile(xs, q):
    """numpy's default ('linear', Hyndman-Fan type 7): rank h = (n - 1) q, interpolated."""
    xs = sorted(xs)
    h = (len(xs) - 1) * q / 100.0
    lo = int(h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


def trace_path(path):
    if os.path.isdir(path):
        found = sorted(glob.glob(os.path.join(path, "traces", "*.json*")))
        if len(found) != 1:
            raise NotImplementedError(f"{path}: one trace expected, found {len(found)}")
        logs = sorted(glob.glob(os.path.join(path, "events", "*.jsonl")))
        return found[0], logs
    return path, []


def compute(path, unreported_steps_are_steps=False):
    """The figures of one trace (or bundle). unreported_steps_are_steps: count the CPU windows of steps
    that launched nothing as step windows for between_steps (the docs leave this open; see the test)."""
    tpath, logs = trace_path(path)
    events, base_ns = load_trace(tpath)
    window = (min(e["ts"] for e in events), max(e["end"] for e in events))
    gpu = [e for e in events if e["cat"] in GPU_CATS]
    calls = [e for e in events if e["cat"] in CALL_CATS]
    call_of = {c["args"]["correlation"]: c for c in calls if "correlation" in c["args"]}

    def launch(g):
        return call_of.get(g["args"].get("correlation"))

    # --- threads: the main thread, and threads "taken for" the one whose calls their operators hold.
    calls_by_tid = {}
    for c in calls:
        calls_by_tid.setdefault(c["tid"], []).append(c)
    main_tid = sorted(calls_by_tid, key=lambda t: (-len(calls_by_tid[t]), t))[0]  # tie: lowest id (docs silent)
    ops_by_tid = {}
    for e in events:
        if e["cat"] in OP_CATS:
            ops_by_tid.setdefault(e["tid"], []).append(e)
    call_starts = sorted((c["ts"], c["tid"]) for c in calls)
    taken_for = {}
    for tid, ops in ops_by_tid.items():
        if tid in calls_by_tid:
            continue
        held = {}
        for s, e in merged([(o["ts"], o["end"]) for o in ops]):
            i = bisect.bisect_left(call_starts, (s, float("-inf")))
            while i < len(call_starts) and call_starts[i][0] < e:
                held[call_starts[i][1]] = held.get(call_starts[i][1], 0) + 1
                i += 1
        if held:
            taken_for[tid] = sorted(held, key=lambda t: (-held[t], t))[0]

    def canon(tid):
        return taken_for.get(tid, tid)

    # --- per thread, per kind: outermost runs.
    by_kind = {}
    for e in events:
        if e["cat"] in CALL_CATS:
            kind = call_kind(e["name"])
        elif e["cat"] in OP_CATS:
            kind = "cpu_ops"
        elif e["cat"] in ANNOTATION_CATS and not is_marker(e["name"]):
            kind = "named"
        else:
            continue
        by_kind.setdefault((canon(e["tid"]), kind), []).append(e)
    runs = {key: runs_of(evs) for key, evs in by_kind.items()}

    # --- steps.
    log_steps = read_log(logs, base_ns) if logs else []
    annotations = [e for e in events if e["cat"] in ANNOTATION_CATS]
    vllm_marks = sorted((e for e in annotations if VLLM_STEP.match(e["name"])), key=lambda e: e["ts"])
    if log_steps:
        source = "event log"
        steps = [{"start": s["start"], "end": s["end"], "path": s["path"], "ub_native": s["ub_native"]} for s in log_steps]
    elif vllm_marks:
        source = "vllm"
        steps = [{"start": m["ts"], "end": m["end"], "name": m["name"]} for m in vllm_marks]
    else:
        marks = sorted((e for e in annotations if PROFILER_STEP.match(e["name"])), key=lambda e: e["ts"])
        if not marks:
            raise NotImplementedError(f"{path}: no step markers")
        source = "ProfilerStep"
        steps = [{"start": m["ts"], "end": m["end"], "name": m["name"]} for m in marks]
    for s in steps:  # the phase of the vLLM annotation holding the step's start
        s["phase"] = None
        for m in vllm_marks:
            if m["ts"] <= s["start"] <= m["end"]:
                v = VLLM_STEP.match(m["name"])
                n, g = int(v.group(1)), int(v.group(2))
                s["phase"] = "mixed" if n and g else "prefill" if n else "decode" if g else None
                break
        s["own"] = []
    starts = [s["start"] for s in steps]

    def step_of_time(t):
        """The step whose CPU window holds t (the steps' windows do not overlap on these samples)."""
        i = bisect.bisect_right(starts, t) - 1
        if i >= 0 and steps[i]["start"] <= t <= steps[i]["end"]:
            return steps[i]
        return None

    for g in gpu:
        c = launch(g)
        if c is not None:
            s = step_of_time(c["ts"])
            if s is not None:
                s["own"].append(g)
    all_cpu_windows = [(s["start"], s["end"]) for s in steps]
    steps = [s for s in steps if s["own"]]  # steps that launched nothing are not reported
    for s in steps:
        s["window_end"] = max(s["end"], max(g["end"] for g in s["own"]))
    # A step's time is its period (docs/analysis.md, "Step time: period and window"): from its start
    # to the next step's start; the last step's is its window.
    by_start = sorted(steps, key=lambda s: s["start"])
    for k, s in enumerate(by_start):
        last = k + 1 == len(by_start)
        s["step_us"] = (s["window_end"] if last else by_start[k + 1]["start"]) - s["start"]
    starts = [s["start"] for s in steps]

    # --- microbatch threads per step (event log only), and start-up windows.
    startup = []
    for s in steps:
        s["ub_tids"] = []
        if source != "event log" or s.get("path") != "eager_microbatched":
            continue
        for ub in sorted(s["ub_native"]):
            tid = canon(s["ub_native"][ub])
            if tid not in calls_by_tid:
                raise NotImplementedError(f"{path}: microbatch thread {s['ub_native'][ub]} matched by neither rule")
            if tid not in s["ub_tids"]:
                s["ub_tids"].append(tid)
        firsts = []
        for tid in s["ub_tids"]:
            mine = [c["ts"] for c in calls_by_tid[tid] if s["start"] <= c["ts"] <= s["end"]]
            if mine:
                firsts.append(min(mine))
        if firsts:
            startup.append((s["start"], max(firsts)))

    # --- host-idle stretches: GPU idle, ended by an activity launched after the stretch began, or the tail.
    earliest = {}  # start time -> the activity starting there whose launch began earliest
    for g in gpu:
        c = launch(g)
        if c is not None and (g["ts"] not in earliest or c["ts"] < launch(earliest[g["ts"]])["ts"]):
            earliest[g["ts"]] = g
    stretches = []  # (start, end, ending activity or None)
    busy_until = window[0]
    for g in sorted(gpu, key=lambda g: g["ts"]):
        if g["ts"] > busy_until:
            ender = earliest.get(g["ts"])
            if ender is not None and launch(ender)["ts"] > busy_until:
                stretches.append((busy_until, g["ts"], ender))
        busy_until = max(busy_until, g["end"])
    if window[1] > busy_until:
        stretches.append((busy_until, window[1], None))

    step_wins = merged(all_cpu_windows if unreported_steps_are_steps else [(s["start"], s["end"]) for s in steps])
    causes = dict.fromkeys(CAUSES, 0.0)
    names = {"named": {}, "cpu_ops": {}}

    startup = merged(startup)
    startup_starts = [lo for lo, _ in startup]
    step_win_starts = [lo for lo, _ in step_wins]

    def inside(starts_, intervals, x):
        """x in one of the sorted, disjoint intervals."""
        i = bisect.bisect_right(starts_, x) - 1
        return i >= 0 and intervals[i][0] <= x < intervals[i][1]

    def covering_run(key, x):
        r = runs.get(key)
        if r is None:
            return None
        i = bisect.bisect_right(r[0], x) - 1
        if i >= 0 and r[1][i][0] <= x < r[1][i][1]:
            return r[1][i]
        return None

    for a, b, ender in stretches:
        if ender is None:
            followed = [main_tid]
        else:
            c = launch(ender)
            followed = [canon(c["tid"])]
            s = step_of_time(c["ts"])
            if s is not None and s in steps:
                followed += [t for t in s.get("ub_tids", []) if t not in followed]
        cuts = {a, b}
        for tid in followed:
            for kind in KINDS:
                r = runs.get((tid, kind))
                if r is None:
                    continue
                i = max(bisect.bisect_right(r[0], a) - 1, 0)
                while i < len(r[1]) and r[1][i][0] < b:
                    for x in r[1][i][:2]:
                        if a < x < b:
                            cuts.add(x)
                    i += 1
        for lo, hi in startup + [tuple(w) for w in step_wins]:
            for x in (lo, hi):
                if a < x < b:
                    cuts.add(x)
        cuts = sorted(cuts)
        for x, y in zip(cuts, cuts[1:]):
            mid = (x + y) / 2
            decided = None
            for tid in followed:
                for kind in KINDS:
                    run = covering_run((tid, kind), mid)
                    if run is not None:
                        decided = (kind, run[2])
                        break
                if decided:
                    break
            if decided:
                kind, name = decided
                causes[kind] += y - x
                if kind in names:
                    names[kind][name] = names[kind].get(name, 0.0) + (y - x)
            elif inside(startup_starts, startup, mid):
                causes["ubatch_startup"] += y - x
            elif not inside(step_win_starts, step_wins, mid):
                causes["between_steps"] += y - x
            else:
                causes["untraced"] += y - x

    host_idle = sum(b - a for a, b, _ in stretches)

    # --- kernel summary (memcpy and memset left out).
    by_name = {}
    for g in gpu:
        if g["cat"] == "kernel":
            by_name.setdefault(g["name"], []).append(g["end"] - g["ts"])
    all_kernels = sum(sum(v) for v in by_name.values())
    kernel_rows = {
        n: {
            "count": len(d),
            "total_us": sum(d),
            "mean_us": sum(d) / len(d),
            "median_us": median(d),
            "min_us": min(d),
            "max_us": max(d),
            "share": sum(d) / all_kernels,
        }
        for n, d in by_name.items()
    }

    # --- step time per phase.
    spread = {}
    for ph in ("prefill", "decode", "mixed"):
        xs = [s["step_us"] for s in steps if s["phase"] == ph]
        if xs:
            spread[ph] = {
                "steps": len(xs),
                "median": median(xs),
                "p90": linear_percentile(xs, 90),
                "p99": linear_percentile(xs, 99),
                "max": max(xs),
            }

    return {
        "window_us": window[1] - window[0],
        "host_idle_us": host_idle,
        "causes": causes,
        "shares": {k: (v / host_idle if host_idle else 0.0) for k, v in causes.items()},
        "names": names,
        "steps_source": source,
        "steps": len(steps),
        "main_tid": main_tid,
        "kernel_rows": kernel_rows,
        "kernel_total_us": all_kernels,
        "step_spread": spread,
    }
