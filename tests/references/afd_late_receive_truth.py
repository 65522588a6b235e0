"""Independent reference: the AFD round trip's *late receive*, its transfer and the round trip.

Written from docs/analysis.md ("Disaggregated round trips (AFD)", bullets "Data plane", "Pairing",
"Parts") and DESIGN.md ("AFD on one GPU") only, without reading dbo-trace's code or output.
Standard library only.  ``late_receive(bundle_dir)`` returns

    {"matched": n, "round_trips": n_all, "late_us": median, "transfer_us": median,
     "round_trip_us": median}

for the attention rank of an AFD bundle whose FFN trace lies under ``<bundle>/peer/traces``.

How each figure is counted
--------------------------
Inputs.  The attention trace is ``<bundle>/traces/*.pt.trace.json.gz``, the FFN's
``<bundle>/peer/traces/*.pt.trace.json.gz`` (one each; several are merged per role).  Kineto ``ts``
and ``dur`` are microseconds.  Both traces must carry the same ``baseTimeNanoseconds`` (one host,
one clock); the check is made and, should they ever differ, the FFN's times are shifted by the
difference (base_ffn - base_attn) / 1000 us so that both are on the attention's clock.  On the three
samples the bases agree, so no shift is applied.

Data plane.  A kernel is NCCL point-to-point when its name holds ``SendRecv`` (or is NCCL's
``Send``/``Recv`` kernel).  The control plane (torch.distributed's own NCCL stream, 2 DP-metadata
sends per step) carries a ``Collective name`` arg (Kineto's record-function metadata); those are
dropped.  The rest is the data plane, and it is checked against the docs' own rule (a data kernel
runs on a stream that also ran compute kernels, or is replayed from a CUDA graph): a kernel failing
that check is dropped too.  "Compute kernel" = any ``cat == "kernel"`` event that is not an NCCL
kernel (memcpy / memset are other categories and do not count).

Steps.  Steps are the attention trace's ``execute_*`` ``user_annotation`` ranges.  A data kernel
belongs to the step whose [ts, ts + dur] holds its launch, the launch being the ``cuda_runtime`` /
``cuda_driver`` event with the kernel's ``correlation`` (``cudaLaunchKernel``, ``cuLaunchKernelEx``
or, for a replayed graph, ``cudaGraphLaunch``).  Kernels without a launch event in the trace or with
the launch outside every step (graph replays launched before the profiler started, warm-up) are not
counted anywhere.

Send or receive (attention side).  Eager: the innermost CPU op on the launch's thread whose range
holds the launch and is named ``vllm::afd_p2p_send`` / ``vllm::afd_p2p_recv`` says which (only ops
starting at most 5 s before the launch are looked at; innermost = latest-starting).  Inside a
replayed graph there are no CPU ops: each microbatch's data kernels, in start order, are taken to
alternate send, receive, send, receive ... (the docs' pairing order), starting with a send.  (Eager
kernels always use the CPU op; the alternation is used only for kernels without one.)

Microbatches (docs "Pairing", rules 1-3, in that order):
  1. launching threads: every data kernel of the step has a CPU op (eager) and their threads are
     exactly two -> one microbatch per thread (the thread of the earlier first kernel is 0);
  2. kernel order: a compute kernel *started* in (end of the step's first data kernel, start of its
     second) and the step has 4L data kernels -> DBO's order
     ``S0 S1 (R0 S0 R1 S1) x (L-1) R0 R1``; L is the ``layers`` argument when given, else
     count / 4 (the docs' L comes from the manifest or event log; the samples' manifests have no
     ``layers``, so the only test left is count % 4 == 0 and count >= 8);
  3. no compute started between the first two -> one microbatch; otherwise (compute, but not 4L)
     "not told apart": the step's kernels are one sequence.
Pairing: within a step and microbatch, the k-th send (start order) with the k-th receive.  Leftovers
are unpaired and are not round trips.  A round trip has s0 = its send's start, r0 / r1 = its
receive's start / end.  ``round_trips`` counts every paired round trip of every step.

FFN side.  The FFN's data kernels (same data-plane rule, no step needed), in start order, alternate
receive and send.  Which parity is the receive is not read from the FFN's CPU ops (graph replays have
none): both parities are tried; the one kept matches at least 90% as many round trips as the best
parity, and among those has the smallest median of (FFN receive end - attention send start) over its
matched round trips ("whose receives end soonest after the sends").  In eager FFN traces the choice
is cross-checked against the FFN's ``vllm::afd_p2p_recv`` ops (see ``_ffn_parity_from_ops``; the
result is reported by ``late_receive_details`` only).  The FFN's kernels are not cut to the
attention's window beforehand: the matching below never reaches a receive ending before the first
round trip's send, and the last FFN receive (which waits out the attention's profiler export) is only
ever a candidate for a round trip whose receive end it would have to precede by its send.

Matching (docs "Parts").  Round trips of the whole rank, in send-start order (ties: receive start).
Each is matched to the first FFN receive, at or after the one following the previous match, whose
end is >= s0 (no tolerance here), together with the FFN send that follows that receive in the FFN's
sequence; it is a match when  recv_end <= send_start + 5 us  and  send_start <= r1 + 5 us  (the
docs' "5 us tolerance" applied to both inequalities of the chain).  On a failed test the round trip
is unmatched and the FFN pointer stays where it was (only a match advances it).  ``matched`` counts
the matched round trips.

Per matched round trip: t1 = FFN receive end clipped into [s0, r1]; t2 = FFN send start clipped into
[t1, r1];  transfer = (t1 - s0) + (r1 - t2);  late = max(0, min(r0, r1) - t2);  round trip = r1 - s0.
``late_us``, ``transfer_us`` and ``round_trip_us`` are ``statistics.median`` of these over the
matched round trips only (the round trip's median over all round trips is in the details).  None
where nothing matched.  Medians of an even count are the mean of the two middle values
(``statistics.median``).  Times are in microseconds, unrounded.

Checks made on the three samples (not part of the rule, recorded here as evidence):
  * afd-eager: 540 data kernels, 10 steps x 27 x 2, every one labelled by its CPU op; one
    microbatch per step (no compute between the first send and receive); the FFN's own
    ``afd_p2p_recv`` ops agree with the chosen parity on all 756 FFN data kernels.
  * graph pairs: every kernel launched by ``cudaGraphLaunch``; the order-derived labels put all
    sends on the capture's main stream and all receives on graph-internal streams (an independent
    confirmation of the S/R alternation and, with DBO, of the ``S0 S1 (R0 S0 R1 S1) x 26 R0 R1``
    split: 20 of 20 steps took rule 2).  20 replayed kernels whose launch precedes the trace have no
    launch event and are dropped.  The FFN's eager kernels' ops agree with the chosen parity.
  * On all three no t1 / t2 clipping happened and the 5 us tolerance changed no match; the other
    parity also clears the 90% bar (260/270, 1060/1080, 520/540), so the "soonest" tie-break
    decides, and it picks the parity the FFN's ops confirm.
"""

