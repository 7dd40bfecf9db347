#!/usr/bin/env bash
# nvcc as candle's kernel build calls it (cudaforge finds it through $NVCC: scripts/cuda-toolkit.sh).
# cudaforge compiles for one architecture, CUDA_COMPUTE_CAP's, as machine code only
# (`-gencode=arch=compute_80,code=sm_80`): candle's statically linked kernels (its fast GGUF
# matmuls, MMVQ and MMQ, in libmoe.a) then have no image for any other GPU, fail to launch with
# the error unchecked, and leave uninitialised memory as their product — seen on an H100
# (tests/device_kernels.rs). Every object compile here also gets sm_90 machine code (H100/H200)
# and compute_80 PTX, which the driver JIT-compiles on any later GPU; a `--ptx` compile (one
# architecture only, JIT-compiled anyway) and the archive step pass unchanged.
real="${CUDA_HOME:?CUDA_HOME: eval \"\$(bash scripts/cuda-toolkit.sh)\" first}/bin/nvcc"
for a in "$@"; do
  if [ "$a" = -c ]; then
    exec "$real" "$@" -gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_80,code=compute_80
  fi
done
exec "$real" "$@"
