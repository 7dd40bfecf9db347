//! Portable row dots of the 32-value quant types against q8 activation rows, in the order of
//! ggml's x86 `ggml_vec_dot_*` kernels (so they round as llama.cpp does), each dispatching to
//! its AVX2 twin in `x86::quants` where the CPU has it (`feats::has_avx2_fma`), or its NEON
//! twin in `arm::quants`:
//! - Q4_0 (q8_0): per block an exact integer dot, `acc = fma(float(isum), dx·dy, acc)`;
//! - Q8_0, Q5_0 (q8_0): 8 lanes of 4-byte dots, fma per lane and block, an 8-lane tree sum
//!   (tinyBLAS rounds identically for several rows);
//! - Q4_1, Q5_1 (q8_1): Q8_0's lanes plus the m·s terms accumulated with fma.
//!
//! On aarch64 Q8_0, Q5_0, Q4_1 and Q5_1 follow llama.cpp's NEON kernels instead (`neon_order`:
//! blocks in pairs, 4 lanes each, `blocks::PairOrder`); Q4_0 keeps the order above (ggml
//! repacks it there, and Wick packs it).

#[cfg(target_arch = "aarch64")]
use super::arm::quants as arm;
#[cfg(not(target_arch = "aarch64"))]
use super::blocks::hsum8;
use super::blocks::{f16_at, u32_at, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0};
#[cfg(target_arch = "aarch64")]
use super::blocks::{neon_lanes, Mins, PairOrder};
#[cfg(target_arch = "x86_64")]
use super::feats::has_avx2;
use super::feats::has_avx2_fma;
#[cfg(target_arch = "aarch64")]
use super::feats::{isa, Isa};
use super::q8::Act32;
#[cfg(target_arch = "x86_64")]
use super::x86::quants as simd;

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

pub fn dot_q4_0(w: &[u8], a: &[Act32]) -> f32 {
    #[cfg(target_arch = "aarch64")]
    if isa() >= Isa::Neon {
        return arm::dot_q4_0(w, a);
    }
    let simd = has_avx2_fma();
    let mut acc = 0f32;
    for (blk, y) in w.chunks_exact(Q4_0::BYTES).zip(a) {
        let s = if simd {
            // SAFETY: AVX2/FMA checked by `has_avx2_fma`; the block has 16 nibble bytes.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                simd::isum_q4_0(&blk[Q4_0::QS..], &y.qs, y.qsum)
            }
            #[cfg(not(target_arch = "x86_64"))]
            0
        } else {
            let q = nibbles(&blk[Q4_0::QS..]);
            (0..32).map(|i| (q[i] as i32 - 8) * y.qs[i] as i32).sum()
        };
        acc = (s as f32).mul_add(f16_at(blk, Q4_0::D) * y.d, acc);
    }
    acc
}

pub fn dot_q8_0(w: &[u8], a: &[Act32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: AVX2/FMA checked; `w` holds one 34-byte block per activation block.
        return unsafe { simd::dot_q8_0(w, a) };
    }
    #[cfg(target_arch = "aarch64")]
    if isa() >= Isa::Neon {
        return arm::dot_q8_0(w, a);
    }
    dot_q8_0_ref(w, a)
}

/// `dot_q8_0`'s scalar statement (aarch64: `neon_order`).
fn dot_q8_0_ref(w: &[u8], a: &[Act32]) -> f32 {
    #[cfg(target_arch = "aarch64")]
    return neon_order(w, a, Q8_0::BYTES, Mins::None, |blk| {
        (std::array::from_fn(|i| blk[Q8_0::QS + i] as i8 as i32), f16_at(blk, Q8_0::D), 0.0)
    });
    #[cfg(not(target_arch = "aarch64"))]
    {
        let mut acc = [0f32; 8];
        for (blk, y) in w.chunks_exact(Q8_0::BYTES).zip(a) {
            let d = f16_at(blk, Q8_0::D) * y.d;
            let qs = &blk[Q8_0::QS..];
            for (l, a) in acc.iter_mut().enumerate() {
                let s: i32 = (0..4).map(|t| qs[4 * l + t] as i8 as i32 * y.qs[4 * l + t] as i32).sum();
                *a = d.mul_add(s as f32, *a);
            }
        }
        hsum8(acc)
    }
}

