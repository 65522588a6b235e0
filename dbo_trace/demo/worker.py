"""The demo's process: one per GPU (or one on the CPU for CI). Run by `dbo-trace demo` under `record`.

    python -m dbo_trace.demo.worker --mode overlap [--layers 4 --tokens 16384 --comm-us 1000 ...]
    python -m dbo_trace.demo.worker --sweep --compute-us 100,400 --comm-us 100,400

With DBO_TRACE_DIR set (record sets it) it loads the dbo-trace plugin as vLLM
would, profiles into $DBO_TRACE_TRACES, and writes workload.json (what was
run, and unprofiled step times) beside them. --nproc N launches N ranks of
itself with torch.distributed (NCCL on GPUs, gloo on the CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dbo_trace.demo.devices import SPIN_KERNEL, CpuDevice, CudaDevice
from dbo_trace.demo.workload import MODES, AllToAllComm, SpinComm, Workload, WorkloadConfig

BUILTIN_UBATCHING = "dbo_trace.demo.ubatching"
WORKLOAD_FILE = "workload.json"
TIMED_STEPS = 10


def load_ubatching(choice: str):
    """vLLM's own ubatching module where it imports (choice auto|vllm), else the built-in equivalent."""
    if choice in ("auto", "vllm"):
        try:
            import vllm
            import vllm.v1.worker.ubatching as ub

            return ub, f"vLLM {vllm.__version__}"
        except Exception:
            if choice == "vllm":
                raise
    import importlib

    return importlib.import_module(BUILTIN_UBATCHING), "built-in"


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=MODES, default="overlap")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--tokens", type=int, default=16384, help="tokens per step, split over two microbatches")
    p.add_argument("--hidden", type=int, default=8192)
    p.add_argument("--compute-us", default=None, help="target length of one compute phase (sets --tokens); a list with --sweep")
    p.add_argument("--comm-us", default="1000", help="emulated dispatch/combine length on one GPU; a list with --sweep")
    p.add_argument("--comm-bytes", type=int, default=None, help="all_to_all size with --nproc (default: calibrated to --comm-us)")
    p.add_argument("--tiny-kernels", type=int, default=100)
    p.add_argument("--steps", type=int, default=5, help="profiled steps")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--nproc", type=int, default=1)
    p.add_argument(
        "--comm",
        choices=("auto", "spin", "all_to_all"),
        default="auto",
        help="auto: a spin kernel on one process, all_to_all across several; all_to_all on one process "
        "runs the collective path over a world of one",
    )
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--ubatching", choices=("auto", "vllm", "builtin"), default="auto")
    p.add_argument("--no-all-threads", action="store_true", help="profile without profile_all_threads")
    p.add_argument("--sweep", action="store_true")
    p.add_argument("--out", help="bundle folder when run without `record` (no DBO_TRACE_DIR: no hooks)")
    return p.parse_args(argv)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_ranks(args, argv) -> int:
    """One process per rank, as torchrun would; the first failure stops the others."""
    port = str(_free_port())
    procs = []
    for rank in range(args.nproc):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(args.nproc),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
        }
        env.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off (the lent machines have it off)
        procs.append(subprocess.Popen([sys.executable, "-m", "dbo_trace.demo.worker", *argv], env=env))
    codes: list[int | None] = [None] * len(procs)
    while any(c is None for c in codes):
        for i, proc in enumerate(procs):
            codes[i] = proc.poll()
            failed = codes[i]
            if failed is not None and failed != 0:
                for other in procs:
                    if other.poll() is None:
                        other.terminate()
                return failed
        time.sleep(0.1)
    return 0


def _setup(args):
    import torch

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("dbo-trace demo: no CUDA GPU is visible to torch")
        device = CudaDevice(torch, int(os.environ.get("LOCAL_RANK", 0)))
    else:
        device = CpuDevice(torch)
    dist = None
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group("nccl" if device.kind == "cuda" else "gloo", rank=rank, world_size=world)
    ub, backend = load_ubatching(args.ubatching)
    device.bind(ub)
    return torch, device, dist, ub, backend, rank, world


def _compute_tokens(torch, device, hidden: int, compute_us: float) -> int:
    """Tokens per step whose per-microbatch GEMM takes compute_us, measured on this device."""
    dtype = torch.bfloat16 if device.kind == "cuda" else torch.float32
    rows = 4096
    w = torch.randn(hidden, hidden, device=device.device, dtype=dtype)
    x = torch.randn(rows, hidden, device=device.device, dtype=dtype)
    per_row = device.time_us(lambda: x @ w) / rows
    return max(128, int(round(compute_us / per_row / 64)) * 64 * 2)


def _comm(torch, device, dist, args, comm_us: float):
    if dist is None or args.comm == "spin":
        return SpinComm(device, comm_us)
    nbytes = args.comm_bytes
    if nbytes is None and device.kind == "cuda":
        probe = AllToAllComm(torch, dist, device, 16 << 20)
        measured = device.time_us(lambda: probe(0))
        agreed = torch.tensor([16 * (1 << 20) * comm_us / measured], device=device.device)
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX)  # every rank must send the same size
        nbytes = int(agreed.item())
    return AllToAllComm(torch, dist, device, nbytes or 4096)


def _timed_steps(work, device, n: int, warmup: int) -> list[float]:
    """Wall time of n steps, each to its end on the device, after warmup untimed ones."""
    for _ in range(warmup):
        work.step()
    device.synchronize()
    wall = []
    for _ in range(n):
        t0 = time.perf_counter()
        work.step()
        device.synchronize()
        wall.append((time.perf_counter() - t0) * 1e6)
    return wall


