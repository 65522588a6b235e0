"""Does DBO pay, taken apart: an independent reference (issue 51).

Written from the raw Kineto traces by a checker who did not read dbo_trace/ (nor its tests or
history): plain Python, gzip, json. Run it as

    python tests/references/dbo_effect_truth.py OFF_BUNDLE ON_BUNDLE

(prints each arm's parts, the effect of ON against OFF and, where the arms have the plugin's
send/receive ops or graph replays, the host lag), or import `parts`, `effect`, `host_lag`.

Inputs: a bundle holds `traces/*.pt.trace.json.gz` (the attention server) and, where both roles
were traced, `peer/traces/*.pt.trace.json.gz` (the FFN server, same clock: the same
`baseTimeNanoseconds`, checked). Times are microseconds on the traces' clock; per-step figures
are in milliseconds.

Definitions (per arm, on the attention trace unless said):

- **Steps**: the CPU `user_annotation` events named `execute_*`, sorted by start. The span
  S = [first step's start, last step's start); N = steps - 1 periods. `period_mean_ms` = |S| / N;
  `period_median_ms` = the median of the N consecutive start-to-start gaps.
- **Comm kernels**: `kernel` events whose name starts with `nccl` (here `ncclDevKernel_SendRecv`).
  **Compute kernels**: every other `kernel` event. **Copies**: `gpu_memcpy` and `gpu_memset`
  events (reported apart: `memcpy_ms`, `memset_ms`; `copy_ms` is both).
- `compute_ms` = |union(compute) ∩ S| / N.
- `comm_alone_ms` = |(union(comm) minus union(compute)) ∩ S| / N.
- `copy_ms` = |(union(copies) minus union(compute) minus union(comm)) ∩ S| / N (memcpy and
  memset each computed the same way against compute and comm; a memcpy under a memset, or the
  reverse, is counted in each, which the shipped traces never have: `copy_ms` is the union).
- `idle_ms` = |S| / N - compute - comm alone - copy, i.e. the time in S when no GPU work of any
  kind ran (checked: equal to the sum of the idle gaps, `idle_check_ms`).
- **Idle split**: a GPU idle gap runs from the end of the union of all GPU work (kernels and
  copies, every stream) to the next start. The GPU item(s) starting at the gap's end were
  launched by the `cuda_runtime`/`cuda_driver` event with the same `args.correlation`
  (cudaLaunchKernel, cuLaunchKernelEx, cudaGraphLaunch for replayed kernels, cudaMemcpyAsync
  for copies...). If that call (the earliest, where several items start at the gap's end) began
  after the gap began, the gap is `host_idle_ms` from its start to the call's start (nothing was
  queued: the GPU waited for the host), and `dependency_idle_ms` for the rest (the work was queued
  but waited: on a stream event, an NCCL peer, ...). If the call began before the gap, all of the
  gap is dependency idle. Gaps are clipped to S; where no GPU work precedes S in the trace, the
  first gap starts at S's start. A gap whose next item has no launch call in the
  trace counts as dependency idle (`gaps_without_launch` says how many).
- **FFN** (where `peer/traces` exists): the same parts on the FFN trace over the attention's S
  and N (`ffn`).
- **Per kernel name** (`kernels`): every `kernel` event starting in S; time per step = the sum of
  their durations / N (ms), median per call (us), calls per step.
- **effect(off, on)**: each part's change on - off per step (compute, comm alone, copy, idle and
  its host/dependency split; and the FFN's where both arms have it), the sum of the four part
  changes (= the change in the mean period, by construction), the measured change of the median
  and of the mean period, the relative change of the median period; the 5 kernel names whose
  time per step changed most (by absolute change), with their median per call off and on.
  Beside it, `steady`: the same changes with S starting at the second step (both arms). With
  graphs the GPU runs a step behind the CPU and the trace starts with the first step, so the
  first period lacks the previous step's GPU work (the first kernel starts ~4 ms after S does):
  it counts as idle. The definition keeps it; `steady` shows what it weighs.
- **host_lag(bundle)**: the `ncclDevKernel_SendRecv` kernels of each step (the step whose [start,
  next start) holds the kernel's launch call; the last step runs to the end of the trace). Eager: a
  kernel is a send if its launch call ran inside a `vllm::afd_p2p_send` CPU op, a receive inside
  `vllm::afd_p2p_recv`. Join: the launch call's `args."External id"` equals the op's `External id`
  (the op is the innermost one open around the launch; time nesting on the same thread cannot be
  used on the DBO arm: there the runtime events carry two thread ids for the whole run and the CPU
  ops new ones every step). `join_check` says how many joins also hold by time (the launch inside
  the op's [ts, ts+dur]). Graph arms: no CPU op is recorded inside a replay; sends and receives are
  the data-plane SendRecv kernels (those without the `Collective name` argument that
  torch.distributed's own control-plane sends carry), in start order, given the order the eager
  arms show (`pattern_eager_holds`): `S R S R ...` with one microbatch, `S S (R S R S) x (L-1) R R`
  with two (L = 27 layers, DeepSeek-V2-Lite's shape; 2 microbatches where a step has 4 x 27 data
  kernels; a step with neither 54 nor 108 is left out, `steps_kernels_microbatches` counts them).
  Pairing: within a step the k-th send with the k-th receive in start order (eager:
  `pairs_same_thread` counts the pairs whose two ops ran on one CPU thread, i.e. one microbatch
  with DBO). A round trip = send kernel start to receive kernel end; its host lag = max(0,
  receive's launch call start - send kernel end). Reported: medians of the round trip, the host
  lag, the receive and send kernel durations; and, on the receive op's CPU thread, which CPU op
  (`cpu_op` events) is innermost open during the lag, summed by name over all round trips
  (`lag_by_innermost_op`, share of the total lag), with the top name's median duration per call
  over the steps. Beside it, two other readings of the same wait (not the definition):
  `median_recv_op_lag_us` = max(0, the receive op's start - the send kernel's end) and
  `median_send_end_to_recv_start_us` = the receive kernel's start - the send kernel's end (GPU
  side; includes the launch and the queue behind it). Graph arms' host lag is 0 by construction:
  every replayed kernel's launch call is its step's one cudaGraphLaunch, issued before any of its
  kernels ran.
"""

