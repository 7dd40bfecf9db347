// The device path's RMSNorm (with the residual add before it folded in) and SwiGLU, in ggml's
// CPU arithmetic (row_ops.cuh says why and how the sums are ordered). Built with --fmad=false:
// the plain products and sums stay as written, as in the host twin (row_ops_twin.c).

#include "row_ops.cuh"

// A block per row of n: h = x (+ add), written to `sum_out` when there is an add; y = h·scale·w.
// x, add, sum_out, y: [rows, n]; w: [n]. Block: WR_NORM_THREADS threads.
extern "C" __global__ void __launch_bounds__(WR_NORM_THREADS)
    wick_rms_norm(const float* __restrict__ x, const float* __restrict__ add, const float* __restrict__ w,
                  float* __restrict__ sum_out, float* __restrict__ y, int n, float eps) {
  const long long at = (long long)blockIdx.x * n;
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  double part = 0.0;
  for (int i = t; i < n; i += WR_NORM_THREADS) {
    const float h = add ? x[at + i] + add[at + i] : x[at + i];
    if (add) sum_out[at + i] = h;
    part += (double)(h * h);
  }
  for (int off = 16; off > 0; off /= 2) part += __shfl_xor_sync(0xffffffffu, part, off);
  __shared__ double warps[WR_WARPS];
  if (lane == 0) warps[warp] = part;
  __syncthreads();
  double sum = lane < WR_WARPS ? warps[lane] : 0.0;
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  const float scale = wr_norm_scale(sum, n, eps);
  for (int i = t; i < n; i += WR_NORM_THREADS) {
    const float h = add ? x[at + i] + add[at + i] : x[at + i];
    y[at + i] = h * scale * w[i];
  }
}

// silu(g)·u over rows of n, an element a thread: g and u rows `g_stride` / `u_stride` apart
// (the halves of a stacked gate|up product are read in place); y: [rows, n].
extern "C" __global__ void __launch_bounds__(WR_GLU_THREADS)
    wick_swiglu(const float* __restrict__ g, const float* __restrict__ u, float* __restrict__ y, long long total,
                int n, long long g_stride, long long u_stride) {
  const long long e = (long long)blockIdx.x * WR_GLU_THREADS + threadIdx.x;
  if (e >= total) return;
  const long long r = e / n, i = e % n;
  y[e] = wr_silu_mul(g[r * g_stride + i], u[r * u_stride + i]);
}
