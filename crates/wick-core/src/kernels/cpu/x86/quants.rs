//! AVX2 row dots of the 32-value quant types (twins of `kernels::cpu::quants`).

use std::arch::x86_64::*;

use super::{hsum_f32, hsum_i32, lane_dots, nibbles};
use crate::kernels::cpu::blocks::{f16_at, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0};
use crate::kernels::cpu::q8::Act32;

/// Q4_1 · q8_1: `blocks` of (d, m, qs) against (d, s, qs) activations.
///
/// # Safety
/// Needs AVX2 and FMA (`feats::has_avx2_fma`); `w` holds `a.len()` Q4_1 blocks of 20 bytes.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_q4_1(w: &[u8], a: &[Act32]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut summs = 0f32;
    for (blk, y) in w.chunks_exact(Q4_1::BYTES).zip(a) {
        let (dx, mx) = (f16_at(blk, Q4_1::D), f16_at(blk, Q4_1::M));
        summs = mx.mul_add(y.s, summs);
        let d = _mm256_set1_ps(y.d * dx);
        let xy = _mm256_cvtepi32_ps(lane_dots(nibbles(blk.as_ptr().add(Q4_1::QS)), y.qs.as_ptr()));
        acc = _mm256_fmadd_ps(d, xy, acc);
    }
    hsum_f32(acc) + summs
}

/// Q8_0 · q8_0 (`ggml_vec_dot_q8_0_q8_0`, which llamafile's tinyBLAS matches for several
/// rows): 8 lanes of 4-byte dots, one fma per lane and block, `hsum_float_8`.
///
/// # Safety
/// Needs AVX2 and FMA (`feats::has_avx2_fma`); `w` holds `a.len()` Q8_0 blocks of 34 bytes.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_q8_0(w: &[u8], a: &[Act32]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (blk, y) in w.chunks_exact(Q8_0::BYTES).zip(a) {
        let d = _mm256_set1_ps(f16_at(blk, Q8_0::D) * y.d);
        let x = _mm256_loadu_si256(blk.as_ptr().add(Q8_0::QS) as *const __m256i);
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

/// `dot_q8_0` (`Q8 = true`) or `dot_q4_0_lanes` of each row of `rows` (whole rows of
/// `acts[h].len()` blocks, one after another: a KV block's key rows) against every activation
/// row `acts[h]`, into `out[h * stride + i]`, the same bits as one call per pair: per head 8
/// lanes, one fma per lane and block, `hsum_float_8`. Each key block is loaded and its scale
/// converted once for all heads (four at a time).
///
/// # Safety
/// Needs AVX2, FMA and F16C; every `acts[h]` has the same number of blocks; `out` holds
/// `(acts.len() - 1) * stride + rows / row` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_rows<const Q8: bool>(rows: &[u8], acts: &[&[Act32]], out: &mut [f32], stride: usize) {
    for (h0, heads) in acts.chunks(4).enumerate() {
        let o = &mut out[4 * h0 * stride..];
        match heads.len() {
            1 => dot_rows_heads::<Q8, 1>(rows, heads, o, stride),
            2 => dot_rows_heads::<Q8, 2>(rows, heads, o, stride),
            3 => dot_rows_heads::<Q8, 3>(rows, heads, o, stride),
            _ => dot_rows_heads::<Q8, 4>(rows, heads, o, stride),
        }
    }
}

