//! x86 (AVX2) row dots, twins of the portable ones in `quants`, `k_quants` and `float_dots`.
//! Integer parts are exact whatever the order; the float operations (one fma per lane per
//! block, the same horizontal sum) are the ones the portable code performs, so both produce
//! identical bits. Callers check `feats::has_avx2_fma` first.

use std::arch::x86_64::*;

pub mod bf16;
pub mod f16;
pub mod k_quants;
pub mod quants;

/// 32 unsigned nibbles of a Q4 block in element order (low nibbles, then high).
#[inline(always)]
pub(super) unsafe fn nibbles(qs: *const u8) -> __m256i {
    let raw = _mm_loadu_si128(qs as *const __m128i);
    let both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
}

/// Eight i32 lanes, lane l = Σ of products of elements 4l..4l+4 (u8 × i8).
#[inline(always)]
pub(super) unsafe fn lane_dots(q: __m256i, y: *const i8) -> __m256i {
    let y = _mm256_loadu_si256(y as *const __m256i);
    _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), _mm256_set1_epi16(1))
}

#[inline(always)]
pub(super) unsafe fn hsum_i32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 1)))
}

/// ggml's `hsum_float_8`: high half + low half, then pairs, then the last two.
#[inline(always)]
pub(super) unsafe fn hsum_f32(v: __m256) -> f32 {
    let r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    let r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)))
}

/// The 4 × 4 output tile shared by the F16 and BF16 prompt kernels: over `k` in chunks of
/// `step`, the four weight rows' chunks (`load_w(c, i)`), then each activation row's
/// (`load_x(r, i)`) multiplied into its four accumulators (`madd`); returns every output's 16
/// accumulator lanes, `out[r][c]` for row r and column c.
#[inline(always)]
pub(super) unsafe fn tile4x4<W: Copy, X: Copy>(
    k: usize,
    step: usize,
    load_w: impl Fn(usize, usize) -> W,
    load_x: impl Fn(usize, usize) -> X,
    madd: impl Fn(__m512, W, X) -> __m512,
) -> [[[f32; 16]; 4]; 4] {
    let mut acc = [[_mm512_setzero_ps(); 4]; 4];
    for i in (0..k).step_by(step) {
        let wc: [W; 4] = std::array::from_fn(|c| load_w(c, i));
        for (r, a) in acc.iter_mut().enumerate() {
            let xv = load_x(r, i);
            for (a, &wv) in a.iter_mut().zip(&wc) {
                *a = madd(*a, wv, xv);
            }
        }
    }
    let mut out = [[[0f32; 16]; 4]; 4];
    for (o, a) in out.iter_mut().zip(&acc) {
        for (o, a) in o.iter_mut().zip(a) {
            _mm512_storeu_ps(o.as_mut_ptr(), *a);
        }
    }
    out
}

/// tinyBLAS's f32 lane sums for 4 rows of `x` × 4 rows of `w` (16 lanes over the chunks of 16
/// of `k`, a multiple of 16): `out[r][c]`, each output's `dot_tiled_sl` before its tree sum.
///
/// # Safety
/// Needs AVX-512F; every row holds at least k values.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn tile4x4_f32(w: [&[f32]; 4], x: [&[f32]; 4], k: usize) -> [[[f32; 16]; 4]; 4] {
    tile4x4(
        k,
        16,
        |c, i| _mm512_loadu_ps(w[c].as_ptr().add(i)),
        |r, i| _mm512_loadu_ps(x[r].as_ptr().add(i)),
        |a, wv, xv| _mm512_fmadd_ps(wv, xv, a),
    )
}
