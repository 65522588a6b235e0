"""Run in a fresh process by tests/system/test_plugin_vllm.py: vLLM's own plugin loader, then vLLM's own
UBatchContext ping-pong on the CPU (stand-in streams and events), then UBatchWrapper.__call__.

Prints one JSON object: what was patched, and the ground truth the threads
themselves observed (which thread ran each operation, in order).
"""

from __future__ import annotations

import json
import sys
import threading
import time
import types

import torch
import vllm.forward_context as fc
import vllm.v1.worker.ubatching as ub
from vllm.plugins import load_general_plugins

from dbo_trace.demo.devices import CpuDevice

LAYERS = int(sys.argv[1]) if len(sys.argv) > 1 else 3


load_general_plugins()
from dbo_trace.record import plugin  # noqa: E402  (after vLLM loaded it, as in a server)

installed = plugin.installed()
patched = [] if installed is None else list(installed.patched)
enter_is_wrapped = hasattr(ub.UBatchContext.__enter__, "__wrapped__")

# The demo's CPU device: stand-in streams and events behind vLLM's current_stream and torch.cuda.set_stream.
device = CpuDevice(torch)
device.bind(ub)
current_stream = device.current_stream
barrier = threading.Barrier(3)
ctxs = ub.make_ubatch_contexts(2, device.compute_stream, device.comm_stream, [None, None], barrier)
device.prepare_contexts(ctxs)

truth: list[dict] = []  # appended by whichever thread runs: the order things really happened


def op(u: int, what: str) -> None:
    truth.append(
        {
            "t_ns": time.time_ns(),
            "ubatch": u,
            "what": what,
            "stream": current_stream().name,
            "ident": threading.get_ident(),
            "native": threading.get_native_id(),
        }
    )


def forward(ctx, u: int) -> None:
    with ctx:
        for layer in range(LAYERS):
            op(u, f"attn{layer}")
            ub.dbo_yield_and_switch_from_compute_to_comm()
            op(u, f"dispatch{layer}")
            ub.dbo_yield_and_switch_from_comm_to_compute()
            op(u, f"experts{layer}")
            ub.dbo_yield_and_switch_from_compute_to_comm()
            op(u, f"combine{layer}")
            ub.dbo_yield_and_switch_from_comm_to_compute()


threads = [threading.Thread(target=forward, args=(ctx, u)) for u, ctx in enumerate(ctxs)]
for t in threads:
    t.start()
barrier.wait()
ctxs[0].cpu_wait_event.set()
for t in threads:
    t.join()

# UBatchWrapper.__call__, not microbatched: vLLM's own branch runs the runnable.
from vllm.config import CUDAGraphMode  # noqa: E402
from vllm.v1.worker.gpu_ubatch_wrapper import UBatchWrapper  # noqa: E402

wrapper = object.__new__(UBatchWrapper)
wrapper.cudagraphs = {}
wrapper.runnable = lambda *a, **k: "ran"
fc._forward_context = types.SimpleNamespace(batch_descriptor=None, ubatch_slices=None, cudagraph_runtime_mode=CUDAGraphMode.NONE)
result = wrapper()
fc._forward_context = None

# vLLM's torch profiler wrapper: the plugin adds profile_all_threads; stopping it writes the counters.
import shutil  # noqa: E402
import tempfile  # noqa: E402

from vllm.config.profiler import ProfilerConfig  # noqa: E402
from vllm.profiler.wrapper import TorchProfilerWrapper  # noqa: E402

profiler_dir = tempfile.mkdtemp()  # only the counters the stop writes are read: removed below
profiler = TorchProfilerWrapper(
    ProfilerConfig(profiler="torch", torch_profiler_dir=profiler_dir), worker_name="w", local_rank=0, activities=["CPU"]
)
experimental = profiler._profiler_kwargs.get("experimental_config")
profiler.start()
profiler.stop()
shutil.rmtree(profiler_dir, ignore_errors=True)
counters_at_stop = None
if installed is not None:
    counters_at_stop = json.loads(installed.log.path.with_suffix(".counters.json").read_text())["reason"]

if installed is not None:
    installed.log.flush()
print(
    json.dumps(
        {
            "patched": patched,
            "enter_is_wrapped": enter_is_wrapped,
            "truth": truth,
            "wrapper_result": result,
            "log": str(installed.log.path) if installed else None,
            "profiler_experimental_config": type(experimental).__name__ if experimental is not None else None,
            "counters_at_profiler_stop": counters_at_stop,
        }
    )
)
