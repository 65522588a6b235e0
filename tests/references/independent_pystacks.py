#!/usr/bin/env python3
"""Independent reference: host-caused GPU idle split by sampled Python frames (py-spy).

Written only from dbo-trace's docs (docs/analysis.md "The accounting model", "Steps",
"Host", "Host time: what the CPU did while the GPU waited", "Host time by Python frame";
docs/bundle-format.md "pystacks"; docs/recording.md "Python stacks"), never from its code.
Standard library only.  Every time is handled as integer nanoseconds on the trace clock
(Kineto ts * 1000); figures are printed in microseconds rounded to 3 decimals.

Usage:
    independent_pystacks.py INPUT [INPUT ...]
INPUT is either a dbo-trace bundle folder (manifest.json, traces/, events/, pystacks/) or a
folder holding aligned-trace.json.gz + aligned-pyspy.json + aligned-meta.json
(tests/data/h200-pystacks).  Prints one JSON object {INPUT: figures}.
"""
from __future__ import annotations

import bisect
import gzip
import json
import math
import os
import re
import sys
from collections import Counter, defaultdict

# --------------------------------------------------------------------------------------
# constants from the docs
# --------------------------------------------------------------------------------------

GPU_CATS = {"kernel": None, "gpu_memcpy": "copy", "gpu_memset": "copy"}
CALL_CATS = {"cuda_runtime", "cuda_driver", "Runtime", "Driver"}
OP_CATS = {"cpu_op", "python_function", "Operator"}
ANNOT_CATS = {"user_annotation"}
WINDOW_CATS = set(GPU_CATS) | CALL_CATS | OP_CATS | ANNOT_CATS | {"Kernel", "Memcpy", "Memset"}

COMM_PATTERNS = [
    r"^nccl", r"ncclDevKernel", r"ncclKernel", r"rccl",
    r"deep_ep", r"deepep", r"::ep::", r"ep::intranode", r"ep::internode", r"ep::internode_ll",
    r"notify_dispatch", r"notify_combine", r"cached_notify",
    r"pplx", r"all_to_all", r"alltoall", r"nvshmem",
    r"cross_device_reduce", r"custom_all_reduce", r"all_reduce",
    r"all_gather", r"reduce_scatter",
    r"moe_dispatch", r"ep_combine", r"a2a_dispatch", r"all2all_combine", r"dispatch_kernel",
    r"combine_kernel",
    r"symm_mem", r"multimem", r"two_shot", r"one_shot_all",
]

LAUNCH_NAMES = {
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
    "cuLaunchCooperativeKernel", "hipLaunchKernel", "hipExtLaunchKernel", "hipModuleLaunchKernel",
    "hipExtModuleLaunchKernel", "hipLaunchCooperativeKernel",
    "cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch",
}
SYNC_NAMES = {
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
    "cudaThreadSynchronize", "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize",
    "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize",
}

STEP_ANNOT_RE = re.compile(
    r"^execute_(?:\d+_)?context_(\d+)\(.*?\)_generation_(\d+)\(.*\)$")
EXECUTE_RE = re.compile(r"^execute_")
COMPILE_RE = re.compile(
    r"(dynamo|entire_frame_compile|backend_compile|inductor_compile|compile_fx|async_compile\.|"
    r"\(dynamo_timed\)|autotun|benchmark_all_configs|triton\.compile|triton_compile|compile_inner)")
COMPILE_EXCLUDE_RE = re.compile(
    r"(TorchDynamo Cache Lookup|Torch-Compiled Region|## Call CompiledFxGraph|triton_poi_fused)")

CAUSE_ORDER = ["synchronisation", "launch_calls", "other_cuda_calls", "named", "cpu_ops"]

PROFILER_START_FUNCS = {"__enter__", "start", "prepare_trace"}


def r3(x):
    return None if x is None else round(float(x), 3)


def us(ns):
    return None if ns is None else round(ns / 1000.0, 3)


# --------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------

def load_json_any(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        return json.load(f)


def discover_input(path):
    """Return dict(trace, pyspy, started_unix_ns, rate_hz, events[], meta{}, manifest)."""
    inp = {"path": path, "manifest": None, "events": [], "meta": {}}
    man = os.path.join(path, "manifest.json")
    if os.path.isfile(man):
        m = json.load(open(man))
        inp["manifest"] = m
        traces = [os.path.join(path, t) for t in m.get("traces", [])]
        inp["traces"] = traces
        inp["events"] = [os.path.join(path, e) for e in m.get("events", [])]
        inp["pystacks"] = []
        for p in m.get("pystacks") or []:
            if p.get("path"):
                inp["pystacks"].append({
                    "path": os.path.join(path, p["path"]), "role": p.get("role"),
                    "pid": p.get("pid"), "rate_hz": p.get("rate_hz"),
                    "started_unix_ns": p.get("started_unix_ns")})
        inp["comm_kernels"] = m.get("comm_kernels") or []
    else:
        tr = [os.path.join(path, f) for f in sorted(os.listdir(path))
              if re.search(r"trace\.json(\.gz)?$", f)]
        inp["traces"] = tr
        meta_p = os.path.join(path, "aligned-meta.json")
        meta = json.load(open(meta_p)) if os.path.isfile(meta_p) else {}
        inp["meta"] = meta
        inp["pystacks"] = [{"path": os.path.join(path, "aligned-pyspy.json"), "role": None,
                            "pid": meta.get("pid"), "rate_hz": meta.get("rate_hz"),
                            "started_unix_ns": meta.get("started_unix_ns")}]
        inp["comm_kernels"] = []
    return inp


class Ev:
    __slots__ = ("cat", "name", "pid", "tid", "s", "e", "corr", "args")

    def __init__(self, cat, name, pid, tid, s, e, corr, args):
        self.cat, self.name, self.pid, self.tid = cat, name, pid, tid
        self.s, self.e, self.corr, self.args = s, e, corr, args


def load_trace(path):
    d = load_json_any(path)
    if isinstance(d, list):
        evs, top = d, {}
    else:
        evs, top = d.get("traceEvents", []), d
    out = []
    for e in evs:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat")
        if cat not in WINDOW_CATS:
            continue
        ts = e.get("ts")
        dur = e.get("dur", 0) or 0
        s = int(round(float(ts) * 1000))
        en = s + int(round(float(dur) * 1000))
        args = e.get("args") or {}
        corr = args.get("correlation")
        out.append(Ev(cat, e.get("name", ""), e.get("pid"), e.get("tid"), s, en, corr, args))
    out.sort(key=lambda x: (x.s, -x.e))
    return out, top.get("baseTimeNanoseconds")


def load_event_log(path):
    lines = open(path).read().splitlines()
    if not lines:
        return None
    try:
        hdr = json.loads(lines[0])
    except ValueError:
        return None
    recs = []
    for ln in lines[1:]:
        if not ln.strip():
            continue
        try:
            recs.append(json.loads(ln))
        except ValueError:
            continue
    return {"header": hdr, "records": recs}


# --------------------------------------------------------------------------------------
# interval helpers
# --------------------------------------------------------------------------------------

def union(intervals):
    iv = sorted((a, b) for a, b in intervals if b > a)
    out = []
    for a, b in iv:
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1][1] = b
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def overlap_len(a, b):
    """Total overlap of two sorted disjoint interval lists."""
    i = j = 0
    tot = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if hi > lo:
            tot += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tot


