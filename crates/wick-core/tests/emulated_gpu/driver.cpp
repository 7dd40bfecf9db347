// Wick's CUDA kernels, compiled from their own source for the emulated GPU (emu.hpp), against
// the host references the GPU tests use, with the launchers' geometry (kernels/cuda/*.rs):
// - the quantized products and their activation quantizers (qmatvec.cu, qgemm.cu) bit for bit
//   against the host twin (qmatvec_twin.c);
// - the fused decode attention (decode_attention.cu) bit for bit against its twin
//   (attention_twin.c) and within rounding of a sequential f64 reference;
// - the short convolution's decode step (conv_step.cu) bit for bit against the composed ops'
//   arithmetic;
// - the row ops (row_ops.cu: RMSNorm with and without the residual add, SwiGLU and GeGLU over
//   strided rows, the heads' norm-and-RoPE) bit for bit against their twin (row_ops_twin.c).
// Run by tests/emulated_gpu.rs; exits non-zero on the first disagreement.

#include "emu.hpp"

#include <cuda_fp16.h>

#include "../../src/kernels/cuda/conv_step.cu"
#include "../../src/kernels/cuda/decode_attention.cu"
#include "../../src/kernels/cuda/qgemm.cu"
#include "../../src/kernels/cuda/qmatvec.cu"
#include "../../src/kernels/cuda/row_ops.cu"

#include <random>

extern "C" size_t wick_qmv_twin_quantize(int type, const float* x, int k, void* out, int arm);
extern "C" int wick_qmv_twin(int type, const uint8_t* w, size_t row_bytes, int n, int k, const void* act, int m,
                             float* y, size_t ldy);
extern "C" void wick_rms_norm_twin(const float* x, const float* add, const float* w, float* sum_out, float* y,
                                   size_t rows, int n, float eps);
extern "C" void wick_norm_rope_twin(const float* x, const float* w, const float* cos, const float* sin, float* y,
                                    size_t rows, int heads, int hd, float eps, int interleaved);
extern "C" int wick_decode_attention_twin(const float* q, const uint16_t* kc, const uint16_t* vc,
                                          const uint32_t* reads, const uint32_t* lens, float* scratch, float* out,
                                          int b, int kvh, int n_kv, int group, int hd, int t_pad, int reads_stride,
                                          int window, float scale, int threads);
extern "C" void wick_geglu_twin(const float* g, const float* u, const unsigned short* table, float* y, size_t rows,
                                int n, size_t g_stride, size_t u_stride);
extern "C" void wick_swiglu_twin(const float* g, const float* u, float* y, size_t rows, int n, size_t g_stride,
                                 size_t u_stride);

using wick_emu::Buffer;

static std::mt19937 rng(20261129);
static int checks = 0;

[[noreturn]] static void mismatch(const char* what) {
  fprintf(stderr, "MISMATCH: %s\n", what);
  exit(1);
}

static float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); }

// Activations with what the quantizers must round alike: zero blocks, ties at .5 of the
// scale, a block's extremes equal and opposite, large and tiny magnitudes.
static std::vector<float> activations(int m, int k) {
  std::vector<float> x((size_t)m * k);
  for (size_t i = 0; i < x.size(); i++) x[i] = uniform(-2.0f, 2.0f);
  for (int v = 0; v < m; v++) {
    float* r = &x[(size_t)v * k];
    const int b = (v * 7) % (k / 32);
    switch (v % 4) {
      case 1: memset(r + 32 * b, 0, 32 * sizeof(float)); break;
      case 2:
        for (int i = 0; i < 32; i++) r[32 * b + i] = (float)(i - 16) * 0.5f / 127.0f * 3.0f;
        r[32 * b] = 3.0f;
        r[32 * b + 1] = -3.0f;
        break;
      case 3:
        for (int i = 0; i < k; i++) r[i] *= i % 64 < 32 ? 1e4f : 1e-6f;
        break;
    }
  }
  return x;
}

static int block_values(int type) { return wq_k_quant(type) ? 256 : 32; }

