"""Does vLLM 0.26's torch profiler write a trace for every window of one process? (a sweep opens one per load)

    pip download --no-deps vllm==0.26.0 -d /tmp/v26 && unzip -q /tmp/v26/vllm-0.26.0-*.whl 'vllm/profiler/*' -d /tmp/v26/x
    PYTHON_WITH_TORCH scripts/vllm26/profiler_reuse_check.py /tmp/v26/x/vllm/profiler/wrapper.py

vLLM 0.26's TorchProfilerWrapper builds one torch.profiler.profile in __init__ and calls its start() and
stop() at every /start_profile and /stop_profile (vLLM issue #45987 says a second window wrote nothing;
vLLM 0.33 builds a fresh profiler at each start). This runs that wrapper.py, verbatim, on the CPU with a
stand-in ProfilerConfig and logger (the only vLLM names it imports), with dbo-trace's plugin hook applied
(vllm_targets._add_all_threads: profile_all_threads on the reused profiler), two windows of 12 engine steps
each, with and without delay_iterations and max_iterations (whose auto-stop leaves the wrapper active until
/stop_profile, #51839: the recorder always sends it). It prints, after each window, the trace files in the
folder and the aten::mm events in the newest, and exits 1 where a window wrote no file of its own.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

STUB_CONFIG = '''from dataclasses import dataclass
@dataclass
class ProfilerConfig:  # the fields vLLM 0.26's wrapper.py reads, vLLM 0.26's defaults
    torch_profiler_dir: str = ""
    delay_iterations: int = 0
    max_iterations: int = 0
    warmup_iterations: int = 0
    wait_iterations: int = 0
    active_iterations: int = 5
    torch_profiler_record_shapes: bool = False
    torch_profiler_with_memory: bool = False
    torch_profiler_with_stack: bool = False
    torch_profiler_with_flops: bool = False
    torch_profiler_use_gzip: bool = True
    torch_profiler_dump_cuda_time_total: bool = False
'''
STUB_LOGGER = '''import logging
class _Logger(logging.Logger):
    def info_once(self, *a, **k): self.info(*a, **k)
    def warning_once(self, *a, **k): self.warning(*a, **k)
def init_logger(name):
    logging.setLoggerClass(_Logger)
    try:
        return logging.getLogger(name)
    finally:
        logging.setLoggerClass(logging.Logger)
'''


def stub_vllm(wrapper_py: Path) -> Path:
    root = Path(tempfile.mkdtemp(prefix="vllm26-stub-"))
    (root / "vllm" / "config").mkdir(parents=True)
    (root / "vllm" / "profiler").mkdir()
    (root / "vllm" / "__init__.py").write_text("")
    (root / "vllm" / "config" / "__init__.py").write_text(STUB_CONFIG)
    (root / "vllm" / "config" / "profiler.py").write_text("def _is_uri_path(p): return '://' in str(p)\n")
    (root / "vllm" / "logger.py").write_text(STUB_LOGGER)
    (root / "vllm" / "profiler" / "__init__.py").write_text("")
    shutil.copy(wrapper_py, root / "vllm" / "profiler" / "wrapper.py")
    return root


def windows(delay: int, max_iters: int, steps: int = 12) -> list[tuple[int, int]]:
    import torch
    from vllm.config import ProfilerConfig
    from vllm.profiler.wrapper import TorchProfilerWrapper

    from dbo_trace.record.vllm_targets import _add_all_threads

    folder = tempfile.mkdtemp()
    config = ProfilerConfig(torch_profiler_dir=folder, delay_iterations=delay, max_iterations=max_iters)
    wrapper = TorchProfilerWrapper(config, "w", 0, ["CPU"])
    _add_all_threads(wrapper)  # as the plugin's TorchProfilerWrapper.__init__ hook does
    seen = []
    for _ in range(2):
        wrapper.start()  # /start_profile
        for _ in range(steps):  # engine steps
            torch.ones(32, 32) @ torch.ones(32, 32)
            wrapper.step()
        wrapper.stop()  # /stop_profile
        time.sleep(0.01)
        files = sorted(glob.glob(os.path.join(folder, "*.pt.trace.json.gz")), key=os.path.getmtime)
        newest = json.load(gzip.open(files[-1])) if files else {"traceEvents": []}
        seen.append((len(files), sum(1 for e in newest["traceEvents"] if e.get("name") == "aten::mm")))
    return seen


def main() -> int:
    sys.path.insert(0, str(stub_vllm(Path(sys.argv[1]))))
    sys.path.insert(1, str(Path(__file__).resolve().parents[2]))
    import torch

    print("torch", torch.__version__)
    ok = True
    for delay, max_iters in ((0, 0), (3, 0), (0, 4), (3, 4)):
        seen = windows(delay, max_iters)
        print(f"delay {delay} max {max_iters}: (trace files, aten::mm in the newest) after windows 1 and 2: {seen}")
        ok &= [n for n, _ in seen] == [1, 2] and all(mm > 0 for _, mm in seen)
    print("every window wrote its own trace" if ok else "a window wrote no trace of its own")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
