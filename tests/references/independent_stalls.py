#!/usr/bin/env python3
"""Independent reference computation of dbo-trace's step, stall, steady-state,
launch-to-start (queueing), host-time and host-bound figures.

Written from docs/analysis.md only (sections "The accounting model", "Host-bound",
"Steps", "Step time: period and window", "Steady state and stalls", "Host",
"Launch-to-start delay", "Host time: what the CPU did while the GPU waited",
"Verdict", "Headline", "Three states"), without reading dbo-trace's code.
Standard library only.  NOTES.md (beside this file) lists every reading chosen
where the docs are ambiguous or silent.

Usage:  python3 independent_stalls.py INPUT [INPUT ...]
        INPUT: a dbo-trace bundle (folder with traces/ and events/), a folder of
        traces, or one Kineto trace file (.json or .json.gz).
Prints one JSON object {input: figures}.

All internal times are integer nanoseconds on the trace clock; every figure is
printed in microseconds rounded to 3 decimals (fractions to 3 decimals too).
"""

import bisect
from decimal import Decimal, ROUND_HALF_EVEN
import glob
import gzip
import json
import os
import re
import sys

# ----------------------------------------------------------------------------
# constants from the docs
# ----------------------------------------------------------------------------

QUEUE_SLACK_NS = 20_000          # "more than 20 us after that work's launch call ended"
CLOCK_SUSPECT_NS = 1_000_000     # "no activity started sooner than 1 ms after its launch call ended"
HOST_BOUND = 0.5                 # "the threshold is 50% either way"
OVERLAPPED = 0.2                 # ">= 20% of comm time concurrent with compute"
GPU_BOUND = 0.8                  # no comm, the main phase's steady steps busy >= 80% (added with the label)
COMPILE_MIN_NS = 1_000_000       # "at least 1 ms"
COMPILE_MIN_SHARE = 0.05         # "and 5%"
MAD_K = 3.5
MAD_SCALE = 1.4826
BEHIND_SHARE = 0.05

GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset",
            "Kernel": "kernel", "Memcpy": "memcpy", "Memset": "memset"}
CALL_CATS = {"cuda_runtime", "cuda_driver", "Runtime", "Driver"}
OP_CATS = {"cpu_op", "python_function", "Operator"}
ANNOT_CATS = {"user_annotation"}

LAUNCH_NAMES = {
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
    "cudaLaunchCooperativeKernelMultiDevice", "cuLaunchKernel", "cuLaunchKernelEx",
    "cuLaunchCooperativeKernel", "hipLaunchKernel", "hipExtLaunchKernel",
    "hipModuleLaunchKernel", "hipExtModuleLaunchKernel", "hipLaunchCooperativeKernel",
}
GRAPH_LAUNCH_NAMES = {"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"}
SYNC_NAMES = {
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
    "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize",
    "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize",
    "cudaThreadSynchronize",
}
CAPTURE_BEGIN = {"cudaStreamBeginCapture", "cudaStreamBeginCaptureToGraph",
                 "cuStreamBeginCapture", "cuStreamBeginCaptureToGraph", "hipStreamBeginCapture"}
CAPTURE_END = {"cudaStreamEndCapture", "cuStreamEndCapture", "hipStreamEndCapture"}

COMM_PATTERNS = [
    r"^nccl", r"ncclDevKernel", r"ncclKernel", r"rccl",
    r"deep_ep", r"deepep", r"::ep::", r"ep::intranode", r"ep::internode", r"notify_dispatch",
    r"notify_combine", r"cached_notify",
    r"pplx", r"all_to_all", r"alltoall",
    r"nvshmem",
    r"cross_device_reduce", r"custom_all_reduce", r"all_reduce",
    r"all_gather", r"reduce_scatter",
    r"(moe|ep|a2a|all2all)_(dispatch|combine)", r"(dispatch|combine)_kernel",
    r"symm_mem", r"multimem", r"two_shot", r"one_shot_all",
]

VLLM_STEP_RE = re.compile(r"^execute_")
VLLM_CTX_RE = re.compile(r"_context_(\d+)\((?:sq)?(\d+)")
VLLM_GEN_RE = re.compile(r"_generation_(\d+)\((?:sq)?(\d+)")
PROFILER_STEP_RE = re.compile(r"^ProfilerStep#\d+$")
DBO_STEP_RE = re.compile(r"^dbo:step#(\d+):(.*)$")
OPT_STEP_RE = re.compile(r"^Optimizer\.step#(.+)\.step$")
OPT_ZERO_RE = re.compile(r"^Optimizer\.zero_grad#")


# ----------------------------------------------------------------------------
# small helpers
# ----------------------------------------------------------------------------

def us(ns):
    return None if ns is None else round(ns / 1000.0, 3)