/// `dot_rows` for `H` heads (accumulators kept in registers).
#[inline(always)]
unsafe fn dot_rows_heads<const Q8: bool, const H: usize>(
    rows: &[u8],
    acts: &[&[Act32]],
    out: &mut [f32],
    stride: usize,
) {
    let (bytes, qs) = if Q8 { (Q8_0::BYTES, Q8_0::QS) } else { (Q4_0::BYTES, Q4_0::QS) };
    let nb = acts[0].len();
    for (i, row) in rows.chunks_exact(nb * bytes).enumerate() {
        let mut acc = [_mm256_setzero_ps(); H];
        for (b, blk) in row.chunks_exact(bytes).enumerate() {
            let x = match Q8 {
                true => _mm256_loadu_si256(blk.as_ptr().add(qs) as *const __m256i),
                false => _mm256_sub_epi8(nibbles(blk.as_ptr().add(qs)), _mm256_set1_epi8(8)),
            };
            let ax = _mm256_sign_epi8(x, x);
            let dk =
                _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(u16::from_le_bytes([blk[0], blk[1]]) as i32)));
            for h in 0..H {
                let y = acts[h].get_unchecked(b);
                let yv = _mm256_loadu_si256(y.qs.as_ptr() as *const __m256i);
                let dots = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(ax, _mm256_sign_epi8(yv, x)),
                    _mm256_set1_epi16(1),
                );
                acc[h] = _mm256_fmadd_ps(_mm256_set1_ps(dk * y.d), _mm256_cvtepi32_ps(dots), acc[h]);
            }
        }
        for h in 0..H {
            *out.get_unchecked_mut(h * stride + i) = hsum_f32(acc[h]);
        }
    }
}

/// Exact integer Σ (q - 8)·y of one Q4_0 block (16 nibble bytes) with 32 q8 values.
///
/// # Safety
/// Needs AVX2; `qs` has 16 bytes.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn isum_q4_0(qs: &[u8], y: &[i8; 32], ysum: i32) -> i32 {
    hsum_i32(lane_dots(nibbles(qs.as_ptr()), y.as_ptr())) - 8 * ysum
}

/// Four activation rows against one Q4_1 weight row: per output exactly `dot_q4_1`'s
/// operations; the weight nibbles are unpacked once for the four.
///
/// # Safety
/// Needs AVX2 and FMA; `w` holds `a[t].len()` Q4_1 blocks for every t.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot4_q4_1(w: &[u8], a: [&[Act32]; 4]) -> [f32; 4] {
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut summs = [0f32; 4];
    for (b, blk) in w.chunks_exact(Q4_1::BYTES).enumerate() {
        let (dx, mx) = (f16_at(blk, Q4_1::D), f16_at(blk, Q4_1::M));
        let q = nibbles(blk.as_ptr().add(Q4_1::QS));
        for t in 0..4 {
            let y = a[t].get_unchecked(b);
            summs[t] = mx.mul_add(y.s, summs[t]);
            let d = _mm256_set1_ps(y.d * dx);
            let xy = _mm256_cvtepi32_ps(lane_dots(q, y.qs.as_ptr()));
            acc[t] = _mm256_fmadd_ps(d, xy, acc[t]);
        }
    }
    [
        hsum_f32(acc[0]) + summs[0],
        hsum_f32(acc[1]) + summs[1],
        hsum_f32(acc[2]) + summs[2],
        hsum_f32(acc[3]) + summs[3],
    ]
}

/// Four activation rows against one Q8_0 weight row, per output exactly `dot_q8_0`.
///
/// # Safety
/// Needs AVX2 and FMA; `w` holds `a[t].len()` Q8_0 blocks for every t.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot4_q8_0(w: &[u8], a: [&[Act32]; 4]) -> [f32; 4] {
    let mut acc = [_mm256_setzero_ps(); 4];
    for (b, blk) in w.chunks_exact(Q8_0::BYTES).enumerate() {
        let dx = f16_at(blk, Q8_0::D);
        let x = _mm256_loadu_si256(blk.as_ptr().add(Q8_0::QS) as *const __m256i);
        let ax = _mm256_sign_epi8(x, x);
        for t in 0..4 {
            let y = a[t].get_unchecked(b);
            let yv = _mm256_loadu_si256(y.qs.as_ptr() as *const __m256i);
            let dots =
                _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(yv, x)), _mm256_set1_epi16(1));
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dx * y.d), _mm256_cvtepi32_ps(dots), acc[t]);
        }
    }
    [hsum_f32(acc[0]), hsum_f32(acc[1]), hsum_f32(acc[2]), hsum_f32(acc[3])]
}

