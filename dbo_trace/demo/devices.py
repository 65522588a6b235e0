"""Where the demo's kernels run: a CUDA GPU, or the CPU with stand-in streams (for CI's orchestration tests).

A device owns the two streams, binds a ubatching module (vLLM's or the
built-in) to its notion of "current stream", and supplies the three kinds
of work a layer does: compute, tiny host-bound kernels, and communication
(an emulated spin on one GPU, a real all_to_all across processes).
"""

from __future__ import annotations

import threading
from typing import Any

SPIN_KERNEL = "spin_kernel"  # how torch.cuda._sleep appears in traces: the one-GPU emulated communication


class CudaDevice:
    kind = "cuda"

    def __init__(self, torch, index: int):
        self.torch = torch
        torch.cuda.set_device(index)
        self.device = torch.device("cuda", index)
        self.compute_stream = torch.cuda.Stream(self.device)
        self.comm_stream = torch.cuda.Stream(self.device)
        torch.cuda.set_stream(self.compute_stream)

    def bind(self, ub) -> None:
        # vLLM's current_stream() helper does not track streams off a vLLM platform (seen on the H200
        # without vLLM's compiled ops); ours needs both.
        ub.current_stream = self.torch.cuda.current_stream
        if hasattr(ub, "set_stream"):
            ub.set_stream = self.torch.cuda.set_stream

    def prepare_contexts(self, ctxs) -> None:
        pass

    def thread_setup(self) -> None:
        torch = self.torch
        torch.cuda.set_device(self.device)
        for stream in (self.compute_stream, self.comm_stream):  # cuBLAS handles before the ping-pong starts
            with torch.cuda.stream(stream):
                torch.cuda.current_blas_handle()

    def synchronize(self) -> None:
        self.torch.cuda.synchronize()

    def wait_on_compute_stream_now(self) -> None:
        """The late-record bug: the current (comm) stream waits on an event recorded now on the compute
        stream, behind whatever is queued there, the other microbatch's compute included."""
        event = self.torch.cuda.Event()
        event.record(self.compute_stream)
        self.torch.cuda.current_stream().wait_event(event)

    def spin(self, cycles: int) -> None:
        self.torch.cuda._sleep(cycles)

    def cycles_per_us(self) -> float:
        """Calibrate torch.cuda._sleep: spin cycles per microsecond on this GPU, now."""
        torch = self.torch
        torch.cuda._sleep(2_000_000)  # bring clocks up
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 10_000_000
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        return cycles / (start.elapsed_time(end) * 1000.0)

    def time_us(self, fn, repeats: int = 5) -> float:
        torch = self.torch
        fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1000.0 / repeats

    def name(self) -> str:
        return self.torch.cuda.get_device_name(self.device)

    def profiler_activities(self):
        from torch.profiler import ProfilerActivity

        return [ProfilerActivity.CPU, ProfilerActivity.CUDA]


class StandInStream:
    """What UBatchContext needs of a stream, on the CPU."""

    def __init__(self, name: str):
        self.name = name

    def wait_event(self, event) -> None:
        pass

    def __repr__(self) -> str:
        return f"<stand-in {self.name} stream>"


class StandInEvent:
    def record(self, stream=None) -> None:
        pass


class CpuDevice:
    """Stand-in streams and events: the threads, the ping-pong and the collectives run for real; no GPU."""

    kind = "cpu"

    def __init__(self, torch, index: int = 0):
        self.torch = torch
        self.device = torch.device("cpu")
        self.compute_stream = StandInStream("compute")
        self.comm_stream = StandInStream("comm")
        self._current = threading.local()

    def current_stream(self) -> Any:
        return getattr(self._current, "stream", self.compute_stream)

    def set_stream(self, stream) -> None:
        self._current.stream = stream

    def bind(self, ub) -> None:
        ub.current_stream = self.current_stream
        if hasattr(ub, "set_stream"):
            ub.set_stream = self.set_stream
        else:  # vLLM's UBatchContext calls torch.cuda.set_stream itself; this process has no CUDA to break
            self.torch.cuda.set_stream = self.set_stream

    def prepare_contexts(self, ctxs) -> None:
        for ctx in ctxs:
            ctx.gpu_comm_done_event = StandInEvent()
            ctx.gpu_compute_done_event = StandInEvent()

    def thread_setup(self) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def wait_on_compute_stream_now(self) -> None:
        pass

    def spin(self, cycles: int) -> None:
        pass  # the CPU orchestration tests need the order of operations, not their length

    def cycles_per_us(self) -> float:
        return 1.0

    def time_us(self, fn, repeats: int = 5) -> float:
        import time

        t0 = time.perf_counter()
        for _ in range(repeats):
            fn()
        return (time.perf_counter() - t0) * 1e6 / repeats

    def name(self) -> str:
        return "cpu (stand-in streams)"

    def profiler_activities(self):
        from torch.profiler import ProfilerActivity

        return [ProfilerActivity.CPU]
