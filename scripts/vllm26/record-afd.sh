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
# How two roles share one GPU: afd-env.sh.
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

# py-spy (a wheel: its binary is all we use), then the pair's environment (afd-env.sh).
if [ ! -x /tmp/pyspy-site/bin/py-spy ] && ls "$REPO"/.dev/wheels/py_spy-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/pyspy-site "$REPO"/.dev/wheels/py_spy-*.whl
fi
export PATH=/tmp/pyspy-site/bin:$PATH
# shellcheck source=afd-env.sh
. "$HERE/afd-env.sh"

DBO=(--enable-dbo --dbo-decode-token-threshold 2 --dbo-prefill-token-threshold 12)
EAGER=(--enforce-eager)
# Decode: 16 in flight (8 + 8 tokens a microbatched step); the same load for the repeats and the profiled window.
DECODE=(--num-prompts 32 --concurrency 16 --input-len 128 --output-len 48 --warmup-prompts 16 --repeats 3)
PREFILL=(--num-prompts 16 --concurrency 8 --input-len 1024 --output-len 2 --warmup-prompts 16 --repeats 3)

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
