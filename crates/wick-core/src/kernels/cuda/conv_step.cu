// One decode step of LFM2's gated short convolution for a batch of sequences (models/
// shortconv.rs), in one launch where the composed candle ops take about eight: B ⊙ X, the
// window of the state and the new input, the taps summed, C ⊙ conv, and the next state. The
// arithmetic is the composed path's, op for op (each product rounded, then each sum, tap 0
// first; built with --fmad=false so nothing fuses), so the two agree to the bit.
//
// bcx: [B, 3d] the in-projection's rows (B, C, X); prev: [B, L-1, d] the states; taps: [L, d];
// out: [L, B, d]: row 0 the outputs C ⊙ conv, rows 1..L the next states (the window's last
// L-1 inputs), each sequence's a strided [L-1, d] view.
// Grid (ceil(d / blockDim.x), B): a thread per channel of a sequence.

extern "C" __global__ void wick_conv_step(const float* __restrict__ bcx, const float* __restrict__ prev,
                                          const float* __restrict__ taps, float* __restrict__ out, int batch,
                                          int d, int taps_n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
  if (i >= d) return;
  const float* row = bcx + (long long)b * 3 * d;
  const float* state = prev + (long long)b * (taps_n - 1) * d;
  const float v = row[i] * row[2 * d + i];
  float conv = (taps_n > 1 ? state[i] : v) * taps[i];
  for (int k = 1; k < taps_n; k++) {
    const float w = k < taps_n - 1 ? state[(long long)k * d + i] : v;
    conv = conv + w * taps[(long long)k * d + i];
    out[((long long)k * batch + b) * d + i] = w;
  }
  out[(long long)b * d + i] = row[d + i] * conv;
}
