//! AVX2 versions of `ggml_matmul`'s block dot products. Integer parts are exact whatever
//! the order; the float operations (one fma per lane per block, the same horizontal sum)
//! are the ones the scalar code performs, so both produce identical bits.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

#[cfg(target_arch = "x86_64")]
use super::ggml_matmul::{f16_at, Act256, Act32};

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

/// Whether the CPU has AVX512-BF16, i.e. whether llama.cpp's CPU backend loads a build whose
/// BF16 dot products use `vdpbf16ps` (the order `ggml_matmul`'s BF16 kernels follow).
pub fn has_avx512bf16() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *OK.get_or_init(|| is_x86_feature_detected!("avx512bf16"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether the CPU has AVX-512 (F, BW, DQ, VL), i.e. whether llama.cpp loads an AVX-512
/// build, which repacks Q2_K weights.
pub fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *OK.get_or_init(|| {
            is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512dq")
                && is_x86_feature_detected!("avx512vl")
        })
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

/// Four activation rows against one Q4_1 weight row: per output exactly `dot_q4_1`'s
/// operations; the weight nibbles are unpacked once for the four.
///
/// # Safety
/// Needs AVX2 and FMA; `w` holds `a[t].len()` Q4_1 blocks for every t.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot4_q4_1(w: &[u8], a: [&[Act32]; 4]) -> [f32; 4] {
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut summs = [0f32; 4];
    for (b, blk) in w.chunks_exact(20).enumerate() {
        let (dx, mx) = (f16_at(blk, 0), f16_at(blk, 2));
        let q = nibbles(blk.as_ptr().add(4));
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
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot4_q8_0(w: &[u8], a: [&[Act32]; 4]) -> [f32; 4] {
    let mut acc = [_mm256_setzero_ps(); 4];
    for (b, blk) in w.chunks_exact(34).enumerate() {
        let dx = f16_at(blk, 0);
        let x = _mm256_loadu_si256(blk.as_ptr().add(2) as *const __m256i);
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
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot4_q4_0(w: &[u8], a: [&[Act32]; 4]) -> [f32; 4] {
    let mut acc = [0f32; 4];
    for (b, blk) in w.chunks_exact(18).enumerate() {
        let dx = f16_at(blk, 0);
        let q = nibbles(blk.as_ptr().add(2));
        for t in 0..4 {
            let y = a[t].get_unchecked(b);
            let s = hsum_i32(lane_dots(q, y.qs.as_ptr())) - 8 * y.qsum;
            acc[t] = (s as f32).mul_add(dx * y.d, acc[t]);
        }
    }
    acc
}

/// Exact integer parts of one Q4_K block against `R` q8_K rows: per row, the scaled
/// Σ q·y and the Σ m·ysum of each pair of 32-value sub-blocks.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn q4k_block_ints<const R: usize>(
    blk: &[u8],
    ys: &[&Act256; R],
    isum: &mut [[i32; 4]; R],
    imin: &mut [[i32; 4]; R],
) {
    let sc = &blk[4..16];
    let mut s = [0i16; 8];
    let mut m = [0i32; 8];
    for j in 0..8 {
        let (a, b) = super::ggml_matmul::scale_min(sc, j);
        s[j] = a as i16;
        m[j] = b;
    }
    let mask = _mm256_set1_epi8(0x0F);
    for p in 0..4 {
        let raw = _mm256_loadu_si256(blk.as_ptr().add(16 + 32 * p) as *const __m256i);
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
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dotn_q4k<const R: usize>(w: &[u8], a: [&[Act256]; R], per_pair: [bool; R]) -> [f32; R] {
    let mut acc = [0f32; R];
    let mut acc_min = [0f32; R];
    let mut isum = [[0i32; 4]; R];
    let mut imin = [[0i32; 4]; R];
    for (b, blk) in w.chunks_exact(144).enumerate() {
        let (d, dmin) = (f16_at(blk, 0), f16_at(blk, 2));
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

/// The 32 signed values (q - 16) of a Q5_0 block (d, qh: u32, 16 nibble bytes) in element order.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn q5_0_values(blk: *const u8) -> __m256i {
    let qh = u32::from_le_bytes([*blk.add(2), *blk.add(3), *blk.add(4), *blk.add(5)]);
    // ggml's bytes_from_bits_32: byte j = 0xFF where bit j of qh is set.
    let shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(qh as i32), shuf);
    let bit = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe_u64 as i64);
    let hi = _mm256_cmpeq_epi8(_mm256_or_si256(bytes, bit), _mm256_set1_epi64x(-1));
    _mm256_or_si256(nibbles(blk.add(6)), _mm256_andnot_si256(hi, _mm256_set1_epi8(0xF0u8 as i8)))
}

/// One 8-lane q8 dot of signed x with signed y (ggml's `mul_sum_i8_pairs_float` before cvt).
#[cfg(target_arch = "x86_64")]
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
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_q5_0(w: &[u8], a: &[Act32]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (blk, y) in w.chunks_exact(22).zip(a) {
        let x = q5_0_values(blk.as_ptr());
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16_at(blk, 0) * y.d), signed_dots(x, y.qs.as_ptr()), acc);
    }
    hsum_f32(acc)
}

/// Four activation rows against one Q5_0 weight row, per output exactly `dot_q5_0`.
///
/// # Safety
/// Needs AVX2 and FMA; `w` holds `a[t].len()` Q5_0 blocks for every t.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot4_q5_0(w: &[u8], a: [&[Act32]; 4]) -> [f32; 4] {
    let mut acc = [_mm256_setzero_ps(); 4];
    for (b, blk) in w.chunks_exact(22).enumerate() {
        let dx = f16_at(blk, 0);
        let x = q5_0_values(blk.as_ptr());
        for t in 0..4 {
            let y = a[t].get_unchecked(b);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dx * y.d), signed_dots(x, y.qs.as_ptr()), acc[t]);
        }
    }
    [hsum_f32(acc[0]), hsum_f32(acc[1]), hsum_f32(acc[2]), hsum_f32(acc[3])]
}

