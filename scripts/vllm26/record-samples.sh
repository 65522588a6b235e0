#!/usr/bin/env bash
# Record the real-vLLM samples on the lent H200 with `dbo-trace record -- vllm serve ...`.
# The carry (scripts/vllm26/build-carry.sh) must be installed first (install.sh, see README.md here).
#
#   bash scripts/vllm26/record-samples.sh OUT decode     # graphs and --enforce-eager, decode-heavy load
#   bash scripts/vllm26/record-samples.sh OUT more       # prefill-heavy with graphs; a larger model, mixed load
#   bash scripts/vllm26/record-samples.sh OUT dbo        # two GPUs: DP=2, expert parallel, DBO, eager and graphs
#   bash scripts/vllm26/record-samples.sh OUT dsv2-afd [NAME...]  # the AFD plugin beside dbo-trace: doctor, both
#                                                        # load orders, a small serve; then the dsv2 samples named
#   bash scripts/vllm26/record-samples.sh OUT dsv2 [NAME...]      # DeepSeek-V2-Lite's shape (dsv2lite/): the samples
#       named, default all four: dsv2lite-eager-prefill dsv2lite-graphs-prefill dsv2lite-graphs-decode dsv2lite-eager-decode
# The dsv2 samples use the AFD plugin where dsv2-afd installed it (/tmp/afd-site, from a carried .dev/afd,
# scripts/vllm26/afd-export.sh), so every dsv2 recording runs with both general plugins in every process.
# SKIP_AFTER_S=N: start no recording once the script has run N seconds (to end inside one device call).
# The one-GPU sets use GPU 0 only (CUDA_VISIBLE_DEVICES=0) so that they run alike on a two-GPU machine.
#
# Each bundle comes back as OUT/NAME.tar.gz; OUT/record-SET.log has the console.
set -uo pipefail
OUT=${1:?usage: record-samples.sh OUT decode|more|dbo|dsv2-afd|dsv2 [NAME...]}
SET=${2:?usage: record-samples.sh OUT decode|more|dbo|dsv2-afd|dsv2 [NAME...]}
shift 2
NAMES=("$@")
SKIP_AFTER_S=${SKIP_AFTER_S:-}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
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
  if [ -n "$SKIP_AFTER_S" ] && [ "$SECONDS" -gt "$SKIP_AFTER_S" ]; then
    echo "== $name: skipped, $SECONDS s gone (SKIP_AFTER_S=$SKIP_AFTER_S)"; return 0
  fi
  echo "== $name: dbo-trace record ${rec[*]} -- vllm serve $model ${SERVE[*]} ${serve[*]}"
  local t0=$SECONDS
  dbo-trace record -o "$W/$name" --grace 10 "${rec[@]}" -- vllm serve "$model" "${SERVE[@]}" "${serve[@]}"
  echo "exit status $? after $((SECONDS - t0)) s"
  [ -f "$W/$name/server.log" ] && grep -E "Available plugins|- (afd|dbo_trace) ->|register_afd|AFD plugin|dbo-trace:|backend|cudagraph_mode|CUDA graph|Capturing|Graph capturing|compil|Model loading took|KV cache|Traceback|Error" "$W/$name/server.log" | grep -v "^$" | head -60
  du -sh "$W/$name"; ls -l "$W/$name" "$W/$name"/events "$W/$name"/traces
  tar -C "$W" -czf "$OUT/$name.tar.gz" "$name"
}

plugins_seen() {  # the general plugins this Python would load, in vLLM's discovery order, from the current folder
  python3 -c 'import importlib.metadata as m; print("general plugins, in discovery order:", [e.name for e in m.entry_points(group="vllm.general_plugins")])'
}

# DeepSeek-V2-Lite's architecture (dsv2lite/config.json, written from the published config; vocabulary cut to
# the carried 32k tokenizer), random weights. One set of serve flags for all four recordings, so that the graph
# runs share vLLM's compile cache: prompts up to 3,000 tokens, 16,384 tokens a step, up to 128 sequences.
DSV2=/tmp/vllm26-dsv2lite
DSV2_SERVE=(--load-format dummy --max-model-len 4096 --max-num-batched-tokens 16384 --max-num-seqs 128
            --gpu-memory-utilization 0.6 --port 8000)
