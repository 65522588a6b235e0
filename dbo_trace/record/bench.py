"""Timed repeats of the load with the profiler off: the figures users quote, beside the profiled window.

The torch profiler changes what it measures (profiling every thread's CPU ops took one run from 86%
to 48% GPU busy) and vLLM writes its trace inside the engine loop, stopping generation for seconds
(docs/recording.md). So `record` first times the same load `--repeats` times with the profiler
off, with vLLM's own benchmark where it is installed:

    vllm bench serve --backend openai --base-url URL --endpoint /v1/completions --model MODEL
        --tokenizer TOKENIZER --dataset-name random --random-input-len L --random-output-len O
        --num-prompts N --max-concurrency C --ignore-eos --seed S --percentile-metrics ttft,tpot,itl,e2el
        --metric-percentiles 50,90,99 --save-result --result-dir DIR --result-filename repeat-I.json

and reads its saved result. Where vLLM's benchmark is absent or fails, the built-in load
(loadgen.run_streaming_load) measures the same figures the same way (vLLM 0.26's
benchmarks/serve.py and lib/endpoint_request_func.py): duration from the first request sent to the
last answer, output tokens/s over that duration (output tokens: the stream's usage.completion_tokens,
else its chunks), TTFT per request (send to the first chunk that carries choices), latency per request
(send to its last such chunk), TPOT per request as (latency - TTFT) / (output tokens - 1) where it
has more than one token, ITL as the gaps between consecutive chunks; mean, median and p99 (numpy's
linear percentile) over the requests (ITL: over all gaps of all requests), in ms. Where a list is
empty the built-in says null (vLLM says 0).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from dbo_trace import serve_args
from dbo_trace.record.loadgen import LoadSpec, run_streaming_load

BENCH_DIR = "bench"
TOOL_VLLM, TOOL_BUILTIN = "vllm bench serve", "builtin"
# Fields of vLLM's saved result kept in the manifest (the rest stays in bench/repeat-I.json).
KEPT = (
    "duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
    "output_throughput", "total_token_throughput",
    "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
    "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms",
)  # fmt: skip


@dataclass(frozen=True)
class RepeatPlan:
    repeats: int
    base_url: str
    model: str  # as /v1/models names it
    tokenizer: str | None  # the serve command's --tokenizer, else its model argument
    vllm: str | None  # the `vllm` executable where the recorded command is `vllm serve`
    load: LoadSpec
    timeout_s: float = 1800.0


def bench_command(plan: RepeatPlan, index: int, result_dir: Path) -> list[str]:
    assert plan.vllm is not None
    spec = plan.load
    argv = [
        plan.vllm, "bench", "serve", "--backend", "openai", "--base-url", plan.base_url, "--endpoint", "/v1/completions",
        "--model", plan.model, "--dataset-name", "random", "--random-input-len", str(spec.input_len),
        "--random-output-len", str(spec.output_len), "--num-prompts", str(spec.num_prompts),
        "--max-concurrency", str(spec.concurrency), "--ignore-eos", "--seed", str(spec.seed + index),
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
        "--save-result", "--result-dir", str(result_dir), "--result-filename", f"repeat-{index}.json",
    ]  # fmt: skip
    if plan.tokenizer:
        argv[argv.index("--dataset-name"):argv.index("--dataset-name")] = ["--tokenizer", plan.tokenizer]
    return argv


def tokenizer_of(argv: list[str]) -> str | None:
    flags = serve_args.parse_flags(argv)
    if isinstance(flags.get("tokenizer"), str):
        return str(flags["tokenizer"])
    if isinstance(flags.get("model"), str):
        return str(flags["model"])
    # `vllm serve MODEL ...`: the first positional after `serve`
    if "serve" in argv:
        rest = argv[argv.index("serve") + 1 :]
        if rest and not rest[0].startswith("-"):
            return rest[0]
    return None


def vllm_executable(argv: list[str]) -> str | None:
    """The `vllm` of a `vllm serve` command (after any `env NAME=VALUE`: the benchmark needs none of them)."""
    argv = serve_args.without_env(argv)
    if len(argv) >= 2 and os.path.basename(argv[0]) == "vllm" and argv[1] == "serve":
        return argv[0]
    return None


def _run(argv: list[str], log, timeout_s: float, abort: Callable[[], bool]) -> int | None:
    """The benchmark's exit status; None where it could not start, ran past timeout_s or was aborted
    (then it is killed). Whatever escapes (Ctrl-C, SIGTERM) kills it too."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    except OSError:
        return None
    deadline = time.monotonic() + timeout_s
    try:
        while (code := proc.poll()) is None:
            if abort() or time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                return None
            time.sleep(0.2)
        return code
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _vllm_repeat(plan: RepeatPlan, index: int, folder: Path, log, abort: Callable[[], bool] = lambda: False) -> dict | None:
    result = folder / f"repeat-{index}.json"
    argv = bench_command(plan, index, folder)
    if _run(argv, log, plan.timeout_s, abort) != 0 or not result.is_file():
        return None
    try:
        body = json.loads(result.read_bytes()[: 64 << 20])
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(body, dict):
        return None
    kept = {k: body.get(k) for k in KEPT if isinstance(body.get(k), (int, float))}
    kept["duration_s"] = kept.pop("duration", None)
    return {"tool": TOOL_VLLM, "command": argv, "result": f"{BENCH_DIR}/{result.name}", **kept}


def timed_repeats(
    plan: RepeatPlan, bundle: Path, on_repeat=None, abort: Callable[[], bool] = lambda: False
) -> tuple[list[dict], str | None]:
    """Each repeat's figures, and a note where vLLM's benchmark could not be used. abort() true (the
    server died) ends the repeats at once, with those done."""
    folder = bundle / BENCH_DIR
    folder.mkdir(exist_ok=True)
    repeats: list[dict] = []
    note = None
    use_vllm = plan.vllm is not None
    with open(folder / "bench.log", "ab") as log:
        for index in range(plan.repeats):
            entry = _vllm_repeat(plan, index, folder, log, abort) if use_vllm else None
            if abort():
                break
            if entry is None:
                if use_vllm:
                    note = f"`vllm bench serve` failed (see {BENCH_DIR}/bench.log); the built-in load timed the repeats"
                    use_vllm = False
                spec = LoadSpec(**{**plan.load.__dict__, "seed": plan.load.seed + index})
                entry = {"tool": TOOL_BUILTIN, **run_streaming_load(plan.base_url, plan.model, spec, abort)}
            entry["index"] = index
            repeats.append(entry)
            if on_repeat:
                on_repeat(entry)
    return repeats, note