/// Four activation rows against one Q4_0 weight row, per output exactly `dot_q4_0`.
///
/// # Safety
/// Needs AVX2 and FMA; `w` holds `a[t].len()` Q4_0 blocks for every t.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot4_q4_0(w: &[u8], a: [&[Act32]; 4]) -> [f32; 4] {
    let mut acc = [0f32; 4];
    for (b, blk) in w.chunks_exact(Q4_0::BYTES).enumerate() {
        let dx = f16_at(blk, Q4_0::D);
        let q = nibbles(blk.as_ptr().add(Q4_0::QS));
        for t in 0..4 {
            let y = a[t].get_unchecked(b);
            let s = hsum_i32(lane_dots(q, y.qs.as_ptr())) - 8 * y.qsum;
            acc[t] = (s as f32).mul_add(dx * y.d, acc[t]);
        }
    }
    acc
}

/// The 32 signed values (q - 16) of a Q5_0 block (d, qh: u32, 16 nibble bytes) in element order.
#[inline(always)]
unsafe fn q5_0_values(blk: *const u8) -> __m256i {
    let qh = u32::from_le(std::ptr::read_unaligned(blk.add(Q5_0::QH) as *const u32));
    // ggml's bytes_from_bits_32: byte j = 0xFF where bit j of qh is set.
    let shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(qh as i32), shuf);
    let bit = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe_u64 as i64);
    let hi = _mm256_cmpeq_epi8(_mm256_or_si256(bytes, bit), _mm256_set1_epi64x(-1));
    _mm256_or_si256(nibbles(blk.add(Q5_0::QS)), _mm256_andnot_si256(hi, _mm256_set1_epi8(0xF0u8 as i8)))
}

/// One 8-lane q8 dot of signed x with signed y (ggml's `mul_sum_i8_pairs_float` before cvt).
#[inline(always)]
unsafe fn signed_dots(x: __m256i, y: *const i8) -> __m256 {
    let yv = _mm256_loadu_si256(y as *const __m256i);
    let dots = _mm256_madd_epi16(
        _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(yv, x)),
        _mm256_set1_epi16(1),
    );
    _mm256_cvtepi32_ps(dots)
}

/// Q5_0 · q8_0 (`ggml_vec_dot_q5_0_q8_0`; tinyBLAS rounds the same for several rows).
///
/// # Safety
/// Needs AVX2 and FMA; `w` holds `a.len()` Q5_0 blocks of 22 bytes.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_q5_0(w: &[u8], a: &[Act32]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (blk, y) in w.chunks_exact(Q5_0::BYTES).zip(a) {
        let x = q5_0_values(blk.as_ptr());
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16_at(blk, Q5_0::D) * y.d), signed_dots(x, y.qs.as_ptr()), acc);
    }
    hsum_f32(acc)
}

/// Four activation rows against one Q5_0 weight row, per output exactly `dot_q5_0`.
///
/// # Safety
/// Needs AVX2 and FMA; `w` holds `a[t].len()` Q5_0 blocks for every t.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot4_q5_0(w: &[u8], a: [&[Act32]; 4]) -> [f32; 4] {
    let mut acc = [_mm256_setzero_ps(); 4];
    for (b, blk) in w.chunks_exact(Q5_0::BYTES).enumerate() {
        let dx = f16_at(blk, Q5_0::D);
        let x = q5_0_values(blk.as_ptr());
        for t in 0..4 {
            let y = a[t].get_unchecked(b);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dx * y.d), signed_dots(x, y.qs.as_ptr()), acc[t]);
        }
    }
    [hsum_f32(acc[0]), hsum_f32(acc[1]), hsum_f32(acc[2]), hsum_f32(acc[3])]
}

/// The 32 unsigned values (0..32) of a Q5_1 block (d, m, qh: u32, 16 nibble bytes).
#[inline(always)]
unsafe fn q5_1_values(blk: *const u8) -> __m256i {
    let qh = u32::from_le(std::ptr::read_unaligned(blk.add(Q5_1::QH) as *const u32));
    // Spread bit j of qh over byte j, as in `q5_0_values`, then keep it as the value's bit 4.
    let shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(qh as i32), shuf);
    let bit = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe_u64 as i64);
    let hi = _mm256_cmpeq_epi8(_mm256_or_si256(bytes, bit), _mm256_set1_epi64x(-1));
    _mm256_or_si256(nibbles(blk.add(Q5_1::QS)), _mm256_and_si256(hi, _mm256_set1_epi8(0x10)))
}

