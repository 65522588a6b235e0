"""Speed and peak memory of `dbo-trace report --json` at scale, side by side with json.load and HTA.

    python benchmarks/bench_report.py [--shapes a,b,c,d] [--gb 1.0] [--rank-mb 250] [--ranks 8]
                                      [--hta-python PATH] [--workers 1,2] [--keep DIR]
    python benchmarks/bench_report.py --scaling 25 [--shapes a,b,c,d] [--keep DIR]

Shapes, each built by tiling a real H200 recording with shifted timestamps, correlation ids and
step numbers, gzipped as vLLM's profiler writes traces:
  a  --gb of JSON with few long steps: samples/hostbound (~1 us kernels, CPU ops, runtime calls,
     two microbatch threads), its ProfilerStep markers replaced by one per 1/10 of the file
  b  --gb of JSON with many short steps: samples/overlap (two microbatch threads), one
     ProfilerStep per tiled step (about 10,000 in 1 GB)
  c  --ranks files of --rank-mb each, shape b, as one run's ranks in one folder
  d  the DBO shape a user brings: --gb of samples/overlap tiled as in b (two microbatch threads,
     4 layers x dispatch/combine per microbatch, vLLM 0.33's UBatchContext on an H200, 5 steps
     per copy) with its comm kernels counted, as its bundle declares them (--comm-kernels
     spin_kernel): every step has comm operations, so the operation and exposure analyses run
  e  the DBO shape without step markers, the one users bring (vLLM's profiler writes no
     ProfilerStep# there): shape d with its ProfilerStep# annotations left out, so the steps are
     inferred from GPU idle gaps; `--gb 0.2` is the 200 MB trace of issue 38
Each tool runs in a fresh process: `dbo-trace report --json` (read, analyse, write), json.load of
the same files, and HTA's TraceAnalysis with its temporal breakdown (where --hta-python names a
Python that has HolisticTraceAnalysis installed). Peak memory is the sum of the process tree's
resident memory, sampled every 20 ms. Prints MB/s of uncompressed JSON, peak RSS as a multiple of
the uncompressed size and the ratio to each peer; docs/performance.md keeps the figures.

--scaling MB: each shape at MB, 2x, 4x and 8x that (shape c: --ranks ranks sharing it), `report
--json` with one worker in a fresh process, best of --repeat; beside the end-to-end (wall) time,
the read and the analysis (with the document) in CPU time inside the process. Prints the exponent
k fitted to time ~ size^k (least squares over the four sizes): 1 is linear, 2 quadratic.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEP = "ProfilerStep#"


def _sample_trace(name: str) -> dict:
    (src,) = (ROOT / "samples" / name / "traces").glob("*.json.gz")
    return json.loads(gzip.decompress(src.read_bytes()))


def _kineto_layout(event: dict) -> str:
    """One event laid out as Kineto writes it: `  {` and `  }` on lines of their own."""
    return "  {\n    " + json.dumps(event)[1:-1] + "\n  }"


def build(
    path: Path, sample: str, target_bytes: int, steps_total: int | None, rank: int | None = None, world: int = 1,
    markers: bool = True,
) -> int:  # fmt: skip
    """Tile a sample's events until target_bytes of JSON. steps_total: that many long steps over the
    whole file instead of the sample's own (shape a). markers=False: no ProfilerStep# at all (shape
    e). Returns the uncompressed size."""
    doc = _sample_trace(sample)
    events = doc.pop("traceEvents")
    timed = [e for e in events if "ts" in e]
    t0 = min(e["ts"] for e in timed)
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - t0 + 1000.0
    max_corr = max((e.get("args", {}).get("correlation", 0) for e in events), default=0) + 1
    step_markers = [e for e in events if str(e.get("name", "")).startswith(STEP)]
    own_steps = len(step_markers)
    if steps_total is not None or not markers:
        events = [e for e in events if e not in step_markers]
    per_copy = len(json.dumps(events)) + 2
    copies = max(1, target_bytes // per_copy)
    copies_per_step = max(1, copies // steps_total) if steps_total else None
    written, copy, first = 0, 0, True
    with gzip.open(path, "wt", compresslevel=1) as out:
        out.write('{\n  "schemaVersion": 1,\n  "traceEvents": [\n')
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
                if steps_total is None and str(e2.get("name", "")).startswith(STEP):
                    e2["name"] = f"{STEP}{copy * own_steps + int(e2['name'][len(STEP) :])}"
                parts.append(_kineto_layout(e2))
            if copies_per_step and copy % copies_per_step == 0:
                m = dict(step_markers[0], name=f"{STEP}{copy // copies_per_step}", ts=round(t0 + shift, 3))
                m["dur"] = round(copies_per_step * span - 500.0, 3)
                parts.append(_kineto_layout(m))
            chunk = ("" if first else ",\n") + ",\n".join(parts)
            out.write(chunk)
            written += len(chunk)
            first, copy = False, copy + 1
        if rank is not None:
            doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
        out.write("\n  ],\n" + json.dumps(doc)[1:] + "\n")
    return written


def _tree_rss_mb(pid: int) -> float:
    """Resident memory of a process and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:
            with open(f"/proc/{p}/statm") as fh:
                total += int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            continue
    return total / 1e6


