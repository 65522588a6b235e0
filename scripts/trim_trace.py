#!/usr/bin/env python3
"""Cut a Kineto trace to its first N profiler steps, for a small real test input.

    python3 scripts/trim_trace.py IN.json.gz OUT.json.gz N [CATEGORY ...]

Kept: every metadata event, and the events that end before the N-th `ProfilerStep#` range ends
(its GPU work may run past it: up to the start of the next step's); events of the categories named
(`python_function`, the bulk of a trace with stacks) left out. Plain json and gzip: every event kept
is as recorded, and the top-level keys (deviceProperties, distributedInfo) are kept.
"""

import gzip
import json
import sys


def main(src: str, dst: str, n_steps: int, drop: set[str]) -> None:
    doc = json.load(gzip.open(src))
    events = doc["traceEvents"]
    steps = sorted((e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    end = steps[n_steps]["ts"] if len(steps) > n_steps else max(e["ts"] + e.get("dur", 0) for e in events if "ts" in e)
    doc["traceEvents"] = [
        e for e in events if e.get("ph") == "M" or (e.get("cat") not in drop and "ts" in e and e["ts"] + e.get("dur", 0) <= end)
    ]
    with gzip.GzipFile(dst, "wb", compresslevel=9, mtime=0) as f:  # mtime 0: the same bytes each run
        f.write(json.dumps(doc, separators=(",", ":")).encode())
    print(f"{len(events)} -> {len(doc['traceEvents'])} events")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), set(sys.argv[4:]))