def clip_total(intervals, lo, hi):
    return sum(max(0, min(b, hi) - max(a, lo)) for a, b in intervals)


def intersect(a, b):
    i = j = 0
    out = []
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if hi > lo:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def quantile_linear(vals, q):
    v = sorted(vals)
    if not v:
        return None
    pos = (len(v) - 1) * q
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def median(vals):
    return quantile_linear(vals, 0.5)


# --------------------------------------------------------------------------------------
# the accounting model
# --------------------------------------------------------------------------------------

def plain_call_name(name):
    n = re.sub(r"_v\d+$", "", name)
    n = re.sub(r"_(ptsz|ptds)$", "", n)
    n = re.sub(r"_v\d+$", "", n)
    return n


def call_kind(name):
    n = plain_call_name(name)
    if n in SYNC_NAMES:
        return "synchronisation"
    if re.match(r"^(cuda|cu|hip)Memcpy", n) and "Async" not in n:
        return "synchronisation"
    if n in LAUNCH_NAMES or n.startswith("cudaLaunchCooperativeKernel"):
        return "launch_calls"
    if re.match(r"^(cuda|cu|hip)Memcpy", n) or re.match(r"^(cuda|cu|hip)Memset", n):
        return "launch_calls"
    return "other_cuda_calls"


def gpu_class(ev, comm_res):
    if ev.cat in ("gpu_memcpy", "gpu_memset", "Memcpy", "Memset"):
        return "copy"
    for r in comm_res:
        if r.search(ev.name):
            return "comm"
    return "compute"


def build_model(trace_events, comm_extra):
    """Split the trace into GPU activity, CUDA calls, CPU ranges; profiled window."""
    comm_res = [re.compile(p, re.I) for p in COMM_PATTERNS + list(comm_extra)]
    gpu, calls, ops, annots = [], [], [], []
    for ev in trace_events:
        if ev.cat in GPU_CATS or ev.cat in ("Kernel", "Memcpy", "Memset"):
            gpu.append(ev)
        elif ev.cat in CALL_CATS:
            calls.append(ev)
        elif ev.cat in OP_CATS:
            ops.append(ev)
        elif ev.cat in ANNOT_CATS:
            annots.append(ev)
    w0 = min(ev.s for ev in trace_events)
    w1 = max(ev.e for ev in trace_events)
    by_corr = defaultdict(list)
    for c in calls:
        if c.corr is not None:
            by_corr[c.corr].append(c)
    cpu_pids = Counter(ev.pid for ev in calls + ops + annots)
    pid = cpu_pids.most_common(1)[0][0] if cpu_pids else None
    return {"gpu": gpu, "calls": calls, "ops": ops, "annots": annots, "window": (w0, w1),
            "by_corr": by_corr, "comm_res": comm_res, "pid": pid}


def launch_of(model, act):
    cs = model["by_corr"].get(act.corr) if act.corr is not None else None
    if not cs:
        return None
    return min(cs, key=lambda c: c.s)


def accounting(model):
    """Buckets over the window and the host-idle stretches with their ending activity."""
    w0, w1 = model["window"]
    gpu = model["gpu"]
    busy = union((g.s, g.e) for g in gpu)
    starts = defaultdict(list)
    for g in gpu:
        starts[g.s].append(g)
    # gaps
    gaps = []
    cur = w0
    for a, b in busy:
        if a > cur:
            gaps.append((cur, a))
        cur = max(cur, b)
    if w1 > cur:
        gaps.append((cur, w1))
    stretches = []  # host idle stretches
    other_idle = 0
    for a, b in gaps:
        if b == w1 and not starts.get(b):
            stretches.append({"s": a, "e": b, "end_act": None, "launch": None, "tail": True})
            continue
        cands = []
        for act in starts.get(b, []):
            lc = launch_of(model, act)
            if lc is not None:
                cands.append((lc.s, act.s, id(act), act, lc))
        if not cands:
            other_idle += b - a
            continue
        cands.sort(key=lambda x: (x[0], x[1], x[2]))
        _, _, _, act, lc = cands[0]
        if lc.s > a:
            stretches.append({"s": a, "e": b, "end_act": act, "launch": lc, "tail": False})
        else:
            other_idle += b - a
    # GPU busy split (for a sanity print only)
    classes = defaultdict(list)
    for g in gpu:
        classes[gpu_class(g, model["comm_res"])].append((g.s, g.e))
    comp = union(classes["compute"])
    comm = union(classes["comm"])
    copy = union(classes["copy"])
    comp_t = sum(b - a for a, b in comp)
    comm_u = union(comm)
    comm_exposed = sum(b - a for a, b in comm_u) - overlap_len(comm_u, comp)
    allb = sum(b - a for a, b in busy)
    host = sum(s["e"] - s["s"] for s in stretches)
    return {
        "stretches": stretches,
        "buckets_ns": {"compute": comp_t, "comm_exposed": comm_exposed,
                       "copy": allb - comp_t - comm_exposed, "host_idle": host,
                       "other_idle": other_idle},
        "window_ns": w1 - w0,
    }


# --------------------------------------------------------------------------------------
# threads
# --------------------------------------------------------------------------------------