from __future__ import annotations

import bisect
import collections
import glob
import gzip
import json
import os
import statistics
import sys

SEND_OP = "vllm::afd_p2p_send"
RECV_OP = "vllm::afd_p2p_recv"
SENDRECV = "ncclDevKernel_SendRecv"
LAYERS = 27


# --- files ---------------------------------------------------------------------------------------

def _trace_path(bundle, sub):
    paths = sorted(glob.glob(os.path.join(bundle, sub, "*.pt.trace.json.gz")))
    if len(paths) > 1:
        raise SystemExit(f"{bundle}/{sub}: {len(paths)} traces, expected one")
    return paths[0] if paths else None


_CACHE: dict = {}


def load(path):
    if path not in _CACHE:
        with gzip.open(path, "rt") as fh:
            _CACHE[path] = json.load(fh)
    return _CACHE[path]


def role_traces(bundle):
    attn = _trace_path(bundle, "traces")
    if attn is None:
        raise SystemExit(f"{bundle}: no traces/*.pt.trace.json.gz")
    return attn, _trace_path(bundle, os.path.join("peer", "traces"))


# --- intervals (sorted lists of disjoint [a, b)) -------------------------------------------------

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
    """xs minus ys, both disjoint sorted unions."""
    out, j = [], 0
    for a, b in xs:
        cur = a
        while j < len(ys) and ys[j][1] <= cur:
            j += 1
        k = j
        while k < len(ys) and ys[k][0] < b:
            s, t = ys[k]
            if s > cur:
                out.append([cur, s])
            cur = max(cur, t)
            if cur >= b:
                break
            k += 1
        if cur < b:
            out.append([cur, b])
    return out


