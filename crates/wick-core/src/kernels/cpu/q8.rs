//! Activation rows quantized the way ggml's x86 backend does before its integer dot products:
//! q8_0 / q8_1 (blocks of 32) and q8_K (blocks of 256); on aarch64 as its NEON backend does
//! (q8_0 / q8_1 scaled by `1 / d`: `inverse_scale`; q8_K rounding the exact products:
//! `q8k_round`). Every quantized-weight kernel reads
//! these, so a row is quantized once per matmul whatever the weight layout.

use half::f16;

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use super::feats::{isa, Isa};
use crate::runtime::pool::{self, SyncPtr};

/// One q8_0 / q8_1 activation block: the f16 scale (as f32), the q8_1 sum term, the quants
/// and their integer sum.
pub struct Act32 {
    pub d: f32,
    pub s: f32,
    pub qs: [i8; 32],
    pub qsum: i32,
}

/// One q8_K activation block (f32 scale) with the integer sum of each 32-value sub-block
/// and ggml's `bsums` (each 16-value group, as i16 for the AVX2 `madd`s).
pub struct Act256 {
    pub d: f32,
    pub qs: [i8; 256],
    pub sums: [i32; 8],
    pub bsums: [i16; 16],
    /// Each 64-value pair's two sub-block sums packed as i16 (low, high) in one i32, for the
    /// Q4_K kernels' `madd` with the mins (|Σ| ≤ 32·127 fits i16).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub pair_sums: [i32; 4],
}

impl Act256 {
    fn new(d: f32, qs: [i8; 256], sums: [i32; 8], bsums: [i16; 16]) -> Self {
        let pair_sums = std::array::from_fn(|p| {
            (sums[2 * p] as i16 as u16 as i32) | ((sums[2 * p + 1] as i16 as i32) << 16)
        });
        Act256 { d, qs, sums, bsums, pair_sums }
    }
}

/// Whether the AVX-512 quantizers run here.
#[cfg(target_arch = "x86_64")]
fn wide() -> bool {
    isa() == Isa::Avx512Vnni
}

/// q8_0 / q8_1 over blocks of 32, as ggml's AVX2 `quantize_row_q8_0` / `_q8_1`.
pub fn quantize_q8(x: &[f32]) -> Vec<Act32> {
    #[cfg(target_arch = "x86_64")]
    if wide() {
        // SAFETY: AVX-512 F/BW/VL checked.
        return unsafe { avx512::q8_row(x) };
    }
    #[cfg(target_arch = "aarch64")]
    if isa() >= Isa::Neon {
        return x.chunks_exact(32).map(neon::q8_block).collect();
    }
    x.chunks_exact(32).map(q8_block).collect()
}

/// q8_K over blocks of 256, as `quantize_row_q8_K_ref` (scale from the signed extreme).
pub fn quantize_q8k(x: &[f32]) -> Vec<Act256> {
    #[cfg(target_arch = "x86_64")]
    if wide() {
        // SAFETY: AVX-512 F/BW/VL checked.
        return unsafe { avx512::q8k_row(x) };
    }
    #[cfg(target_arch = "aarch64")]
    if isa() >= Isa::Neon {
        return x.chunks_exact(256).map(neon::q8k_block).collect();
    }
    x.chunks_exact(256).map(q8k_block).collect()
}

/// The multiplier a q8_0 / q8_1 block's values are rounded from (one rule with the KV cache's).
use crate::cache::q8_0_inverse_scale as inverse_scale;

/// One q8_0 / q8_1 block (portable).
fn q8_block(b: &[f32]) -> Act32 {
    let max = b.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = max / 127.0;
    let id = inverse_scale(max, d);
    let mut qs = [0i8; 32];
    let mut sum = 0i32;
    for (q, &v) in qs.iter_mut().zip(b) {
        *q = (v * id).round_ties_even() as i8;
        sum += *q as i32;
    }
    Act32 { d: f16::from_f32(d).to_f32(), s: f16::from_f32(d * sum as f32).to_f32(), qs, qsum: sum }
}

