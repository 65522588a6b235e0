"""Start-up of the commands a user types first: `dbo-trace --help`, and `report` of a small trace.

    python benchmarks/bench_startup.py [--rounds 10] [--against DIR] [--sample samples/overlap]

Each command in a fresh process, bytecode compiled beforehand (as an installed package has it),
the variants alternating round by round. With --against DIR (another checkout of dbo-trace, say
`git archive COMMIT | tar -x -C DIR`), that copy's commands run beside this one's. Printed: wall
time and CPU time (user + system) of the child, best and median, and the load average after each
variant's last run; on a shared machine the CPU time moves less than the wall time. The aim
(issue 55): at most 0.25 s of wall time for each, on a quiet machine.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = "import sys; from dbo_trace.cli import run; sys.argv[0] = 'dbo-trace'; sys.exit(run())"


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of a fresh process (its own rusage, from wait4)."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{' '.join(cmd)}: exit {os.waitstatus_to_exitcode(status)}")
    return wall, usage.ru_utime + usage.ru_stime


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--against", type=Path, help="another checkout of dbo-trace to run beside this one")
    p.add_argument("--sample", default=str(ROOT / "samples" / "overlap"))
    args = p.parse_args()
    trees = {"this": ROOT} | ({"against": args.against.resolve()} if args.against else {})
    for tree in trees.values():
        compileall.compile_dir(tree / "dbo_trace", quiet=1)
    commands = {
        "--help": ["--help"],
        "report (terminal)": ["report", args.sample],
        "report --json": ["report", "--json", args.sample],
    }
    print(f"{os.cpu_count()} cores; python {sys.version.split()[0]}; {time.strftime('%Y-%m-%d %H:%M')}; load {loadavg()}")
    print(f"{args.rounds} rounds, alternating; {args.sample}")
    runs: dict[tuple[str, str], list[tuple[float, float]]] = {}
    loads: dict[tuple[str, str], str] = {}
    for _ in range(args.rounds):
        for command, argv in commands.items():
            for tree_name, tree in trees.items():
                env = dict(os.environ, PYTHONPATH=str(tree))
                key = (command, tree_name)
                runs.setdefault(key, []).append(timed([sys.executable, "-c", CLI, *argv], env))
                loads[key] = loadavg()
    print(f"{'command':20s} {'tree':8s} {'wall best':>9s} {'median':>7s} {'CPU best':>9s} {'median':>7s}  load after")
    for (command, tree_name), values in runs.items():
        walls, cpus = [w for w, _ in values], [c for _, c in values]
        print(
            f"{command:20s} {tree_name:8s} {min(walls):8.3f}s {statistics.median(walls):6.3f}s "
            f"{min(cpus):8.3f}s {statistics.median(cpus):6.3f}s  {loads[(command, tree_name)]}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
