//! Portable row dots of the K-quants against q8_K activation rows, in the order of ggml's x86
//! kernels for them, each dispatching to its AVX2 twin in `x86::k_quants` (or NEON twin in
//! `arm::k_quants`) where the CPU has it:
//! - Q3_K, Q5_K, Q6_K: their `ggml_vec_dot_*_q8_K` for any row count (no repack or tinyBLAS
//!   on x86), 8 integer lanes with one fma per lane and block;
//! - Q4_K (output count % 8 == 0) and Q2_K (AVX-512 builds): the repacked 8x8 GEMV/GEMM — per
//!   block (GEMV) or part of a block (GEMM) an exact integer dot, then
//!   `acc = fma(float(isum), dx·dy, acc)`, minus the same for the mins;
//! - Q6_K on aarch64 (output count % 8 == 0): ggml's 8x4 repack there (`dot_q6k_repacked`).

#[cfg(target_arch = "aarch64")]
use super::arm::k_quants as arm;
use super::blocks::{f16_at, fold_q2k, hsum8, q3k_scales, scale_min, Q2K, Q3K, Q4K, Q5K, Q6K};
use super::feats::has_avx2_fma;
#[cfg(target_arch = "aarch64")]
use super::feats::{isa, Isa};
use super::q8::Act256;
#[cfg(target_arch = "x86_64")]
use super::x86::k_quants as simd;

/// The 256 unsigned 6-bit values (0..64) of a Q6_K block (ql[128], qh[64], scales[16], d) in
/// element order: per half of 128, low nibbles of ql[0..32], of ql[32..64], then their high
/// nibbles, each topped with the next two bits of qh[0..32].
fn q6k_values(blk: &[u8]) -> [i32; 256] {
    std::array::from_fn(|e| {
        let (n, r) = (e / 128, e % 128);
        let (g, l) = (r / 32, r % 32);
        let lo = blk[Q6K::QL + 64 * n + l + 32 * (g % 2)];
        let lo = if g < 2 { lo & 0x0F } else { lo >> 4 };
        let hi = (blk[Q6K::QH + 32 * n + l] >> (2 * g)) & 3;
        (lo | hi << 4) as i32
    })
}

/// Q6_K·q8_K, `ggml_vec_dot_q6_K_q8_K` (AVX2; x86 has no repacked Q6_K kernel and tinyBLAS
/// skips K-quants, so every row count goes through it). Per block, 8 integer lanes: lane l
/// holds Σ scale·q·y over elements 32m+4l..32m+4l+4 of every 32-value chunk m, minus
/// 32·(scale·bsum) of the 16-value groups 2l and 2l+1 — the -32 offset is removed per lane,
/// not per element, so the lanes' integers (and their float roundings) are ggml's; then one
/// fma per lane with `dy·dx` and the 8-lane tree sum.
pub fn dot_q6k(w: &[u8], a: &[Act256]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: AVX2/FMA checked; `w` holds one 210-byte block per activation block.
        return unsafe { simd::dotn_q6k::<1>(w, [a]) }[0];
    }
    #[cfg(target_arch = "aarch64")]
    if isa() >= Isa::Neon {
        return arm::dot_q6k(w, a);
    }
    dot_q6k_ref(w, a)
}