// GGUF blocks of random bytes with valid f16 scales (some zero or subnormal).
static std::vector<uint8_t> weights(int type, int n, int k) {
  const int bytes = wq_block_bytes(type), blocks = n * (k / block_values(type));
  std::vector<uint8_t> w((size_t)blocks * bytes);
  for (auto& b : w) b = (uint8_t)rng();
  auto put = [](uint8_t* p, float f) {
    const uint16_t h = wq_f32_to_f16(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
  };
  for (int i = 0; i < blocks; i++) {
    uint8_t* b = &w[(size_t)i * bytes];
    const int pick = (int)(rng() % 16);
    const float d = pick == 0 ? 0.0f : pick == 1 ? 3e-6f : uniform(-0.05f, 0.05f);
    switch (type) {
      case WQ_Q4_1: case WQ_Q5_1: case WQ_Q4_K: case WQ_Q5_K:
        put(b, fabsf(d));
        put(b + 2, uniform(0.0f, 0.02f));
        break;
      case WQ_Q6_K: put(b + 208, d); break;
      default: put(b, d); break;
    }
  }
  return w;
}

static size_t act_row(int type, int k) { return wq_k_quant(type) ? (size_t)(k / 256) * sizeof(wq_a256) : (size_t)(k / 32) * sizeof(wq_a32); }

// The launcher's first kernel: m rows of k values to activation blocks on the GPU.
static std::vector<uint8_t> quantize_on_gpu(int type, const std::vector<float>& x, int m, int k, int arm) {
  Buffer<float> dx(x);
  Buffer<uint8_t> out(m * act_row(type, k));
  const int nblk = k / block_values(type);
  if (wq_k_quant(type)) {
    wick_emu::launch(dim3(nblk, m), dim3(32), 0, [&] { wick_qmv_quantize_q8k(dx.ptr, (wq_a256*)out.ptr, k, nblk, arm); });
  } else {
    wick_emu::launch(dim3(nblk, m), dim3(32), 0, [&] { wick_qmv_quantize_q8(dx.ptr, (wq_a32*)out.ptr, k, nblk, arm); });
  }
  return out.read();
}

// Each weight type's two product kernels (their signatures are one).
using Product = void (*)(const uint8_t*, const void*, float*, int, int, long long, int);
struct TypeKernels {
  int type;
  const char* name;
  Product vec, gemm;
};
static const TypeKernels kKernels[] = {
    {WQ_Q4_0, "q4_0", wick_qmv_q4_0, wick_qgemm_q4_0}, {WQ_Q4_1, "q4_1", wick_qmv_q4_1, wick_qgemm_q4_1},
    {WQ_Q5_0, "q5_0", wick_qmv_q5_0, wick_qgemm_q5_0}, {WQ_Q5_1, "q5_1", wick_qmv_q5_1, wick_qgemm_q5_1},
    {WQ_Q8_0, "q8_0", wick_qmv_q8_0, wick_qgemm_q8_0}, {WQ_Q4_K, "q4_K", wick_qmv_q4_k, wick_qgemm_q4_k},
    {WQ_Q5_K, "q5_K", wick_qmv_q5_k, wick_qgemm_q5_k}, {WQ_Q6_K, "q6_K", wick_qmv_q6_k, wick_qgemm_q6_k},
};

static const TypeKernels& kernels_of(int type) {
  for (const auto& k : kKernels)
    if (k.type == type) return k;
  mismatch("a weight type without kernels");
}

enum Kernel { VEC, GEMM };

// One product by `kernel` (qmatvec.cu's warp per row, or qgemm.cu's tensor-core tiles) against
// the twin, bit for bit, its activations quantized on the GPU against the twin's too.
static void product(Kernel kernel, int type, int n, int k, int m, int arm) {
  char what[160];
  snprintf(what, sizeof what, "%s %s n=%d k=%d m=%d arm=%d", kernel == VEC ? "qmatvec" : "qgemm", kernels_of(type).name, n, k,
           m, arm);
  const std::vector<float> x = activations(m, k);
  const std::vector<uint8_t> act = quantize_on_gpu(type, x, m, k, arm);
  std::vector<uint8_t> twin_act(act.size());
  for (int v = 0; v < m; v++)
    wick_qmv_twin_quantize(type, &x[(size_t)v * k], k, &twin_act[v * act_row(type, k)], arm);
  if (memcmp(act.data(), twin_act.data(), act.size()) != 0) mismatch((std::string("activations, ") + what).c_str());

  const std::vector<uint8_t> w = weights(type, n, k);
  const long long row_bytes = (long long)(k / block_values(type)) * wq_block_bytes(type);
  std::vector<float> want((size_t)m * n);
  if (wick_qmv_twin(type, w.data(), row_bytes, n, k, twin_act.data(), m, want.data(), n) != 0) mismatch(what);

  Buffer<uint8_t> dw(w), da(act);
  Buffer<float> dst((size_t)m * n);
  if (kernel == VEC) {
    const unsigned rows_per_block = 4, chunks = (m + WQ_MAX_VEC - 1) / WQ_MAX_VEC;
    wick_emu::launch(dim3((n + rows_per_block - 1) / rows_per_block * chunks), dim3(32, rows_per_block), 0,
                     [&] { kernels_of(type).vec(dw.ptr, da.ptr, dst.ptr, n, k / 32, row_bytes, m); });
  } else {
    const unsigned tiles = (n + WQ_GEMM_ROWS - 1) / WQ_GEMM_ROWS * ((m + WQ_GEMM_VECS - 1) / WQ_GEMM_VECS);
    wick_emu::launch(dim3(tiles), dim3(WQ_GEMM_THREADS), 0,
                     [&] { kernels_of(type).gemm(dw.ptr, da.ptr, dst.ptr, n, k / 32, row_bytes, m); });
  }
  const std::vector<float> got = dst.read();
  for (size_t i = 0; i < got.size(); i++) {
    if (memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      fprintf(stderr, "row %zu col %zu: kernel %.9g, twin %.9g\n", i / n, i % n, got[i], want[i]);
      mismatch(what);
    }
  }
  checks++;
  printf("%-40s %zu products bit-equal to the twin\n", what, got.size());
}

// The fused decode attention against f64 arithmetic in the kernel's steps: the query and each
// probability rounded to f16, the rest exact; the kernel's f32 sums differ by their rounding.
static void same_bits(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  if (got.size() != want.size() || memcmp(got.data(), want.data(), got.size() * sizeof(float)) != 0) mismatch(what);
}

// `prompt`: b query rows of one sequence, all reading its one row of slots, row i at causal length
// t_pad - b + i + 1 (a prompt's rows after a cached prefix); else b sequences of ragged lengths.
static void attention(int b, int n_kv, int group, int hd, int t_pad, int window, bool prompt = false) {
  char what[160];
  snprintf(what, sizeof what, "B=%d n_kv=%d group=%d hd=%d t_pad=%d window=%d%s", b, n_kv, group, hd, t_pad, window,
           prompt ? " prompt" : "");
  const int n_head = n_kv * group, n_slots = b * t_pad + 5;
  std::vector<float> q((size_t)b * n_head * hd);
  for (auto& v : q) v = uniform(-1.0f, 1.0f);
  std::vector<__half> kc((size_t)n_slots * n_kv * hd), vc(kc.size());
  for (auto& v : kc) v = __float2half(uniform(-1.0f, 1.0f));
  for (auto& v : vc) v = __float2half(uniform(-1.0f, 1.0f));
  std::vector<uint32_t> slots(n_slots), reads((size_t)b * t_pad), lens(b);
  for (int i = 0; i < n_slots; i++) slots[i] = i;
  std::shuffle(slots.begin(), slots.end(), rng);
  for (size_t i = 0; i < reads.size(); i++) reads[i] = slots[i];
  for (int s = 0; s < b; s++) lens[s] = s == 0 ? t_pad : 1 + (uint32_t)(rng() % t_pad);
  // A prompt's rows all read row 0 of the slots.
  const int stride = prompt ? 0 : t_pad;
  if (prompt)
    for (int s = 0; s < b; s++) lens[s] = (uint32_t)(t_pad - b + s + 1);
  const float scale = 1.0f / sqrtf((float)hd);

  Buffer<float> dq(q), scratch((size_t)b * n_head * t_pad), out((size_t)b * n_head * hd);
  // The kernel reads the pages as f16 bits.
  std::vector<uint16_t> kbits(kc.size()), vbits(vc.size());
  memcpy(kbits.data(), kc.data(), kc.size() * sizeof(uint16_t));
  memcpy(vbits.data(), vc.data(), vc.size() * sizeof(uint16_t));
  Buffer<uint16_t> dk(kbits), dv(vbits);
  Buffer<uint32_t> dr(reads), dl(lens);
  const int threads = 128, n_warps = threads / 32;
  const size_t shared = (size_t)(group * hd + n_warps * group + 2 * group) * sizeof(float);
  wick_emu::launch(dim3(b, n_kv), dim3(threads), shared, [&] {
    wick_decode_attention_f16(dq.ptr, dk.ptr, dv.ptr, dr.ptr, dl.ptr, scratch.ptr, out.ptr, n_kv, group, hd, t_pad,
                              stride, window, scale);
  });
  const std::vector<float> got = out.read();
  // The host twin, block by block: the same bits.
  std::vector<float> twin((size_t)b * n_head * hd), twin_scratch((size_t)group * t_pad);
  for (int s = 0; s < b; s++)
    for (int kvh = 0; kvh < n_kv; kvh++)
      if (wick_decode_attention_twin(q.data(), kbits.data(), vbits.data(), reads.data(), lens.data(),
                                     twin_scratch.data(), twin.data(), s, kvh, n_kv, group, hd, t_pad, stride, window,
                                     scale, threads) != 0)
        mismatch((std::string("decode attention twin refused, ") + what).c_str());
  same_bits(got, twin, (std::string("decode attention against its twin, ") + what).c_str());
  double worst = 0.0;
  for (int s = 0; s < b; s++) {
    const int len = (int)lens[s], from = window > 0 && len > window ? len - window : 0;
    for (int h = 0; h < n_head; h++) {
      const int kvh = h / group;
      const float* qh = &q[((size_t)s * n_head + h) * hd];
      std::vector<double> e(len, 0.0);
      double mx = -INFINITY, sum = 0.0;
      for (int p = from; p < len; p++) {
        const size_t at = ((size_t)reads[(size_t)s * stride + p] * n_kv + kvh) * hd;
        double dot = 0.0;
        for (int d = 0; d < hd; d++) dot += (double)__half2float(__float2half(qh[d])) * (double)__half2float(kc[at + d]);
        e[p] = dot * scale;
        mx = std::max(mx, e[p]);
      }
      for (int p = from; p < len; p++) sum += e[p] = exp(e[p] - mx);
      for (int d = 0; d < hd; d++) {
        double acc = 0.0, mag = 0.0;
        for (int p = from; p < len; p++) {
          const double pr = (double)__half2float(__float2half((float)(e[p] / sum)));
          const double v =
              (double)__half2float(vc[((size_t)reads[(size_t)s * stride + p] * n_kv + kvh) * hd + d]);
          acc += pr * v;
          mag += fabs(pr * v);
        }
        const double err = fabs((double)got[((size_t)s * n_head + h) * hd + d] - acc) / (mag + 1e-30);
        if (!(err <= 2e-3)) {
          fprintf(stderr, "seq %d head %d dim %d: kernel %.9g, reference %.9g\n", s, h, d,
                  got[((size_t)s * n_head + h) * hd + d], acc);
          mismatch(what);
        }
        worst = std::max(worst, err);
      }
    }
  }
  checks++;
  printf("decode attention %-40s bit-equal to the twin; worst error %.2e of Σ|p·v|\n", what, worst);
}

// The conv step against the composed candle ops' arithmetic (kernels/conv_step.rs `composed`):
// v = b·x, the window [state, v], conv = w₀·t₀ then conv + wₖ·tₖ, out = c·conv, each op rounded.
static void conv_step(int batch, int d, int l) {
  char what[96];
  snprintf(what, sizeof what, "B=%d d=%d L=%d", batch, d, l);
  std::vector<float> bcx((size_t)batch * 3 * d), prev((size_t)batch * (l - 1) * d), taps((size_t)l * d);
  for (auto* v : {&bcx, &prev, &taps})
    for (auto& x : *v) x = uniform(-1.5f, 1.5f);
  Buffer<float> dbcx(bcx), dprev(prev), dtaps(taps), out((size_t)l * batch * d);
  const unsigned threads = 128;
  wick_emu::launch(dim3((d + threads - 1) / threads, batch), dim3(threads), 0,
                   [&] { wick_conv_step(dbcx.ptr, dprev.ptr, dtaps.ptr, out.ptr, batch, d, l); });
  const std::vector<float> got = out.read();
  for (int b = 0; b < batch; b++) {
    for (int i = 0; i < d; i++) {
      std::vector<float> window(l);
      for (int k = 0; k < l - 1; k++) window[k] = prev[((size_t)b * (l - 1) + k) * d + i];
      const float v = bcx[(size_t)b * 3 * d + i] * bcx[(size_t)b * 3 * d + 2 * d + i];
      window[l - 1] = v;
      float conv = window[0] * taps[i];
      for (int k = 1; k < l; k++) {
        const float term = window[k] * taps[(size_t)k * d + i];
        conv = conv + term;
      }
      const float want = bcx[(size_t)b * 3 * d + d + i] * conv;
      if (memcmp(&got[(size_t)b * d + i], &want, 4) != 0) mismatch((std::string("conv step output, ") + what).c_str());
      for (int k = 1; k < l; k++)
        if (memcmp(&got[((size_t)k * batch + b) * d + i], &window[k], 4) != 0)
          mismatch((std::string("conv step state, ") + what).c_str());
    }
  }
  checks++;
  printf("conv step %-30s bit-equal to the composed ops\n", what);
}


// RMSNorm (row_ops.cu) with the launcher's geometry (kernels/cuda/row_ops.rs): a block of
// WR_NORM_THREADS per row. Rows of mixed scales (1e-3 … 1e3) so the f64 shares matter.
static void rms_norm(int rows, int n, bool with_add) {
  char what[96];
  snprintf(what, sizeof what, "rows=%d n=%d%s", rows, n, with_add ? " with the add" : "");
  std::vector<float> x((size_t)rows * n), add(x.size()), w(n);
  for (size_t i = 0; i < x.size(); i++) x[i] = uniform(-2.0f, 2.0f) * (i % 7 == 0 ? 1e3f : i % 5 == 0 ? 1e-3f : 1.0f);
  for (auto& v : add) v = uniform(-1.0f, 1.0f);
  for (auto& v : w) v = uniform(0.5f, 1.5f);
  Buffer<float> dx(x), dadd(add), dw(w), sums(x.size()), norms(x.size());
  const float eps = 1e-5f;
  wick_emu::launch(dim3(rows), dim3(WR_NORM_THREADS), 0, [&] {
    wick_rms_norm(dx.ptr, with_add ? dadd.ptr : nullptr, dw.ptr, sums.ptr, norms.ptr, n, eps);
  });
  std::vector<float> want_sums(x.size()), want(x.size());
  wick_rms_norm_twin(x.data(), with_add ? add.data() : nullptr, w.data(), with_add ? want_sums.data() : nullptr,
                     want.data(), rows, n, eps);
  same_bits(norms.read(), want, (std::string("rms_norm, ") + what).c_str());
  if (with_add) same_bits(sums.read(), want_sums, (std::string("rms_norm sums, ") + what).c_str());
  checks++;
  printf("rms_norm %-34s bit-equal to the twin\n", what);
}

// SwiGLU (row_ops.cu) over the halves of a stacked [rows, 2n] product, as the FFN reads them, with
// gates across expf's ranges (overflow and underflow of the exponent included).
static void swiglu(int rows, int n) {
  char what[96];
  snprintf(what, sizeof what, "rows=%d n=%d", rows, n);
  std::vector<float> gu((size_t)rows * 2 * n);
  for (size_t i = 0; i < gu.size(); i++) gu[i] = uniform(-12.0f, 12.0f) * (i % 11 == 0 ? 10.0f : 1.0f);
  if (gu.size() > 4) gu[0] = -100.0f, gu[1] = 95.0f, gu[2] = 0.0f, gu[3] = -0.0f;
  Buffer<float> dgu(gu), out((size_t)rows * n);
  const long long total = (long long)rows * n;
  wick_emu::launch(dim3((unsigned)((total + WR_GLU_THREADS - 1) / WR_GLU_THREADS)), dim3(WR_GLU_THREADS), 0,
                   [&] { wick_swiglu(dgu.ptr, dgu.ptr + n, out.ptr, total, n, 2LL * n, 2LL * n); });
  std::vector<float> want((size_t)rows * n);
  wick_swiglu_twin(gu.data(), gu.data() + n, want.data(), rows, n, 2 * n, 2 * n);
  same_bits(out.read(), want, (std::string("swiglu, ") + what).c_str());
  checks++;
  printf("swiglu %-36s bit-equal to the twin\n", what);
}

// The heads' norm-and-RoPE (row_ops.cu): a warp per head's row, four rows a block, the last
// block partly idle when the rows do not fill it.
static void norm_rope(int n, int heads, int hd, bool with_norm, bool interleaved) {
  char what[96];
  snprintf(what, sizeof what, "n=%d heads=%d hd=%d%s%s", n, heads, hd, with_norm ? " normed" : "",
           interleaved ? " interleaved" : "");
  const int rows = n * heads, half = hd / 2;
  std::vector<float> x((size_t)rows * hd), w(hd), cs((size_t)n * half), sn((size_t)n * half);
  for (auto& v : x) v = uniform(-3.0f, 3.0f);
  for (auto& v : w) v = uniform(0.5f, 1.5f);
  for (size_t i = 0; i < cs.size(); i++) {
    const float a = uniform(-900.0f, 900.0f);
    cs[i] = cosf(a);
    sn[i] = sinf(a);
  }
  Buffer<float> dx(x), dw(w), dc(cs), ds(sn), out(x.size());
  const float eps = 1e-6f;
  const int per_block = WR_ROPE_THREADS / 32;
  wick_emu::launch(dim3((rows + per_block - 1) / per_block), dim3(WR_ROPE_THREADS), 0, [&] {
    wick_norm_rope(dx.ptr, with_norm ? dw.ptr : nullptr, dc.ptr, ds.ptr, out.ptr, rows, heads, hd, eps, interleaved);
  });
  std::vector<float> want(x.size());
  wick_norm_rope_twin(x.data(), with_norm ? w.data() : nullptr, cs.data(), sn.data(), want.data(), rows, heads, hd,
                      eps, interleaved);
  same_bits(out.read(), want, (std::string("norm_rope, ") + what).c_str());
  checks++;
  printf("norm_rope %-33s bit-equal to the twin\n", what);
}

// GeGLU (row_ops.cu) by a table of random f16 bits, gates across the f16 range (subnormals,
// overflow, the ±10 cut-offs), over the halves of a stacked product.
static void geglu(int rows, int n) {
  char what[96];
  snprintf(what, sizeof what, "rows=%d n=%d", rows, n);
  std::vector<unsigned short> table(1 << 16);
  for (auto& t : table) t = (unsigned short)(rng() & 0xffff);
  std::vector<float> gu((size_t)rows * 2 * n);
  const float scales[] = {12.0f, 1.0f, 1e-5f, 1e5f};
  for (size_t i = 0; i < gu.size(); i++) gu[i] = uniform(-1.0f, 1.0f) * scales[i % 4];
  if (gu.size() > 4) gu[0] = -10.0f, gu[1] = 10.0f, gu[2] = -0.0f, gu[3] = 6.0e-8f;
  Buffer<float> dgu(gu), out((size_t)rows * n);
  Buffer<unsigned short> dt(table);
  const long long total = (long long)rows * n;
  wick_emu::launch(dim3((unsigned)((total + WR_GLU_THREADS - 1) / WR_GLU_THREADS)), dim3(WR_GLU_THREADS), 0,
                   [&] { wick_geglu(dgu.ptr, dgu.ptr + n, dt.ptr, out.ptr, total, n, 2LL * n, 2LL * n); });
  std::vector<float> want((size_t)rows * n);
  wick_geglu_twin(gu.data(), gu.data() + n, table.data(), want.data(), rows, n, 2 * n, 2 * n);
  same_bits(out.read(), want, (std::string("geglu, ") + what).c_str());
  checks++;
  printf("geglu %-37s bit-equal to the twin\n", what);
}

int main() {
  const int small[] = {WQ_Q4_0, WQ_Q4_1, WQ_Q5_0, WQ_Q5_1, WQ_Q8_0};
  const int kquant[] = {WQ_Q4_K, WQ_Q5_K, WQ_Q6_K};
  int arm = 0;
  for (int type : small) {
    // k = 1056: 33 units, a second pass over the row with one lane live.
    for (int k : {32, 1056})
      for (int m : {1, 8, 11}) product(VEC, type, 6, k, m, arm ^= 1);
    // Two tiles each way, both partial; k = 2112: 66 units, leaves of three units and of two.
    for (int k : {32, 2112}) product(GEMM, type, 70, k, 20, arm ^= 1);
  }
  for (int type : kquant) {
    // k = 2304: 72 sub-blocks, a third pass with one block (eight lanes) live.
    for (int k : {256, 2304})
      for (int m : {1, 9}) product(VEC, type, 5, k, m, arm ^= 1);
    // k = 2304: 9 blocks, leaf 0 of three blocks, leaves 8, 16, 24 of two.
    for (int k : {256, 2304}) product(GEMM, type, 70, k, 17, arm ^= 1);
  }
  conv_step(1, 2048, 3);
  conv_step(5, 300, 3);
  conv_step(2, 130, 4);
  // A decode row of LFM2-1.2B's width; rows narrower than the block (a head's Q/K norm); a width
  // that leaves threads short a value; several rows.
  rms_norm(1, 2048, false);
  rms_norm(1, 2048, true);
  rms_norm(6, 64, false);
  // Many rows: an f32 square's rounding (or its absence) moves some rows' f32 mean.
  rms_norm(256, 64, false);
  rms_norm(3, 300, true);
  rms_norm(2, 8192, true);
  swiglu(1, 8192);
  swiglu(3, 300);
  geglu(1, 2048);
  geglu(3, 300);
  // LFM2's Q and K heads (64, rows a block's multiple and not), a head of 80 (a lane with one pair
  // past the first 32), RoPE alone, interleaved pairs.
  norm_rope(3, 32, 64, true, false);
  norm_rope(3, 7, 64, true, false);
  norm_rope(2, 3, 80, true, true);
  norm_rope(2, 5, 128, false, false);
  attention(3, 2, 3, 64, 40, 0);
  attention(2, 1, 4, 128, 150, 0);
  attention(3, 2, 1, 64, 70, 16);
  attention(1, 4, 2, 80, 9, 0);
  // Long rows: enough probabilities that an ulp in a sum or an exponential crosses an f16
  // rounding boundary somewhere.
  attention(3, 2, 4, 64, 700, 0);
  // A prompt's rows reading one sequence's slots, with and without a window.
  attention(9, 2, 3, 64, 40, 0, true);
  attention(6, 1, 2, 128, 100, 16, true);
  printf("%d kernel checks passed on the emulated GPU\n", checks);
  return 0;
}
