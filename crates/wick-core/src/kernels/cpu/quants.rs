//! CPU matmuls for F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K
//! weights that round exactly as llama.cpp's x86 CPU backend does (the kernels it picks for
//! these types on AVX2/AVX-512; BF16 and Q2_K only where llama.cpp loads an AVX512-BF16 /
//! AVX-512 build, see `supported`).
//!
//! Why: ggml re-quantizes every activation row to q8 blocks, so a one-ulp difference in one
//! layer's output can flip a rounding in the next and change a greedy token (see
//! `cpu_attention`). candle's kernels accumulate in other orders and, for Q4_1, round the q8_1
//! block sum differently (`f16(sum)·f16(d)` in f16 instead of ggml's `f16(d·sum)`). Here:
//! - activations: ggml's x86 `quantize_row_q8_0/q8_1` (`id = 127/max`, round half to even)
//!   and `quantize_row_q8_K_ref`; f16 weights see f16-rounded activations;
//! - Q4_0, Q4_K (output count % 8 == 0): the repacked 8x8 GEMV/GEMM — per block an exact
//!   integer dot, then `acc = fma(float(isum), dx·dy, acc)` (Q4_K: minus the same for mins);
//! - Q8_0: `ggml_vec_dot_q8_0_q8_0` (tinyBLAS rounds identically for several rows) and
//!   Q4_1: `ggml_vec_dot_q4_1_q8_1` — 8 lanes of 4-byte dots, fma per lane and block, an
//!   8-lane tree sum (Q4_1: plus the m·s terms accumulated with fma);
//! - F16: `ggml_vec_dot_f16` for one token, llamafile tinyBLAS for several; BF16 the same
//!   pair with `vdpbf16ps` steps (`dot_bf16_single`, `dot_bf16_tiled`);
//! - Q5_1 (q8_1), Q3_K, Q5_K, Q6_K (q8_K): their `ggml_vec_dot_*` for any row count (no
//!   repack or tinyBLAS on x86), 8 integer lanes with one fma per lane and block;
//! - Q2_K (q8_K): the AVX-512 builds' repacked 8x8 GEMV/GEMM, like Q4_K.

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Tensor;
use half::f16;

use super::cpu_attention::{dot_single, dot_tiled};
use super::ggml_simd as simd;
use super::layers::RowPos;
use crate::error::{Result, WickError};
use crate::ops::attn::reduce16;
use crate::ops::pool::{self, SyncPtr};
pub(crate) use crate::ops::q8::{quantize_q8, quantize_q8k, quantize_rows, Act256, Act32};

/// Whether `matmul` handles this weight type (with this output count).
pub fn supported(dtype: GgmlDType, n_out: usize) -> bool {
    match dtype {
        GgmlDType::F16 | GgmlDType::Q8_0 | GgmlDType::Q4_1 | GgmlDType::Q5_0 | GgmlDType::Q5_1 => true,
        GgmlDType::Q3K | GgmlDType::Q5K | GgmlDType::Q6K => true,
        // Only llama.cpp's AVX512-BF16 builds are matched (others sum BF16 in other orders).
        GgmlDType::BF16 => simd::has_avx512bf16(),
        GgmlDType::Q4_0 | GgmlDType::Q4K => n_out.is_multiple_of(8),
        // ggml repacks Q2_K (8x8 GEMV/GEMM) only in its AVX-512 builds; the others use
        // `ggml_vec_dot_q2_K_q8_K`, which is not implemented here.
        GgmlDType::Q2K => n_out.is_multiple_of(8) && simd::has_avx512(),
        _ => false,
    }
}

pub(super) fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// The 32 4-bit values of a Q4_0/Q4_1 block in element order: low nibbles, then high.
#[inline(always)]
fn nibbles(qs: &[u8]) -> [u8; 32] {
    let mut w = [0u8; 32];
    for i in 0..16 {
        w[i] = qs[i] & 0x0F;
        w[i + 16] = qs[i] >> 4;
    }
    w
}

fn dot_q4_0(w: &[u8], a: &[Act32]) -> f32 {
    let simd = simd::available();
    let mut acc = 0f32;
    for (blk, y) in w.chunks_exact(18).zip(a) {
        let s = if simd {
            // Safety: AVX2/FMA checked by `available`; the block has 16 nibble bytes.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                simd::isum_q4_0(&blk[2..18], &y.qs, y.qsum)
            }
            #[cfg(not(target_arch = "x86_64"))]
            0
        } else {
            let q = nibbles(&blk[2..18]);
            (0..32).map(|i| (q[i] as i32 - 8) * y.qs[i] as i32).sum()
        };
        acc = (s as f32).mul_add(f16_at(blk, 0) * y.d, acc);
    }
    acc
}