fn dot_q6k_ref(w: &[u8], a: &[Act256]) -> f32 {
    let mut acc = [0f32; 8];
    for (blk, y) in w.chunks_exact(Q6K::BYTES).zip(a) {
        let d = y.d * f16_at(blk, Q6K::D);
        let q = q6k_values(blk);
        let sc = |g: usize| blk[Q6K::SCALES + g] as i8 as i32;
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

/// Q6_K·q8_K as ggml's aarch64 8x4 repack (`ggml_gemv_q6_K_8x4_q8_K` and
/// `ggml_gemm_q6_K_8x4_q8_K`, armv8.2-a+dotprod builds, output count % 8 == 0): per block the
/// exact integer `Σ scale·(q − 32)·y` of all 256 values, then `dx·dy` and one float step —
/// GEMV rows `acc = fma(float(isum), dx·dy, acc)` (GCC fuses the kernel's `vmulq`+`vaddq`),
/// GEMM rows (groups of four, `gemm`) `acc + float(isum)·(dx·dy)` (`vmlaq_f32`, not fused).
/// No lanes and no tree sum: each output is one scalar chain over the blocks.
#[cfg(any(target_arch = "aarch64", test))]
pub fn dot_q6k_repacked(w: &[u8], a: &[Act256], gemm: bool) -> f32 {
    #[cfg(target_arch = "aarch64")]
    if isa() >= Isa::Neon {
        return arm::dot_q6k_repacked(w, a, gemm);
    }
    dot_q6k_repacked_ref(w, a, gemm)
}

#[cfg(any(target_arch = "aarch64", test))]
fn dot_q6k_repacked_ref(w: &[u8], a: &[Act256], gemm: bool) -> f32 {
    let mut acc = 0f32;
    for (blk, y) in w.chunks_exact(Q6K::BYTES).zip(a) {
        let q = q6k_values(blk);
        let isum: i32 =
            (0..256).map(|e| (blk[Q6K::SCALES + e / 16] as i8 as i32) * (q[e] - 32) * y.qs[e] as i32).sum();
        let d = f16_at(blk, Q6K::D) * y.d;
        acc = if gemm { acc + isum as f32 * d } else { (isum as f32).mul_add(d, acc) };
    }
    acc
}

/// The 256 unsigned 2-bit values (0..4) of a Q2_K block (scales[16], qs[64], d, dmin): per
/// half of 128, four 2-bit planes of qs[0..32].
fn q2k_values(blk: &[u8]) -> [i32; 256] {
    std::array::from_fn(|e| {
        let (n, r) = (e / 128, e % 128);
        ((blk[Q2K::QS + 32 * n + r % 32] >> (2 * (r / 32))) & 3) as i32
    })
}

/// Q2_K·q8_K as ggml's repacked 8x8 kernels (AVX-512 builds): the GEMV (`per_half ==
/// false`) folds a block's exact integer Σ scale·q·y into one fma with `dx·dy` (and Σ min·bsum
/// into one with `dmin·dy`); the GEMM, used for rows in groups of four, folds each 128-value
/// half separately. The result is `acc - acc_min`.
pub fn dot_q2k(w: &[u8], a: &[Act256], per_half: bool) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: AVX2/FMA checked; `w` holds one 84-byte block per activation block.
        return unsafe { simd::dotn_q2k::<1>(w, [a], [per_half]) }[0];
    }
    #[cfg(target_arch = "aarch64")]
    if isa() >= Isa::Neon {
        return arm::dot_q2k(w, a, per_half);
    }
    dot_q2k_ref(w, a, per_half)
}

fn dot_q2k_ref(w: &[u8], a: &[Act256], per_half: bool) -> f32 {
    let (mut acc, mut acc_min) = (0f32, 0f32);
    for (blk, y) in w.chunks_exact(Q2K::BYTES).zip(a) {
        let (d, dmin) = (f16_at(blk, Q2K::D), f16_at(blk, Q2K::DMIN));
        let q = q2k_values(blk);
        let mut isum = [0i32; 2];
        let mut imin = [0i32; 2];
        for g in 0..16 {
            let sm = blk[Q2K::SCALES + g];
            let (sc, m) = ((sm & 0x0F) as i32, (sm >> 4) as i32);
            let dot: i32 = (16 * g..16 * g + 16).map(|e| q[e] * y.qs[e] as i32).sum();
            isum[g / 8] += sc * dot;
            imin[g / 8] += m * y.bsums[g] as i32;
        }
        fold_q2k(per_half, isum, imin, (d, dmin, y.d), (&mut acc, &mut acc_min));
    }
    acc - acc_min
}

/// The 256 signed 3-bit values (-4..4) of a Q3_K block (hmask[32], qs[64], scales[12], d):
/// per half of 128, four 2-bit planes of qs[0..32], each with its bit of hmask clear meaning -4.
fn q3k_values(blk: &[u8]) -> [i32; 256] {
    std::array::from_fn(|e| {
        let (n, r) = (e / 128, e % 128);
        let (j, l) = (r / 32, r % 32);
        let low = (blk[Q3K::QS + 32 * n + l] >> (2 * j)) & 3;
        let high = (blk[Q3K::HMASK + l] >> (4 * n + j)) & 1;
        low as i32 - if high == 1 { 0 } else { 4 }
    })
}

/// Q3_K·q8_K, `ggml_vec_dot_q3_K_q8_K` (AVX2; no repack on x86, no tinyBLAS): per block 8
/// integer lanes (lane l: Σ scale·q·y over elements 32m+4l..32m+4l+4 of every 32-value
/// chunk m), one fma per lane with `dy·dx`, the 8-lane tree sum.
pub fn dot_q3k(w: &[u8], a: &[Act256]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: AVX2/FMA checked; `w` holds one 110-byte block per activation block.
        return unsafe { simd::dotn_q3k::<1>(w, [a]) }[0];
    }
    #[cfg(target_arch = "aarch64")]
    if isa() >= Isa::Neon {
        return arm::dot_q3k(w, a);
    }
    dot_q3k_ref(w, a)
}