/// Q8_0 as llama.cpp's aarch64 build multiplies the weights it repacks (`block_q8_0x4`, every
/// Q8_0 weight with a multiple of 4 rows, a tied output head included): per block the exact
/// `Σ_{32} q·y` and `d = dw·dy`; its GEMV (rows outside groups of four) `acc = fma(float(Σ), d,
/// acc)`, its GEMM (`gemm`: rows in groups of four) `acc + d·float(Σ)` (not fused).
#[cfg(target_arch = "aarch64")]
pub(crate) fn dot_q8_0_repacked(w: &[u8], a: &[Act32], gemm: bool) -> f32 {
    let mut acc = 0f32;
    for (blk, y) in w.chunks_exact(Q8_0::BYTES).zip(a) {
        let s: i32 = (0..32).map(|i| blk[Q8_0::QS + i] as i8 as i32 * y.qs[i] as i32).sum();
        let d = f16_at(blk, Q8_0::D) * y.d;
        acc = if gemm { acc + d * s as f32 } else { (s as f32).mul_add(d, acc) };
    }
    acc
}

/// llama.cpp's NEON row dot order (`blocks::PairOrder`) in scalar code: `values(blk)` gives a
/// block's 32 values (as the weights' integer operand), its `d` and its `m` (0 without mins).
#[cfg(target_arch = "aarch64")]
pub(crate) fn neon_order(
    w: &[u8],
    a: &[Act32],
    bytes: usize,
    mins: Mins,
    values: impl Fn(&[u8]) -> ([i32; 32], f32, f32),
) -> f32 {
    let mut o = PairOrder::new(mins, (w.len() / bytes).min(a.len()));
    for (blk, y) in w.chunks_exact(bytes).zip(a) {
        let (x, dw, m) = values(blk);
        let mut l = [0i32; 8];
        for (h, s) in l.iter_mut().enumerate() {
            for t in 0..4 {
                *s += x[4 * h + t] * y.qs[4 * h + t] as i32;
            }
        }
        o.block(neon_lanes(l), dw * y.d, (m, y.s));
    }
    o.finish()
}

/// The 32 values (q - 16) of a Q5_0 block (d, qh, 16 nibble bytes) in element order.
fn q5_0_values(blk: &[u8]) -> [i32; 32] {
    let qh = u32_at(blk, Q5_0::QH);
    let q = nibbles(&blk[Q5_0::QS..]);
    std::array::from_fn(|i| (q[i] as i32 | (((qh >> i) & 1) as i32) << 4) - 16)
}

/// `ggml_vec_dot_q5_0_q8_0`: as Q8_0 (8 lanes of 4-value dots, one fma per lane and block).
pub fn dot_q5_0(w: &[u8], a: &[Act32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: AVX2/FMA checked; `w` holds one 22-byte block per activation block.
        return unsafe { simd::dot_q5_0(w, a) };
    }
    #[cfg(target_arch = "aarch64")]
    if isa() >= Isa::Neon {
        return arm::dot_q5_0(w, a);
    }
    dot_q5_0_ref(w, a)
}

/// `dot_q5_0`'s scalar statement (aarch64: `neon_order`).
fn dot_q5_0_ref(w: &[u8], a: &[Act32]) -> f32 {
    #[cfg(target_arch = "aarch64")]
    return neon_order(w, a, Q5_0::BYTES, Mins::None, |blk| (q5_0_values(blk), f16_at(blk, Q5_0::D), 0.0));
    #[cfg(not(target_arch = "aarch64"))]
    lane_order(w, a, Q5_0::BYTES, |blk| (q5_0_values(blk), f16_at(blk, Q5_0::D)))
}

/// Q8_0's x86 order in scalar code on any block's values (`values(blk)`: its 32 integer
/// values and d): 8 lanes of 4-value dots, one fma per lane and block, `hsum8`.
#[cfg(not(target_arch = "aarch64"))]
fn lane_order(w: &[u8], a: &[Act32], bytes: usize, values: impl Fn(&[u8]) -> ([i32; 32], f32)) -> f32 {
    let mut acc = [0f32; 8];
    for (blk, y) in w.chunks_exact(bytes).zip(a) {
        let (x, dw) = values(blk);
        let d = dw * y.d;
        for (l, a) in acc.iter_mut().enumerate() {
            let s: i32 = (0..4).map(|t| x[4 * l + t] * y.qs[4 * l + t] as i32).sum();
            *a = d.mul_add(s as f32, *a);
        }
    }
    hsum8(acc)
}

