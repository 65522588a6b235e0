"""The truth of an AFD bundle, counted from its raw files in plain Python (json, gzip, statistics).

Written by a reviewer who did not read dbo-trace's code: from the facts of DESIGN.md "AFD on one
GPU", the bundle format and the raw Kineto traces. `scripts/afd_truth.py` prints these figures;
`tests/independent/test_afd_pair_samples.py` compares `dbo-trace report --json` with them.

How each figure is counted (times in microseconds, on the traces' own clock: both roles' traces
carry the same `baseTimeNanoseconds`, which `bundle_truth` checks):

- **Steps**: the attention trace's `user_annotation` events named `execute_*`, by start. Period:
  start to the next step's start (median over the n - 1 gaps). Window: the annotation's own length
  (`window_cpu`), and from its start to the end of the last GPU kernel or copy it launched
  (`window_gpu`; with graphs the GPU runs behind the CPU, so this is the longer one).
- **Which step a kernel belongs to**: the step whose annotation holds the kernel's launching CUDA
  runtime or driver call (joined by `correlation`; a kernel replayed from a graph carries the
  `cudaGraphLaunch`'s correlation).
- **Data plane / control plane**: every `ncclDevKernel_SendRecv` kernel. The control plane's
  kernels are launched by torch.distributed (`c10d::send`), whose kernel events carry the
  `Collective name` argument (2 per step); the data plane's (the plugin's PyNccl, or a graph
  replay) carry none.
- **Send or receive**: eager, the plugin's CPU op around the launch (`vllm::afd_p2p_send` /
  `vllm::afd_p2p_recv`). Inside a graph replay there are no CPU ops; the order is then taken from
  what the eager traces show (checked by `order_matches_pattern` on them): one microbatch
  `S R S R ...`; two microbatches `S S (R S R S) x (L-1) R R` (each microbatch sends, yields, and
  receives after the other microbatch has sent).
- **Microbatches per step**: data kernels in the step / (2 x layers): 1 without DBO, 2 with it
  (27 layers; DBO's two microbatches).
- **Round trip pairing**: within a step, the k-th send with the k-th receive, in start order. The
  FFN server answers its requests first in first out over one NCCL channel, so the k-th receive
  carries the answer to the k-th send, with or without DBO. (Where the microbatch of each kernel is
  known, eager + DBO by its launching thread, pairing the k-th send of a microbatch with its k-th
  receive gives the same pairs: `pairing_agrees_with_threads`.) A round trip's time is from the
  send kernel's start to its receive kernel's end.
- **The FFN (pairs)**: the span is the attention's steps, from the first step's start to the last
  step's GPU end (`window_gpu`). FFN compute = the union of the FFN trace's kernels whose name has
  no `nccl` (its MoE, norms, graph `memcpy32_post` kernels...), clipped to the span; per step =
  that / steps (also the median over steps of each step's own clipped union, each step from its
  start to the next one's); per round trip = per step / round trips per step (also the median of
  the FFN compute inside each round trip [send start, receive end]).
- **GPU busy**: each role's union of its kernel intervals (NCCL ones included) clipped to the span,
  over the span; both at once = the intersection of the two unions over the span. `*_all` variants
  add copies and memsets (`gpu_memcpy`, `gpu_memset`).
- **Unprofiled**: `bench/repeat-*.json` (`vllm bench serve`); TPOT = the median of the repeats'
  `median_tpot_ms`; profiler overhead = the profiled median period / that - 1.
"""

import bisect
import glob
import gzip
import json
import os
import statistics

LAYERS = 27


# --- files -------------------------------------------------------------------------------------

