//! AVX2 row dots of the K-quants, `R` activation rows per weight row (twins of
//! `kernels::cpu::k_quants`).

use std::arch::x86_64::*;

use super::{hsum_f32, hsum_i32, lane_dots};
use crate::kernels::cpu::blocks::{f16_at, q3k_scales, scale_min, Q2K, Q3K, Q4K, Q5K, Q6K};
use crate::kernels::cpu::q8::Act256;

/// Exact integer Σ q4·q8 over 32 values: `qs` are 32 bytes whose low (`high == false`) or
/// high nibbles hold the weights.
///
/// # Safety
/// Needs AVX2; `qs` has 32 bytes and `y` 32 values.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn isum_q4k_sub(qs: &[u8], high: bool, y: &[i8]) -> i32 {
    let raw = _mm256_loadu_si256(qs.as_ptr() as *const __m256i);
    let raw = if high { _mm256_srli_epi16(raw, 4) } else { raw };
    let q = _mm256_and_si256(raw, _mm256_set1_epi8(0x0F));
    hsum_i32(lane_dots(q, y.as_ptr()))
}

/// Exact integer parts of one Q4_K block against `R` q8_K rows: per row, the scaled
/// Σ q·y and the Σ m·ysum of each pair of 32-value sub-blocks.
#[inline(always)]
unsafe fn q4k_block_ints<const R: usize>(
    blk: &[u8],
    ys: &[&Act256; R],
    isum: &mut [[i32; 4]; R],
    imin: &mut [[i32; 4]; R],
) {
    let sc = &blk[Q4K::SCALES..Q4K::QS];
    let mut s = [0i16; 8];
    let mut m = [0i32; 8];
    for j in 0..8 {
        let (a, b) = scale_min(sc, j);
        s[j] = a as i16;
        m[j] = b as i32;
    }
    let mask = _mm256_set1_epi8(0x0F);
    for p in 0..4 {
        let raw = _mm256_loadu_si256(blk.as_ptr().add(Q4K::QS + 32 * p) as *const __m256i);
        let lo = _mm256_and_si256(raw, mask);
        let hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), mask);
        let (s_lo, s_hi) = (_mm256_set1_epi16(s[2 * p]), _mm256_set1_epi16(s[2 * p + 1]));
        for t in 0..R {
            let y = ys[t];
            let y_lo = _mm256_loadu_si256(y.qs.as_ptr().add(64 * p) as *const __m256i);
            let y_hi = _mm256_loadu_si256(y.qs.as_ptr().add(64 * p + 32) as *const __m256i);
            // maddubs pairs are at most 2·15·128 (fits i16); times a 6-bit scale fits i32.
            let v = _mm256_add_epi32(
                _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y_lo), s_lo),
                _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y_hi), s_hi),
            );
            isum[t][p] = hsum_i32(v);
            imin[t][p] = m[2 * p] * y.sums[2 * p] + m[2 * p + 1] * y.sums[2 * p + 1];
        }
    }
}

/// `R` q8_K rows against one Q4_K weight row; `per_pair[t]` picks, per row, the rounding of
/// ggml's 8x8 GEMM (one fma per pair of sub-blocks) or GEMV (one per block), as `dot_q4k`.
///
/// # Safety
/// Needs AVX2 and FMA; `w` holds `a[t].len()` Q4_K blocks for every t.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dotn_q4k<const R: usize>(w: &[u8], a: [&[Act256]; R], per_pair: [bool; R]) -> [f32; R] {
    let mut acc = [0f32; R];
    let mut acc_min = [0f32; R];
    let mut isum = [[0i32; 4]; R];
    let mut imin = [[0i32; 4]; R];
    for (b, blk) in w.chunks_exact(Q4K::BYTES).enumerate() {
        let (d, dmin) = (f16_at(blk, Q4K::D), f16_at(blk, Q4K::DMIN));
        let ys: [&Act256; R] = std::array::from_fn(|t| a[t].get_unchecked(b));
        q4k_block_ints::<R>(blk, &ys, &mut isum, &mut imin);
        for t in 0..R {
            let yd = ys[t].d;
            if per_pair[t] {
                for p in 0..4 {
                    acc[t] = (isum[t][p] as f32).mul_add(d * yd, acc[t]);
                    acc_min[t] = (imin[t][p] as f32).mul_add(dmin * yd, acc_min[t]);
                }
            } else {
                let (is, im) = (isum[t].iter().sum::<i32>(), imin[t].iter().sum::<i32>());
                acc[t] = (is as f32).mul_add(d * yd, acc[t]);
                acc_min[t] = (im as f32).mul_add(dmin * yd, acc_min[t]);
            }
        }
    }
    std::array::from_fn(|t| acc[t] - acc_min[t])
}

