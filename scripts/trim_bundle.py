#!/usr/bin/env python3
"""Cut a dbo-trace bundle of one trace to its first N vLLM steps, for a small real test input.

    python3 scripts/trim_bundle.py BUNDLE OUT N K

Kept: the trace's events up to the end of its N-th `execute_*` range (metadata events all), the
event logs' records up to the same time and from K log steps before the first profiled one (records
of no step after the trace's first step), the counters; the manifest without the keys naming what
is left out (py-spy samples, the peer's event logs, the repeats, the server log), with `trimmed`
saying what was cut. Plain json and gzip: every event kept is as recorded.
"""

import gzip
import json
import shutil
import sys
from pathlib import Path


def main(src: Path, dst: Path, n_steps: int, before: int) -> None:
    man = json.loads((src / "manifest.json").read_text())
    dst.mkdir(parents=True)
    (trace,) = man["traces"]
    doc = json.load(gzip.open(src / trace))
    events = doc["traceEvents"]
    steps = sorted(
        (e for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("execute_")),
        key=lambda e: e["ts"],
    )
    first, end = steps[0]["ts"], steps[n_steps - 1]["ts"] + steps[n_steps - 1]["dur"]
    doc["traceEvents"] = [e for e in events if e.get("ph") == "M" or ("ts" in e and e["ts"] + e.get("dur", 0) <= end + 50_000 and e["ts"] <= end)]
    (dst / trace).parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(dst / trace, "wb", compresslevel=9, mtime=0) as f:  # mtime 0: the same bytes each run
        f.write(json.dumps(doc, separators=(",", ":")).encode())
    base = doc.get("baseTimeNanoseconds", 0)
    first_ns, end_ns = base + int(first * 1000), base + int(end * 1000)
    for rel in man.get("events", []):
        lines = (src / rel).read_text().splitlines()
        records = [json.loads(line) for line in lines[1:]]
        profiled = [r[5] for r in records if r[1] == "step_begin" and first_ns - 5_000_000 <= r[0] <= end_ns]
        lo = min(profiled) - before if profiled else None
        kept = [
            line
            for line, r in zip(lines[1:], records)
            if r[0] <= end_ns and (lo is None or r[5] >= lo or (r[5] < 0 and r[0] >= first_ns))
        ]
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        (dst / rel).write_text("\n".join([lines[0], *kept]) + "\n")
    for rel in ["counters-series.jsonl", *(str(p.relative_to(src)) for p in (src / "events").glob("*.counters.json"))]:
        if (src / rel).exists():
            shutil.copy(src / rel, dst / rel)
    for key in ("pystacks", "peer_events", "repeats", "log"):
        man.pop(key, None)
    man["trimmed"] = f"the first {n_steps} profiled steps of the trace, the event log from {before} steps before them"
    (dst / "manifest.json").write_text(json.dumps(man, indent=1) + "\n")
    print(f"{len(events)} -> {len(doc['traceEvents'])} events")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
