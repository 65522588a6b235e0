#!/usr/bin/env python3
"""Independent reference computation of dbo-trace's cross-rank wait / transfer figures.

Written from docs/analysis.md only ("Who is communication", "Which microbatch", "Overlap",
"Round trips and the DBO criterion", "Across ranks": "One clock", "Matching collectives",
"Wait and transfer" with its worked example, "Why comm is exposed").  Standard library only,
plain loops over the raw Kineto JSON and the hook event log.

Usage: python3 independent_waits.py INPUT [INPUT ...]
  INPUT: a bundle folder (manifest.json + traces/ [+ events/]), a folder of traces, or one
  trace file (*.json / *.json.gz).  Prints one JSON object {input: figures}.
  python3 independent_waits.py --selftest   checks the docs' worked example.

Every figure is in microseconds, rounded to 3 decimals; null where undefined (NOTES.md says why).
"""
import glob
import gzip
import json
import os
import re
import sys

# --------------------------------------------------------------------------------------------
# "Who is communication": kernel name, case-insensitive
# --------------------------------------------------------------------------------------------
COMM_PATTERNS = [
    # NCCL / RCCL
    r"^nccl", r"ncclDevKernel", r"ncclKernel", r"rccl",
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

GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "copy", "gpu_memset": "copy",
            "Kernel": "kernel", "Memcpy": "copy", "Memset": "copy"}
CALL_CATS = {"cuda_runtime", "cuda_driver", "Runtime", "Driver"}

# collectives whose message size is the same on every rank ("Matching collectives")
SAME_SIZE_COLLECTIVES = ("allreduce", "all_reduce", "broadcast", "reduce", "allgather",
                         "all_gather", "reducescatter", "reduce_scatter", "_allgather_base",
                         "_reduce_scatter_base", "allgather_into_tensor_coalesced",
                         "reduce_scatter_tensor_coalesced")

ACCURACY_US = {"baseTimeNanoseconds": 5.0, "ts on the epoch clock": 5.0,
               "first matched collective's end": 10.0}


def r3(x):
    if x is None:
        return None
    return round(float(x), 3)


