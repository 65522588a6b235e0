"""An independent reference for the disaggregated round trips (docs/analysis.md, "Disaggregated round
trips (AFD)"), written from that section alone: plain loops over the Kineto JSON, no dbo_trace import.

Steps are vLLM's `execute_*` annotations; a kernel belongs to the step whose annotation holds its
launching call (joined on correlation). Microbatches: in a step where exactly two threads other than
the one holding the step annotations launched kernels, they are ub0 and ub1 in order of first launch.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
from pathlib import Path

P2P = re.compile(r"sendrecv|ncclDevKernel_Send|ncclDevKernel_Recv|ncclKernel_Send|ncclKernel_Recv", re.I)
NCCL = re.compile(r"nccl", re.I)


def _load(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def _stream(e: dict) -> int:
    return int(e.get("args", {}).get("stream", e.get("tid")))


def round_trips(attention: Path) -> list[dict]:
    """Every round trip: step, ub, s0, s1, r0, r1, hidden."""
    doc = _load(attention)
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e["ts"], e["ts"] + e["dur"], e["tid"]) for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("execute_"))
    marker_threads = {t for _, _, t in steps}
    calls = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    kernels = sorted((e for e in ev if e.get("cat") == "kernel"), key=lambda e: e["ts"])

    def step_of(call: dict) -> int | None:
        for i, (a, b, _) in enumerate(steps):
            if a <= call["ts"] <= b:
                return i
        return None

    by_step: dict[int, list[dict]] = {}
    for k in kernels:
        call = calls.get(k["args"].get("correlation"))
        if call is None:
            continue
        s = step_of(call)
        if s is None:
            continue
        k = dict(k, _thread=call["tid"], _call_ts=call["ts"], _p2p=bool(P2P.search(k["name"])), _comm=bool(NCCL.search(k["name"])),
                 _replayed=call["name"] in ("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"))  # fmt: skip
        by_step.setdefault(s, []).append(k)
    compute_streams = {_stream(k) for ks in by_step.values() for k in ks if not k["_comm"]}
    out = []
    for s in sorted(by_step):
        ks = by_step[s]
        comp = [k for k in ks if not k["_comm"]]
        data = [k for k in ks if k["_p2p"] and (_stream(k) in compute_streams or k["_replayed"])]
        if not data:
            continue
        # microbatch threads: two threads besides the marker thread, at least 2 launches each, within 4x
        counts: dict[int, int] = {}
        first: dict[int, float] = {}
        for k in ks:
            t = k["_thread"]
            if t in marker_threads:
                continue
            counts[t] = counts.get(t, 0) + 1
            first[t] = min(first.get(t, k["_call_ts"]), k["_call_ts"])
        ub_of_thread = {}
        if len(counts) == 2 and min(counts.values()) >= 2 and max(counts.values()) <= 4 * min(counts.values()):
            ub_of_thread = {t: i for i, t in enumerate(sorted(counts, key=lambda t: first[t]))}
        seqs: dict[int, list[dict]] = {}
        comp_ub: list[int] = []
        if ub_of_thread and all(k["_thread"] in ub_of_thread for k in data):
            for k in data:
                seqs.setdefault(ub_of_thread[k["_thread"]], []).append(k)
            comp_ub = [ub_of_thread.get(k["_thread"], -1) for k in comp]
        else:
            gap = len(data) >= 2 and any(data[0]["ts"] + data[0]["dur"] <= k["ts"] < data[1]["ts"] for k in comp)
            if gap and len(data) % 4 == 0:
                L = len(data) // 4
                seq = [(0, "S"), (1, "S")] + [(0, "R"), (0, "S"), (1, "R"), (1, "S")] * (L - 1) + [(0, "R"), (1, "R")]
                for k, (u, _role) in zip(data, seq):
                    seqs.setdefault(u, []).append(k)
                for c in comp:  # the last data kernel ended at or before it
                    before = [i for i, k in enumerate(data) if k["ts"] + k["dur"] <= c["ts"]]
                    if not before:
                        comp_ub.append(seq[0][0])
                        continue
                    i = before[-1]
                    if seq[i][1] == "R" or i + 1 >= len(seq):
                        comp_ub.append(seq[i][0])
                    else:
                        comp_ub.append(seq[i + 1][0])
            else:
                seqs[-1] = data
                comp_ub = [-1] * len(comp)
        for u, seq_k in seqs.items():
            for j in range(0, len(seq_k) - 1, 2):
                snd, rcv = seq_k[j], seq_k[j + 1]
                s0, s1, r1 = snd["ts"], snd["ts"] + snd["dur"], rcv["ts"] + rcv["dur"]
                # the host's lag: the send's end to the receive's launch call (within the send's end and the receive's start)
                lag_end = min(max(rcv["_call_ts"], s1), max(rcv["ts"], s1))
                hidden = lag_hidden = 0.0
                if u >= 0:
                    other = [c for c, cu in zip(comp, comp_ub) if cu >= 0 and cu != u]
                    hidden, lag_hidden = _union_within(other, s0, r1), _union_within(other, s1, lag_end)
                out.append({"step": s, "ub": u, "s0": s0, "s1": s1, "r0": rcv["ts"], "r1": r1, "hidden": hidden,
                            "lag": lag_end - s1, "lag_hidden": lag_hidden})  # fmt: skip
    return out


def _union_within(kernels: list[dict], lo: float, hi: float) -> float:
    """Length of [lo, hi] covered by the kernels' union."""
    pieces = sorted((max(lo, c["ts"]), min(hi, c["ts"] + c["dur"])) for c in kernels if c["ts"] < hi and c["ts"] + c["dur"] > lo)
    total, end = 0.0, None
    for a, b in pieces:
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def hidden_share(rts: list[dict]) -> float:
    """Of the round trips' time less the host's lag, the other microbatch's compute (docs/analysis.md)."""
    return sum(r["hidden"] - r["lag_hidden"] for r in rts) / sum(r["r1"] - r["s0"] - r["lag"] for r in rts)