def load(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def manifest(bundle):
    with open(os.path.join(bundle, "manifest.json")) as fh:
        return json.load(fh)


def role_traces(bundle):
    """{'attention': path, 'ffn': path or None}: traces/ is the attention role, peer/traces/ the FFN."""
    attn = sorted(glob.glob(os.path.join(bundle, "traces", "*.json*")))
    ffn = sorted(glob.glob(os.path.join(bundle, "peer", "traces", "*.json*")))
    attn = [p for p in attn if p.endswith((".json", ".json.gz"))]
    ffn = [p for p in ffn if p.endswith((".json", ".json.gz"))]
    return {"attention": attn[0] if attn else None, "ffn": ffn[0] if ffn else None}


# --- intervals ---------------------------------------------------------------------------------

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
    return [(a, b) for a, b in out]


def clip(intervals, lo, hi):
    return [(max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi]


def total(intervals):
    return sum(b - a for a, b in intervals)


def intersect(u1, u2):
    """Intersection of two unions (each sorted and disjoint)."""
    out, i, j = [], 0, 0
    while i < len(u1) and j < len(u2):
        a = max(u1[i][0], u2[j][0])
        b = min(u1[i][1], u2[j][1])
        if b > a:
            out.append((a, b))
        if u1[i][1] < u2[j][1]:
            i += 1
        else:
            j += 1
    return out


def covered(u, lo, hi):
    """Time of the union u (sorted, disjoint) inside [lo, hi]."""
    i = max(bisect.bisect_right(u, (lo,)) - 1, 0)
    out = 0.0
    while i < len(u) and u[i][0] < hi:
        a, b = max(u[i][0], lo), min(u[i][1], hi)
        if b > a:
            out += b - a
        i += 1
    return out


# --- one trace ---------------------------------------------------------------------------------

def end(e):
    return e["ts"] + e.get("dur", 0)


def is_sendrecv(e):
    return e.get("cat") == "kernel" and "SendRecv" in e.get("name", "")


def steps_of(events):
    return sorted((e for e in events if e.get("cat") == "user_annotation"
                   and str(e.get("name", "")).startswith("execute_")), key=lambda e: e["ts"])


def launches_by_correlation(events):
    return {e["args"]["correlation"]: e for e in events
            if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in (e.get("args") or {})}


def step_index(steps, t, starts=None):
    """The step whose annotation holds time t (None: none); the annotations do not overlap."""
    starts = starts if starts is not None else [s["ts"] for s in steps]
    i = bisect.bisect_right(starts, t) - 1
    return i if i >= 0 and t <= end(steps[i]) else None


def op_kind(ops, t):
    """'send' / 'recv' from the plugin's CPU op around time t, else None."""
    found = {o["name"] for o in ops if o["ts"] <= t <= end(o)}
    if found == {"vllm::afd_p2p_send"}:
        return "send"
    if found == {"vllm::afd_p2p_recv"}:
        return "recv"
    return None


def dbo_pattern(n_data, microbatches):
    """The send/receive order of one step's data kernels, as the eager traces show it."""
    if microbatches == 1:
        return ["send", "recv"] * (n_data // 2)
    if microbatches == 2 and n_data % 4 == 0:
        layers = n_data // 4
        return ["send", "send"] + ["recv", "send", "recv", "send"] * (layers - 1) + ["recv", "recv"]
    return None


def gap_signature(data, compute, n=6):
    """Whether a compute kernel of the step ran between data kernel k's end and k+1's start, for
    the first n gaps. Eager + DBO (send/receive known from the CPU ops) shows
    (True, False, True, False, True, False): S0 [attention of ub 1] S1 | R0 [ub 0's next layer] S0 |
    R1 [...] S1; one microbatch shows (False, True, ...): S R back to back, compute between layers."""
    out = []
    for x, y in list(zip(data, data[1:]))[:n]:
        out.append(any(end(x) <= c["ts"] and end(c) <= y["ts"] for c in compute))
    return tuple(out)


def attention_truth(path, layers=LAYERS):
    doc = load(path)
    events = doc["traceEvents"]
    steps = steps_of(events)
    launch = launches_by_correlation(events)
    ops = [e for e in events if e.get("cat") == "cpu_op"
           and e.get("name") in ("vllm::afd_p2p_send", "vllm::afd_p2p_recv")]
    starts = [s["ts"] for s in steps]
    periods = [b - a for a, b in zip(starts, starts[1:])]

    # GPU end of each step: the last kernel or copy its annotation launched.
    gpu_end = [end(s) for s in steps]
    per_step = [[] for _ in steps]
    compute_of = [[] for _ in steps]
    kernels = []
    for e in events:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        if e.get("cat") == "kernel":
            kernels.append(e)
        corr = (e.get("args") or {}).get("correlation")
        call = launch.get(corr)
        if call is None:
            continue
        i = step_index(steps, call["ts"], starts)
        if i is None:
            continue
        gpu_end[i] = max(gpu_end[i], end(e))
        if is_sendrecv(e):
            per_step[i].append((e, call))
        elif e.get("cat") == "kernel" and "nccl" not in e["name"].lower():
            compute_of[i].append(e)
    windows_gpu = [g - s["ts"] for g, s in zip(gpu_end, steps)]

    control = [sum(1 for e, _ in ks if "Collective name" in e["args"]) for ks in per_step]
    round_trips, data_counts, mbs, kinds_from_ops, pattern_ok, thread_agree = [], [], [], 0, [], []
    send_durs, recv_durs, signatures = [], [], []
    for ks, comp in zip(per_step, compute_of):
        data = sorted(((e, c) for e, c in ks if "Collective name" not in e["args"]), key=lambda x: x[0]["ts"])
        data_counts.append(len(data))
        signatures.append(gap_signature([e for e, _ in data], comp))
        mb = round(len(data) / (2 * layers)) if data else 0
        mbs.append(mb)
        kinds = [op_kind(ops, c["ts"]) for _, c in data]
        expected = dbo_pattern(len(data), mb)
        from_ops = bool(data) and all(kinds)
        if from_ops:
            kinds_from_ops += 1
            pattern_ok.append(kinds == expected)
        elif expected is not None:
            kinds = expected
        else:
            continue
        sends = [e for (e, _), k in zip(data, kinds) if k == "send"]
        recvs = [e for (e, _), k in zip(data, kinds) if k == "recv"]
        send_durs += [e["dur"] for e in sends]
        recv_durs += [e["dur"] for e in recvs]
        pairs = list(zip(sends, recvs))
        round_trips.append([(s["ts"], end(r)) for s, r in pairs])
        # Cross-check: per launching thread (eager + DBO), the k-th send with the thread's k-th receive.
        threads = {c.get("tid") for _, c in data}
        if from_ops and len(threads) == 2:
            by_thread = {}
            for (e, c), k in zip(data, kinds):
                by_thread.setdefault(c.get("tid"), {"send": [], "recv": []})[k].append(e)
            mine = set()
            for t in by_thread.values():
                mine |= {(s["ts"], end(r)) for s, r in zip(t["send"], t["recv"])}
            thread_agree.append(mine == set(round_trips[-1]))

    flat = [b - a for rts in round_trips for a, b in rts]
    counts = [len(r) for r in round_trips]
    return {
        "path": path,
        "base_ns": doc.get("baseTimeNanoseconds"),
        "steps": len(steps),
        "step_names": sorted({s["name"] for s in steps}),
        "starts": starts,
        "periods": periods,
        "median_period_us": statistics.median(periods) if periods else None,
        "median_window_cpu_us": statistics.median(s["dur"] for s in steps) if steps else None,
        "median_window_gpu_us": statistics.median(windows_gpu) if steps else None,
        "span": (steps[0]["ts"], max(gpu_end)) if steps else None,
        "step_bounds": [(s, b) for s, b in zip(starts, starts[1:] + [max(gpu_end) if steps else 0])],
        "graph_launches": sum(1 for e in events if e.get("name") == "cudaGraphLaunch"),
        "data_kernels_per_step": data_counts,
        "control_kernels_per_step": control,
        "microbatches_per_step": mbs,
        "microbatched": bool(mbs) and statistics.median(mbs) >= 2,
        "kinds_from_cpu_ops_steps": kinds_from_ops,
        "order_matches_pattern": pattern_ok,
        "gap_signatures": signatures,
        "pairing_agrees_with_threads": thread_agree,
        "round_trips": round_trips,
        "round_trips_total": sum(counts),
        "round_trips_per_step": statistics.median(counts) if counts else None,
        "round_trips_per_layer": statistics.median(counts) / layers if counts else None,
        "median_round_trip_us": statistics.median(flat) if flat else None,
        "median_send_kernel_us": statistics.median(send_durs) if send_durs else None,
        "median_recv_kernel_us": statistics.median(recv_durs) if recv_durs else None,
        "kernel_intervals": [(e["ts"], end(e)) for e in kernels],
        "activity_intervals": [(e["ts"], end(e)) for e in events
                               if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")],
    }


def ffn_intervals(path):
    doc = load(path)
    events = doc["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    return {
        "base_ns": doc.get("baseTimeNanoseconds"),
        "compute": [(e["ts"], end(e)) for e in kernels if "nccl" not in e["name"].lower()],
        "compute_no_memcpy_kernels": [(e["ts"], end(e)) for e in kernels
                                      if "nccl" not in e["name"].lower() and not e["name"].startswith("memcpy")],
        "kernels": [(e["ts"], end(e)) for e in kernels],
        "activities": [(e["ts"], end(e)) for e in events
                       if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")],
    }


def pair_truth(attn, ffn_path):
    """The FFN's figures over the attention's steps (attn: attention_truth's result)."""
    ffn = ffn_intervals(ffn_path)
    lo, hi = attn["span"]
    span = hi - lo
    n = attn["steps"]
    compute = union(ffn["compute"])
    in_span = total(clip(compute, lo, hi))
    per_step_median = statistics.median(covered(compute, a, b) for a, b in attn["step_bounds"])
    rt_per_step = attn["round_trips_per_step"]
    per_rt_inside = [covered(compute, a, b) for rts in attn["round_trips"] for a, b in rts]
    a_k = union(clip(attn["kernel_intervals"], lo, hi))
    f_k = union(clip(ffn["kernels"], lo, hi))
    a_all = union(clip(attn["activity_intervals"], lo, hi))
    f_all = union(clip(ffn["activities"], lo, hi))
    return {
        "same_clock": ffn["base_ns"] == attn["base_ns"],
        "span_us": span,
        "ffn_compute_us": in_span,
        "ffn_compute_per_step_us": in_span / n,
        "ffn_compute_per_step_median_us": per_step_median,
        "ffn_compute_per_step_no_memcpy_us": total(clip(union(ffn["compute_no_memcpy_kernels"]), lo, hi)) / n,
        "ffn_compute_per_round_trip_us": in_span / n / rt_per_step if rt_per_step else None,
        "ffn_compute_inside_round_trip_median_us": statistics.median(per_rt_inside) if per_rt_inside else None,
        "round_trips_with_ffn_compute": (sum(1 for x in per_rt_inside if x > 0) / len(per_rt_inside)
                                         if per_rt_inside else None),
        "attention_busy": total(a_k) / span,
        "ffn_busy": total(f_k) / span,
        "both_busy": total(intersect(a_k, f_k)) / span,
        "attention_busy_all": total(a_all) / span,
        "ffn_busy_all": total(f_all) / span,
        "both_busy_all": total(intersect(a_all, f_all)) / span,
        "ffn": ffn,
    }


def bench_truth(bundle):
    repeats = []
    for p in sorted(glob.glob(os.path.join(bundle, "bench", "repeat-*.json"))):
        with open(p) as fh:
            repeats.append(json.load(fh))
    tpots = [r["median_tpot_ms"] for r in repeats]
    return {
        "repeats": len(repeats),
        "durations_s": [r["duration"] for r in repeats],
        "median_tpot_ms_each": tpots,
        "tpot_ms": statistics.median(tpots) if tpots else None,
        "tpot_ms_mean": statistics.mean(tpots) if tpots else None,
    }


def bundle_truth(bundle, layers=LAYERS):
    paths = role_traces(bundle)
    attn = attention_truth(paths["attention"], layers)
    out = {"bundle": bundle, "attention": attn, "bench": bench_truth(bundle),
           "pair": pair_truth(attn, paths["ffn"]) if paths["ffn"] else None}
    sharing = manifest(bundle).get("gpu_sharing") or {}
    out["mps_daemon"] = sharing.get("mps_daemon")
    tpot = out["bench"]["tpot_ms"]
    period = attn["median_period_us"]
    out["profiler_overhead"] = period / (tpot * 1000) - 1 if tpot and period else None
    return out


def dbo_effect(with_dbo, without):
    """Change of the median step period (profiled) and of the unprofiled TPOT, DBO against no DBO."""
    p = with_dbo["attention"]["median_period_us"] / without["attention"]["median_period_us"] - 1
    t = with_dbo["bench"]["tpot_ms"] / without["bench"]["tpot_ms"] - 1
    return {"period_change": p, "tpot_change": t}