def thread_model(model):
    """Main thread; CPU-operator-only threads folded into the call thread they hold most."""
    calls = model["calls"]
    n_calls = Counter(c.tid for c in calls)
    main = None
    if n_calls:
        top = max(n_calls.values())
        main = min(t for t, n in n_calls.items() if n == top)
    alias = {}
    op_threads = defaultdict(list)
    for o in model["ops"] + model["annots"]:
        op_threads[o.tid].append((o.s, o.e))
    call_by_start = sorted((c.s, c.tid) for c in calls)
    cs = [x[0] for x in call_by_start]
    for tid, ivs in op_threads.items():
        if tid in n_calls:
            continue
        runs = union(ivs)
        votes = Counter()
        for a, b in runs:
            i = bisect.bisect_left(cs, a)
            while i < len(cs) and cs[i] < b:
                votes[call_by_start[i][1]] += 1
                i += 1
        if votes:
            top = max(votes.values())
            alias[tid] = min(t for t, n in votes.items() if n == top)
    return main, alias


# --------------------------------------------------------------------------------------
# steps
# --------------------------------------------------------------------------------------

def steps_from_log(log, base_ns, trace_pid):
    if log is None or base_ns is None:
        return None
    hdr = log["header"]
    if hdr.get("pid") != trace_pid:
        return None
    begins, ends, paths = {}, {}, {}
    ub_threads = defaultdict(dict)  # step -> ubatch -> (ident, native)
    for r in log["records"]:
        if len(r) < 7:
            continue
        t, kind, ident, native, ub, step, detail = r[:7]
        t = t - base_ns
        if kind == "step_begin":
            begins[step] = t
            paths[step] = (detail or {}).get("path")
        elif kind == "step_end":
            ends[step] = t
        if isinstance(ub, int) and ub >= 0:
            ub_threads[step].setdefault(ub, (ident, native))
    steps = []
    for n in sorted(begins):
        if n in ends and ends[n] >= begins[n]:
            steps.append({"number": n, "cpu_s": begins[n], "cpu_e": ends[n],
                          "path": paths.get(n), "ub": ub_threads.get(n, {})})
    return steps


def steps_inferred(model):
    """Long GPU idle gaps (>= 1 ms and >= 20x the median gap) cut the trace."""
    busy = union((g.s, g.e) for g in model["gpu"])
    gaps = [(busy[i][1], busy[i + 1][0]) for i in range(len(busy) - 1)]
    if not gaps:
        return [{"number": 0, "cpu_s": model["window"][0], "cpu_e": model["window"][1],
                 "path": None, "ub": {}}]
    med = median([b - a for a, b in gaps])
    cuts = [(a, b) for a, b in gaps if (b - a) >= 1_000_000 and (b - a) >= 20 * med]
    steps = []
    s = busy[0][0]
    for a, b in cuts:
        steps.append((s, a))
        s = b
    steps.append((s, busy[-1][1]))
    return [{"number": i, "cpu_s": a, "cpu_e": b, "path": None, "ub": {}}
            for i, (a, b) in enumerate(steps)]


def assign_steps(model, steps):
    """GPU work to the step whose CPU window holds its launching call; windows; phases."""
    starts = [st["cpu_s"] for st in steps]
    for st in steps:
        st["acts"] = []
    for g in model["gpu"]:
        lc = launch_of(model, g)
        if lc is None:
            continue
        i = bisect.bisect_right(starts, lc.s) - 1
        # the step windows may not overlap; search backwards a little for safety
        while i >= 0:
            st = steps[i]
            if st["cpu_s"] <= lc.s <= st["cpu_e"]:
                st["acts"].append(g)
                break
            i -= 1
            if i >= 0 and steps[i]["cpu_e"] < lc.s - 10_000_000_000:
                break
    out = [st for st in steps if st["acts"]]
    for st in out:
        st["win_s"] = st["cpu_s"]
        st["win_e"] = max(st["cpu_e"], max(g.e for g in st["acts"]))
    # phase from the vLLM annotation that holds the step start
    execs = [a for a in model["annots"] if STEP_ANNOT_RE.match(a.name)]
    for st in out:
        ph = None
        for a in execs:
            if a.s <= st["cpu_s"] <= a.e:
                m = STEP_ANNOT_RE.match(a.name)
                n, mm = int(m.group(1)), int(m.group(2))
                ph = "prefill" if n > 0 and mm == 0 else "decode" if n == 0 and mm > 0 else \
                    "mixed" if n > 0 and mm > 0 else None
                break
        st["phase"] = ph
    for i, st in enumerate(out):
        st["period"] = (out[i + 1]["cpu_s"] - st["cpu_s"]) if i + 1 < len(out) else \
            (st["win_e"] - st["win_s"])
    return out


def mark_stalls(model, steps):
    """Compile stalls (>= 1 ms and >= 5% of the period) and outliers per phase."""
    comp = union((o.s, o.e) for o in model["ops"] + model["annots"]
                 if COMPILE_RE.search(o.name) and not COMPILE_EXCLUDE_RE.search(o.name))
    for i, st in enumerate(steps):
        ps, pe = st["cpu_s"], st["cpu_s"] + st["period"]
        c = clip_total(comp, ps, pe)
        st["stall"] = "compile" if (c >= 1_000_000 and c >= 0.05 * st["period"]) else None
    by_phase = defaultdict(list)
    for st in steps:
        by_phase[st["phase"]].append(st)
    for ph, sts in by_phase.items():
        for st in sts:
            if st["stall"]:
                continue
            others = [o["period"] for o in sts if o is not st and not o["stall"]]
            if len(others) >= 4:
                med = median(others)
                mad = median([abs(x - med) for x in others])
                if st["period"] > med + 3.5 * 1.4826 * mad and st["period"] > 2 * med:
                    st["stall"] = "outlier"
            elif len(others) == 2:
                if st["period"] > 10 * median(others):
                    st["stall"] = "outlier"
    return steps


# --------------------------------------------------------------------------------------
# host time causes
# --------------------------------------------------------------------------------------

def is_step_marker(name):
    return bool(EXECUTE_RE.match(name)) or name.startswith("ProfilerStep#") or \
        name.startswith("dbo:")


def runs_of(events):
    """Merge events into runs named by their first (outermost) event."""
    evs = sorted(events, key=lambda x: (x[0], -(x[1] - x[0])))
    runs = []
    for s, e, name in evs:
        if e <= s:
            continue
        if runs and s < runs[-1][1]:
            if e > runs[-1][1]:
                runs[-1][1] = e
        else:
            runs.append([s, e, name])
    return runs


