//! Lane sums of the F16-weight dots with the weight read straight from its f16 bytes (twins
//! of `float_dots::head64_order` and `tiled_order` on widened rows: the same fma per lane and
//! step, so the same bits). Widening a row into a buffer first, then reading it back, was
//! most of an F16 model's decode; a 4 × 4 tile of outputs keeps AVX-512's FMA units busy in
//! a prefill where one output at a time waited on loads.

use std::arch::x86_64::*;

/// Eight f16 weights at `w` (bytes) as f32.
#[inline(always)]
unsafe fn w8(w: *const u8) -> __m256 {
    _mm256_cvtph_ps(_mm_loadu_si128(w as *const __m128i))
}

/// `ggml_vec_dot_f16`'s head (x86): four 16-lane accumulators over the 64-value steps of
/// `x.len() & !63`, folded `(a0 + a2) + (a1 + a3)` per lane. The caller reduces the lanes and
/// adds the tail.
///
/// # Safety
/// Needs AVX2, FMA and F16C; `w` holds 2·`x.len()` bytes.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn single_lanes(w: &[u8], x: &[f32]) -> [f32; 16] {
    let (wp, xp) = (w.as_ptr(), x.as_ptr());
    // acc[j][h]: accumulator j's lanes 8h..8h+8.
    let mut acc = [[_mm256_setzero_ps(); 2]; 4];
    for base in (0..x.len() & !63).step_by(64) {
        for (j, a) in acc.iter_mut().enumerate() {
            for (h, a) in a.iter_mut().enumerate() {
                let i = base + 16 * j + 8 * h;
                *a = _mm256_fmadd_ps(_mm256_loadu_ps(xp.add(i)), w8(wp.add(2 * i)), *a);
            }
        }
    }
    let mut out = [0f32; 16];
    for h in 0..2 {
        let f = _mm256_add_ps(_mm256_add_ps(acc[0][h], acc[2][h]), _mm256_add_ps(acc[1][h], acc[3][h]));
        _mm256_storeu_ps(out.as_mut_ptr().add(8 * h), f);
    }
    out
}

/// tinyBLAS's lane sums for 4 activation rows × 4 f16 weight rows: per output one 16-lane
/// accumulator over the chunks of 16 of `k` (a multiple of 16). `out[r][c]` = row r, column c.
///
/// # Safety
/// Needs AVX-512F; each `w[c]` holds 2·k bytes and each `x[r]` k values.
#[target_feature(enable = "avx512f")]
pub unsafe fn tile4x4_lanes(w: [&[u8]; 4], x: [&[f32]; 4], k: usize) -> [[[f32; 16]; 4]; 4] {
    super::tile4x4(
        k,
        16,
        |c, i| _mm512_cvtph_ps(_mm256_loadu_si256(w[c].as_ptr().add(2 * i) as *const __m256i)),
        |r, i| _mm512_loadu_ps(x[r].as_ptr().add(i)),
        |a, wv, xv| _mm512_fmadd_ps(wv, xv, a),
    )
}

/// `single_lanes` for four activation rows against one weight row (verified drafts, batched
/// decodes): each 16 weights widened once for all four; each row's sums are `single_lanes`'.
///
/// # Safety
/// Needs AVX-512F; `w` holds 2·n bytes and each `x[r]` at least n values.
#[target_feature(enable = "avx512f")]
pub unsafe fn single4_lanes(w: &[u8], x: [&[f32]; 4], n: usize) -> [[f32; 16]; 4] {
    let mut acc = [[_mm512_setzero_ps(); 4]; 4];
    for base in (0..n & !63).step_by(64) {
        for j in 0..4 {
            let i = base + 16 * j;
            let wv = _mm512_cvtph_ps(_mm256_loadu_si256(w.as_ptr().add(2 * i) as *const __m256i));
            for (a, xr) in acc.iter_mut().zip(&x) {
                a[j] = _mm512_fmadd_ps(_mm512_loadu_ps(xr.as_ptr().add(i)), wv, a[j]);
            }
        }
    }
    let mut out = [[0f32; 16]; 4];
    for (o, a) in out.iter_mut().zip(&acc) {
        let f = _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3]));
        _mm512_storeu_ps(o.as_mut_ptr(), f);
    }
    out
}
