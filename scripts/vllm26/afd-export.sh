#!/usr/bin/env bash
# Export the AFD plugin's Python sources (vllm-project/afd-plugin, Apache-2.0, pure Python on CUDA,
# targets vLLM 0.26.0 exactly) into an importable folder with the package metadata that vLLM's plugin
# loader reads (its `vllm.general_plugins` entry point `afd = afd_plugin:register_afd`), to carry to
# the device and put on PYTHONPATH beside the vLLM carry. No build and no registry are needed.
#
#   bash scripts/vllm26/afd-export.sh GIT_DIR [DEST]    # DEST defaults to .dev/afd (ignored by git)
#
# GIT_DIR is a clone's git directory (the `fetch` tool's github:vllm-project/afd-plugin gives one).
# Writes DEST/site/afd_plugin/ (sources, the Ascend NPU binaries left out) and
# DEST/site/vllm_afd_plugin-VERSION.dist-info/ (METADATA, entry_points.txt, top_level.txt, RECORD),
# and DEST/COMMIT (the exported commit).
set -euo pipefail
G=${1:?usage: afd-export.sh GIT_DIR [DEST]}
DEST=${2:-.dev/afd}
commit=$(git --git-dir="$G" rev-parse HEAD)
rm -rf "$DEST" && mkdir -p "$DEST/site"
# The NPU binaries (an aarch64 .run and .whl) are not used on CUDA and are absent from some snapshots.
git --git-dir="$G" archive HEAD -- afd_plugin LICENSE ':(exclude)afd_plugin/connectors/npu/bin' | tar -x -C "$DEST/site"
mv "$DEST/site/LICENSE" "$DEST/LICENSE"
version="0.0.0+g${commit:0:7}"   # setuptools-scm would derive it from tags; the commit is what matters
di="$DEST/site/vllm_afd_plugin-$version.dist-info"
mkdir -p "$di"
printf 'Metadata-Version: 2.1\nName: vllm-afd-plugin\nVersion: %s\nSummary: vLLM external plugin for Attention-FFN Disaggregation (AFD), exported from commit %s\nLicense: Apache-2.0\n' \
  "$version" "$commit" > "$di/METADATA"
printf '[vllm.general_plugins]\nafd = afd_plugin:register_afd\n' > "$di/entry_points.txt"
printf 'afd_plugin\n' > "$di/top_level.txt"
(cd "$DEST/site" && find afd_plugin "${di#"$DEST/site/"}" -type f | sort | sed 's/$/,,/') > "$di/RECORD"
echo "$commit" > "$DEST/COMMIT"
echo "exported afd-plugin $commit into $DEST/site ($(find "$DEST/site/afd_plugin" -name '*.py' | wc -l) Python files)"
