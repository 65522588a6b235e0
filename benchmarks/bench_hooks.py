"""CPU cost of the hooks per instrumented call (target: under 2 us), and what that adds to a DBO step.

    python benchmarks/bench_hooks.py [--calls 200000]

Patches a stand-in with UBatchContext's shape (the same Targets' wrappers as
for vLLM) and times each method bare and instrumented, profiler off. With
the `nvtx` package installed the NVTX range cost is included (run it both
ways to see it). Prints a table; docs/recording.md keeps the figures.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dbo_trace.record import hooks  # noqa: E402
from dbo_trace.record.events import EventLog  # noqa: E402
from dbo_trace.record.hooks import Instrumentation, Target  # noqa: E402
from dbo_trace.record.vllm_targets import CONTEXT_TARGETS  # noqa: E402


class StandInContext:
    """UBatchContext's attributes and methods, doing nothing."""

    def __init__(self) -> None:
        self.id = 0
        self.comm_stream, self.compute_stream = object(), object()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def _cpu_yield(self):
        pass

    def update_stream(self, stream):
        pass


def per_call_us(fn, calls: int) -> float:
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
    return best


def measure(calls: int) -> dict[str, float]:
    ctx = StandInContext()
    streams = [ctx.comm_stream, ctx.compute_stream]
    flip = iter(range(10**12))
    cases = {
        "__enter__+__exit__": lambda: (ctx.__enter__(), ctx.__exit__(None, None, None)),
        "_cpu_yield": lambda: ctx._cpu_yield(),  # looked up per call, so the patched method is timed
        "update_stream (switch)": lambda: ctx.update_stream(streams[next(flip) & 1]),
    }
    bare = {name: per_call_us(fn, calls) for name, fn in cases.items()}
    with tempfile.TemporaryDirectory() as tmp:
        ins = Instrumentation(EventLog(Path(tmp)))
        ins.install([Target(__name__, "StandInContext", t.attr, t.make) for t in CONTEXT_TARGETS])
        assert len(ins.patched) == 4, ins.missing
        hooked = {name: per_call_us(fn, calls) for name, fn in cases.items()}
        ins.log.flush()
        records = 10_000  # the step-end flush, timed on its own: encode and append
        for _ in range(records):
            ins.log.emit("stream", 0, "comm")
        flushed = time.perf_counter()
        ins.log.flush()
        flush_us = (time.perf_counter() - flushed) * 1e6
        ins.uninstall()
    out = {name: hooked[name] - bare[name] for name in cases}
    out["flush per record"] = flush_us / max(records, 1)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=200_000)
    args = p.parse_args()
    costs = measure(args.calls)
    print(f"nvtx ranges: {'on' if hooks._nvtx is not None else 'off (nvtx not installed)'}; profiler: off")
    print(f"{'instrumented call':28s} {'added CPU per call':>20s}")
    for name, us in costs.items():
        print(f"{name:28s} {us:17.2f} us")
    # One DBO step of the synthetic overlap sample: per microbatch and layer, 4 yields and 4 stream switches
    # (3 records: yield, resume, stream), plus enter/exit once per microbatch (3 records).
    layers = 4
    calls = 2 * (layers * 4 * (costs["_cpu_yield"] + costs["update_stream (switch)"]) + costs["__enter__+__exit__"])
    records = 2 * (layers * 4 * 3 + 3)
    per_step = calls + records * costs["flush per record"]
    print(f"records per step: {records}; hooks per step: {2 * (layers * 8 + 1)} calls")
    print(
        f"added per step of the 4-layer synthetic workload: {per_step:.0f} us "
        f"({per_step / 32400 * 100:.2f}% of its 32.4 ms step on the H200)"
    )


if __name__ == "__main__":
    main()