def per_step(rts: list[dict]) -> float:
    counts: dict[int, int] = {}
    for r in rts:
        counts[r["step"]] = counts.get(r["step"], 0) + 1
    return statistics.median(counts.values())


def parts(attention: Path, ffn: Path, rts: list[dict]) -> list[dict | None]:
    """Per round trip (in send order): transfer, ffn, wait, or None where unmatched."""
    a_doc, f_doc = _load(attention), _load(ffn)
    offset = (f_doc["baseTimeNanoseconds"] - a_doc["baseTimeNanoseconds"]) / 1000.0
    fev = [e for e in f_doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
    f_compute_streams = {_stream(e) for e in fev if not NCCL.search(e["name"])}
    a_lo = min(e["ts"] for e in a_doc["traceEvents"] if e.get("ph") == "X" and "ts" in e)
    a_hi = max(e["ts"] + e.get("dur", 0) for e in a_doc["traceEvents"] if e.get("ph") == "X" and "ts" in e)
    fdata = []
    for e in sorted(fev, key=lambda e: e["ts"]):
        if P2P.search(e["name"]) and _stream(e) in f_compute_streams:
            a, b = e["ts"] + offset, e["ts"] + e["dur"] + offset
            if b > a_lo and a < a_hi:  # cut to the attention's window
                fdata.append((max(a, a_lo), min(b, a_hi)))
    fdata.sort()
    order = sorted(range(len(rts)), key=lambda i: rts[i]["s0"])
    best = None
    for phase in (0, 1):
        recv = fdata[phase::2]
        send = fdata[phase + 1 :: 2]
        res: list[dict | None] = [None] * len(rts)
        nxt = 0
        delays = []
        for i in order:
            r = rts[i]
            j = nxt
            while j < len(recv) and recv[j][1] < r["s0"] - 5.0:
                j += 1
            if j >= len(recv) or j >= len(send):
                break
            f1, g0 = recv[j][1], send[j][0]
            if f1 <= g0 + 5.0 and g0 <= r["r1"] + 5.0:
                t1 = min(max(f1, r["s0"]), r["r1"])
                t2 = min(max(g0, t1), r["r1"])
                res[i] = {"transfer": (t1 - r["s0"]) + (r["r1"] - t2), "ffn": t2 - t1, "wait": max(0.0, t2 - r["r0"])}
                delays.append(f1 - r["s0"])
                nxt = j + 1
        matched = sum(x is not None for x in res)
        cand = (matched, statistics.median(delays) if delays else float("inf"), res)
        if best is None:
            best = cand
        else:
            most = max(best[0], matched)
            fits = [c for c in (best, cand) if c[0] >= 0.9 * most]
            best = min(fits, key=lambda c: c[1])
    assert best is not None
    return best[2]
