"""Independent reference: the AFD step as a pipeline (docs/analysis.md, "The step as a pipeline (AFD)").

Written from docs/analysis.md ("The step as a pipeline (AFD)", "Disaggregated round trips (AFD)",
"Steps", "Step time: period and window", "Steady state and stalls", "Does DBO pay: the effect taken
apart", "Who is communication") and docs/bundle-format.md only, without reading dbo_trace/ or the
tool's tests. Standard library only; plain loops. The readings chosen where the docs are silent are
in NOTES-pipeline.md beside this file.

    python3 tests/references/independent_pipeline.py BUNDLE [BUNDLE ...]

prints one JSON object {bundle_path: figures}; times in microseconds unless named _ms.

Outline
-------
* Attention trace: ``BUNDLE/traces/*.json.gz``; FFN trace (optional): ``BUNDLE/peer/traces/*.json.gz``,
  its times moved onto the attention's clock by (ffn_base - att_base) / 1000 us
  (``baseTimeNanoseconds``).
* Steps: the attention trace's ``execute_*`` user annotations. A GPU activity belongs to the step
  whose CPU range [ts, ts + dur] holds its launch call (joined on ``args.correlation``; a replayed
  kernel carries its ``cudaGraphLaunch``'s). Window = CPU start to the later of the CPU end and the
  end of the last GPU work launched; steps that launched nothing are not reported. Period = start to
  the next reported step's start; the last step's period is its window.
* Stalls (not steady): compile / graph capture (>= 1 ms and >= 5% of the period in their union),
  outliers (leave-one-out against the phase's other steps: > median + 3.5 x 1.4826 x MAD and > 2 x
  median with >= 4 others; > 10 x the others' median in a phase of 3).
* Data plane: SendRecv (or NCCL Send/Recv) kernels on a stream that also ran compute kernels, or
  launched by a cudaGraphLaunch. Per step, in start order; microbatches by launching threads (every
  data kernel eagerly launched, by exactly two threads), else kernel order
  (compute started between the first data kernel's end and the second's start, and 4L data
  kernels: ``S0 S1 (R0 S0 R1 S1) x (L-1) R0 R1``), else one microbatch (no compute there) or "not
  told apart" (one sequence). Per microbatch the kernels alternate send, receive; the k-th send is
  paired with the k-th receive.
* FFN matching ("Parts"): the FFN's data kernels in start order alternate receive and send; both
  parities tried. Round trips in send order; each is matched to the first FFN receive (after the
  previous match) whose end >= s0, with the FFN data kernel that follows it as the send, when
  f1 <= g0 + 5 and g0 <= r1 + 5. The parity kept matches >= 90% of the best count and, among those,
  has the smallest median (f1 - s0).
* Per visit, per step, bounds, overlap: as the pipeline section says (see NOTES-pipeline.md).
* Host lag ("Disaggregated round trips", "Host lag"): send end to the start of the receive's launch
  call, clipped into [send end, receive start]; the rest = the round trip less it. A round trip is
  "in flight" (for "beside") over its rest only. Per step: hidden_share (the rests' hidden time over
  the rests), overlapped_share (the rests' time under the other microbatch's compute or beside its
  in-flight round trips, over the rests) and label (overlapped at >= 0.20, not-overlapped below,
  single-batch for a one-microbatch step). The run's overlapped_share is over the rests too.
"""

import bisect
import glob
import gzip
import json
import os
import re
import statistics
import sys

TOL_US = 5.0

# --- "Who is communication" -------------------------------------------------------------------
_COMM_PATTERNS = [
    r"^nccl", r"ncclDevKernel", r"ncclKernel", r"rccl",
    r"deep_ep", r"deepep", r"::ep::", r"ep::intranode", r"ep::internode", r"ep::internode_ll",
    r"notify_dispatch", r"notify_combine", r"cached_notify",
    r"pplx", r"all_to_all", r"alltoall",
    r"nvshmem",
    r"cross_device_reduce", r"custom_all_reduce", r"all_reduce",
    r"all_gather", r"reduce_scatter",
    r"moe_dispatch", r"ep_combine", r"a2a_dispatch", r"all2all_combine", r"dispatch_kernel",
    r"combine_kernel",
    r"symm_mem", r"multimem", r"two_shot", r"one_shot_all",
]
_COMM_RE = re.compile("|".join(_COMM_PATTERNS), re.IGNORECASE)


def is_comm(name):
    return _COMM_RE.search(name) is not None


