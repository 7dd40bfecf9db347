//! AVX2 lane sums of the BF16 dots (`vdpbf16ps` steps emulated; twins of
//! `kernels::cpu::float_dots`).

use std::arch::x86_64::*;

/// Adds 16 `vdpbf16ps` lane steps (values `i..i+32` of `w` and `x`) to `acc` (lanes 0..8, 8..16):
/// per lane the odd element's exact product first, then the even one's.
#[inline(always)]
unsafe fn dp_chunk(acc: &mut [__m256; 2], w: *const u8, x: *const u16) {
    let hi = _mm256_set1_epi32(0xFFFF_0000u32 as i32);
    for (h, a) in acc.iter_mut().enumerate() {
        let wv = _mm256_loadu_si256(w.add(32 * h) as *const __m256i);
        let xv = _mm256_loadu_si256(x.add(16 * h) as *const __m256i);
        let odd = _mm256_mul_ps(
            _mm256_castsi256_ps(_mm256_and_si256(wv, hi)),
            _mm256_castsi256_ps(_mm256_and_si256(xv, hi)),
        );
        let even = _mm256_mul_ps(
            _mm256_castsi256_ps(_mm256_slli_epi32(wv, 16)),
            _mm256_castsi256_ps(_mm256_slli_epi32(xv, 16)),
        );
        *a = _mm256_add_ps(_mm256_add_ps(*a, odd), even);
    }
}

#[inline(always)]
unsafe fn lanes16(acc: &[__m256; 2]) -> [f32; 16] {
    let mut out = [0f32; 16];
    _mm256_storeu_ps(out.as_mut_ptr(), acc[0]);
    _mm256_storeu_ps(out.as_mut_ptr().add(8), acc[1]);
    out
}

/// `dot_bf16_single`'s operations: the lane sums of the 64-value steps; the caller reduces
/// them and adds the tail.
///
/// # Safety
/// Needs AVX2; `w` holds 2·`x.len()` bytes.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn bf16_single_lanes(w: &[u8], x: &[u16]) -> [[f32; 16]; 2] {
    let mut c = [[_mm256_setzero_ps(); 2]; 2];
    for base in (0..x.len() & !63).step_by(64) {
        dp_chunk(&mut c[0], w.as_ptr().add(2 * base), x.as_ptr().add(base));
        dp_chunk(&mut c[1], w.as_ptr().add(2 * base + 64), x.as_ptr().add(base + 32));
    }
    [lanes16(&c[0]), lanes16(&c[1])]
}

/// `dot_bf16_tiled`'s lane sums (k % 32 == 0).
///
/// # Safety
/// Needs AVX2; `w` holds 2·`x.len()` bytes and `x.len()` is a multiple of 32.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn bf16_tiled_lanes(w: &[u8], x: &[u16]) -> [f32; 16] {
    let mut c = [_mm256_setzero_ps(); 2];
    for base in (0..x.len()).step_by(32) {
        dp_chunk(&mut c, w.as_ptr().add(2 * base), x.as_ptr().add(base));
    }
    lanes16(&c)
}

/// `bf16_tiled_lanes` for 4 activation rows × 4 weight rows with AVX512-BF16's own
/// `vdpbf16ps` (the instruction the AVX2 code above emulates, and the one llama.cpp's tinyBLAS
/// runs): per output one 16-lane accumulator over the chunks of 32 of `k`. `out[r][c]` = row r,
/// column c.
///
/// # Safety
/// Needs AVX-512F and AVX512-BF16; each `w[c]` holds 2·k bytes, each `x[r]` k values, and k is
/// a multiple of 32.
#[target_feature(enable = "avx512f,avx512bf16")]
pub unsafe fn tile4x4_lanes(w: [&[u8]; 4], x: [&[u16]; 4], k: usize) -> [[[f32; 16]; 4]; 4] {
    let load = |p: *const u8| -> __m512bh { std::mem::transmute(_mm512_loadu_si512(p as *const __m512i)) };
    super::tile4x4(
        k,
        32,
        |c, i| load(w[c].as_ptr().add(2 * i)),
        |r, i| load(x[r].as_ptr().add(i) as *const u8),
        |a, wv, xv| _mm512_dpbf16_ps(a, wv, xv),
    )
}