class ThreadState:
    """Per trace thread: the runs of each cause kind."""

    def __init__(self):
        self.kinds = {k: [] for k in CAUSE_ORDER}
        self.launch_calls = []

    def finish(self):
        self.runs = {}
        self.starts = {}
        for k, evs in self.kinds.items():
            r = runs_of(evs)
            self.runs[k] = r
            self.starts[k] = [x[0] for x in r]

    def at(self, t):
        """(kind, name) the thread is in at instant t (half-open), else None."""
        for k in CAUSE_ORDER:
            st = self.starts[k]
            i = bisect.bisect_right(st, t) - 1
            if i >= 0 and self.runs[k][i][1] > t:
                return k, self.runs[k][i][2]
        return None

    def boundaries(self, lo, hi):
        out = []
        for k in CAUSE_ORDER:
            st = self.starts[k]
            i = max(0, bisect.bisect_right(st, lo) - 1)
            r = self.runs[k]
            while i < len(r) and r[i][0] < hi:
                if lo < r[i][0] < hi:
                    out.append(r[i][0])
                if lo < r[i][1] < hi:
                    out.append(r[i][1])
                i += 1
        return out


def thread_states(model, alias):
    states = defaultdict(ThreadState)
    for c in model["calls"]:
        k = call_kind(c.name)
        states[c.tid].kinds[k].append((c.s, c.e, c.name))
        if k == "launch_calls":
            states[c.tid].launch_calls.append((c.s, c.e))
    for o in model["annots"] + model["ops"]:
        tid = alias.get(o.tid, o.tid)
        if o.cat in ANNOT_CATS:
            if is_step_marker(o.name):
                continue
            states[tid].kinds["named"].append((o.s, o.e, o.name))
        else:
            if o.name.startswith("gpu_model_runner:"):
                states[tid].kinds["named"].append((o.s, o.e, o.name))
            else:
                states[tid].kinds["cpu_ops"].append((o.s, o.e, o.name))
    for st in states.values():
        st.finish()
    return states


def ub_tid_map(model, ident, native):
    """A microbatch thread's trace id: low 32 bits of its ident, or its native id."""
    tids = {c.tid for c in model["calls"]} | {o.tid for o in model["ops"]}
    for cand in (ident & 0xFFFFFFFF if isinstance(ident, int) else None, native, ident):
        if cand in tids:
            return cand
    return None


def host_causes(model, acc, steps, marker_steps, main_tid, alias):
    """Split every host-idle stretch, instant by instant, into one cause (with its thread)."""
    states = thread_states(model, alias)
    empty = ThreadState()
    empty.finish()
    # microbatch threads per step (in microbatch order) and start-up windows
    step_ubs = []
    startup = []
    for st in steps:
        tids = []
        for ub in sorted(st.get("ub", {})):
            ident, native = st["ub"][ub]
            t = ub_tid_map(model, ident, native)
            if t is not None and t not in tids:
                tids.append(t)
        # only threads that launched in the step count as microbatch threads there
        launched = []
        for t in tids:
            firsts = [c.s for c in model["calls"] if c.tid == t and
                      st["cpu_s"] <= c.s <= st["cpu_e"]]
            if firsts:
                launched.append((t, min(firsts)))
        st["ub_tids"] = [t for t, _ in launched]
        if launched:
            startup.append((st["cpu_s"], max(f for _, f in launched)))
        step_ubs.append(st)
    startup = union(startup)
    cpu_windows = union((st["cpu_s"], st["cpu_e"]) for st in steps) if marker_steps else None
    # activity -> step
    act_step = {}
    for st in steps:
        for g in st["acts"]:
            act_step[id(g)] = st

    pieces = []  # (s, e, kind, name, tid, stretch_index)
    launch_hit = set()
    for si, sr in enumerate(acc["stretches"]):
        if sr["launch"] is None:
            follow = [main_tid]
        else:
            lead = sr["launch"].tid
            follow = [lead]
            st = act_step.get(id(sr["end_act"]))
            if st is not None:
                for t in st.get("ub_tids", []):
                    if t not in follow:
                        follow.append(t)
        lead = follow[0]
        lo, hi = sr["s"], sr["e"]
        bset = {lo, hi}
        for t in follow:
            bset.update(states.get(t, empty).boundaries(lo, hi))
        for a, b in startup:
            if lo < a < hi:
                bset.add(a)
            if lo < b < hi:
                bset.add(b)
        if cpu_windows:
            for a, b in cpu_windows:
                if lo < a < hi:
                    bset.add(a)
                if lo < b < hi:
                    bset.add(b)
        bs = sorted(bset)
        for a, b in zip(bs, bs[1:]):
            got = None
            for t in follow:
                r = states.get(t, empty).at(a)
                if r is not None:
                    got = (r[0], r[1], t)
                    break
            if got is None:
                if any(x <= a < y for x, y in startup):
                    got = ("ubatch_startup", None, lead)
                elif cpu_windows is not None and not any(x <= a < y for x, y in cpu_windows):
                    got = ("between_steps", None, lead)
                else:
                    got = ("untraced", None, lead)
            kind, name, tid = got
            if kind not in ("named", "cpu_ops"):
                name = None
            if pieces and pieces[-1][1] == a and pieces[-1][2:6] == (kind, name, tid, si):
                pieces[-1] = (pieces[-1][0], b, kind, name, tid, si)
            else:
                pieces.append((a, b, kind, name, tid, si))
            if kind == "launch_calls":
                st_ = states[tid]
                i = bisect.bisect_right(st_.launch_calls, (a, float("inf"))) - 1
                while i >= 0 and st_.launch_calls[i][1] > a:
                    launch_hit.add((tid, st_.launch_calls[i]))
                    i -= 1
                i = bisect.bisect_left(st_.launch_calls, (a, -1))
                while i < len(st_.launch_calls) and st_.launch_calls[i][0] < b:
                    launch_hit.add((tid, st_.launch_calls[i]))
                    i += 1
    return pieces, len(launch_hit)


def summarize_causes(pieces, lo=None, hi=None, clip=None):
    tot = Counter()
    named = Counter()
    ops = Counter()
    for a, b, kind, name, tid, si in pieces:
        if clip is not None:
            for x, y in intersect([(a, b)], clip):
                d = y - x
                tot[kind] += d
                if kind == "named":
                    named[name] += d
                elif kind == "cpu_ops":
                    ops[name] += d
            continue
        d = b - a
        tot[kind] += d
        if kind == "named":
            named[name] += d
        elif kind == "cpu_ops":
            ops[name] += d
    return tot, named, ops


# --------------------------------------------------------------------------------------
# py-spy samples
# --------------------------------------------------------------------------------------

