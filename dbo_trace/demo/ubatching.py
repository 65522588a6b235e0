"""A faithful built-in equivalent of vLLM 0.33's DBO microbatch machinery (vllm/v1/worker/ubatching.py),
for `dbo-trace demo` where vLLM is not importable.

Same protocol, same method names (so the same hooks instrument it): two
threads, a ready barrier, a chain of CPU events so exactly one thread runs
at a time, and per-microbatch GPU events that order the compute and comm
streams at each switch. `current_stream` and `set_stream` are module
attributes so a CPU test can give stand-in streams.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

current_stream: Callable[[], Any] = None  # type: ignore[assignment]  # set by the device (torch.cuda.current_stream)
set_stream: Callable[[Any], None] = None  # type: ignore[assignment]  # set by the device (torch.cuda.set_stream)

_THREAD_ID_TO_CONTEXT: dict[int, int] = {}
_CURRENT_CONTEXTS: list["UBatchContext | None"] = []


class UBatchContext:
    def __init__(
        self,
        id: int,
        comm_stream,
        compute_stream,
        ready_barrier: threading.Barrier,
        cpu_wait_event: threading.Event,
        cpu_signal_event: threading.Event,
        gpu_comm_done_event,
        gpu_compute_done_event,
    ):
        self.id = id
        self.comm_stream = comm_stream
        self.compute_stream = compute_stream
        self.ready_barrier = ready_barrier
        self.cpu_wait_event = cpu_wait_event
        self.cpu_signal_event = cpu_signal_event
        self.current_stream = compute_stream
        self.gpu_comm_done_event = gpu_comm_done_event
        self.gpu_compute_done_event = gpu_compute_done_event

    def __enter__(self):
        _THREAD_ID_TO_CONTEXT[threading.get_ident()] = self.id
        _CURRENT_CONTEXTS[self.id] = self
        self.ready_barrier.wait()
        self.cpu_wait_event.wait()
        self.cpu_wait_event.clear()
        self.update_stream(self.compute_stream)  # every microbatch starts on the compute stream
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        _CURRENT_CONTEXTS[self.id] = None
        del _THREAD_ID_TO_CONTEXT[threading.get_ident()]
        self.cpu_signal_event.set()  # hand the CPU to the other microbatch
        self.cpu_wait_event.clear()
        return False

    def update_stream(self, stream) -> None:
        self.current_stream = stream
        if current_stream() != stream:
            set_stream(stream)

    def _cpu_yield(self) -> None:
        assert not self.cpu_wait_event.is_set()
        self.cpu_signal_event.set()
        self.cpu_wait_event.wait()
        self.cpu_wait_event.clear()

    def switch_to_comm_sync(self) -> None:
        self.gpu_compute_done_event.record(self.compute_stream)
        self.update_stream(self.comm_stream)
        self.comm_stream.wait_event(self.gpu_compute_done_event)

    def switch_to_compute_sync(self) -> None:
        self.gpu_comm_done_event.record(self.comm_stream)
        self.update_stream(self.compute_stream)
        self.compute_stream.wait_event(self.gpu_comm_done_event)

    def yield_and_switch_from_compute_to_comm(self) -> None:
        self.gpu_compute_done_event.record(self.compute_stream)
        self._cpu_yield()
        self.update_stream(self.comm_stream)
        self.comm_stream.wait_event(self.gpu_compute_done_event)

    def yield_and_switch_from_comm_to_compute(self) -> None:
        self.gpu_comm_done_event.record(self.comm_stream)
        self._cpu_yield()
        self.update_stream(self.compute_stream)
        self.compute_stream.wait_event(self.gpu_comm_done_event)


def _current() -> UBatchContext | None:
    if not _THREAD_ID_TO_CONTEXT:
        return None
    return _CURRENT_CONTEXTS[_THREAD_ID_TO_CONTEXT[threading.get_ident()]]


def _on_current(method: Callable[[UBatchContext], None]) -> Callable[[], None]:
    def call() -> None:
        ctx = _current()
        if ctx is not None:
            method(ctx)

    return call


dbo_switch_to_comm_sync = _on_current(UBatchContext.switch_to_comm_sync)
dbo_switch_to_compute_sync = _on_current(UBatchContext.switch_to_compute_sync)
dbo_yield_and_switch_from_compute_to_comm = _on_current(UBatchContext.yield_and_switch_from_compute_to_comm)
dbo_yield_and_switch_from_comm_to_compute = _on_current(UBatchContext.yield_and_switch_from_comm_to_compute)


def make_ubatch_contexts(
    num_micro_batches: int, compute_stream, comm_stream, forward_contexts, ready_barrier: threading.Barrier
) -> list[UBatchContext]:
    """As vLLM's: microbatch i waits on event i and signals event i+1, so they run in turn."""
    import torch

    assert num_micro_batches > 1
    while len(_CURRENT_CONTEXTS) < num_micro_batches:
        _CURRENT_CONTEXTS.append(None)
    make_event = torch.Event  # as vLLM: device-agnostic events
    cpu_events = [threading.Event() for _ in range(num_micro_batches)]
    return [
        UBatchContext(
            i,
            comm_stream,
            compute_stream,
            ready_barrier,
            cpu_events[i],
            cpu_events[(i + 1) % num_micro_batches],
            make_event(),
            make_event(),
        )
        for i in range(num_micro_batches)
    ]