/// A q8_K value `iscale·v` rounded to nearest even. ggml's x86 build rounds the f32 product;
/// its aarch64 build rounds the exact one: `quantize_row_q8_K_ref`'s `nearest_int(iscale·x)`
/// (`x + 1.5·2²³`, then the low mantissa bits) is contracted there into one
/// `fma(iscale, x, 1.5·2²³)`, as in ggml's `quantize_mat_q8_K` for its repacked GEMMs.
#[inline(always)]
fn q8k_round(iscale: f32, v: f32) -> i32 {
    if cfg!(target_arch = "aarch64") {
        (iscale.mul_add(v, 12_582_912.0).to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
    } else {
        (iscale * v).round_ties_even() as i32
    }
}

/// One q8_K block (portable).
fn q8k_block(b: &[f32]) -> Act256 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in b {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    let mut qs = [0i8; 256];
    if amax == 0.0 {
        return Act256::new(0.0, qs, [0; 8], [0; 16]);
    }
    let iscale = -127.0 / max;
    for (q, &v) in qs.iter_mut().zip(b) {
        *q = q8k_round(iscale, v).min(127) as i8;
    }
    let mut sums = [0i32; 8];
    for (j, s) in sums.iter_mut().enumerate() {
        *s = qs[j * 32..j * 32 + 32].iter().map(|&q| q as i32).sum();
    }
    // |Σ| ≤ 16·127 fits i16.
    let bsums = std::array::from_fn(|g| qs[g * 16..g * 16 + 16].iter().map(|&q| q as i16).sum());
    Act256::new(1.0 / iscale, qs, sums, bsums)
}

/// The same quantizers on AVX-512: the maxima are exact whatever the order, the products and
/// round-half-to-even conversions are the scalar ones lane by lane.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use half::f16;

    use super::{Act256, Act32};

    // Whole rows in one feature-enabled function, so the block quantizers inline into the
    // loop (a call per block returning its 44 bytes through the stack cost more than the
    // quantizing).
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
    pub unsafe fn q8_row(x: &[f32]) -> Vec<Act32> {
        let mut out = Vec::with_capacity(x.len() / 32);
        for b in x.chunks_exact(32) {
            out.push(q8_block(b));
        }
        out
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
    pub unsafe fn q8k_row(x: &[f32]) -> Vec<Act256> {
        let mut out = Vec::with_capacity(x.len() / 256);
        for b in x.chunks_exact(256) {
            out.push(q8k_block(b));
        }
        out
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
    pub unsafe fn q8_block(b: &[f32]) -> Act32 {
        let abs = _mm512_set1_epi32(0x7FFF_FFFF);
        let v = [_mm512_loadu_ps(b.as_ptr()), _mm512_loadu_ps(b.as_ptr().add(16))];
        let a =
            [_mm512_and_ps(v[0], _mm512_castsi512_ps(abs)), _mm512_and_ps(v[1], _mm512_castsi512_ps(abs))];
        let max = _mm512_reduce_max_ps(_mm512_max_ps(a[0], a[1])).max(0.0);
        let d = max / 127.0;
        let id = super::inverse_scale(max, d);
        let mut qs = [0i8; 32];
        let mut sum = 0i32;
        for h in 0..2 {
            let q = _mm512_cvtps_epi32(_mm512_mul_ps(v[h], _mm512_set1_ps(id)));
            sum += _mm512_reduce_add_epi32(q);
            _mm_storeu_si128(qs.as_mut_ptr().add(16 * h) as *mut __m128i, _mm512_cvtepi32_epi8(q));
        }
        Act32 { d: f16::from_f32(d).to_f32(), s: f16::from_f32(d * sum as f32).to_f32(), qs, qsum: sum }
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")]
    pub unsafe fn q8k_block(b: &[f32]) -> Act256 {
        let abs = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFF_FFFF));
        let mut vmax = _mm512_setzero_ps();
        for i in 0..16 {
            vmax = _mm512_max_ps(vmax, _mm512_and_ps(_mm512_loadu_ps(b.as_ptr().add(16 * i)), abs));
        }
        let amax = _mm512_reduce_max_ps(vmax);
        let mut qs = [0i8; 256];
        if amax == 0.0 || amax.is_nan() {
            return Act256::new(0.0, qs, [0; 8], [0; 16]);
        }
        // The scalar code keeps the first value of largest magnitude.
        let mut max = 0f32;
        for i in 0..16 {
            let a = _mm512_and_ps(_mm512_loadu_ps(b.as_ptr().add(16 * i)), abs);
            let m = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(a, _mm512_set1_ps(amax));
            if m != 0 {
                max = b[16 * i + m.trailing_zeros() as usize];
                break;
            }
        }
        let iscale = -127.0 / max;
        let mut bsums = [0i16; 16];
        for i in 0..16 {
            let x = _mm512_mul_ps(_mm512_set1_ps(iscale), _mm512_loadu_ps(b.as_ptr().add(16 * i)));
            let q = _mm512_min_epi32(_mm512_cvtps_epi32(x), _mm512_set1_epi32(127));
            bsums[i] = _mm512_reduce_add_epi32(q) as i16;
            _mm_storeu_si128(qs.as_mut_ptr().add(16 * i) as *mut __m128i, _mm512_cvtepi32_epi8(q));
        }
        let sums = std::array::from_fn(|j| bsums[2 * j] as i32 + bsums[2 * j + 1] as i32);
        Act256::new(1.0 / iscale, qs, sums, bsums)
    }
}

/// The same quantizers on NEON: maxima by `fmaxnm` (NaN skipped, as `f32::max` does), the
/// products and round-half-to-even conversions the scalar ones, lane by lane.
#[cfg(target_arch = "aarch64")]
mod neon {
    use std::arch::aarch64::*;

    use half::f16;

    use super::{Act256, Act32};

    /// Four lanes' i32 quants narrowed (saturating, as `as i8`) into `out`.
    #[inline(always)]
    fn narrow(q: [int32x4_t; 4], out: &mut [i8]) {
        // SAFETY: NEON is baseline; `out` holds 16 bytes (callers pass 16-byte chunks).
        unsafe {
            let lo = vcombine_s16(vqmovn_s32(q[0]), vqmovn_s32(q[1]));
            let hi = vcombine_s16(vqmovn_s32(q[2]), vqmovn_s32(q[3]));
            vst1_s8(out.as_mut_ptr(), vqmovn_s16(lo));
            vst1_s8(out.as_mut_ptr().add(8), vqmovn_s16(hi));
        }
    }

    /// Sixteen values at `b` times `s`, rounded half to even.
    #[inline(always)]
    fn scaled(b: &[f32], s: f32) -> [int32x4_t; 4] {
        debug_assert!(b.len() >= 16);
        // SAFETY: NEON is baseline; `b` holds 16 values.
        std::array::from_fn(|i| unsafe { vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(b.as_ptr().add(4 * i)), s)) })
    }

    /// Sixteen values at `b` times `s`, the exact products rounded half to even (`q8k_round`:
    /// `fma(s, v, 1.5·2²³) − 1.5·2²³` is that integer, exactly).
    #[inline(always)]
    fn scaled_exact(b: &[f32], s: f32) -> [int32x4_t; 4] {
        debug_assert!(b.len() >= 16);
        // SAFETY: NEON is baseline; `b` holds 16 values.
        std::array::from_fn(|i| unsafe {
            let magic = vdupq_n_f32(12_582_912.0);
            let t = vfmaq_n_f32(magic, vld1q_f32(b.as_ptr().add(4 * i)), s);
            vcvtnq_s32_f32(vsubq_f32(t, magic))
        })
    }

    /// |v| maximum of `b` (a multiple of 4 values).
    #[inline(always)]
    fn amax(b: &[f32]) -> f32 {
        // SAFETY: NEON is baseline; each load reads 4 of `b`'s values.
        unsafe {
            let mut m = vdupq_n_f32(0.0);
            for c in b.chunks_exact(4) {
                m = vmaxnmq_f32(m, vabsq_f32(vld1q_f32(c.as_ptr())));
            }
            vmaxnmvq_f32(m)
        }
    }

    pub fn q8_block(b: &[f32]) -> Act32 {
        let max = amax(b);
        let d = max / 127.0;
        let id = super::inverse_scale(max, d);
        let mut qs = [0i8; 32];
        let mut sum = 0i32;
        for h in 0..2 {
            let q = scaled(&b[16 * h..], id);
            // SAFETY: NEON is baseline.
            sum += q.iter().map(|&v| unsafe { vaddvq_s32(v) }).sum::<i32>();
            narrow(q, &mut qs[16 * h..]);
        }
        Act32 { d: f16::from_f32(d).to_f32(), s: f16::from_f32(d * sum as f32).to_f32(), qs, qsum: sum }
    }

    pub fn q8k_block(b: &[f32]) -> Act256 {
        let am = amax(b);
        let mut qs = [0i8; 256];
        if am == 0.0 || am.is_nan() {
            return Act256::new(0.0, qs, [0; 8], [0; 16]);
        }
        // The scalar code keeps the first value of largest magnitude.
        let max = b.iter().copied().find(|v| v.abs() == am).unwrap_or(am);
        let iscale = -127.0 / max;
        let mut bsums = [0i16; 16];
        for i in 0..16 {
            // SAFETY: NEON is baseline.
            let q = scaled_exact(&b[16 * i..], iscale).map(|v| unsafe { vminq_s32(v, vdupq_n_s32(127)) });
            // SAFETY: as above.
            bsums[i] = q.iter().map(|&v| unsafe { vaddvq_s32(v) }).sum::<i32>() as i16;
            narrow(q, &mut qs[16 * i..]);
        }
        let sums = std::array::from_fn(|j| bsums[2 * j] as i32 + bsums[2 * j + 1] as i32);
        Act256::new(1.0 / iscale, qs, sums, bsums)
    }
}

