"""Long runs: `dbo-trace report` (the terminal summary) and `report --markdown` on runs of 100 and
100,000 steps, each in a fresh process, wall time and peak memory; the aim (issue 38) is 100,000
steps in at most 5x the time of 100.

    python benchmarks/bench_steps.py [--steps 100,100000] [--repeat 3] [--keep DIR]

The traces are tests/helpers/traces.py's many_steps (per step a ProfilerStep# annotation and two kernels,
each with its launch call): the per-step work of the analysis, the document and the renderers, with
as little reading as a step can have. Prints the load average beside every figure: on a shared
machine the wall times move with it. tests/unit/test_long_runs.py guards the growth in CI (10x the steps
within 8x the CPU time), not this target.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from bench_report import _loadavg, compile_package, measure

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import conftest  # noqa: E402,F401  (it puts the tests' folders by kind on the path: tests/README.md)
from traces import many_steps  # noqa: E402  (the tests' builder: one definition of the trace)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", default="100,100000")
    p.add_argument("--repeat", type=int, default=3, help="runs per size and output, interleaved (the best counts)")
    p.add_argument("--keep", type=Path, help="write the traces here and keep them (reused when present)")
    args = p.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="dbo-trace-steps-"))
    base.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.steps.split(",")]
    best: dict[tuple[int, str], float] = {}
    print(f"load {_loadavg()}; {compile_package()}")
    folders = {}
    for n in sizes:
        folders[n] = base / f"steps-{n}"
        if not folders[n].exists():
            many_steps(folders[n], n)
    # Interleaved: each repeat runs every size and output in turn, so that a slow minute on a shared
    # machine falls on all of them; the best of the repeats counts. A 100-step run is mostly start-up
    # (0.4-0.6 s here) and moves the most with the machine.
    runs: dict[tuple[int, str], list[tuple[float, float, int]]] = {}
    loads: dict[tuple[int, str], str] = {}
    for _ in range(args.repeat):
        for n in sizes:
            for output in ("terminal", "markdown"):
                cmd = [sys.executable, "-m", "dbo_trace.cli", "report", str(folders[n]), *(["--markdown"] if output == "markdown" else [])]
                runs.setdefault((n, output), []).append(measure(cmd))
                loads[n, output] = _loadavg()
    for n in sizes:
        for output in ("terminal", "markdown"):
            done = runs[n, output]
            wall, peak = min(r[0] for r in done), max(r[1] for r in done)
            best[n, output] = wall
            walls = " ".join(f"{r[0]:.2f}" for r in done)
            print(f"  {n:>7,} steps, {output:8s}: {wall:6.2f} s (best of {walls}), peak RSS {peak:5.0f} MB   load {loads[n, output]}")
    if len(sizes) > 1:
        lo, hi = sizes[0], sizes[-1]
        for output in ("terminal", "markdown"):
            print(f"  {output}: {hi:,} steps took {best[hi, output] / best[lo, output]:.1f}x the time of {lo:,} (aim: 5x)")
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
