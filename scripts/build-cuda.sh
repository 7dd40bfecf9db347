#!/usr/bin/env bash
# Builds the CUDA addon (wick-node with the `cuda` feature) with the PyPI CUDA toolkit of
# scripts/cuda-toolkit.sh, in its own target dir (candle's CUDA build shares nothing with the CPU
# one; WICK_CUDA_TARGET_DIR, default target/cuda) and copies it to ts/native/wick.linux-x64-gnu-cuda.node, where the control
# plane finds it (ts/engine/addon.ts). No GPU is needed to build it.
#
#   bash scripts/build-cuda.sh            # dev profile, no debug info: the test suite's check
#   bash scripts/build-cuda.sh dist       # the profile the npm package ships (scripts/pack.sh)
#
# Output: ts/native/wick.linux-x64-gnu-cuda.node (WICK_CUDA_ADDON overrides the path).
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${1:-dev}
eval "$(bash scripts/cuda-toolkit.sh)"
# A compile-and-link check: debug info would only make the link slower and the addon larger.
export CARGO_PROFILE_DEV_DEBUG=0
triple=$(rustc -vV | sed -n 's/^host: //p')
target_dir=${WICK_CUDA_TARGET_DIR:-target/cuda}
cargo build -q --profile "$profile" --target "$triple" --target-dir "$target_dir" -p wick-node --features cuda
dir=$([ "$profile" = dev ] && echo debug || echo "$profile")
out=${WICK_CUDA_ADDON:-ts/native/wick.linux-x64-gnu-cuda.node}
mkdir -p "$(dirname "$out")"
cp "$target_dir/$triple/$dir/libwick_node.so" "$out"
echo "$out"
