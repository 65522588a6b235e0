"""Across ranks, computed again from the raw traces and docs/analysis.md alone.

Written from the documentation ("Across ranks": one clock, matching collectives, wait and
transfer, the straggler threshold and its worked example; "Why comm is exposed": the peer reason;
"Steps" for the step windows) and docs/report-schema.md for the keys, without reading the
package's implementation. Plain Python over json.load: dicts, lists, loops; nothing from dbo_trace.

What it computes, in the docs' words:
- one clock: `baseTimeNanoseconds` where the trace has it (shared = ts + base / 1000), else `ts on
  the epoch clock` where ts is already epoch microseconds (1.5e15-2.0e15); accuracy 5 us;
- channels: the kernel's `Process Group Name`, else the rank's n-th communication stream in order
  of first use; the lowest rank is the reference; pairing by `Seq` where every kernel has one,
  else by order shifted by d (|d| <= 8), at least half the shorter sequence paired, names,
  collective names and (for fixed-size collectives) message sizes agreeing, the shift whose
  kernels' ends agree best (median absolute difference), which must be within the larger of
  50 us and a quarter of the kernels' median duration; otherwise the channel is refused;
- per matched collective: arrival = kernel start on the shared clock; last = the latest arrival
  (ties: the lowest rank); wait = last arrival - own arrival, at most the own kernel time;
  transfer = kernel time - wait;
- steps: the hook event log's step_begin/step_end (time.time_ns, mapped onto the trace clock
  through baseTimeNanoseconds), else ProfilerStep#N; a step's window runs from its CPU start to the
  later of its CPU end and the end of the last GPU activity whose launching call (joined on
  args.correlation) lies in it; steps that launched nothing are dropped;
- threshold = max(2% of the median step time over all ranks' steps, 3 x accuracy); a step is a
  straggler step when its start skew is above it; a rank "arrived last" at a collective only when
  the collective's skew is above it (`last_ops`, `caused_us` = what the others waited there);
- peer exposed comm: the part of the `comm_exposed` bucket (comm running, no compute) that lies in
  [start, start + wait] of the matched comm kernel covering it, waits within the accuracy left out.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import re

# docs/analysis.md, "Who is communication": the built-in families, by kernel name, case-insensitive.
COMM_PATTERNS = [
    r"^nccl",
    r"ncclDevKernel",
    r"ncclKernel",
    r"rccl",
    r"deep_ep",
    r"deepep",
    r"::ep::",
    r"ep::intranode",
    r"ep::internode",
    r"ep::internode_ll",
    r"notify_dispatch",
    r"notify_combine",
    r"cached_notify",
    r"pplx",
    r"all_to_all",
    r"alltoall",
    r"nvshmem",
    r"cross_device_reduce",
    r"custom_all_reduce",
    r"all_reduce",
    r"all_gather",
    r"reduce_scatter",
    r"moe_dispatch",
    r"ep_combine",
    r"a2a_dispatch",
    r"all2all_combine",
    r"dispatch_kernel",
    r"combine_kernel",
    r"symm_mem",
    r"multimem",
    r"two_shot",
    r"one_shot_all",
]
COMM_RE = re.compile("|".join(COMM_PATTERNS), re.IGNORECASE)
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
CALL_CATS = ("cuda_runtime", "cuda_driver")
ACCURACY_US = 5.0
MAX_SHIFT = 8
# collectives whose message size is the same on every rank (docs: "Matching collectives")
FIXED_SIZE = (
    "all_reduce",
    "allreduce",
    "broadcast",
    "reduce",
    "all_gather",
    "allgather",
    "reduce_scatter",
    "reducescatter",
    "_allgather_base",
    "_reduce_scatter_base",
)


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def median(values):
    s = sorted(values)
    n = len(s)
    if n == 0:
        return None
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


class Rank:
    """One rank's trace: its events, clock and the pieces the cross-rank figures need."""

    def __init__(self, path, events_dir=None):
        doc = load(path)
        self.path = path
        self.doc = doc if isinstance(doc, dict) else {"traceEvents": doc}
        ev = [e for e in self.doc["traceEvents"] if isinstance(e, dict)]
        self.events = ev
        info = self.doc.get("distributedInfo") or {}
        self.rank = info.get("rank")
        base = self.doc.get("baseTimeNanoseconds")
        timed = [e["ts"] for e in ev if isinstance(e.get("ts"), (int, float)) and e.get("ph") == "X"]
        if base:
            self.method = "baseTimeNanoseconds"
            self.base_ns = int(base)
            self.offset_us = int(base) / 1000.0
        elif timed and 1.5e15 <= min(timed) <= 2.0e15:
            self.method = "ts on the epoch clock"
            self.base_ns = 0
            self.offset_us = 0.0
        else:
            self.method = None
            self.base_ns = None
            self.offset_us = None
        self.gpu = [e for e in ev if e.get("cat") in GPU_CATS and e.get("ph") == "X"]
        self.kernels = [e for e in self.gpu if e["cat"] == "kernel"]
        self.comm = sorted(
            (k for k in self.kernels if COMM_RE.search(k.get("name", ""))), key=lambda k: (k["ts"], k["ts"] + k["dur"])
        )
        self.compute = [k for k in self.kernels if not COMM_RE.search(k.get("name", ""))]
        self.calls = {}
        for e in ev:
            if e.get("cat") in CALL_CATS and e.get("ph") == "X":
                corr = (e.get("args") or {}).get("correlation")
                if corr is not None:
                    self.calls[corr] = e
        self.comm_us = sum(k["dur"] for k in self.comm)
        self.thread_ubatch = {}
        self.native_ident = {}
        self.log_steps = []
        self.steps = self._steps(events_dir)

    # -- steps -------------------------------------------------------------------------------
    def _cpu_pid(self):
        for e in self.events:
            if e.get("cat") == "user_annotation":
                return e.get("pid")
        return None

    def _log_steps(self, events_dir):
        """(begin, end) on the trace clock from the hook event log whose pid is this trace's."""
        if not events_dir or self.base_ns is None:
            return None
        pid = self._cpu_pid()
        for path in sorted(glob.glob(os.path.join(events_dir, "*.jsonl"))):
            with open(path) as fh:
                lines = fh.read().splitlines()
            header = json.loads(lines[0])
            if header.get("pid") != pid:
                continue
            begins, ends = {}, {}
            for line in lines[1:]:
                row = json.loads(line)
                # [time_ns, kind, ident, native_tid, ubatch, step, payload]: a microbatch thread's
                # rows name its microbatch, per step (the next step's threads reuse the idents,
                # and the trace keeps the thread id it first saw for an ident)
                if isinstance(row[4], int) and row[4] >= 0:
                    self.thread_ubatch[(row[5], row[2])] = row[4]
                    self.native_ident.setdefault(row[3], row[2])
                    self.native_ident.setdefault(row[2] & 0xFFFFFFFF, row[2])
                if row[1] == "step_begin":
                    begins[row[5]] = (row[0] - self.base_ns) / 1000.0
                elif row[1] == "step_end":
                    ends[row[5]] = (row[0] - self.base_ns) / 1000.0
            self.log_steps = [(n, begins[n], ends[n]) for n in sorted(begins) if n in ends]
            return [(b, e) for _, b, e in self.log_steps]
        return None

    def ubatch_of(self, kernel):
        """The microbatch of the thread that launched the kernel, from the event log; -1 unknown
        (no log, a call on the main thread, a graph replay)."""
        call = self.calls.get((kernel.get("args") or {}).get("correlation"))
        if call is None:
            return -1
        for n, begin, end in self.log_steps:
            if begin <= call["ts"] <= end:
                ident = self.native_ident.get(call.get("tid"))
                return self.thread_ubatch.get((n, ident), -1)
        return -1

    def _steps(self, events_dir):
        cpu = self._log_steps(events_dir)
        if cpu is None:
            cpu = sorted(
                (e["ts"], e["ts"] + e["dur"])
                for e in self.events
                if e.get("ph") == "X"
                and re.match(r"^ProfilerStep#\d+$", e.get("name", ""))
                and e.get("cat") not in GPU_CATS
                and e.get("cat") != "gpu_user_annotation"
            )
        steps = []
        for begin, end in cpu:
            last_end = None
            for g in self.gpu:
                call = self.calls.get((g.get("args") or {}).get("correlation"))
                if call is not None and begin <= call["ts"] <= end:
                    g_end = g["ts"] + g["dur"]
                    last_end = g_end if last_end is None else max(last_end, g_end)
            if last_end is None:
                continue  # launched nothing: not reported
            steps.append({"start": begin, "end": max(end, last_end), "step_us": max(end, last_end) - begin})
        return steps

    # -- channels ----------------------------------------------------------------------------
    def channels(self):
        stream_order = []
        for k in self.comm:
            s = (k.get("args") or {}).get("stream")
            if s not in stream_order:
                stream_order.append(s)
        out = {}
        for k in self.comm:
            args = k.get("args") or {}
            pg = args.get("Process Group Name")
            key = ("pg", str(pg)) if pg is not None else ("stream", stream_order.index(args.get("stream")))
            out.setdefault(key, []).append(k)
        return out