STDLIB_RE = re.compile(r"/lib/python\d+(\.\d+)?/")
SITE_RE = re.compile(r"/(site-packages|dist-packages)/")


def frame_class_and_module(filename, roots):
    """('project' | 'library', module) of a frame's file (docs: "Frames")."""
    if not filename:
        return None, None
    if filename.startswith("<frozen "):
        return "library", filename[len("<frozen "):-1]
    if filename.startswith("<"):
        return "library", filename
    parts = filename.split("/")
    stem = re.sub(r"\.py[cw]?$", "", parts[-1])
    dirs = parts[:-1]
    # generated code (torch.compile / inductor cache) under a vllm folder: project, named by stem
    if any(p in ("torch_compile_cache", "inductor_cache") for p in dirs):
        cls = "project" if ("vllm" in dirs or "afd_plugin" in dirs) else "library"
        return cls, stem

    def dotted(start):
        mod = [p for p in parts[start:-1]] + ([] if stem == "__init__" else [stem])
        return ".".join(mod)

    # project: under a vllm or afd_plugin folder, wherever installed
    for i, p in enumerate(dirs):
        if p in ("vllm", "afd_plugin"):
            return "project", dotted(i)
    # dbo-trace's own hooks
    for i, p in enumerate(dirs):
        if p == "dbo_trace":
            return "library", dotted(i)
    m = SITE_RE.search(filename)
    if m:
        idx = parts.index(m.group(1))
        return "library", dotted(idx + 1)
    m = STDLIB_RE.search(filename)
    if m:
        # /usr/lib/python3.12/x/y.py
        for i, p in enumerate(parts):
            if re.match(r"^python\d+(\.\d+)?$", p) and i > 0 and parts[i - 1] == "lib":
                return "library", dotted(i + 1)
    # another package installed in a folder that also holds vllm / afd_plugin (pip --target)
    for root in roots:
        if filename.startswith(root + "/"):
            idx = len(root.split("/"))
            return "library", dotted(idx)
    return "project", stem


def load_pyspy(path, pid):
    """Per py-spy thread: constant-stack segments [(s_us, e_us, frames_tuple)], real frames only."""
    ev = load_json_any(path)
    stacks = {}
    last_t = {}
    segs = defaultdict(list)
    native = {}
    for e in ev:
        if e.get("pid") != pid:
            continue
        tid = e["tid"]
        st = stacks.setdefault(tid, [])
        t = e["ts"]
        lt = last_t.get(tid)
        if lt is not None and t != lt:
            real = tuple(f for f in st if f[1])
            if real:
                if segs[tid] and segs[tid][-1][1] == lt and segs[tid][-1][2] == real:
                    segs[tid][-1] = (segs[tid][-1][0], t, real)
                else:
                    segs[tid].append((lt, t, real))
        if e["ph"] == "B":
            fn = (e.get("args") or {}).get("filename", "")
            nm = e.get("name", "")
            st.append((nm, fn))
            if not fn:
                m = re.match(r"^thread \((\d+)\)", nm)
                if m:
                    native[tid] = int(m.group(1))
        else:
            if st:
                st.pop()
        last_t[tid] = t
    return dict(segs), native


def roots_from_frames(segs):
    roots = set()
    for lst in segs.values():
        for _, _, fr in lst:
            for _, fn in fr:
                parts = fn.split("/")
                for i, p in enumerate(parts[:-1]):
                    if p in ("vllm", "afd_plugin") and i > 0:
                        root = "/".join(parts[:i])
                        if not SITE_RE.search(root + "/") and "torch_compile_cache" not in fn:
                            roots.add(root)
                        break
    return sorted(roots)


class FrameKeys:
    def __init__(self, roots):
        self.roots = roots
        self.cache = {}
        self.fcache = {}

    def frame(self, fr):
        r = self.fcache.get(fr)
        if r is None:
            cls, mod = frame_class_and_module(fr[1], self.roots)
            r = (cls, f"{mod}:{fr[0]}")
            self.fcache[fr] = r
        return r

    def keys(self, stack):
        """(project, library, inner) of one sampled stack (outermost first)."""
        k = self.cache.get(stack)
        if k is not None:
            return k
        fs = [self.frame(f) for f in stack]
        pi = None
        for i in range(len(fs) - 1, -1, -1):
            if fs[i][0] == "project":
                pi = i
                break
        if pi is None:
            libs = [f[1] for f in fs if f[0] == "library"]
            k = (None, libs[0] if libs else None, libs[-1] if libs else None)
        else:
            libs = [f[1] for f in fs[pi + 1:] if f[0] == "library"]
            k = (fs[pi][1], libs[0] if libs else None, libs[-1] if libs else None)
        self.cache[stack] = k
        return k


def map_threads(trace_tids, segs, native_of, pid, extra_native):
    """trace thread id -> py-spy tid (docs: "Threads")."""
    nat = dict(native_of)
    nat.update({k: v for k, v in extra_native.items() if k in segs})
    out = {}
    for t in trace_tids:
        for p in segs:
            if p == t or (p & 0xFFFFFFFF) == t or nat.get(p) == t:
                out[t] = p
                break
    if pid in trace_tids and pid not in out:
        mains = [p for p, lst in segs.items()
                 if lst and not any(f[0] == "Thread._bootstrap" for f in lst[0][2][:1])]
        if len(mains) == 1:
            out[pid] = mains[0]
    return out


def spans_list(segs_of_thread, pred):
    """Maximal contiguous sampled spans (us, py-spy clock) where pred holds for a frame."""
    return union((a, b) for a, b, fr in segs_of_thread if any(pred(f) for f in fr))


