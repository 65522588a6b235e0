"""An independent, deliberately plain computation of the headline numbers from a raw trace.

json.load, dicts, lists and Python loops: nothing shared with dbo_trace's numpy code. It follows
the definitions of docs/analysis.md ("The accounting model") word by word:
- the window runs from the first event (CPU op, annotation, Python function, CUDA/HIP call, GPU
  activity) to the last one's end;
- GPU busy is the union of all GPU activity; utilization = busy / window;
- comm hidden = time covered by comm kernels and compute kernels at once / time covered by comm;
- host idle: every GPU idle stretch inside the window (the lead-in, the gaps, the tail) whose next
  activity's launch call began after the stretch began, or that nothing follows, up to 20 us after
  that launch call ended (the rest the work was launched and waited: not the host);
- steps: vLLM's execute_* annotations, else ProfilerStep#N; a step's window runs from its
  annotation's start to the later of its end and the end of the last GPU activity launched in it;
  in-step host idle = host idle inside the union of the step windows / that union's length.
"""

from __future__ import annotations

import gzip
import json
import re

LEGACY = {"Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset", "Runtime": "cuda_runtime", "Operator": "cpu_op"}
GPU = ("kernel", "gpu_memcpy", "gpu_memset")
CALLS = ("cuda_runtime", "cuda_driver")
CPU = ("cpu_op", "user_annotation", "python_function")
GRAPH_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch")
VLLM_STEP = re.compile(r"^execute_(?:\d+_)?context_(\d+)\(.*\)_generation_(\d+)\(.*\)$")
PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")


