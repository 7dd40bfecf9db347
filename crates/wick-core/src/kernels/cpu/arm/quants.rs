//! NEON twins of `quants`' portable row dots of the 32-value types against q8 rows: the same
//! integer sums (exact) and the same float steps, so the portable kernel's bits.

use std::arch::aarch64::*;

use super::{dot4, hsum8, with_dot};
use crate::kernels::cpu::blocks::{f16_at, u32_at, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0};
use crate::kernels::cpu::feats::{isa, Isa};
use crate::kernels::cpu::q8::Act32;

/// A block's 32 values as two registers in element order (`lo`: 0..16, `hi`: 16..32), and
/// the activation's.
struct Pair {
    lo: int8x16_t,
    hi: int8x16_t,
}

/// 16 nibble bytes at `qs` → the 32 unsigned nibbles (low nibbles first).
#[inline(always)]
fn nibbles(qs: &[u8]) -> Pair {
    assert!(qs.len() >= 16);
    // SAFETY: NEON is baseline; 16 bytes checked above.
    unsafe {
        let raw = vld1q_u8(qs.as_ptr());
        Pair {
            lo: vreinterpretq_s8_u8(vandq_u8(raw, vdupq_n_u8(0x0F))),
            hi: vreinterpretq_s8_u8(vshrq_n_u8::<4>(raw)),
        }
    }
}

/// Bit i of `qh` as 0x10 in byte i (elements 0..16, 16..32): the fifth bit of Q5 values.
#[inline(always)]
fn fifth_bits(qh: u32) -> Pair {
    let b = qh.to_le_bytes();
    // SAFETY: NEON is baseline.
    unsafe {
        let sel = vreinterpretq_u8_u64(vdupq_n_u64(0x8040_2010_0804_0201));
        let bit = |lo: u8, hi: u8| {
            let v = vcombine_u8(vdup_n_u8(lo), vdup_n_u8(hi));
            vreinterpretq_s8_u8(vandq_u8(vtstq_u8(v, sel), vdupq_n_u8(0x10)))
        };
        Pair { lo: bit(b[0], b[1]), hi: bit(b[2], b[3]) }
    }
}

#[inline(always)]
fn acts(y: &Act32) -> Pair {
    // SAFETY: NEON is baseline; `qs` holds 32 values.
    unsafe { Pair { lo: vld1q_s8(y.qs.as_ptr()), hi: vld1q_s8(y.qs.as_ptr().add(16)) } }
}

/// Lanes 0..4 and 4..8 of a block: `Σ_{t<4} x[4l+t]·y[4l+t]`.
#[inline(always)]
fn lanes<const DOT: bool>(x: &Pair, y: &Pair) -> (int32x4_t, int32x4_t) {
    // SAFETY: NEON is baseline; `dot4::<true>` only runs compiled with dotprod (`by_dot!`).
    unsafe {
        let z = vdupq_n_s32(0);
        (dot4::<DOT>(z, x.lo, y.lo), dot4::<DOT>(z, x.hi, y.hi))
    }
}

/// The 8-lane kernels (Q8_0, Q5_0, Q4_1, Q5_1): one fma per lane and block with `d`, the
/// `summs` term (Q4_1, Q5_1: `m·s` by fma) added after the tree sum.
#[inline(always)]
fn eight_lanes<const DOT: bool>(
    w: &[u8],
    a: &[Act32],
    bytes: usize,
    block: impl Fn(&[u8], &Act32) -> (Pair, f32, Option<f32>),
) -> f32 {
    // SAFETY: NEON is baseline.
    unsafe {
        let (mut acc_lo, mut acc_hi) = (vdupq_n_f32(0.0), vdupq_n_f32(0.0));
        let mut summs = 0f32;
        for (blk, y) in w.chunks_exact(bytes).zip(a) {
            let (x, d, m) = block(blk, y);
            if let Some(m) = m {
                summs = m.mul_add(y.s, summs);
            }
            let (s_lo, s_hi) = lanes::<DOT>(&x, &acts(y));
            acc_lo = vfmaq_n_f32(acc_lo, vcvtq_f32_s32(s_lo), d);
            acc_hi = vfmaq_n_f32(acc_hi, vcvtq_f32_s32(s_hi), d);
        }
        hsum8(acc_lo, acc_hi) + summs
    }
}