def is_p2p(name):
    if "SendRecv" in name:
        return True
    return bool(re.match(r"^(ncclDevKernel|ncclKernel)_(Send|Recv)(_|$)", name))


_COMPILE_RE = re.compile(
    r"dynamo|entire_frame_compile|backend_compile|inductor_compile|compile_fx|^async_compile\.|"
    r"autotun|benchmark_all_configs|triton\.compile|triton_compile|compile_inner", re.IGNORECASE)
_COMPILE_EXCLUDE_RE = re.compile(
    r"TorchDynamo Cache Lookup|Torch-Compiled Region|## Call CompiledFxGraph", re.IGNORECASE)

_CAPTURE_BEGIN = ("cudaStreamBeginCapture", "cuStreamBeginCapture", "hipStreamBeginCapture")
_CAPTURE_END = ("cudaStreamEndCapture", "cuStreamEndCapture", "hipStreamEndCapture")


# --- intervals --------------------------------------------------------------------------------

def union(intervals):
    out = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1][1] = b
        else:
            out.append([a, b])
    return out


def subtract(xs, ys):
    """xs minus ys; both sorted disjoint unions."""
    out = []
    j = 0
    for a, b in xs:
        cur = a
        while j < len(ys) and ys[j][1] <= cur:
            j += 1
        k = j
        while k < len(ys) and ys[k][0] < b:
            s, t = ys[k]
            if s > cur:
                out.append([cur, s])
            if t > cur:
                cur = t
            if cur >= b:
                break
            k += 1
        if cur < b:
            out.append([cur, b])
    return out


def covered(xs, lo, hi):
    """Length of the sorted disjoint union xs inside [lo, hi]."""
    total = 0.0
    for a, b in xs:
        if b <= lo:
            continue
        if a >= hi:
            break
        total += min(b, hi) - max(a, lo)
    return total


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def rnd(x, n=3):
    return None if x is None else round(x, n)


# --- loading ----------------------------------------------------------------------------------

def load_role(folder):
    paths = sorted(glob.glob(os.path.join(folder, "*.json.gz")) + glob.glob(os.path.join(folder, "*.json")))
    if not paths:
        return None, None
    events = []
    base = None
    for p in paths:
        opener = gzip.open if p.endswith(".gz") else open
        with opener(p, "rt") as fh:
            d = json.load(fh)
        b = d.get("baseTimeNanoseconds")
        if base is None:
            base = b
        events.extend(d.get("traceEvents", []))
    return events, base


class Trace:
    """GPU activity, launch calls, CPU ranges of one role, on the attention's clock."""

    def __init__(self, events, shift=0.0):
        self.launch = {}        # correlation -> (ts, end, tid, name)
        self.kernels = []       # dicts: s, e, name, stream, corr, comm
        self.copies = []        # (s, e, corr)
        self.execute = []       # (ts, end, name)
        self.compile_ranges = []
        self.capture_calls = []  # (ts, end, tid, kind)
        for ev in events:
            if ev.get("ph") != "X":
                continue
            cat = ev.get("cat")
            ts = ev.get("ts")
            if ts is None:
                continue
            ts = float(ts) + shift
            end = ts + float(ev.get("dur", 0) or 0)
            name = str(ev.get("name", ""))
            args = ev.get("args") or {}
            if cat in ("cuda_runtime", "cuda_driver"):
                c = args.get("correlation")
                if c is not None:
                    self.launch[c] = (ts, end, ev.get("tid"), name)
                if name.startswith(_CAPTURE_BEGIN):
                    self.capture_calls.append((ts, end, ev.get("tid"), "begin"))
                elif name.startswith(_CAPTURE_END):
                    self.capture_calls.append((ts, end, ev.get("tid"), "end"))
            elif cat == "kernel":
                self.kernels.append({"s": ts, "e": end, "name": name, "stream": args.get("stream"),
                                     "corr": args.get("correlation"), "comm": is_comm(name)})
            elif cat in ("gpu_memcpy", "gpu_memset"):
                self.copies.append((ts, end, args.get("correlation")))
            elif cat == "user_annotation" and name.startswith("execute_"):
                self.execute.append((ts, end, name))
            if cat in ("cpu_op", "user_annotation", "python_function") and _COMPILE_RE.search(name) \
                    and not _COMPILE_EXCLUDE_RE.search(name):
                self.compile_ranges.append((ts, end))
        self.kernels.sort(key=lambda k: (k["s"], k["e"]))
        self.execute.sort()
        compute_streams = set(k["stream"] for k in self.kernels if not k["comm"])
        graph_corr = set(c for c, l in self.launch.items() if "GraphLaunch" in l[3])
        self.data = []
        for k in self.kernels:
            if not is_p2p(k["name"]):
                continue
            if k["stream"] in compute_streams or k["corr"] in graph_corr:
                self.data.append(k)
        self.compute = [k for k in self.kernels if not k["comm"]]
        self.compute_union = union([(k["s"], k["e"]) for k in self.compute])
        self.comm_union = union([(k["s"], k["e"]) for k in self.kernels if k["comm"]])

    def capture_windows(self):
        by_tid = {}
        for ts, end, tid, kind in sorted(self.capture_calls):
            by_tid.setdefault(tid, []).append((ts, end, kind))
        wins = []
        for tid, calls in by_tid.items():
            depth, start = 0, None
            for ts, end, kind in calls:
                if kind == "begin":
                    if depth == 0:
                        start = ts
                    depth += 1
                elif depth > 0:
                    depth -= 1
                    if depth == 0:
                        wins.append((start, end))
        return union(wins)