GRAPHS=(--compilation-config '{"cudagraph_mode": "FULL_AND_PIECEWISE"}')
# The prefill warm-up is the profiled load itself (64 prompts): Triton JIT-compiles fused_moe_kernel for each new
# batch shape, which took a second of GPU idle in the first profiled step of a run warmed with 8 prompts.
PREFILL=(--num-prompts 64 --concurrency 32 --input-len 3000 --output-len 2 --warmup-prompts 64 --profile-steps 30)
DECODE=(--num-prompts 128 --concurrency 64 --input-len 256 --output-len 128 --profile-delay 4 --profile-steps 30)
EAGER_DECODE_STEPS=(--profile-steps 15)   # eager decode writes ~5x the events of graph decode a step

dsv2_sets() {
  local set=$1
  rm -rf "$DSV2" && mkdir -p "$DSV2" && cp "$MODEL"/tokenizer.json "$MODEL"/tokenizer_config.json "$DSV2"/ \
    && cp "$HERE"/dsv2lite/*.json "$DSV2"/ || return 1
  if [ -d "$REPO/.dev/afd/site/afd_plugin" ]; then
    rm -rf /tmp/afd-site && cp -r "$REPO/.dev/afd/site" /tmp/afd-site && echo "AFD plugin $(cat "$REPO/.dev/afd/COMMIT") in /tmp/afd-site"
  fi
  # vLLM's INFO log as usual, plus its plugin loader's and the AFD plugin's debug lines: which general plugins
  # each process found, in which order, and that register_afd ran there.
  export VLLM_LOGGING_CONFIG_PATH=$HERE/logging-plugins.json
  if [ -d /tmp/afd-site ]; then
    export PYTHONPATH=/tmp/vllm-site:/tmp/afd-site
  else
    echo "NOTE: no AFD plugin in /tmp/afd-site: the dsv2 recordings run with dbo-trace's plugin alone"
  fi
  if [ "$set" = dsv2-afd ]; then
    {
      echo "## dbo-trace doctor, AFD plugin on PYTHONPATH ($PYTHONPATH)"
      dbo-trace doctor; echo "doctor exit status $?"
      echo "## both general plugins through vLLM's own loader, in either order (scripts/vllm26/plugin_order.py)"
      python3 "$HERE/plugin_order.py"; echo "plugin_order exit status $?"
    } 2>&1 | tee "$OUT/afd-doctor.log"
    # A real server with both plugins: the small model, eager. vLLM finds the AFD plugin (on PYTHONPATH)
    # before dbo-trace's (site-packages) here and in the dsv2 recordings; plugin_order.py above loads them
    # the other way round too. The server logs show the order each process saw.
    plugins_seen
    one vllm-afd-plugins "$MODEL" --num-prompts 8 --concurrency 8 --input-len 128 --output-len 8 --profile-steps 10 -- --enforce-eager
  fi
  local names=("${NAMES[@]}")
  if [ "$set" = dsv2 ] && [ ${#names[@]} -eq 0 ]; then
    names=(dsv2lite-eager-prefill dsv2lite-graphs-prefill dsv2lite-graphs-decode dsv2lite-eager-decode)
  fi
  [ ${#names[@]} -gt 0 ] || return 0
  cd "$W" || return 1
  plugins_seen
  local save=("${SERVE[@]}") name
  SERVE=("${DSV2_SERVE[@]}")
  for name in "${names[@]}"; do
    case $name in
      dsv2lite-eager-prefill) one "$name" "$DSV2" "${PREFILL[@]}" -- --enforce-eager ;;
      dsv2lite-graphs-prefill) one "$name" "$DSV2" "${PREFILL[@]}" -- "${GRAPHS[@]}" ;;
      dsv2lite-graphs-decode) one "$name" "$DSV2" "${DECODE[@]}" -- "${GRAPHS[@]}" ;;
      dsv2lite-eager-decode) one "$name" "$DSV2" "${DECODE[@]}" "${EAGER_DECODE_STEPS[@]}" -- --enforce-eager ;;
      *) echo "unknown dsv2 sample $name" ;;
    esac
  done
  SERVE=("${save[@]}")
  cd "$REPO"
}

{
  nvidia-smi --query-gpu=name,driver_version --format=csv
  if ! command -v dbo-trace >/dev/null; then  # (import dbo_trace succeeds from the repository root without an install)
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
    dsv2-afd|dsv2)
      export CUDA_VISIBLE_DEVICES=0
      dsv2_sets "$SET"
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
} 2>&1 | tee "$OUT/record-$SET${NAMES[0]:+-${NAMES[0]}}.log"