/// `R` q8_K rows against one Q6_K weight row, per output exactly `dot_q6k_ref`: the weight's
/// 6-bit values and scales are unpacked once per block for all rows.
///
/// # Safety
/// Needs AVX2 and FMA; `w` holds `a[t].len()` Q6_K blocks of 210 bytes for every t.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dotn_q6k<const R: usize>(w: &[u8], a: [&[Act256]; R]) -> [f32; R] {
    let mut acc = [_mm256_setzero_ps(); R];
    let (m15, m3) = (_mm256_set1_epi8(15), _mm256_set1_epi8(3));
    for (b, blk) in w.chunks_exact(Q6K::BYTES).enumerate() {
        let p = blk.as_ptr();
        let dx = f16_at(blk, Q6K::D);
        let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(Q6K::SCALES) as *const __m128i));
        let mut q = [_mm256_setzero_si256(); 8];
        let mut scv = [_mm256_setzero_si256(); 8];
        for n in 0..2 {
            let l1 = _mm256_loadu_si256(p.add(Q6K::QL + 64 * n) as *const __m256i);
            let l2 = _mm256_loadu_si256(p.add(Q6K::QL + 64 * n + 32) as *const __m256i);
            let h = _mm256_loadu_si256(p.add(Q6K::QH + 32 * n) as *const __m256i);
            // 16-bit shifts leak the neighbour byte's bits only above the masks.
            let top = |s: i32| -> __m256i {
                let v = match s {
                    0 => h,
                    2 => _mm256_srli_epi16(h, 2),
                    4 => _mm256_srli_epi16(h, 4),
                    _ => _mm256_srli_epi16(h, 6),
                };
                _mm256_slli_epi16(_mm256_and_si256(v, m3), 4)
            };
            q[4 * n] = _mm256_or_si256(_mm256_and_si256(l1, m15), top(0));
            q[4 * n + 1] = _mm256_or_si256(_mm256_and_si256(l2, m15), top(2));
            q[4 * n + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m15), top(4));
            q[4 * n + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l2, 4), m15), top(6));
        }
        for (c, v) in scv.iter_mut().enumerate() {
            // Lanes 0..4 cover the chunk's first 16 values, lanes 4..8 the next 16.
            let (s0, s1) =
                (*p.add(Q6K::SCALES + 2 * c) as i8 as i16, *p.add(Q6K::SCALES + 2 * c + 1) as i8 as i16);
            *v = _mm256_set_m128i(_mm_set1_epi16(s1), _mm_set1_epi16(s0));
        }
        for t in 0..R {
            let y = a[t].get_unchecked(b);
            let mut sumi = _mm256_setzero_si256();
            for c in 0..8 {
                let yv = _mm256_loadu_si256(y.qs.as_ptr().add(32 * c) as *const __m256i);
                // 63·127·2 fits the i16 pairs of maddubs.
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(scv[c], _mm256_maddubs_epi16(q[c], yv)));
            }
            let bs = _mm256_loadu_si256(y.bsums.as_ptr() as *const __m256i);
            let off = _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5);
            sumi = _mm256_sub_epi32(sumi, off);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y.d * dx), _mm256_cvtepi32_ps(sumi), acc[t]);
        }
    }
    std::array::from_fn(|t| hsum_f32(acc[t]))
}