# --- steps, periods, stalls -------------------------------------------------------------------

def phase_of(name):
    m = re.search(r"context_(\d+)", name)
    n = int(m.group(1)) if m else 0
    m = re.search(r"generation_(\d+)", name)
    g = int(m.group(1)) if m else 0
    if n > 0 and g == 0:
        return "prefill"
    if n == 0 and g > 0:
        return "decode"
    if n > 0 and g > 0:
        return "mixed"
    return "empty"


def build_steps(att):
    starts = [s for s, _, _ in att.execute]
    steps = [{"index": i, "start": s, "cpu_end": e, "name": n, "phase": phase_of(n), "gpu_end": None,
              "launched": 0} for i, (s, e, n) in enumerate(att.execute)]

    def step_of(t):
        i = bisect.bisect_right(starts, t) - 1
        while i >= 0:
            if steps[i]["start"] <= t <= steps[i]["cpu_end"]:
                return i
            # execute_* ranges do not nest; one miss is final
            return None
        return None

    att.step_of_launch = {}
    for c, (ts, end, tid, name) in att.launch.items():
        i = step_of(ts)
        if i is not None:
            att.step_of_launch[c] = i
    for k in att.kernels:
        i = att.step_of_launch.get(k["corr"])
        k["step"] = i
        if i is not None:
            st = steps[i]
            st["launched"] += 1
            st["gpu_end"] = k["e"] if st["gpu_end"] is None else max(st["gpu_end"], k["e"])
    for s, e, c in att.copies:
        i = att.step_of_launch.get(c)
        if i is not None:
            st = steps[i]
            st["launched"] += 1
            st["gpu_end"] = e if st["gpu_end"] is None else max(st["gpu_end"], e)
    reported = [st for st in steps if st["launched"] > 0]
    for j, st in enumerate(reported):
        st["window_end"] = max(st["cpu_end"], st["gpu_end"])
        if j + 1 < len(reported):
            st["period"] = reported[j + 1]["start"] - st["start"]
        else:
            st["period"] = st["window_end"] - st["start"]
    mark_stalls(att, reported)
    return reported


def mark_stalls(att, steps):
    comp = union(att.compile_ranges)
    capt = att.capture_windows()
    for st in steps:
        st["stall"] = None
        lo, hi = st["start"], st["start"] + st["period"]
        c = covered(comp, lo, hi)
        if c >= 1000.0 and c >= 0.05 * st["period"]:
            st["stall"] = "compile"
            continue
        g = covered(capt, lo, hi)
        if g >= 1000.0 and g >= 0.05 * st["period"]:
            st["stall"] = "graph capture"
    by_phase = {}
    for st in steps:
        by_phase.setdefault(st["phase"], []).append(st)
    for ph, group in by_phase.items():
        for st in group:
            if st["stall"]:
                continue
            others = [o["period"] for o in group if o is not st]
            p = st["period"]
            if len(others) >= 4:
                m = statistics.median(others)
                mad = statistics.median([abs(x - m) for x in others])
                if p > m + 3.5 * 1.4826 * mad and p > 2.0 * m:
                    st["stall"] = "outlier"
            elif len(others) == 2:
                m = statistics.median(others)
                if p > 10.0 * m:
                    st["stall"] = "outlier"
    # a step inside a stalled step's window is not steady either
    for st in steps:
        st["steady"] = st["stall"] is None
    for bad in steps:
        if bad["stall"] is None:
            continue
        for st in steps:
            if st is not bad and bad["start"] <= st["start"] <= bad["window_end"]:
                st["steady"] = False


