#!/usr/bin/env bash
# Builds scripts/mtmd-embd.cpp (llama.cpp's LFM2-VL prompt chunks and image embeddings for one
# raw RGB image, the reference of crates/wick-core/tests/vision.rs and benches/vision.rs)
# against the llama-server build of scripts/build-llama-server.sh (its libmtmd). Output:
# <build>/bin/wick-mtmd-embd, printed on stdout. Idempotent.
#
# Env: WICK_LLAMA_BUILD (default .cache/llama-build), as scripts/build-llama-server.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
src=$root/.cache/llama.cpp
build=${WICK_LLAMA_BUILD:-$root/.cache/llama-build}
out=$build/bin/wick-mtmd-embd
if [ -x "$out" ] && [ "$out" -nt scripts/mtmd-embd.cpp ]; then
  echo "$out"
  exit 0
fi
[ -f "$build/bin/libmtmd.so" ] || { echo "build-mtmd-embd: no $build/bin/libmtmd.so (build llama-server first: bash scripts/build-llama-server.sh)" >&2; exit 1; }
g++ -O2 -std=gnu++17 scripts/mtmd-embd.cpp -I"$src/include" -I"$src/ggml/include" -I"$src/tools/mtmd" \
  -L"$build/bin" -lmtmd -lllama -lggml -lggml-base -Wl,-rpath,"$build/bin" -o "$out"
echo "$out"
