//! NEON twins of `k_quants`' portable row dots (Q2_K, Q3_K, Q5_K, Q6_K against q8_K rows: the
//! types that stay on row kernels on aarch64; Q6_K also in ggml's aarch64 8x4 repack order).
//! Each keeps its twin's integer lanes (exact whatever the order) and float steps, so the bits
//! are the portable kernel's.

use std::arch::aarch64::*;

use super::{dot4, hsum8, with_dot};
use crate::kernels::cpu::blocks::{f16_at, fold_q2k, q3k_scales, scale_min, Q2K, Q3K, Q5K, Q6K};
use crate::kernels::cpu::feats::{isa, Isa};
use crate::kernels::cpu::q8::Act256;

/// 16 activation bytes at `y[i..]`.
#[inline(always)]
fn y16(y: &[i8], i: usize) -> int8x16_t {
    debug_assert!(i + 16 <= y.len());
    // SAFETY: NEON is baseline; `y` holds 16 values from `i` (q8_K blocks are 256 long).
    unsafe { vld1q_s8(y.as_ptr().add(i)) }
}

/// The 16 bytes at `p[i..]`.
#[inline(always)]
fn w16(p: &[u8], i: usize) -> uint8x16_t {
    assert!(i + 16 <= p.len());
    // SAFETY: checked above.
    unsafe { vld1q_u8(p.as_ptr().add(i)) }
}

/// `dot_q6k`'s order: lane l sums scale·q·y over elements 32m+4l..+4 of every chunk m, minus
/// 32·(scale·bsum) of groups 2l and 2l+1; one fma per lane and block.
pub fn dot_q6k(w: &[u8], a: &[Act256]) -> f32 {
    by_dot!(q6k(w, a))
}

#[inline(always)]
fn q6k<const DOT: bool>(w: &[u8], a: &[Act256]) -> f32 {
    // SAFETY: NEON is baseline (every intrinsic below).
    unsafe {
        let (mut acc_lo, mut acc_hi) = (vdupq_n_f32(0.0), vdupq_n_f32(0.0));
        for (blk, y) in w.chunks_exact(Q6K::BYTES).zip(a) {
            let d = y.d * f16_at(blk, Q6K::D);
            let (s_lo, s_hi) = q6k_lanes::<DOT>(blk, y);
            acc_lo = vfmaq_n_f32(acc_lo, vcvtq_f32_s32(s_lo), d);
            acc_hi = vfmaq_n_f32(acc_hi, vcvtq_f32_s32(s_hi), d);
        }
        hsum8(acc_lo, acc_hi)
    }
}

/// `k_quants::dot_q6k_repacked`'s order (ggml's aarch64 8x4 repack): per block the exact
/// integer sum of `q6k_lanes`' eight lanes, `d = dx·dy`, then GEMV rows `fma(float(Σ), d,
/// acc)`, GEMM rows `acc + float(Σ)·d`.
pub fn dot_q6k_repacked(w: &[u8], a: &[Act256], gemm: bool) -> f32 {
    by_dot!(q6k_repacked(w, a, gemm))
}

#[inline(always)]
fn q6k_repacked<const DOT: bool>(w: &[u8], a: &[Act256], gemm: bool) -> f32 {
    let mut acc = 0f32;
    for (blk, y) in w.chunks_exact(Q6K::BYTES).zip(a) {
        let (s_lo, s_hi) = q6k_lanes::<DOT>(blk, y);
        // SAFETY: NEON is baseline.
        let isum = unsafe { vaddvq_s32(vaddq_s32(s_lo, s_hi)) } as f32;
        let d = f16_at(blk, Q6K::D) * y.d;
        acc = if gemm { acc + isum * d } else { isum.mul_add(d, acc) };
    }
    acc
}

