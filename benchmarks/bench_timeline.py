"""How much `--timeline` adds to `dbo-trace report`, per sample: the report alone and with the
picture, each in a fresh process (the console script as a user runs it), interleaved (report,
report + picture, report, ...) so that a change in the machine's load lands on both; the load
average is printed beside every figure, since on a shared machine it moves the wall time most.

    python benchmarks/bench_timeline.py [--repeat 3] [--step median|slowest|N] [SAMPLE ...]

Default samples: dsv2lite-eager-prefill (20,000 kernels, 5,000 in its median step's window: the
one that took 15-20 s with an artist per bar) and overlap (a small DBO step). Prints per sample and
variant the median wall and CPU time (user + system of the child) and the picture's ratio to the
report's; docs/performance.md keeps the figures. The issue's bar: the ratio at most 2.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ["dsv2lite-eager-prefill", "overlap"]


def run(args: list[str]) -> tuple[float, float, float]:
    """(wall s, CPU s of the child, 1-minute load average at its start) of one fresh process."""
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "dbo_trace.cli", *args], capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("samples", nargs="*", default=DEFAULT)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--step", default="median")
    a = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for sample in a.samples:
            path = str(ROOT / "samples" / sample)
            plain: list[tuple[float, float, float]] = []
            drawn: list[tuple[float, float, float]] = []
            for k in range(a.repeat):
                out = Path(tmp) / f"{sample}-{k}.png"
                plain.append(run(["report", path]))
                drawn.append(run(["report", path, "--timeline", str(out), "--step", a.step]))
                print(
                    f"  {sample} run {k + 1}: report {plain[-1][0]:.2f} s wall {plain[-1][1]:.2f} s CPU (load {plain[-1][2]:.2f});"
                    f" + --timeline {drawn[-1][0]:.2f} s wall {drawn[-1][1]:.2f} s CPU (load {drawn[-1][2]:.2f})",
                    flush=True,
                )
            med = [statistics.median(x) for x in zip(*plain)], [statistics.median(x) for x in zip(*drawn)]
            print(
                f"{sample} (step {a.step}), medians of {a.repeat}: report {med[0][0]:.2f} s wall / {med[0][1]:.2f} s CPU, "
                f"with --timeline {med[1][0]:.2f} s wall / {med[1][1]:.2f} s CPU: x{med[1][0] / med[0][0]:.2f} wall, "
                f"x{med[1][1] / med[0][1]:.2f} CPU (load {statistics.median(x[2] for x in plain + drawn):.2f})"
            )


if __name__ == "__main__":
    main()