/// Quantizes every row of `xs` (`k` values each) with `q`, rows spread over the pool.
pub fn quantize_rows<A: Send>(xs: &[f32], k: usize, q: fn(&[f32]) -> Vec<A>) -> Vec<Vec<A>> {
    let m = xs.len() / k;
    let mut out: Vec<Option<Vec<A>>> = (0..m).map(|_| None).collect();
    let op = SyncPtr(out.as_mut_ptr());
    let per = m.div_ceil(pool::global().threads() * 4).max(1);
    pool::run(m.div_ceil(per), &|t| {
        for r in t * per..((t + 1) * per).min(m) {
            // SAFETY: each row index is written by exactly one task.
            unsafe { *op.get().add(r) = Some(q(&xs[r * k..(r + 1) * k])) };
        }
    });
    out.into_iter().map(|v| v.expect("quantized row")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AVX-512 and NEON quantizers give the scalar ones' bytes, scales and sums (ties and
    /// repeated extremes of both signs included).
    #[test]
    fn simd_quantizers_match_the_scalar_ones() {
        #[cfg(target_arch = "x86_64")]
        let simd = wide();
        #[cfg(target_arch = "aarch64")]
        let simd = isa() >= Isa::Neon;
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        let simd = false;
        if simd {
            let mut s = 5u32;
            let mut r = move || {
                s = s.wrapping_mul(1664525).wrapping_add(1013904223);
                (s >> 8) as f32 / (1 << 24) as f32 - 0.5
            };
            for case in 0..40 {
                let mut x: Vec<f32> = (0..512).map(|_| r() * 8.0).collect();
                if case % 4 == 1 {
                    // Values on .5 boundaries after scaling, and ± copies of the extreme.
                    for v in x.iter_mut() {
                        *v = (*v * 4.0).round() / 4.0;
                    }
                    x[300] = -x.iter().fold(0f32, |m, v| m.max(v.abs()));
                    x[7] = -x[300];
                }
                if case % 4 == 2 {
                    x[..256].fill(0.0);
                }
                let scalar = {
                    let saved = x.clone();
                    let a: Vec<Act32> = saved.chunks_exact(32).map(q8_block).collect();
                    let k: Vec<Act256> = saved.chunks_exact(256).map(q8k_block).collect();
                    (a, k)
                };
                let (a, k) = (quantize_q8(&x), quantize_q8k(&x));
                for (p, q) in a.iter().zip(&scalar.0) {
                    assert_eq!(
                        (p.d.to_bits(), p.s.to_bits(), p.qs, p.qsum),
                        (q.d.to_bits(), q.s.to_bits(), q.qs, q.qsum)
                    );
                }
                for (p, q) in k.iter().zip(&scalar.1) {
                    assert_eq!(
                        (p.d.to_bits(), p.qs, p.sums, p.bsums),
                        (q.d.to_bits(), q.qs, q.sums, q.bsums)
                    );
                }
            }
        }
    }
}