/// The 32 values (q − 8) of a Q4_0 block in element order.
fn q4_0_values(blk: &[u8]) -> [i32; 32] {
    let q = nibbles(&blk[Q4_0::QS..]);
    std::array::from_fn(|i| q[i] as i32 - 8)
}

/// Q4_0 rows ggml does not repack (a q4_0 KV cache's keys): `ggml_vec_dot_q4_0_q8_0` (and
/// tinyBLAS for several rows), Q8_0's lanes on the values q − 8; aarch64: `neon_order`. The
/// kernels take rows in runs (`dot_rows`); this one pair is the tests' handle on it.
#[cfg(test)]
fn dot_q4_0_lanes(w: &[u8], a: &[Act32]) -> f32 {
    let mut out = [0f32];
    dot_rows(false, w, &[a], &mut out, 1);
    out[0]
}

/// `dot_q8_0` (`q8`) or `dot_q4_0_lanes` of each row of `rows` (whole rows of `acts[h].len()`
/// blocks one after another, as a KV block's key rows) against every `acts[h]`, into
/// `out[h * stride + i]`: the AVX2 loop where the CPU has it, else one row dot per pair.
pub fn dot_rows(q8: bool, rows: &[u8], acts: &[&[Act32]], out: &mut [f32], stride: usize) {
    let Some(nb) = acts.first().map(|a| a.len()) else { return };
    let bytes = nb * if q8 { Q8_0::BYTES } else { Q4_0::BYTES };
    let n = rows.len() / bytes.max(1);
    assert!(acts.iter().all(|a| a.len() == nb) && (n == 0 || out.len() >= (acts.len() - 1) * stride + n));
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2/FMA/F16C checked; rows and activations have the same blocks, `out` the
        // room (asserted).
        return unsafe {
            match q8 {
                true => simd::dot_rows::<true>(rows, acts, out, stride),
                false => simd::dot_rows::<false>(rows, acts, out, stride),
            }
        };
    }
    for (i, row) in rows.chunks_exact(bytes).enumerate() {
        for (h, a) in acts.iter().enumerate() {
            out[h * stride + i] = if q8 { dot_q8_0(row, a) } else { dot_q4_0_lanes_ref(row, a) };
        }
    }
}

/// `dot_q4_0_lanes`'s scalar statement (aarch64: `neon_order`).
fn dot_q4_0_lanes_ref(w: &[u8], a: &[Act32]) -> f32 {
    #[cfg(target_arch = "aarch64")]
    return neon_order(w, a, Q4_0::BYTES, Mins::None, |blk| (q4_0_values(blk), f16_at(blk, Q4_0::D), 0.0));
    #[cfg(not(target_arch = "aarch64"))]
    lane_order(w, a, Q4_0::BYTES, |blk| (q4_0_values(blk), f16_at(blk, Q4_0::D)))
}

/// The 32 unsigned values (0..32) of a Q5_1 block (d, m, qh, 16 nibble bytes) in element order.
fn q5_1_values(blk: &[u8]) -> [i32; 32] {
    let qh = u32_at(blk, Q5_1::QH);
    let q = nibbles(&blk[Q5_1::QS..]);
    std::array::from_fn(|i| q[i] as i32 | (((qh >> i) & 1) as i32) << 4)
}

/// `ggml_vec_dot_q5_1_q8_1` (no repack, no tinyBLAS for this type, so for any row count):
/// Q4_1's order — 8 lanes of 4-value dots, fma per lane and block with `dx·dy`, the m·s terms
/// folded by fma into a separate sum that is added after the 8-lane tree sum.
pub fn dot_q5_1(w: &[u8], a: &[Act32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: AVX2/FMA checked; `w` holds one 24-byte block per activation block.
        return unsafe { simd::dot_q5_1(w, a) };
    }
    #[cfg(target_arch = "aarch64")]
    if isa() >= Isa::Neon {
        return arm::dot_q5_1(w, a);
    }
    dot_q5_1_ref(w, a)
}

fn dot_q5_1_ref(w: &[u8], a: &[Act32]) -> f32 {
    #[cfg(target_arch = "aarch64")]
    return neon_order(w, a, Q5_1::BYTES, Mins::Split, |blk| {
        (q5_1_values(blk), f16_at(blk, Q5_1::D), f16_at(blk, Q5_1::M))
    });
    #[cfg(not(target_arch = "aarch64"))]
    dot_q5_1_x86(w, a)
}

