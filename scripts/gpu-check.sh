#!/usr/bin/env bash
# The GPU check of issue #28 in two halves, since a lent GPU host has no Rust toolchain and
# nothing can be fetched there (/work/.library/device/README.md):
#
#   bash scripts/gpu-check.sh build   # here: the CUDA builds, with the PyPI toolkit of
#                                     # scripts/cuda-toolkit.sh, into .gpu/ (gitignored)
#   bash scripts/gpu-check.sh build --base REV   # also REV's benches, for an A/B on the GPU
#   bash scripts/gpu-check.sh run     # on the GPU host, .gpu/ carried: builds nothing
#
# A dry run of the plumbing on a machine without a GPU: `build --cpu` (no CUDA feature) and
# `WICK_GPU_CHECK_DEVICE=cpu-candle bash scripts/gpu-check.sh run --quick` (small sizes, the
# device path on candle's CPU device). `run --lease` keeps the published shape (1024 in / 128
# out) but fewer prompts (32 after 8 warm-up at concurrency 1, 4 × concurrency at 16 and 64), so the
# whole check fits the device runner's 15-minute lease with its start; every step runs under
# its own `timeout`, and a row printed before a step is cut off still reaches the report.
#
# `run` writes the LFM2-1.2B-shaped model (d 2048, 16 layers in LFM2's conv/attention pattern,
# 32/8 heads, FFN 8192, Q8_0 and F16: `wick-fixtures --gpu-check`), checks candle's quantized
# matmul kernels against the CPU, Wick's own (the vector kernel and the tensor-core tiles, the
# row ops: norms, gates, the heads' norm-and-RoPE) against their host twin and its fused conv
# step against the composed ops, bit for bit (tests/device_kernels.rs), Wick's fused decode
# attention against its twin and an f64 reference (tests/device_attention.rs), runs the device-path tests
# on the GPU against the exact CPU path (tests/device_path.rs with WICK_TEST_DEVICE=cuda: greedy
# tokens and probabilities on every fixture architecture), the same under compute-sanitizer
# (memcheck), then the latency server's published benchmark (benches/serving.rs: 1024 input /
# 128 output tokens, concurrency 1, 256 prompts after 128 warm-up; then 16/64/256) and prefill/
# decode (benches/e2e.rs) on both files, with A/Bs of the kernel choices and a trace of where a
# prefill's and a decode's time goes (WICK_DEVICE_TRACE). Everything goes to stdout and, when
# $OUT is set (the
# device runner's output folder), to $OUT/gpu-check.md, a section for benches/RESULTS.md.
#
# Published for comparison (SGLang, LFM2.5-1.2B): B300 TTFT 8.79 ms, TPOT 0.86 ms, 1100.92 tok/s;
# H100 TTFT 18.9 ms, TPOT 2.08 ms. Bandwidth floor: the weights read once per decode step.
set -uo pipefail
cd "$(dirname "$0")/.."
gpu=.gpu

