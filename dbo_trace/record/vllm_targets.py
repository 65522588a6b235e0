"""What to patch in vLLM, per version. A new vLLM version is a new entry in TARGETS_BY_VERSION."""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable

from dbo_trace import bundle as fmt
from dbo_trace.record.hooks import Instrumentation, Target


# -- UBatchContext (vllm/v1/worker/ubatching.py) -------------------------------
def _with_id(record: Callable[[int], None], ctx: Any) -> None:
    """Read the context's id inside the guard: a context whose .id is missing or raises must turn
    the hooks off, not raise into vLLM."""
    record(ctx.id)


def _ctx_enter(ins: Instrumentation, original: Callable) -> Callable:
    @functools.wraps(original)
    def __enter__(self):
        ins.safely(_with_id, ins.ub_wait, self)
        result = original(self)
        ins.safely(_with_id, ins.ub_run, self)
        return result

    return __enter__


def _ctx_exit(ins: Instrumentation, original: Callable) -> Callable:
    @functools.wraps(original)
    def __exit__(self, *exc):
        ins.safely(_with_id, ins.ub_exit, self)
        return original(self, *exc)

    return __exit__


def _ctx_cpu_yield(ins: Instrumentation, original: Callable) -> Callable:
    @functools.wraps(original)
    def _cpu_yield(self):
        ins.safely(_with_id, ins.cpu_yield, self)
        result = original(self)
        ins.safely(_with_id, ins.cpu_resume, self)
        return result

    return _cpu_yield


def _ctx_update_stream(ins: Instrumentation, original: Callable) -> Callable:
    def phase_of(ctx, stream) -> str:
        return "comm" if stream is ctx.comm_stream or stream == ctx.comm_stream else "compute"

    @functools.wraps(original)
    def update_stream(self, stream):
        result = original(self, stream)
        ins.safely(lambda: ins.stream(self.id, phase_of(self, stream)))
        return result

    return update_stream


# -- UBatchWrapper.__call__ (vllm/v1/worker/gpu_ubatch_wrapper.py) -------------
def _ubatch_step_path(wrapper: Any) -> tuple[str, list[int] | None]:
    """Which of UBatchWrapper.__call__'s paths this call will take (mirrors its branches)."""
    from vllm.forward_context import get_forward_context

    ctx = get_forward_context()
    slices = ctx.ubatch_slices
    if slices is None:
        return fmt.PATH_NOT_MICROBATCHED, None
    tokens = [int(s.num_tokens) for s in slices]
    full = getattr(ctx.cudagraph_runtime_mode, "name", "") == "FULL"
    if full:
        captured = sum(tokens) in wrapper.cudagraphs
        return (fmt.PATH_GRAPH_REPLAY if captured else fmt.PATH_GRAPH_CAPTURE), tokens
    return fmt.PATH_EAGER, tokens


_in_step = threading.local()


def _wrapper_call(ins: Instrumentation, original: Callable) -> Callable:
    @functools.wraps(original)
    def __call__(self, *args, **kwargs):
        # AFDUBatchWrapper.__call__ calls UBatchWrapper.__call__ for unsplit steps: one step, not two.
        if getattr(_in_step, "active", False):
            return original(self, *args, **kwargs)
        described = ins.safely(_ubatch_step_path, self)
        path, tokens = described if described else ("unknown", None)
        ins.safely(ins.step_begin, path, tokens)
        _in_step.active = True
        try:
            return original(self, *args, **kwargs)
        finally:
            _in_step.active = False
            ins.safely(ins.step_end)

    return __call__


# -- CUDAGraphWrapper.__call__ (vllm/compilation/cuda_graph.py) ----------------
def _graph_call_kind(wrapper: Any) -> tuple[str, str, int | None] | None:
    from vllm.forward_context import get_forward_context, is_forward_context_available

    if not is_forward_context_available():
        return None
    ctx = get_forward_context()
    mode = ctx.cudagraph_runtime_mode
    if getattr(mode, "name", "NONE") == "NONE" or mode != wrapper.runtime_mode:
        return None
    desc = ctx.batch_descriptor
    entry = wrapper.concrete_cudagraph_entries.get(desc)
    kind = fmt.EV_GRAPH_REPLAY if entry is not None and entry.cudagraph is not None else fmt.EV_GRAPH_CAPTURE
    return kind, mode.name, getattr(desc, "num_tokens", None)


def _graph_call(ins: Instrumentation, original: Callable) -> Callable:
    @functools.wraps(original)
    def __call__(self, *args, **kwargs):
        kind = ins.safely(_graph_call_kind, self)
        if kind:
            ins.safely(ins.graph_event, *kind)
        return original(self, *args, **kwargs)

    return __call__


# -- CudaGraphManager.run_fullgraph (vllm/v1/worker/gpu/cudagraph_utils.py) -----------
# The V2 model runner (DeepSeek-V2 on vLLM 0.26, seen on the H200) replays FULL graphs here, not
# through CUDAGraphWrapper.__call__, which sees only its piecewise graphs.
def _graph_tokens(desc: Any) -> int | None:
    tokens = getattr(desc, "num_tokens", None)
    return tokens if isinstance(tokens, int) else None


def _fullgraph_replay(ins: Instrumentation, original: Callable) -> Callable:
    @functools.wraps(original)
    def run_fullgraph(self, desc, *args, **kwargs):
        ins.safely(ins.graph_event, fmt.EV_GRAPH_REPLAY, "FULL", ins.safely(_graph_tokens, desc))
        return original(self, desc, *args, **kwargs)

    return run_fullgraph