def clip_len(xs, lo, hi):
    return sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in xs)


# --- one trace -----------------------------------------------------------------------------------

def steps_of(events):
    st = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                if e.get("ph") == "X" and e.get("cat") == "user_annotation"
                and str(e.get("name", "")).startswith("execute_"))
    if len(st) < 2:
        raise SystemExit("fewer than two execute_* step annotations: no period to measure")
    return st


def _gpu(events):
    comp, comm, memcpy, memset = [], [], [], []
    for e in events:
        if e.get("ph") != "X":
            continue
        c = e.get("cat")
        if c == "kernel":
            (comm if e["name"].startswith("nccl") else comp).append(e)
        elif c == "gpu_memcpy":
            memcpy.append(e)
        elif c == "gpu_memset":
            memset.append(e)
    return comp, comm, memcpy, memset


def _iv(evs):
    return union([(e["ts"], e["ts"] + e["dur"]) for e in evs])


def _launch_starts(events):
    """correlation -> start of the cuda_runtime/cuda_driver call that carries it."""
    out = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver"):
            c = (e.get("args") or {}).get("correlation")
            if c is not None:
                out.setdefault(c, e["ts"])
    return out


def trace_parts(events, lo, hi, n):
    comp, comm, memcpy, memset = _gpu(events)
    u_comp, u_comm = _iv(comp), _iv(comm)
    u_cpy, u_mcp, u_mst = _iv(memcpy + memset), _iv(memcpy), _iv(memset)
    comm_alone = subtract(u_comm, u_comp)
    cc = union(u_comp + u_comm)
    copy = subtract(u_cpy, cc)
    span = hi - lo
    compute_ms = clip_len(u_comp, lo, hi) / n / 1e3
    comm_ms = clip_len(comm_alone, lo, hi) / n / 1e3
    copy_ms = clip_len(copy, lo, hi) / n / 1e3
    idle_ms = span / n / 1e3 - compute_ms - comm_ms - copy_ms

    # idle gaps of all GPU work and their split
    allw = comp + comm + memcpy + memset
    busy = union(u_comp + u_comm + u_cpy)
    launch = _launch_starts(events)
    starts = collections.defaultdict(list)
    for e in allw:
        starts[e["ts"]].append(e)
    host = dep = idle_gaps = 0.0
    no_launch = 0
    gaps = [(busy[i][1], busy[i + 1][0]) for i in range(len(busy) - 1)]
    if busy and busy[0][0] > lo:
        gaps.insert(0, (lo, busy[0][0]))  # nothing before: start of the trace's GPU work
    if busy and busy[-1][1] < hi:
        gaps.append((busy[-1][1], hi))
    for g0, g1 in gaps:
        a, b = max(g0, lo), min(g1, hi)
        if b <= a:
            continue
        idle_gaps += b - a
        ls = [launch.get((e.get("args") or {}).get("correlation")) for e in starts.get(g1, [])]
        ls = [x for x in ls if x is not None]
        if not ls:
            no_launch += 1
            dep += b - a
            continue
        call = min(ls)
        h = max(0.0, min(call, b) - a) if call > g0 else 0.0
        host += h
        dep += (b - a) - h

    per_name = collections.defaultdict(list)
    for e in comp + comm:
        if lo <= e["ts"] < hi:
            per_name[e["name"]].append(e["dur"])
    kernels = {k: {"per_step_ms": sum(v) / n / 1e3, "median_us": statistics.median(v),
                   "calls_per_step": len(v) / n} for k, v in per_name.items()}
    return {
        "compute_ms": compute_ms, "comm_alone_ms": comm_ms, "copy_ms": copy_ms,
        "memcpy_ms": clip_len(subtract(u_mcp, cc), lo, hi) / n / 1e3,
        "memset_ms": clip_len(subtract(u_mst, cc), lo, hi) / n / 1e3,
        "idle_ms": idle_ms, "idle_check_ms": idle_gaps / n / 1e3,
        "host_idle_ms": host / n / 1e3, "dependency_idle_ms": dep / n / 1e3,
        "gaps_without_launch": no_launch, "kernels": kernels,
    }