/// One Q6_K block's exact integer lanes against `y`: lane l (of `lo`, then `hi`) sums
/// scale·q·y over elements 32m+4l..+4 of every chunk m, minus 32·(scale·bsum) of groups 2l
/// and 2l+1.
#[inline(always)]
fn q6k_lanes<const DOT: bool>(blk: &[u8], y: &Act256) -> (int32x4_t, int32x4_t) {
    // SAFETY: NEON is baseline (every intrinsic below); `dot4::<true>` only runs compiled
    // with dotprod (`by_dot!`).
    unsafe {
        let (m15, m3) = (vdupq_n_u8(15), vdupq_n_u8(3));
        let sc = &blk[Q6K::SCALES..Q6K::D];
        let (mut s_lo, mut s_hi) = (vdupq_n_s32(0), vdupq_n_s32(0));
        for n in 0..2 {
            for half in 0..2 {
                let ql0 = w16(blk, Q6K::QL + 64 * n + 16 * half);
                let ql1 = w16(blk, Q6K::QL + 64 * n + 32 + 16 * half);
                let qh = w16(blk, Q6K::QH + 32 * n + 16 * half);
                let top = |v: uint8x16_t| vshlq_n_u8::<4>(vandq_u8(v, m3));
                let q = [
                    vorrq_u8(vandq_u8(ql0, m15), top(qh)),
                    vorrq_u8(vandq_u8(ql1, m15), top(vshrq_n_u8::<2>(qh))),
                    vorrq_u8(vshrq_n_u8::<4>(ql0), top(vshrq_n_u8::<4>(qh))),
                    vorrq_u8(vshrq_n_u8::<4>(ql1), top(vshrq_n_u8::<6>(qh))),
                ];
                for (g, q) in q.into_iter().enumerate() {
                    // Chunk m = 4n + g; this half's lanes are 4·half..4·half + 4.
                    let m = 4 * n + g;
                    let dot =
                        dot4::<DOT>(vdupq_n_s32(0), vreinterpretq_s8_u8(q), y16(&y.qs, 32 * m + 16 * half));
                    let s = sc[2 * m + half] as i8 as i32;
                    if half == 0 {
                        s_lo = vmlaq_n_s32(s_lo, dot, s);
                    } else {
                        s_hi = vmlaq_n_s32(s_hi, dot, s);
                    }
                }
            }
        }
        // 32·(bsum·scale) of groups 2l, 2l+1 per lane l.
        let sc16 = vmovl_s8(vld1_s8(sc.as_ptr() as *const i8));
        let sc16_hi = vmovl_s8(vld1_s8(sc.as_ptr().add(8) as *const i8));
        let bs = vld1q_s16(y.bsums.as_ptr());
        let bs_hi = vld1q_s16(y.bsums.as_ptr().add(8));
        let off_lo = vpaddq_s32(vmull_s16(vget_low_s16(bs), vget_low_s16(sc16)), vmull_high_s16(bs, sc16));
        let off_hi =
            vpaddq_s32(vmull_s16(vget_low_s16(bs_hi), vget_low_s16(sc16_hi)), vmull_high_s16(bs_hi, sc16_hi));
        (vsubq_s32(s_lo, vshlq_n_s32::<5>(off_lo)), vsubq_s32(s_hi, vshlq_n_s32::<5>(off_hi)))
    }
}

/// `dot_q5k`'s order: lane l sums scale·q·y over elements 32j+4l..+4 of every sub-block j; the
/// mins as one integer per block folded into a separate sum added after the tree sum.
pub fn dot_q5k(w: &[u8], a: &[Act256]) -> f32 {
    by_dot!(q5k(w, a))
}

#[inline(always)]
fn q5k<const DOT: bool>(w: &[u8], a: &[Act256]) -> f32 {
    // SAFETY: as in `q6k`.
    unsafe {
        let (m15, bit4) = (vdupq_n_u8(15), vdupq_n_u8(0x10));
        let (mut acc_lo, mut acc_hi) = (vdupq_n_f32(0.0), vdupq_n_f32(0.0));
        let mut summs = 0f32;
        for (blk, y) in w.chunks_exact(Q5K::BYTES).zip(a) {
            let d = y.d * f16_at(blk, Q5K::D);
            let dmin = -y.d * f16_at(blk, Q5K::DMIN);
            let sc = &blk[Q5K::SCALES..Q5K::QH];
            let imin: i32 = (0..8).map(|j| scale_min(sc, j).1 as i32 * y.sums[j]).sum();
            summs = dmin.mul_add(imin as f32, summs);
            let (mut s_lo, mut s_hi) = (vdupq_n_s32(0), vdupq_n_s32(0));
            for j in 0..8 {
                let s = scale_min(sc, j).0 as i32;
                for half in 0..2 {
                    let b = w16(blk, Q5K::QS + 32 * (j / 2) + 16 * half);
                    let lo = if j % 2 == 0 { vandq_u8(b, m15) } else { vshrq_n_u8::<4>(b) };
                    // Bit j of qh, moved to bit 4.
                    let qh = w16(blk, Q5K::QH + 16 * half);
                    let hb = vandq_u8(vshlq_u8(qh, vdupq_n_s8(4 - j as i8)), bit4);
                    let q = vreinterpretq_s8_u8(vorrq_u8(lo, hb));
                    let dot = dot4::<DOT>(vdupq_n_s32(0), q, y16(&y.qs, 32 * j + 16 * half));
                    if half == 0 {
                        s_lo = vmlaq_n_s32(s_lo, dot, s);
                    } else {
                        s_hi = vmlaq_n_s32(s_hi, dot, s);
                    }
                }
            }
            acc_lo = vfmaq_n_f32(acc_lo, vcvtq_f32_s32(s_lo), d);
            acc_hi = vfmaq_n_f32(acc_hi, vcvtq_f32_s32(s_hi), d);
        }
        hsum8(acc_lo, acc_hi) + summs
    }
}