fn dot_q3k_ref(w: &[u8], a: &[Act256]) -> f32 {
    let mut acc = [0f32; 8];
    for (blk, y) in w.chunks_exact(Q3K::BYTES).zip(a) {
        let d = y.d * f16_at(blk, Q3K::D);
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
fn q5k_values(blk: &[u8]) -> [i32; 256] {
    std::array::from_fn(|e| {
        let (j, i) = (e / 32, e % 32);
        let b = blk[Q5K::QS + 32 * (j / 2) + i];
        let lo = if j % 2 == 0 { b & 0x0F } else { b >> 4 };
        (lo | ((blk[Q5K::QH + i] >> j) & 1) << 4) as i32
    })
}

/// Q5_K·q8_K, `ggml_vec_dot_q5_K_q8_K` (AVX2; no repack on x86, no tinyBLAS): per block 8
/// integer lanes (lane l: Σ scale·q·y over elements 32j+4l..32j+4l+4 of every sub-block j),
/// one fma per lane with `dy·dx`; the mins as one integer Σ m·ysum per block folded by fma
/// with `-(dy·dmin)` into a separate sum that is added after the 8-lane tree sum.
pub fn dot_q5k(w: &[u8], a: &[Act256]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: AVX2/FMA checked; `w` holds one 176-byte block per activation block.
        return unsafe { simd::dotn_q5k::<1>(w, [a]) }[0];
    }
    #[cfg(target_arch = "aarch64")]
    if isa() >= Isa::Neon {
        return arm::dot_q5k(w, a);
    }
    dot_q5k_ref(w, a)
}

fn dot_q5k_ref(w: &[u8], a: &[Act256]) -> f32 {
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    for (blk, y) in w.chunks_exact(Q5K::BYTES).zip(a) {
        let d = y.d * f16_at(blk, Q5K::D);
        let dmin = -y.d * f16_at(blk, Q5K::DMIN);
        let sc = &blk[Q5K::SCALES..Q5K::QH];
        let imin: i32 = (0..8).map(|j| scale_min(sc, j).1 as i32 * y.sums[j]).sum();
        summs = dmin.mul_add(imin as f32, summs);
        let q = q5k_values(blk);
        for (l, a) in acc.iter_mut().enumerate() {
            let mut s = 0i32;
            for j in 0..8 {
                let part: i32 = (0..4).map(|t| q[32 * j + 4 * l + t] * y.qs[32 * j + 4 * l + t] as i32).sum();
                s += scale_min(sc, j).0 as i32 * part;
            }
            *a = d.mul_add(s as f32, *a);
        }
    }
    hsum8(acc) + summs
}

/// Q4_K·q8_K. The 8x8 GEMV (`per_pair == false`) folds a whole 256-value block into one
/// fma; the 8x8 GEMM that ggml uses for rows in groups of four folds every pair of 32-value
/// sub-blocks, so the two round differently. On aarch64 ggml's 8x4 repack (GEMV and GEMM
/// alike) folds every pair by fma and subtracts the block's `float(Σ mins)·(dmin·dy)` once.
pub fn dot_q4k(w: &[u8], a: &[Act256], per_pair: bool) -> f32 {
    let simd = has_avx2_fma();
    let (mut acc, mut acc_min) = (0f32, 0f32);
    for (blk, y) in w.chunks_exact(Q4K::BYTES).zip(a) {
        let (d, dmin) = (f16_at(blk, Q4K::D), f16_at(blk, Q4K::DMIN));
        let (sc, qs) = (&blk[Q4K::SCALES..Q4K::QS], &blk[Q4K::QS..]);
        let (mut isum, mut imin) = (0i32, 0i32);
        for j in 0..8 {
            let (s, m) = scale_min(sc, j);
            let (s, m) = (s as i32, m as i32);
            let bytes = &qs[(j / 2) * 32..(j / 2) * 32 + 32];
            let ys = &y.qs[j * 32..j * 32 + 32];
            let dot = if simd {
                // SAFETY: AVX2/FMA checked; 32 bytes and 32 values.
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
            if cfg!(target_arch = "aarch64") && j % 2 == 1 {
                // ggml's aarch64 8x4 repack: each pair by fma, the block's mins subtracted once.
                acc = (isum as f32).mul_add(d * y.d, acc);
                isum = 0;
            } else if per_pair && j % 2 == 1 {
                acc = (isum as f32).mul_add(d * y.d, acc);
                acc_min = (imin as f32).mul_add(dmin * y.d, acc_min);
                (isum, imin) = (0, 0);
            }
        }
        if cfg!(target_arch = "aarch64") {
            acc -= imin as f32 * (dmin * y.d);
        } else if !per_pair {
            acc = (isum as f32).mul_add(d * y.d, acc);
            acc_min = (imin as f32).mul_add(dmin * y.d, acc_min);
        }
    }
    acc - acc_min
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cpu::blocks::QK_K;
    use crate::kernels::cpu::dot_checks::check_block_type;
    #[cfg(target_arch = "x86_64")]
    use crate::kernels::cpu::dot_checks::Dot4;
    use crate::kernels::cpu::q8::quantize_q8k;

    fn deq_q6k(blk: &[u8]) -> Vec<f32> {
        let d = f16_at(blk, Q6K::D);
        let q = q6k_values(blk);
        (0..QK_K).map(|e| d * (blk[Q6K::SCALES + e / 16] as i8 as f32) * (q[e] - 32) as f32).collect()
    }

    fn deq_q5k(blk: &[u8]) -> Vec<f32> {
        let (d, dmin) = (f16_at(blk, Q5K::D), f16_at(blk, Q5K::DMIN));
        let q = q5k_values(blk);
        (0..256)
            .map(|e| {
                let (s, m) = scale_min(&blk[Q5K::SCALES..Q5K::QH], e / 32);
                d * s as f32 * q[e] as f32 - dmin * m as f32
            })
            .collect()
    }

    #[cfg(target_arch = "x86_64")]
    unsafe fn q6k4(w: &[u8], a: [&[Act256]; 4]) -> [f32; 4] {
        simd::dotn_q6k::<4>(w, a)
    }

    /// ggml's aarch64 8x4 repack order, GEMV and GEMM rows: the NEON twin (on aarch64) bit for
    /// bit against the scalar reference, both near the dequantized dot.
    #[test]
    fn q6k_repacked_matches_scalar_and_dequantized_reference() {
        check_block_type(
            Q6K::BYTES,
            &[Q6K::D],
            QK_K,
            quantize_q8k,
            deq_q6k,
            |w, a| dot_q6k_repacked(w, a, false),
            |w, a| dot_q6k_repacked_ref(w, a, false),
            None,
        );
        check_block_type(
            Q6K::BYTES,
            &[Q6K::D],
            QK_K,
            quantize_q8k,
            deq_q6k,
            |w, a| dot_q6k_repacked(w, a, true),
            |w, a| dot_q6k_repacked_ref(w, a, true),
            None,
        );
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
        check_block_type(Q6K::BYTES, &[Q6K::D], QK_K, quantize_q8k, deq_q6k, dot_q6k, dot_q6k_ref, d4);
    }

    #[test]
    fn q5k_matches_scalar_and_dequantized_reference() {
        #[cfg(target_arch = "x86_64")]
        let d4 = Some(q5k4 as unsafe fn(&[u8], [&[Act256]; 4]) -> [f32; 4]);
        #[cfg(not(target_arch = "x86_64"))]
        let d4 = None;
        check_block_type(
            Q5K::BYTES,
            &[Q5K::D, Q5K::DMIN],
            QK_K,
            quantize_q8k,
            deq_q5k,
            dot_q5k,
            dot_q5k_ref,
            d4,
        );
    }

    fn deq_q3k(blk: &[u8]) -> Vec<f32> {
        let d = f16_at(blk, Q3K::D);
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
        check_block_type(Q3K::BYTES, &[Q3K::D], QK_K, quantize_q8k, deq_q3k, dot_q3k, dot_q3k_ref, d4);
    }

    fn deq_q2k(blk: &[u8]) -> Vec<f32> {
        let (d, dmin) = (f16_at(blk, Q2K::D), f16_at(blk, Q2K::DMIN));
        let q = q2k_values(blk);
        let sm = |e: usize| blk[Q2K::SCALES + e / 16];
        (0..QK_K).map(|e| d * (sm(e) & 0x0F) as f32 * q[e] as f32 - dmin * (sm(e) >> 4) as f32).collect()
    }

    #[test]
    fn q2k_matches_scalar_and_dequantized_reference() {
        for per_half in [false, true] {
            let dot: fn(&[u8], &[Act256]) -> f32 =
                if per_half { |w, a| dot_q2k(w, a, true) } else { |w, a| dot_q2k(w, a, false) };
            let reference: fn(&[u8], &[Act256]) -> f32 =
                if per_half { |w, a| dot_q2k_ref(w, a, true) } else { |w, a| dot_q2k_ref(w, a, false) };
            #[cfg(target_arch = "x86_64")]
            // The checker calls these only where AVX2+FMA is present (`has_avx2_fma`).
            let d4: Option<Dot4<Act256>> = if per_half {
                // SAFETY: called only after the checker found AVX2+FMA; rows and acts match in length.
                Some(|w, a| unsafe { simd::dotn_q2k::<4>(w, a, [true; 4]) })
            } else {
                // SAFETY: as above.
                Some(|w, a| unsafe { simd::dotn_q2k::<4>(w, a, [false; 4]) })
            };
            #[cfg(not(target_arch = "x86_64"))]
            let d4 = None;
            check_block_type(
                Q2K::BYTES,
                &[Q2K::D, Q2K::DMIN],
                QK_K,
                quantize_q8k,
                deq_q2k,
                dot,
                reference,
                d4,
            );
        }
    }
}