/// `quants::dot_q4_0`: per block the exact Σ (q − 8)·y, one fma with `dx·dy`.
pub fn dot_q4_0(w: &[u8], a: &[Act32]) -> f32 {
    by_dot!(q4_0(w, a))
}

#[inline(always)]
fn q4_0<const DOT: bool>(w: &[u8], a: &[Act32]) -> f32 {
    let mut acc = 0f32;
    for (blk, y) in w.chunks_exact(Q4_0::BYTES).zip(a) {
        let q = nibbles(&blk[Q4_0::QS..]);
        // SAFETY: NEON is baseline.
        let s = unsafe {
            let eight = vdupq_n_s8(8);
            let x = Pair { lo: vsubq_s8(q.lo, eight), hi: vsubq_s8(q.hi, eight) };
            let (lo, hi) = lanes::<DOT>(&x, &acts(y));
            vaddvq_s32(vaddq_s32(lo, hi))
        };
        acc = (s as f32).mul_add(f16_at(blk, Q4_0::D) * y.d, acc);
    }
    acc
}

/// `quants::dot_q8_0`.
pub fn dot_q8_0(w: &[u8], a: &[Act32]) -> f32 {
    by_dot!(q8_0(w, a))
}

#[inline(always)]
fn q8_0<const DOT: bool>(w: &[u8], a: &[Act32]) -> f32 {
    eight_lanes::<DOT>(w, a, Q8_0::BYTES, |blk, y| {
        let qs = &blk[Q8_0::QS..Q8_0::QS + 32];
        // SAFETY: NEON is baseline; 32 bytes.
        let x = unsafe {
            Pair { lo: vld1q_s8(qs.as_ptr() as *const i8), hi: vld1q_s8(qs.as_ptr().add(16) as *const i8) }
        };
        (x, f16_at(blk, Q8_0::D) * y.d, None)
    })
}

/// `quants::dot_q5_0`: Q8_0's lanes on the values q − 16.
pub fn dot_q5_0(w: &[u8], a: &[Act32]) -> f32 {
    by_dot!(q5_0(w, a))
}

#[inline(always)]
fn q5_0<const DOT: bool>(w: &[u8], a: &[Act32]) -> f32 {
    eight_lanes::<DOT>(w, a, Q5_0::BYTES, |blk, y| {
        let (q, h) = (nibbles(&blk[Q5_0::QS..]), fifth_bits(u32_at(blk, Q5_0::QH)));
        // SAFETY: NEON is baseline.
        let x = unsafe {
            let sixteen = vdupq_n_s8(16);
            Pair { lo: vsubq_s8(vorrq_s8(q.lo, h.lo), sixteen), hi: vsubq_s8(vorrq_s8(q.hi, h.hi), sixteen) }
        };
        (x, f16_at(blk, Q5_0::D) * y.d, None)
    })
}

/// `quants::dot_q4_1`.
pub fn dot_q4_1(w: &[u8], a: &[Act32]) -> f32 {
    by_dot!(q4_1(w, a))
}

#[inline(always)]
fn q4_1<const DOT: bool>(w: &[u8], a: &[Act32]) -> f32 {
    eight_lanes::<DOT>(w, a, Q4_1::BYTES, |blk, y| {
        (nibbles(&blk[Q4_1::QS..]), y.d * f16_at(blk, Q4_1::D), Some(f16_at(blk, Q4_1::M)))
    })
}

/// `quants::dot_q5_1`.
pub fn dot_q5_1(w: &[u8], a: &[Act32]) -> f32 {
    by_dot!(q5_1(w, a))
}

#[inline(always)]
fn q5_1<const DOT: bool>(w: &[u8], a: &[Act32]) -> f32 {
    eight_lanes::<DOT>(w, a, Q5_1::BYTES, |blk, y| {
        let (q, h) = (nibbles(&blk[Q5_1::QS..]), fifth_bits(u32_at(blk, Q5_1::QH)));
        // SAFETY: NEON is baseline.
        let x = unsafe { Pair { lo: vorrq_s8(q.lo, h.lo), hi: vorrq_s8(q.hi, h.hi) } };
        (x, f16_at(blk, Q5_1::D) * y.d, Some(f16_at(blk, Q5_1::M)))
    })
}
