#!/usr/bin/env bash
# Record the AFD plugin's DBO ablation on ONE H200 with `dbo-trace record --peer-command`: DeepSeek-V2-Lite's
# shape (dsv2lite/, dummy weights), an attention server and its FFN server both on GPU 0 under MPS, both
# profiled over one window, three unprofiled timed repeats (`vllm bench serve`) before it, py-spy samples.
# The carry must be installed first (install.sh) and the AFD plugin carried as .dev/afd (afd-export.sh);
# py-spy's wheel in .dev/wheels (README.md here).
#
#   bash scripts/vllm26/record-afd.sh OUT ARM [ARM...]
#     ARM: afd-eager afd-eager-dbo afd-graphs afd-graphs-dbo (decode) | afd-prefill-dbo (eager, long prompts)
# SKIP_AFTER_S=N: start no arm once the script has run N seconds (to end inside one device call).
# Each bundle comes back as OUT/ARM.tar.gz, the console in OUT/record-afd-ARM.log.
#
# How two roles share one GPU (docs/recording.md, "An AFD pair on one GPU"): NCCL refuses two ranks on one GPU
# unless each process tree claims its own host (NCCL_HOSTID per role, socket transport over loopback); MPS lets
# both CUDA contexts run at once (without it they time-slice: a 4.5 ms round trip for any size).
set -uo pipefail
OUT=${1:?usage: record-afd.sh OUT ARM [ARM...]}
shift
ARMS=("$@")
SKIP_AFTER_S=${SKIP_AFTER_S:-}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
W=/tmp/dbo-afd
mkdir -p "$W"
LOG="$OUT/record-afd-${ARMS[0]:-none}.log"
exec > >(tee "$LOG") 2>&1

# The carry, the AFD plugin and py-spy (a wheel: its binary is all we use).
[ -d /tmp/afd-site/afd_plugin ] || cp -r "$REPO/.dev/afd/site" /tmp/afd-site
if [ ! -x /tmp/pyspy-site/bin/py-spy ] && ls "$REPO"/.dev/wheels/py_spy-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/pyspy-site "$REPO"/.dev/wheels/py_spy-*.whl
fi
export PYTHONPATH=/tmp/vllm-site:/tmp/afd-site PATH=/tmp/vllm-site/bin:/tmp/pyspy-site/bin:$PATH \
       VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
       PYTHONUNBUFFERED=1 COLUMNS=160 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 VLLM_ALLREDUCE_USE_SYMM_MEM=0 \
       VLLM_USE_V2_MODEL_RUNNER=0 CUDA_VISIBLE_DEVICES=0 NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 \
       VLLM_LOGGING_CONFIG_PATH=$HERE/logging-plugins.json
if ! command -v dbo-trace >/dev/null; then
  (cd "$REPO" && python3 -m pip install -q --no-index --no-deps --no-build-isolation -e .) || exit 1
fi