/// The 32 unsigned values (0..32) of a Q5_1 block (d, m, qh: u32, 16 nibble bytes).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn q5_1_values(blk: *const u8) -> __m256i {
    let qh = u32::from_le_bytes([*blk.add(4), *blk.add(5), *blk.add(6), *blk.add(7)]);
    // Spread bit j of qh over byte j, as in `q5_0_values`, then keep it as the value's bit 4.
    let shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(qh as i32), shuf);
    let bit = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe_u64 as i64);
    let hi = _mm256_cmpeq_epi8(_mm256_or_si256(bytes, bit), _mm256_set1_epi64x(-1));
    _mm256_or_si256(nibbles(blk.add(8)), _mm256_and_si256(hi, _mm256_set1_epi8(0x10)))
}

/// Q5_1 · q8_1 (`ggml_vec_dot_q5_1_q8_1`), the operations of `dot_q5_1_ref`.
///
/// # Safety
/// Needs AVX2 and FMA; `w` holds `a.len()` Q5_1 blocks of 24 bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_q5_1(w: &[u8], a: &[Act32]) -> f32 {
    dot4_q5_1_n::<1>(w, [a])[0]
}

/// Four activation rows against one Q5_1 weight row, per output exactly `dot_q5_1`.
///
/// # Safety
/// Needs AVX2 and FMA; `w` holds `a[t].len()` Q5_1 blocks for every t.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot4_q5_1(w: &[u8], a: [&[Act32]; 4]) -> [f32; 4] {
    dot4_q5_1_n::<4>(w, a)
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn dot4_q5_1_n<const R: usize>(w: &[u8], a: [&[Act32]; R]) -> [f32; R] {
    let mut acc = [_mm256_setzero_ps(); R];
    let mut summs = [0f32; R];
    for (b, blk) in w.chunks_exact(24).enumerate() {
        let (dx, mx) = (f16_at(blk, 0), f16_at(blk, 2));
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

/// `R` q8_K rows against one Q6_K weight row, per output exactly `dot_q6k_ref`: the weight's
/// 6-bit values and scales are unpacked once per block for all rows.
///
/// # Safety
/// Needs AVX2 and FMA; `w` holds `a[t].len()` Q6_K blocks of 210 bytes for every t.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dotn_q6k<const R: usize>(w: &[u8], a: [&[Act256]; R]) -> [f32; R] {
    let mut acc = [_mm256_setzero_ps(); R];
    let (m15, m3) = (_mm256_set1_epi8(15), _mm256_set1_epi8(3));
    for (b, blk) in w.chunks_exact(210).enumerate() {
        let p = blk.as_ptr();
        let dx = f16_at(blk, 208);
        let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(192) as *const __m128i));
        let mut q = [_mm256_setzero_si256(); 8];
        let mut scv = [_mm256_setzero_si256(); 8];
        for n in 0..2 {
            let l1 = _mm256_loadu_si256(p.add(64 * n) as *const __m256i);
            let l2 = _mm256_loadu_si256(p.add(64 * n + 32) as *const __m256i);
            let h = _mm256_loadu_si256(p.add(128 + 32 * n) as *const __m256i);
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
            let (s0, s1) = (*p.add(192 + 2 * c) as i8 as i16, *p.add(193 + 2 * c) as i8 as i16);
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
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dotn_q5k<const R: usize>(w: &[u8], a: [&[Act256]; R]) -> [f32; R] {
    let mut acc = [_mm256_setzero_ps(); R];
    let mut summs = [0f32; R];
    let (m4, one) = (_mm256_set1_epi8(15), _mm256_set1_epi8(1));
    for (b, blk) in w.chunks_exact(176).enumerate() {
        let p = blk.as_ptr();
        let (dx, dmin) = (f16_at(blk, 0), f16_at(blk, 2));
        let qh = _mm256_loadu_si256(p.add(16) as *const __m256i);
        let mut q = [_mm256_setzero_si256(); 8];
        let mut scv = [_mm256_setzero_si256(); 8];
        let mut mins = [0i32; 8];
        for j in 0..8 {
            let raw = _mm256_loadu_si256(p.add(48 + 32 * (j / 2)) as *const __m256i);
            let lo = if j % 2 == 0 { raw } else { _mm256_srli_epi16(raw, 4) };
            let bit = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(j as i32)), one);
            q[j] = _mm256_or_si256(_mm256_and_si256(lo, m4), _mm256_slli_epi16(bit, 4));
            let (s, m) = super::ggml_matmul::scale_min(&blk[4..16], j);
            scv[j] = _mm256_set1_epi16(s as i16);
            mins[j] = m;
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

/// Adds 16 `vdpbf16ps` lane steps (values `i..i+32` of `w` and `x`) to `acc` (lanes 0..8, 8..16):
/// per lane the odd element's exact product first, then the even one's.
#[cfg(target_arch = "x86_64")]
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

#[cfg(target_arch = "x86_64")]
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
#[cfg(target_arch = "x86_64")]
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
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn bf16_tiled_lanes(w: &[u8], x: &[u16]) -> [f32; 16] {
    let mut c = [_mm256_setzero_ps(); 2];
    for base in (0..x.len()).step_by(32) {
        dp_chunk(&mut c, w.as_ptr().add(2 * base), x.as_ptr().add(base));
    }
    lanes16(&c)
}

/// `R` q8_K rows against one Q3_K weight row, per output exactly `dot_q3k_ref`: the signed
/// 3-bit values and the scales are unpacked once per block for all rows.
///
/// # Safety
/// Needs AVX2 and FMA; `w` holds `a[t].len()` Q3_K blocks of 110 bytes for every t.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dotn_q3k<const R: usize>(w: &[u8], a: [&[Act256]; R]) -> [f32; R] {
    let mut acc = [_mm256_setzero_ps(); R];
    let (m3, one, four) = (_mm256_set1_epi8(3), _mm256_set1_epi8(1), _mm256_set1_epi8(4));
    for (b, blk) in w.chunks_exact(110).enumerate() {
        let p = blk.as_ptr();
        let dx = f16_at(blk, 108);
        let sc = super::ggml_matmul::q3k_scales(blk);
        let hm = _mm256_loadu_si256(p as *const __m256i);
        let mut q = [_mm256_setzero_si256(); 8];
        let mut scv = [_mm256_setzero_si256(); 8];
        for c in 0..8 {
            let (n, j) = (c / 4, (c % 4) as i32);
            let bits = _mm256_loadu_si256(p.add(32 + 32 * n) as *const __m256i);
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
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dotn_q2k<const R: usize>(w: &[u8], a: [&[Act256]; R], per_half: [bool; R]) -> [f32; R] {
    let mut acc = [0f32; R];
    let mut acc_min = [0f32; R];
    let m3 = _mm256_set1_epi8(3);
    for (b, blk) in w.chunks_exact(84).enumerate() {
        let p = blk.as_ptr();
        let (dx, dmin) = (f16_at(blk, 80), f16_at(blk, 82));
        let mut q = [_mm256_setzero_si256(); 8];
        let mut scv = [_mm256_setzero_si256(); 8];
        for c in 0..8 {
            let bits = _mm256_loadu_si256(p.add(16 + 32 * (c / 4)) as *const __m256i);
            q[c] = _mm256_and_si256(_mm256_srl_epi16(bits, _mm_cvtsi32_si128(2 * (c % 4) as i32)), m3);
            let (s0, s1) = ((blk[2 * c] & 0x0F) as i16, (blk[2 * c + 1] & 0x0F) as i16);
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
                    imin[h] += (blk[g] >> 4) as i32 * y.bsums[g] as i32;
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