def frac(a, b):
    return None if not b else round(a / b, 3)


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    if n == 0:
        return None
    if n % 2:
        return xs[n // 2]
    return (xs[n // 2 - 1] + xs[n // 2]) / 2.0


def percentile_linear(xs, q):
    """numpy's default ('linear') percentile."""
    xs = sorted(xs)
    if not xs:
        return None
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def to_ns(x):
    """Microseconds (a JSON int, or a float kept as its text) to integer nanoseconds, exactly."""
    if isinstance(x, int):
        return x * 1000
    if isinstance(x, str):
        return int(Decimal(x).scaleb(3).to_integral_value(rounding=ROUND_HALF_EVEN))
    return int(round(float(x) * 1000.0))


def norm_tid(t):
    if isinstance(t, str) and t.strip().lstrip("-").isdigit():
        return int(t.strip())
    return t


def tid_key(t):
    return (0, t, "") if isinstance(t, int) else (1, 0, str(t))


def plain_call_name(n):
    """cudaLaunchKernel_v7000_ptsz -> cudaLaunchKernel (nsys-style suffixes)."""
    prev = None
    while prev != n:
        prev = n
        n = re.sub(r"_(v\d+|ptsz|ptds|spt)$", "", n)
    return n


# ---- interval arithmetic over sorted lists of half-open [s, e) -------------

def merge(iv):
    iv = sorted((s, e) for s, e in iv if e > s)
    out = []
    for s, e in iv:
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def total(iv):
    return sum(e - s for s, e in iv)


def intersect(a, b):
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


def clip(iv, s, e):
    """Part of a sorted disjoint list inside [s, e)."""
    if e <= s or not iv:
        return []
    starts = [x[0] for x in iv] if not isinstance(iv, SortedIv) else iv.starts
    lst = iv.iv if isinstance(iv, SortedIv) else iv
    i = bisect.bisect_right(starts, s) - 1
    if i < 0:
        i = 0
    out = []
    while i < len(lst) and lst[i][0] < e:
        a, b = lst[i]
        a2, b2 = max(a, s), min(b, e)
        if b2 > a2:
            out.append((a2, b2))
        i += 1
    return out


class SortedIv:
    """A sorted disjoint interval list with a start index for clipping."""

    def __init__(self, iv):
        self.iv = iv
        self.starts = [x[0] for x in iv]

    def clip(self, s, e):
        return clip(self, s, e)

    def measure_in(self, region):
        return sum(total(self.clip(s, e)) for s, e in region)


# ----------------------------------------------------------------------------
# reading a Kineto trace, streaming
# ----------------------------------------------------------------------------

def _open_text(path):
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, "rt", encoding="utf-8", errors="replace")


def iter_trace_events(path, meta):
    """Yield the events of a Kineto trace one at a time (object or array layout).
    Top-level numbers outside the events (baseTimeNanoseconds) go into meta."""
    dec = json.JSONDecoder(parse_float=str)   # floats kept as text: ts to the nanosecond, exactly
    f = _open_text(path)
    buf = ""
    pos = 0
    eof = False

    def more():
        nonlocal buf, pos, eof
        chunk = f.read(1 << 20)
        if not chunk:
            eof = True
            return False
        buf = buf[pos:] + chunk
        pos = 0
        return True

    # find the start of the events array
    head = ""
    while True:
        if not more():
            raise ValueError("no traceEvents in %s" % path)
        stripped = buf.lstrip()
        if stripped.startswith("["):
            pos = len(buf) - len(stripped) + 1
            break
        m = re.search(r'"traceEvents"\s*:\s*\[', buf)
        if m:
            head = buf[:m.start()]
            pos = m.end()
            break
        if len(buf) > (64 << 20):
            raise ValueError("no traceEvents in the first 64 MB of %s" % path)
        # keep reading (pos stays 0, buf grows)
    for k, v in re.findall(r'"(baseTimeNanoseconds)"\s*:\s*(-?\d+)', head):
        meta[k] = int(v)
    while True:
        # skip separators
        while True:
            while pos < len(buf) and buf[pos] in " \t\r\n,":
                pos += 1
            if pos < len(buf):
                break
            if not more():
                f.close()
                return
        if buf[pos] == "]":
            pos += 1
            break
        try:
            obj, end = dec.raw_decode(buf, pos)
        except json.JSONDecodeError:
            if eof or not more():
                f.close()
                return  # truncated: keep the whole events read so far
            continue
        pos = end
        yield obj
        if pos > (4 << 20):
            buf = buf[pos:]
            pos = 0
    tail = buf[pos:] + f.read()
    f.close()
    for k, v in re.findall(r'"(baseTimeNanoseconds)"\s*:\s*(-?\d+)', tail):
        meta.setdefault(k, int(v))


class Trace:
    """The parts of one rank's trace these figures need."""

    def __init__(self, path):
        self.path = path
        self.meta = {}
        self.gpu = []        # (start, end, corr, kind, name)
        self.calls = []      # (start, end, tid, plain name, corr)
        self.ops = []        # (start, end, tid, name, cat)    cpu_op / python_function / Operator
        self.annots = []     # (start, end, tid, name)         user_annotation (CPU side)
        self.pids = {}
        w0 = None
        w1 = None
        for e in iter_trace_events(path, self.meta):
            if e.get("ph") != "X":
                continue
            cat = e.get("cat")
            if cat is None:
                continue
            try:
                s = to_ns(e["ts"])
                d = to_ns(e.get("dur", 0) or 0)
            except (KeyError, TypeError, ValueError):
                continue
            if d < 0:
                d = 0
            t = s + d
            name = e.get("name", "")
            args = e.get("args") or {}
            if cat in GPU_CATS:
                corr = args.get("correlation")
                self.gpu.append((s, t, corr, GPU_CATS[cat], name))
            elif cat in CALL_CATS:
                self.calls.append((s, t, norm_tid(e.get("tid")), plain_call_name(name),
                                   args.get("correlation")))
                p = e.get("pid")
                self.pids[p] = self.pids.get(p, 0) + 1
            elif cat in OP_CATS:
                self.ops.append((s, t, norm_tid(e.get("tid")), name, cat))
                p = e.get("pid")
                self.pids[p] = self.pids.get(p, 0) + 1
            elif cat in ANNOT_CATS:
                self.annots.append((s, t, norm_tid(e.get("tid")), name))
                p = e.get("pid")
                self.pids[p] = self.pids.get(p, 0) + 1
            else:
                continue  # ac2g flows, overhead, Trace span, cuda_sync, gpu_user_annotation, ...
            if w0 is None or s < w0:
                w0 = s
            if w1 is None or t > w1:
                w1 = t
        self.window = (w0, w1)
        self.gpu.sort()
        self.calls.sort(key=lambda c: (c[0], c[1]))
        self.ops.sort(key=lambda o: (o[0], -o[1]))
        self.annots.sort(key=lambda o: (o[0], -o[1]))
        self.call_by_corr = {}
        for c in self.calls:
            if c[4] is not None:
                self.call_by_corr.setdefault(c[4], c)
        # the process whose CPU events these are (for the event log)
        cpu_pids = [p for p in self.pids if isinstance(p, int) or (isinstance(p, str) and p.isdigit())]
        self.cpu_pid = int(max(cpu_pids, key=lambda p: self.pids[p])) if cpu_pids else None


# ----------------------------------------------------------------------------
# inputs
# ----------------------------------------------------------------------------

def find_inputs(path):
    """(trace files, event log files, manifest or None)."""
    if os.path.isfile(path):
        return [path], [], None
    manifest = None
    mp = os.path.join(path, "manifest.json")
    if os.path.isfile(mp):
        with open(mp) as f:
            manifest = json.load(f)
    traces = []
    if manifest and manifest.get("traces"):
        traces = [os.path.join(path, t) for t in manifest["traces"]]
    if not traces:
        tdir = os.path.join(path, "traces") if os.path.isdir(os.path.join(path, "traces")) else path
        traces = sorted(glob.glob(os.path.join(tdir, "*.json")) + glob.glob(os.path.join(tdir, "*.json.gz")))
    events = []
    if manifest and manifest.get("events"):
        events = [os.path.join(path, e) for e in manifest["events"]]
    elif os.path.isdir(os.path.join(path, "events")):
        events = sorted(glob.glob(os.path.join(path, "events", "*.jsonl")))
    return traces, events, manifest


def read_event_log(path):
    with open(path, "rt", encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    if not lines:
        return None
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError:
        return None
    if not isinstance(header.get("pid"), int):
        return None
    recs = []
    for line in lines[1:]:
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue  # a last line cut by a kill
        if isinstance(r, list) and len(r) >= 7:
            recs.append(r)
    return {"header": header, "records": recs}


# ----------------------------------------------------------------------------
# classification
# ----------------------------------------------------------------------------

def comm_matcher(extra):
    pats = [re.compile(p, re.I) for p in COMM_PATTERNS] + [re.compile(p, re.I) for p in (extra or [])]

    def is_comm(name):
        return any(p.search(name) for p in pats)
    return is_comm


def call_kind(name):
    """synchronisation / launch / other, for CUDA/HIP API calls."""
    if name in SYNC_NAMES:
        return "sync"
    if re.match(r"^(cuda|cu|hip)Memcpy", name) and "Async" not in name:
        return "sync"   # a blocking copy
    if name in LAUNCH_NAMES or name in GRAPH_LAUNCH_NAMES:
        return "launch"
    if re.match(r"^(cuda|cu|hip)Mem(cpy|set)", name) and "Async" in name:
        return "launch"   # an async copy / memset
    return "other"


def is_compile_range(name):
    n = name.strip()
    low = n.lower()
    if n.startswith("TorchDynamo Cache Lookup") or n.startswith("Torch-Compiled Region") \
            or n.startswith("## Call CompiledFxGraph"):
        return False
    if low.startswith("triton_") and not low.startswith("triton_compile"):
        return False  # triton_poi_fused_..., triton_red_fused_...: kernels' CPU ops
    if "dynamo" in low:
        return True   # dynamo, dynamo_data: ..., ... (dynamo_timed)
    for key in ("entire_frame_compile", "backend_compile", "inductor_compile", "compile_fx",
                "autotun", "benchmark_all_configs", "triton.compile", "triton_compile",
                "compile_inner"):
        if key in low:
            return True
    if low.startswith("async_compile."):
        return True
    return False


def is_marker_name(name):
    return bool(VLLM_STEP_RE.match(name) or PROFILER_STEP_RE.match(name) or name.startswith("dbo:"))


def vllm_phase(name):
    mc = VLLM_CTX_RE.search(name)
    mg = VLLM_GEN_RE.search(name)
    if not mc or not mg:
        return None, None, None
    n, ctok = int(mc.group(1)), int(mc.group(2))
    m, gtok = int(mg.group(1)), int(mg.group(2))
    if n > 0 and m == 0:
        ph = "prefill"
    elif n == 0 and m > 0:
        ph = "decode"
    elif n > 0 and m > 0:
        ph = "mixed"
    else:
        ph = None
    return ph, ctok, gtok


# ----------------------------------------------------------------------------
# the accounting model: buckets
# ----------------------------------------------------------------------------

def gpu_timeline(tr, is_comm):
    """Busy unions and the idle stretches with their bucket (docs: accounting model)."""
    w0, w1 = tr.window
    busy = merge((s, e) for s, e, _, _, _ in tr.gpu)
    compute = merge((s, e) for s, e, _, k, n in tr.gpu if k == "kernel" and not is_comm(n))
    comm = merge((s, e) for s, e, _, k, n in tr.gpu if k == "kernel" and is_comm(n))
    starts_at = {}
    for a in tr.gpu:
        starts_at.setdefault(a[0], []).append(a)
    stretches = []  # dict(s, e, bucket, ender(activity or None), ender_call)
    prev = w0
    edges = [(s, e, False) for s, e in busy] + [(w1, w1, True)]
    for bs, be, sentinel in edges:
        if bs > prev:
            s, e = prev, bs
            acts = [] if sentinel else starts_at.get(e, [])
            launched = [(tr.call_by_corr[a[2]], a) for a in acts if a[2] in tr.call_by_corr]
            if not acts:
                # nothing follows it: the tail of the window
                stretches.append({"s": s, "e": e, "bucket": "host_idle", "act": None, "call": None,
                                  "tail": True, "acts": []})
            elif not launched:
                stretches.append({"s": s, "e": e, "bucket": "other_idle", "act": acts[0], "call": None,
                                  "tail": False, "acts": acts})
            else:
                call, act = min(launched, key=lambda x: (x[0][0], x[0][1]))
                bucket = "host_idle" if call[0] > s else "other_idle"
                stretches.append({"s": s, "e": e, "bucket": bucket, "act": act, "call": call,
                                  "tail": False, "acts": acts})
        prev = max(prev, be)
    host_idle = [(x["s"], x["e"]) for x in stretches if x["bucket"] == "host_idle"]
    other_idle = [(x["s"], x["e"]) for x in stretches if x["bucket"] == "other_idle"]
    return {
        "busy": SortedIv(busy), "compute": SortedIv(compute), "comm": SortedIv(comm),
        "comm_exposed": SortedIv(subtract(comm, compute)),
        "comm_hidden": SortedIv(intersect(comm, compute)),
        "host_idle": SortedIv(host_idle), "other_idle": SortedIv(other_idle),
        "stretches": stretches, "starts_at": starts_at,
    }


def time_block(tl, region):
    """The five buckets over a region (a sorted disjoint interval list)."""
    win = total(region)
    busy = tl["busy"].measure_in(region)
    compute = tl["compute"].measure_in(region)
    exposed = tl["comm_exposed"].measure_in(region)
    hi = tl["host_idle"].measure_in(region)
    oi = tl["other_idle"].measure_in(region)
    return {
        "window_us": us(win), "compute_us": us(compute), "comm_exposed_us": us(exposed),
        "copy_us": us(busy - compute - exposed), "host_idle_us": us(hi), "other_idle_us": us(oi),
        "gpu_busy_fraction": frac(busy, win), "host_idle_fraction": frac(hi, win),
        "_busy": busy, "_host": hi, "_len": win,
    }


def public_time(tb):
    return {k: v for k, v in tb.items() if not k.startswith("_")}


# ----------------------------------------------------------------------------
# steps
# ----------------------------------------------------------------------------

def step_candidates(tr, logs, tl):
    """Returns (source, [step dicts with cpu_s, cpu_e, label, phase, ...], inferred)."""
    w0, w1 = tr.window
    cpu_ranges = [(s, e, t, n) for s, e, t, n in tr.annots] + [(s, e, t, n) for s, e, t, n, _ in tr.ops]
    vllm = [(s, e, t, n) for s, e, t, n in tr.annots if VLLM_STEP_RE.match(n)
            and VLLM_CTX_RE.search(n) and VLLM_GEN_RE.search(n)]
    vllm.sort()

    def phase_at(t):
        for s, e, _, n in vllm:
            if s <= t < e:
                return vllm_phase(n)
        return None, None, None

    # 2. the hook event log's step_begin/step_end
    base = tr.meta.get("baseTimeNanoseconds")
    if logs and isinstance(base, int) and 0 <= base < 2 ** 62:
        for lg in logs:
            if tr.cpu_pid is not None and lg["header"].get("pid") != tr.cpu_pid:
                continue
            begins = {}
            ends = {}
            for r in lg["records"]:
                if r[1] == "step_begin":
                    begins.setdefault(r[5], (r[0] - base, r[6]))
                elif r[1] == "step_end":
                    ends.setdefault(r[5], r[0] - base)
            if begins:
                steps = []
                order = sorted(begins, key=lambda k: begins[k][0])
                for i, k in enumerate(order):
                    s, detail = begins[k]
                    e = ends.get(k)
                    if e is None:
                        e = begins[order[i + 1]][0] if i + 1 < len(order) else w1
                    ph, ct, gt = phase_at(s)
                    path = (detail or {}).get("path") if isinstance(detail, dict) else None
                    steps.append({"cpu_s": s, "cpu_e": e, "label": "step %s" % k, "path": path,
                                  "phase": ph, "context_tokens": ct, "generation_tokens": gt,
                                  "log_step": k})
                return "event log (step_begin/step_end)", steps, False
    # 2b. the plugin's dbo:step#<n>:<path> ranges
    dbo = [(s, e, t, n) for s, e, t, n in cpu_ranges if DBO_STEP_RE.match(n)]
    if dbo:
        steps = []
        for s, e, t, n in sorted(dbo):
            m = DBO_STEP_RE.match(n)
            ph, ct, gt = phase_at(s)
            steps.append({"cpu_s": s, "cpu_e": e, "label": n, "path": m.group(2), "phase": ph,
                          "context_tokens": ct, "generation_tokens": gt})
        return "dbo step ranges", steps, False
    # 3. vLLM's execute_* annotations
    if vllm:
        steps = []
        for s, e, t, n in vllm:
            ph, ct, gt = vllm_phase(n)
            steps.append({"cpu_s": s, "cpu_e": e, "label": n, "path": None, "phase": ph,
                          "context_tokens": ct, "generation_tokens": gt})
        return "vLLM step annotations (execute_*)", steps, False
    # 4. ProfilerStep#N (any CPU category)
    ps = sorted((s, e, t, n) for s, e, t, n in cpu_ranges if PROFILER_STEP_RE.match(n))
    if ps:
        steps = [{"cpu_s": s, "cpu_e": e, "label": n, "path": None, "phase": None,
                  "context_tokens": None, "generation_tokens": None} for s, e, t, n in ps]
        return "ProfilerStep# annotations", steps, False
    # 4b. training iterations from Optimizer.step#
    opt = sorted((s, e, n) for s, e, t, n in cpu_ranges if OPT_STEP_RE.match(n))
    if opt:
        by = {}
        for s, e, n in opt:
            by.setdefault(OPT_STEP_RE.match(n).group(1), []).append((s, e))
        most = max(len(v) for v in by.values())
        clocks = [v for v in by.values() if len(v) == most]
        ends_ = [max(v[i][1] for v in clocks) for i in range(most)]
        zero = sorted(s for s, e, t, n in cpu_ranges if OPT_ZERO_RE.match(n))
        first_host = min([x[0] for x in cpu_ranges] + [c[0] for c in tr.calls]) if (cpu_ranges or tr.calls) else w0
        start0 = zero[0] if zero and zero[0] < ends_[0] else first_host
        steps = []
        prev = start0
        for i, e in enumerate(ends_):
            steps.append({"cpu_s": prev, "cpu_e": e, "label": "iteration %d" % (i + 1), "path": None,
                          "phase": None, "context_tokens": None, "generation_tokens": None})
            prev = e
        return "Optimizer.step# annotations (training iterations)", steps, False
    # 5. vLLM's gpu_model_runner ranges
    gmr = sorted((s, e, n) for s, e, t, n in cpu_ranges if n.startswith("gpu_model_runner: "))
    pre = [x for x in gmr if x[2] == "gpu_model_runner: preprocess"]
    if pre:
        steps = []
        for i, (s, e, n) in enumerate(pre):
            nxt = pre[i + 1][0] if i + 1 < len(pre) else None
            end = max(x[1] for x in gmr if x[0] >= s and (nxt is None or x[0] < nxt))
            steps.append({"cpu_s": s, "cpu_e": end, "label": "model runner step %d" % (i + 1),
                          "path": None, "phase": None, "context_tokens": None, "generation_tokens": None})
        return "gpu_model_runner ranges", steps, False
    # 6. long GPU idle gaps (inferred)
    busy = tl["busy"].iv
    gaps = [(busy[i][1], busy[i + 1][0]) for i in range(len(busy) - 1)]
    if gaps:
        med = median([b - a for a, b in gaps])
        thr = max(1_000_000, 20 * med)
        cuts = [(a, b) for a, b in gaps if (b - a) >= thr]
        if cuts:
            segs = []
            cur = busy[0][0]
            for a, b in cuts:
                segs.append((cur, a))
                cur = b
            segs.append((cur, busy[-1][1]))
            steps = [{"cpu_s": s, "cpu_e": e, "label": "inferred %d" % (i + 1), "path": None,
                      "phase": None, "context_tokens": None, "generation_tokens": None}
                     for i, (s, e) in enumerate(segs)]
            return "GPU idle gaps (inferred)", steps, True
    # 7. the whole trace
    return "whole trace (inferred)", [{"cpu_s": w0, "cpu_e": w1, "label": "whole trace", "path": None,
                                       "phase": None, "context_tokens": None,
                                       "generation_tokens": None}], True


def assign_steps(tr, cands, inferred):
    """GPU activity -> the step whose CPU window holds its launching call; drop empty steps."""
    cands = sorted(cands, key=lambda x: (x["cpu_s"], x["cpu_e"]))
    starts = [c["cpu_s"] for c in cands]
    for c in cands:
        c["acts"] = []
    for a in tr.gpu:
        if inferred:
            t = a[0]
        else:
            call = tr.call_by_corr.get(a[2])
            if call is None:
                continue
            t = call[0]
        i = bisect.bisect_right(starts, t) - 1
        # the latest-starting step whose window holds t (markers rarely overlap: look back 64)
        lo = max(-1, i - 64)
        while i > lo:
            c = cands[i]
            if c["cpu_s"] <= t <= c["cpu_e"]:
                c["acts"].append(a)
                break
            i -= 1
    steps = [c for c in cands if c["acts"]]
    for c in steps:
        c["win_s"] = c["cpu_s"]
        c["win_e"] = max(c["cpu_e"], max(a[1] for a in c["acts"]))
    for i, c in enumerate(steps):
        c["number"] = i + 1
        c["window"] = c["win_e"] - c["win_s"]
        c["period"] = (steps[i + 1]["cpu_s"] - c["cpu_s"]) if i + 1 < len(steps) else c["window"]
    return steps, cands


# ----------------------------------------------------------------------------
# stalls and steady state
# ----------------------------------------------------------------------------

def compile_union(tr):
    rng = [(s, e, n) for s, e, t, n in tr.annots if is_compile_range(n)] + \
          [(s, e, n) for s, e, t, n, _ in tr.ops if is_compile_range(n)]
    rng.sort(key=lambda x: (x[0], -x[1]))
    runs = []  # outermost runs (any thread): (s, e, name of the first)
    for s, e, n in rng:
        if runs and s < runs[-1][1]:
            if e > runs[-1][1]:
                runs[-1][1] = e
        else:
            runs.append([s, e, n])
    return SortedIv(merge((s, e) for s, e, _ in rng)), runs


def capture_windows(tr):
    per = {}
    for s, e, t, n, _ in tr.calls:
        if n in CAPTURE_BEGIN or n in CAPTURE_END:
            per.setdefault(t, []).append((s, e, n in CAPTURE_BEGIN))
    wins = []
    for t, lst in per.items():
        depth = 0
        open_s = None
        for s, e, is_begin in sorted(lst):
            if is_begin:
                if depth == 0:
                    open_s = s
                depth += 1
            elif depth > 0:
                depth -= 1
                if depth == 0:
                    wins.append((open_s, e))
        if depth > 0 and open_s is not None:
            wins.append((open_s, tr.window[1]))
    return SortedIv(merge(wins))


def find_stalls(steps, comp, comp_runs, capt):
    """Marks each step's stall (or None) per 'Steady state and stalls'."""
    for st in steps:
        ps, pe = st["cpu_s"], st["cpu_s"] + st["period"]
        st["compile_ns"] = total(comp.clip(ps, pe))
        st["capture_ns"] = total(capt.clip(ps, pe))
        st["stall"] = None
        names = {}
        for s, e, n in comp_runs:
            ov = min(e, pe) - max(s, ps)
            if ov > 0:
                names[n] = names.get(n, 0) + ov
        st["compile_ranges"] = sorted(names.items(), key=lambda x: -x[1])
        if st["compile_ns"] >= COMPILE_MIN_NS and st["compile_ns"] >= COMPILE_MIN_SHARE * st["period"]:
            st["stall"] = {"cause": "compile"}
        elif st["capture_ns"] >= COMPILE_MIN_NS and st["capture_ns"] >= COMPILE_MIN_SHARE * st["period"]:
            st["stall"] = {"cause": "graph capture"}
    phases = {}
    for st in steps:
        phases.setdefault(st["phase"], []).append(st)
    for ph, lst in phases.items():
        for st in lst:
            others = [o["period"] for o in lst if o is not st]
            st["outlier_test"] = None
            if len(others) >= 4:
                med = median(others)
                mad = median([abs(x - med) for x in others])
                lim = med + MAD_K * MAD_SCALE * mad
                is_out = st["period"] > lim and st["period"] > 2 * med
                st["outlier_test"] = {"others": len(others), "median_us": us(med), "mad_us": us(mad),
                                      "limit_us": us(max(lim, 2 * med)), "ratio": round(st["period"] / med, 3) if med else None}
            elif len(others) == 2 and len(lst) == 3:
                med = median(others)
                is_out = st["period"] > 10 * med
                st["outlier_test"] = {"others": 2, "median_us": us(med), "limit_us": us(10 * med),
                                      "ratio": round(st["period"] / med, 3) if med else None}
            else:
                is_out = False
            if is_out and st["stall"] is None:
                st["stall"] = {"cause": "outlier"}
            st["is_outlier"] = is_out
        steady = [o["period"] for o in lst if o["stall"] is None]
        med_steady = median(steady) if steady else None
        for st in lst:
            st["phase_steady_median"] = med_steady
            if st["stall"] is not None:
                st["stall"]["extra_ns"] = (st["period"] - med_steady) if med_steady is not None else None
    return phases


# ----------------------------------------------------------------------------
# launch-to-start delay (queueing)
# ----------------------------------------------------------------------------

def launch_delay(tr, tl, region=None):
    delays = []
    first = None
    for a in tr.gpu:
        call = tr.call_by_corr.get(a[2])
        if call is None or call[3] in GRAPH_LAUNCH_NAMES:
            continue
        d = a[0] - call[1]
        delays.append(d)
        key = (call[0], a[0])
        if first is None or key < first[0]:
            first = (key, d)
    queued = 0
    queued_region = 0
    stretches_q = 0
    for x in tl["stretches"]:
        if x["bucket"] != "host_idle" or x["tail"]:
            continue
        ends = [tr.call_by_corr[a[2]][1] for a in x["acts"] if a[2] in tr.call_by_corr]
        if not ends:
            continue
        q0 = max(x["s"], min(ends) + QUEUE_SLACK_NS)
        if x["e"] > q0:
            queued += x["e"] - q0
            stretches_q += 1
            if region is not None:
                queued_region += total(intersect([(q0, x["e"])], region))
    if not delays:
        return None
    mn = min(delays)
    return {
        "activities": len(delays),
        "median_us": us(median(delays)), "p90_us": us(percentile_linear(delays, 90)),
        "max_us": us(max(delays)), "min_us": us(mn), "first_us": us(first[1]) if first else None,
        "queued_in_host_idle_us": us(queued),
        "queued_in_host_idle_steady_us": us(queued_region) if region is not None else None,
        "stretches_with_queueing": stretches_q,
        "clock_offset_suspect": mn > CLOCK_SUSPECT_NS,
    }


# ----------------------------------------------------------------------------
# host time: what the CPU did while the GPU waited
# ----------------------------------------------------------------------------

class ThreadModel:
    """Per (canonical) thread, the runs of each kind of event."""

    KINDS = ("sync", "launch", "other_cuda", "named", "cpu_ops")

    def __init__(self, tr, marker_names):
        # CUDA calls per thread
        calls_by_tid = {}
        for c in tr.calls:
            calls_by_tid.setdefault(c[2], []).append(c)
        self.call_count = {t: len(v) for t, v in calls_by_tid.items()}
        # the main thread: most CUDA/HIP calls (ties: the lowest id)
        self.main = None
        if self.call_count:
            self.main = sorted(self.call_count, key=lambda t: (-self.call_count[t], tid_key(t)))[0]
        # operator runs per thread
        ops_by_tid = {}
        for o in tr.ops:
            ops_by_tid.setdefault(o[2], []).append(o)
        self.alias = {}
        call_starts = {t: [c[0] for c in v] for t, v in calls_by_tid.items()}
        for t, ops in ops_by_tid.items():
            if t in calls_by_tid:
                continue
            runs = merge((o[0], o[1]) for o in ops)
            counts = {}
            for ct, starts in call_starts.items():
                n = 0
                for rs, re_ in runs:
                    n += bisect.bisect_left(starts, re_) - bisect.bisect_left(starts, rs)
                if n:
                    counts[ct] = n
            if counts:
                self.alias[t] = sorted(counts, key=lambda x: (-counts[x], tid_key(x)))[0]
        # events by kind per canonical thread
        ev = {}

        def add(t, kind, s, e, name, extra=None):
            ev.setdefault(self.canon(t), {}).setdefault(kind, []).append((s, e, name, extra))
        for c in tr.calls:
            k = call_kind(c[3])
            add(c[2], {"sync": "sync", "launch": "launch", "other": "other_cuda"}[k], c[0], c[1], c[3], c)
        for s, e, t, n in tr.annots:
            if n in marker_names or is_marker_name(n):
                continue
            add(t, "named", s, e, n)
        for s, e, t, n, cat in tr.ops:
            if n in marker_names or is_marker_name(n):
                continue
            if n.startswith("gpu_model_runner: "):
                add(t, "named", s, e, n)
            else:
                add(t, "cpu_ops", s, e, n)
        self.runs = {}
        self.innermost = {}
        for t, kinds in ev.items():
            for kind, lst in kinds.items():
                lst.sort(key=lambda x: (x[0], -(x[1] - x[0])))
                runs = []
                for s, e, n, extra in lst:
                    if runs and s < runs[-1][1]:
                        if e > runs[-1][1]:
                            runs[-1][1] = e
                    else:
                        runs.append([s, e, n, extra])
                self.runs[(t, kind)] = (SortedIv([(r[0], r[1]) for r in runs]), runs)
            if "cpu_ops" in kinds:
                self.innermost[t] = self._innermost_segments(kinds["cpu_ops"])

    def canon(self, t):
        return self.alias.get(t, t)

    @staticmethod
    def _innermost_segments(lst):
        """Disjoint segments labelled by the innermost (latest-started open) operator."""
        bounds = sorted(set([x[0] for x in lst] + [x[1] for x in lst]))
        segs = []
        stack = []
        i = 0
        n = len(lst)
        for bi in range(len(bounds) - 1):
            t = bounds[bi]
            while i < n and lst[i][0] == t:
                stack.append(lst[i])
                i += 1
            while stack and stack[-1][1] <= t:
                stack.pop()
            if stack:
                nm = stack[-1][2]
                if segs and segs[-1][1] == t and segs[-1][2] == nm:
                    segs[-1][1] = bounds[bi + 1]
                else:
                    segs.append([t, bounds[bi + 1], nm])
        return (SortedIv([(s[0], s[1]) for s in segs]), segs)


def host_causes(tr, tl, tm, steps, ub_threads, startup, region, between_ok, detailed=True):
    """Split the host_idle bucket inside region (sorted disjoint list) into causes."""
    causes = {k: 0 for k in ("launch_calls", "synchronisation", "other_cuda_calls", "named", "cpu_ops",
                             "ubatch_startup", "between_steps", "untraced")}
    named = {}
    cpu_ops = {}
    innermost = {}
    launch_runs = set()
    sync_runs = set()
    step_cpu = SortedIv(merge((s["cpu_s"], s["cpu_e"]) for s in steps)) if between_ok else None
    kind_cause = {"sync": "synchronisation", "launch": "launch_calls", "other_cuda": "other_cuda_calls",
                  "named": "named", "cpu_ops": "cpu_ops"}
    reg = SortedIv(region)
    for x in tl["stretches"]:
        if x["bucket"] != "host_idle":
            continue
        pieces = reg.clip(x["s"], x["e"])
        if not pieces:
            continue
        # the threads followed
        if x["call"] is None:
            follow = [tm.main] if tm.main is not None else []
        else:
            first = tm.canon(x["call"][2])
            follow = [first]
            st = x.get("step")
            if st is not None and st["number"] in ub_threads:
                for t in ub_threads[st["number"]]:
                    if t not in follow:
                        follow.append(t)
        remaining = pieces
        for t in follow:
            for kind in ThreadModel.KINDS:
                if not remaining:
                    break
                entry = tm.runs.get((t, kind))
                if entry is None:
                    continue
                iv, runs = entry
                got = []
                for s, e in remaining:
                    i0 = bisect.bisect_right(iv.starts, s) - 1
                    if i0 < 0:
                        i0 = 0
                    i = i0
                    while i < len(runs) and runs[i][0] < e:
                        a, b = max(runs[i][0], s), min(runs[i][1], e)
                        if b > a:
                            got.append((a, b))
                            d = b - a
                            c = kind_cause[kind]
                            causes[c] += d
                            if kind == "named":
                                named[runs[i][2]] = named.get(runs[i][2], 0) + d
                            elif kind == "cpu_ops":
                                cpu_ops[runs[i][2]] = cpu_ops.get(runs[i][2], 0) + d
                                if detailed and t in tm.innermost:
                                    siv, segs = tm.innermost[t]
                                    j = max(0, bisect.bisect_right(siv.starts, a) - 1)
                                    while j < len(segs) and segs[j][0] < b:
                                        a2, b2 = max(segs[j][0], a), min(segs[j][1], b)
                                        if b2 > a2:
                                            innermost[segs[j][2]] = innermost.get(segs[j][2], 0) + (b2 - a2)
                                        j += 1
                            elif kind == "launch":
                                launch_runs.add((t, runs[i][0]))
                            elif kind == "sync":
                                sync_runs.add((t, runs[i][0]))
                        i += 1
                if got:
                    remaining = subtract(remaining, merge(got))
            if not remaining:
                break
        if remaining and startup:
            su = intersect(remaining, startup)
            if su:
                causes["ubatch_startup"] += total(su)
                remaining = subtract(remaining, su)
        if remaining and step_cpu is not None:
            outside = subtract(remaining, intersect(remaining, step_cpu.iv))
            if outside:
                causes["between_steps"] += total(outside)
                remaining = subtract(remaining, outside)
        causes["untraced"] += total(remaining)
    hi = sum(causes.values())

    def share(v):
        return frac(v, hi)
    out = {
        "host_idle_us": us(hi),
        "causes": {k: {"us": us(v), "share": share(v)} for k, v in causes.items()},
        "launch_calls": len(launch_runs), "sync_calls": len(sync_runs),
        "named": [{"name": n, "us": us(v), "share": share(v)} for n, v in
                  sorted(named.items(), key=lambda x: -x[1])[:5]],
        "cpu_ops": [{"name": n, "us": us(v), "share": share(v)} for n, v in
                    sorted(cpu_ops.items(), key=lambda x: -x[1])[:5]],
    }
    if detailed:
        out["cpu_ops_innermost"] = [{"name": n, "us": us(v), "share": share(v)} for n, v in
                                    sorted(innermost.items(), key=lambda x: -x[1])[:5]]
    if hi:
        largest = max(causes.items(), key=lambda x: x[1])
        out["largest"] = largest[0]
        items = [(k, v) for k, v in causes.items() if k not in ("named", "cpu_ops")] + \
            list(named.items()) + list(cpu_ops.items())
        top = max(items, key=lambda x: x[1])
        out["top"] = {"name": top[0], "us": us(top[1]), "share": share(top[1])}
    else:
        out["largest"] = None
        out["top"] = None
    return out


# ----------------------------------------------------------------------------
# microbatch threads per step
# ----------------------------------------------------------------------------

def microbatch_threads(tr, steps, source, tm):
    """{step number: [canonical launching threads in order of first launch]} for microbatched steps."""
    def step_marker(n):
        return bool(VLLM_STEP_RE.match(n) or PROFILER_STEP_RE.match(n) or DBO_STEP_RE.match(n))
    marker_tids = set(tm.canon(t) for s, e, t, n in tr.annots if step_marker(n))
    marker_tids |= set(tm.canon(t) for s, e, t, n, _ in tr.ops if step_marker(n))
    out = {}
    for st in steps:
        firsts = {}
        counts = {}
        for a in st["acts"]:
            call = tr.call_by_corr.get(a[2])
            if call is None:
                continue
            t = tm.canon(call[2])
            counts[t] = counts.get(t, 0) + 1
            if t not in firsts or call[0] < firsts[t]:
                firsts[t] = call[0]
        cand = [t for t in firsts if t not in marker_tids]
        if source.startswith("event log"):
            ok = st.get("path") in ("eager_microbatched", "graph_capture", "graph_replay") and len(cand) >= 2
            if st.get("path") == "graph_replay":
                ok = False  # one launch for both microbatches: no per-thread microbatch
        else:
            # launching threads: exactly two threads other than the main one, >= 2 each, within 4x
            if tm.main is not None and tm.main in cand and len(cand) == 3:
                cand = [t for t in cand if t != tm.main]
            ok = len(cand) == 2 and min(counts[t] for t in cand) >= 2 and \
                max(counts[t] for t in cand) <= 4 * min(counts[t] for t in cand)
        if ok:
            out[st["number"]] = sorted(cand, key=lambda t: firsts[t])
    return out


def startup_windows(tr, steps, ub, tm):
    wins = []
    for st in steps:
        if st["number"] not in ub:
            continue
        threads = set(ub[st["number"]])
        firsts = {}
        for c in tr.calls:
            if c[0] < st["cpu_s"] or c[0] > st["cpu_e"]:
                continue
            t = tm.canon(c[2])
            if t in threads and t not in firsts:
                firsts[t] = c[0]
        if len(firsts) == len(threads):
            wins.append((st["cpu_s"], max(firsts.values())))
    return merge(wins)


# ----------------------------------------------------------------------------
# verdict
# ----------------------------------------------------------------------------

def main_phase_busy(tl, phases, steady_region):
    """GPU busy share of the main phase's steady steps: the phase whose steady steps' windows cover the
    most time (a phase whose every step stalled only where none has a steady step); without vLLM's
    phases, of the steady region. (Added with the gpu-bound label, from docs/analysis.md "Verdict",
    by the verdict's author: not part of the independent writing.)"""
    named = {p: lst for p, lst in phases.items() if p is not None}
    if not named:
        tb = time_block(tl, steady_region)
        return tb["gpu_busy_fraction"]
    regions = {}
    for ph, lst in named.items():
        steady = [s for s in lst if s["stall"] is None]
        regions[ph] = (merge((s["win_s"], s["win_e"]) for s in (steady or lst)), bool(steady))
    pool = {p: r for p, (r, ok) in regions.items() if ok} or {p: r for p, (r, _) in regions.items()}
    main = max(pool, key=lambda p: total(pool[p]))
    return time_block(tl, pool[main])["gpu_busy_fraction"]


def verdict(tl, host_fraction, basis, region, capt, window_host, busy=None):
    comm_busy = tl["comm"].measure_in(region)
    comm_hidden = tl["comm_hidden"].measure_in(region)
    hidden_frac = frac(comm_hidden, comm_busy)
    capture_host = total(intersect(tl["host_idle"].iv, capt.iv)) if capt.iv else 0
    if window_host and capture_host >= 0.5 * window_host:
        label = "graph-capture"
    elif host_fraction is not None and host_fraction >= HOST_BOUND:
        label = "host-bound"
    elif comm_busy == 0:
        label = "gpu-bound" if busy is not None and busy >= GPU_BOUND else "no-communication"
    elif hidden_frac is not None and comm_hidden / comm_busy >= OVERLAPPED:
        label = "overlapped"
    else:
        label = "not-overlapped"
    return {"label": label, "host_test": {"fraction": None if host_fraction is None else round(host_fraction, 3),
                                          "basis": basis},
            "comm_busy_steady_us": us(comm_busy), "comm_hidden_fraction_steady": hidden_frac,
            "capture_share_of_window_host_idle": frac(capture_host, window_host),
            "host_idle_20pct_reason": host_fraction is not None and host_fraction >= 0.2}


# ----------------------------------------------------------------------------
# one figure per function, per rank
# ----------------------------------------------------------------------------

def figure_steps(steps):
    out = []
    for st in steps:
        d = {
            "number": st["number"], "label": st["label"], "phase": st["phase"], "path": st.get("path"),
            "start_us": us(st["cpu_s"]), "cpu_end_us": us(st["cpu_e"]),
            "period_us": us(st["period"]), "window_us": us(st["window"]),
            "period_alt_us": us(st.get("period_alt")),
            "gpu_busy_fraction": st.get("busy_frac"), "host_idle_fraction": st.get("host_frac"),
            "activities": len(st["acts"]),
            "compile_us": us(st["compile_ns"]), "capture_us": us(st["capture_ns"]),
            "stall": None,
        }
        if st["stall"] is not None:
            d["stall"] = {
                "cause": st["stall"]["cause"],
                "extra_us": us(st["stall"]["extra_ns"]),
                "phase_median_us": us(st["phase_steady_median"]),
                "ratio_to_phase_median": round(st["period"] / st["phase_steady_median"], 3)
                if st["phase_steady_median"] else None,
                "compile_ranges": [{"name": n, "us": us(v)} for n, v in st["compile_ranges"][:3]],
                "outlier_test": st.get("outlier_test"),
                "also_outlier": st.get("is_outlier", False),
                "host_causes_top": st.get("stall_top"),
                "host_causes_largest": st.get("stall_largest"),
            }
        out.append(d)
    return out


def figure_host(tr, ub, tm):
    """docs 'Host': launch calls against kernels, graph launches, profiled microbatch threads."""
    launches = [c for c in tr.calls if c[3] in LAUNCH_NAMES]
    graph = [c for c in tr.calls if c[3] in GRAPH_LAUNCH_NAMES]
    kernels = [a for a in tr.gpu if a[3] == "kernel"]
    queue = []
    for a in kernels:
        c = tr.call_by_corr.get(a[2])
        if c is not None and c[3] in LAUNCH_NAMES:
            queue.append(a[0] - c[0])
    ub_threads = set(t for v in ub.values() for t in v)
    ub_ops = any(tm.canon(o[2]) in ub_threads for o in tr.ops)
    return {
        "launches": len(launches), "launch_us": us(sum(c[1] - c[0] for c in launches)),
        "median_launch_us": us(median([c[1] - c[0] for c in launches])) if launches else None,
        "median_kernel_us": us(median([a[1] - a[0] for a in kernels])) if kernels else None,
        "median_queue_us": us(median(queue)) if queue else None,
        "graph_launches": len(graph),
        "long_graph_launches": [{"start_us": us(c[0]), "us": us(c[1] - c[0])} for c in graph
                                if c[1] - c[0] >= 1_000_000],
        "microbatch_thread_cpu_ops_profiled": ub_ops,
    }


def headline(label, host_frac, hc):
    if label != "host-bound":
        return label
    txt = "host-bound (GPU idle waiting for the host %d%%" % round(100 * host_frac)
    if hc and hc.get("largest"):
        top = hc["top"]
        txt += ": %d%% of it %s" % (round(100 * top["share"]), top["name"])
    return txt + ")"


def figure_behind(steps):
    if len(steps) < 2:
        return None
    windows = sum(s["window"] for s in steps)
    wall = total(merge((s["win_s"], s["win_e"]) for s in steps))   # the wall clock the windows cover
    over = []
    for i in range(len(steps) - 1):
        o = steps[i]["win_e"] - steps[i + 1]["cpu_s"]
        if o > 0:
            over.append(o)
    return {"steps": len(steps), "overlapping": len(over), "windows_us": us(windows), "wall_us": us(wall),
            "periods_sum_us": us(sum(s["period"] for s in steps)),
            "median_overlap_us": us(median(over)) if over else None,
            "behind": windows >= (1 + BEHIND_SHARE) * wall}


def figure_phases(tl, phases, tr, tm, steps, ub, startup, between_ok):
    out = {}
    for ph, lst in phases.items():
        if ph is None:
            continue
        steady = [s for s in lst if s["stall"] is None]
        use = steady if steady else lst
        region = merge((s["win_s"], s["win_e"]) for s in use)
        tb = time_block(tl, region)
        out[ph] = {
            "steps": len(lst), "stalled": len(lst) - len(steady),
            "median_steady_period_us": us(median([s["period"] for s in steady])) if steady else None,
            "median_period_all_us": us(median([s["period"] for s in lst])),
            "median_window_us": us(median([s["window"] for s in use])),
            "over": "steady steps" if steady else "all steps (every step stalled)",
            "time_us": us(tb["_len"]),
            "gpu_busy_fraction": tb["gpu_busy_fraction"], "host_idle_fraction": tb["host_idle_fraction"],
            "host_bound": tb["host_idle_fraction"] is not None and tb["host_idle_fraction"] >= HOST_BOUND,
            "host_causes": host_causes(tr, tl, tm, steps, ub, startup, region, between_ok),
        }
    return out


def analyse_rank(path, logs, manifest):
    tr = Trace(path)
    extra_comm = (manifest or {}).get("comm_kernels") or []
    is_comm = comm_matcher(extra_comm)
    tl = gpu_timeline(tr, is_comm)
    w0, w1 = tr.window
    window = [(w0, w1)]
    source, cands, inferred = step_candidates(tr, logs, tl)
    steps, _all = assign_steps(tr, cands, inferred)
    # alternative period reading (report-schema.md): less the time in no step's window
    union_w = merge((s["win_s"], s["win_e"]) for s in steps)
    for i, st in enumerate(steps):
        pe = st["cpu_s"] + st["period"]
        st["period_alt"] = total(intersect([(st["cpu_s"], pe)], union_w))
    marker_names = set(s["label"] for s in steps if not inferred)
    tm = ThreadModel(tr, marker_names)
    comp, comp_runs = compile_union(tr)
    capt = capture_windows(tr)
    phases = find_stalls(steps, comp, comp_runs, capt)
    # the step that each idle stretch's ending activity belongs to
    act_step = {}
    for st in steps:
        for a in st["acts"]:
            act_step[id(a)] = st
    for x in tl["stretches"]:
        x["step"] = act_step.get(id(x["act"])) if x["act"] is not None else None
    ub = microbatch_threads(tr, steps, source, tm)
    startup = startup_windows(tr, steps, ub, tm)
    between_ok = not inferred
    # per-step measures over the step window
    for st in steps:
        reg = [(st["win_s"], st["win_e"])]
        tb = time_block(tl, reg)
        st["busy_frac"] = tb["gpu_busy_fraction"]
        st["host_frac"] = tb["host_idle_fraction"]
        if st["stall"] is not None:
            hc = host_causes(tr, tl, tm, steps, ub, startup, reg, between_ok, detailed=False)
            st["stall_top"] = hc["top"]
            st["stall_largest"] = hc["largest"]
    steady = [s for s in steps if s["stall"] is None]
    stalls = [s for s in steps if s["stall"] is not None]
    if inferred:
        steady_region = subtract(window, merge((s["win_s"], s["win_e"]) for s in stalls))
        basis = "host idle / whole window (steps inferred), stalls' windows left out"
    else:
        steady_region = merge((s["win_s"], s["win_e"]) for s in (steady if steady else steps))
        basis = "in-step host idle / time in steps (steps from markers), steady steps"
    tb_win = time_block(tl, window)
    tb_steady = time_block(tl, steady_region)
    tb_all_steps = time_block(tl, merge((s["win_s"], s["win_e"]) for s in steps)) if steps else None
    host_frac = (tb_steady["_host"] / tb_steady["_len"]) if tb_steady["_len"] else None
    vd = verdict(tl, host_frac, basis, steady_region, capt, tb_win["_host"], main_phase_busy(tl, phases, steady_region))
    ld = launch_delay(tr, tl, steady_region)
    hc_steady = host_causes(tr, tl, tm, steps, ub, startup, steady_region, between_ok)
    hc_window = host_causes(tr, tl, tm, steps, ub, startup, window, between_ok)
    out = {
        "trace": os.path.basename(path),
        "steps_source": source, "steps_inferred": inferred,
        "main_thread": tm.main, "thread_aliases": {str(k): v for k, v in sorted(tm.alias.items(), key=lambda x: tid_key(x[0]))},
        "microbatched_steps": {str(k): v for k, v in ub.items()},
        "time": public_time(tb_win),
        "time_in_steps_all": public_time(tb_all_steps) if tb_all_steps else None,
        "time_steady": public_time(tb_steady),
        "host_test": vd["host_test"],
        "host_test_all_steps": frac(tb_all_steps["_host"], tb_all_steps["_len"]) if tb_all_steps else None,
        "verdict": vd,
        "headline": headline(vd["label"], host_frac, hc_steady),
        "host": figure_host(tr, ub, tm),
        "steps": figure_steps(steps),
        "step_count": len(steps),
        "stall_count": len(stalls),
        "stalls_extra_us": us(sum(s["stall"]["extra_ns"] or 0 for s in stalls)),
        "behind": figure_behind(steps),
        "phases": figure_phases(tl, phases, tr, tm, steps, ub, startup, between_ok),
        "launch_delay": ld,
        "host_causes": hc_steady,
        "host_causes_window": hc_window,
        "compile_union_us": us(total(comp.iv)),
        "capture_windows_us": us(total(capt.iv)),
        "empty_steps_dropped": len(_all) - len(steps),
        "gpu_activities": len(tr.gpu),
        "unlaunched_activities": sum(1 for a in tr.gpu if a[2] not in tr.call_by_corr),
    }
    return out


def analyse_input(path):
    traces, event_files, manifest = find_inputs(path)
    logs = [lg for lg in (read_event_log(p) for p in event_files) if lg]
    ranks = [analyse_rank(t, logs, manifest) for t in traces]
    res = {"ranks": ranks}
    if len(ranks) == 1:
        r = ranks[0]
        res["verdict"] = r["verdict"]["label"]
        res["host_test"] = r["host_test"]
    return res


def main(argv):
    out = {}
    for p in argv:
        out[p] = analyse_input(p)
    json.dump(out, sys.stdout, indent=1, default=str)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
