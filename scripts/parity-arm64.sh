#!/usr/bin/env bash
# Emulated parity on aarch64. llama.cpp cross-built for aarch64 (armv8.2-a+dotprod, from the
# bundled source: build-llama-server.sh with WICK_LLAMA_CROSS=aarch64) serves each file under
# qemu-user, and llama.cpp's x86 build (build-llama-server.sh) natively; greedy-ref-server.mjs
# records each one's greedy ids and top probabilities (.cache/parity-arm64/, parity-x86srv/).
# Then three tables, a line per file:
#   1. llama.cpp aarch64 against llama.cpp x86 (how far llama.cpp's own two builds part);
#   2. Wick x86 against llama.cpp x86 (models_parity, native);
#   3. Wick aarch64 against llama.cpp aarch64 (models_parity cross-built, under qemu on
#      Neoverse-N1 (NEON + dotprod) and Cortex-A72 (NEON only): the same bits, so one table).
# Emulated time is not speed.
#
#   bash scripts/parity-arm64.sh [model.gguf ...]   (default: the tiny fixtures and SmolLM2)
#
# Needs what scripts/test-arm.sh installs, plus g++-aarch64-linux-gnu for llama.cpp.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
target=aarch64-unknown-linux-gnu
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-D warnings" # as test-arm.sh builds
sysroot=/usr/aarch64-linux-gnu
arm_refs=.cache/parity-arm64
x86_refs=.cache/parity-x86srv
mkdir -p "$arm_refs" "$x86_refs"

arm_bin=$(WICK_LLAMA_CROSS=aarch64 WICK_LLAMA_ONLY=llama-server bash scripts/build-llama-server.sh | tail -1)
x86_bin=$(WICK_LLAMA_ONLY="llama-quantize llama-server" bash scripts/build-llama-server.sh | tail -1)
if [ $# -gt 0 ]; then
  files=("$@")
else
  files=(.cache/fixtures/tiny-{llama,lfm2}-{q8_0,q4_0,q4_k,f16}.gguf "$(python3 scripts/fetch_models.py smollm2-135m | tail -1)")
fi

# reference <out.json> <model> <server command...>: serve, record, stop.
port=18931
reference() {
  local out=$1 model=$2
  shift 2
  [ -s "$out" ] && [ "$out" -nt "$model" ] && return 0
  "$@" -m "$model" --port "$port" -t 1 -fa off -c 2048 --no-webui >"$out.log" 2>&1 &
  local server=$!
  for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 1; done
  node scripts/greedy-ref-server.mjs "http://127.0.0.1:$port" "$model" "$out" >/dev/null || { tail -20 "$out.log"; kill "$server"; exit 1; }
  kill "$server"
  wait "$server" 2>/dev/null || true
}

names=()
for f in "${files[@]}"; do
  f=$(realpath --relative-to=. "$f")
  name=$(basename "$f" .gguf)
  names+=("$name")
  reference "$x86_refs/$name.json" "$f" "$x86_bin/llama-server"
  reference "$arm_refs/$name.json" "$f" qemu-aarch64 -L "$sysroot" -cpu neoverse-n1 "$arm_bin/llama-server"
done
only=$(IFS=,; echo "${names[*]}")

echo "== llama.cpp aarch64 (qemu) against llama.cpp x86"
for name in "${names[@]}"; do node scripts/compare-refs.mjs "$arm_refs/$name.json" "$x86_refs/$name.json"; done

echo "== wick x86 against llama.cpp x86"
WICK_PARITY_ONLY=$only WICK_PARITY_DIR=$PWD/$x86_refs cargo test $CARGO_RELEASE -q -p wick-core --test models_parity -- \
  --ignored --nocapture 2>&1 | grep -E "greedy .* sequences|test result" || true

tests=$(cargo test --release --target "$target" -p wick-core --test models_parity --no-run --message-format=json 2>/dev/null |
  sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
for cpu in neoverse-n1 cortex-a72; do
  echo "== wick aarch64 $cpu (qemu) against llama.cpp aarch64 (armv8.2-a+dotprod, qemu)"
  WICK_PARITY_ONLY=$only WICK_PARITY_DIR=$PWD/$arm_refs qemu-aarch64 -L "$sysroot" -cpu "$cpu" "$tests" --ignored --nocapture \
    --test-threads 1 2>&1 | grep -E "greedy .* sequences|test result" || true
done