def median(values):
    v = sorted(values)
    n = len(v)
    if n == 0:
        return None
    if n % 2:
        return v[n // 2]
    return (v[n // 2 - 1] + v[n // 2]) / 2.0


def is_comm_name(name, extra_patterns=()):
    low = name.lower()
    for p in COMM_PATTERNS:
        if re.search(p.lower(), low):
            return True
    for p in extra_patterns:
        if re.search(p, name, re.IGNORECASE):
            return True
    return False


# --------------------------------------------------------------------------------------------
# interval arithmetic (plain loops)
# --------------------------------------------------------------------------------------------
def union(intervals):
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
    total = 0.0
    for s, e in merged:
        total += e - s
    return total


def intersect(a, b):
    """a, b: merged (sorted, disjoint) interval lists."""
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
    """a minus b, both merged lists."""
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


# --------------------------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------------------------
def load_json(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def read_trace(path, extra_comm=()):
    doc = load_json(path)
    if isinstance(doc, list):
        events, meta = doc, {}
    else:
        events, meta = doc.get("traceEvents", []), doc
    dist = meta.get("distributedInfo") or {}
    rank = dist.get("rank")
    base = meta.get("baseTimeNanoseconds")
    calls = {}          # correlation -> launching call
    gpu = []            # GPU activities
    first_ts = None
    last_end = None
    cpu_pid = None
    step_markers = []   # ProfilerStep#N ranges (fallback steps)
    for e in events:
        if e.get("ph") != "X":
            continue
        ts = e.get("ts")
        if ts is None:
            continue
        ts = float(ts)
        dur = float(e.get("dur", 0) or 0)
        if first_ts is None or ts < first_ts:
            first_ts = ts
        if last_end is None or ts + dur > last_end:
            last_end = ts + dur
        cat = e.get("cat")
        args = e.get("args") or {}
        if cat in GPU_CATS:
            kind = GPU_CATS[cat]
            name = e.get("name", "")
            if kind == "kernel":
                kind = "comm" if is_comm_name(name, extra_comm) else "compute"
            gpu.append({"name": name, "kind": kind, "ts": ts, "end": ts + dur, "dur": dur,
                        "stream": args.get("stream", e.get("tid")), "corr": args.get("correlation"),
                        "pg": args.get("Process Group Name"),
                        "coll": args.get("Collective name"),
                        "nelems": args.get("In msg nelems"), "seq": args.get("Seq")})
        elif cat in CALL_CATS:
            c = args.get("correlation")
            if c is not None:
                calls[c] = {"name": e.get("name", ""), "ts": ts, "end": ts + dur,
                            "tid": e.get("tid"), "pid": e.get("pid")}
                if cpu_pid is None:
                    cpu_pid = e.get("pid")
        elif cat in ("user_annotation", "cpu_op", "Operator") and \
                str(e.get("name", "")).startswith("ProfilerStep#"):
            step_markers.append((ts, ts + dur))
    for g in gpu:
        g["call"] = calls.get(g["corr"])
    return {"path": path, "rank": rank, "world": dist.get("world_size"), "base_ns": base,
            "gpu": gpu, "first_ts": first_ts, "last_end": last_end, "pid": cpu_pid,
            "profiler_steps": sorted(step_markers)}


def read_event_log(path):
    with open(path) as f:
        lines = f.read().splitlines()
    header = json.loads(lines[0])
    rows = []
    for line in lines[1:]:
        line = line.strip()
        if not line:
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return header, rows


def find_inputs(inp):
    """-> (trace paths, event log paths, manifest)"""
    manifest = {}
    if os.path.isfile(inp):
        return [inp], [], manifest
    mpath = os.path.join(inp, "manifest.json")
    if os.path.exists(mpath):
        with open(mpath) as f:
            manifest = json.load(f)
    traces = []
    if manifest.get("traces"):
        traces = [os.path.join(inp, t) for t in manifest["traces"]]
    else:
        for pat in ("traces/*.json.gz", "traces/*.json", "*.json.gz", "*.pt.trace.json"):
            traces += glob.glob(os.path.join(inp, pat))
        traces = sorted(t for t in traces if not t.endswith("manifest.json"))
    logs = [os.path.join(inp, p) for p in manifest.get("events", [])] or \
        sorted(glob.glob(os.path.join(inp, "events", "*.jsonl")))
    return traces, logs, manifest


# --------------------------------------------------------------------------------------------
# "One clock"
# --------------------------------------------------------------------------------------------
def fig_clock_alignment(ranks):
    """Per rank offset (us) added to its trace ts to reach the shared (epoch) clock.

    Returns {method, per_rank, accuracy_us, offset_us (absolute, exact string-free float),
    relative_offset_us (rank r against the lowest rank: the alignment between ranks)}.
    Arrivals are computed relative to the lowest rank's base, in exact integer ns, so that the
    epoch offset's size does not eat the kernels' sub-microsecond edges.
    """
    per_rank = {}
    base_ns = {}
    for r in ranks:
        if r["base_ns"] is not None:
            per_rank[r["rank"]] = "baseTimeNanoseconds"
            base_ns[r["rank"]] = int(r["base_ns"])
        elif r["first_ts"] is not None and 1.5e15 <= r["first_ts"] <= 2.0e15:
            per_rank[r["rank"]] = "ts on the epoch clock"
            base_ns[r["rank"]] = 0
        else:
            per_rank[r["rank"]] = None
    methods = set(per_rank.values())
    if None in methods:
        # last resort (anchor on the first matched collective's end) is decided by the caller
        return {"method": None, "per_rank": per_rank, "accuracy_us": None, "offset_us": None,
                "relative_offset_us": None, "shift_us": None}
    method = methods.pop() if len(methods) == 1 else "mixed"
    ref = min(base_ns)
    shift = {}
    for rk, b in base_ns.items():
        shift[rk] = (b - base_ns[ref]) / 1000.0       # exact: integer ns difference
    offset = {rk: b / 1000.0 for rk, b in base_ns.items()}
    return {"method": method, "per_rank": per_rank, "accuracy_us": 5.0,
            "offset_us": offset, "relative_offset_us": shift, "shift_us": shift,
            "zero_ns": base_ns[ref]}


# --------------------------------------------------------------------------------------------
# "Matching collectives"
# --------------------------------------------------------------------------------------------
def comm_channels(rank):
    """channel name -> comm kernels in start order."""
    comm = sorted((g for g in rank["gpu"] if g["kind"] == "comm"), key=lambda g: (g["ts"], g["end"]))
    chans = {}
    stream_order = []
    for g in comm:
        if g["pg"] is not None:
            ch = "pg %s" % g["pg"]
        else:
            if g["stream"] not in stream_order:
                stream_order.append(g["stream"])
            ch = "stream #%d" % stream_order.index(g["stream"])
        chans.setdefault(ch, []).append(g)
    return chans


def _agree(a, b):
    if a["name"] != b["name"]:
        return False
    if (a["coll"] or None) != (b["coll"] or None):
        return False
    c = (a["coll"] or "").lower()
    if c in SAME_SIZE_COLLECTIVES and a["nelems"] != b["nelems"]:
        return False
    return True


def match_channel(ref_seq, oth_seq, shift_ref, shift_oth, notes, label):
    """-> list of (ref kernel, other kernel) pairs, or None (refused)."""
    if ref_seq and oth_seq and all(g["seq"] is not None for g in ref_seq + oth_seq):
        by_seq = {g["seq"]: g for g in oth_seq}
        return [(g, by_seq[g["seq"]]) for g in ref_seq if g["seq"] in by_seq]
    shorter = min(len(ref_seq), len(oth_seq))
    if shorter == 0:
        return None
    durs = [g["dur"] for g in ref_seq] + [g["dur"] for g in oth_seq]
    tol = max(50.0, 0.25 * median(durs))
    best = None
    for d in range(-8, 9):
        pairs = []
        for i, g in enumerate(ref_seq):
            j = i + d
            if 0 <= j < len(oth_seq):
                pairs.append((g, oth_seq[j]))
        if len(pairs) * 2 < shorter or not pairs:
            continue
        if not all(_agree(a, b) for a, b in pairs):
            continue
        diffs = [abs((a["end"] + shift_ref) - (b["end"] + shift_oth)) for a, b in pairs]
        m = median(diffs)
        if best is None or m < best[0]:
            best = (m, d, pairs)
    if best is None:
        notes.append("%s: no shift with agreeing kernels/collectives" % label)
        return None
    if best[0] > tol:
        notes.append("%s: best shift %d, median end difference %.1f us > %.1f us: refused"
                     % (label, best[1], best[0], tol))
        return None
    if best[1] != 0:
        notes.append("%s: matched at shift %d" % (label, best[1]))
    return best[2]


def fig_matched_collectives(ranks, clock, notes):
    """-> list of collectives: {channel, position, members {rank: kernel}}."""
    ranks = sorted(ranks, key=lambda r: r["rank"])
    ref = ranks[0]
    chans = {r["rank"]: comm_channels(r) for r in ranks}
    shift = clock["shift_us"]
    out = []
    for ch, ref_seq in chans[ref["rank"]].items():
        paired = {}
        for r in ranks[1:]:
            oth_seq = chans[r["rank"]].get(ch)
            if not oth_seq:
                notes.append("%s: rank %s has no such channel" % (ch, r["rank"]))
                paired[r["rank"]] = None
                continue
            pairs = match_channel(ref_seq, oth_seq, shift[ref["rank"]], shift[r["rank"]], notes,
                                  "%s: rank %s vs rank %s" % (ch, r["rank"], ref["rank"]))
            paired[r["rank"]] = None if pairs is None else {id(a): b for a, b in pairs}
        left_out = 0
        for pos, g in enumerate(ref_seq):
            members = {ref["rank"]: g}
            ok = True
            for r in ranks[1:]:
                m = paired[r["rank"]]
                if m is None or id(g) not in m:
                    ok = False
                    break
                members[r["rank"]] = m[id(g)]
            if ok:
                out.append({"channel": ch, "position": pos, "members": members})
            else:
                left_out += 1
        if left_out:
            notes.append("%s: %d of the reference's collectives without a partner on every rank"
                         % (ch, left_out))
    for ch in set().union(*[set(c) for c in chans.values()]) - set(chans[ref["rank"]]):
        notes.append("%s: not on the reference rank" % ch)
    return out


# --------------------------------------------------------------------------------------------
# "Wait and transfer"
# --------------------------------------------------------------------------------------------
def fig_wait_transfer(collectives, shift):
    """Per matched collective: arrival, last, skew; per rank wait and transfer.
    Stores the split on each kernel dict (g['wait'], g['transfer'])."""
    table = []
    for c in collectives:
        arr = {rk: g["ts"] + shift[rk] for rk, g in c["members"].items()}
        last_t = max(arr.values())
        last = min(rk for rk, t in arr.items() if t == last_t)   # ties: the lowest rank
        skew = last_t - min(arr.values())
        row = {"channel": c["channel"], "position": c["position"], "last_rank": last,
               "skew_us": skew, "ranks": {}}
        for rk, g in c["members"].items():
            wait = 0.0 if rk == last else min(last_t - arr[rk], g["dur"])
            transfer = g["dur"] - wait
            g["wait"] = wait
            g["transfer"] = transfer
            g["waited_for"] = last if rk != last else None
            row["ranks"][rk] = {"arrival_rel_us": arr[rk], "kernel_us": g["dur"],
                                "wait_us": wait, "transfer_us": transfer}
        table.append(row)
    return table


# --------------------------------------------------------------------------------------------
# steps (event log step_begin/step_end, else ProfilerStep#) and round trips
# --------------------------------------------------------------------------------------------
def steps_from_log(rank, logs):
    """Match the rank's event log by pid; -> list of {number, start, end, comm_phases}."""
    if rank["base_ns"] is None:
        return None
    for header, rows in logs:
        if header.get("pid") != rank["pid"]:
            continue
        begin, end, phases = {}, {}, {}
        for row in rows:
            t_ns, kind, step = row[0], row[1], row[5]
            if kind == "step_begin":
                begin[step] = t_ns
            elif kind == "step_end":
                end[step] = t_ns
            elif kind == "stream" and row[6] == "comm":
                phases[step] = phases.get(step, 0) + 1
        base = int(rank["base_ns"])
        steps = []
        for n in sorted(begin):
            if n not in end:
                continue
            steps.append({"number": n, "start": (begin[n] - base) / 1000.0,
                          "end": (end[n] - base) / 1000.0, "comm_phases": phases.get(n, 0)})
        return steps
    return None


def assign_steps(rank, steps):
    """GPU activity -> step whose CPU window holds its launching call."""
    for g in rank["gpu"]:
        g["step"] = None
        c = g["call"]
        if c is None:
            continue
        for s in steps:
            if s["start"] <= c["ts"] <= s["end"]:
                g["step"] = s["number"]
                break


def comm_runs(kernels):
    """Operations as runs of comm kernels launched back to back by one thread, no compute
    launched between them; kernels of one launch (graph replay) ordered by when they ran."""
    by_thread = {}
    for g in kernels:
        if g["kind"] == "copy" or g["call"] is None:
            continue
        by_thread.setdefault(g["call"]["tid"], []).append(g)
    runs = 0
    for tid, ks in by_thread.items():
        ks.sort(key=lambda g: (g["call"]["ts"], g["ts"]))
        prev_comm = False
        for g in ks:
            if g["kind"] == "comm":
                if not prev_comm:
                    runs += 1
                prev_comm = True
            else:
                prev_comm = False
    return runs


def split_sets(comm_kernels, accuracy=None):
    """-> (busy, wait set, transfer set, unmatched set, peer set) as merged interval lists.
    Wait intervals: [start, start + wait]; a kernel's own wait takes precedence."""
    busy = union((g["ts"], g["end"]) for g in comm_kernels)
    wait = union((g["ts"], g["ts"] + g["wait"]) for g in comm_kernels
                 if g.get("wait") is not None and g["wait"] > 0)
    peer = union((g["ts"], g["ts"] + g["wait"]) for g in comm_kernels
                 if g.get("wait") is not None and accuracy is not None and g["wait"] > accuracy)
    unmatched = subtract(union((g["ts"], g["end"]) for g in comm_kernels if g.get("wait") is None),
                         wait)
    transfer = subtract(subtract(busy, wait), unmatched)
    return busy, wait, transfer, unmatched, peer


def fig_round_trips(rank, steps, accuracy):
    """'Round trips and the DBO criterion', with comm per round trip split into wait and transfer.
    Medians over steps of per-step ratios."""
    if not steps:
        return None
    per = []
    for s in steps:
        ks = [g for g in rank["gpu"] if g.get("step") == s["number"]]
        if not ks:
            continue            # steps that launched nothing are not reported
        comm = [g for g in ks if g["kind"] == "comm"]
        if s.get("comm_phases"):
            ops, src = s["comm_phases"], "event log comm phases"
        else:
            ops, src = comm_runs(ks), "runs of comm kernels"
        busy, wait, transfer, unmatched, _ = split_sets(comm, accuracy)
        compute = union((g["ts"], g["end"]) for g in ks if g["kind"] == "compute")
        rt = ops / 2.0
        per.append({"step": s["number"], "ops": ops, "source": src, "runs": comm_runs(ks),
                    "round_trips": rt, "comm_busy": measure(busy), "wait": measure(wait),
                    "transfer": measure(transfer), "unmatched": measure(unmatched),
                    "compute_busy": measure(compute),
                    "step_us": max([s["end"]] + [g["end"] for g in ks]) - s["start"]})
    good = [p for p in per if p["round_trips"] > 0]
    if not good:
        return {"steps": len(per), "round_trips_per_step": 0, "per_step": per}
    res = {
        "steps": len(per),
        "source": sorted(set(p["source"] for p in good)),
        "round_trips_per_step": median([p["round_trips"] for p in good]),
        "comm_per_round_trip_us": median([p["comm_busy"] / p["round_trips"] for p in good]),
        "wait_per_round_trip_us": median([p["wait"] / p["round_trips"] for p in good]),
        "transfer_per_round_trip_us": median([p["transfer"] / p["round_trips"] for p in good]),
        "compute_per_round_trip_us": median([p["compute_busy"] / p["round_trips"] for p in good]),
    }
    if all(p["wait"] == 0 and p["transfer"] == 0 for p in good) and \
            any(p["unmatched"] > 0 for p in good):
        res["wait_per_round_trip_us"] = None
        res["transfer_per_round_trip_us"] = None
    # the split of the summed time (sum over steps), a cross-check that needs no medians
    tb = sum(p["comm_busy"] for p in good)
    trt = sum(p["round_trips"] for p in good)
    res["mean_comm_per_round_trip_us"] = tb / trt
    res["mean_wait_per_round_trip_us"] = sum(p["wait"] for p in good) / trt
    res["mean_transfer_per_round_trip_us"] = sum(p["transfer"] for p in good) / trt
    res["wait_share_of_round_trip_comm"] = (sum(p["wait"] for p in good) / tb) if tb else None
    res["per_step"] = [{"step": p["step"], "ops": p["ops"], "runs_of_comm_kernels": p["runs"],
                        "round_trips": p["round_trips"], "comm_busy_us": r3(p["comm_busy"]),
                        "wait_us": r3(p["wait"]), "transfer_us": r3(p["transfer"])} for p in per]
    return res


# --------------------------------------------------------------------------------------------
# rank figures: comm busy, hidden (split), exposed (split)
# --------------------------------------------------------------------------------------------
def fig_comm_totals(rank, cross, accuracy):
    comm = [g for g in rank["gpu"] if g["kind"] == "comm"]
    compute = union((g["ts"], g["end"]) for g in rank["gpu"] if g["kind"] == "compute")
    busy, wait, transfer, unmatched, peer = split_sets(comm, accuracy)
    hidden = intersect(busy, compute)
    exposed = subtract(busy, compute)
    out = {"comm_kernels": len(comm), "comm_kernel_time_us": sum(g["dur"] for g in comm),
           "comm_busy_us": measure(busy), "hidden_us": measure(hidden),
           "exposed_us": measure(exposed),
           "hidden_fraction": (measure(hidden) / measure(busy)) if busy else None}
    if not cross:
        for k in ("matched_kernels", "wait_us", "transfer_us", "wait_share", "hidden_wait_us",
                  "hidden_transfer_us", "hidden_share_of_transfer", "exposed_wait_us",
                  "exposed_transfer_us", "exposed_peer_us", "unmatched_us"):
            out[k] = None
        return out
    matched = [g for g in comm if g.get("wait") is not None]
    w_sum = sum(g["wait"] for g in matched)
    t_sum = sum(g["transfer"] for g in matched)
    out.update({
        "matched_kernels": len(matched),
        "matched_kernel_time_us": sum(g["dur"] for g in matched),
        "wait_us": w_sum,                       # summed per kernel ("Wait and transfer")
        "transfer_us": t_sum,
        "wait_share": (w_sum / out["comm_kernel_time_us"]) if comm else None,
        "wait_set_us": measure(wait),           # as a measure on the timeline
        "transfer_set_us": measure(transfer),
        "unmatched_us": measure(unmatched),
        "hidden_wait_us": measure(intersect(wait, compute)),
        "hidden_transfer_us": measure(intersect(transfer, compute)),
        "exposed_wait_us": measure(subtract(wait, compute)),
        "exposed_transfer_us": measure(subtract(transfer, compute)),
        "exposed_peer_us": measure(subtract(peer, compute)),
    })
    ts = out["transfer_set_us"]
    out["hidden_share_of_transfer"] = (out["hidden_transfer_us"] / ts) if ts else None
    ws = out["wait_set_us"]
    out["hidden_share_of_wait"] = (out["hidden_wait_us"] / ws) if ws else None
    waited_for = {}
    for g in matched:
        if g.get("waited_for") is not None and g["wait"] > 0:
            waited_for[g["waited_for"]] = waited_for.get(g["waited_for"], 0.0) + g["wait"]
    out["waited_for_us"] = waited_for
    return out


# --------------------------------------------------------------------------------------------
def analyse(inp):
    traces, log_paths, manifest = find_inputs(inp)
    extra = list(manifest.get("comm_kernels") or [])
    ranks = [read_trace(p, extra) for p in traces]
    for i, r in enumerate(ranks):
        if r["rank"] is None:
            r["rank"] = i
    ranks.sort(key=lambda r: r["rank"])
    logs = [read_event_log(p) for p in log_paths if os.path.exists(p)]
    notes = []
    result = {"ranks": {}, "notes": notes}
    cross = len(ranks) >= 2
    if not cross:
        notes.append("one trace only (rank %s of world size %s): no peer to match collectives "
                     "with; every cross-rank figure is null" % (ranks[0]["rank"], ranks[0]["world"]))
        result["alignment"] = None
        result["matched_collectives"] = None
        result["collectives"] = None
        accuracy = None
    else:
        clock = fig_clock_alignment(ranks)
        if clock["method"] is None:
            notes.append("a rank without baseTimeNanoseconds or epoch ts: anchor alignment not "
                         "implemented here (not needed for these inputs)")
            cross = False
            accuracy = None
            result["alignment"] = clock
            result["matched_collectives"] = None
            result["collectives"] = None
        else:
            accuracy = clock["accuracy_us"]
            cols = fig_matched_collectives(ranks, clock, notes)
            table = fig_wait_transfer(cols, clock["shift_us"])
            ends = []
            for c in cols:
                e = [g["end"] + clock["shift_us"][rk] for rk, g in c["members"].items()]
                ends.append(max(e) - min(e))
            result["alignment"] = {
                "method": clock["method"], "per_rank": clock["per_rank"],
                "accuracy_us": clock["accuracy_us"],
                "offset_us": {rk: r3(v) for rk, v in clock["offset_us"].items()},
                "relative_offset_us": {rk: r3(v) for rk, v in clock["relative_offset_us"].items()},
                "zero_ns": clock["zero_ns"]}
            result["matched_collectives"] = len(cols)
            result["median_end_spread_us"] = r3(median(ends)) if ends else None
            result["median_skew_us"] = r3(median([t["skew_us"] for t in table])) if table else None
            result["last_counts"] = {}
            for t in table:
                result["last_counts"][t["last_rank"]] = result["last_counts"].get(t["last_rank"], 0) + 1
            result["collectives"] = [
                {"channel": t["channel"], "position": t["position"], "last_rank": t["last_rank"],
                 "skew_us": r3(t["skew_us"]),
                 "ranks": {rk: {"kernel_us": r3(v["kernel_us"]), "wait_us": r3(v["wait_us"]),
                                "transfer_us": r3(v["transfer_us"])}
                           for rk, v in t["ranks"].items()}} for t in table]
            if not cols:
                cross = False
    for r in ranks:
        steps = steps_from_log(r, logs)
        src = "event log"
        if steps is None:
            steps = [{"number": i + 1, "start": s, "end": e, "comm_phases": 0}
                     for i, (s, e) in enumerate(r["profiler_steps"])]
            src = "ProfilerStep#" if steps else None
        assign_steps(r, steps or [])
        fig = fig_comm_totals(r, cross, accuracy)
        rt = fig_round_trips(r, steps, accuracy) if steps else None
        if rt is not None and not cross:
            rt["wait_per_round_trip_us"] = None
            rt["transfer_per_round_trip_us"] = None
            rt["wait_share_of_round_trip_comm"] = None
            rt["mean_wait_per_round_trip_us"] = None
            rt["mean_transfer_per_round_trip_us"] = None
        if rt is not None:
            rt["steps_source"] = src
        result["ranks"][r["rank"]] = {"trace": os.path.basename(r["path"]), **fig,
                                      "round_trip": rt}
    return result


def rounded(obj):
    if isinstance(obj, float):
        return r3(obj)
    if isinstance(obj, dict):
        return {str(k): rounded(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [rounded(v) for v in obj]
    return obj


# --------------------------------------------------------------------------------------------
def selftest():
    """The docs' worked example: three ranks, one all-to-all."""
    def k(ts, end):
        return {"name": "ncclDevKernel_SendRecv", "kind": "comm", "ts": ts, "end": end,
                "dur": end - ts, "coll": None, "nelems": None, "seq": None, "pg": None}
    ks = {0: k(100, 160), 1: k(130, 162), 2: k(40, 162)}
    fig_wait_transfer([{"channel": "x", "position": 0, "members": ks}], {0: 0, 1: 0, 2: 0})
    got = {rk: (g["wait"], g["transfer"]) for rk, g in ks.items()}
    assert got == {0: (30, 30), 1: (0, 32), 2: (90, 32)}, got
    ks = {0: k(100, 160), 1: k(130, 162), 2: k(40, 120)}
    fig_wait_transfer([{"channel": "x", "position": 0, "members": ks}], {0: 0, 1: 0, 2: 0})
    assert (ks[2]["wait"], ks[2]["transfer"]) == (80, 0)
    # exposed-comm peer split: rank 2 runs no compute 40-100 -> 60 us of its wait exposed
    ks = {0: k(100, 160), 1: k(130, 162), 2: k(40, 162)}
    fig_wait_transfer([{"channel": "x", "position": 0, "members": ks}], {0: 0, 1: 0, 2: 0})
    busy, wait, transfer, unm, peer = split_sets([ks[2]], 5.0)
    compute = [(100.0, 140.0)]
    exposed = subtract(busy, compute)
    assert measure(intersect(exposed, peer)) == 60, intersect(exposed, peer)
    print("selftest ok")


def main(argv):
    if argv and argv[0] == "--selftest":
        selftest()
        return 0
    if not argv:
        print(__doc__)
        return 2
    out = {}
    for inp in argv:
        out[inp] = rounded(analyse(inp))
    print(json.dumps(out, indent=1, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