#[cfg(not(target_arch = "aarch64"))]
fn dot_q5_1_x86(w: &[u8], a: &[Act32]) -> f32 {
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    for (blk, y) in w.chunks_exact(Q5_1::BYTES).zip(a) {
        summs = f16_at(blk, Q5_1::M).mul_add(y.s, summs);
        let d = f16_at(blk, Q5_1::D) * y.d;
        let x = q5_1_values(blk);
        for (l, a) in acc.iter_mut().enumerate() {
            let s: i32 = (0..4).map(|t| x[4 * l + t] * y.qs[4 * l + t] as i32).sum();
            *a = d.mul_add(s as f32, *a);
        }
    }
    hsum8(acc) + summs
}

pub fn dot_q4_1(w: &[u8], a: &[Act32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: AVX2/FMA checked; `w` holds one 20-byte block per activation block.
        return unsafe { simd::dot_q4_1(w, a) };
    }
    #[cfg(target_arch = "aarch64")]
    if isa() >= Isa::Neon {
        return arm::dot_q4_1(w, a);
    }
    dot_q4_1_ref(w, a)
}

/// `dot_q4_1`'s scalar statement (aarch64: `neon_order`).
fn dot_q4_1_ref(w: &[u8], a: &[Act32]) -> f32 {
    #[cfg(target_arch = "aarch64")]
    return neon_order(w, a, Q4_1::BYTES, Mins::Paired, |blk| {
        let q = nibbles(&blk[Q4_1::QS..]);
        (std::array::from_fn(|i| q[i] as i32), f16_at(blk, Q4_1::D), f16_at(blk, Q4_1::M))
    });
    #[cfg(not(target_arch = "aarch64"))]
    dot_q4_1_x86(w, a)
}

