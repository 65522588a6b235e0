"""The demo's DBO step: two microbatch threads ping-pong through UBatchContext, as vLLM's DBO does.

Per layer and microbatch: attention-like compute on the compute stream, a
dispatch on the comm stream, expert-like compute, a combine on the comm
stream. Modes:

  serial     no yields inside the layers (a backend without yield points): the
             microbatches run back to back and comm waits for compute
  overlap    yields where vLLM's DeepEP path puts them: one microbatch's comm
             runs under the other's compute
  graph      overlap, captured once as one CUDA graph and replayed per step
             (UBatchWrapper's full-graph path)
  hostbound  overlap with each compute replaced by many tiny kernels: the GPU
             mostly waits for the host to launch
  late       overlap, but after each yield to comm the comm stream also waits on an event
             recorded then on the compute stream, where the other microbatch's compute is
             already queued: the event is recorded too late, and every dispatch and combine
             waits for the other microbatch's compute (the bug a DBO change can introduce)
  smhungry   overlap with each compute a memory-bound kernel of many waves of blocks: while
             it runs it takes every SM as blocks free up, and the one-block comm kernel of the
             other microbatch cannot start until it ends (what limiting a kernel's SMs fixes)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from dbo_trace import bundle as fmt

MODES = ("serial", "overlap", "graph", "hostbound", "late", "smhungry")


@dataclass
class WorkloadConfig:
    mode: str
    layers: int = 4
    tokens: int = 16384  # per step, split over two microbatches
    hidden: int = 8192
    tiny_kernels: int = 100  # hostbound: kernels per compute phase
    wide_elements: int = 1 << 29  # smhungry: float32 elements updated per compute phase (2 GiB)


class SpinComm:
    """One GPU: communication emulated by a one-block spin kernel of calibrated length (few SMs, like a real a2a)."""

    label = "emulated (spin kernel)"

    def __init__(self, device, comm_us: float):
        self.device = device
        self.cycles = int(comm_us * device.cycles_per_us())

    def __call__(self, u: int) -> None:
        self.device.spin(self.cycles)

    def describe(self) -> dict:
        return {"kind": "spin", "spin_cycles": self.cycles}


class AllToAllComm:
    """Several processes: a real all_to_all of a fixed size per dispatch and combine."""

    label = "all_to_all"

    def __init__(self, torch, dist, device, nbytes: int):
        self.dist = dist
        world = dist.get_world_size()
        elems = max(world, (nbytes // 2) // world * world)  # bf16, a multiple of the world size
        self.bufs = [
            (
                torch.ones(elems, dtype=torch.bfloat16, device=device.device),
                torch.empty(elems, dtype=torch.bfloat16, device=device.device),
            )
            for _ in range(2)
        ]
        self.nbytes = elems * 2
        self.backend, self.world = dist.get_backend(), world

    def __call__(self, u: int) -> None:
        send, recv = self.bufs[u]
        self.dist.all_to_all_single(recv, send)

    def describe(self) -> dict:
        return {"kind": "all_to_all", "backend": self.backend, "bytes": self.nbytes, "world_size": self.world}


class Workload:
    def __init__(self, cfg: WorkloadConfig, device, ub, comm, ins=None):
        import torch

        self.torch, self.cfg, self.device, self.ub, self.comm, self.ins = torch, cfg, device, ub, comm, ins
        dev = device.device
        gen = torch.Generator(device=dev).manual_seed(0)
        dtype = torch.bfloat16 if device.kind == "cuda" else torch.float32
        h, t = cfg.hidden, max(1, cfg.tokens // 2)
        self.w1 = torch.randn(h, h, device=dev, dtype=dtype, generator=gen) / h**0.5
        self.x = [torch.randn(t, h, device=dev, dtype=dtype, generator=gen) for _ in range(2)]
        self.small = [torch.zeros(256, device=dev) for _ in range(2)]
        # smhungry: a buffer per microbatch whose in-place update reads and writes as many bytes as a
        # GEMM of this shape takes time for, in many small blocks (measured: docs/demo.md)
        wide = cfg.wide_elements if device.kind == "cuda" else 4096  # the CPU checks the orchestration only
        self.wide = [torch.zeros(wide if cfg.mode == "smhungry" else 1, device=dev) for _ in range(2)]
        self.barrier = threading.Barrier(3)
        self.graph: Any = None  # torch.cuda.CUDAGraph once captured
        self.steps_run = 0

    # -- one microbatch's forward, in its own thread ---------------------------------
    def _compute(self, u: int, x):
        if self.cfg.mode == "hostbound":
            for _ in range(self.cfg.tiny_kernels):
                self.small[u].add_(1.0)
            return x
        if self.cfg.mode == "smhungry":
            self.wide[u].add_(1.0)
            return x
        return x @ self.w1

    def _forward(self, u: int, x):
        ub, serial = self.ub, self.cfg.mode == "serial"
        to_comm = ub.dbo_switch_to_comm_sync if serial else ub.dbo_yield_and_switch_from_compute_to_comm
        to_compute = ub.dbo_switch_to_compute_sync if serial else ub.dbo_yield_and_switch_from_comm_to_compute
        late = self.cfg.mode == "late"
        for layer in range(self.cfg.layers):
            if self.ins is not None:
                self.ins.safely(self.ins.log.emit, fmt.EV_LAYER, u, layer)
            h = self._compute(u, x)  # attention
            to_comm()
            if late:
                self.device.wait_on_compute_stream_now()
            self.comm(u)  # dispatch
            to_compute()
            x = self._compute(u, h)  # experts
            to_comm()
            if late:
                self.device.wait_on_compute_stream_now()
            self.comm(u)  # combine
            to_compute()
        return x

    def _thread(self, ctx, u: int, errors: list) -> None:
        try:
            self.device.thread_setup()
            with self.torch.inference_mode(), ctx:
                self._forward(u, self.x[u])
        except BaseException as exc:  # surfaced by step(); a dead thread must not hang the other
            errors.append(exc)
            ctx.cpu_signal_event.set()

    def _start_threads(self, errors: list):
        ctxs = self.ub.make_ubatch_contexts(
            num_micro_batches=2,
            compute_stream=self.device.compute_stream,
            comm_stream=self.device.comm_stream,
            forward_contexts=[None, None],
            ready_barrier=self.barrier,
        )
        self.device.prepare_contexts(ctxs)
        threads = [threading.Thread(target=self._thread, args=(ctx, u, errors), name=f"ubatch{u}") for u, ctx in enumerate(ctxs)]
        for t in threads:
            t.start()
        self.barrier.wait()
        return ctxs, threads

    @staticmethod
    def _run_threads(ctxs, threads) -> None:
        ctxs[0].cpu_wait_event.set()  # make_ubatch_contexts chains the CPU events: this starts the ping-pong
        for t in threads:
            t.join()

    # -- steps, as UBatchWrapper.__call__ runs them -------------------------------------
    def step(self) -> None:
        tokens = [self.cfg.tokens // 2] * 2
        ins, errors = self.ins, list[BaseException]()
        if self.cfg.mode == "graph" and self.graph is not None:
            ins and ins.safely(ins.step_begin, fmt.PATH_GRAPH_REPLAY, tokens)
            ins and ins.safely(ins.graph_event, fmt.EV_GRAPH_REPLAY, "FULL", sum(tokens))
            self.graph.replay()
        elif self.cfg.mode == "graph":
            ins and ins.safely(ins.step_begin, fmt.PATH_GRAPH_CAPTURE, tokens)
            ins and ins.safely(ins.graph_event, fmt.EV_GRAPH_CAPTURE, "FULL", sum(tokens))
            self.graph = self.torch.cuda.CUDAGraph()  # before the threads start: a failure here must not strand them
            started = self._start_threads(errors)
            with self.torch.cuda.graph(self.graph, stream=self.device.compute_stream):
                self._run_threads(*started)
        else:
            ins and ins.safely(ins.step_begin, fmt.PATH_EAGER, tokens)
            self._run_threads(*self._start_threads(errors))
        ins and ins.safely(ins.step_end)
        self.steps_run += 1
        if errors:
            raise errors[0]