def measure(cmd: list[str], env: dict | None = None) -> tuple[float, float, int]:
    """Wall seconds, peak tree RSS (MB) and exit status of a fresh process."""
    peak = [0.0]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], _tree_rss_mb(proc.pid))
            time.sleep(0.02)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    _, err = proc.communicate()
    wall = time.perf_counter() - t
    watcher.join()
    if proc.returncode:
        print(f"  ! {' '.join(cmd[:3])}... exited {proc.returncode}: {err.decode(errors='replace').strip()[-300:]}")
    return wall, peak[0], proc.returncode


# Parsing is HTA's main cost; its temporal breakdown is the closest analysis to ours. On some tiled
# traces the breakdown trips an assertion of HTA's (non_compute_time >= 0): the time is kept and said.
HTA_CODE = """
import sys
from hta.trace_analysis import TraceAnalysis
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
try:
    analyzer.get_temporal_breakdown(visualize=False)
except AssertionError as exc:
    print("HTA's temporal breakdown failed (AssertionError); parse time kept", file=sys.stderr)
"""

JSON_CODE = """
import gzip, json, sys
for p in sys.argv[1:]:
    with gzip.open(p, "rt") as fh:
        json.load(fh)
"""


def _output(folder: Path, workers: int) -> Path:
    """Beside the shape's folder, not in it: a folder of traces is read whole (and so is HTA's)."""
    return folder.parent / f"{folder.name}-report-{workers}.json"


SHAPE_OPTIONS = {"d": ["--comm-kernels", "spin_kernel"], "e": ["--comm-kernels", "spin_kernel"]}  # what samples/overlap's manifest declares


