"""An independent, plain computation of who waited for whom across ranks, from the raw traces.

json.load, dicts, lists and loops; nothing shared with dbo_trace. It follows docs/analysis.md
("Across ranks"):
- the shared clock: ts + baseTimeNanoseconds / 1000 where the trace has it, ts itself where ts is
  already epoch microseconds (1.5e15-2.0e15);
- communication kernels: kernels whose name matches the given pattern;
- a channel: args "Process Group Name" where present, else the n-th stream by first comm kernel;
- the k-th kernel of a channel on one rank is the k-th on the other rank, shifted by the number d
  (|d| <= 8) at which names and collective names agree over at least half the shorter sequence and
  the kernels' ends are closest (median of the absolute differences), if that median is within
  max(50 us, a quarter of the median kernel duration); else the channel is not matched;
- per matched collective: arrival = kernel start; wait = min(latest arrival - own arrival, own
  kernel duration); transfer = duration - wait.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics


def load(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def comm_kernels(path, pattern):
    """(rank, [kernel dicts with start/end on the shared clock, channel, signature]) of one trace."""
    doc = load(path)
    rx = re.compile(pattern, re.I)
    kernels = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel" and rx.search(e["name"])]
    kernels.sort(key=lambda e: e["ts"])
    if "baseTimeNanoseconds" in doc:
        offset = doc["baseTimeNanoseconds"] / 1000.0
    else:
        first = min(e["ts"] for e in doc["traceEvents"] if e.get("ph") == "X" and "ts" in e)
        offset = 0.0 if 1.5e15 <= first <= 2.0e15 else None
    streams = []
    out = []
    for e in kernels:
        args = e.get("args", {})
        stream = args.get("stream", e.get("tid"))
        if stream not in streams:
            streams.append(stream)
        group = args.get("Process Group Name")
        out.append(
            {
                "start": e["ts"] + (offset or 0.0),
                "end": e["ts"] + e["dur"] + (offset or 0.0),
                "dur": e["dur"],
                "channel": f"group {group}" if isinstance(group, str) else f"stream #{streams.index(stream)}",
                "signature": (e["name"], args.get("Collective name")),
            }
        )
    rank = doc.get("distributedInfo", {}).get("rank")
    return rank, out, offset is not None


def best_shift(a, b):
    best = None
    for d in range(-8, 9):
        pairs = [(i, i + d) for i in range(len(a)) if 0 <= i + d < len(b)]
        if len(pairs) < max(1, min(len(a), len(b)) // 2):
            continue
        if any(a[i]["signature"] != b[j]["signature"] for i, j in pairs):
            continue
        spread = statistics.median(abs(a[i]["end"] - b[j]["end"]) for i, j in pairs)
        tolerance = max(50.0, 0.25 * statistics.median([a[i]["dur"] for i, _ in pairs] + [b[j]["dur"] for _, j in pairs]))
        if spread <= tolerance and (best is None or spread < best[0]):
            best = (spread, pairs)
    return None if best is None else best[1]


def waits(paths, pattern):
    """Per rank: comm (all its comm kernel time), matched, wait, transfer, waited_for {rank: us};
    and the matched collectives as lists of (rank, arrival, duration, wait)."""
    ranks = {}
    for p in paths:
        rank, kernels, _ = comm_kernels(p, pattern)
        ranks[rank] = kernels
    totals = {
        r: {"comm": sum(k["dur"] for k in ks), "matched": 0.0, "wait": 0.0, "transfer": 0.0, "waited_for": {}}
        for r, ks in ranks.items()
    }
    collectives = []
    ordered = sorted(ranks)
    channels = sorted({k["channel"] for ks in ranks.values() for k in ks})
    for ch in channels:
        seqs = {r: [k for k in ranks[r] if k["channel"] == ch] for r in ordered}
        present = [r for r in ordered if seqs[r]]
        if len(present) < 2:
            continue
        ref = present[0]
        partner = {}  # other rank -> {ref index: its index}
        for other in present[1:]:
            pairs = best_shift(seqs[ref], seqs[other])
            if pairs is not None:
                partner[other] = dict(pairs)
        if not partner:
            continue
        for i, k in enumerate(seqs[ref]):
            if not all(i in partner[o] for o in partner):
                continue
            members = [(ref, k)] + [(o, seqs[o][partner[o][i]]) for o in partner]
            latest = max(m["start"] for _, m in members)
            last_rank = [r for r, m in members if m["start"] == latest][0]
            row = []
            for r, m in members:
                w = min(latest - m["start"], m["dur"])
                t = totals[r]
                t["matched"] += m["dur"]
                t["wait"] += w
                t["transfer"] += m["dur"] - w
                if w > 0:
                    t["waited_for"][last_rank] = t["waited_for"].get(last_rank, 0.0) + w
                row.append((r, m["start"], m["dur"], w))
            collectives.append(row)
    return totals, collectives