def shared(rank, ts):
    return ts + rank.offset_us


def _agree(a, b):
    if a["name"] != b["name"]:
        return False
    aa, ba = a.get("args") or {}, b.get("args") or {}
    ca, cb = aa.get("Collective name"), ba.get("Collective name")
    if ca is not None and cb is not None and ca != cb:
        return False
    if ca is not None and ca.lower() in FIXED_SIZE:
        sa, sb = aa.get("In msg nelems"), ba.get("In msg nelems")
        if sa is not None and sb is not None and sa != sb:
            return False
    return True


def pair_channel(ref, ref_k, other, oth_k):
    """Index pairs (i_ref, i_other) of one channel, or None (refused)."""
    if all("Seq" in (k.get("args") or {}) for k in ref_k + oth_k):
        by_seq = {(k["args"]["Seq"]): j for j, k in enumerate(oth_k)}
        return [(i, by_seq[k["args"]["Seq"]]) for i, k in enumerate(ref_k) if k["args"]["Seq"] in by_seq]
    shorter = min(len(ref_k), len(oth_k))
    best = None
    for d in range(-MAX_SHIFT, MAX_SHIFT + 1):
        pairs = [(i, i + d) for i in range(len(ref_k)) if 0 <= i + d < len(oth_k)]
        if not pairs or len(pairs) * 2 < shorter:
            continue
        if not all(_agree(ref_k[i], oth_k[j]) for i, j in pairs):
            continue
        # ends compared on the trace clocks plus the offsets' difference: a float of epoch
        # microseconds keeps only a quarter of a microsecond
        delta = other.offset_us - ref.offset_us
        diffs = [abs(ref_k[i]["ts"] + ref_k[i]["dur"] - (oth_k[j]["ts"] + oth_k[j]["dur"] + delta)) for i, j in pairs]
        med_diff = median(diffs)
        med_dur = median([ref_k[i]["dur"] for i, _ in pairs] + [oth_k[j]["dur"] for _, j in pairs])
        if med_diff > max(50.0, med_dur / 4.0):
            continue
        if best is None or med_diff < best[0]:
            best = (med_diff, pairs)
    return None if best is None else best[1]