#[cfg(not(target_arch = "aarch64"))]
fn dot_q4_1_x86(w: &[u8], a: &[Act32]) -> f32 {
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    for (blk, y) in w.chunks_exact(Q4_1::BYTES).zip(a) {
        summs = f16_at(blk, Q4_1::M).mul_add(y.s, summs);
        let d = y.d * f16_at(blk, Q4_1::D);
        let q = nibbles(&blk[Q4_1::QS..]);
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
    hsum8(acc) + summs
}

#[cfg(test)]
mod tests {
    use half::f16;

    use super::*;
    use crate::kernels::cpu::blocks::QK;
    use crate::kernels::cpu::dot_checks::check_block_type;
    use crate::kernels::cpu::q8::quantize_q8;

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
            if has_avx2_fma() {
                // SAFETY: AVX2+FMA checked just above; the four activations match the row's length.
                let four = unsafe { simd::dot4_q5_0(&w, [&a, &a, &a, &a]) };
                assert!(four.iter().all(|v| v.to_bits() == fast.to_bits()));
            }
            #[cfg(target_arch = "aarch64")]
            assert_eq!(dot_q5_0_ref(&w, &a).to_bits(), fast.to_bits());
            #[cfg(not(target_arch = "aarch64"))]
            {
                let mut acc = [0f32; 8];
                for (blk, y) in w.chunks_exact(Q5_0::BYTES).zip(&a) {
                    let d = f16_at(blk, Q5_0::D) * y.d;
                    let xv = q5_0_values(blk);
                    for (l, s) in acc.iter_mut().enumerate() {
                        let v: i32 = (0..4).map(|t| xv[4 * l + t] * y.qs[4 * l + t] as i32).sum();
                        *s = d.mul_add(v as f32, *s);
                    }
                }
                assert_eq!(hsum8(acc).to_bits(), fast.to_bits());
            }
        }
    }

    fn deq_q5_1(blk: &[u8]) -> Vec<f32> {
        let (d, m) = (f16_at(blk, Q5_1::D), f16_at(blk, Q5_1::M));
        q5_1_values(blk).iter().map(|&q| d * q as f32 + m).collect()
    }

    /// Runs of rows against several activation rows give each pair's row dot, bit for bit.
    #[test]
    fn row_runs_match_row_dots() {
        let mut r = crate::kernels::cpu::dot_checks::lcg(5);
        let mut act =
            |n: usize| quantize_q8(&(0..n).map(|_| (r() % 2000) as f32 / 100.0 - 10.0).collect::<Vec<_>>());
        let acts: Vec<Vec<Act32>> = (0..3).map(|_| act(64)).collect();
        let refs: Vec<&[Act32]> = acts.iter().map(Vec::as_slice).collect();
        for (q8, bytes) in [(true, Q8_0::BYTES), (false, Q4_0::BYTES)] {
            let mut r = crate::kernels::cpu::dot_checks::lcg(9);
            let mut rows: Vec<u8> = (0..7 * 2 * bytes).map(|_| r() as u8).collect();
            for blk in rows.chunks_exact_mut(bytes) {
                blk[..2].copy_from_slice(&f16::from_f32((r() % 100) as f32 / 1000.0 + 0.001).to_le_bytes());
            }
            let mut out = vec![0f32; 3 * 10];
            dot_rows(q8, &rows, &refs, &mut out, 10);
            for (i, row) in rows.chunks_exact(2 * bytes).enumerate() {
                for (h, a) in refs.iter().enumerate() {
                    let want = if q8 { dot_q8_0_ref(row, a) } else { dot_q4_0_lanes_ref(row, a) };
                    assert_eq!(out[h * 10 + i].to_bits(), want.to_bits(), "q8 {q8} row {i} head {h}");
                }
            }
        }
    }

    #[test]
    fn q4_0_lanes_match_scalar_and_dequantized_reference() {
        let deq = |blk: &[u8]| q4_0_values(blk).iter().map(|&q| f16_at(blk, Q4_0::D) * q as f32).collect();
        let d4 = None;
        check_block_type(
            Q4_0::BYTES,
            &[Q4_0::D],
            QK,
            quantize_q8,
            deq,
            dot_q4_0_lanes,
            dot_q4_0_lanes_ref,
            d4,
        );
    }

    #[test]
    fn q5_1_matches_scalar_and_dequantized_reference() {
        #[cfg(target_arch = "x86_64")]
        let d4 = Some(simd::dot4_q5_1 as unsafe fn(&[u8], [&[Act32]; 4]) -> [f32; 4]);
        #[cfg(not(target_arch = "x86_64"))]
        let d4 = None;
        check_block_type(
            Q5_1::BYTES,
            &[Q5_1::D, Q5_1::M],
            QK,
            quantize_q8,
            deq_q5_1,
            dot_q5_1,
            dot_q5_1_ref,
            d4,
        );
    }

    /// Each row dot (its NEON kernel on aarch64) gives its scalar statement's bits, for odd
    /// and even block counts (llama.cpp's NEON kernels take blocks in pairs).
    #[test]
    fn row_dots_match_their_scalar_statements() {
        let mut r = crate::kernels::cpu::dot_checks::lcg(9);
        type D = fn(&[u8], &[Act32]) -> f32;
        let types: [(usize, &[usize], D, D); 5] = [
            (Q8_0::BYTES, &[Q8_0::D], dot_q8_0, dot_q8_0_ref),
            (Q4_0::BYTES, &[Q4_0::D], dot_q4_0_lanes, dot_q4_0_lanes_ref),
            (Q5_0::BYTES, &[Q5_0::D], dot_q5_0, dot_q5_0_ref),
            (Q4_1::BYTES, &[Q4_1::D, Q4_1::M], dot_q4_1, dot_q4_1_ref),
            (Q5_1::BYTES, &[Q5_1::D, Q5_1::M], dot_q5_1, dot_q5_1_ref),
        ];
        for nb in [1usize, 2, 3, 7, 8] {
            for &(bytes, scales, dot, reference) in &types {
                for _ in 0..10 {
                    let mut w: Vec<u8> = (0..nb * bytes).map(|_| r() as u8).collect();
                    for blk in w.chunks_exact_mut(bytes) {
                        for &o in scales {
                            let d = f16::from_f32((r() % 1000) as f32 * 1e-4 - 0.03);
                            blk[o..o + 2].copy_from_slice(&d.to_le_bytes());
                        }
                    }
                    let x: Vec<f32> = (0..nb * QK).map(|_| (r() as f32 / (1 << 24) as f32) - 0.5).collect();
                    let a = quantize_q8(&x);
                    assert_eq!(
                        dot(&w, &a).to_bits(),
                        reference(&w, &a).to_bits(),
                        "{bytes}-byte blocks, nb {nb}"
                    );
                }
            }
        }
    }
}
