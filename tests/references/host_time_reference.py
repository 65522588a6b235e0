"""An independent, plain computation of the host-time causes (docs/analysis.md, "Host time").

json.load, dicts, lists, bisect and Python loops; nothing shared with dbo_trace. Over the whole
profiled window of one trace it returns {cause: us} and the host-idle total. Written from the
docs' text:
- host-idle stretches: GPU idle stretches in the window whose next activity (the earliest-launched
  of those starting when the stretch ends) was launched after the stretch began, and the tail;
- the thread followed: that activity's launching call's thread, else the thread with the most
  CUDA calls; then, in a step where microbatch threads launched, the step's other microbatch threads;
- per instant, the first followed thread inside a CUDA call, a named range or a CPU operator
  decides, innermost kind first (sync, launch, other call, named, operator); else start-up window,
  between steps (outside every step marker), untraced.
A thread with CPU operators and no CUDA call is the thread whose calls its operators hold most.
Microbatch threads are taken as docs "Which microbatch" rule 4 finds them (two threads other than
the step marker's thread launching kernels in the step, at least 2 launches each, within a factor
of 4), in order of first launch: on the samples that is what the event log says too.
"""

from __future__ import annotations

import bisect
import re

from headline_reference import CALLS, CPU, GPU, events_of

SYNC_NAMES = {
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cuStreamSynchronize",
    "cuCtxSynchronize", "cuEventSynchronize", "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize",
}  # fmt: skip
KERNEL_LAUNCHES = {
    "hipLaunchKernel", "hipExtLaunchKernel", "hipModuleLaunchKernel", "hipExtModuleLaunchKernel",
    "hipLaunchCooperativeKernel", "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
    "cudaLaunchCooperativeKernelMultiDevice", "cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel",
}  # fmt: skip
GRAPH_LAUNCHES = {"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"}
COPIES = ("cudaMemcpy", "cudaMemset", "cuMemcpy", "cuMemset", "hipMemcpy", "hipMemset")
VLLM_STEP = re.compile(r"^execute_(\d+_)?context_\d+\(.*\)_generation_\d+\(.*\)$", re.S)
PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")
HOOK_STEP = re.compile(r"^dbo:step#")
CAUSES = (
    "synchronisation", "launch_calls", "other_cuda_calls", "named", "cpu_ops", "ubatch_startup", "between_steps", "untraced"
)  # fmt: skip


def call_kind(name):
    if name in SYNC_NAMES or (name.startswith(("cudaMemcpy", "cuMemcpy", "hipMemcpy")) and "Async" not in name):
        return "synchronisation"
    if name in KERNEL_LAUNCHES or name in GRAPH_LAUNCHES or name.startswith(COPIES):
        return "launch_calls"
    return "other_cuda_calls"


def is_marker(name):
    return bool(VLLM_STEP.match(name) or PROFILER_STEP.match(name) or name.startswith("dbo:"))


def is_operator(e):
    return e["cat"] != "user_annotation" and not e["name"].startswith("gpu_model_runner: ") and not is_marker(e["name"])


def runs(events):
    """Outermost runs: [start, end, name] of the first event of each run (docs' rule)."""
    out = []
    for e in sorted(events, key=lambda e: (e["ts"], -e["end"])):
        if out and e["ts"] < out[-1][1]:
            out[-1][1] = max(out[-1][1], e["end"])
        else:
            out.append([e["ts"], e["end"], e["name"]])
    return [r for r in out if r[1] > r[0]]


def merge(pairs):
    out = []
    for s, e in sorted(pairs):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [r for r in out if r[1] > r[0]]


def find(layer, t):
    """The run of a sorted disjoint list holding instant t, or None."""
    i = bisect.bisect_right(layer.starts, t) - 1
    if i >= 0 and layer.items[i][0] <= t < layer.items[i][1]:
        return layer.items[i]
    return None


class Layer:
    def __init__(self, items):
        self.items = items
        self.starts = [r[0] for r in items]


