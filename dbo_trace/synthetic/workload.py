"""Synthetic DBO workload driven by vLLM's own UBatchContext threads.

Per layer and microbatch: an attention-like GEMM on the compute stream, a
"dispatch" on the comm stream, an expert-like GEMM, a "combine" on the comm
stream. Communication is emulated by torch.cuda._sleep (a one-block spin
kernel, `spin_kernel`) of calibrated length, so what overlaps is known by
construction. Variants:

  serial     no yields inside the layers (a backend without yield points):
             the microbatches run back to back, comm waits for compute.
  overlap    yields where vLLM's DeepEP path puts them: one microbatch's comm
             runs under the other's compute.
  graph      `overlap`, captured once as one CUDA graph and replayed per step
             (UBatchWrapper's FULL-graph path).
  hostbound  `overlap` with each GEMM replaced by hundreds of tiny kernels:
             the GPU mostly waits for the host to launch.

    python -m dbo_trace.synthetic.workload --variant overlap --out BUNDLE
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import threading
import time
from pathlib import Path

VARIANTS = ("serial", "overlap", "graph", "hostbound")
COMM_KERNEL_PATTERN = "spin_kernel"  # what the emulated communication is called in traces


def _load_vllm_ubatching():
    import torch
    import vllm.v1.worker.ubatching as ub

    # Off a vLLM platform its current_stream() helper does not track streams.
    ub.current_stream = torch.cuda.current_stream
    return ub


def _cycles_per_us(torch) -> float:
    """Calibrate torch.cuda._sleep: spin cycles per microsecond on this GPU, now."""
    torch.cuda._sleep(2_000_000)  # bring clocks up
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 10_000_000
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / (start.elapsed_time(end) * 1000.0)


class Workload:
    def __init__(self, args, ub, ins):
        import torch

        self.torch, self.ub, self.ins, self.args = torch, ub, ins, args
        self.device = torch.device("cuda", 0)
        self.compute_stream = torch.cuda.Stream(self.device)
        self.comm_stream = torch.cuda.Stream(self.device)
        torch.cuda.set_stream(self.compute_stream)
        gen = torch.Generator(device=self.device).manual_seed(0)
        h, t = args.hidden, args.tokens // 2
        self.w1 = torch.randn(h, h, device=self.device, dtype=torch.bfloat16, generator=gen) / h**0.5
        self.w2 = torch.randn(h, h, device=self.device, dtype=torch.bfloat16, generator=gen) / h**0.5
        self.x = [torch.randn(t, h, device=self.device, dtype=torch.bfloat16, generator=gen) for _ in range(2)]
        self.small = [torch.zeros(256, device=self.device) for _ in range(2)]
        self.spin_cycles = int(args.comm_us * _cycles_per_us(torch))
        self.barrier = threading.Barrier(3)
        self.graph = None

    # -- one microbatch's forward, run in its own thread ------------------------
    def _compute(self, u: int, x):
        if self.args.variant == "hostbound":
            for _ in range(self.args.tiny_kernels):
                self.small[u].add_(1.0)
            return x
        return x @ self.w1

    def _comm(self):
        self.torch.cuda._sleep(self.spin_cycles)

    def _forward(self, u: int, x):
        ub, serial = self.ub, self.args.variant == "serial"
        to_comm = ub.dbo_switch_to_comm_sync if serial else ub.dbo_yield_and_switch_from_compute_to_comm
        to_compute = ub.dbo_switch_to_compute_sync if serial else ub.dbo_yield_and_switch_from_comm_to_compute
        for layer in range(self.args.layers):
            if self.ins is not None:
                self.ins.safely(self.ins.log.emit, "layer", u, layer)
            h = self._compute(u, x)  # attention
            to_comm()
            self._comm()  # dispatch
            to_compute()
            x = self._compute(u, h)  # experts
            to_comm()
            self._comm()  # combine
            to_compute()
        return x

    def _thread(self, ctx, u: int, results: list):
        torch = self.torch
        torch.cuda.set_device(self.device)
        with torch.inference_mode():
            with torch.cuda.stream(self.compute_stream):
                torch.cuda.current_blas_handle()
            with torch.cuda.stream(self.comm_stream):
                torch.cuda.current_blas_handle()
            with ctx:
                results.append((u, self._forward(u, self.x[u])))

    def _contexts(self):
        return self.ub.make_ubatch_contexts(
            num_micro_batches=2,
            compute_stream=self.compute_stream,
            comm_stream=self.comm_stream,
            forward_contexts=[None, None],
            ready_barrier=self.barrier,
        )

    def _start_threads(self, results):
        ctxs = self._contexts()
        threads = [threading.Thread(target=self._thread, args=(ctx, u, results)) for u, ctx in enumerate(ctxs)]
        for t in threads:
            t.start()
        self.barrier.wait()
        return ctxs, threads

    # -- steps, as UBatchWrapper.__call__ runs them --------------------------------
    def step(self):
        tokens = [self.args.tokens // 2] * 2
        if self.args.variant == "graph" and self.graph is not None:
            self._begin("graph_replay", tokens)
            self.ins and self.ins.safely(self.ins.graph_event, "graph_replay", "FULL", sum(tokens))
            self.graph.replay()
        elif self.args.variant == "graph":
            self._begin("graph_capture", tokens)
            self.ins and self.ins.safely(self.ins.graph_event, "graph_capture", "FULL", sum(tokens))
            results: list = []
            started = self._start_threads(results)
            self.graph = self.torch.cuda.CUDAGraph()
            with self.torch.cuda.graph(self.graph, stream=self.compute_stream):
                self._run_threads(*started)
        else:
            self._begin("eager_microbatched", tokens)
            results = []
            self._run_threads(*self._start_threads(results))
        self.ins and self.ins.safely(self.ins.step_end)

    @staticmethod
    def _run_threads(ctxs, threads):
        # make_ubatch_contexts chains the CPU events: setting ubatch 0's wait event starts the ping-pong.
        ctxs[0].cpu_wait_event.set()
        for t in threads:
            t.join()

    def _begin(self, path, tokens):
        if self.ins is not None:
            self.ins.safely(self.ins.step_begin, path, tokens)


def _gpu_name(torch) -> str:
    try:
        return torch.cuda.get_device_name(0)
    except Exception:
        return "unknown"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variant", choices=VARIANTS, required=True)
    p.add_argument("--out", required=True, help="bundle folder to write")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--steps", type=int, default=5, help="profiled steps")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--tokens", type=int, default=16384, help="tokens per step, split over two microbatches")
    p.add_argument("--hidden", type=int, default=8192)
    p.add_argument("--comm-us", type=float, default=1000.0, help="emulated dispatch/combine length")
    p.add_argument("--tiny-kernels", type=int, default=100, help="hostbound: kernels per compute phase")
    p.add_argument("--no-all-threads", action="store_true", help="profile without profile_all_threads")
    p.add_argument("--no-hooks", action="store_true", help="do not instrument (a stock-vLLM-like trace)")
    args = p.parse_args(argv)

    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    from dbo_trace.bundle import EVENTS_DIR, TRACES_DIR, write_manifest

    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    ub = _load_vllm_ubatching()
    ins = None
    if not args.no_hooks:
        from dbo_trace.record.events import open_log
        from dbo_trace.record.hooks import Instrumentation
        from dbo_trace.record.vllm_targets import CONTEXT_TARGETS

        ins = Instrumentation(open_log(out, workload=f"synthetic:{args.variant}"))
        ins.install(CONTEXT_TARGETS)

    work = Workload(args, ub, ins)
    # Unprofiled timing: the step time the profiler does not perturb.
    for _ in range(args.warmup):
        work.step()
    torch.cuda.synchronize()
    wall = []
    for _ in range(10):
        t0 = time.perf_counter()
        work.step()
        torch.cuda.synchronize()
        wall.append((time.perf_counter() - t0) * 1e6)

    all_threads = not args.no_all_threads
    experimental = None
    if all_threads:
        try:
            experimental = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
        except TypeError:
            all_threads = False
    trace_dir = out / TRACES_DIR
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        schedule=schedule(wait=0, warmup=1, active=args.steps, repeat=1),
        on_trace_ready=tensorboard_trace_handler(str(trace_dir), worker_name="rank0", use_gzip=True),
        experimental_config=experimental,
    ) as prof:
        for _ in range(args.steps + 1):
            work.step()
            torch.cuda.synchronize()
            prof.step()
    if ins is not None:
        ins.log.flush()
        ins.uninstall()

    write_manifest(
        out,
        {
            "created_by": "dbo_trace.synthetic.workload",
            "command": ["python", "-m", "dbo_trace.synthetic.workload", *(argv or __import__("sys").argv[1:])],
            "host": platform.node(),
            "versions": {"torch": torch.__version__, "vllm": getattr(__import__("vllm"), "__version__", "unknown")},
            "gpu": _gpu_name(torch),
            "profile_all_threads": all_threads,
            "hooks": not args.no_hooks,
            "comm_kernels": [COMM_KERNEL_PATTERN],
            "layers": args.layers,
            "workload": {
                "variant": args.variant,
                "layers": args.layers,
                "profiled_steps": args.steps,
                "tokens_per_ubatch": args.tokens // 2,
                "hidden": args.hidden,
                "comm_us": args.comm_us,
                "spin_cycles": work.spin_cycles,
                "tiny_kernels": args.tiny_kernels if args.variant == "hostbound" else 0,
                "unprofiled_step_us": {"median": statistics.median(wall), "min": min(wall), "all": wall},
            },
            "traces": sorted(str(p.relative_to(out)) for p in trace_dir.iterdir()),
            "events": sorted(str(p.relative_to(out)) for p in (out / EVENTS_DIR).iterdir()) if ins else [],
        },
    )
    print(json.dumps({"variant": args.variant, "out": str(out), "unprofiled_step_us": statistics.median(wall)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