/// `R` q8_K rows against one Q5_K weight row, per output exactly `dot_q5k_ref`.
///
/// # Safety
/// Needs AVX2 and FMA; `w` holds `a[t].len()` Q5_K blocks of 176 bytes for every t.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dotn_q5k<const R: usize>(w: &[u8], a: [&[Act256]; R]) -> [f32; R] {
    let mut acc = [_mm256_setzero_ps(); R];
    let mut summs = [0f32; R];
    let (m4, one) = (_mm256_set1_epi8(15), _mm256_set1_epi8(1));
    for (b, blk) in w.chunks_exact(Q5K::BYTES).enumerate() {
        let p = blk.as_ptr();
        let (dx, dmin) = (f16_at(blk, Q5K::D), f16_at(blk, Q5K::DMIN));
        let qh = _mm256_loadu_si256(p.add(Q5K::QH) as *const __m256i);
        let mut q = [_mm256_setzero_si256(); 8];
        let mut scv = [_mm256_setzero_si256(); 8];
        let mut mins = [0i32; 8];
        for j in 0..8 {
            let raw = _mm256_loadu_si256(p.add(Q5K::QS + 32 * (j / 2)) as *const __m256i);
            let lo = if j % 2 == 0 { raw } else { _mm256_srli_epi16(raw, 4) };
            let bit = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(j as i32)), one);
            q[j] = _mm256_or_si256(_mm256_and_si256(lo, m4), _mm256_slli_epi16(bit, 4));
            let (s, m) = scale_min(&blk[Q5K::SCALES..Q5K::QH], j);
            scv[j] = _mm256_set1_epi16(s as i16);
            mins[j] = m as i32;
        }
        for t in 0..R {
            let y = a[t].get_unchecked(b);
            let imin: i32 = (0..8).map(|j| mins[j] * y.sums[j]).sum();
            summs[t] = (-y.d * dmin).mul_add(imin as f32, summs[t]);
            let mut sumi = _mm256_setzero_si256();
            for j in 0..8 {
                let yv = _mm256_loadu_si256(y.qs.as_ptr().add(32 * j) as *const __m256i);
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(scv[j], _mm256_maddubs_epi16(q[j], yv)));
            }
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y.d * dx), _mm256_cvtepi32_ps(sumi), acc[t]);
        }
    }
    std::array::from_fn(|t| hsum_f32(acc[t]) + summs[t])
}

/// `R` q8_K rows against one Q3_K weight row, per output exactly `dot_q3k_ref`: the signed
/// 3-bit values and the scales are unpacked once per block for all rows.
///
/// # Safety
/// Needs AVX2 and FMA; `w` holds `a[t].len()` Q3_K blocks of 110 bytes for every t.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dotn_q3k<const R: usize>(w: &[u8], a: [&[Act256]; R]) -> [f32; R] {
    let mut acc = [_mm256_setzero_ps(); R];
    let (m3, one, four) = (_mm256_set1_epi8(3), _mm256_set1_epi8(1), _mm256_set1_epi8(4));
    for (b, blk) in w.chunks_exact(Q3K::BYTES).enumerate() {
        let p = blk.as_ptr();
        let dx = f16_at(blk, Q3K::D);
        let sc = q3k_scales(blk);
        let hm = _mm256_loadu_si256(p.add(Q3K::HMASK) as *const __m256i);
        let mut q = [_mm256_setzero_si256(); 8];
        let mut scv = [_mm256_setzero_si256(); 8];
        for c in 0..8 {
            let (n, j) = (c / 4, (c % 4) as i32);
            let bits = _mm256_loadu_si256(p.add(Q3K::QS + 32 * n) as *const __m256i);
            let low = _mm256_and_si256(_mm256_srl_epi16(bits, _mm_cvtsi32_si128(2 * j)), m3);
            let hshift = _mm_cvtsi32_si128(4 * n as i32 + j);
            let high = _mm256_and_si256(_mm256_srl_epi16(hm, hshift), one);
            // low + 4·high - 4: the value in -4..4.
            q[c] = _mm256_sub_epi8(_mm256_or_si256(low, _mm256_slli_epi16(high, 2)), four);
            scv[c] = _mm256_set_m128i(_mm_set1_epi16(sc[2 * c + 1] as i16), _mm_set1_epi16(sc[2 * c] as i16));
        }
        for t in 0..R {
            let y = a[t].get_unchecked(b);
            let mut sumi = _mm256_setzero_si256();
            for c in 0..8 {
                let yv = _mm256_loadu_si256(y.qs.as_ptr().add(32 * c) as *const __m256i);
                // |q|·(y with q's sign): the exact signed products, paired in i16.
                let p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(q[c], q[c]), _mm256_sign_epi8(yv, q[c]));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(scv[c], p16));
            }
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y.d * dx), _mm256_cvtepi32_ps(sumi), acc[t]);
        }
    }
    std::array::from_fn(|t| hsum_f32(acc[t]))
}