import bisect
import glob
import gzip
import json
import os
import statistics

TOL_US = 5.0
SEND_OP = "vllm::afd_p2p_send"
RECV_OP = "vllm::afd_p2p_recv"


# ----------------------------------------------------------------------------------------- loading

def _load(paths):
    events, bases = [], set()
    for p in sorted(paths):
        with gzip.open(p, "rt") as fh:
            d = json.load(fh)
        bases.add(d.get("baseTimeNanoseconds"))
        events.extend(d.get("traceEvents", []))
    if len(bases) != 1:
        raise ValueError("traces of one role disagree on baseTimeNanoseconds: %r" % bases)
    return events, bases.pop()


def _is_nccl_p2p(name):
    return "SendRecv" in name or name.startswith(("ncclDevKernel_Send", "ncclDevKernel_Recv",
                                                  "ncclKernel_Send", "ncclKernel_Recv"))


def _is_nccl(name):
    return "nccl" in name.lower()


class _Trace:
    def __init__(self, events, shift_us=0.0):
        self.launch = {}          # correlation -> runtime/driver event
        self.kernels = []         # all cat=kernel
        self.cpu_ops = {}         # tid -> list of (ts, end, name) sorted by ts
        self.steps = []
        ops = {}
        for e in events:
            cat = e.get("cat")
            if e.get("ph") != "X":
                continue
            if cat in ("cuda_runtime", "cuda_driver"):
                c = e.get("args", {}).get("correlation")
                if c is not None:
                    self.launch[c] = e
            elif cat == "kernel":
                self.kernels.append(e)
            elif cat == "cpu_op":
                ops.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e.get("dur", 0), e["name"]))
            elif cat == "user_annotation" and e["name"].startswith("execute_"):
                self.steps.append((e["ts"], e["ts"] + e.get("dur", 0)))
        for tid, lst in ops.items():
            lst.sort()
            self.cpu_ops[tid] = lst
        self.steps.sort()
        self.shift = shift_us
        compute_streams = set()
        graph_corr = set()
        for c, e in self.launch.items():
            if e["name"].startswith(("cudaGraphLaunch", "cuGraphLaunch")):
                graph_corr.add(c)
        self.compute = []
        for k in self.kernels:
            if not _is_nccl(k["name"]):
                compute_streams.add(k.get("args", {}).get("stream"))
                self.compute.append((k["ts"] + shift_us, k["ts"] + k.get("dur", 0) + shift_us))
        self.compute.sort()
        self.compute_starts = [c[0] for c in self.compute]
        self.data = []            # dicts: s, e, corr, launch
        for k in self.kernels:
            a = k.get("args", {})
            if not _is_nccl_p2p(k["name"]) or "Collective name" in a:
                continue
            c = a.get("correlation")
            if not (c in graph_corr or a.get("stream") in compute_streams):
                continue
            self.data.append({"s": k["ts"] + shift_us, "e": k["ts"] + k.get("dur", 0) + shift_us,
                              "corr": c, "launch": self.launch.get(c)})
        self.data.sort(key=lambda d: (d["s"], d["e"]))

    def op_kind(self, launch):
        """'S' / 'R' from the enclosing afd_p2p op on the launch's thread, else None."""
        if launch is None:
            return None, None
        lst = self.cpu_ops.get(launch["tid"])
        if not lst:
            return None, None
        t = launch["ts"]
        i = bisect.bisect_right(lst, (t, float("inf"), "\uffff"))
        best = None
        for j in range(i - 1, -1, -1):
            s, e, n = lst[j]
            if t - s > 5e6:       # ops longer than 5 s are not launch wrappers
                break
            if s <= t <= e and n in (SEND_OP, RECV_OP):
                if best is None or s >= best[0]:
                    best = (s, n)
        if best is None:
            return None, None
        return ("S" if best[1] == SEND_OP else "R"), launch["tid"]

    def compute_started_in(self, a, b):
        i = bisect.bisect_right(self.compute_starts, a)
        return i < len(self.compute_starts) and self.compute_starts[i] < b


