# Written by a helper who had not read dbo-trace's code (tests/references/README.md), from docs/analysis.md
# and docs/report-schema.md alone, for schema version 10's launch figures; checked on 13 real traces.
"""Independent reference for dbo-trace schema v10 figures: clocks.lag_median_us,
launch_delay.last_us, launch_delay.window_us. Plain json/gzip only.
Definitions from docs/analysis.md:
  launched activity: GPU activity (kernel/memcpy/memset) whose launch call (CUDA/HIP runtime or
    driver call with the same correlation id) is in the trace.
  lag = activity start - launch call start  (clocks)
  delay = activity start - launch call end  (launch_delay; a graph replay's kernels apart)
  window = first event start .. last event end (CPU op, annotation, python function, runtime/driver
    call, GPU activity)
Prints several variants so definitional choices can be seen."""
import json, gzip, sys, statistics, os, glob

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
API_CATS = {"cuda_runtime", "cuda_driver", "Runtime", "Driver"}
CPU_CATS = {"cpu_op", "user_annotation", "python_function", "Operator", "cpu_instant_event"}
GRAPH = {"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch", "cudaGraphLaunch_v10000"}

def load(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        d = json.load(f)
    return d["traceEvents"] if isinstance(d, dict) else d

def corr(e):
    a = e.get("args") or {}
    return a.get("correlation", a.get("correlation id"))

def median(xs):
    return statistics.median(xs) if xs else None

def analyse(events, shift=0.0):
    gpu, api = [], {}
    win_ev = []
    for e in events:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat")
        ts = float(e["ts"]); dur = float(e.get("dur", 0) or 0)
        if cat in GPU_CATS:
            gpu.append((ts + shift, ts + shift + dur, corr(e), cat, e.get("name")))
            win_ev.append((ts + shift, ts + shift + dur, "gpu"))
        elif cat in API_CATS:
            c = corr(e)
            if c is not None:
                api.setdefault(c, (ts, ts + dur, e.get("name")))
            win_ev.append((ts, ts + dur, "api"))
        elif cat in CPU_CATS:
            win_ev.append((ts, ts + dur, "cpu"))
        elif cat == "gpu_user_annotation":
            win_ev.append((ts + shift, ts + shift + dur, "gpuann"))
    launched = []
    for s, en, c, cat, name in gpu:
        if c is None or c not in api:
            continue
        ls, le, lname = api[c]
        launched.append(dict(start=s, end=en, ls=ls, le=le, graph=lname in GRAPH, lname=lname))
    r = {"n_gpu": len(gpu), "n_launched": len(launched)}
    nong = [a for a in launched if not a["graph"]]
    r["lag_median_all"] = median([a["start"] - a["ls"] for a in launched])
    r["lag_median_nograph"] = median([a["start"] - a["ls"] for a in nong])
    # last launched activity: by start (ties: later launch end? keep the first max)
    def last(xs, key):
        if not xs: return None
        a = max(xs, key=key)
        return a["start"] - a["le"]
    r["last_delay_nograph_bystart"] = last(nong, lambda a: (a["start"], a["le"]))
    r["last_delay_nograph_bylaunch"] = last(nong, lambda a: (a["ls"], a["start"]))
    r["last_delay_all_bystart"] = last(launched, lambda a: (a["start"], a["le"]))
    r["delay_median_nograph"] = median([a["start"] - a["le"] for a in nong])
    def win(kinds):
        xs = [w for w in win_ev if w[2] in kinds]
        return max(w[1] for w in xs) - min(w[0] for w in xs) if xs else None
    r["window"] = win({"gpu", "api", "cpu", "gpuann"})
    r["window_no_gpuann"] = win({"gpu", "api", "cpu"})
    return r

if __name__ == "__main__":
    shift = 0.0
    args = sys.argv[1:]
    if args and args[0].startswith("--shift="):
        shift = float(args[0].split("=", 1)[1]); args = args[1:]
    for p in args:
        print(json.dumps({"file": p, **analyse(load(p), shift)}))
