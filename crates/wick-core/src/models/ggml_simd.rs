//! AVX2 versions of `ggml_matmul`'s block dot products. Integer parts are exact whatever
//! the order; the float operations (one fma per lane per block, the same horizontal sum)
//! are the ones the scalar code performs, so both produce identical bits.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

#[cfg(target_arch = "x86_64")]
use super::ggml_matmul::{f16_at, Act32};

/// Whether the AVX2 kernels can run here.
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *OK.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// 32 unsigned nibbles of a Q4 block in element order (low nibbles, then high).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn nibbles(qs: *const u8) -> __m256i {
    let raw = _mm_loadu_si128(qs as *const __m128i);
    let both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
}

/// Eight i32 lanes, lane l = Σ of products of elements 4l..4l+4 (u8 × i8).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn lane_dots(q: __m256i, y: *const i8) -> __m256i {
    let y = _mm256_loadu_si256(y as *const __m256i);
    _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), _mm256_set1_epi16(1))
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn hsum_i32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 1)))
}

/// ggml's `hsum_float_8`: high half + low half, then pairs, then the last two.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn hsum_f32(v: __m256) -> f32 {
    let r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    let r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)))
}

/// Q4_1 · q8_1: `blocks` of (d, m, qs) against (d, s, qs) activations.
///
/// # Safety
/// Needs AVX2 and FMA (`available()`); `w` holds `a.len()` Q4_1 blocks of 20 bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_q4_1(w: &[u8], a: &[Act32]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut summs = 0f32;
    for (blk, y) in w.chunks_exact(20).zip(a) {
        let (dx, mx) = (f16_at(blk, 0), f16_at(blk, 2));
        summs = mx.mul_add(y.s, summs);
        let d = _mm256_set1_ps(y.d * dx);
        let xy = _mm256_cvtepi32_ps(lane_dots(nibbles(blk.as_ptr().add(4)), y.qs.as_ptr()));
        acc = _mm256_fmadd_ps(d, xy, acc);
    }
    hsum_f32(acc) + summs
}

/// Q8_0 · q8_0 (`ggml_vec_dot_q8_0_q8_0`, which llamafile's tinyBLAS matches for several
/// rows): 8 lanes of 4-byte dots, one fma per lane and block, `hsum_float_8`.
///
/// # Safety
/// Needs AVX2 and FMA (`available()`); `w` holds `a.len()` Q8_0 blocks of 34 bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_q8_0(w: &[u8], a: &[Act32]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (blk, y) in w.chunks_exact(34).zip(a) {
        let d = _mm256_set1_ps(f16_at(blk, 0) * y.d);
        let x = _mm256_loadu_si256(blk.as_ptr().add(2) as *const __m256i);
        let yv = _mm256_loadu_si256(y.qs.as_ptr() as *const __m256i);
        // |x| · (y with x's sign): unsigned × signed pairs, as ggml's mul_sum_i8_pairs.
        let dots = _mm256_madd_epi16(
            _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(yv, x)),
            _mm256_set1_epi16(1),
        );
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dots), acc);
    }
    hsum_f32(acc)
}

/// Exact integer Σ (q - 8)·y of one Q4_0 block (16 nibble bytes) with 32 q8 values.
///
/// # Safety
/// Needs AVX2; `qs` has 16 bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn isum_q4_0(qs: &[u8], y: &[i8; 32], ysum: i32) -> i32 {
    hsum_i32(lane_dots(nibbles(qs.as_ptr()), y.as_ptr())) - 8 * ysum
}

/// Exact integer Σ q4·q8 over 32 values: `qs` are 32 bytes whose low (`high == false`) or
/// high nibbles hold the weights.
///
/// # Safety
/// Needs AVX2; `qs` has 32 bytes and `y` 32 values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn isum_q4k_sub(qs: &[u8], high: bool, y: &[i8]) -> i32 {
    let raw = _mm256_loadu_si256(qs.as_ptr() as *const __m256i);
    let raw = if high { _mm256_srli_epi16(raw, 4) } else { raw };
    let q = _mm256_and_si256(raw, _mm256_set1_epi8(0x0F));
    hsum_i32(lane_dots(q, y.as_ptr()))
}