def run_shape(name: str, folder: Path, mb: float, args, rows: list[dict]) -> None:
    files = sorted(str(p) for p in folder.glob("*.json.gz"))
    target = folder if len(files) > 1 else Path(files[0])
    gzipped = sum(os.path.getsize(f) for f in files) / 1e6
    print(f"shape {name}: {len(files)} file(s), {mb:.0f} MB of JSON, {gzipped:.0f} MB gzipped")
    results, load = {}, {}
    for workers in args.workers:
        env = dict(os.environ, DBO_TRACE_WORKERS=str(workers))
        cmd = [sys.executable, "-m", "dbo_trace.cli", "report", "--json", "-o", str(_output(folder, workers)),
               "--force", *SHAPE_OPTIONS.get(name, []), str(target)]  # fmt: skip
        key = f"dbo-trace ({workers} worker{'s' if workers > 1 else ''})"
        results[key] = measure(cmd, env)
        load[key] = _loadavg()
    results["json.load"] = measure([sys.executable, "-c", JSON_CODE, *files])
    load["json.load"] = _loadavg()
    if args.hta_python:
        results["HTA TraceAnalysis + temporal breakdown"] = measure([args.hta_python, "-c", HTA_CODE, str(folder)])
        load["HTA TraceAnalysis + temporal breakdown"] = _loadavg()
    ours = min((w for key, (w, _, rc) in results.items() if key.startswith("dbo-trace") and rc == 0), default=float("nan"))
    for key, (wall, peak, rc) in results.items():
        status = "" if rc == 0 else f" (failed, exit {rc})"
        ratio = f"{wall / ours:5.1f}x dbo-trace's time" if not key.startswith("dbo-trace") else ""
        print(
            f"  {key:40s} {wall:7.1f} s {mb / wall:7.1f} MB/s  peak RSS {peak:7.0f} MB ({peak / mb:4.2f}x)  {ratio}{status}"
            f"  (load after: {load[key]})"
        )
        rows.append({"shape": name, "tool": key, "s": wall, "mb_s": mb / wall, "peak_mb": peak, "rc": rc})
    outputs = [_output(folder, w) for w in args.workers]
    if len(outputs) > 1 and all(p.exists() for p in outputs):
        same = len({p.read_bytes() for p in outputs}) == 1
        print(f"  JSON documents identical across worker counts: {same}")


def build_shape(shape: str, folder: Path, gb: float, rank_mb: float, ranks: int) -> int:
    """Build one shape's files in folder; returns the uncompressed size."""
    if shape == "a":
        return build(folder / "rank0.pt.trace.json.gz", "hostbound", int(gb * 1e9), steps_total=10)
    if shape in ("b", "d", "e"):
        sample = "overlap-no-hooks" if shape == "e" else "overlap"
        return build(folder / "rank0.pt.trace.json.gz", sample, int(gb * 1e9), steps_total=None, markers=shape != "e")
    rank_bytes = int(rank_mb * 1e6)
    return sum(
        build(folder / f"rank{r}.pt.trace.json.gz", "overlap", rank_bytes, None, rank=r, world=ranks) for r in range(ranks)
    )


def shape_folder(base: Path, shape: str, gb: float, rank_mb: float, ranks: int) -> tuple[Path, float]:
    """The shape's folder under base, built unless there already; and its uncompressed MB."""
    folder = base / shape
    folder.mkdir(parents=True, exist_ok=True)
    size_file = folder / "json-bytes"
    if not size_file.exists():
        t = time.perf_counter()
        size_file.write_text(str(build_shape(shape, folder, gb, rank_mb, ranks)))
        print(f"built shape {shape} in {time.perf_counter() - t:.0f} s")
    return folder, int(size_file.read_text()) / 1e6


# Run in a fresh process by the scaling run: the read and the analysis (with the document) timed
# apart, as `report --json` does them with one worker, in CPU time of the process (on a shared
# machine other processes' load moves wall time far more).
PARTS_CODE = """
import json, sys, time
from pathlib import Path
from dbo_trace.analysis.model import Options
from dbo_trace.app.pipeline import analyze
from dbo_trace.render.json_out import JsonRenderer
from dbo_trace.trace.load import discover, load
t0 = time.process_time()
loaded = load(discover([Path(sys.argv[1])]), workers=1)
t1 = time.process_time()
comm = tuple(sys.argv[2:])
report = analyze(loaded, Options(comm_patterns=comm), [sys.argv[1]])
text = JsonRenderer().render(report)
t2 = time.process_time()
print(json.dumps({"read": t1 - t0, "analysis": t2 - t1, "steps": sum(len(r.steps) for r in report.ranks)}))
"""


def exponent(sizes: list[float], times: list[float]) -> float:
    """k of time ~ size^k, least squares in log-log."""
    x, y = [math.log(s) for s in sizes], [math.log(max(t, 1e-9)) for t in times]
    mx, my = sum(x) / len(x), sum(y) / len(y)
    return sum((a - mx) * (b - my) for a, b in zip(x, y)) / sum((a - mx) ** 2 for a in x)