def parts(bundle_path, skip_periods=0):
    """The parts per step of one arm (see the module docstring); 'ffn' where peer/traces exists.

    skip_periods > 0 starts S at that step instead of the first (the `steady` variant beside the
    definition: with graphs the first period lacks the previous step's GPU work, see NOTES)."""
    attn_p, ffn_p = role_traces(bundle_path)
    att = load(attn_p)
    ev = att["traceEvents"]
    st = steps_of(ev)[skip_periods:]
    if len(st) < 2:
        raise SystemExit(f"{bundle_path}: fewer than two steps left after skipping {skip_periods}")
    lo, hi, n = st[0][0], st[-1][0], len(st) - 1
    gaps = [st[i + 1][0] - st[i][0] for i in range(n)]
    out = {"bundle": bundle_path, "steps": len(st), "periods": n, "skip_periods": skip_periods,
           "period_mean_ms": (hi - lo) / n / 1e3,
           "period_median_ms": statistics.median(gaps) / 1e3}
    out.update(trace_parts(ev, lo, hi, n))
    out["ffn"] = None
    if ffn_p:
        ffn = load(ffn_p)
        if ffn.get("baseTimeNanoseconds") != att.get("baseTimeNanoseconds"):
            raise SystemExit(f"{bundle_path}: the two roles' traces have different clocks")
        out["ffn"] = trace_parts(ffn["traceEvents"], lo, hi, n)
    return out


PART_KEYS = ("compute_ms", "comm_alone_ms", "copy_ms", "idle_ms")
SPLIT_KEYS = ("host_idle_ms", "dependency_idle_ms", "memcpy_ms", "memset_ms")


def effect(off_path, on_path, skip_periods=0):
    """The change on - off of each part per step, their sum, and the measured period changes.

    `steady` beside it: the same parts' changes with the first period left out of both arms."""
    off, on = parts(off_path, skip_periods), parts(on_path, skip_periods)
    d = {k: on[k] - off[k] for k in PART_KEYS + SPLIT_KEYS}
    d["sum_of_parts_ms"] = sum(d[k] for k in PART_KEYS)
    d["period_mean_change_ms"] = on["period_mean_ms"] - off["period_mean_ms"]
    d["period_median_change_ms"] = on["period_median_ms"] - off["period_median_ms"]
    d["period_median_change_rel"] = on["period_median_ms"] / off["period_median_ms"] - 1
    d["ffn"] = None
    if off["ffn"] and on["ffn"]:
        d["ffn"] = {k: on["ffn"][k] - off["ffn"][k] for k in PART_KEYS + SPLIT_KEYS}
    names = set(off["kernels"]) | set(on["kernels"])
    z = {"per_step_ms": 0.0, "median_us": None, "calls_per_step": 0.0}
    rows = []
    for k in names:
        a, b = off["kernels"].get(k, z), on["kernels"].get(k, z)
        rows.append({"name": k, "change_ms": b["per_step_ms"] - a["per_step_ms"],
                     "off_per_step_ms": a["per_step_ms"], "on_per_step_ms": b["per_step_ms"],
                     "off_median_us": a["median_us"], "on_median_us": b["median_us"],
                     "off_calls_per_step": a["calls_per_step"],
                     "on_calls_per_step": b["calls_per_step"]})
    rows.sort(key=lambda r: (-abs(r["change_ms"]), r["name"]))
    d["top_kernels"] = rows[:5]
    d["off"], d["on"] = off, on
    if skip_periods == 0:
        st = effect(off_path, on_path, 1)
        d["steady"] = {k: st[k] for k in PART_KEYS + SPLIT_KEYS + (
            "sum_of_parts_ms", "period_mean_change_ms", "period_median_change_ms",
            "period_median_change_rel")}
        d["steady"]["off"] = {k: st["off"][k] for k in PART_KEYS + SPLIT_KEYS + (
            "period_mean_ms", "period_median_ms")}
        d["steady"]["on"] = {k: st["on"][k] for k in PART_KEYS + SPLIT_KEYS + (
            "period_mean_ms", "period_median_ms")}
    return d