/// Q5_1 · q8_1 (`ggml_vec_dot_q5_1_q8_1`), the operations of `dot_q5_1_ref`.
///
/// # Safety
/// Needs AVX2 and FMA; `w` holds `a.len()` Q5_1 blocks of 24 bytes.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_q5_1(w: &[u8], a: &[Act32]) -> f32 {
    dot4_q5_1_n::<1>(w, [a])[0]
}

/// Four activation rows against one Q5_1 weight row, per output exactly `dot_q5_1`.
///
/// # Safety
/// Needs AVX2 and FMA; `w` holds `a[t].len()` Q5_1 blocks for every t.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot4_q5_1(w: &[u8], a: [&[Act32]; 4]) -> [f32; 4] {
    dot4_q5_1_n::<4>(w, a)
}

#[inline(always)]
unsafe fn dot4_q5_1_n<const R: usize>(w: &[u8], a: [&[Act32]; R]) -> [f32; R] {
    let mut acc = [_mm256_setzero_ps(); R];
    let mut summs = [0f32; R];
    for (b, blk) in w.chunks_exact(Q5_1::BYTES).enumerate() {
        let (dx, mx) = (f16_at(blk, Q5_1::D), f16_at(blk, Q5_1::M));
        let q = q5_1_values(blk.as_ptr());
        for t in 0..R {
            let y = a[t].get_unchecked(b);
            summs[t] = mx.mul_add(y.s, summs[t]);
            let xy = _mm256_cvtepi32_ps(lane_dots(q, y.qs.as_ptr()));
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dx * y.d), xy, acc[t]);
        }
    }
    std::array::from_fn(|t| hsum_f32(acc[t]) + summs[t])
}

/// `dot_q8_0` for 4 activation rows × 4 Q8_0 weight rows (`out[r][c]`), with AVX512-VNNI's
/// `vpdpbusd` for the 4-byte dots (the integers `maddubs` + `madd` give: |x| ≤ 128 and the
/// signed bytes keep every pair inside i16) and the same fma per lane and block after: each
/// output is `dot_q8_0`'s. A block's weights are read once for the four rows, its activations
/// once for the four columns.
///
/// # Safety
/// Needs AVX-512 (F, BW, DQ, VL, VNNI), F16C and FMA; each `w[c]` holds `a[r].len()` blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn tile4x4_q8_0(w: [&[u8]; 4], a: [&[Act32]; 4]) -> [[f32; 4]; 4] {
    let mut acc = [[_mm256_setzero_ps(); 4]; 4];
    let mut x = [_mm256_setzero_si256(); 4];
    let mut ax = [_mm256_setzero_si256(); 4];
    let mut dx = [0f32; 4];
    for b in 0..a[0].len() {
        for c in 0..4 {
            let blk = w[c].as_ptr().add(b * Q8_0::BYTES);
            x[c] = _mm256_loadu_si256(blk.add(Q8_0::QS) as *const __m256i);
            ax[c] = _mm256_sign_epi8(x[c], x[c]);
            let bits = u16::from_le_bytes([*blk.add(Q8_0::D), *blk.add(Q8_0::D + 1)]);
            dx[c] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)));
        }
        for r in 0..4 {
            let y = a[r].get_unchecked(b);
            let yv = _mm256_loadu_si256(y.qs.as_ptr() as *const __m256i);
            for c in 0..4 {
                let dots = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax[c], _mm256_sign_epi8(yv, x[c]));
                acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(dx[c] * y.d), _mm256_cvtepi32_ps(dots), acc[r][c]);
            }
        }
    }
    let mut out = [[0f32; 4]; 4];
    for r in 0..4 {
        for c in 0..4 {
            out[r][c] = hsum_f32(acc[r][c]);
        }
    }
    out
}
