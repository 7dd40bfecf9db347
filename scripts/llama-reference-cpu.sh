#!/usr/bin/env bash
# The llama.cpp reference inside node-llama-cpp (its prebuilt CPU variants, one of which ggml
# loads by the CPU's features) must be its AVX-512 build, the order Wick's kernels follow. On a
# CPU with AMX ggml would load the sapphirerapids variant: its AMX matmuls sum K-quant and F16
# rows in another order (greedy tokens part from Wick's), and in a VM that advertises AMX without
# enabling its tile state they die on SIGILL. So that variant is set aside (renamed, not deleted:
# `npm install` puts it back, this puts it aside again); the best of the rest loads instead.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
[ -d "$dir" ] || exit 0
for variant in sapphirerapids; do
  lib="$dir/libggml-cpu-$variant.so"
  [ -f "$lib" ] && mv "$lib" "$lib.aside" && echo "llama-reference-cpu: set aside $variant (AMX)" >&2
done
exit 0
