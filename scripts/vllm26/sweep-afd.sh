#!/usr/bin/env bash
# One arm of the AFD pair's DBO load sweep on ONE H200 with `dbo-trace sweep --peer-command`: record-afd.sh's
# pair (DeepSeek-V2-Lite's shape, dummy weights, the attention and FFN servers on GPU 0 under MPS, FULL_DECODE_ONLY
# graphs), started once for the arm, then at 16, 32 and 64 requests in flight: 3 timed `vllm bench serve` repeats
# (profiler off) and one profiled window of 20 steps after 8 skipped (both roles). py-spy off.
# The repeats are timed by dbo-trace's built-in load (REPEAT_TOOL=builtin, the default here): it measures vLLM's
# figures the way vLLM 0.26's benchmark does (record/bench.py), without its ~28 s start-up per repeat (08:57:12,
# 08:57:43, 08:58:12 in samples/afd-pair-graphs-dbo/bench/bench.log for 1.6-1.8 s runs), which for 9 repeats
# (270 s) beside two server start-ups (~160 s) and three windows (~35 s each) would not fit one 600 s call.
# REPEAT_TOOL=auto times them with `vllm bench serve` (then expect the 64 load to be cut; --resume runs it).
# The carry must be installed first (install.sh) and the AFD plugin carried as .dev/afd (afd-export.sh).
#
#   bash scripts/vllm26/sweep-afd.sh OUT ARM        ARM: graphs | graphs-dbo | both
#
# ARM=both records the two arms in one sweep call (`--arm graphs= --arm graphs-dbo=...`) with the sweep's own
# MPS daemon (`--mps`: started afresh between the arms, once the first arm's clients have left and the GPU takes
# a new CUDA context); at one load (SWEEP_CONCURRENCY=48) both arms fit one 600 s call.
#
# The sweep folder lives on the machine, /tmp/dbo-sweep/afd-graphs: the second arm's call adds its arm to the
# same folder (`--resume`: the same command, loads and repeats; a new arm), and a call that repeats an arm runs
# only its loads that are not complete. Each call returns OUT/ARM.tar.gz (sweep.json and the arm's folder; split
# into OUT/ARM.tar.gz.part-aa, -ab, ... where over 15 MB) and its console, OUT/sweep-afd-ARM.log.
# SWEEP_BUDGET_S (default 470): the sweep gets SIGTERM after this many seconds and keeps what finished (the
# servers stopped, the load it was in marked incomplete), so that the call ends inside its 600 s with the trim
# and the tar; 470 leaves room for the ~35 s install in the same call.
set -uo pipefail
OUT=${1:?usage: sweep-afd.sh OUT ARM}
ARM=${2:?usage: sweep-afd.sh OUT ARM (graphs | graphs-dbo)}
SWEEP_BUDGET_S=${SWEEP_BUDGET_S:-470}
REPEAT_TOOL=${REPEAT_TOOL:-builtin}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
SWEEP=/tmp/dbo-sweep/afd-graphs
mkdir -p "$OUT" /tmp/dbo-sweep
exec > >(tee "$OUT/sweep-afd-$ARM.log") 2>&1
stamp() { echo "== $(date -u +%T) (+${SECONDS}s) $*"; }

DBO_FLAGS="--enable-dbo --dbo-decode-token-threshold 2 --dbo-prefill-token-threshold 12"
case $ARM in
  graphs) ARMS=(--arm "graphs=") ;;
  graphs-dbo) ARMS=(--arm "graphs-dbo=$DBO_FLAGS") ;;
  both) ARMS=(--arm "graphs=" --arm "graphs-dbo=$DBO_FLAGS") ;;
  *) echo "unknown arm $ARM (graphs | graphs-dbo | both)"; exit 2 ;;
esac
OWN_MPS=()
[ "$ARM" = both ] && [ "${NO_MPS:-0}" != 1 ] && OWN_MPS=(--mps)

# record-afd.sh's environment: the carry, the AFD plugin, vLLM's settings, NCCL over loopback, MPS (afd-env.sh).
# shellcheck source=afd-env.sh
. "$HERE/afd-env.sh"