def _profile(torch, work, device, steps: int, trace_dir: Path, worker_name: str, all_threads: bool) -> bool:
    from torch.profiler import profile, schedule, tensorboard_trace_handler

    from dbo_trace.record.vllm_targets import all_threads_config

    config = all_threads_config(torch) if all_threads else None
    with profile(
        activities=device.profiler_activities(),
        schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
        on_trace_ready=tensorboard_trace_handler(str(trace_dir), worker_name=worker_name, use_gzip=True),
        experimental_config=config,
    ) as prof:
        for _ in range(steps + 1):
            work.step()
            device.synchronize()
            prof.step()
    return config is not None


def run_mode(args) -> int:
    if args.mode == "graph" and args.device == "cpu":
        raise SystemExit("dbo-trace demo: the graph mode needs CUDA graphs, which the CPU does not have")
    torch, device, dist, ub, backend, rank, world = _setup(args)
    from dbo_trace.record import plugin
    from dbo_trace.record.vllm_targets import context_targets

    plugin.register(extra_targets=context_targets(BUILTIN_UBATCHING) if backend == "built-in" else ())
    ins = plugin.installed()
    comm_us = float(args.comm_us)
    tokens = _compute_tokens(torch, device, args.hidden, float(args.compute_us)) if args.compute_us else args.tokens
    cfg = WorkloadConfig(args.mode, args.layers, tokens, args.hidden, args.tiny_kernels)
    comm = _comm(torch, device, dist, args, comm_us)
    work = Workload(cfg, device, ub, comm, ins)
    wall = _timed_steps(work, device, TIMED_STEPS, args.warmup)
    bundle = Path(os.environ.get("DBO_TRACE_DIR") or args.out or tempfile.mkdtemp(prefix="dbo-trace-demo-"))
    trace_dir = Path(os.environ.get("DBO_TRACE_TRACES") or bundle / "traces")
    trace_dir.mkdir(parents=True, exist_ok=True)
    all_threads = _profile(torch, work, device, args.steps, trace_dir, f"rank{rank}", not args.no_all_threads)
    if ins is not None:
        ins.log.flush()
    if dist is not None:
        dist.barrier()  # every rank has written its trace and log
    if rank == 0:
        described = {
            "mode": args.mode,
            "layers": args.layers,
            "tokens_per_ubatch": tokens // 2,
            "hidden": args.hidden,
            "comm_us": comm_us,
            "comm": comm.describe(),
            "tiny_kernels": args.tiny_kernels if args.mode == "hostbound" else 0,
            "profiled_steps": args.steps,
            "nproc": world,
            "device": device.name(),
            "ubatching": backend,
            "torch": torch.__version__,
            "profile_all_threads": all_threads,
            "unprofiled_step_us": {"median": statistics.median(wall), "min": min(wall), "all": wall},
        }
        (bundle / WORKLOAD_FILE).write_text(json.dumps(described, indent=1))
    if ins is not None:
        ins.quietly(ins.write_counters, "exit")  # os._exit below skips atexit
    if dist is not None:
        # Seen on two H200s: NCCL's teardown after a CUDA graph captured its collectives hung until the
        # demo's time limit. Everything is written; leave without tearing the communicator down.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def run_sweep(args) -> int:
    """Step time with DBO (overlap) against serialized microbatches per grid point, and the report's criterion."""
    torch, device, dist, ub, backend, rank, world = _setup(args)
    from dbo_trace.analysis.model import Options
    from dbo_trace.app.pipeline import analyze_paths

    computes = [float(x) for x in str(args.compute_us or "200,400,800").split(",")]
    comms = [float(x) for x in str(args.comm_us).split(",")]
    for compute_us in computes:
        tokens = _compute_tokens(torch, device, args.hidden, compute_us)
        for comm_us in comms:
            comm = SpinComm(device, comm_us)
            medians = {}
            for mode in ("serial", "overlap"):
                work = Workload(WorkloadConfig(mode, args.layers, tokens, args.hidden), device, ub, comm)
                medians[mode] = statistics.median(_timed_steps(work, device, TIMED_STEPS, args.warmup))
            with tempfile.TemporaryDirectory() as tmp:
                work = Workload(WorkloadConfig("serial", args.layers, tokens, args.hidden), device, ub, comm)
                _profile(torch, work, device, 3, Path(tmp), "rank0", True)
                result = analyze_paths([Path(tmp)], Options(comm_patterns=(SPIN_KERNEL,), layers=args.layers))
            rt = result.round_trips
            print(
                json.dumps(
                    {
                        "compute_us": compute_us,
                        "comm_us": comm_us,
                        "tokens": tokens,
                        "serial_step_us": medians["serial"],
                        "dbo_step_us": medians["overlap"],
                        "compute_per_round_trip_us": rt.compute_per_round_trip_us if rt else None,
                        "comm_per_round_trip_us": rt.comm_per_round_trip_us if rt else None,
                        "ratio": rt.ratio if rt else None,
                    }
                ),
                flush=True,
            )
    return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    if args.comm == "all_to_all" and args.nproc < 2:
        # Measured on the H200: over a world of one, torch turns all_to_all_single into a device-to-device copy.
        raise SystemExit("dbo-trace demo: --comm all_to_all needs --nproc 2 or more")
    if args.nproc > 1 and "RANK" not in os.environ:
        return launch_ranks(args, argv)
    return run_sweep(args) if args.sweep else run_mode(args)


if __name__ == "__main__":
    raise SystemExit(main())
