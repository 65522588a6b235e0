# The AFD pair's environment on ONE H200, sourced by record-afd.sh and sweep-afd.sh (HERE and REPO set):
# the carry and the AFD plugin on the path, vLLM's settings, NCCL over loopback, DeepSeek-V2-Lite's shape
# (dsv2lite/, dummy weights), MPS in user space, and the servers' shared flags.
# How two roles share one GPU (docs/recording.md, "An AFD pair on one GPU"): NCCL refuses two ranks on one GPU
# unless each process tree claims its own host (NCCL_HOSTID per role, socket transport over loopback); MPS lets
# both CUDA contexts run at once (without it they time-slice: a 4.5 ms round trip for any size).

[ -d /tmp/afd-site/afd_plugin ] || cp -r "$REPO/.dev/afd/site" /tmp/afd-site
export PYTHONPATH=/tmp/vllm-site:/tmp/afd-site PATH=/tmp/vllm-site/bin:$PATH \
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

# MPS: user space, for these scripts' processes only (the GPU's compute mode stays as it is). A control pipe
# left by an earlier `quit` is no daemon (the roles then time-slice the GPU): mps_up starts one afresh where
# none answers. NO_MPS=1 records without one (the time-sliced regime).
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

# GPU_MEM_UTIL: each role's share of the GPU (0.4 on the H200's 141 GB; the FFN's experts take ~29 GB, so an
# 80 GB H100 needs 0.45 each)
COMMON=(--load-format dummy --gpu-memory-utilization "${GPU_MEM_UTIL:-0.4}" --max-model-len 4096 --max-num-seqs 64
        --max-num-batched-tokens 4096 --enable-expert-parallel)
# FULL_DECODE_ONLY (the plugin's graph mode); small capture sizes: with [64] alone a 16-token batch pads to 64
# and the split leaves the second microbatch empty (DBO never runs).
GRAPHS=(--compilation-config '{"cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32, 64]}')

afd_config() {  # ROLE PORT
  printf '{"afd": {"role": "%s", "connector": "P2pNcclAFDConnector", "host": "127.0.0.1", "port": %d, "num_attention_ranks": 1, "num_ffn_ranks": 1}}' "$1" "$2"
}
