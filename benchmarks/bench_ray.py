"""`report --ray` at scale: what a rank sends over the network, and the time on a local cluster.

    python benchmarks/bench_ray.py --bytes 4,16,64           # per rank of that many MB of JSON
    python benchmarks/bench_ray.py --cluster 8x2,8x16        # N ranks x MB: process pool vs local Ray cluster

--bytes: one rank of the DBO shape (benchmarks/bench_report.py shape d: samples/overlap tiled, its
comm kernels counted) analysed here; prints the trace's size (gzipped, JSON), what the process pool
carries back per rank (the report with its detail, pickled) and what a Ray task sends to the driver
(dbo_trace/app/ray_executor.py Compact: the report without its detail, the cross-rank step's CrossPart, the
timeline's bounds), and per comm kernel and per step, for the estimate in docs/performance.md.

--cluster: N ranks of MB each in two folders, `report --json` with the process pool (--workers 2)
against `report --json --ray` on a two-node Ray cluster started here on 127.0.0.1 (tests/system/test_ray.py's),
each in a fresh process; checks the two documents are the same bytes.
"""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tests")]
import conftest  # noqa: E402,F401  (it puts the tests' folders by kind on the path: tests/README.md)

from bench_report import build  # noqa: E402

COMM = ("--comm-kernels", "spin_kernel")  # the overlap sample's emulated all-to-all (its bundle declares it)


def rank_bytes(mb: float, folder: Path) -> dict:
    from dataclasses import replace

    from dbo_trace.analysis.context import cross_part
    from dbo_trace.analysis.model import Options
    from dbo_trace.app.pipeline import Shared, analyse_trace, recording_of
    from dbo_trace.app.ray_executor import Compact

    trace = folder / f"rank-{mb:g}.pt.trace.json.gz"
    json_bytes = build(trace, "overlap", int(mb * 1e6), None, rank=0, world=2)
    result = analyse_trace(trace, 0, Shared(Options(comm_patterns=(COMM[1],)), recording_of([]), {}, [], []))
    assert not isinstance(result, str), result
    (report,) = result
    part = cross_part(report)
    compact = Compact([replace(report, detail=None)], [part], [report.detailed().timeline.bounds()], "")
    return {
        "json_mb": json_bytes / 1e6,
        "gz_mb": trace.stat().st_size / 1e6,
        "full_mb": len(pickle.dumps(report, protocol=5)) / 1e6,
        "compact_mb": len(pickle.dumps(compact, protocol=5)) / 1e6,
        "crosspart_mb": len(pickle.dumps(part, protocol=5)) / 1e6,
        "comm_kernels": len(part.comm.start),
        "steps": len(report.steps),
        "gpu_events": len(report.detailed().timeline.gpu),
    }


def timed(cmd: list[str]) -> tuple[float, bytes]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr.decode()[-2000:])
    return time.perf_counter() - start, proc.stdout


def cluster_run(shapes: list[tuple[int, float]], base: Path) -> None:
    from test_ray import Cluster

    ray = Cluster(base)
    try:
        ray.start("node-a", cpus=2)
        ray.start("node-b", cpus=2)
        for n, mb in shapes:
            a, b = base / f"{n}x{mb:g}" / "a", base / f"{n}x{mb:g}" / "b"
            a.mkdir(parents=True), b.mkdir(parents=True)
            folders = [a if r < n // 2 else b for r in range(n)]
            total = sum(
                build(f / f"rank{r}.pt.trace.json.gz", "overlap", int(mb * 1e6), None, rank=r, world=n)
                for r, f in enumerate(folders)
            )
            cli = [sys.executable, "-m", "dbo_trace.cli", "report", "--json", *COMM]
            pool_s, pool_doc = timed([*cli, "--workers", "2", str(a), str(b)])
            ray_s, ray_doc = timed([*cli, "--ray", ray.address, f"node-a:{a}", f"node-b:{b}"])
            same = "same bytes" if pool_doc == ray_doc else "DIFFERENT"
            shape = f"{n} ranks x {mb:g} MB ({total / 1e6:.0f} MB JSON)"
            print(f"{shape}: process pool {pool_s:.1f} s, Ray two nodes {ray_s:.1f} s; {same}")
    finally:
        ray.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bytes", default="", help="MB of JSON per rank, comma-separated")
    parser.add_argument("--cluster", default="", help="NxMB shapes, comma-separated (8x2,8x16)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        for mb in [float(x) for x in args.bytes.split(",") if x]:
            row = rank_bytes(mb, Path(tmp))
            per_kernel = row["crosspart_mb"] * 1e6 / max(1, row["comm_kernels"])
            print(
                f"{row['json_mb']:.0f} MB JSON ({row['gz_mb']:.1f} MB gzipped, {row['gpu_events']} GPU events, "
                f"{row['comm_kernels']} comm kernels, {row['steps']} steps): report with detail {row['full_mb']:.2f} MB, "
                f"Ray's compact result {row['compact_mb']:.2f} MB (CrossPart {row['crosspart_mb']:.2f} MB, "
                f"{per_kernel:.0f} B per comm kernel)"
            )
        shapes = [(int(n), float(mb)) for n, mb in (s.split("x") for s in args.cluster.split(",") if s)]
        if shapes:
            cluster_run(shapes, Path(tmp))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    raise SystemExit(main())
