#!/usr/bin/env bash
# Build the real-vLLM carry for the lent H200 (no package registry there): vLLM 0.26.0,
# whose torch pin (2.11.0) is the machine's torch, slimmed to what an sm90 bf16 text model
# uses, plus the dependency wheels the machine lacks, in parts that each fit one device call.
#
#   bash scripts/vllm26/build-carry.sh [DEST]        # DEST defaults to .dev/vllm26 (ignored by git)
#
# Needs: python3 with pip (reaches PyPI), xz. Takes a few minutes (download and xz).
# Writes DEST/p1, p2, ... (pieces of vllm26.tar.xz), DEST/parts.sha256 and DEST/install.sh.
# scripts/vllm26/README.md says how the parts travel and what was dropped from the wheel and why.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DEST=${1:-.dev/vllm26}
# Each part travels with the working tree (tracked and untracked-not-ignored files) in one device call of
# at most 64 MiB: the parts are 64 MiB less the tree as it is now, less 4 MiB for what the calls also carry
# (.dev/afd, under 1 MiB) and for samples added later. More parts when the tree grows.
tree_bytes=$(cd "$HERE/../.." && git ls-files -co --exclude-standard -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
PART_BYTES=${PART_BYTES:-$(( 64 * 1048576 - tree_bytes - 4 * 1048576 ))}
echo "parts of $PART_BYTES bytes (the working tree that travels with each: $tree_bytes bytes)"
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)
work=$(mktemp -d /tmp/vllm26-build.XXXXXX)
trap 'rm -rf "$work"' EXIT
tree="$work/vllm26"
mkdir -p "$tree/wheels" "$tree/fallback" "$tree/model" "$work/dl"

plat=(--only-binary=:all: --python-version 3.12 --implementation cp
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64
      --platform manylinux_2_24_x86_64 --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64)
echo "[1/4] vllm 0.26.0 wheel"
python3 -m pip download -q --no-deps "${plat[@]}" -d "$work/dl" vllm==0.26.0
echo "[2/4] slim it (drop.txt), stored uncompressed so that xz compresses across it"
python3 "$HERE/slim_wheel.py" "$work"/dl/vllm-0.26.0-*.whl "$tree/wheels/" "$HERE/drop.txt"
echo "[3/4] dependency wheels the machine lacks (pinned to what pip resolves for vllm==0.26.0)"
python3 -m pip download -q --no-deps "${plat[@]}" -d "$tree/wheels" $(grep -v '^#' "$HERE/wheels.txt")
python3 -m pip download -q --no-deps "${plat[@]}" -d "$tree/fallback" $(grep -v '^#' "$HERE/fallback.txt")
cp "$HERE"/model/* "$tree/model/"
(cd "$tree" && find wheels fallback model -type f -print0 | sort -z | xargs -0 sha256sum > SHA256SUMS)
echo "[4/4] xz -9e and split"
tar -C "$work" -cf - vllm26 | xz -9e -T2 > "$work/vllm26.tar.xz"
rm -f "$DEST"/p[0-9]*
(cd "$DEST" && split -b "$PART_BYTES" --numeric-suffixes=1 -a 1 "$work/vllm26.tar.xz" p)
(cd "$DEST" && sha256sum p[0-9]* > parts.sha256)
cp "$HERE/install.sh" "$DEST/install.sh"
ls -l "$DEST"
