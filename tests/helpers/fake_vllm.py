"""A stand-in for the `vllm` executable, for the record tests of `vllm bench serve`.

    fake_vllm.py serve MODEL ...        -> tests/helpers/fake_server.py serve MODEL ... (exec)
    fake_vllm.py bench serve ARGS...    -> sends --num-prompts requests to --base-url, then saves a
                                           result as vLLM 0.26's `vllm bench serve --save-result` does

The saved result has the keys and layout of vLLM 0.26's vllm/benchmarks/serve.py (result_json: the
run's settings, then benchmark()'s result without the per-request lists, which only
--save-detailed keeps; per metric mean_/median_/std_ and p<P>_ for --metric-percentiles), one JSON
object written to --result-dir/--result-filename. Its figures are made up from --seed S so a test
can tell the repeats apart: duration 10 + S, mean TTFT 100 + S ms, median TPOT 20 + S ms, ...

$FAKE_VLLM_LOG gets each bench command line (a JSON list per line). $FAKE_VLLM_BENCH=fail exits 1
before sending anything; =nofile exits 0 without saving a result.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent

if sys.argv[1:2] == ["serve"]:
    os.execv(sys.executable, [sys.executable, str(HERE / "fake_server.py"), *sys.argv[1:]])

assert sys.argv[1:3] == ["bench", "serve"], sys.argv
if os.environ.get("FAKE_VLLM_LOG"):
    with open(os.environ["FAKE_VLLM_LOG"], "a") as fh:
        fh.write(json.dumps(sys.argv[1:]) + "\n")
p = argparse.ArgumentParser()
for flag in ("--backend", "--base-url", "--endpoint", "--model", "--tokenizer", "--dataset-name", "--random-input-len",
             "--random-output-len", "--num-prompts", "--max-concurrency", "--seed", "--percentile-metrics",
             "--metric-percentiles", "--result-dir", "--result-filename"):  # fmt: skip
    p.add_argument(flag)
p.add_argument("--ignore-eos", action="store_true")
p.add_argument("--save-result", action="store_true")
args = p.parse_args(sys.argv[3:])
if os.environ.get("FAKE_VLLM_BENCH") == "fail":
    print("ERROR: fake vllm bench serve failed (tokenizer not found)", flush=True)
    sys.exit(1)

n, in_len, out_len, seed = int(args.num_prompts), int(args.random_input_len), int(args.random_output_len), int(args.seed)
for i in range(n):
    body = json.dumps({"model": args.model, "prompt": [1000 + i] * in_len, "max_tokens": out_len, "ignore_eos": True}).encode()
    req = urllib.request.Request(args.base_url + args.endpoint, body, {"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=60).read()
if os.environ.get("FAKE_VLLM_BENCH") == "nofile":
    sys.exit(0)

duration = 10.0 + seed
result = {
    "date": "20261201-220000", "endpoint_type": args.backend, "backend": args.backend, "label": None,
    "model_id": args.model, "tokenizer_id": args.tokenizer, "num_prompts": n, "request_rate": "inf",
    "burstiness": 1.0, "max_concurrency": int(args.max_concurrency),
    "duration": duration, "completed": n, "failed": 0, "total_input_tokens": n * in_len,
    "total_output_tokens": n * out_len, "request_throughput": n / duration, "request_goodput": None,
    "output_throughput": n * out_len / duration, "total_token_throughput": n * (in_len + out_len) / duration,
    "max_output_tokens_per_s": 99.0, "max_concurrent_requests": 2, "rtfx": 0.0,
}  # fmt: skip
base = {"ttft": 100.0, "tpot": 20.0, "itl": 19.0, "e2el": 400.0}
for metric in args.percentile_metrics.split(","):
    b = base[metric] + seed
    result[f"mean_{metric}_ms"] = b
    result[f"median_{metric}_ms"] = b + 0.5
    result[f"std_{metric}_ms"] = 1.0
    for pct in args.metric_percentiles.split(","):
        result[f"p{pct}_{metric}_ms"] = b + float(pct) / 10
folder = Path(args.result_dir)
folder.mkdir(parents=True, exist_ok=True)
with open(folder / args.result_filename, "w", encoding="utf-8") as fh:
    json.dump(result, fh)