/// `R` q8_K rows against one Q2_K weight row, per output exactly `dot_q2k_ref` (`per_half[t]`
/// picks the GEMM's per-half folding or the GEMV's per-block one).
///
/// # Safety
/// Needs AVX2 and FMA; `w` holds `a[t].len()` Q2_K blocks of 84 bytes for every t.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dotn_q2k<const R: usize>(w: &[u8], a: [&[Act256]; R], per_half: [bool; R]) -> [f32; R] {
    let mut acc = [0f32; R];
    let mut acc_min = [0f32; R];
    let m3 = _mm256_set1_epi8(3);
    for (b, blk) in w.chunks_exact(Q2K::BYTES).enumerate() {
        let p = blk.as_ptr();
        let (dx, dmin) = (f16_at(blk, Q2K::D), f16_at(blk, Q2K::DMIN));
        let mut q = [_mm256_setzero_si256(); 8];
        let mut scv = [_mm256_setzero_si256(); 8];
        for c in 0..8 {
            let bits = _mm256_loadu_si256(p.add(Q2K::QS + 32 * (c / 4)) as *const __m256i);
            q[c] = _mm256_and_si256(_mm256_srl_epi16(bits, _mm_cvtsi32_si128(2 * (c % 4) as i32)), m3);
            let sc = &blk[Q2K::SCALES..Q2K::QS];
            let (s0, s1) = ((sc[2 * c] & 0x0F) as i16, (sc[2 * c + 1] & 0x0F) as i16);
            scv[c] = _mm256_set_m128i(_mm_set1_epi16(s1), _mm_set1_epi16(s0));
        }
        for t in 0..R {
            let y = a[t].get_unchecked(b);
            let mut isum = [0i32; 2];
            let mut imin = [0i32; 2];
            for h in 0..2 {
                let mut v = _mm256_setzero_si256();
                for c in 4 * h..4 * h + 4 {
                    let yv = _mm256_loadu_si256(y.qs.as_ptr().add(32 * c) as *const __m256i);
                    v = _mm256_add_epi32(v, _mm256_madd_epi16(scv[c], _mm256_maddubs_epi16(q[c], yv)));
                }
                isum[h] = hsum_i32(v);
                for g in 8 * h..8 * h + 8 {
                    imin[h] += (blk[Q2K::SCALES + g] >> 4) as i32 * y.bsums[g] as i32;
                }
            }
            let (d, dm) = (dx * y.d, dmin * y.d);
            if per_half[t] {
                for h in 0..2 {
                    acc[t] = (isum[h] as f32).mul_add(d, acc[t]);
                    acc_min[t] = (imin[h] as f32).mul_add(dm, acc_min[t]);
                }
            } else {
                acc[t] = ((isum[0] + isum[1]) as f32).mul_add(d, acc[t]);
                acc_min[t] = ((imin[0] + imin[1]) as f32).mul_add(dm, acc_min[t]);
            }
        }
    }
    std::array::from_fn(|t| acc[t] - acc_min[t])
}