# The AFD port is fixed: the peer's command is part of the sweep's plan, which the second arm's call must match.
AFD_PORT=29650
PEER=$(printf '%q ' env NCCL_HOSTID=afd-ffn vllm serve "$DSV2" "${COMMON[@]}" "${GRAPHS[@]}" --port 8100 \
       --additional-config "$(afd_config ffn "$AFD_PORT")")
# Each repeat a few seconds: 2 x concurrency prompts of 128 in / 48 out (32 at 16 in flight took 1.4-1.8 s).
# SWEEP_CONCURRENCY: the loads (requests in flight), 16,32,64 by default; 16,32,48,64 adds a load whose batch pads
# to the 64 graph and each microbatch to the 32 (the one-arm model's padding caveat, docs/analysis.md).
LOADS=(--concurrency "${SWEEP_CONCURRENCY:-16,32,64}" --num-prompts-per-slot 2 --input-len 128 --output-len 48 --repeats 3 --warmup-prompts 32
       --profile-delay 8 --profile-steps 20 --repeat-tool "$REPEAT_TOOL")

nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv
stamp "arm $ARM: start"
wait_gpu_free
if [ ${#OWN_MPS[@]} -eq 0 ]; then mps_up || exit 1; fi
stamp "sweep (SIGTERM after ${SWEEP_BUDGET_S} s)"
NCCL_HOSTID=afd-attn timeout -s TERM -k 60 "$SWEEP_BUDGET_S" \
  dbo-trace sweep -o "$SWEEP" --resume "${ARMS[@]}" "${OWN_MPS[@]}" "${LOADS[@]}" --grace 10 --trace-timeout 240 \
  --peer-command "$PEER" -- \
  vllm serve "$DSV2" "${COMMON[@]}" "${GRAPHS[@]}" --port 8000 --additional-config "$(afd_config attention "$AFD_PORT")"
stamp "sweep exit status $?"

python3 - "$SWEEP" "$ARM" <<'EOF'
import json, sys
from pathlib import Path
sweep, arm = Path(sys.argv[1]), sys.argv[2]
state = json.loads((sweep / "sweep.json").read_text())
for run in state["runs"]:
    print("run", run["arm"], run["load"], run["status"], (run["reason"] or "")[:300])
    m_path = sweep / run["bundle"] / "manifest.json"
    if arm not in (run["arm"], "both") or not m_path.is_file():
        continue
    m = json.loads(m_path.read_text())
    for r in m.get("repeats") or []:
        print("  repeat", r.get("tool"), r.get("duration_s"), r.get("output_throughput"), r.get("median_tpot_ms"), r.get("median_itl_ms"))
    print("  traces", {role: body.get("traces") for role, body in (m.get("roles") or {}).items()})
    print("  peer start/stop ok", (m.get("peer") or {}).get("profile_start", {}).get("ok"), (m.get("peer") or {}).get("profile_stop", {}).get("ok"))
    print("  counters", {k: v for k, v in (m.get("counters") or {}).items() if k.startswith(("steps", "ubatch.yields", "graph"))})
    print("  gpu_sharing", (m.get("gpu_sharing") or {}).get("shared_gpu"), (m.get("gpu_sharing") or {}).get("mps"))
EOF
ARM_DIRS=("$ARM"); [ "$ARM" = both ] && ARM_DIRS=(graphs graphs-dbo)
for a in "${ARM_DIRS[@]}"; do
  grep -hE "Traceback|Error" "$SWEEP/$a/server.log" "$SWEEP/$a/peer/server.log" 2>/dev/null | head -20
done

stamp "trim the FFN traces to the attention's windows"
for a in "${ARM_DIRS[@]}"; do
  for bundle in "$SWEEP/$a"/c*; do
    [ -f "$bundle/manifest.json" ] && { python3 "$REPO/scripts/trim_peer_trace.py" "$bundle" || echo "trim failed: $bundle"; }
  done
  du -sh "$SWEEP/$a"/c* 2>/dev/null
done
stamp "tar"
tar -C "$SWEEP" -czf "$OUT/$ARM.tar.gz" sweep.json "${ARM_DIRS[@]}"
if [ "$(stat -c %s "$OUT/$ARM.tar.gz")" -gt 15000000 ]; then
  split -b 15000000 "$OUT/$ARM.tar.gz" "$OUT/$ARM.tar.gz.part-" && rm "$OUT/$ARM.tar.gz"
fi
ls -l "$OUT"
stamp "done"
