"""A sweep opens one profiled window per load in one server process: each window must write its own trace.

vLLM 0.33 builds a fresh torch profiler at every start (from _base_profiler_kwargs, where the plugin puts
profile_all_threads); vLLM 0.26 builds one torch.profiler.profile in __init__ and reuses it (vLLM issue
#45987 says a second window wrote nothing). Both paths, with the plugin's hook applied, on the CPU:
vLLM 0.33's real TorchProfilerWrapper, and 0.26's pattern (one profile object, its experimental_config
set after construction as the hook does for 0.26). scripts/vllm26/profiler_reuse_check.py runs vLLM
0.26.0's own wrapper.py the same way (docs/recording.md, "A load sweep", has what it showed).
"""

import gzip
import json
import time
import types
from pathlib import Path

from conftest import require_module

require_module("torch")

import torch  # noqa: E402

from dbo_trace.record.vllm_targets import _add_all_threads  # noqa: E402


def traces(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.pt.trace.json.gz"), key=lambda p: p.stat().st_mtime_ns)


def mm_events(path: Path) -> int:
    with gzip.open(path, "rt") as fh:
        return sum(1 for e in json.load(fh)["traceEvents"] if e.get("name") == "aten::mm")


def two_windows(start, step, stop, folder: Path, steps: int = 6) -> list[tuple[int, int]]:
    """(trace files in the folder, aten::mm events in the newest) after each of two windows."""
    seen = []
    for size in (16, 24):
        start()
        for _ in range(steps):
            torch.ones(size, size) @ torch.ones(size, size)
            step()
        stop()
        time.sleep(0.01)  # the handler names files by the millisecond
        files = traces(folder)
        seen.append((len(files), mm_events(files[-1]) if files else 0))
    return seen


def test_vllm_033s_profiler_writes_a_trace_per_window(tmp_path):
    require_module("vllm")
    from vllm.config.profiler import ProfilerConfig
    from vllm.profiler.wrapper import TorchProfilerWrapper

    for delay, max_iters in ((0, 0), (2, 0), (0, 3)):
        folder = tmp_path / f"d{delay}m{max_iters}"
        config = ProfilerConfig(profiler="torch", torch_profiler_dir=str(folder), delay_iterations=delay, max_iterations=max_iters)
        wrapper = TorchProfilerWrapper(config, worker_name="w", local_rank=0, activities=["CPU"])
        _add_all_threads(wrapper)  # the plugin's __init__ hook
        assert wrapper._base_profiler_kwargs.get("experimental_config") is not None
        seen = two_windows(wrapper.start, wrapper.step, wrapper.stop, folder)
        # Two files, the second as full as the first (its own steps, none of the first window's).
        (files_1, mm_1), (files_2, mm_2) = seen
        assert (files_1, files_2) == (1, 2) and 0 < mm_1 == mm_2 <= 6, (delay, max_iters, seen)
        if delay or max_iters:  # the window was cut to its steps: fewer than the load's
            assert mm_1 < 6, (delay, max_iters, seen)


def test_one_reused_torch_profiler_as_vllm_026_keeps_it_writes_a_trace_per_window(tmp_path):
    from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler

    prof = profile(activities=[ProfilerActivity.CPU], on_trace_ready=tensorboard_trace_handler(str(tmp_path), worker_name="w", use_gzip=True))
    wrapper = types.SimpleNamespace(profiler=prof)  # 0.26's wrapper holds its profiler as .profiler
    _add_all_threads(wrapper)
    assert prof.experimental_config is not None
    assert two_windows(prof.start, lambda: None, prof.stop, tmp_path) == [(1, 6), (2, 6)]
