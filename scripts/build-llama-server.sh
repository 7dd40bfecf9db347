#!/usr/bin/env bash
# Builds llama-server (the serving-benchmark and vision peer) and llama-quantize (for K-quant
# mixes) from the llama.cpp source bundled in the node-llama-cpp npm package, unpacked by
# scripts/llama-src.sh into .cache/llama.cpp. Output: .cache/llama-build/bin. Idempotent: skips
# the build when both binaries exist (set WICK_LLAMA_REBUILD=1 to force a rebuild).
# Takes ~6-10 min on 2 cores. Prints the bin directory on stdout as its last line.
#
# Env: WICK_LLAMA_JOBS (default: nproc), WICK_LLAMA_TARGETS (extra ninja targets, e.g.
# "llama-bench"), WICK_LLAMA_ONLY (exactly these targets, e.g. "llama-quantize" for the quant
# matrix test), WICK_LLAMA_BUILD (build dir, default .cache/llama-build), WICK_LLAMA_CROSS=aarch64
# (cross-built with Debian's aarch64-linux-gnu-g++ for WICK_LLAMA_ARM_ARCH, default
# armv8.2-a+dotprod, into .cache/llama-build-aarch64: the emulated parity reference).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
src=$root/.cache/llama.cpp
cross=${WICK_LLAMA_CROSS:-}
if [ -n "$cross" ]; then
  build=${WICK_LLAMA_BUILD:-$root/.cache/llama-build-$cross}
else
  build=${WICK_LLAMA_BUILD:-$root/.cache/llama-build}
fi
bin=$build/bin
targets="${WICK_LLAMA_ONLY:-llama-server llama-quantize ${WICK_LLAMA_TARGETS:-}}"

missing=()
for tool in cmake ninja g++ git; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "build-llama-server: missing ${missing[*]}. Install with:" >&2
  echo "  apt-get install -y cmake ninja-build g++ git" >&2
  exit 2
fi

need=0
for t in $targets; do [ -x "$bin/$t" ] || need=1; done

# Flags checked against the bundled CMakeLists (llama.cpp v0.5.0 in node-llama-cpp 3.22.1):
# LLAMA_USE_PREBUILT_UI defaults ON and would download the web UI; LLAMA_BUILD_APP builds the
# unified binary (not needed); LLAMA_CURL is deprecated there (only warns), so it is not passed.
flags=(
  -G Ninja
  -DCMAKE_BUILD_TYPE=Release
  -DLLAMA_BUILD_SERVER=ON
  -DLLAMA_BUILD_TOOLS=ON
  -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_BUILD_APP=OFF
  -DLLAMA_BUILD_UI=OFF
  -DLLAMA_USE_PREBUILT_UI=OFF
  -DLLAMA_OPENSSL=OFF
)
if [ "$cross" = aarch64 ]; then
  command -v aarch64-linux-gnu-g++ >/dev/null || { echo "build-llama-server: apt-get install g++-aarch64-linux-gnu" >&2; exit 2; }
  flags+=(
    -DCMAKE_SYSTEM_NAME=Linux
    -DCMAKE_SYSTEM_PROCESSOR=aarch64
    -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc
    -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++
    -DGGML_NATIVE=OFF
    -DGGML_CPU_ARM_ARCH="${WICK_LLAMA_ARM_ARCH:-armv8.2-a+dotprod}"
  )
elif [ -n "$cross" ]; then
  echo "build-llama-server: WICK_LLAMA_CROSS=$cross is not a known target (aarch64)" >&2
  exit 2
else
  # Native, but never AMX or AVX512-FP16: ggml's AMX kernels sum in their own order (the
  # reference is its AVX-512 build, which Wick follows), and in a VM that advertises AMX
  # without enabling its tile state they die on SIGILL at the first matmul.
  nox="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16 -mno-avx512fp16"
  flags+=(-DGGML_NATIVE=ON "-DCMAKE_C_FLAGS=$nox" "-DCMAKE_CXX_FLAGS=$nox")
fi
# A build made with other flags (an older version of this script) is rebuilt.
stamp="$build/.wick-flags"
want="${flags[*]}"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" != "$want" ]; then need=1; fi
if [ ! -f "$stamp" ] && [ -d "$build" ] && [ -z "$cross" ]; then need=1; fi
if [ "$need" = 0 ] && [ -z "${WICK_LLAMA_REBUILD:-}" ]; then
  echo "build-llama-server: up to date ($targets)" >&2
  echo "$bin"
  exit 0
fi
bash scripts/llama-src.sh >/dev/null
[ -f "$src/CMakeLists.txt" ] || { echo "build-llama-server: no source in $src" >&2; exit 1; }
jobs=${WICK_LLAMA_JOBS:-$(nproc)}

# Offline by construction: run configure + build without a network namespace when possible,
# so nothing can be fetched behind our back.
run_offline() {
  if unshare -n true 2>/dev/null; then unshare -n "$@"; else "$@"; fi
}

mkdir -p "$build"
echo "build-llama-server: configuring $build" >&2
run_offline cmake -S "$src" -B "$build" "${flags[@]}" >&2
echo "build-llama-server: ninja -j$jobs $targets" >&2
# shellcheck disable=SC2086
run_offline ninja -C "$build" -j"$jobs" $targets >&2

for t in $targets; do
  [ -x "$bin/$t" ] || { echo "build-llama-server: $bin/$t was not produced" >&2; exit 1; }
done
echo "$want" > "$stamp"
[ -z "$cross" ] && [ -x "$bin/llama-server" ] && { "$bin/llama-server" --version >&2 2>&1 || true; }
echo "$bin"
