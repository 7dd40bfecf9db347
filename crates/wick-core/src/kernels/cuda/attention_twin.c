/* The host twin of decode_attention.cu: the same arithmetic in the same order (each warp's
 * lanes and butterflies, each thread's share of the exponentials, the warps' sums in order),
 * so its results equal the GPU's to the bit. Built for the CPU by build.rs;
 * `kernels::decode_attention` calls it on candle's CPU device. */

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "row_ops.cuh"

#define WA_LANES 32

static float f16_round(float x) { return wr_f16_value(wr_f16_bits(x)); }

/* The butterfly of a warp's 32 lane values (every lane ends with lane 0's sum). */
static float butterfly32(float v[WA_LANES]) {
  for (int off = 16; off > 0; off /= 2) {
    float next[WA_LANES];
    for (int l = 0; l < WA_LANES; l++) next[l] = v[l] + v[l ^ off];
    for (int l = 0; l < WA_LANES; l++) v[l] = next[l];
  }
  return v[0];
}

/* `wick_decode_attention_f16` for query row b and KV head kvh with `threads` threads a block.
 * scratch: the block's [group, t_pad] scores. Returns 0, or -1 for a shape it cannot take. */
int wick_decode_attention_twin(const float* q, const uint16_t* kc, const uint16_t* vc, const uint32_t* reads,
                               const uint32_t* lens, float* scratch, float* out, int b, int kvh, int n_kv, int group,
                               int hd, int t_pad, int reads_stride, int window, float scale, int threads) {
  if (threads % WA_LANES != 0 || threads <= 0 || group <= 0 || group > threads || hd <= 0) return -1;
  const int n_head = n_kv * group, n_warps = threads / WA_LANES;
  const int len = (int)lens[b];
  if (len > t_pad || len < 0) return -1;
  const int from = (window > 0 && len > window) ? len - window : 0;
  const float* qb = q + ((size_t)b * n_head + (size_t)kvh * group) * hd;
  const uint32_t* slots = reads + (size_t)b * reads_stride;
  float* sc = scratch;
  float maxes[1024], sums[1024];
  if (group > 1024) return -1;

  for (int g = 0; g < group; g++) {
    float m = -INFINITY;
    for (int p = from; p < len; p++) {
      const uint16_t* k = kc + ((size_t)slots[p] * n_kv + kvh) * hd;
      float lanes[WA_LANES];
      for (int l = 0; l < WA_LANES; l++) {
        float s = 0.f;
        for (int d = l; d < hd; d += WA_LANES) s += f16_round(qb[g * hd + d]) * wr_f16_value(k[d]);
        lanes[l] = s;
      }
      const float s = butterfly32(lanes) * scale;
      sc[(size_t)g * t_pad + p] = s;
      m = fmaxf(m, s);
    }
    maxes[g] = m;
  }
  for (int g = 0; g < group; g++) {
    float warps[1024 / WA_LANES + 1];
    if (n_warps > 1024 / WA_LANES) return -1;
    for (int w = 0; w < n_warps; w++) {
      float lanes[WA_LANES];
      for (int l = 0; l < WA_LANES; l++) {
        float part = 0.f;
        for (int p = from + w * WA_LANES + l; p < len; p += threads) {
          const float e = wr_expf(sc[(size_t)g * t_pad + p] - maxes[g]);
          sc[(size_t)g * t_pad + p] = e;
          part += e;
        }
        lanes[l] = part;
      }
      warps[w] = butterfly32(lanes);
    }
    float s = 0.f;
    for (int w = 0; w < n_warps; w++) s += warps[w];
    sums[g] = s;
  }
  float* ob = out + ((size_t)b * n_head + (size_t)kvh * group) * hd;
  for (int i = 0; i < group * hd; i++) {
    const int g = i / hd, d = i % hd;
    const float* e = sc + (size_t)g * t_pad;
    float acc = 0.f;
    for (int p = from; p < len; p++) {
      const float pr = f16_round(e[p] / sums[g]);
      acc += pr * wr_f16_value(vc[((size_t)slots[p] * n_kv + kvh) * hd + d]);
    }
    ob[i] = acc;
  }
  return 0;
}