# --- host lag ------------------------------------------------------------------------------------

def _pattern(mb, layers):
    if mb == 1:
        return "SR" * layers
    return "SS" + "RSRS" * (layers - 1) + "RR"


def _innermost(ops, a, b):
    """{name: time} of the innermost cpu_op open at each instant of [a, b) (ops on one thread)."""
    cov = [o for o in ops if o[0] < b and o[1] > a]
    if not cov:
        return {"(no op)": b - a}
    pts = sorted({a, b} | {max(a, o[0]) for o in cov} | {min(b, o[1]) for o in cov})
    out = collections.defaultdict(float)
    for x, y in zip(pts, pts[1:]):
        if y <= x:
            continue
        m = (x + y) / 2
        open_ = [o for o in cov if o[0] <= m < o[1]]
        # properly nested X events: the innermost is the latest started (then the shortest)
        name = max(open_, key=lambda o: (o[0], -o[1]))[2] if open_ else "(no op)"
        out[name] += y - x
    return out


def host_lag(bundle_path):
    """Pair each step's data-plane sends and receives; the host lag between them (docstring)."""
    attn_p, _ = role_traces(bundle_path)
    ev = load(attn_p)["traceEvents"]
    st = steps_of(ev)
    starts = [s for s, _ in st]
    launches = {}
    for e in ev:
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver"):
            c = (e.get("args") or {}).get("correlation")
            if c is not None:
                launches.setdefault(c, e)
    ops_by_ext, ops_by_tid = {}, collections.defaultdict(list)
    for e in ev:
        if e.get("ph") == "X" and e.get("cat") == "cpu_op":
            x = (e.get("args") or {}).get("External id")
            if x is not None and e["name"] in (SEND_OP, RECV_OP):
                ops_by_ext[x] = e
            ops_by_tid[e["tid"]].append((e["ts"], e["ts"] + e["dur"], e["name"]))
    eager = bool(ops_by_ext)
    per_step = collections.defaultdict(list)  # step index -> [(kernel, launch, kind, op)]
    join_time_ok = join_n = 0
    for e in ev:
        if not (e.get("ph") == "X" and e.get("cat") == "kernel" and e["name"].startswith(SENDRECV)):
            continue
        args = e.get("args") or {}
        call = launches.get(args.get("correlation"))
        if call is None:
            continue
        i = bisect.bisect_right(starts, call["ts"]) - 1
        if i < 0:
            continue
        if eager:
            op = ops_by_ext.get((call.get("args") or {}).get("External id"))
            if op is None:
                continue  # control plane (c10d) or another op
            join_n += 1
            join_time_ok += op["ts"] <= call["ts"] <= op["ts"] + op["dur"]
            kind = "S" if op["name"] == SEND_OP else "R"
            per_step[i].append([e, call, kind, op])
        else:
            if "Collective name" in args:
                continue
            per_step[i].append([e, call, None, None])
    trips, lags, rts, recv_d, send_d = [], [], [], [], []
    gpu_gaps, op_lags = [], []
    same_thread = 0
    by_op = collections.defaultdict(float)
    pattern_ok = pattern_n = 0
    mb_seen = collections.Counter()
    for i in sorted(per_step):
        ks = sorted(per_step[i], key=lambda r: r[0]["ts"])
        mb = 2 if len(ks) == 4 * LAYERS else 1
        mb_seen[(len(ks), mb)] += 1
        if len(ks) != 2 * LAYERS * mb:
            continue  # a partial step at the trace's edge
        pat = _pattern(mb, LAYERS)
        if eager:
            pattern_n += 1
            pattern_ok += "".join(r[2] for r in ks) == pat
        else:
            for r, k in zip(ks, pat):
                r[2] = k
        sends = [r for r in ks if r[2] == "S"]
        recvs = [r for r in ks if r[2] == "R"]
        for s, r in zip(sends, recvs):
            s_end = s[0]["ts"] + s[0]["dur"]
            r_end = r[0]["ts"] + r[0]["dur"]
            lag = max(0.0, r[1]["ts"] - s_end)
            rts.append(r_end - s[0]["ts"])
            lags.append(lag)
            recv_d.append(r[0]["dur"])
            gpu_gaps.append(r[0]["ts"] - s_end)
            if r[3] is not None:
                same_thread += s[3]["tid"] == r[3]["tid"]
                op_lags.append(max(0.0, r[3]["ts"] - s_end))
            send_d.append(s[0]["dur"])
            if lag > 0 and r[3] is not None:
                for name, t in _innermost(ops_by_tid[r[3]["tid"]], s_end, r[1]["ts"]).items():
                    by_op[name] += t
            trips.append(i)
    total = sum(lags)
    ranked = sorted(by_op.items(), key=lambda kv: -kv[1])
    top = ranked[0][0] if ranked else None
    lo, hi = st[0][0], st[-1][1]
    top_calls = [e["dur"] for e in ev if e.get("ph") == "X" and e.get("cat") == "cpu_op"
                 and e["name"] == top and lo <= e["ts"] < hi] if top else []
    return {
        "bundle": bundle_path, "mode": "eager (CPU ops)" if eager else "graph (replay order)",
        "join": ("launch call's External id = the op's External id" if eager
                 else "replayed kernels carry their cudaGraphLaunch's correlation"),
        "join_check": f"{join_time_ok}/{join_n} also nest in time" if eager else None,
        "pattern_eager_holds": f"{pattern_ok}/{pattern_n} steps" if eager else None,
        "pairs_same_thread": f"{same_thread}/{len(rts)}" if eager else None,
        "steps_kernels_microbatches": dict((f"{k}x{m}", c) for (k, m), c in mb_seen.items()),
        "round_trips": len(rts),
        "round_trips_per_step": len(rts) / len(set(trips)) if trips else 0,
        "median_round_trip_us": statistics.median(rts) if rts else None,
        "median_host_lag_us": statistics.median(lags) if lags else None,
        "mean_host_lag_us": total / len(lags) if lags else None,
        "median_send_end_to_recv_start_us": statistics.median(gpu_gaps) if gpu_gaps else None,
        "median_recv_op_lag_us": statistics.median(op_lags) if op_lags else None,
        "median_recv_kernel_us": statistics.median(recv_d) if recv_d else None,
        "median_send_kernel_us": statistics.median(send_d) if send_d else None,
        "lag_by_innermost_op": [(k, v / total) for k, v in ranked[:4]] if total else [],
        "top_op": top,
        "top_op_median_per_call_us": statistics.median(top_calls) if top_calls else None,
        "top_op_calls_per_step": len(top_calls) / len(st) if top_calls else None,
    }


