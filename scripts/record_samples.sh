#!/usr/bin/env bash
# Records the shipped samples on a GPU host (the lent H200; see samples/README.md).
# The samples were recorded at commit 809b895, whose dbo_trace/synthetic/workload.py this
# script runs; that workload now lives on as `dbo-trace demo` (dbo_trace/demo/). To re-record
# these exact bundles: `git worktree add /tmp/s 809b895` and run this script from there.
# `scripts/gpu_demo.sh` records today's equivalents through `dbo-trace demo`.
# On the device machine, from the repo root, with .gpu carried (../shared/tools/gpu-carry.sh):
#   bash scripts/record_samples.sh "$OUT"
# Writes $OUT/samples.tar.gz (one bundle per variant) and $OUT/record.log.
set -uo pipefail
OUT=${1:?usage: record_samples.sh OUTDIR}
bash .gpu/install.sh || exit 1
export PYTHONPATH=/tmp/gpu-site:/tmp/gpu-vllm:$PWD PYTHONUNBUFFERED=1
log=$OUT/record.log
work=$(mktemp -d)
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv
  python3 -c 'import torch, vllm; print("torch", torch.__version__, "vllm", vllm.__version__)'
  run() { echo "== $*"; python3 -m dbo_trace.synthetic.workload "$@" || echo "FAILED: $*"; }
  run --variant serial    --out "$work/serial"
  run --variant overlap   --out "$work/overlap"
  run --variant graph     --out "$work/graph"
  run --variant hostbound --out "$work/hostbound" --layers 2 --steps 3 --comm-us 20 --tokens 4096 --hidden 1024
  # Same workload, profiler without profile_all_threads: only the event log attributes.
  run --variant overlap   --out "$work/overlap-stock-profiler" --no-all-threads
  # No hooks, stock profiler: a plain trace as vLLM's own profiler writes it (and the hooks' cost, by difference).
  run --variant overlap   --out "$work/overlap-no-hooks" --no-all-threads --no-hooks
  du -ah "$work"
} 2>&1 | tee "$log"
tar -C "$work" -czf "$OUT/samples.tar.gz" .