def run_scaling(args, base: Path) -> None:
    """Each shape at N, 2N, 4N, 8N MB: the times and the fitted exponent."""
    for shape in args.shapes.split(","):
        rows = []
        for k in (1, 2, 4, 8):
            mb = args.scaling * k
            folder, size = shape_folder(base / f"scaling-{mb:g}", shape, mb / 1000, mb / args.ranks, args.ranks)
            files = sorted(folder.glob("*.json.gz"))
            target = folder if len(files) > 1 else files[0]
            comm = SHAPE_OPTIONS.get(shape, [])[1::2]
            walls, parts = [], []
            for _ in range(args.repeat):
                cmd = [sys.executable, "-m", "dbo_trace.cli", "report", "--json", "--workers", "1", "-o",
                       str(_output(folder, 1)), "--force", *SHAPE_OPTIONS.get(shape, []), str(target)]  # fmt: skip
                walls.append(measure(cmd)[0])
                out = subprocess.run([sys.executable, "-c", PARTS_CODE, str(target), *comm], capture_output=True, text=True)
                parts.append(json.loads(out.stdout))
            best = {key: min(p[key] for p in parts) for key in ("read", "analysis")}
            rows.append((size, min(walls), best["read"], best["analysis"], parts[0]["steps"]))
            print(
                f"  shape {shape} {size:7.1f} MB, {parts[0]['steps']:6d} steps: report --json {min(walls):6.2f} s, "
                f"read {best['read']:6.2f} s, analysis + document {best['analysis']:6.2f} s (CPU)   load {_loadavg()}",
                flush=True,
            )
        sizes = [r[0] for r in rows]
        print(
            f"shape {shape}: exponent (N to 8N) end to end {exponent(sizes, [r[1] for r in rows]):.2f}, "
            f"read {exponent(sizes, [r[2] for r in rows]):.2f}, analysis {exponent(sizes, [r[3] for r in rows]):.2f}",
            flush=True,
        )


def _loadavg() -> str:
    try:
        with open("/proc/loadavg") as fh:
            return " ".join(fh.read().split()[:3])
    except OSError:
        return "?"


def compile_package() -> str:
    """dbo-trace's modules compiled to bytecode before any run, as an installed package has them: where
    PYTHONDONTWRITEBYTECODE is set (as on this project's machines), every fresh process would compile
    its 200 modules again, about 0.3 s of each run. Returns what the header line says of it."""
    import compileall

    compileall.compile_dir(ROOT / "dbo_trace", quiet=1)
    return "dbo-trace's bytecode compiled before the runs"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="a,b,c,d")
    p.add_argument("--gb", type=float, default=1.0, help="uncompressed size of shapes a, b and d")
    p.add_argument("--rank-mb", type=float, default=250.0)
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--workers", default="1,2", help="worker counts to run dbo-trace with (DBO_TRACE_WORKERS)")
    p.add_argument("--hta-python", help="a Python with HolisticTraceAnalysis installed")
    p.add_argument("--keep", type=Path, help="build the traces here and keep them (reused when present)")
    p.add_argument("--scaling", type=float, help="MB: run each shape at this size, 2x, 4x and 8x and fit the exponent")
    p.add_argument("--repeat", type=int, default=2, help="runs per size in the scaling run (the best counts)")
    args = p.parse_args()
    args.workers = [int(w) for w in args.workers.split(",")]
    base = args.keep or Path(tempfile.mkdtemp(prefix="dbo-trace-bench-"))
    rows: list[dict] = []
    now = time.strftime("%Y-%m-%d %H:%M")
    print(f"machine: {os.cpu_count()} cores; python {sys.version.split()[0]}; {now}; load {_loadavg()}; {compile_package()}")
    if args.scaling:
        run_scaling(args, base)
    else:
        for shape in args.shapes.split(","):
            folder, mb = shape_folder(base, shape, args.gb, args.rank_mb, args.ranks)
            run_shape(shape, folder, mb, args, rows)
            print(f"  load average after shape {shape}: {_loadavg()}")
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