# --- printing ------------------------------------------------------------------------------------

def _f(x, w=8, p=3):
    return f"{x:{w}.{p}f}" if isinstance(x, (int, float)) else f"{'-':>{w}}"


def _short(name, w=44):
    name = "".join(ch if ch.isprintable() else "?" for ch in name)
    return name if len(name) <= w else name[: w - 3] + "..."


def print_effect(d, off_label, on_label):
    rows = [("period mean (S/N)", "period_mean_ms"), ("period median", "period_median_ms")]
    rows += [(k[:-3].replace("_", " "), k) for k in PART_KEYS + SPLIT_KEYS]
    q = d.get("steady")
    print(f"{'ms per step':<18}{'off':>9}{'on':>9}{'on-off':>9}{'steady':>9}"
          f"{'FFN off':>9}{'FFN on':>9}")
    for label, k in rows:
        a, b = d["off"][k], d["on"][k]
        sc = q["on"][k] - q["off"][k] if q else None
        fo = d["off"]["ffn"][k] if d["off"]["ffn"] and k in d["off"]["ffn"] else None
        fn = d["on"]["ffn"][k] if d["on"]["ffn"] and k in d["on"]["ffn"] else None
        print(f"{label:<18}{_f(a, 9)}{_f(b, 9)}{_f(b - a, 9)}{_f(sc, 9)}{_f(fo, 9)}{_f(fn, 9)}")
    print(f"sum of part changes {d['sum_of_parts_ms']:+.3f} ms; period change: mean "
          f"{d['period_mean_change_ms']:+.3f} ms,\n  median {d['period_median_change_ms']:+.3f} ms "
          f"({d['period_median_change_rel']:+.1%}); "
          "'steady': on-off with the first period left out")
    print(f"{'kernel (top 5 by change)':<44}{'chg ms':>8}{'off us':>9}{'on us':>9}")
    for r in d["top_kernels"]:
        print(f"{_short(r['name']):<44}{r['change_ms']:+8.3f}{_f(r['off_median_us'], 9, 1)}"
              f"{_f(r['on_median_us'], 9, 1)}")