# --- round trips ------------------------------------------------------------------------------

def step_microbatches(att, st, ks, layers):
    """Microbatch of each of the step's data kernels, and how they were told."""
    n = len(ks)
    # 1. launching threads: every data kernel eagerly launched (none by a cudaGraphLaunch) and
    #    exactly two distinct launching threads among them
    launches = [att.launch.get(k["corr"]) for k in ks]
    if n and all(l is not None and "GraphLaunch" not in l[3] for l in launches):
        tids = []
        for l in launches:
            if l[2] not in tids:
                tids.append(l[2])
        if len(tids) == 2:
            first = {}
            for k, l in zip(ks, launches):
                first.setdefault(l[2], k["s"])
            order = sorted(tids, key=lambda t: first[t])
            return [order.index(l[2]) for l in launches], "threads"
    if n < 2:
        return [0] * n, "one"
    lo, hi = ks[0]["e"], ks[1]["s"]
    comp_between = any(lo < c["s"] < hi for c in st["compute"])
    L = layers if layers else (n // 4 if n % 4 == 0 else None)
    if comp_between and L and L >= 2 and n == 4 * L:
        mb = [0, 1]
        for _ in range(L - 1):
            mb += [0, 0, 1, 1]
        mb += [0, 1]
        return mb, "kernel_order"
    if not comp_between:
        return [0] * n, "one"
    return [0] * n, "not_told_apart"


def set_lag(rt, recv_launch):
    """Host lag ("Disaggregated round trips", "Host lag"): send end to the start of the receive's
    launch call, clipped into [send end, receive start]; 0 where the launch is not in the trace or
    the receive started before the send ended. The rest = the round trip less the lag, as the one or
    two pieces of [s0, r1] outside [lag_lo, lag_hi]."""
    lo = rt["s1"]
    hi = lo
    if recv_launch is not None and rt["r0"] >= lo:
        hi = min(max(recv_launch[0], lo), rt["r0"])
    rt["lag_lo"], rt["lag_hi"] = lo, hi
    rt["lag"] = hi - lo
    rt["rest"] = (rt["r1"] - rt["s0"]) - rt["lag"]
    rt["rest_pieces"] = [p for p in ([rt["s0"], lo], [hi, rt["r1"]]) if p[1] > p[0]] \
        if hi > lo else [[rt["s0"], rt["r1"]]]


def covered_pieces(xs, pieces):
    return sum(covered(xs, a, b) for a, b in pieces)


def round_trips(att, steps, layers):
    for st in steps:
        st["data"] = []
        st["compute"] = []
    by_index = {st["index"]: st for st in steps}
    for k in att.data:
        st = by_index.get(k.get("step"))
        if st is not None:
            st["data"].append(k)
    for k in att.compute:
        st = by_index.get(k.get("step"))
        if st is not None:
            st["compute"].append(k)
    rts = []
    unpaired = 0
    modes = {}
    for st in steps:
        ks = st["data"]
        st["rts"] = []
        if not ks:
            st["mode"] = None
            continue
        mb, mode = step_microbatches(att, st, ks, layers)
        st["mode"] = mode
        modes[mode] = modes.get(mode, 0) + 1
        st["n_ub"] = len(set(mb)) if mode in ("threads", "kernel_order") else 1
        roles = [None] * len(ks)
        for u in sorted(set(mb)):
            idx = [i for i in range(len(ks)) if mb[i] == u]
            sends = []
            recvs = []
            for pos, i in enumerate(idx):
                roles[i] = "S" if pos % 2 == 0 else "R"
                (sends if pos % 2 == 0 else recvs).append(ks[i])
            m = min(len(sends), len(recvs))
            unpaired += len(sends) + len(recvs) - 2 * m
            for layer in range(m):
                s, r = sends[layer], recvs[layer]
                rt = {"step": st["index"], "ub": u, "layer": layer, "s0": s["s"], "s1": s["e"],
                      "r0": r["s"], "r1": r["e"]}
                set_lag(rt, att.launch.get(r["corr"]))
                st["rts"].append(rt)
                rts.append(rt)
        # compute kernel -> microbatch (kernel order: after a receive, that kernel's microbatch;
        # after a send, the next data kernel's); before the first data kernel: its microbatch
        starts = [k["s"] for k in ks]
        st["compute_ub"] = {0: [], 1: []}
        for c in st["compute"]:
            j = bisect.bisect_right(starts, c["s"]) - 1
            if j < 0:
                u = mb[0]
            elif roles[j] == "R" or j + 1 >= len(ks):
                u = mb[j]
            else:
                u = mb[j + 1]
            st["compute_ub"].setdefault(u, []).append((c["s"], c["e"]))
        for u in list(st["compute_ub"]):
            st["compute_ub"][u] = union(st["compute_ub"][u])
    rts.sort(key=lambda r: (r["s0"], r["r0"]))
    return rts, unpaired, modes


def match_ffn(rts, fdata, parity):
    recv_idx = list(range(parity, len(fdata) - 1, 2))
    j = 0
    out = []
    for rt in rts:
        k = j
        while k < len(recv_idx) and fdata[recv_idx[k]]["e"] < rt["s0"]:
            k += 1
        if k >= len(recv_idx):
            continue
        i = recv_idx[k]
        rv, sd = fdata[i], fdata[i + 1]
        if rv["e"] <= sd["s"] + TOL_US and sd["s"] <= rt["r1"] + TOL_US:
            out.append((rt, i))
            j = k + 1
    return out


# --- one bundle -------------------------------------------------------------------------------

def layers_from_manifest(bundle):
    try:
        with open(os.path.join(bundle, "manifest.json")) as fh:
            m = json.load(fh)
        v = m.get("layers")
        return int(v) if isinstance(v, int) and v > 0 else None
    except (OSError, ValueError):
        return None


def analyse(bundle):
    att_ev, att_base = load_role(os.path.join(bundle, "traces"))
    if att_ev is None:
        raise SystemExit("%s: no traces/" % bundle)
    att = Trace(att_ev)
    del att_ev
    ffn = None
    ffn_ev, ffn_base = load_role(os.path.join(bundle, "peer", "traces"))
    if ffn_ev is not None:
        shift = 0.0
        if isinstance(att_base, int) and isinstance(ffn_base, int):
            shift = (ffn_base - att_base) / 1000.0
        ffn = Trace(ffn_ev, shift)
        del ffn_ev
    layers = layers_from_manifest(bundle)
    steps = build_steps(att)
    rts, unpaired, modes = round_trips(att, steps, layers)

    # --- FFN matching
    matched = {}
    parity = None
    if ffn is not None and ffn.data and rts:
        tries = {p: match_ffn(rts, ffn.data, p) for p in (0, 1)}
        best = max(len(v) for v in tries.values())
        cands = []
        for p, m in tries.items():
            if m and len(m) >= 0.9 * best:
                cands.append((statistics.median(ffn.data[i]["e"] - rt["s0"] for rt, i in m), p))
        if cands:
            parity = min(cands)[1]
            for rt, i in tries[parity]:
                matched[id(rt)] = i
    fdata = ffn.data if ffn is not None else []

    # --- per visit
    for st in steps:
        prev_end = {}
        for rt in sorted(st["rts"], key=lambda r: (r["ub"], r["layer"])):
            rt["round_trip"] = rt["r1"] - rt["s0"]
            rt["A"] = rt["s0"] - prev_end[rt["ub"]] if rt["ub"] in prev_end else None
            prev_end[rt["ub"]] = rt["r1"]
            i = matched.get(id(rt))
            rt["ffn_i"] = i
            if i is None:
                rt["hop_out"] = rt["F"] = rt["hop_back"] = None
                rt["ffn_waited"] = rt["att_waited"] = None
                continue
            rv, sd = fdata[i], fdata[i + 1]
            f0, f1, g0, g1 = rv["s"], rv["e"], sd["s"], sd["e"]
            rt.update({"f0": f0, "f1": f1, "g0": g0, "g1": g1})
            rt["hop_out"] = f1 - rt["s0"]
            rt["F"] = g0 - f1
            rt["hop_back"] = rt["r1"] - g0
            rt["ffn_waited"] = f0 <= rt["s0"]
            rt["att_waited"] = rt["r0"] <= g0

    # --- per step
    per_step = []
    for st in steps:
        if not st["rts"]:
            continue
        v = st["rts"]
        st["loop"] = max(r["r1"] for r in v) - min(r["s0"] for r in v)
        st["outside"] = st["period"] - st["loop"]
        mv = [r for r in v if r["ffn_i"] is not None]
        st["A"] = med(r["A"] for r in v if r["layer"] >= 1)
        st["hop_out"] = med(r["hop_out"] for r in mv)
        st["F"] = med(r["F"] for r in mv)
        st["hop_back"] = med(r["hop_back"] for r in mv)
        st["rt_med"] = med(r["round_trip"] for r in v)
        st["bounds"] = None
        st["bound"] = None
        if st["n_ub"] == 2:
            b = {"round_trip": None, "ffn_busy": None, "attention_busy": None}
            if st["A"] is not None:
                if mv and None not in (st["hop_out"], st["F"], st["hop_back"]):
                    b["round_trip"] = st["A"] + st["hop_out"] + st["F"] + st["hop_back"]
                else:
                    b["round_trip"] = st["A"] + st["rt_med"]   # no FFN trace: the round trip itself
            if mv and st["A"] is not None:
                matched_idx = set(r["ffn_i"] for r in mv)
                ffn_send = med(r["g1"] - r["g0"] for r in mv)
                ffn_recv_late = med(r["f1"] - r["f0"] for r in mv if not r["ffn_waited"]) or 0.0
                gaps = []
                for r in mv:
                    nxt = r["ffn_i"] + 2
                    if nxt in matched_idx:
                        gaps.append(max(0.0, fdata[nxt]["s"] - r["g1"]))
                ffn_gap = med(gaps) or 0.0
                b["ffn_busy"] = 2.0 * (st["F"] + ffn_send + ffn_recv_late + ffn_gap)
                att_send = med(r["s1"] - r["s0"] for r in v)
                att_recv_late = med(r["r1"] - r["r0"] for r in mv if not r["att_waited"]) or 0.0
                b["attention_busy"] = 2.0 * (st["A"] + att_send + att_recv_late)
                st["bound"] = max(b, key=lambda k: b[k])
            st["bounds"] = b
        elif st["n_ub"] == 1 and st["mode"] == "one":
            st["bound"] = "serial"
        st["row"] = {
            "start_us": rnd(st["start"]), "loop_us": rnd(st["loop"]), "outside_us": rnd(st["outside"]),
            "attention_us": rnd(st["A"]), "hop_out_us": rnd(st["hop_out"]), "ffn_us": rnd(st["F"]),
            "hop_back_us": rnd(st["hop_back"]), "bound": st["bound"],
        }
        per_step.append(st["row"])

    rt_steps = [st for st in steps if st["rts"]]
    steady = [st for st in rt_steps if st["steady"]] or rt_steps
    sv = [r for st in steady for r in st["rts"]]
    smv = [r for r in sv if r["ffn_i"] is not None]
    n_two = sum(1 for st in rt_steps if st["n_ub"] == 2)
    microbatched = n_two * 2 > len(rt_steps)

    bounds_us = None
    bound = None
    if microbatched:
        bounds_us = {}
        for key in ("round_trip", "ffn_busy", "attention_busy"):
            bounds_us[key] = rnd(med(st["bounds"][key] for st in steady if st["bounds"]))
        held = {}
        for st in steady:
            if st["bound"]:
                held[st["bound"]] = held.get(st["bound"], 0) + 1
        bound = max(sorted(held), key=lambda k: held[k]) if held else None
    else:
        held = {}
        for st in steady:
            if st["bound"]:
                held[st["bound"]] = held.get(st["bound"], 0) + 1
        bound = max(sorted(held), key=lambda k: held[k]) if held else None

    # --- overlap over the steady span S
    steady_all = [st for st in steps if st["steady"]] or steps   # every step stalled: all of them
    S0, S1 = steady_all[0]["start"], steady_all[-1]["start"]
    N = sum(1 for st in steps if S0 <= st["start"] < S1)
    exposed = subtract(att.comm_union, att.compute_union)
    exposed_us = covered(exposed, S0, S1)
    hidden_us = 0.0
    beside_us = 0.0
    ov_num = 0.0
    ov_den = 0.0
    hid_all = 0.0          # hidden over all round trips (the rank's hidden share, for a check)
    ov_num_s = 0.0         # the overlapped share over the round trips starting in S (alternative)
    ov_den_s = 0.0
    hid_by_step = 0.0      # alternative: the round trips of the steps that start in S
    bes_by_step = 0.0
    # the readings of the revised text (host lag): see NOTES-pipeline.md, readings 18-21
    rest_all = 0.0         # summed rests (round trip less its host lag), all round trips
    hid_rest_all = 0.0     # summed hidden time of the rests (the "Hidden" bullet's share)
    lag_all = 0.0
    lag_hidden_all = 0.0
    ov_num_s_whole = 0.0   # before the revision: whole round trips, the other's whole round trips
    ov_den_s_whole = 0.0
    ov_num_whole = 0.0
    ov_num_sumclip = 0.0   # alternative: min(hidden + beside of the rest, rest) per round trip
    beside_whole_us = 0.0  # alternative: the other's whole round trips, lag included
    beside_rest_us = 0.0   # alternative: over the own rest only
    hid_rest_us = 0.0      # the rests' hidden time, round trips starting in S
    for st in rt_steps:
        two = st["n_ub"] == 2
        other_rts = {}
        other_flight = {}
        if two:
            for u in (0, 1):
                other_rts[u] = union([(r["s0"], r["r1"]) for r in st["rts"] if r["ub"] != u])
                # in flight: the other microbatch's round trips less their host lag
                other_flight[u] = union([tuple(pc) for r in st["rts"] if r["ub"] != u
                                         for pc in r["rest_pieces"]])
        st_rest = 0.0
        st_hid_rest = 0.0
        st_ov = 0.0
        for r in st["rts"]:
            rt_len = r["r1"] - r["s0"]
            if two:
                comp = st["compute_ub"].get(1 - r["ub"], [])
                h = covered(comp, r["s0"], r["r1"])
                h_rest = h - covered(comp, r["lag_lo"], r["lag_hi"])
                bs = covered(other_flight[r["ub"]], r["s0"], r["r1"])
                bs_whole = covered(other_rts[r["ub"]], r["s0"], r["r1"])
                bs_rest = covered_pieces(other_flight[r["ub"]], r["rest_pieces"])
                either = union([list(x) for x in comp] + [list(x) for x in other_flight[r["ub"]]])
                o = covered_pieces(either, r["rest_pieces"])
                either_whole = union([list(x) for x in comp] + [list(x) for x in other_rts[r["ub"]]])
                o_whole = covered(either_whole, r["s0"], r["r1"])
                o_sumclip = min(h_rest + bs_rest, r["rest"])
            else:
                h = h_rest = bs = bs_whole = bs_rest = o = o_whole = o_sumclip = 0.0
            if S0 <= r["s0"] < S1:
                hidden_us += h
                beside_us += bs
                beside_whole_us += bs_whole
                beside_rest_us += bs_rest
                hid_rest_us += h_rest
                ov_num_s += o
                ov_den_s += r["rest"]
                ov_num_s_whole += o_whole
                ov_den_s_whole += rt_len
            hid_all += h
            if st["steady"] and S0 <= st["start"] < S1:
                hid_by_step += h
                bes_by_step += bs
            ov_num += o
            ov_den += r["rest"]
            ov_num_whole += o_whole
            ov_num_sumclip += o_sumclip
            rest_all += r["rest"]
            hid_rest_all += h_rest
            lag_all += r["lag"]
            lag_hidden_all += h - h_rest
            st_rest += r["rest"]
            st_hid_rest += h_rest
            st_ov += o
        row = st["row"]
        row["hidden_share"] = rnd(st_hid_rest / st_rest, 4) if st_rest else None
        row["overlapped_share"] = rnd(st_ov / st_rest, 4) if st_rest else None
        if st["n_ub"] == 1 and st["mode"] == "one":
            row["label"] = "single-batch"
        elif row["overlapped_share"] is None:
            row["label"] = None
        else:
            row["label"] = "overlapped" if st_ov / st_rest >= 0.20 else "not-overlapped"
    rt_whole_all = sum(r["r1"] - r["s0"] for r in rts)

    def share(pred):
        xs = [pred(r) for r in smv]
        return rnd(sum(1 for x in xs if x) / len(xs)) if xs else None

    return {
        "steps": len(rt_steps),
        "microbatched": microbatched,
        "visits": len(rts),
        "ffn_matched": len(matched),
        "attention_us": rnd(med(r["A"] for r in sv if r["layer"] >= 1)),
        "hop_out_us": rnd(med(r["hop_out"] for r in smv)),
        "ffn_us": rnd(med(r["F"] for r in smv)),
        "hop_back_us": rnd(med(r["hop_back"] for r in smv)),
        "round_trip_us": rnd(med(r["round_trip"] for r in sv)),
        "ffn_receive_waited_share": share(lambda r: r["ffn_waited"]),
        "attention_receive_waited_share": share(lambda r: r["att_waited"]),
        "loop_us": rnd(med(st["loop"] for st in steady)),
        "outside_us": rnd(med(st["outside"] for st in steady)),
        "period_us": rnd(med(st["period"] for st in steady)),
        "bounds_us": bounds_us,
        "bound": bound,
        "exposed_per_step_ms": rnd(exposed_us / N / 1000.0, 4) if N else None,
        "hidden_per_step_ms": rnd(hidden_us / N / 1000.0, 4) if N else None,
        "beside_round_trip_per_step_ms": rnd(beside_us / N / 1000.0, 4) if N else None,
        "overlapped_share": rnd(ov_num / ov_den, 4) if ov_den else None,
        "per_step": per_step,
        "_details": {
            "layers_from_manifest": layers,
            "step_modes": modes,
            "unpaired": unpaired,
            "stalls": [[st["index"], st["stall"]] for st in steps if st["stall"]],
            "not_steady": [st["index"] for st in steps if not st["steady"]],
            "span_us": [rnd(S0), rnd(S1)],
            "span_periods": N,
            "ffn_parity": parity,
            "ffn_data_kernels": len(fdata),
            "bound_held_counts": held,
            "hidden_share_all_round_trips": rnd(hid_all / rt_whole_all, 4) if rt_whole_all else None,
            "overlapped_share_round_trips_in_S": rnd(ov_num_s / ov_den_s, 4) if ov_den_s else None,
            "round_trips_starting_in_S": sum(1 for r in rts if S0 <= r["s0"] < S1),
            "hidden_per_step_ms_by_step": rnd(hid_by_step / N / 1000.0, 4) if N else None,
            "beside_per_step_ms_by_step": rnd(bes_by_step / N / 1000.0, 4) if N else None,
            "period_us_start_to_start_only": rnd(med(
                st["period"] for st in steady if st is not steps[-1])),
            "last_step_period_is_window_us": rnd(steps[-1]["period"]),
            # the host lag (readings 18-21 in NOTES-pipeline.md)
            "host_lag_median_us": rnd(med(r["lag"] for r in rts)),
            "host_lag_total_us": rnd(lag_all),
            "lag_hidden_us": rnd(lag_hidden_all),
            "round_trip_rest_median_us": rnd(med(r["rest"] for r in rts)),
            "hidden_share_rests_all_round_trips": rnd(hid_rest_all / rest_all, 4) if rest_all else None,
            "hidden_rests_per_step_ms_steps_with_round_trips":
                rnd(hid_rest_all / len(rt_steps) / 1000.0, 4) if rt_steps else None,
            "hidden_rests_per_step_ms": rnd(hid_rest_us / N / 1000.0, 4) if N else None,
            "overlapped_share_whole_round_trips": rnd(ov_num_whole / rt_whole_all, 4) if rt_whole_all else None,
            "overlapped_share_whole_round_trips_in_S":
                rnd(ov_num_s_whole / ov_den_s_whole, 4) if ov_den_s_whole else None,
            "overlapped_share_sum_clipped": rnd(ov_num_sumclip / rest_all, 4) if rest_all else None,
            "beside_per_step_ms_other_whole_round_trips": rnd(beside_whole_us / N / 1000.0, 4) if N else None,
            "beside_per_step_ms_own_rest": rnd(beside_rest_us / N / 1000.0, 4) if N else None,
            "step_labels": {lab: sum(1 for st in rt_steps if st["row"]["label"] == lab)
                            for lab in sorted(set(str(st["row"]["label"]) for st in rt_steps))},
            # alternative: the step's label by its hidden share (the unrevised "Steps and phases are
            # labelled as the run is" paragraph of "Disaggregated round trips (AFD)")
            "step_labels_by_hidden_share": hidden_labels(rt_steps),
        },
    }


def hidden_labels(rt_steps):
    out = {}
    for st in rt_steps:
        row = st["row"]
        if row["label"] in ("single-batch", None):
            lab = row["label"]
        else:
            lab = "overlapped" if row["hidden_share"] >= 0.20 else "not-overlapped"
        out[str(lab)] = out.get(str(lab), 0) + 1
    return dict(sorted(out.items()))


def main(argv):
    if not argv:
        print(__doc__)
        return 2
    out = {}
    for b in argv:
        out[b] = analyse(b)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