def graph_manager_targets(module: str) -> list[Target]:
    """The V2 model runner's graph manager in `module` (a stand-in's in the tests)."""
    return [Target(module, "CudaGraphManager", "run_fullgraph", _fullgraph_replay)]


# -- vLLM's torch profiler (vllm/profiler/wrapper.py) ------------------------------
def all_threads_config(torch: Any) -> Any:
    """The profiler's experimental config for a recording, or None where this torch lacks
    profile_all_threads. It also asks for CUDA sync events where torch has them: each stream wait
    then names the cudaEventRecord it waits on, which tells a late event record from an SM-hungry
    kernel (docs/analysis.md, "Held-back communication")."""
    make = torch._C._profiler._ExperimentalConfig
    for flags in ({"profile_all_threads": True, "enable_cuda_sync_events": True}, {"profile_all_threads": True}):
        try:
            return make(**flags)
        except Exception:
            continue
    return None


def _profiler_init(ins: Instrumentation, original: Callable) -> Callable:
    """Turn on profile_all_threads so the microbatch threads' CPU ops land in vLLM's traces (docs/recording.md)."""

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        ins.safely(_add_all_threads, self)

    return __init__


def _add_all_threads(wrapper: Any) -> None:
    import torch

    config = all_threads_config(torch)
    if config is None:
        return  # an older torch: the event log attributes microbatch threads alone
    base = getattr(wrapper, "_base_profiler_kwargs", None)
    if isinstance(base, dict):  # vLLM 0.33 builds its profiler at start from these kwargs
        if base.get("experimental_config") is None:
            base["experimental_config"] = config
            wrapper._profiler_kwargs.setdefault("experimental_config", config)
        return
    # vLLM 0.26 builds torch.profiler.profile in __init__; Kineto reads experimental_config at start.
    profiler = getattr(wrapper, "profiler", None)
    if profiler is not None and getattr(profiler, "experimental_config", "absent") is None:
        profiler.experimental_config = config


def _profiler_stop(ins: Instrumentation, original: Callable) -> Callable:
    @functools.wraps(original)
    def stop(self, *args, **kwargs):
        try:
            return original(self, *args, **kwargs)
        finally:
            ins.quietly(ins.log.flush)
            ins.quietly(ins.write_counters, "profiler_stop")

    return stop


UBATCHING = "vllm.v1.worker.ubatching"
UBATCH_WRAPPER = "vllm.v1.worker.gpu_ubatch_wrapper"
CUDA_GRAPH = "vllm.compilation.cuda_graph"
PROFILER = "vllm.profiler.wrapper"
AFD_UBATCH_WRAPPER = "afd_plugin.v1.worker.ubatch_wrapper"
V2_CUDAGRAPH = "vllm.v1.worker.gpu.cudagraph_utils"


def context_targets(module: str) -> list[Target]:
    """UBatchContext's hooks, for vLLM's module or a class of the same protocol elsewhere (the demo's)."""
    return [
        Target(module, "UBatchContext", "__enter__", _ctx_enter),
        Target(module, "UBatchContext", "__exit__", _ctx_exit),
        Target(module, "UBatchContext", "_cpu_yield", _ctx_cpu_yield),
        Target(module, "UBatchContext", "update_stream", _ctx_update_stream),
    ]


CONTEXT_TARGETS = context_targets(UBATCHING)
STEP_TARGETS = [
    Target(UBATCH_WRAPPER, "UBatchWrapper", "__call__", _wrapper_call),
    Target(CUDA_GRAPH, "CUDAGraphWrapper", "__call__", _graph_call),
    # The AFD plugin overrides __call__; its steps are instrumented the same way.
    Target(AFD_UBATCH_WRAPPER, "AFDUBatchWrapper", "__call__", _wrapper_call),
    *graph_manager_targets(V2_CUDAGRAPH),
]
PROFILER_TARGETS = [
    Target(PROFILER, "TorchProfilerWrapper", "__init__", _profiler_init),
    Target(PROFILER, "WorkerProfiler", "stop", _profiler_stop),
]

# vLLM version prefix -> targets. Checked in order; the first prefix that matches wins.
# docs/recording.md has the same table for people; keep the two in step.
TARGETS_BY_VERSION: list[tuple[str, list[Target]]] = [
    ("0.33", CONTEXT_TARGETS + STEP_TARGETS + PROFILER_TARGETS),  # verified on the CPU (tests/system/test_plugin_vllm.py)
    ("0.26", CONTEXT_TARGETS + STEP_TARGETS + PROFILER_TARGETS),  # verified on the H200 with vllm serve (samples/vllm-*)
]
# Absent unless the AFD plugin is installed: not worth a warning. The V2 model runner's module imports
# only with vLLM's full dependencies (pybase64, ...), which a CPU-only test install leaves out.
OPTIONAL_TARGETS = {f"{AFD_UBATCH_WRAPPER}.AFDUBatchWrapper.__call__", f"{V2_CUDAGRAPH}.CudaGraphManager.run_fullgraph"}


def vllm_version() -> str | None:
    """The installed vLLM's version, or None where vLLM does not import."""
    try:
        from vllm import __version__

        return str(__version__)
    except Exception:
        return None


def targets_for(vllm_version: str) -> tuple[list[Target], bool]:
    """The targets for a vLLM version, and whether that version is a known one."""
    for prefix, targets in TARGETS_BY_VERSION:
        if vllm_version.startswith(prefix):
            return targets, True
    return TARGETS_BY_VERSION[-1][1], False