def load(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def events_of(path):
    out = []
    doc = load(path)
    for e in doc["traceEvents"] if isinstance(doc, dict) else doc:  # or the JSON Array format
        if e.get("ph") != "X" or "ts" not in e:
            continue
        cat = LEGACY.get(e.get("cat"), e.get("cat"))
        if cat in GPU + CALLS + CPU:
            out.append(dict(e, cat=cat, end=e["ts"] + e.get("dur", 0)))
    return out


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


# docs/analysis.md, "Steady state and stalls": compile and JIT ranges by name
COMPILE_NAMES = (
    "entire_frame_compile", "backend_compile", "inductor_compile", "compile_fx", "async_compile", "autotun",
    "benchmark_all_configs", "triton.compile", "triton_compile", "compile_inner",
)  # fmt: skip
CAPTURE_BEGIN = ("cudaStreamBeginCapture", "cuStreamBeginCapture", "hipStreamBeginCapture")
CAPTURE_END = ("cudaStreamEndCapture", "cuStreamEndCapture", "hipStreamEndCapture")


def is_compile(name):
    low = name.lower()
    return low == "dynamo" or low.endswith("(dynamo_timed)") or any(n in low for n in COMPILE_NAMES)


def capture_windows(events):
    """Per thread, from a begin-capture call while none is open to the end-capture that closes the last."""
    out, depth, opened = [], {}, {}
    for e in sorted((e for e in events if e["cat"] in CALLS), key=lambda e: e["ts"]):
        base = e["name"].split("_v")[0].split("_ptsz")[0]
        tid = e.get("tid")
        if base in CAPTURE_BEGIN:
            if depth.get(tid, 0) == 0:
                opened[tid] = e["ts"]
            depth[tid] = depth.get(tid, 0) + 1
        elif base in CAPTURE_END and depth.get(tid, 0) > 0:
            depth[tid] -= 1
            if depth[tid] == 0:
                out.append((opened.pop(tid), e["end"]))
    return out


def median_of(values):
    v = sorted(values)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def mark_stalls(steps):
    """Each step's "stall": "compile", "graph capture", "outlier" or None (docs' thresholds)."""
    for s in steps:
        floor = max(1000.0, 0.05 * s["period"])
        s["stall"] = "compile" if s["compile"] >= floor else "graph capture" if s["capture"] >= floor else None
    for name in dict.fromkeys(s["phase"] for s in steps):
        rest = [s for s in steps if s["phase"] == name and not s["stall"]]
        if len(rest) == 3:  # each against the median of the other two: ten times beyond it
            for s in rest:
                if s["period"] > 10 * median_of([o["period"] for o in rest if o is not s]):
                    s["stall"] = "outlier"
        if len(rest) < 4:
            continue
        med = median_of([s["period"] for s in rest])
        mad = 1.4826 * median_of([abs(s["period"] - med) for s in rest])
        for s in rest:
            if s["period"] > med + 3.5 * mad and s["period"] > 2.0 * med:
                s["stall"] = "outlier"


def phase(ctx, gen):
    return "mixed" if ctx and gen else "prefill" if ctx else "decode" if gen else None


def headline(path, comm_regex):
    return headline_of_events(events_of(path), comm_regex)


def headline_of_events(events, comm_regex):
    """headline() over events already in Kineto's shape (dicts with cat, name, ts, end, args)."""
    rx = re.compile(comm_regex, re.IGNORECASE)
    window = (min(e["ts"] for e in events), max(e["end"] for e in events))
    launch = {}
    graph_corr = set()
    for e in events:
        if e["cat"] in CALLS and "correlation" in e.get("args", {}):
            launch[e["args"]["correlation"]] = e
            if e["name"] in GRAPH_LAUNCHES:
                graph_corr.add(e["args"]["correlation"])
    gpu = [e for e in events if e["cat"] in GPU]
    kernels = [e for e in gpu if e["cat"] == "kernel"]
    comm = [(k["ts"], k["end"]) for k in kernels if rx.search(k["name"])]
    compute = [(k["ts"], k["end"]) for k in kernels if not rx.search(k["name"])]

    # Host idle: walk the GPU timeline in start order from the window's start. What ends a gap is
    # the earliest known launch among the activities that start when the gap ends.
    earliest_launch, earliest_end = {}, {}
    for g in gpu:
        call = launch.get(g.get("args", {}).get("correlation"))
        if call is not None:
            earliest_launch[g["ts"]] = min(earliest_launch.get(g["ts"], call["ts"]), call["ts"])
            earliest_end[g["ts"]] = min(earliest_end.get(g["ts"], call["end"]), call["end"])
    host_idle = []
    busy_until = window[0]
    for g in sorted(gpu, key=lambda g: g["ts"]):
        if g["ts"] > busy_until:
            launched = earliest_launch.get(g["ts"])
            if launched is not None and launched > busy_until:
                host_idle.append((busy_until, min(g["ts"], max(busy_until, earliest_end[g["ts"]] + 20.0))))
        busy_until = max(busy_until, g["end"])
    if window[1] > busy_until:
        host_idle.append((busy_until, window[1]))  # the tail: nothing more was queued

    # Steps.
    annotations = [e for e in events if e["cat"] in CPU]
    marks = [e for e in annotations if VLLM_STEP.match(e["name"])] or [e for e in annotations if PROFILER_STEP.match(e["name"])]
    marks.sort(key=lambda e: e["ts"])
    steps = []
    for m in marks:
        own = [
            g
            for g in gpu
            if (c := launch.get(g.get("args", {}).get("correlation"))) is not None and m["ts"] <= c["ts"] <= m["end"]
        ]
        if not own:
            continue  # a step that launched nothing is not reported
        v = VLLM_STEP.match(m["name"])
        steps.append(
            dict(
                start=m["ts"],
                end=max(m["end"], max(g["end"] for g in own)),
                phase=phase(int(v.group(1)), int(v.group(2))) if v else None,
                own=own,
            )
        )
    step_windows = [(s["start"], s["end"]) for s in steps]
    in_steps = covered(step_windows)

    # Periods and stalls (docs/analysis.md, "Step time: period and window", "Steady state and stalls").
    compiling = [(e["ts"], e["end"]) for e in annotations if is_compile(e["name"])]
    capturing = capture_windows(events)
    for k, s in enumerate(steps):  # steps are in start order
        nxt = steps[k + 1]["start"] if k + 1 < len(steps) else float("inf")
        s["period"] = nxt - s["start"] if k + 1 < len(steps) else s["end"] - s["start"]
        own = [(s["start"], min(nxt, s["end"]))]
        s["compile"] = both(own, compiling) if compiling else 0.0
        s["capture"] = both(own, capturing) if capturing else 0.0
    mark_stalls(steps)
    steady = [s for s in steps if not s["stall"]] or steps
    steady_windows = [(s["start"], s["end"]) for s in steady]

    def phase_figures(name):
        every = [s for s in steps if s["phase"] == name]
        if not every:
            return None
        mine = [s for s in every if not s["stall"]] or every  # the phase's steady steps
        wins = [(s["start"], s["end"]) for s in mine]
        span = covered(wins)
        busy = both(wins, [(g["ts"], g["end"]) for g in gpu])
        own_k = [g for s in mine for g in s["own"] if g["cat"] == "kernel"]
        p_comm = [(k["ts"], k["end"]) for k in own_k if rx.search(k["name"])]
        p_compute = [(k["ts"], k["end"]) for k in own_k if not rx.search(k["name"])]
        median = median_of([s["period"] for s in mine])
        return dict(
            steady_span=span,
            steps=len(every),
            stalls=sum(1 for s in every if s["stall"]),
            median_step_us=median,
            gpu_utilization=busy / span,
            host_idle_fraction=both(wins, host_idle) / span,
            comm_hidden_fraction=both(p_comm, p_compute) / covered(p_comm) if p_comm else None,
        )

    return dict(
        window=window[1] - window[0],
        busy=covered([(g["ts"], g["end"]) for g in gpu]),
        comm=covered(comm),
        hidden=both(comm, compute),
        host_idle=covered(host_idle),
        host_idle_in_steps=both(host_idle, step_windows),
        in_steps=in_steps,
        host_idle_in_steady=both(host_idle, steady_windows),
        in_steady=covered(steady_windows),
        periods=[s["period"] for s in steps],
        stalls=[s["stall"] for s in steps],
        kernels=len(kernels),
        comm_kernels=len(comm),
        graph_launches=len(graph_corr),
        replayed=sum(1 for k in kernels if k.get("args", {}).get("correlation") in graph_corr),
        steps=len(steps),
        phases={p: f for p in ("prefill", "decode", "mixed") if (f := phase_figures(p)) is not None},
    )


def held_back(path, comm_regex):
    """Comm kernels held back past the other microbatch's compute (docs/analysis.md, "Held-back
    communication"), by the definition, in plain loops. The microbatch of a kernel is the thread
    that launched it (the log is not read here); a kernel counts where a *LaunchKernel call launched it.

    Returns {cause: (kernels, total delay us)} and the total number of comm kernels examined."""
    rx = re.compile(comm_regex, re.IGNORECASE)
    events = events_of(path)
    calls = {e["args"]["correlation"]: e for e in events if e["cat"] in CALLS and "correlation" in e.get("args", {})}
    gpu = []
    for e in events:
        if e["cat"] not in GPU:
            continue
        call = calls.get(e.get("args", {}).get("correlation"))
        launched = call is not None and "LaunchKernel" in call["name"]
        gpu.append(
            {
                "start": e["ts"],
                "end": e["end"],
                "stream": e.get("args", {}).get("stream", e["tid"]),
                "comm": e["cat"] == "kernel" and bool(rx.search(e["name"])),
                "compute": e["cat"] == "kernel" and not rx.search(e["name"]),
                "call": call if launched else None,
            }
        )
    thread_calls = {}
    for call in calls.values():
        thread_calls.setdefault(call["tid"], []).append(call)
    result, examined = {}, 0
    for k in gpu:
        if not (k["comm"] and k["call"]):
            continue
        examined += 1
        me, launched_at = k["call"]["tid"], k["call"]["ts"]
        ready = k["call"]["end"]
        for o in gpu:
            if o["stream"] == k["stream"] and o["start"] < k["start"]:
                ready = max(ready, o["end"])
        own = [o for o in gpu if o["compute"] and o["call"] and o["call"]["tid"] == me and o["call"]["ts"] < launched_at]
        if own:
            ready = max(ready, max(own, key=lambda o: o["call"]["ts"])["end"])
        delay = k["start"] - ready
        if delay < 20.0:
            continue
        holders = [
            o
            for o in gpu
            if o["compute"]
            and o["call"]
            and o["call"]["tid"] != me
            and o["start"] <= ready + 25.0
            and o["end"] > ready
            and o["end"] - max(10.0, 0.1 * (o["end"] - o["start"])) <= k["start"] <= o["end"] + 25.0
        ]
        if not holders:
            continue
        h = min(holders, key=lambda o: o["end"])
        if k["start"] < h["end"] - 1.0 or h["call"]["ts"] > launched_at:
            cause = "crowded"
        else:
            mine = sorted(thread_calls[me], key=lambda c: c["ts"])
            record = next(
                (c for c in mine if c["name"].startswith("cudaEventRecord") and h["call"]["ts"] < c["ts"] < launched_at), None
            )
            waited = record is not None and any(
                c["name"] == "cudaStreamWaitEvent" and record["ts"] < c["ts"] < launched_at for c in mine
            )
            cause = "late_record" if waited else "held"
        n, total = result.get(cause, (0, 0.0))
        result[cause] = (n + 1, total + delay)
    return result, examined