# ----------------------------------------------------------------------------- attention side

def _round_trips(att, layers=None):
    """Per step, microbatch and pairing; returns (round trips, stats)."""
    by_step = {}
    starts = [s for s, _ in att.steps]
    for d in att.data:
        L = d["launch"]
        if L is None:
            continue
        i = bisect.bisect_right(starts, L["ts"]) - 1
        if i < 0 or L["ts"] > att.steps[i][1]:
            continue
        by_step.setdefault(i, []).append(d)
    rts, unpaired, modes = [], 0, {}
    for si in sorted(by_step):
        ks = by_step[si]
        for d in ks:
            d["kind"], d["tid"] = att.op_kind(d["launch"])
        n = len(ks)
        tids = {d["tid"] for d in ks}
        if all(d["tid"] is not None for d in ks) and len(tids) == 2:
            first = {}
            for d in ks:
                first.setdefault(d["tid"], d["s"])
            order = sorted(tids, key=lambda t: first[t])
            mb = [order.index(d["tid"]) for d in ks]
            mode = "threads"
        else:
            comp = n >= 2 and att.compute_started_in(ks[0]["e"], ks[1]["s"])
            L = layers if layers else (n // 4 if n % 4 == 0 else None)
            if comp and L and n == 4 * L and L >= 2:
                pattern = [(0, "S"), (1, "S")]
                for _ in range(L - 1):
                    pattern += [(0, "R"), (0, "S"), (1, "R"), (1, "S")]
                pattern += [(0, "R"), (1, "R")]
                mb = [p[0] for p in pattern]
                for d, (_, kind) in zip(ks, pattern):
                    if d["kind"] is None:
                        d["kind"] = kind
                mode = "kernel_order"
            elif not comp:
                mb = [0] * n
                mode = "one"
            else:
                mb = [0] * n
                mode = "not_told_apart"
        modes[mode] = modes.get(mode, 0) + 1
        for u in sorted(set(mb)):
            seq = [d for d, m in zip(ks, mb) if m == u]
            # kernels without a CPU op: alternate S, R within the microbatch
            for idx, d in enumerate(seq):
                if d["kind"] is None:
                    d["kind"] = "S" if idx % 2 == 0 else "R"
            sends = [d for d in seq if d["kind"] == "S"]
            recvs = [d for d in seq if d["kind"] == "R"]
            m = min(len(sends), len(recvs))
            unpaired += len(sends) + len(recvs) - 2 * m
            for s, r in zip(sends, recvs):
                rts.append({"s0": s["s"], "r0": r["s"], "r1": r["e"], "step": si, "mb": u})
    rts.sort(key=lambda r: (r["s0"], r["r0"]))
    return rts, {"unpaired": unpaired, "step_modes": modes, "steps_with_data": len(by_step),
                 "steps": len(att.steps)}


# ----------------------------------------------------------------------------------- FFN side

def _match(rts, ffn_data, parity):
    """Receives are ffn_data[i] with i % 2 == parity, each followed by the send ffn_data[i + 1]."""
    recv_idx = [i for i in range(parity, len(ffn_data) - 1, 2)]
    recv_ends = [ffn_data[i]["e"] for i in recv_idx]
    j = 0
    out = []
    for rt in rts:
        # first receive at or after j ending >= s0
        k = j
        while k < len(recv_idx) and recv_ends[k] < rt["s0"]:
            k += 1
        if k >= len(recv_idx):
            continue
        rv = ffn_data[recv_idx[k]]
        sd = ffn_data[recv_idx[k] + 1]
        if rv["e"] <= sd["s"] + TOL_US and sd["s"] <= rt["r1"] + TOL_US:
            out.append((rt, rv, sd))
            j = k + 1
    return out


def _ffn_parity_from_ops(ffn):
    """Parity of the receives per the FFN's own afd_p2p ops, where they exist (eager FFN)."""
    votes = {0: 0, 1: 0}
    for i, d in enumerate(ffn.data):
        kind, _ = ffn.op_kind(d["launch"])
        if kind == "R":
            votes[i % 2] += 1
        elif kind == "S":
            votes[(i + 1) % 2] += 1
    return votes


def late_receive_details(bundle_dir, layers=None):
    att_paths = glob.glob(os.path.join(bundle_dir, "traces", "*.pt.trace.json.gz"))
    ffn_paths = glob.glob(os.path.join(bundle_dir, "peer", "traces", "*.pt.trace.json.gz"))
    if not att_paths or not ffn_paths:
        raise FileNotFoundError("need both roles' traces under %s" % bundle_dir)
    att_ev, att_base = _load(att_paths)
    ffn_ev, ffn_base = _load(ffn_paths)
    shift = (ffn_base - att_base) / 1000.0 if (ffn_base is not None and att_base is not None) else 0.0
    att = _Trace(att_ev)
    del att_ev
    ffn = _Trace(ffn_ev, shift_us=shift)
    del ffn_ev
    rts, st = _round_trips(att, layers)
    tries = {p: _match(rts, ffn.data, p) for p in (0, 1)}
    best = max(len(v) for v in tries.values())
    cands = []
    for p, m in tries.items():
        if m and len(m) >= 0.9 * best:
            cands.append((statistics.median(rv["e"] - rt["s0"] for rt, rv, _ in m), p))
    parity = min(cands)[1] if cands else 0
    matched = tries[parity]
    late, transfer, rtt = [], [], []
    for rt, rv, sd in matched:
        s0, r0, r1 = rt["s0"], rt["r0"], rt["r1"]
        t1 = min(max(rv["e"], s0), r1)
        t2 = min(max(sd["s"], t1), r1)
        transfer.append((t1 - s0) + (r1 - t2))
        late.append(max(0.0, min(r0, r1) - t2))
        rtt.append(r1 - s0)
    med = lambda xs: statistics.median(xs) if xs else None
    result = {"matched": len(matched), "round_trips": len(rts), "late_us": med(late),
              "transfer_us": med(transfer), "round_trip_us": med(rtt)}
    details = dict(result)
    details.update({
        "base_agree": att_base == ffn_base, "shift_us": shift,
        "round_trip_all_us": med([r["r1"] - r["s0"] for r in rts]),
        "ffn_receive_parity": parity,
        "matched_per_parity": {p: len(m) for p, m in tries.items()},
        "ffn_parity_votes_from_ops": _ffn_parity_from_ops(ffn),
        "ffn_data_kernels": len(ffn.data), "attention_data_kernels": len(att.data),
        "late_mean_us": (sum(late) / len(late)) if late else None,
        "late_share_of_transfer": (sum(late) / sum(transfer)) if transfer and sum(transfer) else None,
    })
    details.update(st)
    return details


def late_receive(bundle_dir, layers=None):
    d = late_receive_details(bundle_dir, layers)
    return {k: d[k] for k in ("matched", "round_trips", "late_us", "transfer_us", "round_trip_us")}


if __name__ == "__main__":
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    bundles = sys.argv[1:] or [os.path.join(root, "samples", s) for s in
                               ("afd-eager", "afd-pair-graphs-dbo", "afd-pair-graphs-nomps")]
    for b in bundles:
        d = late_receive_details(b)
        print(os.path.basename(b.rstrip("/")))
        print("  ", json.dumps({k: d[k] for k in ("matched", "round_trips", "late_us",
                                                 "transfer_us", "round_trip_us")}))
        print("  ", json.dumps({k: v for k, v in d.items() if k not in
                                ("matched", "round_trips", "late_us", "transfer_us",
                                 "round_trip_us")}, default=str))