fn dot_q8_0(w: &[u8], a: &[Act32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd::available() {
        // Safety: AVX2/FMA checked; `w` holds one 34-byte block per activation block.
        return unsafe { simd::dot_q8_0(w, a) };
    }
    let mut acc = [0f32; 8];
    for (blk, y) in w.chunks_exact(34).zip(a) {
        let d = f16_at(blk, 0) * y.d;
        for (l, a) in acc.iter_mut().enumerate() {
            let s: i32 = (0..4).map(|t| blk[2 + 4 * l + t] as i8 as i32 * y.qs[4 * l + t] as i32).sum();
            *a = d.mul_add(s as f32, *a);
        }
    }
    let h = [acc[4] + acc[0], acc[5] + acc[1], acc[6] + acc[2], acc[7] + acc[3]];
    (h[0] + h[2]) + (h[1] + h[3])
}

/// The 32 values (q - 16) of a Q5_0 block (d, qh, 16 nibble bytes) in element order.
fn q5_0_values(blk: &[u8]) -> [i32; 32] {
    let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
    let q = nibbles(&blk[6..22]);
    std::array::from_fn(|i| (q[i] as i32 | (((qh >> i) & 1) as i32) << 4) - 16)
}

/// `ggml_vec_dot_q5_0_q8_0`: as Q8_0 (8 lanes of 4-value dots, one fma per lane and block).
fn dot_q5_0(w: &[u8], a: &[Act32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd::available() {
        // Safety: AVX2/FMA checked; `w` holds one 22-byte block per activation block.
        return unsafe { simd::dot_q5_0(w, a) };
    }
    let mut acc = [0f32; 8];
    for (blk, y) in w.chunks_exact(22).zip(a) {
        let d = f16_at(blk, 0) * y.d;
        let x = q5_0_values(blk);
        for (l, a) in acc.iter_mut().enumerate() {
            let s: i32 = (0..4).map(|t| x[4 * l + t] * y.qs[4 * l + t] as i32).sum();
            *a = d.mul_add(s as f32, *a);
        }
    }
    let h = [acc[4] + acc[0], acc[5] + acc[1], acc[6] + acc[2], acc[7] + acc[3]];
    (h[0] + h[2]) + (h[1] + h[3])
}

/// ggml's `hsum_float_8` on an 8-lane accumulator: high half + low half, then pairs.
#[inline(always)]
fn hsum8(acc: [f32; 8]) -> f32 {
    let h = [acc[4] + acc[0], acc[5] + acc[1], acc[6] + acc[2], acc[7] + acc[3]];
    (h[0] + h[2]) + (h[1] + h[3])
}

/// The 32 unsigned values (0..32) of a Q5_1 block (d, m, qh, 16 nibble bytes) in element order.
fn q5_1_values(blk: &[u8]) -> [i32; 32] {
    let qh = u32::from_le_bytes([blk[4], blk[5], blk[6], blk[7]]);
    let q = nibbles(&blk[8..24]);
    std::array::from_fn(|i| q[i] as i32 | (((qh >> i) & 1) as i32) << 4)
}

/// `ggml_vec_dot_q5_1_q8_1` (no repack, no tinyBLAS for this type, so for any row count):
/// Q4_1's order — 8 lanes of 4-value dots, fma per lane and block with `dx·dy`, the m·s terms
/// folded by fma into a separate sum that is added after the 8-lane tree sum.
fn dot_q5_1(w: &[u8], a: &[Act32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd::available() {
        // Safety: AVX2/FMA checked; `w` holds one 24-byte block per activation block.
        return unsafe { simd::dot_q5_1(w, a) };
    }
    dot_q5_1_ref(w, a)
}

fn dot_q5_1_ref(w: &[u8], a: &[Act32]) -> f32 {
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    for (blk, y) in w.chunks_exact(24).zip(a) {
        summs = f16_at(blk, 2).mul_add(y.s, summs);
        let d = f16_at(blk, 0) * y.d;
        let x = q5_1_values(blk);
        for (l, a) in acc.iter_mut().enumerate() {
            let s: i32 = (0..4).map(|t| x[4 * l + t] * y.qs[4 * l + t] as i32).sum();
            *a = d.mul_add(s as f32, *a);
        }
    }
    hsum8(acc) + summs
}

/// The 256 unsigned 6-bit values (0..64) of a Q6_K block (ql[128], qh[64], scales[16], d) in
/// element order: per half of 128, low nibbles of ql[0..32], of ql[32..64], then their high
/// nibbles, each topped with the next two bits of qh[0..32].
pub(super) fn q6k_values(blk: &[u8]) -> [i32; 256] {
    std::array::from_fn(|e| {
        let (n, r) = (e / 128, e % 128);
        let (g, l) = (r / 32, r % 32);
        let lo = blk[64 * n + l + 32 * (g % 2)];
        let lo = if g < 2 { lo & 0x0F } else { lo >> 4 };
        let hi = (blk[128 + 32 * n + l] >> (2 * g)) & 3;
        (lo | hi << 4) as i32
    })
}

/// Q6_K·q8_K, `ggml_vec_dot_q6_K_q8_K` (AVX2; x86 has no repacked Q6_K kernel and tinyBLAS
/// skips K-quants, so every row count goes through it). Per block, 8 integer lanes: lane l
/// holds Σ scale·q·y over elements 32m+4l..32m+4l+4 of every 32-value chunk m, minus
/// 32·(scale·bsum) of the 16-value groups 2l and 2l+1 — the -32 offset is removed per lane,
/// not per element, so the lanes' integers (and their float roundings) are ggml's; then one
/// fma per lane with `dy·dx` and the 8-lane tree sum.
fn dot_q6k(w: &[u8], a: &[Act256]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd::available() {
        // Safety: AVX2/FMA checked; `w` holds one 210-byte block per activation block.
        return unsafe { simd::dotn_q6k::<1>(w, [a]) }[0];
    }
    dot_q6k_ref(w, a)
}

fn dot_q6k_ref(w: &[u8], a: &[Act256]) -> f32 {
    let mut acc = [0f32; 8];
    for (blk, y) in w.chunks_exact(210).zip(a) {
        let d = y.d * f16_at(blk, 208);
        let q = q6k_values(blk);
        let sc = |g: usize| blk[192 + g] as i8 as i32;
        for (l, a) in acc.iter_mut().enumerate() {
            let mut s = 0i32;
            for m in 0..8 {
                for t in 0..4 {
                    let e = 32 * m + 4 * l + t;
                    s += sc(e / 16) * q[e] * y.qs[e] as i32;
                }
            }
            s -= 32 * (y.bsums[2 * l] as i32 * sc(2 * l) + y.bsums[2 * l + 1] as i32 * sc(2 * l + 1));
            *a = d.mul_add(s as f32, *a);
        }
    }
    hsum8(acc)
}

/// The 256 unsigned 2-bit values (0..4) of a Q2_K block (scales[16], qs[64], d, dmin): per
/// half of 128, four 2-bit planes of qs[0..32].
pub(super) fn q2k_values(blk: &[u8]) -> [i32; 256] {
    std::array::from_fn(|e| {
        let (n, r) = (e / 128, e % 128);
        ((blk[16 + 32 * n + r % 32] >> (2 * (r / 32))) & 3) as i32
    })
}

/// Q2_K·q8_K as ggml's repacked 8x8 kernels (AVX-512 builds): the GEMV (`per_half ==
/// false`) folds a block's exact integer Σ scale·q·y into one fma with `dx·dy` (and Σ min·bsum
/// into one with `dmin·dy`); the GEMM, used for rows in groups of four, folds each 128-value
/// half separately. The result is `acc - acc_min`.
fn dot_q2k(w: &[u8], a: &[Act256], per_half: bool) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd::available() {
        // Safety: AVX2/FMA checked; `w` holds one 84-byte block per activation block.
        return unsafe { simd::dotn_q2k::<1>(w, [a], [per_half]) }[0];
    }
    dot_q2k_ref(w, a, per_half)
}

fn dot_q2k_ref(w: &[u8], a: &[Act256], per_half: bool) -> f32 {
    let (mut acc, mut acc_min) = (0f32, 0f32);
    for (blk, y) in w.chunks_exact(84).zip(a) {
        let (d, dmin) = (f16_at(blk, 80), f16_at(blk, 82));
        let q = q2k_values(blk);
        let mut isum = [0i32; 2];
        let mut imin = [0i32; 2];
        for g in 0..16 {
            let (sc, m) = ((blk[g] & 0x0F) as i32, (blk[g] >> 4) as i32);
            let dot: i32 = (16 * g..16 * g + 16).map(|e| q[e] * y.qs[e] as i32).sum();
            isum[g / 8] += sc * dot;
            imin[g / 8] += m * y.bsums[g] as i32;
        }
        if per_half {
            for h in 0..2 {
                acc = (isum[h] as f32).mul_add(d * y.d, acc);
                acc_min = (imin[h] as f32).mul_add(dmin * y.d, acc_min);
            }
        } else {
            acc = ((isum[0] + isum[1]) as f32).mul_add(d * y.d, acc);
            acc_min = ((imin[0] + imin[1]) as f32).mul_add(dmin * y.d, acc_min);
        }
    }
    acc - acc_min
}

/// The 16 signed 6-bit scales (-32..32) of a Q3_K block: low nibbles from bytes 0..8, two
/// high bits each from bytes 8..12.
pub(super) fn q3k_scales(blk: &[u8]) -> [i32; 16] {
    let sc = &blk[96..108];
    std::array::from_fn(|g| {
        let (i, quarter) = (g % 4, g / 4);
        let lo = match quarter {
            0 => sc[i] & 0x0F,
            1 => sc[4 + i] & 0x0F,
            2 => sc[i] >> 4,
            _ => sc[4 + i] >> 4,
        };
        (lo | ((sc[8 + i] >> (2 * quarter)) & 3) << 4) as i32 - 32
    })
}

/// The 256 signed 3-bit values (-4..4) of a Q3_K block (hmask[32], qs[64], scales[12], d):
/// per half of 128, four 2-bit planes of qs[0..32], each with its bit of hmask clear meaning -4.
pub(super) fn q3k_values(blk: &[u8]) -> [i32; 256] {
    std::array::from_fn(|e| {
        let (n, r) = (e / 128, e % 128);
        let (j, l) = (r / 32, r % 32);
        let low = (blk[32 + 32 * n + l] >> (2 * j)) & 3;
        let high = (blk[l] >> (4 * n + j)) & 1;
        low as i32 - if high == 1 { 0 } else { 4 }
    })
}

/// Q3_K·q8_K, `ggml_vec_dot_q3_K_q8_K` (AVX2; no repack on x86, no tinyBLAS): per block 8
/// integer lanes (lane l: Σ scale·q·y over elements 32m+4l..32m+4l+4 of every 32-value
/// chunk m), one fma per lane with `dy·dx`, the 8-lane tree sum.
fn dot_q3k(w: &[u8], a: &[Act256]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd::available() {
        // Safety: AVX2/FMA checked; `w` holds one 110-byte block per activation block.
        return unsafe { simd::dotn_q3k::<1>(w, [a]) }[0];
    }
    dot_q3k_ref(w, a)
}

fn dot_q3k_ref(w: &[u8], a: &[Act256]) -> f32 {
    let mut acc = [0f32; 8];
    for (blk, y) in w.chunks_exact(110).zip(a) {
        let d = y.d * f16_at(blk, 108);
        let (q, sc) = (q3k_values(blk), q3k_scales(blk));
        for (l, a) in acc.iter_mut().enumerate() {
            let mut s = 0i32;
            for m in 0..8 {
                for t in 0..4 {
                    let e = 32 * m + 4 * l + t;
                    s += sc[e / 16] * q[e] * y.qs[e] as i32;
                }
            }
            *a = d.mul_add(s as f32, *a);
        }
    }
    hsum8(acc)
}

/// The 256 unsigned 5-bit values (0..32) of a Q5_K block (d, dmin, scales[12], qh[32],
/// qs[128]): sub-block j takes the low (j even) or high nibbles of qs[32·(j/2)..] and bit j
/// of qh.
pub(super) fn q5k_values(blk: &[u8]) -> [i32; 256] {
    std::array::from_fn(|e| {
        let (j, i) = (e / 32, e % 32);
        let b = blk[48 + 32 * (j / 2) + i];
        let lo = if j % 2 == 0 { b & 0x0F } else { b >> 4 };
        (lo | ((blk[16 + i] >> j) & 1) << 4) as i32
    })
}

/// Q5_K·q8_K, `ggml_vec_dot_q5_K_q8_K` (AVX2; no repack on x86, no tinyBLAS): per block 8
/// integer lanes (lane l: Σ scale·q·y over elements 32j+4l..32j+4l+4 of every sub-block j),
/// one fma per lane with `dy·dx`; the mins as one integer Σ m·ysum per block folded by fma
/// with `-(dy·dmin)` into a separate sum that is added after the 8-lane tree sum.
fn dot_q5k(w: &[u8], a: &[Act256]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd::available() {
        // Safety: AVX2/FMA checked; `w` holds one 176-byte block per activation block.
        return unsafe { simd::dotn_q5k::<1>(w, [a]) }[0];
    }
    dot_q5k_ref(w, a)
}

fn dot_q5k_ref(w: &[u8], a: &[Act256]) -> f32 {
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    for (blk, y) in w.chunks_exact(176).zip(a) {
        let d = y.d * f16_at(blk, 0);
        let dmin = -y.d * f16_at(blk, 2);
        let sc = &blk[4..16];
        let imin: i32 = (0..8).map(|j| scale_min(sc, j).1 * y.sums[j]).sum();
        summs = dmin.mul_add(imin as f32, summs);
        let q = q5k_values(blk);
        for (l, a) in acc.iter_mut().enumerate() {
            let mut s = 0i32;
            for j in 0..8 {
                let part: i32 = (0..4).map(|t| q[32 * j + 4 * l + t] * y.qs[32 * j + 4 * l + t] as i32).sum();
                s += scale_min(sc, j).0 * part;
            }
            *a = d.mul_add(s as f32, *a);
        }
    }
    hsum8(acc) + summs
}

/// f32 → bf16 bits, rounding to nearest even (ggml's `vec_dot_type` conversion for BF16
/// weights; NaN stays a quiet NaN).
fn to_bf16(v: f32) -> u16 {
    let u = v.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    ((u + 0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

#[inline(always)]
fn bf16_f32(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// One lane step of AVX512-BF16's `vdpbf16ps` (the zen4/sapphirerapids builds ggml picks on
/// CPUs that have it): both products of a bf16 pair are exact in f32 and are added one after
/// the other, the odd element's first.
#[inline(always)]
fn dp_pair(acc: f32, w: &[u8], x: &[u16], i: usize) -> f32 {
    let odd = bf16_f32(u16::from_le_bytes([w[2 * i + 2], w[2 * i + 3]])) * bf16_f32(x[i + 1]);
    let even = bf16_f32(u16::from_le_bytes([w[2 * i], w[2 * i + 1]])) * bf16_f32(x[i]);
    (acc + odd) + even
}

/// `ggml_vec_dot_bf16` for one token: two 16-lane `vdpbf16ps` accumulators over steps of 64
/// (the first and second 32 values), each reduced by the 16-lane tree and summed in f64 with
/// the tail (k % 64) products.
fn dot_bf16_single(w: &[u8], x: &[u16]) -> f32 {
    let k = x.len();
    let np = k & !63;
    #[cfg(target_arch = "x86_64")]
    if simd::available() {
        // Safety: AVX2 checked; `w` is the weight row of `k` bf16 values.
        let c = unsafe { simd::bf16_single_lanes(w, x) };
        let mut sum = reduce16(&c[0]) as f64;
        sum += reduce16(&c[1]) as f64;
        for i in np..k {
            sum += (bf16_f32(u16::from_le_bytes([w[2 * i], w[2 * i + 1]])) * bf16_f32(x[i])) as f64;
        }
        return sum as f32;
    }
    dot_bf16_single_ref(w, x)
}

fn dot_bf16_single_ref(w: &[u8], x: &[u16]) -> f32 {
    let k = x.len();
    let np = k & !63;
    let mut c = [[0f32; 16]; 2];
    for base in (0..np).step_by(64) {
        for (h, acc) in c.iter_mut().enumerate() {
            for (l, a) in acc.iter_mut().enumerate() {
                *a = dp_pair(*a, w, x, base + 32 * h + 2 * l);
            }
        }
    }
    let mut sum = reduce16(&c[0]) as f64;
    sum += reduce16(&c[1]) as f64;
    for i in np..k {
        sum += (bf16_f32(u16::from_le_bytes([w[2 * i], w[2 * i + 1]])) * bf16_f32(x[i])) as f64;
    }
    sum as f32
}

/// tinyBLAS for several tokens (k % 32 == 0): one 16-lane `vdpbf16ps` accumulator over chunks
/// of 32, then the 16-lane tree sum.
fn dot_bf16_tiled(w: &[u8], x: &[u16]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd::available() {
        // Safety: AVX2 checked; k % 32 == 0 (the caller's `shapes_ok`).
        return reduce16(&unsafe { simd::bf16_tiled_lanes(w, x) });
    }
    dot_bf16_tiled_ref(w, x)
}

fn dot_bf16_tiled_ref(w: &[u8], x: &[u16]) -> f32 {
    let mut c = [0f32; 16];
    for base in (0..x.len()).step_by(32) {
        for (l, a) in c.iter_mut().enumerate() {
            *a = dp_pair(*a, w, x, base + 2 * l);
        }
    }
    reduce16(&c)
}

fn dot_q4_1(w: &[u8], a: &[Act32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd::available() {
        // Safety: AVX2/FMA checked; `w` holds one 20-byte block per activation block.
        return unsafe { simd::dot_q4_1(w, a) };
    }
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    for (blk, y) in w.chunks_exact(20).zip(a) {
        summs = f16_at(blk, 2).mul_add(y.s, summs);
        let d = y.d * f16_at(blk, 0);
        let q = nibbles(&blk[4..20]);
        // Lane l: elements 4l..4l+4 (ggml's 8-lane integer dot).
        let mut lanes = [0i32; 8];
        for (l, s) in lanes.iter_mut().enumerate() {
            for t in 0..4 {
                *s += q[4 * l + t] as i32 * y.qs[4 * l + t] as i32;
            }
        }
        for l in 0..8 {
            acc[l] = d.mul_add(lanes[l] as f32, acc[l]);
        }
    }
    let h = [acc[4] + acc[0], acc[5] + acc[1], acc[6] + acc[2], acc[7] + acc[3]];
    ((h[0] + h[2]) + (h[1] + h[3])) + summs
}

/// The 6-bit scale and min of sub-block j of a Q4_K block (`get_scale_min_k4`).
pub(super) fn scale_min(sc: &[u8], j: usize) -> (i32, i32) {
    if j < 4 {
        ((sc[j] & 63) as i32, (sc[j + 4] & 63) as i32)
    } else {
        (
            ((sc[j + 4] & 0x0F) | ((sc[j - 4] >> 6) << 4)) as i32,
            ((sc[j + 4] >> 4) | ((sc[j] >> 6) << 4)) as i32,
        )
    }
}

/// Q4_K·q8_K. The 8x8 GEMV (`per_pair == false`) folds a whole 256-value block into one
/// fma; the 8x8 GEMM that ggml uses for rows in groups of four folds every pair of 32-value
/// sub-blocks, so the two round differently.
fn dot_q4k(w: &[u8], a: &[Act256], per_pair: bool) -> f32 {
    let simd = simd::available();
    let (mut acc, mut acc_min) = (0f32, 0f32);
    for (blk, y) in w.chunks_exact(144).zip(a) {
        let (d, dmin, sc, qs) = (f16_at(blk, 0), f16_at(blk, 2), &blk[4..16], &blk[16..]);
        let (mut isum, mut imin) = (0i32, 0i32);
        for j in 0..8 {
            let (s, m) = scale_min(sc, j);
            let bytes = &qs[(j / 2) * 32..(j / 2) * 32 + 32];
            let ys = &y.qs[j * 32..j * 32 + 32];
            let dot = if simd {
                // Safety: AVX2/FMA checked; 32 bytes and 32 values.
                #[cfg(target_arch = "x86_64")]
                unsafe {
                    simd::isum_q4k_sub(bytes, j % 2 == 1, ys)
                }
                #[cfg(not(target_arch = "x86_64"))]
                0
            } else {
                let shift = if j % 2 == 0 { 0 } else { 4 };
                bytes.iter().zip(ys).map(|(b, &q8)| ((b >> shift) & 0x0F) as i32 * q8 as i32).sum()
            };
            isum += s * dot;
            imin += m * y.sums[j];
            if per_pair && j % 2 == 1 {
                acc = (isum as f32).mul_add(d * y.d, acc);
                acc_min = (imin as f32).mul_add(dmin * y.d, acc_min);
                (isum, imin) = (0, 0);
            }
        }
        if !per_pair {
            acc = (isum as f32).mul_add(d * y.d, acc);
            acc_min = (imin as f32).mul_add(dmin * y.d, acc_min);
        }
    }
    acc - acc_min
}

/// Output columns per task: enough tasks to balance `threads` (and a helper that wakes late),
/// whole groups of 8 columns, at least 8.
fn cols_per_task(n: usize, m: usize) -> usize {
    let threads = pool::global().threads();
    if threads == 1 {
        return n;
    }
    let tasks = if m == 1 { threads * 8 } else { threads * 16 };
    (n.div_ceil(tasks).div_ceil(8) * 8).max(8)
}

/// Rows of activations per cache block in the multi-row kernels.
const ROW_BLOCK: usize = 64;

/// Runs `f(j0, j1)` over column ranges covering `0..n`, spread over the pool.
fn for_cols(n: usize, m: usize, f: &(dyn Fn(usize, usize) + Sync)) {
    let c = cols_per_task(n, m);
    pool::run(n.div_ceil(c), &|t| f(t * c, ((t + 1) * c).min(n)));
}

/// The type of an absent `dot4` of `tiled_rows` (no SIMD kernels on this architecture).
#[cfg(not(target_arch = "x86_64"))]
type NoDot4 = fn(&[u8], usize) -> [f32; 4];

/// Every output `(r, j)`: columns spread over the pool, activation rows in blocks of
/// `ROW_BLOCK` so a weight row stays in cache, four rows at a time through `dot4` when given
/// (SIMD), the rest through `dot1`. Each output keeps the single-row kernel's order either way.
/// Generic rather than `dyn` so the dot kernels inline into the loop (measured: ~5% of prefill).
fn tiled_rows<'w, W, P, D4, D1>(n: usize, m: usize, wrow: &W, put: &P, dot4: Option<&D4>, dot1: &D1)
where
    W: Fn(usize) -> &'w [u8] + Sync,
    P: Fn(usize, usize, f32) + Sync,
    D4: Fn(&[u8], usize) -> [f32; 4] + Sync,
    D1: Fn(&[u8], usize) -> f32 + Sync,
{
    for_cols(n, m, &|j0, j1| {
        for rb in (0..m).step_by(ROW_BLOCK) {
            let re = (rb + ROW_BLOCK).min(m);
            for j in j0..j1 {
                let wr = wrow(j);
                let mut r = rb;
                if let Some(dot4) = dot4 {
                    while r + 4 <= re {
                        for (t, v) in dot4(wr, r).into_iter().enumerate() {
                            put(r + t, j, v);
                        }
                        r += 4;
                    }
                }
                while r < re {
                    put(r, j, dot1(wr, r));
                    r += 1;
                }
            }
        }
    });
}

/// `x`: `[m, k]` f32 on the CPU, `w`: `[n, k]` of a `supported` type → `[m, n]` f32.
/// `rows[i]` decides which of llama.cpp's kernels row i follows (see `RowPos`).
///
/// Columns (weight rows) are spread over `ops::pool`; several activation rows go through
/// one weight row at a time (unpacked once), each output with its own accumulators in the
/// order of the single-row kernel, so the result does not depend on tiling or threads.
pub fn matmul(x: &Tensor, w: &QTensor, rows: &[RowPos]) -> Result<Tensor> {
    let (n, k) = w.shape().dims2()?;
    let (m, kx) = x.dims2()?;
    let dtype = w.dtype();
    if kx != k || !k.is_multiple_of(dtype.block_size()) || !supported(dtype, n) || rows.len() != m {
        return Err(WickError::Internal(format!(
            "ggml matmul: input [{m}, {kx}], {dtype:?} weight [{n}, {k}]"
        )));
    }
    let data = w.data()?;
    let data: &[u8] = &data;
    let row_bytes = k / dtype.block_size() * dtype.type_size();
    if data.len() != n * row_bytes {
        return Err(WickError::Internal("weight size does not match its shape".into()));
    }
    let xs = x.flatten_all()?.to_vec1::<f32>()?;
    let mut y = vec![0f32; m * n];
    let yp = SyncPtr(y.as_mut_ptr());
    // Safety (all `put`s): each (row, column) is written by the one task owning the column.
    let put = move |r: usize, j: usize, v: f32| unsafe { *yp.get().add(r * n + j) = v };
    let simd = simd::available();
    let wrow = |j: usize| &data[j * row_bytes..(j + 1) * row_bytes];
    if dtype == GgmlDType::F16 {
        let x16: Vec<f32> = xs.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
        // tinyBLAS takes over from ggml's own dot product for several rows when k splits
        // into 16-lane chunks and the output count into tiles of 4.
        let shapes_ok = k.is_multiple_of(16) && n.is_multiple_of(4);
        for_cols(n, m, &|j0, j1| {
            crate::ops::simd::fast(
                #[inline(always)]
                || {
                    for j in j0..j1 {
                        let wr = wrow(j);
                        let wv = |i: usize| f16_at(wr, 2 * i);
                        for r in 0..m {
                            let xr = &x16[r * k..(r + 1) * k];
                            let tiled = shapes_ok && rows[r].seq_len > 1;
                            put(
                                r,
                                j,
                                if tiled {
                                    dot_tiled(k, wv, |i| xr[i])
                                } else {
                                    dot_single(k, wv, |i| xr[i])
                                },
                            );
                        }
                    }
                },
            )
        });
    } else if dtype == GgmlDType::Q2K {
        let acts: Vec<Vec<Act256>> = quantize_rows(&xs, k, quantize_q8k);
        // As for Q4_K: the repacked GEMM for rows in groups of four, the GEMV for the rest.
        let gemm = RowPos::in_gemm_group;
        #[cfg(target_arch = "x86_64")]
        let dot4 = |wr: &[u8], r: usize| {
            let a = [&acts[r][..], &acts[r + 1][..], &acts[r + 2][..], &acts[r + 3][..]];
            let ph = [gemm(rows[r]), gemm(rows[r + 1]), gemm(rows[r + 2]), gemm(rows[r + 3])];
            // Safety: only passed on when AVX2/FMA are available; every row has k/256 blocks.
            unsafe { simd::dotn_q2k::<4>(wr, a, ph) }
        };
        #[cfg(target_arch = "x86_64")]
        let dot4 = simd.then_some(&dot4);
        #[cfg(not(target_arch = "x86_64"))]
        let dot4: Option<&NoDot4> = None;
        tiled_rows(n, m, &wrow, &put, dot4, &|wr, r| dot_q2k(wr, &acts[r], gemm(rows[r])));
    } else if dtype == GgmlDType::Q4K {
        let acts: Vec<Vec<Act256>> = quantize_rows(&xs, k, quantize_q8k);
        // ggml's repacked kernels run rows in groups of four through the GEMM and the
        // remaining `len % 4` rows (all rows when len < 4) through the GEMV.
        let gemm = RowPos::in_gemm_group;
        #[cfg(target_arch = "x86_64")]
        let dot4 = |wr: &[u8], r: usize| {
            let a = [&acts[r][..], &acts[r + 1][..], &acts[r + 2][..], &acts[r + 3][..]];
            let pp = [gemm(rows[r]), gemm(rows[r + 1]), gemm(rows[r + 2]), gemm(rows[r + 3])];
            // Safety: only passed on when AVX2/FMA are available; every row has k/256 blocks.
            unsafe { simd::dotn_q4k::<4>(wr, a, pp) }
        };
        #[cfg(target_arch = "x86_64")]
        let dot4 = simd.then_some(&dot4);
        #[cfg(not(target_arch = "x86_64"))]
        let dot4: Option<&NoDot4> = None;
        let dot1 = |wr: &[u8], r: usize| {
            #[cfg(target_arch = "x86_64")]
            if simd {
                // Safety: AVX2/FMA checked; every row has k/256 blocks.
                return unsafe { simd::dotn_q4k::<1>(wr, [&acts[r][..]], [gemm(rows[r])]) }[0];
            }
            dot_q4k(wr, &acts[r], gemm(rows[r]))
        };
        tiled_rows(n, m, &wrow, &put, dot4, &dot1);
    } else if dtype == GgmlDType::BF16 {
        let xb: Vec<u16> = xs.iter().map(|&v| to_bf16(v)).collect();
        // As for F16: tinyBLAS for several rows when k splits into 32-value chunks and the
        // output count into tiles of 4, `ggml_vec_dot_bf16` otherwise.
        let shapes_ok = k.is_multiple_of(32) && n.is_multiple_of(4);
        for_cols(n, m, &|j0, j1| {
            for j in j0..j1 {
                let wr = wrow(j);
                for r in 0..m {
                    let xr = &xb[r * k..(r + 1) * k];
                    let tiled = shapes_ok && rows[r].seq_len > 1;
                    put(r, j, if tiled { dot_bf16_tiled(wr, xr) } else { dot_bf16_single(wr, xr) });
                }
            }
        });
    } else if matches!(dtype, GgmlDType::Q3K | GgmlDType::Q5K | GgmlDType::Q6K) {
        // One kernel for every row count (see `dot_q6k`, `dot_q5k`, `dot_q3k`).
        let acts: Vec<Vec<Act256>> = quantize_rows(&xs, k, quantize_q8k);
        let dot = match dtype {
            GgmlDType::Q6K => dot_q6k,
            GgmlDType::Q5K => dot_q5k,
            _ => dot_q3k,
        };
        #[cfg(target_arch = "x86_64")]
        let simd4: unsafe fn(&[u8], [&[Act256]; 4]) -> [f32; 4] = match dtype {
            GgmlDType::Q6K => simd::dotn_q6k::<4>,
            GgmlDType::Q5K => simd::dotn_q5k::<4>,
            _ => simd::dotn_q3k::<4>,
        };
        #[cfg(target_arch = "x86_64")]
        let dot4 = |wr: &[u8], r: usize| {
            let a = [&acts[r][..], &acts[r + 1][..], &acts[r + 2][..], &acts[r + 3][..]];
            // Safety: only passed on when AVX2/FMA are available; every row has k/256 blocks.
            unsafe { simd4(wr, a) }
        };
        #[cfg(target_arch = "x86_64")]
        let dot4 = simd.then_some(&dot4);
        #[cfg(not(target_arch = "x86_64"))]
        let dot4: Option<&NoDot4> = None;
        tiled_rows(n, m, &wrow, &put, dot4, &|wr, r| dot(wr, &acts[r]));
    } else {
        let acts: Vec<Vec<Act32>> = quantize_rows(&xs, k, quantize_q8);
        let dot = match dtype {
            GgmlDType::Q8_0 => dot_q8_0,
            GgmlDType::Q4_0 => dot_q4_0,
            GgmlDType::Q5_0 => dot_q5_0,
            GgmlDType::Q5_1 => dot_q5_1,
            _ => dot_q4_1,
        };
        #[cfg(target_arch = "x86_64")]
        let simd4: unsafe fn(&[u8], [&[Act32]; 4]) -> [f32; 4] = match dtype {
            GgmlDType::Q8_0 => simd::dot4_q8_0,
            GgmlDType::Q4_0 => simd::dot4_q4_0,
            GgmlDType::Q5_0 => simd::dot4_q5_0,
            GgmlDType::Q5_1 => simd::dot4_q5_1,
            _ => simd::dot4_q4_1,
        };
        #[cfg(target_arch = "x86_64")]
        let dot4 = |wr: &[u8], r: usize| {
            let a = [&acts[r][..], &acts[r + 1][..], &acts[r + 2][..], &acts[r + 3][..]];
            // Safety: only passed on when AVX2/FMA are available; every row has k/32 blocks.
            unsafe { simd4(wr, a) }
        };
        #[cfg(target_arch = "x86_64")]
        let dot4 = simd.then_some(&dot4);
        #[cfg(not(target_arch = "x86_64"))]
        let dot4: Option<&NoDot4> = None;
        tiled_rows(n, m, &wrow, &put, dot4, &|wr, r| dot(wr, &acts[r]));
    }
    Ok(Tensor::from_vec(y, (m, n), x.device())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SIMD and scalar paths agree bit for bit, and both stay within a relative error bound
    /// of the dequantized f32 reference (the bound covers the q8 activation rounding).
    #[test]
    fn q5_0_matches_scalar_and_dequantized_reference() {
        let mut s = 11u32;
        let mut r = || {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1 << 24) as f32 - 0.5
        };
        let k = 256;
        for _ in 0..20 {
            let mut w = vec![];
            let mut deq = vec![];
            for _ in 0..k / 32 {
                let d = f16::from_f32(r().abs() * 0.1 + 0.01);
                w.extend_from_slice(&d.to_le_bytes());
                let vals: Vec<i32> = (0..32).map(|_| ((r() + 0.5) * 32.0) as i32 % 32).collect();
                let mut qh = 0u32;
                let mut qs = [0u8; 16];
                for (i, &v) in vals.iter().enumerate() {
                    qh |= ((v as u32 >> 4) & 1) << i;
                    if i < 16 {
                        qs[i] |= (v & 15) as u8
                    } else {
                        qs[i - 16] |= ((v & 15) as u8) << 4
                    }
                    deq.push((v - 16) as f32 * d.to_f32());
                }
                w.extend_from_slice(&qh.to_le_bytes());
                w.extend_from_slice(&qs);
            }
            let x: Vec<f32> = (0..k).map(|_| r()).collect();
            let a = quantize_q8(&x);
            let fast = dot_q5_0(&w, &a);
            let exact: f64 = deq.iter().zip(&x).map(|(&p, &q)| p as f64 * q as f64).sum();
            let norm: f64 = deq.iter().zip(&x).map(|(&p, &q)| (p as f64 * q as f64).abs()).sum();
            assert!(((fast as f64) - exact).abs() <= 1e-2 * norm, "{fast} vs {exact}");
            #[cfg(target_arch = "x86_64")]
            if simd::available() {
                let four = unsafe { simd::dot4_q5_0(&w, [&a, &a, &a, &a]) };
                assert!(four.iter().all(|v| v.to_bits() == fast.to_bits()));
                let mut acc = [0f32; 8];
                for (blk, y) in w.chunks_exact(22).zip(&a) {
                    let d = f16_at(blk, 0) * y.d;
                    let xv = q5_0_values(blk);
                    for (l, s) in acc.iter_mut().enumerate() {
                        let v: i32 = (0..4).map(|t| xv[4 * l + t] * y.qs[4 * l + t] as i32).sum();
                        *s = d.mul_add(v as f32, *s);
                    }
                }
                let h = [acc[4] + acc[0], acc[5] + acc[1], acc[6] + acc[2], acc[7] + acc[3]];
                assert_eq!(((h[0] + h[2]) + (h[1] + h[3])).to_bits(), fast.to_bits());
            }
        }
    }

    fn lcg(seed: u32) -> impl FnMut() -> u32 {
        let mut s = seed;
        move || {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            s >> 8
        }
    }

    /// Random blocks of `size` bytes with f16 scales written at `scales` (offsets), and the
    /// activations; checks SIMD (1 and 4 rows) against `reference` bit for bit and both
    /// against the f64 dot of `deq(block)` within 1% of Σ|w·x|.
    fn check_block_type<A>(
        size: usize,
        scales: &[usize],
        per_block: usize,
        quantize: fn(&[f32]) -> Vec<A>,
        deq: fn(&[u8]) -> Vec<f32>,
        dot: fn(&[u8], &[A]) -> f32,
        reference: fn(&[u8], &[A]) -> f32,
        #[allow(unused_variables)] dot4: Option<unsafe fn(&[u8], [&[A]; 4]) -> [f32; 4]>,
    ) {
        let mut r = lcg(7);
        let k = 512;
        for _ in 0..20 {
            let mut w = vec![];
            for _ in 0..k / per_block {
                let mut blk: Vec<u8> = (0..size).map(|_| r() as u8).collect();
                for &o in scales {
                    let d = f16::from_f32((r() % 1000) as f32 * 1e-4 + 1e-3);
                    blk[o..o + 2].copy_from_slice(&d.to_le_bytes());
                }
                w.extend_from_slice(&blk);
            }
            let x: Vec<f32> = (0..k).map(|_| (r() as f32 / (1 << 24) as f32) - 0.5).collect();
            let a = quantize(&x);
            let fast = dot(&w, &a);
            let slow = reference(&w, &a);
            assert_eq!(fast.to_bits(), slow.to_bits(), "{fast} vs {slow}");
            let deqv: Vec<f32> = w.chunks_exact(size).flat_map(deq).collect();
            let exact: f64 = deqv.iter().zip(&x).map(|(&p, &q)| p as f64 * q as f64).sum();
            let norm: f64 = deqv.iter().zip(&x).map(|(&p, &q)| (p as f64 * q as f64).abs()).sum();
            assert!(((fast as f64) - exact).abs() <= 1e-2 * norm, "{fast} vs {exact} (Σ|·| {norm})");
            #[cfg(target_arch = "x86_64")]
            if let (true, Some(d4)) = (simd::available(), dot4) {
                let four = unsafe { d4(&w, [&a, &a, &a, &a]) };
                assert!(four.iter().all(|v| v.to_bits() == slow.to_bits()));
            }
        }
    }

    fn deq_q6k(blk: &[u8]) -> Vec<f32> {
        let d = f16_at(blk, 208);
        let q = q6k_values(blk);
        (0..256).map(|e| d * (blk[192 + e / 16] as i8 as f32) * (q[e] - 32) as f32).collect()
    }

    fn deq_q5k(blk: &[u8]) -> Vec<f32> {
        let (d, dmin) = (f16_at(blk, 0), f16_at(blk, 2));
        let q = q5k_values(blk);
        (0..256)
            .map(|e| {
                let (s, m) = scale_min(&blk[4..16], e / 32);
                d * s as f32 * q[e] as f32 - dmin * m as f32
            })
            .collect()
    }

    fn deq_q5_1(blk: &[u8]) -> Vec<f32> {
        let (d, m) = (f16_at(blk, 0), f16_at(blk, 2));
        q5_1_values(blk).iter().map(|&q| d * q as f32 + m).collect()
    }

    #[cfg(target_arch = "x86_64")]
    unsafe fn q6k4(w: &[u8], a: [&[Act256]; 4]) -> [f32; 4] {
        simd::dotn_q6k::<4>(w, a)
    }
    #[cfg(target_arch = "x86_64")]
    unsafe fn q5k4(w: &[u8], a: [&[Act256]; 4]) -> [f32; 4] {
        simd::dotn_q5k::<4>(w, a)
    }

    #[test]
    fn q6k_matches_scalar_and_dequantized_reference() {
        #[cfg(target_arch = "x86_64")]
        let d4 = Some(q6k4 as unsafe fn(&[u8], [&[Act256]; 4]) -> [f32; 4]);
        #[cfg(not(target_arch = "x86_64"))]
        let d4 = None;
        check_block_type(210, &[208], 256, quantize_q8k, deq_q6k, dot_q6k, dot_q6k_ref, d4);
    }

    #[test]
    fn q5k_matches_scalar_and_dequantized_reference() {
        #[cfg(target_arch = "x86_64")]
        let d4 = Some(q5k4 as unsafe fn(&[u8], [&[Act256]; 4]) -> [f32; 4]);
        #[cfg(not(target_arch = "x86_64"))]
        let d4 = None;
        check_block_type(176, &[0, 2], 256, quantize_q8k, deq_q5k, dot_q5k, dot_q5k_ref, d4);
    }

    #[test]
    fn q5_1_matches_scalar_and_dequantized_reference() {
        #[cfg(target_arch = "x86_64")]
        let d4 = Some(simd::dot4_q5_1 as unsafe fn(&[u8], [&[Act32]; 4]) -> [f32; 4]);
        #[cfg(not(target_arch = "x86_64"))]
        let d4 = None;
        check_block_type(24, &[0, 2], 32, quantize_q8, deq_q5_1, dot_q5_1, dot_q5_1_ref, d4);
    }

    #[test]
    fn bf16_matches_scalar_and_f32_reference() {
        let mut r = lcg(5);
        let mut f = move || (r() as f32 / (1 << 24) as f32) - 0.5;
        for k in [256, 320, 96] {
            let w: Vec<u16> = (0..k).map(|_| to_bf16(f())).collect();
            let wb: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
            let x: Vec<f32> = (0..k).map(|_| f()).collect();
            let xb: Vec<u16> = x.iter().map(|&v| to_bf16(v)).collect();
            let exact: f64 = w.iter().zip(&x).map(|(&p, &q)| bf16_f32(p) as f64 * q as f64).sum();
            let norm: f64 = w.iter().zip(&x).map(|(&p, &q)| (bf16_f32(p) as f64 * q as f64).abs()).sum();
            let single = dot_bf16_single(&wb, &xb);
            assert_eq!(single.to_bits(), dot_bf16_single_ref(&wb, &xb).to_bits());
            assert!(((single as f64) - exact).abs() <= 1e-2 * norm, "{single} vs {exact}");
            if k % 32 == 0 {
                let tiled = dot_bf16_tiled(&wb, &xb);
                assert_eq!(tiled.to_bits(), dot_bf16_tiled_ref(&wb, &xb).to_bits());
                assert!(((tiled as f64) - exact).abs() <= 1e-2 * norm, "{tiled} vs {exact}");
            }
        }
        // Round to nearest even, ties included.
        assert_eq!(to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
    }

    fn deq_q3k(blk: &[u8]) -> Vec<f32> {
        let d = f16_at(blk, 108);
        let (q, sc) = (q3k_values(blk), q3k_scales(blk));
        (0..256).map(|e| d * sc[e / 16] as f32 * q[e] as f32).collect()
    }

    #[cfg(target_arch = "x86_64")]
    unsafe fn q3k4(w: &[u8], a: [&[Act256]; 4]) -> [f32; 4] {
        simd::dotn_q3k::<4>(w, a)
    }

    #[test]
    fn q3k_matches_scalar_and_dequantized_reference() {
        #[cfg(target_arch = "x86_64")]
        let d4 = Some(q3k4 as unsafe fn(&[u8], [&[Act256]; 4]) -> [f32; 4]);
        #[cfg(not(target_arch = "x86_64"))]
        let d4 = None;
        check_block_type(110, &[108], 256, quantize_q8k, deq_q3k, dot_q3k, dot_q3k_ref, d4);
    }

    fn deq_q2k(blk: &[u8]) -> Vec<f32> {
        let (d, dmin) = (f16_at(blk, 80), f16_at(blk, 82));
        let q = q2k_values(blk);
        (0..256)
            .map(|e| d * (blk[e / 16] & 0x0F) as f32 * q[e] as f32 - dmin * (blk[e / 16] >> 4) as f32)
            .collect()
    }

    #[test]
    fn q2k_matches_scalar_and_dequantized_reference() {
        for per_half in [false, true] {
            let dot: fn(&[u8], &[Act256]) -> f32 =
                if per_half { |w, a| dot_q2k(w, a, true) } else { |w, a| dot_q2k(w, a, false) };
            let reference: fn(&[u8], &[Act256]) -> f32 =
                if per_half { |w, a| dot_q2k_ref(w, a, true) } else { |w, a| dot_q2k_ref(w, a, false) };
            #[cfg(target_arch = "x86_64")]
            let d4: Option<unsafe fn(&[u8], [&[Act256]; 4]) -> [f32; 4]> = if per_half {
                Some(|w, a| unsafe { simd::dotn_q2k::<4>(w, a, [true; 4]) })
            } else {
                Some(|w, a| unsafe { simd::dotn_q2k::<4>(w, a, [false; 4]) })
            };
            #[cfg(not(target_arch = "x86_64"))]
            let d4 = None;
            check_block_type(84, &[80, 82], 256, quantize_q8k, deq_q2k, dot, reference, d4);
        }
    }
}
