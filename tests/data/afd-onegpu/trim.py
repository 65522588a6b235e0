#!/usr/bin/env python3
"""How the trimmed traces here were made from the recordings (plain Python, gzip + json):

    python3 tests/data/afd-onegpu/trim.py SRC_TRACE.json.gz DEST.json.gz FIRST STEPS [--drop-aten]

Keeps the document's metadata (distributedInfo, deviceProperties, baseTimeNanoseconds), every
event without a time (process and thread names), and the events of STEPS consecutive vLLM steps
(`execute_*` annotations) from the FIRST-th (0-based): CPU events and runtime calls that start
inside [the first kept step's start, the next step's start after the last), and every GPU activity
and flow whose correlation id one of those calls carries (a step's kernels may run after the next
step has started). --drop-aten leaves out the `aten::*` CPU ops (the eager trace's bulk; no AFD
figure reads them)."""

import gzip
import json
import sys


def main(src, dest, first, steps, drop_aten):
    with gzip.open(src, "rt") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    marks = sorted(e["ts"] for e in events if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("execute_"))
    lo = marks[first]
    hi = marks[first + steps] if first + steps < len(marks) else float("inf")
    kept_corr = set()
    out = []
    for e in events:
        if "ts" not in e or e.get("ph") == "M":
            out.append(e)
            continue
        cat = e.get("cat")
        if cat in ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "ac2g"):
            continue  # decided below, by their launch
        if not lo <= e["ts"] < hi:
            continue
        if drop_aten and cat == "cpu_op" and str(e.get("name", "")).startswith("aten::"):
            continue
        out.append(e)
        corr = (e.get("args") or {}).get("correlation")
        if cat in ("cuda_runtime", "cuda_driver") and corr is not None:
            kept_corr.add(corr)
    for e in events:
        cat = e.get("cat")
        if cat in ("kernel", "gpu_memcpy", "gpu_memset") and (e.get("args") or {}).get("correlation") in kept_corr:
            out.append(e)
        elif cat == "ac2g" and e.get("id") in kept_corr:
            out.append(e)
        elif cat == "gpu_user_annotation" and lo <= e["ts"] < hi:
            out.append(e)
    doc["traceEvents"] = out
    with gzip.open(dest, "wt", compresslevel=9) as f:
        json.dump(doc, f, separators=(",", ":"))


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], a[1], int(a[2]), int(a[3]), "--drop-aten" in a)