def align_clock(model, base_ns, started_ns, rate_hz, segs, tmap, first_event_ns):
    """Offset (ns) with trace ns = py-spy us * 1000 + offset."""
    if base_ns is None or started_ns is None:
        return None
    period_ns = int(round(1e9 / rate_hz))
    off0 = started_ns - base_ns
    res = {"offset0_ns": off0, "period_ns": period_ns}
    # 1. the profiler's start seen by the samples
    prof_ends = []
    for p, lst in segs.items():
        sp = spans_list(lst, lambda f: "torch/profiler" in f[1] and
                        f[0].split(".")[-1] in PROFILER_START_FUNCS)
        prof_ends.extend(b for a, b in sp)
    if prof_ends:
        # the start whose sampled end lies nearest the trace's first event (on started_unix_ns)
        e_us = min(prof_ends, key=lambda b: abs(b * 1000 + off0 - first_event_ns))
        guess = first_event_ns - e_us * 1000
        lo, hi = guess - 5_000_000, guess + 40_000_000 + period_ns
        res["method_start"] = "profiler start"
        res["profiler_start_end_pyspy_us"] = e_us
        res["guess_ns"] = guess
    else:
        guess = off0
        lo, hi = off0 - 50_000_000, off0 + 3_000_000_000
        res["method_start"] = "started_unix_ns"
        res["guess_ns"] = guess
    res["search_ns"] = (lo, hi)
    # 2. anchors
    anchors = []  # (name, ranges ns, sampled spans us)
    by_tid_ranges = defaultdict(lambda: defaultdict(list))
    for a in model["annots"]:
        if EXECUTE_RE.match(a.name) and STEP_ANNOT_RE.match(a.name):
            by_tid_ranges[a.tid]["execute_model"].append((a.s, a.e))
        elif a.name.isidentifier():
            by_tid_ranges[a.tid][a.name].append((a.s, a.e))
    for ttid, d in by_tid_ranges.items():
        p = tmap.get(ttid)
        if p is None:
            continue
        for fname, rngs in d.items():
            if fname == "execute_model":
                pred = (lambda f: f[0].split(".")[-1] == "execute_model" and
                        "model_runner" in f[1])
            else:
                pred = (lambda f, fname=fname: f[0].split(".")[-1] == fname)
            sp = spans_list(segs[p], pred)
            if sp:
                anchors.append((fname, union(rngs), sp))
    res["anchors"] = sorted({a[0] for a in anchors})
    if not anchors:
        res["method"] = "start" if not prof_ends else "profiler start"
        res["offset_ns"] = guess if prof_ends else off0
        res["accuracy_us"] = None
        return res
    step = 200_000  # 0.2 ms bins
    best = None
    n = (hi - lo) // step
    # only spans near the trace window matter
    w0, w1 = model["window"]
    for k in range(n + 1):
        sh = lo + k * step
        tot = 0
        for _, rngs, sp in anchors:
            shifted = [(a * 1000 + sh, b * 1000 + sh) for a, b in sp
                       if b * 1000 + sh > w0 - 1 and a * 1000 + sh < w1 + 1]
            tot += overlap_len(shifted, rngs)
        key = (tot, -abs(sh - guess))
        if best is None or key > best[0]:
            best = (key, sh)
    xshift = best[1]
    res["xcorr_offset_ns"] = xshift
    res["xcorr_overlap_us"] = us(best[0][0])
    # 3. pair spans with ranges, edges' lateness, lower quartile = period / 4
    late = []
    for _, rngs, sp in anchors:
        for a, b in sp:
            A, B = a * 1000 + xshift, b * 1000 + xshift
            bestr, bo = None, 0
            for r0, r1 in rngs:
                o = min(B, r1) - max(A, r0)
                if o > bo:
                    bo, bestr = o, (r0, r1)
            if bestr is None:
                continue
            late.append(A - bestr[0])
            late.append(B - bestr[1])
    if not late:
        res["method"] = "anchors"
        res["offset_ns"] = xshift
        res["accuracy_us"] = None
        return res
    q1 = quantile_linear(late, 0.25)
    off = xshift + (period_ns / 4.0 - q1)
    res["edges"] = len(late)
    res["q1_lateness_at_xcorr_us"] = us(q1)
    res["offset_ns"] = off
    res["accuracy_us"] = r3(period_ns / 1000.0 / (2 * math.sqrt(len(late))))
    res["method"] = ("profiler start, anchors" if prof_ends else "anchors")
    lat_final = sorted((x + off - xshift) / 1000.0 for x in late)
    res["lateness_final_us"] = {"q1": r3(quantile_linear(lat_final, 0.25)),
                                "median": r3(median(lat_final)),
                                "q3": r3(quantile_linear(lat_final, 0.75))}
    return res


# --------------------------------------------------------------------------------------
# pieces x samples
# --------------------------------------------------------------------------------------

def cut_pieces(pieces, segs, tmap, offset_ns, fk):
    """Each host-idle piece cut by the sampled stacks of its thread: rows."""
    # segs on the trace clock, per py-spy thread
    conv = {}
    for p, lst in segs.items():
        conv[p] = ([a * 1000 + offset_ns for a, _, _ in lst],
                   [(a * 1000 + offset_ns, b * 1000 + offset_ns, fr) for a, b, fr in lst])
    out = []  # (s, e, kind, name, tid, si, project, library, inner, sampled)
    for a, b, kind, name, tid, si in pieces:
        p = tmap.get(tid)
        if p is None or p not in conv:
            out.append((a, b, kind, name, tid, si, None, None, None, False))
            continue
        starts, lst = conv[p]
        i = max(0, bisect.bisect_right(starts, a) - 1)
        cur = a
        while cur < b:
            while i < len(lst) and lst[i][1] <= cur:
                i += 1
            if i >= len(lst) or lst[i][0] >= b:
                out.append((cur, b, kind, name, tid, si, None, None, None, False))
                break
            s0, e0, fr = lst[i]
            if s0 > cur:
                out.append((cur, s0, kind, name, tid, si, None, None, None, False))
                cur = s0
            e = min(b, e0)
            pk, lk, ik = fk.keys(fr)
            out.append((cur, e, kind, name, tid, si, pk, lk, ik, True))
            cur = e
            i += 1
    return out


def rows_of(parts, clip=None, top=20, host_total=None):
    agg = Counter()
    sampled = untraced = unexplained = 0
    by_cause = Counter()
    tot = 0
    for a, b, kind, name, tid, si, pk, lk, ik, smp in parts:
        ivs = [(a, b)] if clip is None else intersect([(a, b)], clip)
        for x, y in ivs:
            d = y - x
            tot += d
            by_cause[kind] += d
            agg[(kind, pk, lk, ik)] += d
            if smp:
                sampled += d
            if kind == "untraced":
                untraced += d
                if not smp:
                    unexplained += d
    ht = host_total if host_total is not None else tot
    rows = [{"cause": k[0], "project": k[1], "library": k[2], "inner": k[3], "us": us(v),
             "share": r3(v / ht) if ht else None}
            for k, v in sorted(agg.items(), key=lambda kv: (-kv[1], str(kv[0])))[:top]]
    return {"host_idle_us": us(tot), "sampled_us": us(sampled), "untraced_us": us(untraced),
            "unexplained_us": us(unexplained),
            "unexplained_share": r3(unexplained / tot) if tot else None,
            "by_cause_us": {k: us(v) for k, v in sorted(by_cause.items())},
            "rows": rows}