DSV2=/tmp/vllm26-dsv2lite
if [ ! -f "$DSV2/config.json" ]; then
  mkdir -p "$DSV2" && cp /tmp/vllm26-model/tokenizer.json /tmp/vllm26-model/tokenizer_config.json "$DSV2"/ \
    && cp "$HERE"/dsv2lite/*.json "$DSV2"/ || exit 1
fi

# MPS: user space, for this script's processes only (the GPU's compute mode stays as it is). A control pipe
# left by an earlier `quit` is no daemon (the roles then time-slice the GPU): each arm gets a daemon that
# answers, started afresh where none does. NO_MPS=1 records without one (the time-sliced regime).
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mps_answers() { echo get_server_list | nvidia-cuda-mps-control >/dev/null 2>&1; }
mps_up() {
  if [ "${NO_MPS:-0}" = 1 ]; then
    mps_answers && echo quit | nvidia-cuda-mps-control
    echo "MPS: off (NO_MPS=1); the two roles time-slice GPU 0"
    return 0
  fi
  mps_answers && { echo "MPS: the control daemon answers"; return 0; }
  rm -rf "$CUDA_MPS_PIPE_DIRECTORY" && mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d
  local i
  for i in $(seq 1 20); do
    mps_answers && { echo "MPS: control daemon started, and it answers"; return 0; }
    sleep 0.5
  done
  echo "MPS: the control daemon does not answer; not recording a one-GPU pair without it (NO_MPS=1 to do so)"
  return 1
}
trap 'mps_answers && echo quit | nvidia-cuda-mps-control && echo "MPS control daemon stopped"' EXIT

gpu_used_mib() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 | head -1; }
wait_gpu_free() {  # an FFN started while the last arm's processes still held the GPU failed to start
  local i
  for i in $(seq 1 120); do
    [ "$(gpu_used_mib)" -lt 2000 ] && return 0
    sleep 1
  done
  echo "GPU memory still $(gpu_used_mib) MiB in use"
}

COMMON=(--load-format dummy --gpu-memory-utilization 0.4 --max-model-len 4096 --max-num-seqs 64
        --max-num-batched-tokens 4096 --enable-expert-parallel)
DBO=(--enable-dbo --dbo-decode-token-threshold 2 --dbo-prefill-token-threshold 12)
EAGER=(--enforce-eager)
# FULL_DECODE_ONLY (the plugin's graph mode); small capture sizes: with [64] alone a 16-token batch pads to 64
# and the split leaves the second microbatch empty (DBO never runs).
GRAPHS=(--compilation-config '{"cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32, 64]}')
# Decode: 16 in flight (8 + 8 tokens a microbatched step); the same load for the repeats and the profiled window.
DECODE=(--num-prompts 32 --concurrency 16 --input-len 128 --output-len 48 --warmup-prompts 16 --repeats 3)
PREFILL=(--num-prompts 16 --concurrency 8 --input-len 1024 --output-len 2 --warmup-prompts 16 --repeats 3)

afd_config() {  # ROLE PORT
  printf '{"afd": {"role": "%s", "connector": "P2pNcclAFDConnector", "host": "127.0.0.1", "port": %d, "num_attention_ranks": 1, "num_ffn_ranks": 1}}' "$1" "$2"
}

arm() {
  local name=$1 port=$((29600 + RANDOM % 200)) mode=() dbo=() load=() steps=()
  case $name in
    afd-eager) mode=("${EAGER[@]}"); load=("${DECODE[@]}"); steps=(--profile-delay 6 --profile-steps 10) ;;
    afd-eager-dbo) mode=("${EAGER[@]}"); dbo=("${DBO[@]}"); load=("${DECODE[@]}"); steps=(--profile-delay 6 --profile-steps 10) ;;
    afd-graphs) mode=("${GRAPHS[@]}"); load=("${DECODE[@]}"); steps=(--profile-delay 8 --profile-steps 20) ;;
    afd-graphs-dbo) mode=("${GRAPHS[@]}"); dbo=("${DBO[@]}"); load=("${DECODE[@]}"); steps=(--profile-delay 8 --profile-steps 20) ;;
    afd-prefill-dbo) mode=("${EAGER[@]}"); dbo=("${DBO[@]}"); load=("${PREFILL[@]}"); steps=(--profile-steps 8) ;;
    *) echo "unknown arm $name"; return 1 ;;
  esac
  if [ -n "$SKIP_AFTER_S" ] && [ "$SECONDS" -gt "$SKIP_AFTER_S" ]; then
    echo "== $name: skipped, $SECONDS s gone (SKIP_AFTER_S=$SKIP_AFTER_S)"; return 0
  fi
  wait_gpu_free
  mps_up || return 1
  local peer
  peer=$(printf '%q ' env NCCL_HOSTID=afd-ffn vllm serve "$DSV2" "${COMMON[@]}" "${mode[@]}" "${dbo[@]}" --port 8100 \
         --additional-config "$(afd_config ffn "$port")")
  echo "== $name (AFD port $port): $(date -u +%T)"
  local t0=$SECONDS
  rm -rf "${W:?}/$name"
  NCCL_HOSTID=afd-attn dbo-trace record -o "$W/$name" --grace 10 --trace-timeout 240 "${load[@]}" "${steps[@]}" \
    --peer-command "$peer" -- \
    vllm serve "$DSV2" "${COMMON[@]}" "${mode[@]}" "${dbo[@]}" --port 8000 --additional-config "$(afd_config attention "$port")"
  echo "exit status $? after $((SECONDS - t0)) s"
  grep -hE "Traceback|Error|error" "$W/$name/server.log" "$W/$name/peer/server.log" 2>/dev/null | grep -v "^$" | head -20
  du -sh "$W/$name"; ls -l "$W/$name" "$W/$name"/traces "$W/$name"/peer/traces "$W/$name"/peer/acks "$W/$name"/pystacks 2>/dev/null
  python3 - "$W/$name/manifest.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
print("status", m.get("status"), m.get("reason"))
print("roles", m.get("roles"))
print("counters", {k: v for k, v in (m.get("counters") or {}).items() if k.startswith(("steps", "ubatch.yields", "graph"))})
for r in m.get("repeats") or []:
    print("repeat", r.get("tool"), r.get("duration_s"), r.get("output_throughput"), r.get("median_tpot_ms"))
peer = m.get("peer") or {}
for key in ("profile_start", "profile_stop"):
    print("peer", key, (peer.get(key) or {}).get("ok"), (peer.get(key) or {}).get("acks"))
print("peer nudges", peer.get("nudge_requests"), "traces settled", peer.get("traces_settled"))
print("gpu_sharing", m.get("gpu_sharing"))
print("pystacks", [(p.get("role"), p.get("path"), p.get("note")) for p in m.get("pystacks") or []])
EOF
  # The repo keeps the traces, event logs and manifests; py-spy's files, when large, are cut by the caller.
  tar -C "$W" -czf "$OUT/$name.tar.gz" "$name"
}

nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv
dbo-trace doctor | head -20
for a in "${ARMS[@]}"; do arm "$a"; done
