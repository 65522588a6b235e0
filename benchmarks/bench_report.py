"""Throughput and peak memory of `dbo-trace report` on a large trace, next to plain json.load.

    python benchmarks/bench_report.py [--gb 1.0] [--keep PATH]

Builds a trace of realistic shape by tiling a real sample (samples/hostbound:
CPU ops, runtime calls, ~1 us kernels, flows) with shifted timestamps and
correlation ids until the uncompressed JSON reaches --gb, gzips it as vLLM's
profiler does, then runs, each in a fresh process: the full report (read +
analyse + render JSON) and json.load of the same file. Prints MB/s of
uncompressed JSON and peak RSS. Figures for docs/performance.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build(path: Path, target_bytes: int) -> int:
    (src,) = (ROOT / "samples" / "hostbound" / "traces").glob("*.json.gz")
    doc = json.loads(gzip.decompress(src.read_bytes()))
    events = doc.pop("traceEvents")
    timed = [e for e in events if "ts" in e]
    t0 = min(e["ts"] for e in timed)
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - t0 + 1000.0
    max_corr = max((e.get("args", {}).get("correlation", 0) for e in events), default=0) + 1
    written = 0
    with gzip.open(path, "wt", compresslevel=1) as out:
        out.write('{\n  "schemaVersion": 1,\n  "traceEvents": [\n')
        copy = 0
        first = True
        while written < target_bytes:
            shift, corr_shift = copy * span, copy * max_corr
            parts = []
            for e in events:
                e2 = dict(e)
                if "ts" in e2:
                    e2["ts"] = round(e2["ts"] + shift, 3)
                args = e2.get("args")
                if args and "correlation" in args:
                    e2["args"] = dict(args, correlation=args["correlation"] + corr_shift)
                if e2.get("ph") in ("s", "f") and isinstance(e2.get("id"), int):
                    e2["id"] += corr_shift
                parts.append(json.dumps(e2))
            chunk = ("" if first else ",\n") + ",\n".join(parts)
            out.write(chunk)
            written += len(chunk)
            first = False
            copy += 1
        tail = {k: v for k, v in doc.items()}
        out.write("\n  ],\n" + json.dumps(tail)[1:] + "\n")
    return written


def measure(code: str) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of a fresh Python process running code."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, max(peak, before) / 1024.0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gb", type=float, default=1.0, help="uncompressed size of the generated trace")
    p.add_argument("--keep", type=Path, help="write the trace here and keep it")
    args = p.parse_args()
    folder = Path(tempfile.mkdtemp())
    path = args.keep or folder / "big.pt.trace.json.gz"
    t = time.perf_counter()
    size = build(path, int(args.gb * 1e9))
    mb = size / 1e6
    print(
        f"trace: {path} ({mb:.0f} MB JSON, {path.stat().st_size / 1e6:.0f} MB gzipped, built in {time.perf_counter() - t:.0f} s)"
    )
    report_code = (
        "import sys; from dbo_trace.cli import main; "
        f"sys.argv=['dbo-trace','report','--json','--comm-kernels','spin_kernel',{str(path)!r}]; main()"
    )
    # Peak RSS of children is a high-water mark over all of them: run the smaller one first.
    wall, peak = measure(report_code)
    print(f"dbo-trace report: {wall:6.1f} s  {mb / wall:6.1f} MB/s  peak RSS {peak:7.0f} MB")
    wall_gz, _ = measure(f"import gzip; f=gzip.open({str(path)!r}); [None for _ in iter(lambda: f.read(1<<24), b'')]")
    print(f"gzip decode only: {wall_gz:6.1f} s  {mb / wall_gz:6.1f} MB/s")
    wall, peak = measure(f"import gzip, json; json.load(gzip.open({str(path)!r}))")
    print(f"json.load       : {wall:6.1f} s  {mb / wall:6.1f} MB/s  peak RSS {peak:7.0f} MB")
    if not args.keep:
        os.remove(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