build() {
  set -e
  local triple target=target/cuda features=(--features cuda) base=
  [ "${1:-}" = --base ] && base=${2:?build --base REV}
  if [ "${1:-}" = --cpu ]; then
    # The main target dir's release build, as it is (a profile change would rebuild it all).
    target=target features=()
  else
    eval "$(bash scripts/cuda-toolkit.sh)"
    # Release, stripped: the binaries travel within the device runner's 64 MiB.
    export CARGO_PROFILE_RELEASE_STRIP=symbols
  fi
  triple=$(rustc -vV | sed -n 's/^host: //p')
  mkdir -p "$gpu/llama-src/models"
  local json
  json=$(cargo test --release --target "$triple" --target-dir "$target" -p wick-core "${features[@]}" \
    --test device_path --test device_kernels --test split_layers --test device_attention --no-run --message-format=json 2>/dev/null)
  for t in device_path device_kernels split_layers device_attention; do
    cp "$(sed -n "s/.*\"executable\":\"\([^\"]*$t-[^\"]*\)\".*/\1/p" <<<"$json" | tail -1)" "$gpu/$t"
  done
  benches() {
    # The executables cargo names (not the newest file: another tree's build of the same
    # bench may be newer in the shared target dir).
    local out
    out=$(cargo build --release --target "$triple" --target-dir "$target" -p wick-core "${features[@]}" \
      --bench serving --bench e2e --message-format=json 2>/dev/null)
    for b in serving e2e; do
      cp "$(sed -n "s/.*\"executable\":\"\([^\"]*\/$b-[^\"]*\)\".*/\1/p" <<<"$out" | tail -1)" "$gpu/$b$1"
    done
  }
  benches ""
  local bins=(device_path device_kernels split_layers device_attention e2e serving)
  if [ -n "$base" ]; then
    # REV's benches from a worktree, in the same target dir (only Wick's crates rebuild).
    local src=/tmp/wick-gpu-base here=$PWD
    git worktree remove --force "$src" 2>/dev/null || true
    git worktree add --detach "$src" "$base" >/dev/null
    (cd "$src" && gpu=$here/$gpu target=$here/$target && benches -base)
    git worktree remove --force "$src"
    # Cargo keeps a workspace crate's sources by relative path: the next build here would take
    # REV's build for fresh. Newer sources make it rebuild.
    find crates -name '*.rs' -exec touch {} +
    bins+=(e2e-base serving-base)
  fi
  # The fixture writer needs no GPU: the CPU build's.
  cargo build --release --target "$triple" -q -p wick-fixtures
  cp "target/$triple/release/wick-fixtures" "$gpu/"
  ./scripts/llama-src.sh >/dev/null
  cp .cache/llama.cpp/models/ggml-vocab-falcon.gguf "$gpu/llama-src/models/"
  # Each CUDA binary holds candle's ~50 MB of PTX and its fast kernels' machine code (~90 MB in
  # all): one xz stream whose window spans all four stores that once (~22 MB), inside the
  # device runner's 64 MiB.
  tar -cf - -C "$gpu" "${bins[@]}" | xz -T2 --lzma2=preset=3,dict=512MiB >"$gpu/bin.tar.xz"
  (cd "$gpu" && rm -f "${bins[@]}")
  du -sh "$gpu"/*
}

run() {
  local report=${OUT:-/tmp}/gpu-check.md models=/tmp/wick-gpu-models dev=${WICK_GPU_CHECK_DEVICE:-cuda}
  # Full sizes, or a few seconds' worth for a dry run.
  local e2e=(--prompt 1024 --gen 128 --repeats 3)
  local serving=(--input-len 1024 --output-len 128 --num-prompts 256) warmup=128
  local sanitizer=(compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9)
  # Seconds per step: device tests, sanitizer, e2e, serving at concurrency 1, serving above.
  local t_kern=900 t_tests=900 t_san=900 t_e2e=600 t_one=1800 t_many=1800 many=16,64,256 f16_serving=1 t_prof=300
  local budget=0
  SECONDS=0
  case "${1:-}" in
    --quick)
      e2e=(--prompt 32 --gen 4 --repeats 1)
      serving=(--input-len 32 --output-len 4 --num-prompts 2) warmup=1 many=2
      command -v compute-sanitizer >/dev/null || sanitizer=() ;;
    --lease)
      serving=(--input-len 1024 --output-len 128 --num-prompts 32) warmup=8 many=16,64
      t_kern=60 t_tests=50 t_san=40 t_e2e=40 t_one=60 t_many=75 f16_serving=0 t_prof=90
      # The device runner stops a command at 600 s: the later steps run only while they fit.
      budget=570 ;;
  esac
  budget=${WICK_GPU_CHECK_BUDGET:-$budget}
  : >"$report"
  say() { echo "$*" | tee -a "$report"; }
  # Whether a step of up to $1 seconds fits what is left of the budget (always without one).
  fits() {
    [ "${budget:-0}" = 0 ] && return 0
    [ $((SECONDS + $1)) -le "$budget" ] && return 0
    say "(skipped: $2 — ${SECONDS} s of the ${budget} s budget used)"
    return 1
  }
  if [ -e "$gpu/bin.tar.xz" ] && [ ! -x "$gpu/device_path" ]; then
    xz -dc "$gpu/bin.tar.xz" | tar -xf - -C "$gpu"
  fi
  # The CUDA build links cuBLAS, cuRAND, NVRTC and cudart dynamically (CUDA 13 sonames): the
  # host's CUDA wheels (its PyTorch's nvidia-* packages) hold them.
  local libs
  libs=$(python3 -c 'import glob, os, site
dirs = {os.path.dirname(p) for sp in site.getsitepackages() for p in glob.glob(sp + "/nvidia/**/lib*/lib*.so*", recursive=True)}
print(":".join(sorted(dirs)))' 2>/dev/null)
  export LD_LIBRARY_PATH=${libs}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # candle's PTX is JIT-compiled for the GPU once; the driver's cache keeps it for later processes.
  export CUDA_CACHE_MAXSIZE=4294967296
  ldd "$gpu/device_path" | grep -E "not found|cu(da|blas|rand)" | sed 's/^/lib: /' | tee -a "$report"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu: /' | tee -a "$report"
  mkdir -p "$models"
  "$gpu/wick-fixtures" "$models" --gpu-check --llama-src "$gpu/llama-src" >/dev/null || { say "FAIL: could not write the model"; return 1; }

  say "## quantized matmuls on $dev: candle's against the CPU, Wick's against its host twin (tests/device_kernels.rs)"
  WICK_TEST_DEVICE=$dev timeout "$t_kern" "$gpu/device_kernels" --nocapture 2>&1 | tee -a "$report" |
    grep -E "^test |off:|NaN" | head -20
  say "## Wick's fused decode attention on $dev against the f64 reference (tests/device_attention.rs)"
  WICK_TEST_DEVICE=$dev timeout "$t_kern" "$gpu/device_attention" --nocapture 2>&1 | tee -a "$report" |
    grep -E "^test |^\||panicked"
  say "## device-path tests on $dev (tests/device_path.rs, WICK_TEST_DEVICE=$dev)"
  WICK_TEST_DEVICE=$dev timeout "$t_tests" "$gpu/device_path" --test-threads 1 --nocapture 2>&1 | tee -a "$report" |
    grep -E "^test |max \||SKIPPED|panicked"
  say "## compute-sanitizer (memcheck) on the fixture tests"
  WICK_TEST_DEVICE=$dev timeout "$t_san" "${sanitizer[@]}" "$gpu/device_path" --test-threads 1 every_fixture a_ragged a_reused 2>&1 |
    tail -5 | tee -a "$report"
  say "(exit ${PIPESTATUS[0]}: 124 is the step's timeout)"
  # The same with candle's quantized kernels (WICK_DEVICE_QMATMUL=candle: MMVQ up to 8 rows,
  # MMQ above, q8_1 activations; models/layers.rs QMatMulPath) in place of Wick's own (the
  # default): how far each takes the fixtures from the exact path, and a decode's time with each.
  say "## the device-path fixture tests with candle's quantized kernels (WICK_DEVICE_QMATMUL=candle)"
  WICK_DEVICE_QMATMUL=candle WICK_TEST_DEVICE=$dev timeout "$t_tests" "$gpu/device_path" --test-threads 1 --nocapture \
    every_fixture decodes_batched a_ragged 2>&1 | tee -a "$report" | grep -E "^test |max \||panicked"
  WICK_DEVICE_QMATMUL=candle timeout "$t_e2e" "$gpu/e2e" "$models/gpu-lfm2-1.2b-q8_0.gguf" --device "$dev" "${e2e[@]}" 2>&1 |
    tail -2 | sed 's/^/candle kernels: /' | tee -a "$report"
  # Wick's vector kernel at every row count (WICK_DEVICE_QMATMUL=wick-vec) in place of its
  # tensor-core tiles above 8 rows: the same bits (device_kernels checks), so only the prefill's
  # time differs.
  WICK_DEVICE_QMATMUL=wick-vec timeout "$t_e2e" "$gpu/e2e" "$models/gpu-lfm2-1.2b-q8_0.gguf" --device "$dev" "${e2e[@]}" 2>&1 |
    tail -2 | sed 's/^/wick vector kernel only: /' | tee -a "$report"

  # The composed candle ops in place of the fused decode attention (WICK_DEVICE_ATTENTION=composed,
  # models/attention.rs; the fused op is the default): the fixtures' agreement and batch invariance
  # with them, and a decode's time.
  if fits $((t_tests + t_e2e)) "the composed attention's fixture tests and decode"; then
    say "## the device-path fixture tests with the composed decode attention (WICK_DEVICE_ATTENTION=composed)"
    WICK_DEVICE_ATTENTION=composed WICK_TEST_DEVICE=$dev timeout "$t_tests" "$gpu/device_path" --test-threads 1 --nocapture \
      every_fixture decodes_batched a_ragged 2>&1 | tee -a "$report" | grep -E "^test |max \||panicked"
    WICK_DEVICE_ATTENTION=composed timeout "$t_e2e" "$gpu/e2e" "$models/gpu-lfm2-1.2b-q8_0.gguf" --device "$dev" "${e2e[@]}" 2>&1 |
      tail -2 | sed 's/^/composed attention: /' | tee -a "$report"
  fi

  # Where a step's time goes by part of the model (WICK_DEVICE_TRACE: the device synchronized
  # around each part; shares, not speed), for the prefill (TTFT) and the decode: before the
  # optional steps below, which the lease's budget may cut.
  if fits "$t_e2e" "the traced prefill and decode"; then
    say "## where a step's time goes on $dev (WICK_DEVICE_TRACE=1, gpu-lfm2-1.2b-q8_0)"
    WICK_DEVICE_TRACE=1 timeout "$t_e2e" "$gpu/e2e" "$models/gpu-lfm2-1.2b-q8_0.gguf" --device "$dev" \
      --prompt "${e2e[1]}" --gen 16 --repeats 1 2>&1 | sed -n '/^Where/,$p' | tee -a "$report"
  fi

  for f in q8_0 f16; do
    [ "$f" = f16 ] && ! fits "$t_e2e" "the F16 file" && continue
    local m=$models/gpu-lfm2-1.2b-$f.gguf bytes
    bytes=$(stat -c %s "$m")
    say "## $(basename "$m"): $bytes bytes; decode floor at 3.0 TB/s: $(awk -v b="$bytes" 'BEGIN{printf "%.3f", b/3.0e12*1e3}') ms/token"
    timeout "$t_e2e" "$gpu/e2e" "$m" --device "$dev" "${e2e[@]}" 2>&1 | tail -2 | tee -a "$report"
    [ "$f" = f16 ] && [ "$f16_serving" = 0 ] && continue
    # Concurrency 1 alone after its warm-up, then the higher levels (the driver's JIT cache is warm).
    timeout "$t_one" "$gpu/serving" "$m" --device "$dev" "${serving[@]}" --warmup "$warmup" --concurrency 1 --gpu-memory-utilization 0.5 2>&1 |
      tee -a "$report"
    timeout "$t_many" "$gpu/serving" "$m" --device "$dev" "${serving[@]}" --warmup 0 --concurrency "$many" \
      --gpu-memory-utilization 0.5 2>&1 | tee -a "$report"
    if [ "$f" = q8_0 ] && [ -x "$gpu/e2e-base" ] && fits $((t_e2e + t_many)) "the base build's A/B"; then
      # The base build (`build --base REV`) on the same rows, right after: an A/B on one GPU.
      say "## the same on the base build"
      timeout "$t_e2e" "$gpu/e2e-base" "$m" --device "$dev" "${e2e[@]}" 2>&1 | tail -2 | tee -a "$report"
      timeout "$t_many" "$gpu/serving-base" "$m" --device "$dev" "${serving[@]}" --warmup 0 --concurrency "$many" \
        --gpu-memory-utilization 0.5 2>&1 | tee -a "$report"
    fi
  done

  if fits "$t_tests" "the partial-offload tests"; then
    say "## partial offload on $dev (tests/split_layers.rs: -ngl N, the first blocks on the CPU)"
    WICK_TEST_DEVICE=$dev timeout "$t_tests" "$gpu/split_layers" --test-threads 1 --nocapture 2>&1 | tee -a "$report" |
      grep -E "^test |max \||SKIPPED|panicked"
  fi
  # Partial offload (-ngl 8: the last 8 of 16 blocks on the GPU, the rest and the head on the
  # CPU's exact path), as a user short of GPU memory runs it.
  if fits "$t_e2e" "the -ngl 8 decode"; then
    timeout "$t_e2e" "$gpu/e2e" "$models/gpu-lfm2-1.2b-q8_0.gguf" --device "$dev" -ngl 8 "${e2e[@]}" 2>&1 |
      tail -2 | sed 's/^/-ngl 8: /' | tee -a "$report"
  fi

  # Where a decode step's time goes: the GPU's own time per kernel (Nsight Compute, clocks left
  # alone) over a 1-token prompt and 16 decoded tokens, against the same run's wall time.
  if command -v ncu >/dev/null && [ "$dev" != cpu-candle ] && fits $((t_prof + 30)) "the kernel profile"; then
    local m=$models/gpu-lfm2-1.2b-q8_0.gguf
    say "## kernel time per decode step (ncu), gpu-lfm2-1.2b-q8_0"
    timeout 30 "$gpu/e2e" "$m" --device "$dev" --prompt 1 --gen 16 --repeats 1 2>&1 | tail -1 | tee -a "$report"
    timeout "$t_prof" ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
      "$gpu/e2e" "$m" --device "$dev" --prompt 1 --gen 16 --repeats 1 >"${OUT:-/tmp}/ncu-decode.txt" 2>&1
    say "(ncu exit $?: 124 is the step's timeout; summary in ncu-decode.txt)"
  fi
}

case "${1:-}" in
  build) build "${2:-}" "${3:-}" ;;
  run) run "${2:-}" ;;
  *) echo "usage: bash scripts/gpu-check.sh build [--cpu | --base REV] | run [--quick|--lease]"; exit 2 ;;
esac
