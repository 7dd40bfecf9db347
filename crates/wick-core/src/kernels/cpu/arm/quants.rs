//! NEON twins of `quants`' portable row dots of the 32-value types against q8 rows: the same
//! integer sums (exact) and the same float steps, so the portable kernel's bits. Q8_0, Q5_0,
//! Q4_1 and Q5_1 follow llama.cpp's NEON kernels (`pair_lanes`), Q4_0 ggml's x86 order.

use std::arch::aarch64::*;

use super::{dot4, with_dot};
use crate::kernels::cpu::blocks::Mins;
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

/// llama.cpp's NEON kernels of Q8_0, Q5_0, Q4_1 and Q5_1 (`blocks::PairOrder`, which
/// `quants::neon_order` states in scalar code): blocks in pairs, a block's 4 lanes `Σ lo + Σ hi`
/// (two `sdot`s into one register), `acc + float(lane)·d` (not fused) into its parity's
/// accumulator, the mins as `mins` says, `vaddvq_f32` of both; a last odd block in scalar.
#[inline(always)]
fn pair_lanes<const DOT: bool>(
    w: &[u8],
    a: &[Act32],
    bytes: usize,
    mins: Mins,
    block: impl Fn(&[u8], &Act32) -> (Pair, f32, f32),
) -> f32 {
    let nb = (w.len() / bytes).min(a.len());
    let lanes = |x: &Pair, y: &Act32| {
        let y = acts(y);
        // SAFETY: NEON is baseline; `dot4::<true>` only runs compiled with dotprod (`by_dot!`).
        unsafe { dot4::<DOT>(dot4::<DOT>(vdupq_n_s32(0), x.lo, y.lo), x.hi, y.hi) }
    };
    // SAFETY: NEON is baseline.
    unsafe {
        let mut acc = [vdupq_n_f32(0.0); 2];
        let mut summs = [0f32; 2];
        let mut even_ms = (0f32, 0f32);
        for (b, (blk, y)) in w.chunks_exact(bytes).zip(a).take(nb / 2 * 2).enumerate() {
            let (x, d, m) = block(blk, y);
            let p = b % 2;
            acc[p] = vaddq_f32(acc[p], vmulq_n_f32(vcvtq_f32_s32(lanes(&x, y)), d));
            match (mins, p) {
                (Mins::None, _) => {}
                (Mins::Paired, 0) => even_ms = (m, y.s),
                (Mins::Paired, _) => summs[0] += even_ms.0.mul_add(even_ms.1, m * y.s),
                (Mins::Split, p) => summs[p] = m.mul_add(y.s, summs[p]),
            }
        }
        let mut sum = vaddvq_f32(acc[0]) + vaddvq_f32(acc[1]);
        match mins {
            Mins::None => {}
            Mins::Paired => sum += summs[0],
            Mins::Split => sum = (sum + summs[0]) + summs[1],
        }
        if nb % 2 == 1 {
            let (blk, y) = (&w[(nb - 1) * bytes..nb * bytes], &a[nb - 1]);
            let (x, d, m) = block(blk, y);
            let i = vaddvq_s32(lanes(&x, y)) as f32;
            sum = if mins == Mins::None { i.mul_add(d, sum) } else { sum + d.mul_add(i, m * y.s) };
        }
        sum
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
    pair_lanes::<DOT>(w, a, Q8_0::BYTES, Mins::None, |blk, y| {
        let qs = &blk[Q8_0::QS..Q8_0::QS + 32];
        // SAFETY: NEON is baseline; 32 bytes.
        let x = unsafe {
            Pair { lo: vld1q_s8(qs.as_ptr() as *const i8), hi: vld1q_s8(qs.as_ptr().add(16) as *const i8) }
        };
        (x, f16_at(blk, Q8_0::D) * y.d, 0.0)
    })
}

/// `quants::dot_q5_0`: Q8_0's lanes on the values q − 16.
pub fn dot_q5_0(w: &[u8], a: &[Act32]) -> f32 {
    by_dot!(q5_0(w, a))
}

#[inline(always)]
fn q5_0<const DOT: bool>(w: &[u8], a: &[Act32]) -> f32 {
    pair_lanes::<DOT>(w, a, Q5_0::BYTES, Mins::None, |blk, y| {
        let (q, h) = (nibbles(&blk[Q5_0::QS..]), fifth_bits(u32_at(blk, Q5_0::QH)));
        // SAFETY: NEON is baseline.
        let x = unsafe {
            let sixteen = vdupq_n_s8(16);
            Pair { lo: vsubq_s8(vorrq_s8(q.lo, h.lo), sixteen), hi: vsubq_s8(vorrq_s8(q.hi, h.hi), sixteen) }
        };
        (x, f16_at(blk, Q5_0::D) * y.d, 0.0)
    })
}

/// `quants::dot_q4_1`.
pub fn dot_q4_1(w: &[u8], a: &[Act32]) -> f32 {
    by_dot!(q4_1(w, a))
}

#[inline(always)]
fn q4_1<const DOT: bool>(w: &[u8], a: &[Act32]) -> f32 {
    pair_lanes::<DOT>(w, a, Q4_1::BYTES, Mins::Paired, |blk, y| {
        (nibbles(&blk[Q4_1::QS..]), f16_at(blk, Q4_1::D) * y.d, f16_at(blk, Q4_1::M))
    })
}

/// `quants::dot_q5_1`.
pub fn dot_q5_1(w: &[u8], a: &[Act32]) -> f32 {
    by_dot!(q5_1(w, a))
}

#[inline(always)]
fn q5_1<const DOT: bool>(w: &[u8], a: &[Act32]) -> f32 {
    pair_lanes::<DOT>(w, a, Q5_1::BYTES, Mins::Split, |blk, y| {
        let (q, h) = (nibbles(&blk[Q5_1::QS..]), fifth_bits(u32_at(blk, Q5_1::QH)));
        // SAFETY: NEON is baseline.
        let x = unsafe { Pair { lo: vorrq_s8(q.lo, h.lo), hi: vorrq_s8(q.hi, h.hi) } };
        (x, f16_at(blk, Q5_1::D) * y.d, f16_at(blk, Q5_1::M))
    })
}
