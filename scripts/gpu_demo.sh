#!/usr/bin/env bash
# Runs `dbo-trace demo` on the lent GPU machine (see docs/demo.md, samples/README.md).
# From the repo root on the device, with .gpu carried (../shared/tools/gpu-carry.sh, EXTRA_WHEELS below):
#   bash scripts/gpu_demo.sh "$OUT" modes    # every mode on one GPU (vLLM's and the built-in UBatchContext), then on two GPUs (NCCL all_to_all)
#   bash scripts/gpu_demo.sh "$OUT" sweep    # the DBO-vs-serial grid and its picture
#   bash scripts/gpu_demo.sh "$OUT" two-gpu  # every mode on two GPUs only (NCCL all_to_all), each bundle reported
#   bash scripts/gpu_demo.sh "$OUT" causes   # the exposure-cause modes (late, smhungry) and their controls, each reported
# .gpu was built with:
#   EXTRA_WHEELS="click rich markdown-it-py mdurl pygments matplotlib contourpy cycler fonttools kiwisolver
#                 pillow pyparsing python-dateutil six packaging" ../shared/tools/gpu-carry.sh
# Writes $OUT/log.txt and $OUT/bundles.tar.gz (and $OUT/sweep.png).
set -uo pipefail
OUT=${1:?usage: gpu_demo.sh OUTDIR modes|sweep}
WHAT=${2:?usage: gpu_demo.sh OUTDIR modes|builtin|sweep|two-gpu}
bash .gpu/install.sh || exit 1
export PYTHONPATH=/tmp/gpu-site:/tmp/gpu-vllm:$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 COLUMNS=160 \
       TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cli() { python3 -m dbo_trace.cli "$@"; }
work=$(mktemp -d)
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv
  cli doctor
  case $WHAT in
    modes)
      echo "== dbo-trace demo --mode all"
      cli demo --mode all -o "$work/demo-1gpu"; echo "exit status $?"
      echo "== dbo-trace demo --mode all --ubatching builtin"
      cli demo --mode all --ubatching builtin -o "$work/demo-1gpu-builtin"; echo "exit status $?"
      echo "== dbo-trace demo --mode all --nproc 2"
      cli demo --mode all --nproc 2 -o "$work/demo-2gpu"; echo "exit status $?"
      for b in "$work"/demo-2gpu/*/; do echo "== dbo-trace report $b"; cli report "$b"; done
      ;;
    two-gpu)
      echo "== dbo-trace demo --mode all --nproc 2 (started $(date +%T))"
      cli demo --mode all --nproc 2 -o "$work/demo-2gpu"; echo "exit status $? at $(date +%T)"
      for b in "$work"/demo-2gpu/*/; do echo "== dbo-trace report $b"; cli report "$b"; done
      ;;
    causes)
      for mode in late smhungry overlap serial; do
        echo "== dbo-trace demo --mode $mode (started $(date +%T))"
        cli demo --mode $mode -o "$work/causes-$mode"; echo "exit status $?"
        cli report "$work/causes-$mode/$mode"
        python3 - "$work/causes-$mode/$mode" <<'PY'
import glob, gzip, json, sys, collections
for f in glob.glob(sys.argv[1] + "/traces/*.json*"):
    ev = json.load(gzip.open(f) if f.endswith(".gz") else open(f))["traceEvents"]
    print(f, collections.Counter(e.get("cat") for e in ev))
    sync = [e for e in ev if e.get("cat") == "cuda_sync"]
    print("cuda_sync examples:", json.dumps(sync[:3]))
PY
      done
      echo "== dbo-trace demo --mode late --ubatching builtin"
      cli demo --mode late --ubatching builtin -o "$work/causes-builtin"; echo "exit status $?"
      ;;
    builtin)
      echo "== dbo-trace demo --mode all --ubatching builtin"
      cli demo --mode all --ubatching builtin -o "$work/demo-1gpu-builtin"; echo "exit status $?"
      ;;
    sweep)
      echo "== dbo-trace demo --sweep --plot sweep.png"
      cli demo --sweep --plot "$OUT/sweep.png" -o "$work/sweep"; echo "exit status $?"
      ;;
  esac
  du -sh "$work"/*/* 2>/dev/null
} 2>&1 | tee "$OUT/log.txt"
tar -C "$work" -czf "$OUT/bundles.tar.gz" .
