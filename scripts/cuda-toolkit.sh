#!/usr/bin/env bash
# A CUDA 12.9 toolkit for building the CUDA addon (candle's `cuda` feature), from PyPI's
# nvidia-* wheels only, laid out as one CUDA root in .cache/cuda (gitignored). Needs no GPU and
# no driver: only the build runs here.
#
#   eval "$(bash scripts/cuda-toolkit.sh)"     # installs once, then prints the env
#
# What the build needs, found by building:
#   nvcc (nvidia-cuda-nvcc-cu12: nvcc, ptxas, cicc, crt headers)  candle-kernels' PTX and libmoe.a
#   cuda.h, cuda_fp16.h, cudart (nvidia-cuda-runtime-cu12)        the kernels; cudart is linked
#   cuda/std/limits (nvidia-cuda-cccl-cu12)                       the kernels' sort.cu / moe
#   libnvrtc, libcublas(Lt), libcurand (…-nvrtc/-cublas/-curand)  cudarc links them (candle sets
#                                                                 cudarc's `dynamic-linking`)
#   libcuda.so                                                    a link-time stub, written here
#
# The driver library libcuda is not on PyPI (it comes with the NVIDIA driver). cudarc under
# candle links it (`-lcuda`), so the link needs a stand-in: stubs/libcuda.so, every cu* symbol
# the addon references as an empty function, with the real library's soname libcuda.so.1 — the
# addon then names libcuda.so.1 as needed, and on a machine with the driver the driver's library
# is what loads. The stub is never installed next to the addon: without a driver, loading the
# CUDA addon fails (that is what the control plane's probe child finds out, ts/engine/addon.ts).
#
# CUDA_COMPUTE_CAP=80: there is no GPU here to ask, so the kernels are built for sm_80. candle's
# PTX kernels are JIT-compiled by the driver for the GPU it runs on (PTX for 8.0 runs on 8.0 and
# every later architecture: A100 8.0, L4/RTX 40 8.9, H100/H200 9.0). The static libmoe.a (candle's
# fast GGUF matmuls) gets sm_80 and sm_90 machine code plus compute_80 PTX through $NVCC,
# scripts/nvcc-multiarch.sh: cudaforge alone gives it sm_80 machine code only. Older GPUs
# (Turing, 7.5, and before) are not covered by this build: set CUDA_COMPUTE_CAP before building.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD/.cache/cuda
pins=(
  nvidia-cuda-nvcc==13.0.88
  nvidia-cuda-crt==13.0.88
  nvidia-nvvm==13.0.88
  nvidia-cuda-runtime==13.0.96
  nvidia-cuda-cccl==13.0.85
  nvidia-cuda-nvrtc==13.0.88
  nvidia-cublas==13.0.2.14
  nvidia-curand==10.4.0.35
)
stamp="$root/.pins"
if [ "$(cat "$stamp" 2>/dev/null)" != "${pins[*]}" ]; then
  rm -rf "$root"
  mkdir -p "$root"
  pip install -q --no-deps --only-binary=:all: --target "$root/py" "${pins[@]}" >&2
  # The CUDA 13 wheels share one root, nvidia/cu13: bin/, include/, lib/, nvvm/ as nvcc.profile
  # expects; lib64 -> lib for the tools that look there.
  mv "$root"/py/nvidia/cu13/* "$root/"
  rm -rf "$root/py"
  find "$root" -name '__init__.py' -delete
  find "$root" -name '__pycache__' -type d -prune -exec rm -rf {} +
  ln -s lib "$root/lib64"
  # The linker's -lX wants libX.so; the wheels ship only the versioned names.
  for so in "$root"/lib/lib*.so.*; do
    base=${so%%.so.*}.so
    [ -e "$base" ] || ln -s "$(basename "$so")" "$base"
  done
  # The link-time libcuda stub (see above): every cu* function cuda.h declares, empty.
  mkdir -p "$root/lib/stubs"
  grep -oE '\bCUresult CUDAAPI (cu[A-Za-z0-9_]+)' "$root/include/cuda.h" | awk '{print $3}' | sort -u |
    awk '{print "void " $1 "(void) {}"}' >"$root/lib/stubs/libcuda.c"
  # cuda.h maps cuFoo to cuFoo_v2 (and _ptsz) by macros: the stub defines both spellings.
  sed -n 's/^#define \(cu[A-Za-z0-9_]*\) *\(cu[A-Za-z0-9_]*\)$/\2/p' "$root/include/cuda.h" | sort -u |
    awk '{print "void " $1 "(void) {}"}' >>"$root/lib/stubs/libcuda.c"
  sort -u -o "$root/lib/stubs/libcuda.c" "$root/lib/stubs/libcuda.c"
  cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$root/lib/stubs/libcuda.so" "$root/lib/stubs/libcuda.c"
  "$root/bin/nvcc" --version >/dev/null
  echo "${pins[*]}" >"$stamp"
fi
cat <<EOF
export CUDA_ROOT="$root"
export CUDA_PATH="$root"
export CUDA_HOME="$root"
export PATH="$root/bin:\$PATH"
export CUDA_COMPUTE_CAP=\${CUDA_COMPUTE_CAP:-80}
export NVCC="$PWD/scripts/nvcc-multiarch.sh"
EOF
