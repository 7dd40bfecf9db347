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

/// The 4 × 4 output tile shared by the F16, BF16 and f32 tile kernels: over `k` in chunks of
/// `step`, the four weight rows' chunks (`load_w(c, i)`), then each activation row's
/// (`load_x(r, i)`) multiplied into its four accumulators (`madd`); returns every output's 16
/// accumulator lanes, `out[r][c]` for row r and column c (`reduce16_4x4` sums them).
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

/// `reduce16` of a 4 × 4 tile's 16 accumulators at once: each step of its tree (the high
/// half of the lanes plus the low, then again, then the pairs) for two to four outputs per
/// instruction. Additions commute bit for bit, so every output is `reduce16`'s sum — where
/// fifteen scalar adds per output took a fifth of an F16 tile's time. Apart from the tile
/// kernels: inlined into them, it made their loop spill two accumulators.
///
/// # Safety
/// Needs AVX-512F.
#[target_feature(enable = "avx512f")]
#[inline(never)]
pub(crate) unsafe fn reduce16_4x4(lanes: &[[[f32; 16]; 4]; 4]) -> [[f32; 4]; 4] {
    let v = |o: usize| _mm512_loadu_ps(lanes[o / 4][o % 4].as_ptr());
    // t = lanes 8..16 + lanes 0..8: outputs 2p and 2p + 1 in one register.
    let mut t = [_mm512_setzero_ps(); 8];
    for (p, t) in t.iter_mut().enumerate() {
        let (a, b) = (v(2 * p), v(2 * p + 1));
        *t = _mm512_add_ps(_mm512_shuffle_f32x4::<0xEE>(a, b), _mm512_shuffle_f32x4::<0x44>(a, b));
    }
    let mut out = [[0f32; 4]; 4];
    for (q, out) in out.iter_mut().enumerate() {
        // h = t's lanes 4..8 + 0..4: outputs 4q..4q + 4, one per 128-bit chunk.
        let (a, b) = (t[2 * q], t[2 * q + 1]);
        let h = _mm512_add_ps(_mm512_shuffle_f32x4::<0xDD>(a, b), _mm512_shuffle_f32x4::<0x88>(a, b));
        // (h0 + h2) + (h1 + h3) in each chunk's first lane.
        let p = _mm512_add_ps(h, _mm512_permute_ps::<0x4E>(h));
        let s = _mm512_add_ps(p, _mm512_permute_ps::<0xB1>(p));
        let mut lanes = [0f32; 16];
        _mm512_storeu_ps(lanes.as_mut_ptr(), s);
        *out = [lanes[0], lanes[4], lanes[8], lanes[12]];
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cpu::blocks::reduce16;
    use crate::kernels::cpu::dot_checks::lcg;

    /// The 16 accumulators summed in registers give `reduce16`'s bits for each: values over a
    /// wide exponent range (so the order shows), signed zeros and infinities among them.
    #[test]
    fn reduce16_4x4_sums_each_output_in_reduce16s_order() {
        if !crate::kernels::cpu::feats::has_avx512() {
            eprintln!("skipped: no AVX-512 here");
            return;
        }
        let mut next = lcg(17);
        for round in 0..200 {
            let mut lanes = [[[0f32; 16]; 4]; 4];
            for v in lanes.iter_mut().flatten().flatten() {
                let m = (next() % 20001) as f32 / 10000.0 - 1.0;
                *v = m * 2f32.powi((next() % 48) as i32 - 24);
            }
            if round == 0 {
                lanes[1][2][5] = f32::INFINITY;
                lanes[3][0][9] = -0.0;
            }
            // SAFETY: AVX-512F checked above.
            let got = unsafe {
                #[target_feature(enable = "avx512f")]
                unsafe fn sums(l: &[[[f32; 16]; 4]; 4]) -> [[f32; 4]; 4] {
                    reduce16_4x4(l)
                }
                sums(&lanes)
            };
            for r in 0..4 {
                for c in 0..4 {
                    assert_eq!(
                        got[r][c].to_bits(),
                        reduce16(&lanes[r][c]).to_bits(),
                        "round {round}, ({r}, {c})"
                    );
                }
            }
        }
    }
}
