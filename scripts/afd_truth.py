#!/usr/bin/env python3
"""The truth of an AFD recording, counted from its raw files by plain Python (no dbo-trace code).

    python3 scripts/afd_truth.py samples/afd-graphs-dbo

For each role's Kineto trace: vLLM's `execute_*` steps (count, the median period from one step's
start to the next one's, the median window), cudaGraphLaunch calls, the NCCL SendRecv kernels per
step (inside each graph replay, by the launch's correlation id, and outside graphs), and the
manifest's counters and unprofiled timed repeats. The figures quoted in samples/README.md come from
this script; the tests compare the report with the same counts.
"""

import gzip
import json
import statistics
import sys
from collections import Counter
from pathlib import Path


def load(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def trace_truth(path):
    events = load(path)["traceEvents"]
    steps = sorted((e for e in events if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("execute_")), key=lambda e: e["ts"])
    starts = [e["ts"] for e in steps]
    launches = sorted((e for e in events if e.get("name") == "cudaGraphLaunch"), key=lambda e: e["ts"])
    graph_of = {e["args"]["correlation"]: i for i, e in enumerate(launches)}
    sendrecv = [e for e in events if e.get("cat") == "kernel" and "SendRecv" in e.get("name", "")]
    per_launch = Counter(graph_of.get(e["args"].get("correlation")) for e in sendrecv)
    outside = per_launch.pop(None, 0)
    return {
        "steps": len(steps),
        "median_period_us": statistics.median(b - a for a, b in zip(starts, starts[1:])) if len(starts) > 1 else None,
        "median_window_us": statistics.median(e["dur"] for e in steps) if steps else None,
        "graph_launches": len(launches),
        "sendrecv_kernels": len(sendrecv),
        "sendrecv_per_replay": dict(Counter(per_launch.values())),
        "sendrecv_outside_graphs": outside,
        "sendrecv_streams": dict(Counter(e["args"].get("stream") for e in sendrecv).most_common(4)),
    }


def main(bundle):
    bundle = Path(bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    for role, body in (manifest.get("roles") or {"main": {"traces": manifest.get("traces", [])}}).items():
        for trace in body.get("traces", []):
            print(role, trace)
            for key, value in trace_truth(bundle / trace).items():
                print(f"  {key}: {value}")
    counters = manifest.get("counters") or {}
    print("counters:", {k: v for k, v in sorted(counters.items()) if k.startswith(("steps.", "ubatch.yields"))})
    for r in manifest.get("repeats") or []:
        print(f"repeat {r.get('index')} ({r.get('tool')}): {r.get('duration_s'):.3f} s, {r.get('output_throughput'):.1f} tok/s, median TPOT {r.get('median_tpot_ms'):.3f} ms, median ITL {r.get('median_itl_ms'):.3f} ms")
    print("gpu_sharing:", manifest.get("gpu_sharing"))


if __name__ == "__main__":
    main(sys.argv[1])
