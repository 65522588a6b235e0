#!/usr/bin/env bash
# Record the real-vLLM samples on the lent H200 with `dbo-trace record -- vllm serve ...`.
# The carry (scripts/vllm26/build-carry.sh) must be installed first (install.sh, see README.md here).
#
#   bash scripts/vllm26/record-samples.sh OUT decode     # graphs and --enforce-eager, decode-heavy load
#   bash scripts/vllm26/record-samples.sh OUT more       # prefill-heavy with graphs; a larger model, mixed load
#   bash scripts/vllm26/record-samples.sh OUT dbo        # two GPUs: DP=2, expert parallel, DBO, eager and graphs
# The one-GPU sets use GPU 0 only (CUDA_VISIBLE_DEVICES=0) so that they run alike on a two-GPU machine.
#
# Each bundle comes back as OUT/NAME.tar.gz; OUT/record-SET.log has the console.
set -uo pipefail
OUT=${1:?usage: record-samples.sh OUT decode|more|dbo}
SET=${2:?usage: record-samples.sh OUT decode|more|dbo}
export PYTHONPATH=/tmp/vllm-site PATH=/tmp/vllm-site/bin:$PATH VLLM_USE_FLASHINFER_SAMPLER=0 \
       VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
       PYTHONUNBUFFERED=1 COLUMNS=160 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \
       NVSHMEM_DISABLE_NVLS=1 VLLM_ALLREDUCE_USE_SYMM_MEM=0
W=/tmp/dbo-samples
mkdir -p "$W"
MODEL=/tmp/vllm26-model
SERVE=(--load-format dummy --max-model-len 2048 --gpu-memory-utilization 0.3 --port 8000)

one() {  # NAME MODEL [record options] -- [serve options]
  local name=$1 model=$2; shift 2
  local rec=() serve=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do rec+=("$1"); shift; done
  shift
  serve=("$@")
  echo "== $name: dbo-trace record ${rec[*]} -- vllm serve $model ${SERVE[*]} ${serve[*]}"
  local t0=$SECONDS
  dbo-trace record -o "$W/$name" --grace 10 "${rec[@]}" -- vllm serve "$model" "${SERVE[@]}" "${serve[@]}"
  echo "exit status $? after $((SECONDS - t0)) s"
  du -sh "$W/$name"; ls -l "$W/$name" "$W/$name"/events "$W/$name"/traces
  tar -C "$W" -czf "$OUT/$name.tar.gz" "$name"
}

{
  nvidia-smi --query-gpu=name,driver_version --format=csv
  if ! python3 -c 'import dbo_trace' 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 1
  fi
  dbo-trace doctor
  echo "doctor exit status $?"
  case $SET in
    decode)
      export CUDA_VISIBLE_DEVICES=0
      # Decode-heavy: short prompts, 64 generated tokens, 16 in flight. Graphs (vLLM's default) then eager.
      one vllm-graphs-decode "$MODEL" --num-prompts 48 --concurrency 16 --input-len 128 --output-len 64 --profile-steps 120 --
      one vllm-eager-decode "$MODEL" --num-prompts 48 --concurrency 16 --input-len 128 --output-len 64 --profile-steps 120 -- --enforce-eager
      ;;
    more)
      export CUDA_VISIBLE_DEVICES=0
      # Prefill-heavy: long prompts, 2 generated tokens.
      one vllm-graphs-prefill "$MODEL" --num-prompts 32 --concurrency 8 --input-len 1536 --output-len 2 --profile-steps 60 --
      # A larger MoE (12 layers, hidden 2048, 16 experts) under a mixed load: a busier GPU.
      big=/tmp/vllm26-model-big
      rm -rf "$big" && cp -r "$MODEL" "$big"
      python3 - "$big/config.json" <<'EOF'
import json, sys
path = sys.argv[1]
cfg = json.load(open(path))
cfg.update(num_hidden_layers=12, hidden_size=2048, num_experts=16, moe_intermediate_size=1024, intermediate_size=4096)
json.dump(cfg, open(path, "w"), indent=1)
EOF
      one vllm-big-mixed "$big" --num-prompts 48 --concurrency 16 --input-len 512 --output-len 32 --profile-steps 80 --
      ;;
    dbo)
      # vLLM microbatches only at data parallel size >= 2. allgather_reducescatter is NCCL-only and yields for DBO;
      # thresholds low enough that decode and prefill steps are microbatched.
      DBO=(--data-parallel-size 2 --enable-expert-parallel --enable-dbo --all2all-backend allgather_reducescatter
           --dbo-decode-token-threshold 8 --dbo-prefill-token-threshold 64)
      one vllm-dbo-eager "$MODEL" --num-prompts 32 --concurrency 16 --input-len 256 --output-len 32 --profile-steps 40 -- "${DBO[@]}" --enforce-eager
      one vllm-dbo-graphs "$MODEL" --num-prompts 32 --concurrency 16 --input-len 256 --output-len 32 --profile-steps 40 -- "${DBO[@]}"
      ;;
  esac
} 2>&1 | tee "$OUT/record-$SET.log"