def print_lag(h):
    print(f"host lag, {h['mode']}: {h['round_trips']} round trips "
          f"({h['round_trips_per_step']:.0f}/step)")
    print(f"  join: {h['join']}")
    if h["join_check"]:
        print(f"  ({h['join_check']}; the eager order pattern holds in "
              f"{h['pattern_eager_holds']};")
        print(f"  send and receive ops on one CPU thread: {h['pairs_same_thread']} pairs)")
    print(f"  median round trip {_f(h['median_round_trip_us'], 0, 1)} us, host lag "
          f"{_f(h['median_host_lag_us'], 0, 1)} us (mean {_f(h['mean_host_lag_us'], 0, 1)})")
    print(f"  median receive kernel {_f(h['median_recv_kernel_us'], 0, 1)} us, send kernel "
          f"{_f(h['median_send_kernel_us'], 0, 1)} us")
    print(f"  beside it (medians): receive op start lag "
          f"{_f(h['median_recv_op_lag_us'], 0, 1)} us,")
    print(f"    send kernel end to receive kernel start "
          f"{_f(h['median_send_end_to_recv_start_us'], 0, 1)} us")
    for name, share in h["lag_by_innermost_op"]:
        print(f"  lag under {_short(name, 40)}: {share:.1%}")
    if h["top_op"]:
        print(f"  {_short(h['top_op'], 40)}: median "
              f"{_f(h['top_op_median_per_call_us'], 0, 1)} us a call,")
        print(f"    {h['top_op_calls_per_step']:.1f} calls a step")


def main(argv):
    if len(argv) != 3:
        print("usage: dbo_effect_truth.py OFF_BUNDLE ON_BUNDLE", file=sys.stderr)
        return 2
    off, on = argv[1], argv[2]
    d = effect(off, on)
    print(f"off: {off} ({d['off']['steps']} steps)   on: {on} ({d['on']['steps']} steps)")
    print_effect(d, off, on)
    for b in (off, on):
        print(f"-- {b}")
        print_lag(host_lag(b))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except BrokenPipeError:  # piped into head: the reader left, not an error
        sys.stderr.close()
        sys.exit(0)