def frames_split(parts, kinds, clip=None, top=10):
    """Time of the given causes split by project / library / inner frame (top N each)."""
    tot = 0
    proj, lib, inner = Counter(), Counter(), Counter()
    nostack = 0
    for a, b, kind, name, tid, si, pk, lk, ik, smp in parts:
        if kind not in kinds:
            continue
        ivs = [(a, b)] if clip is None else intersect([(a, b)], clip)
        for x, y in ivs:
            d = y - x
            tot += d
            if not smp:
                nostack += d
                continue
            proj[pk] += d
            lib[lk] += d
            inner[ik] += d

    def table(c):
        return [{"frame": k, "us": us(v), "share": r3(v / tot) if tot else None}
                for k, v in sorted(c.items(), key=lambda kv: (-kv[1], str(kv[0])))[:top]]

    return {"total_us": us(tot), "without_sample_us": us(nostack),
            "without_sample_share": r3(nostack / tot) if tot else None,
            "project": table(proj), "library": table(lib), "inner": table(inner)}


def count_runs(pieces, kinds):
    """Maximal contiguous runs of the given causes, and stretches touched."""
    n = 0
    last_end = None
    stretches = set()
    for a, b, kind, name, tid, si in pieces:
        if kind not in kinds:
            continue
        stretches.add(si)
        if last_end is not None and last_end == a:
            last_end = b
            continue
        n += 1
        last_end = b
    return n, len(stretches)


# --------------------------------------------------------------------------------------
# one input: the context every figure reads
# --------------------------------------------------------------------------------------

NO_EVENT = {"untraced", "between_steps", "ubatch_startup"}


def build_context(inp, tpath):
    evs, base_ns = load_trace(tpath)
    model = build_model(evs, inp.get("comm_kernels", []))
    pid = model["pid"]
    acc = accounting(model)
    main_tid, alias = thread_model(model)
    logs = [load_event_log(p) for p in inp["events"]]
    steps, source, marker = None, None, True
    for lg in logs:
        st = steps_from_log(lg, base_ns, pid)
        if st:
            steps, source = st, "event log"
            break
    if steps is None:
        dbo = [a for a in model["annots"] if re.match(r"^dbo:step#\d+", a.name)]
        ex = [a for a in model["annots"] if STEP_ANNOT_RE.match(a.name)]
        ps = [a for a in model["annots"] + model["ops"] if a.name.startswith("ProfilerStep#")]
        src = dbo or ex or ps
        if src:
            steps = [{"number": i, "cpu_s": a.s, "cpu_e": a.e, "path": None, "ub": {}}
                     for i, a in enumerate(sorted(src, key=lambda x: x.s))]
            source = "dbo step ranges" if dbo else "vllm annotations" if ex else "ProfilerStep#"
        else:
            steps, source, marker = steps_inferred(model), "inferred (GPU gaps)", False
    steps = mark_stalls(model, assign_steps(model, steps))
    pieces, n_launch = host_causes(model, acc, steps, marker, main_tid, alias)
    ctx = {"inp": inp, "tpath": tpath, "model": model, "base_ns": base_ns, "pid": pid,
           "acc": acc, "main_tid": main_tid, "alias": alias, "logs": logs, "steps": steps,
           "steps_source": source, "marker_steps": marker, "pieces": pieces,
           "launch_calls_met": n_launch, "host_total": acc["buckets_ns"]["host_idle"]}
    # py-spy samples of the trace's process
    ctx["pyspy"] = None
    for p in inp.get("pystacks", []):
        if not os.path.isfile(p["path"]):
            continue
        segs, nat = load_pyspy(p["path"], pid)
        if segs:
            ctx["pyspy"] = (p, segs, nat)
            break
    if ctx["pyspy"] is None or base_ns is None or \
            ctx["pyspy"][0].get("started_unix_ns") is None:
        ctx["clock"] = None
        ctx["parts"] = None
        return ctx
    p, segs, nat = ctx["pyspy"]
    extra_native = {}
    meta = inp.get("meta") or {}
    if meta.get("main_ident") is not None:
        extra_native[meta["main_ident"]] = meta.get("main_native_tid")
    for lg in logs:
        if lg and lg["header"].get("pid") == pid:
            h = lg["header"]
            if h.get("main_ident") is not None:
                extra_native[h["main_ident"]] = h.get("main_native_tid")
            for r in lg["records"]:
                if len(r) >= 4 and isinstance(r[2], int) and isinstance(r[3], int):
                    extra_native.setdefault(r[2], r[3])
    trace_tids = {c.tid for c in model["calls"]} | {o.tid for o in model["ops"]} | \
        {a.tid for a in model["annots"]}
    tmap = map_threads(trace_tids, segs, nat, pid, extra_native)
    ctx["rate_hz"] = p.get("rate_hz") or 100
    ctx["rate_assumed"] = p.get("rate_hz") is None
    ctx["tmap"] = tmap
    ctx["clock"] = align_clock(model, base_ns, p.get("started_unix_ns"), ctx["rate_hz"], segs,
                               tmap, model["window"][0])
    fk = FrameKeys(roots_from_frames(segs))
    ctx["parts"] = cut_pieces(pieces, segs, tmap, ctx["clock"]["offset_ns"], fk)
    return ctx


# --------------------------------------------------------------------------------------
# figures (one function each)
# --------------------------------------------------------------------------------------

def figure_clock(ctx):
    """py-spy samples on the trace clock: offset (trace us = py-spy us + offset_us) and how."""
    c = ctx["clock"]
    if c is None:
        return None
    p = ctx["pyspy"][0]
    return {
        "samples": os.path.relpath(p["path"], ctx["inp"]["path"]),
        "rate_hz": ctx["rate_hz"], "rate_assumed": ctx["rate_assumed"],
        "thread_map": {str(k): v for k, v in sorted(ctx["tmap"].items(), key=str)},
        "method": c.get("method"),
        "offset_us": r3(c["offset_ns"] / 1000.0),
        "offset_started_unix_ns_us": r3(c["offset0_ns"] / 1000.0),
        "startup_us": r3((c["offset_ns"] - c["offset0_ns"]) / 1000.0),
        "profiler_start_sampled_end_pyspy_us": c.get("profiler_start_end_pyspy_us"),
        "guess_offset_us": r3(c["guess_ns"] / 1000.0),
        "search_us": [r3(c["search_ns"][0] / 1000.0), r3(c["search_ns"][1] / 1000.0)],
        "xcorr_offset_us": r3(c["xcorr_offset_ns"] / 1000.0)
        if c.get("xcorr_offset_ns") is not None else None,
        "xcorr_overlap_us": c.get("xcorr_overlap_us"),
        "anchors": c.get("anchors"), "edges": c.get("edges"),
        "accuracy_us": c.get("accuracy_us"),
        "edge_lateness_us": c.get("lateness_final_us"),
    }