def analyse(bundle_or_dir):
    """Everything the tests compare, for a bundle (traces/ + events/) or a folder of traces."""
    tdir = os.path.join(bundle_or_dir, "traces")
    if not os.path.isdir(tdir):
        tdir = bundle_or_dir
    edir = os.path.join(bundle_or_dir, "events")
    edir = edir if os.path.isdir(edir) else None
    ranks = [Rank(p, edir) for p in sorted(glob.glob(os.path.join(tdir, "*.json*")))]
    ranks.sort(key=lambda r: r.rank)
    ids = [r.rank for r in ranks]
    methods = {r.rank: r.method for r in ranks}
    method = methods[ids[0]] if len(set(methods.values())) == 1 else "mixed"

    # steps and the threshold
    all_steps = [s["step_us"] for r in ranks for s in r.steps]
    median_step = median(all_steps)
    threshold = max(0.02 * median_step, 3 * ACCURACY_US)
    n_steps = min(len(r.steps) for r in ranks)
    steps = []
    for p in range(n_steps):
        starts = {r.rank: shared(r, r.steps[p]["start"]) for r in ranks}
        # on the trace clocks where the offsets are equal, to keep the float's precision
        rel = {r.rank: r.steps[p]["start"] + (r.offset_us - ranks[0].offset_us) for r in ranks}
        latest = max(rel.values())
        last = min(k for k, v in rel.items() if v == latest)
        skew = latest - min(rel.values())
        steps.append({"position": p, "starts_us": starts, "skew_us": skew, "last_rank": last, "straggler": skew > threshold})
    late_counts, last_counts = {}, {}
    for s in steps:
        last_counts[s["last_rank"]] = last_counts.get(s["last_rank"], 0) + 1
        if s["straggler"]:
            late_counts[s["last_rank"]] = late_counts.get(s["last_rank"], 0) + 1

    # matched collectives
    ref = ranks[0]
    chans = {r.rank: r.channels() for r in ranks}
    operations, refused = [], []
    for key, ref_k in chans[ref.rank].items():
        partner = {}
        for other in ranks[1:]:
            oth_k = chans[other.rank].get(key)
            pairs = pair_channel(ref, ref_k, other, oth_k) if oth_k else None
            if pairs is None:
                refused.append((key, other.rank))
                continue
            partner[other.rank] = dict(pairs)
        if len(partner) != len(ranks) - 1:
            continue
        for i, k in enumerate(ref_k):
            if not all(i in partner[o.rank] for o in ranks[1:]):
                continue
            members = {ref.rank: (ref, k)}
            for o in ranks[1:]:
                members[o.rank] = (o, chans[o.rank][key][partner[o.rank][i]])
            operations.append((key, i, members))

    waits = {
        r: {"wait_us": 0.0, "transfer_us": 0.0, "matched_us": 0.0, "waited_for_us": {}, "last_ops": 0, "caused_us": 0.0}
        for r in ids
    }
    op_rows = []
    spreads = []
    held = {}  # (rank, microbatch): what the others waited for it where it arrived last above the threshold
    for key, i, members in operations:
        # relative to the reference's offset (the docs' zero_us), never through epoch floats
        arrival = {r: k["ts"] + (rk.offset_us - ref.offset_us) for r, (rk, k) in members.items()}
        ends = [k["ts"] + k["dur"] + (rk.offset_us - ref.offset_us) for rk, k in members.values()]
        spreads.append(max(ends) - min(ends))
        latest = max(arrival.values())
        last = min(r for r, a in arrival.items() if a == latest)
        skew = latest - min(arrival.values())
        row = {"channel": key, "index": i, "last_rank": last, "skew_us": skew, "ranks": {}}
        for r, (_rk, k) in members.items():
            wait = min(latest - arrival[r], k["dur"])
            transfer = k["dur"] - wait
            w = waits[r]
            w["wait_us"] += wait
            w["transfer_us"] += transfer
            w["matched_us"] += k["dur"]
            if r != last and wait > 0:
                w["waited_for_us"][last] = w["waited_for_us"].get(last, 0.0) + wait
            row["ranks"][r] = {
                "arrival_us": arrival[r],
                "kernel_us": k["dur"],
                "wait_us": wait,
                "transfer_us": transfer,
                "kernel": k,
            }
        caused = sum(v["wait_us"] for r, v in row["ranks"].items() if r != last)
        last_rank = members[last][0]
        ub = last_rank.ubatch_of(members[last][1])
        for r, (rk, k) in members.items():
            by_ub = held.setdefault((r, rk.ubatch_of(k)), {"caused_us": 0.0, "last_ops": 0, "operations": 0})
            by_ub["operations"] += 1
        if skew > threshold:
            waits[last]["last_ops"] += 1
            waits[last]["caused_us"] += caused
            held[(last, ub)]["last_ops"] += 1
            held[(last, ub)]["caused_us"] += caused
        op_rows.append(row)
    for r in ranks:
        waits[r.rank]["comm_us"] = r.comm_us
        waits[r.rank]["wait_share"] = waits[r.rank]["wait_us"] / r.comm_us if r.comm_us else None
    waited_for_total = {r: sum(w["waited_for_us"].get(r, 0.0) for w in waits.values()) for r in ids}
    return {
        "ranks": ranks,
        "alignment": {
            "method": method,
            "per_rank": methods,
            "accuracy_us": ACCURACY_US,
            "offset_us": {r.rank: r.offset_us for r in ranks},
        },
        "median_step_us": median_step,
        "threshold_us": threshold,
        "steps": steps,
        "late_counts": late_counts,
        "last_counts": last_counts,
        "operations": op_rows,
        "refused": refused,
        "median_end_spread_us": median(spreads),
        "waits": waits,
        "waited_for_total": waited_for_total,
        # the rank the others waited for most where it arrived last above the threshold; None
        # where no rank did
        "held_back_most_rank": (
            max(ids, key=lambda r: (waits[r]["caused_us"], -r)) if any(waits[r]["last_ops"] for r in ids) else None
        ),
        # the rank and microbatch the others waited for most (`waits.held_back_most`)
        "held_back_most": (
            None
            if not any(v["last_ops"] for v in held.values())
            else dict(
                zip(("rank", "ubatch"), max(held, key=lambda k: held[k]["caused_us"])),
                **held[max(held, key=lambda k: held[k]["caused_us"])],
            )
        ),
    }


