#!/usr/bin/env bash
# Emulated parity on aarch64: llama.cpp cross-built for aarch64 (armv8.2-a+dotprod, from the
# bundled source: build-llama-server.sh with WICK_LLAMA_CROSS=aarch64) serves each file under
# qemu-user; scripts/greedy-ref-server.mjs records its greedy ids and top probabilities into
# .cache/parity-arm64/; then wick-core's models_parity test, cross-built for aarch64, runs under
# qemu on Neoverse-N1 (NEON + dotprod) and Cortex-A72 (NEON only) against those references.
# Prints the parity table (a line per file, as models_parity does). Emulated time is not speed.
#
#   bash scripts/parity-arm64.sh [model.gguf ...]   (default: the tiny fixtures and SmolLM2)
#
# Needs what scripts/test-arm.sh installs, plus g++-aarch64-linux-gnu for llama.cpp.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
target=aarch64-unknown-linux-gnu
sysroot=/usr/aarch64-linux-gnu
refs=.cache/parity-arm64
mkdir -p "$refs"

bin=$(WICK_LLAMA_CROSS=aarch64 WICK_LLAMA_ONLY=llama-server bash scripts/build-llama-server.sh | tail -1)
if [ $# -gt 0 ]; then
  files=("$@")
else
  files=(.cache/fixtures/tiny-{llama,lfm2}-{q8_0,q4_0,q4_k,f16}.gguf "$(python3 scripts/fetch_models.py smollm2-135m | tail -1)")
fi

port=18931
for f in "${files[@]}"; do
  out="$refs/$(basename "$f" .gguf).json"
  [ -s "$out" ] && [ "$out" -nt "$f" ] && [ "$out" -nt "$bin/llama-server" ] && continue
  f=$(realpath --relative-to=. "$f")
  qemu-aarch64 -L "$sysroot" -cpu neoverse-n1 "$bin/llama-server" -m "$f" --port "$port" -t 1 -fa off -c 2048 \
    --no-webui >"$refs/server.log" 2>&1 &
  server=$!
  for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 1; done
  node scripts/greedy-ref-server.mjs "http://127.0.0.1:$port" "$f" "$out" || { tail -20 "$refs/server.log"; kill "$server"; exit 1; }
  kill "$server"
  wait "$server" 2>/dev/null || true
done

tests=$(cargo test --release --target "$target" -p wick-core --test models_parity --no-run --message-format=json 2>/dev/null |
  sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
for cpu in neoverse-n1 cortex-a72; do
  echo "== wick on aarch64 $cpu (qemu) against llama.cpp aarch64 (armv8.2-a+dotprod, qemu)"
  WICK_PARITY_DIR=$PWD/$refs qemu-aarch64 -L "$sysroot" -cpu "$cpu" "$tests" --ignored --nocapture --test-threads 1 2>&1 |
    grep -E "greedy .* sequences|test result|panicked"
done
