"""Trim a peer's (the FFN's) Kineto trace in a bundle to the main trace's span, for a shipped sample.

    python scripts/trim_peer_trace.py BUNDLE [--margin-s 1.0]

The FFN's profiler runs from the profiled load's first step to a request after the load (record/control.py),
so its trace covers the whole load and the attention side's trace export: on the eager AFD arm 21 s and
15 MB gzip'd for a 1.2 s attention window. This keeps, of each peer trace, the complete events (ph X) and
flow/instant events that overlap the main traces' span widened by the margin, and every metadata event
(ph M) and top-level key; both traces are on one clock (the same baseTimeNanoseconds, checked). The file is
rewritten in place, gzip'd, under its own name; the bundle's manifest is left as it is. samples/README.md
says which samples were trimmed so.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path


def load(path: Path) -> dict:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def span_us(trace: dict) -> tuple[float, float]:
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    return min(e["ts"] for e in events), max(e["ts"] + e.get("dur", 0) for e in events)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bundle", type=Path)
    ap.add_argument("--margin-s", type=float, default=1.0)
    args = ap.parse_args()
    manifest = json.loads((args.bundle / "manifest.json").read_text())
    mains = [args.bundle / p for p in manifest["traces"]]
    peers = [args.bundle / p for body in manifest["roles"].values() if body.get("peer") for p in body["traces"]]
    main_traces = [load(p) for p in mains]
    base = {t.get("baseTimeNanoseconds") for t in main_traces}
    lo = min(span_us(t)[0] for t in main_traces) - args.margin_s * 1e6
    hi = max(span_us(t)[1] for t in main_traces) + args.margin_s * 1e6
    for path in peers:
        trace = load(path)
        if {trace.get("baseTimeNanoseconds")} != base or len(base) != 1:
            print(f"{path}: not on the main trace's clock (baseTimeNanoseconds differ); left as it is", file=sys.stderr)
            continue
        before = trace["traceEvents"]
        kept = [e for e in before if e.get("ph") == "M" or ("ts" in e and e["ts"] <= hi and e["ts"] + e.get("dur", 0) >= lo)]
        trace["traceEvents"] = kept
        with gzip.open(path, "wt", compresslevel=9) as fh:
            json.dump(trace, fh, separators=(",", ":"))
        print(f"{path}: kept {len(kept)} of {len(before)} events ({lo / 1e6:.3f}-{hi / 1e6:.3f} s on the trace clock)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