def _union(intervals):
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def _minus_measure(a, b, covered):
    """Length of [a, b] not covered by the sorted disjoint intervals `covered`."""
    left = b - a
    for c, d in covered:
        if d <= a:
            continue
        if c >= b:
            break
        left -= min(b, d) - max(a, c)
    return left


def peer_exposed_us(result, rank_id, skip_within_accuracy=True, subtract_accuracy=False):
    """Exposed comm (comm running, no compute) inside the rank's matched kernels' waits.

    skip_within_accuracy: waits <= the accuracy count nothing; subtract_accuracy: the other
    reading, each wait shortened by the accuracy (both are offered; the docs say only "waits
    within the alignment's accuracy are not counted").
    """
    rk = next(r for r in result["ranks"] if r.rank == rank_id)
    compute = _union([(k["ts"], k["ts"] + k["dur"]) for k in rk.compute])
    spans = []
    for row in result["operations"]:
        mine = row["ranks"][rank_id]
        wait = mine["wait_us"]
        if subtract_accuracy:
            wait -= ACCURACY_US
        if wait <= 0 or (skip_within_accuracy and mine["wait_us"] <= ACCURACY_US):
            continue
        k = mine["kernel"]
        spans.append((k["ts"], k["ts"] + wait))
    return sum(_minus_measure(a, b, compute) for a, b in _union(spans))
