"""A program with a known slow function, for tests/independent/test_pystacks.py: profiled by torch.profiler (CPU
activity) and sampled by py-spy at once. It writes the trace and, beside it, its own record of when
each step, each call of `slow_function` and each "launch" happened (time.time_ns()), so that both
clocks can be checked against the truth.

Usage: python pystacks_program.py OUT_DIR WAIT_S STEPS
"""

import json
import os
import sys
import threading
import time

import torch
from torch.profiler import ProfilerActivity, profile, record_function

SLOW_S = 0.1
STEP_S = 0.015
GAP_S = 0.06


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def step(i: int) -> None:
    with record_function("step"):
        x = torch.ones(64) + i
        busy(STEP_S)
        del x


def slow_function() -> None:
    end = time.perf_counter() + SLOW_S  # its own loop: the innermost frame while it runs
    while time.perf_counter() < end:
        pass


def main() -> None:
    out, wait_s, steps = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    time.sleep(wait_s)  # py-spy attaches meanwhile
    record = {"pid": os.getpid(), "ident": threading.get_ident(), "native": threading.get_native_id(), "steps": []}
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(steps):
            a = time.time_ns()
            step(i)
            b = time.time_ns()
            slow_function()
            c = time.time_ns()
            time.sleep(GAP_S)  # the slow call is well inside the idle stretch this step's kernel ends
            launch = time.time_ns()
            record["steps"].append({"step": [a, b], "slow": [b, c], "launch": launch})
            time.sleep(0.005)
    prof.export_chrome_trace(os.path.join(out, "trace.json"))
    with open(os.path.join(out, "truth.json"), "w") as f:
        json.dump(record, f)


if __name__ == "__main__":
    main()
