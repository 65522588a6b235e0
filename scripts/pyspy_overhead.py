#!/usr/bin/env python3
"""py-spy's cost to a GPU program, and a trace to check the samples' alignment against (on the H200).

    python3 scripts/pyspy_overhead.py OUT [--rounds 6] [--steps 200]

A workload shaped like a host-bound decode step (a Python loop launching many small kernels, then a
synchronise) runs in rounds; every other round `py-spy record --nonblocking --idle --rate 100` is
attached to it (the flags `dbo-trace record` uses), the rounds interleaved so that drift and load
fall on both. Written to OUT/pyspy-overhead.json: each round's median step time with and without
py-spy, and the overhead (median of the paired ratios). Then one profiled round: a torch profiler
trace (OUT/aligned-trace.json.gz, the steps as `record_function("step#N")` ranges) with py-spy
sampling it (OUT/aligned-pyspy.json, started_unix_ns in OUT/aligned-meta.json), for the alignment
test of the analysis (docs/analysis.md, "Python samples").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch


def step(x: torch.Tensor, kernels: int) -> None:
    for _ in range(kernels):
        x.mul_(1.0000001).add_(1e-7)
    torch.cuda.synchronize()


def sleepy_host(ms: float) -> None:  # the Python a sampler should find: a known slow function
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def run_round(x: torch.Tensor, steps: int, kernels: int) -> list[float]:
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step(x, kernels)
        sleepy_host(0.5)
        times.append(time.perf_counter() - t0)
    return times


def attach(pid: int, out: Path) -> subprocess.Popen:
    argv = [shutil.which("py-spy") or "py-spy", "record", "--pid", str(pid), "--nonblocking", "--idle", "--rate", "100",
            "--format", "chrometrace", "-o", str(out)]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
    time.sleep(0.5)  # attached before the round starts
    return proc


def detach(proc: subprocess.Popen) -> int:
    os.killpg(proc.pid, signal.SIGINT)
    return proc.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--kernels", type=int, default=200)
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of the script itself")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    x = torch.ones(1024, device=args.device)
    if args.device == "cpu":
        torch.cuda.synchronize = lambda: None  # type: ignore[assignment]
        torch.cuda.get_device_name = lambda: "cpu"  # type: ignore[assignment]
    run_round(x, 50, args.kernels)  # warm-up
    rounds = []
    for r in range(args.rounds):
        for sampled in ((False, True) if r % 2 == 0 else (True, False)):  # ABBA: drift falls on both
            proc = attach(os.getpid(), args.out / f"round{r}.json") if sampled else None
            times = run_round(x, args.steps, args.kernels)
            code = detach(proc) if proc else None
            rounds.append({"round": r, "pyspy": sampled, "median_step_ms": statistics.median(times) * 1e3,
                           "mean_step_ms": statistics.fmean(times) * 1e3, "pyspy_exit": code,
                           "loadavg": os.getloadavg()})  # fmt: skip
    pairs = [(a, b) for a in rounds for b in rounds if a["round"] == b["round"] and a["pyspy"] and not b["pyspy"]]
    ratios = [a["median_step_ms"] / b["median_step_ms"] for a, b in pairs]
    summary = {
        "workload": f"{args.kernels} small kernels + a synchronise + 0.5 ms of Python a step, {args.steps} steps a round",
        "pyspy": "record --nonblocking --idle --rate 100 --format chrometrace",
        "rounds": rounds,
        "overhead_median_ratio": statistics.median(ratios),
        "overhead_ratios": ratios,
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
    }
    (args.out / "pyspy-overhead.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k != "rounds"}, indent=1))
    for p in args.out.glob("round*.json"):
        p.unlink()

    # One profiled round with py-spy beside it: both clocks to check the alignment against.
    started = time.time_ns()
    proc = attach(os.getpid(), args.out / "aligned-pyspy.json")
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if args.device == "cuda" else [])
    with torch.profiler.profile(activities=activities) as prof:
        for i in range(40):
            with torch.profiler.record_function(f"step#{i}"):
                step(x, 50)
                with torch.profiler.record_function("sleepy_host"):
                    sleepy_host(5.0)
    detach(proc)
    prof.export_chrome_trace(str(args.out / "aligned-trace.json"))
    subprocess.run(["gzip", "-f", str(args.out / "aligned-trace.json")], check=True)
    (args.out / "aligned-meta.json").write_text(json.dumps({"started_unix_ns": started, "pid": os.getpid(),
                                                            "main_ident": threading.get_ident(),
                                                            "main_native_tid": threading.get_native_id()}))  # fmt: skip
    print("aligned:", sorted(p.name for p in args.out.iterdir()), file=sys.stderr)


if __name__ == "__main__":
    main()