def host_causes(path):
    events = events_of(path)
    window = (min(e["ts"] for e in events), max(e["end"] for e in events))
    calls = [e for e in events if e["cat"] in CALLS]
    by_corr = {e["args"]["correlation"]: e for e in calls if "correlation" in e.get("args", {})}
    gpu = [e for e in events if e["cat"] in GPU]

    # Host-idle stretches and the launching call of the activity that ends each.
    first_at = {}
    for g in gpu:
        call = by_corr.get(g.get("args", {}).get("correlation"))
        if call is not None and (g["ts"] not in first_at or call["ts"] < first_at[g["ts"]]["ts"]):
            first_at[g["ts"]] = call
    stretches = []  # (start, end, launching call or None)
    busy_until = window[0]
    for g in sorted(gpu, key=lambda g: g["ts"]):
        if g["ts"] > busy_until:
            call = first_at.get(g["ts"])
            if call is not None and call["ts"] > busy_until:
                stretches.append((busy_until, g["ts"], call))
        busy_until = max(busy_until, g["end"])
    if window[1] > busy_until:
        stretches.append((busy_until, window[1], None))

    count = {}
    for c in calls:
        count[c["tid"]] = count.get(c["tid"], 0) + 1
    main = max(count, key=lambda t: count[t]) if count else None

    # Steps: vLLM's annotations, else the hooks' dbo:step# ranges, else ProfilerStep#N.
    cpu = [e for e in events if e["cat"] in CPU]
    marks = [e for e in cpu if VLLM_STEP.match(e["name"])] or [e for e in cpu if HOOK_STEP.match(e["name"])]
    marks = marks or [e for e in cpu if PROFILER_STEP.match(e["name"])]
    marks.sort(key=lambda e: e["ts"])
    steps = Layer([[m["ts"], m["end"], i] for i, m in enumerate(marks)])

    def step_of(t):
        r = find(steps, t)
        return None if r is None else r[2]

    # Microbatch threads per step (rule 4), and the start-up windows.
    ub_threads, startup = {}, []
    for i, m in enumerate(marks):
        first, n = {}, {}
        for c in calls:
            if m["ts"] <= c["ts"] <= m["end"] and c["tid"] != m["tid"] and c["name"] in KERNEL_LAUNCHES:
                n[c["tid"]] = n.get(c["tid"], 0) + 1
                first[c["tid"]] = min(first.get(c["tid"], c["ts"]), c["ts"])
        if len(n) == 2 and min(n.values()) >= 2 and max(n.values()) <= 4 * min(n.values()):
            ub_threads[i] = sorted(n, key=lambda t: first[t])
            firsts = []
            for t in ub_threads[i]:  # the first CUDA call of any kind in the step
                firsts.append(min(c["ts"] for c in calls if c["tid"] == t and m["ts"] <= c["ts"] <= m["end"]))
            end = min(max(firsts), m["end"])
            if end > m["ts"]:
                startup.append([m["ts"], end])
    startup_layer = Layer(merge(startup))

    # A thread with CPU operators and no CUDA call is the thread whose calls its operators hold most.
    calling = {c["tid"] for c in calls}
    alias = {}
    for tid in {e["tid"] for e in cpu if e["cat"] != "user_annotation"} - calling:
        mine = Layer(runs([e for e in cpu if e["tid"] == tid and is_operator(e)]))
        held = {}
        for c in calls:
            if find(mine, c["ts"]) is not None:
                held[c["tid"]] = held.get(c["tid"], 0) + 1
        if held:
            alias[tid] = min(held, key=lambda t: (-held[t], t))
    for e in cpu:
        e["tid"] = alias.get(e["tid"], e["tid"])

    layers_of = {}

    def layers(tid):
        if tid not in layers_of:
            mine = [c for c in calls if c["tid"] == tid]
            out = []
            for kind in ("synchronisation", "launch_calls", "other_cuda_calls"):
                spans = merge([(c["ts"], c["end"]) for c in mine if call_kind(c["name"]) == kind])
                out.append((kind, Layer([r + [None] for r in spans])))
            ranges = [e for e in cpu if e["tid"] == tid]
            named = [
                e for e in ranges
                if (e["cat"] == "user_annotation" or e["name"].startswith("gpu_model_runner: ")) and not is_marker(e["name"])
            ]  # fmt: skip
            ops = [e for e in ranges if is_operator(e)]
            out.append(("named", Layer(runs(named))))
            out.append(("cpu_ops", Layer(runs(ops))))
            layers_of[tid] = out
        return layers_of[tid]

    totals = {k: 0.0 for k in CAUSES}
    names = {}
    host_idle = 0.0
    for lo, hi, call in stretches:
        host_idle += hi - lo
        lead = call["tid"] if call is not None else main
        followed = [lead]
        st = step_of(call["ts"]) if call is not None else None
        followed += [t for t in ub_threads.get(st, []) if t != lead]
        # Elementary pieces: every edge of every event of the followed threads, steps and start-ups.
        cuts = {lo, hi}
        near = [layer for tid in followed for _, layer in layers(tid)] + [steps, startup_layer]
        for layer in near:
            # The runs are sorted and disjoint: those meeting [lo, hi] start from the one holding lo.
            i = max(0, bisect.bisect_right(layer.starts, lo) - 1)
            while i < len(layer.items) and layer.items[i][0] < hi:
                for x in layer.items[i][:2]:
                    if lo < x < hi:
                        cuts.add(x)
                i += 1
        cuts = sorted(cuts)
        for a, b in zip(cuts, cuts[1:]):
            t = (a + b) / 2
            cause, name = None, None
            for tid in followed:
                for kind, layer in layers(tid):
                    r = find(layer, t)
                    if r is not None:
                        cause, name = kind, r[2]
                        break
                if cause is not None:
                    break
            if cause is None:
                if find(startup_layer, t) is not None:
                    cause = "ubatch_startup"
                elif marks and find(steps, t) is None:
                    cause = "between_steps"
                else:
                    cause = "untraced"
            totals[cause] += b - a
            if cause in ("named", "cpu_ops"):
                names[(cause, name)] = names.get((cause, name), 0.0) + b - a
    return host_idle, totals, names