def figure_host_idle(ctx):
    """The accounting model's buckets and the host-idle causes over the window."""
    acc, ht = ctx["acc"], ctx["host_total"]
    tot, named, ops = summarize_causes(ctx["pieces"])
    return {
        "window_us": us(acc["window_ns"]),
        "buckets_us": {k: us(v) for k, v in acc["buckets_ns"].items()},
        "host_idle_us": us(ht),
        "host_idle_stretches": len(acc["stretches"]),
        "steps_source": ctx["steps_source"], "steps": len(ctx["steps"]),
        "main_thread": ctx["main_tid"],
        "by_cause_us": {k: us(v) for k, v in sorted(tot.items())},
        "by_cause_share": {k: r3(v / ht) for k, v in sorted(tot.items())} if ht else None,
        "launch_calls_met": ctx["launch_calls_met"],
        "named_top5": [{"name": k, "us": us(v), "share": r3(v / ht)}
                       for k, v in sorted(named.items(), key=lambda kv: (-kv[1], kv[0]))[:5]],
        "cpu_ops_top5": [{"name": k, "us": us(v), "share": r3(v / ht)}
                         for k, v in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))[:5]],
    }


def figure_untraced(ctx):
    """Host-caused GPU idle without a traced cause (`untraced`): pieces, stretches, us."""
    ht = ctx["host_total"]
    tot, _, _ = summarize_causes(ctx["pieces"])
    n_p, n_s = count_runs(ctx["pieces"], {"untraced"})
    n_p2, n_s2 = count_runs(ctx["pieces"], NO_EVENT)
    u = tot.get("untraced", 0)
    ne = sum(tot.get(k, 0) for k in NO_EVENT)
    return {"pieces": n_p, "stretches_with_untraced": n_s, "us": us(u),
            "share_of_host_idle": r3(u / ht) if ht else None,
            "no_traced_event": {"causes": sorted(NO_EVENT), "pieces": n_p2,
                                "stretches_touched": n_s2, "us": us(ne),
                                "share_of_host_idle": r3(ne / ht) if ht else None}}


def figure_untraced_frames(ctx, top=10):
    """The untraced time split by the lead thread's sampled frames (project, library, inner)."""
    if ctx["parts"] is None:
        return None
    return {"untraced": frames_split(ctx["parts"], {"untraced"}, top=top),
            "no_traced_event": frames_split(ctx["parts"], NO_EVENT, top=top),
            "all_host_idle": frames_split(ctx["parts"], set(CAUSE_ORDER) | NO_EVENT, top=top)}


def figure_unexplained(ctx):
    """Share of host-caused GPU idle still without a cause after the frames."""
    if ctx["parts"] is None:
        return None
    ht = ctx["host_total"]
    w = rows_of(ctx["parts"], host_total=ht)
    noev_nosample = sum(x[1] - x[0] for x in ctx["parts"] if x[2] in NO_EVENT and not x[9])
    return {"host_idle_us": w["host_idle_us"], "sampled_us": w["sampled_us"],
            "sampled_share": r3(w["sampled_us"] * 1000 / ht) if ht else None,
            "untraced_us": w["untraced_us"], "unexplained_us": w["unexplained_us"],
            "unexplained_share_of_host_idle": r3(w["unexplained_us"] * 1000 / ht) if ht else None,
            "no_event_without_sample_us": us(noev_nosample),
            "no_event_without_sample_share": r3(noev_nosample / ht) if ht else None}


def figure_rows(ctx, top=20):
    """The docs' host_stacks table over the window: (cause, project, library, inner) rows."""
    if ctx["parts"] is None:
        return None
    return rows_of(ctx["parts"], host_total=ctx["host_total"], top=top)["rows"]


def figure_phases(ctx):
    """Per phase (vLLM annotations): the same over the union of the phase's step windows."""
    phases = defaultdict(list)
    for st in ctx["steps"]:
        if st["phase"]:
            phases[st["phase"]].append(st)
    out = {}
    for ph, sts in sorted(phases.items()):
        clip = union((s["win_s"], s["win_e"]) for s in sts)
        steady = [s for s in sts if not s["stall"]] or sts
        tot, named, ops = summarize_causes(ctx["pieces"], clip=clip)
        ht = sum(tot.values())
        d = {"steps": len(sts), "stalled": sum(1 for s in sts if s["stall"]),
             "median_period_us": us(median([s["period"] for s in sts])),
             "time_in_steps_us": us(sum(b - a for a, b in clip)),
             "host_idle_us": us(ht),
             "by_cause_us": {k: us(v) for k, v in sorted(tot.items())}}
        if ctx["parts"] is not None:
            r = rows_of(ctx["parts"], clip=clip, top=10)
            d.update({k: r[k] for k in ("sampled_us", "untraced_us", "unexplained_us",
                                        "unexplained_share")})
            d["rows"] = r["rows"]
            d["untraced_frames"] = frames_split(ctx["parts"], {"untraced"}, clip=clip)
        if len(steady) != len(sts):
            clip_st = union((s["win_s"], s["win_e"]) for s in steady)
            tot2, _, _ = summarize_causes(ctx["pieces"], clip=clip_st)
            d["steady_host_idle_us"] = us(sum(tot2.values()))
        out[ph] = d
    return out


def analyse(path):
    inp = discover_input(path)
    out = {}
    for tpath in inp["traces"]:
        ctx = build_context(inp, tpath)
        out[os.path.relpath(tpath, path)] = {
            "trace_pid": ctx["pid"],
            "clock": figure_clock(ctx),
            "host_idle": figure_host_idle(ctx),
            "untraced": figure_untraced(ctx),
            "untraced_frames": figure_untraced_frames(ctx),
            "unexplained": figure_unexplained(ctx),
            "rows": figure_rows(ctx),
            "phases": figure_phases(ctx),
        }
    return out


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    out = {}
    for a in argv:
        out[a] = analyse(a)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