/// `dot_q3k`'s order: as Q6_K's lanes (chunks of 32, a scale per 16), without the offset term.
pub fn dot_q3k(w: &[u8], a: &[Act256]) -> f32 {
    by_dot!(q3k(w, a))
}

#[inline(always)]
fn q3k<const DOT: bool>(w: &[u8], a: &[Act256]) -> f32 {
    // SAFETY: as in `q6k`.
    unsafe {
        let (m3, one, four) = (vdupq_n_u8(3), vdupq_n_u8(1), vdupq_n_s8(4));
        let (mut acc_lo, mut acc_hi) = (vdupq_n_f32(0.0), vdupq_n_f32(0.0));
        for (blk, y) in w.chunks_exact(Q3K::BYTES).zip(a) {
            let d = y.d * f16_at(blk, Q3K::D);
            let sc = q3k_scales(blk);
            let (mut s_lo, mut s_hi) = (vdupq_n_s32(0), vdupq_n_s32(0));
            for n in 0..2 {
                for half in 0..2 {
                    let qs = w16(blk, Q3K::QS + 32 * n + 16 * half);
                    let hm = w16(blk, Q3K::HMASK + 16 * half);
                    for j in 0..4 {
                        let low = vandq_u8(vshlq_u8(qs, vdupq_n_s8(-2 * j as i8)), m3);
                        let high = vandq_u8(vshlq_u8(hm, vdupq_n_s8(-((4 * n + j) as i8))), one);
                        // low − 4 + 4·high: −4..4.
                        let q = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(low, vshlq_n_u8::<2>(high))), four);
                        let m = 4 * n + j;
                        let dot = dot4::<DOT>(vdupq_n_s32(0), q, y16(&y.qs, 32 * m + 16 * half));
                        if half == 0 {
                            s_lo = vmlaq_n_s32(s_lo, dot, sc[2 * m]);
                        } else {
                            s_hi = vmlaq_n_s32(s_hi, dot, sc[2 * m + 1]);
                        }
                    }
                }
            }
            acc_lo = vfmaq_n_f32(acc_lo, vcvtq_f32_s32(s_lo), d);
            acc_hi = vfmaq_n_f32(acc_hi, vcvtq_f32_s32(s_hi), d);
        }
        hsum8(acc_lo, acc_hi)
    }
}

/// `dot_q2k`'s order: exact integer Σ scale·q·y and Σ min·bsum per half (or block), folded by
/// fma with `d·dy` and `dmin·dy`; `acc − acc_min`.
pub fn dot_q2k(w: &[u8], a: &[Act256], per_half: bool) -> f32 {
    by_dot!(q2k(w, a, per_half))
}

#[inline(always)]
fn q2k<const DOT: bool>(w: &[u8], a: &[Act256], per_half: bool) -> f32 {
    // SAFETY: as in `q6k`.
    unsafe {
        let m3 = vdupq_n_u8(3);
        let (mut acc, mut acc_min) = (0f32, 0f32);
        for (blk, y) in w.chunks_exact(Q2K::BYTES).zip(a) {
            let (d, dmin) = (f16_at(blk, Q2K::D), f16_at(blk, Q2K::DMIN));
            let (mut isum, mut imin) = ([0i32; 2], [0i32; 2]);
            for g in 0..16 {
                let sm = blk[Q2K::SCALES + g];
                let (n, r) = (g / 8, g % 8);
                let qs = w16(blk, Q2K::QS + 32 * n + 16 * (r % 2));
                let q = vandq_u8(vshlq_u8(qs, vdupq_n_s8(-2 * (r / 2) as i8)), m3);
                let dot = vaddvq_s32(dot4::<DOT>(vdupq_n_s32(0), vreinterpretq_s8_u8(q), y16(&y.qs, 16 * g)));
                isum[n] += (sm & 0x0F) as i32 * dot;
                imin[n] += (sm >> 4) as i32 * y.bsums[g] as i32;
            }
            fold_q2k(per_half, isum, imin, (d, dmin, y.d), (&mut acc, &mut acc_min));
        }
        acc - acc_min
    }
}
