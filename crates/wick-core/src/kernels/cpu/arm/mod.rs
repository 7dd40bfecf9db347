//! aarch64 NEON building blocks of the panel kernels and row dots: the int8 dot of four-byte
//! lanes (`sdot` where the CPU has the dot-product instructions, a widening multiply and
//! pairwise adds otherwise), f16 scales widened to f32, and ggml's horizontal sums on vectors.
//! Integer sums are exact either way; the float steps are the portable code's, lane by lane,
//! so every kernel built on these gives the portable kernel's bits.
//!
//! The dot-product and f16 instructions are written as inline assembly: their Rust intrinsics
//! are not stable yet.

use std::arch::aarch64::*;
use std::arch::asm;

use crate::kernels::cpu::blocks::Mins;

/// `f::<true>` compiled with the dot-product instructions where the CPU has them (after the
/// `WICK_ISA` cap), `f::<false>` otherwise.
macro_rules! by_dot {
    ($f:ident($($a:expr),*)) => {
        if isa() >= Isa::NeonDotprod {
            // SAFETY: the CPU has the dot-product instructions.
            unsafe { with_dot::<true, _>(#[inline(always)] || $f::<true>($($a),*)) }
        } else {
            $f::<false>($($a),*)
        }
    };
}

pub mod k_quants;
pub mod quants;

/// Lane i of `acc` plus `Σ_{t<4} w[4i+t]·y[4i+t]` (i8 × i8), with `sdot`.
///
/// # Safety
/// The CPU has the dot-product instructions (FEAT_DotProd).
#[inline]
#[target_feature(enable = "dotprod")]
pub unsafe fn sdot(mut acc: int32x4_t, w: int8x16_t, y: int8x16_t) -> int32x4_t {
    // SAFETY: a register-only instruction the caller's CPU has (see above).
    unsafe {
        asm!(
            "sdot {a:v}.4s, {w:v}.16b, {y:v}.16b",
            a = inout(vreg) acc,
            w = in(vreg) w,
            y = in(vreg) y,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// `acc` plus the 2×2 int8 matrix product `[a0; a1]·[b0; b1]ᵀ` (`smmla`): lanes
/// `(a0·b0, a0·b1, a1·b0, a1·b1)`, each a dot of 8 bytes (aₖ, bₖ: the register's 64-bit halves).
///
/// # Safety
/// The CPU has the int8 matrix multiply instructions (FEAT_I8MM).
#[inline]
#[target_feature(enable = "i8mm")]
pub unsafe fn smmla(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    // SAFETY: a register-only instruction the caller's CPU has (see above).
    unsafe {
        asm!(
            "smmla {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags)
        );
    }
    acc
}

/// `sdot` on plain NEON: the sixteen products widened to i16, adjacent pairs added, then each
/// lane's two pairs added into `acc`. Exact while a pair of products fits i16, i.e. one
/// operand within [−127, 127] (every caller's activations: q8 quantizers clamp to ±127).
#[inline(always)]
pub fn sdot_emulated(acc: int32x4_t, w: int8x16_t, y: int8x16_t) -> int32x4_t {
    // SAFETY: NEON is part of every aarch64 CPU (the target's baseline).
    unsafe {
        let lo = vmull_s8(vget_low_s8(w), vget_low_s8(y));
        let hi = vmull_high_s8(w, y);
        vpadalq_s16(acc, vpaddq_s16(lo, hi))
    }
}

/// `sdot` where `DOT` (the caller is compiled with dotprod enabled), its emulation otherwise.
///
/// # Safety
/// With `DOT`, the CPU has the dot-product instructions.
#[inline(always)]
pub unsafe fn dot4<const DOT: bool>(acc: int32x4_t, w: int8x16_t, y: int8x16_t) -> int32x4_t {
    if DOT {
        // SAFETY: the caller's contract.
        unsafe { sdot(acc, w, y) }
    } else {
        sdot_emulated(acc, w, y)
    }
}

/// `f()`, compiled with the dot-product instructions enabled when `DOT` (a second copy of
/// `f`'s code, as `feats::with_avx2_codegen`): kernels generic over `DOT` call `dot4::<DOT>`
/// inside, and `sdot` inlines only into code compiled with the feature.
///
/// # Safety
/// With `DOT`, the CPU has the dot-product instructions.
#[inline(always)]
pub unsafe fn with_dot<const DOT: bool, R>(f: impl FnOnce() -> R) -> R {
    #[inline]
    #[target_feature(enable = "dotprod")]
    unsafe fn enabled<R>(f: impl FnOnce() -> R) -> R {
        f()
    }
    if DOT {
        // SAFETY: the caller's contract.
        unsafe { enabled(f) }
    } else {
        f()
    }
}

/// `f()`, compiled with the dot-product and int8 matrix multiply instructions enabled.
///
/// # Safety
/// The CPU has both.
#[inline(always)]
pub unsafe fn with_i8mm<R>(f: impl FnOnce() -> R) -> R {
    #[inline]
    #[target_feature(enable = "dotprod,i8mm")]
    unsafe fn enabled<R>(f: impl FnOnce() -> R) -> R {
        f()
    }
    // SAFETY: the caller's contract.
    unsafe { enabled(f) }
}

/// The four activation bytes at `p` in every lane (the broadcast operand of `dot4`).
///
/// # Safety
/// `p..p + 4` is readable.
#[inline(always)]
pub unsafe fn bcast4(p: *const i8) -> int8x16_t {
    // SAFETY: the caller's contract; NEON is baseline.
    unsafe { vreinterpretq_s8_s32(vdupq_n_s32(std::ptr::read_unaligned(p as *const i32))) }
}

/// The first four bytes of `v` (unsigned) widened to i32 lanes.
#[inline(always)]
pub fn widen_low4_u8(v: uint8x8_t) -> int32x4_t {
    // SAFETY: NEON is baseline.
    unsafe { vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(vmovl_u8(v)))) }
}

/// The four bytes at `p` (unsigned) widened to i32 lanes.
///
/// # Safety
/// `p..p + 4` is readable.
#[inline(always)]
pub unsafe fn widen4_u8(p: *const u8) -> int32x4_t {
    // SAFETY: the caller's contract; NEON is baseline.
    widen_low4_u8(unsafe { vreinterpret_u8_u32(vdup_n_u32(std::ptr::read_unaligned(p as *const u32))) })
}

/// Four f16 values at `p` as f32 (`fcvtl`: exact, in every aarch64 CPU).
///
/// # Safety
/// `p..p + 8` is readable.
#[inline(always)]
pub unsafe fn load_f16x4(p: *const u8) -> float32x4_t {
    // SAFETY: the caller's contract; `fcvtl` (half to single) is baseline Advanced SIMD.
    unsafe {
        let h = vld1_u16(p as *const u16);
        let out: float32x4_t;
        asm!(
            "fcvtl {o:v}.4s, {h:v}.4h",
            o = lateout(vreg) out,
            h = in(vreg) h,
            options(pure, nomem, nostack, preserves_flags)
        );
        out
    }
}

/// ggml's `hsum_float_8` of lanes 0..4 (`lo`) and 4..8 (`hi`): `(h0+h2)+(h1+h3)`, h = hi + lo.
#[inline(always)]
pub fn hsum8(lo: float32x4_t, hi: float32x4_t) -> f32 {
    // SAFETY: NEON is baseline.
    unsafe {
        let h = vaddq_f32(hi, lo);
        let p = vadd_f32(vget_low_f32(h), vget_high_f32(h));
        vget_lane_f32::<0>(p) + vget_lane_f32::<1>(p)
    }
}

/// `blocks::PairOrder` for four outputs at once, one per lane (four columns of a panel): the
/// same float operations lane by lane.
#[derive(Clone, Copy)]
pub struct PairOrder4 {
    mins: Mins,
    nb: usize,
    b: usize,
    acc: [[float32x4_t; 4]; 2],
    summs: [float32x4_t; 2],
    /// The even block's mins `m` and activation sum `s`, until its pair's odd block comes.
    even: (float32x4_t, f32),
    /// A last odd block's value (`fma(d, Σ, m·s)`, or Σ and d without mins).
    tail: Option<(float32x4_t, float32x4_t)>,
}

impl PairOrder4 {
    #[inline(always)]
    pub fn new(mins: Mins, nb: usize) -> Self {
        // SAFETY: NEON is baseline.
        let z = unsafe { vdupq_n_f32(0.0) };
        Self { mins, nb, b: 0, acc: [[z; 4]; 2], summs: [z; 2], even: (z, 0.0), tail: None }
    }

    /// The next block: lane h's sums of the four columns, `d = dw·dy`, the mins `m` and `s`.
    #[inline(always)]
    pub fn block(&mut self, lanes: [int32x4_t; 4], d: float32x4_t, m: float32x4_t, s: f32) {
        let b = self.b;
        self.b += 1;
        // SAFETY: NEON is baseline.
        unsafe {
            if b + 1 == self.nb && self.nb % 2 == 1 {
                let i =
                    vcvtq_f32_s32(vaddq_s32(vaddq_s32(vaddq_s32(lanes[0], lanes[1]), lanes[2]), lanes[3]));
                self.tail = Some(match self.mins {
                    Mins::None => (i, d),
                    _ => (vfmaq_f32(vmulq_n_f32(m, s), d, i), d),
                });
                return;
            }
            let p = b % 2;
            for (a, &l) in self.acc[p].iter_mut().zip(&lanes) {
                *a = vaddq_f32(*a, vmulq_f32(vcvtq_f32_s32(l), d));
            }
            match (self.mins, p) {
                (Mins::None, _) => {}
                (Mins::Paired, 0) => self.even = (m, s),
                (Mins::Paired, _) => {
                    let t = vfmaq_f32(vmulq_n_f32(m, s), self.even.0, vdupq_n_f32(self.even.1));
                    self.summs[0] = vaddq_f32(self.summs[0], t);
                }
                (Mins::Split, p) => self.summs[p] = vfmaq_f32(self.summs[p], m, vdupq_n_f32(s)),
            }
        }
    }

    #[inline(always)]
    pub fn finish(self) -> float32x4_t {
        // SAFETY: NEON is baseline.
        unsafe {
            let h = |a: &[float32x4_t; 4]| vaddq_f32(vaddq_f32(a[0], a[1]), vaddq_f32(a[2], a[3]));
            let mut sum = vaddq_f32(h(&self.acc[0]), h(&self.acc[1]));
            match self.mins {
                Mins::None => {}
                Mins::Paired => sum = vaddq_f32(sum, self.summs[0]),
                Mins::Split => sum = vaddq_f32(vaddq_f32(sum, self.summs[0]), self.summs[1]),
            }
            match (self.tail, self.mins) {
                (None, _) => sum,
                (Some((i, d)), Mins::None) => vfmaq_f32(sum, i, d),
                (Some((t, _)), _) => vaddq_f32(sum, t),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lanes(v: int32x4_t) -> [i32; 4] {
        let mut o = [0i32; 4];
        // SAFETY: `o` holds four i32.
        unsafe { vst1q_s32(o.as_mut_ptr(), v) };
        o
    }

    /// Both dots give the exact lane sums at the extremes the kernels meet (weights in
    /// [−128, 127], activations in [−127, 127]) and on mixed values.
    #[test]
    fn dot4_is_the_exact_lane_sum() {
        let cases: [([i8; 16], [i8; 16]); 3] = [
            ([-128; 16], [-127; 16]),
            ([127; 16], [-127; 16]),
            (
                std::array::from_fn(|i| (i as i8 * 37).wrapping_sub(90)),
                std::array::from_fn(|i| 127 - 17 * i as i8),
            ),
        ];
        for (w, y) in cases {
            let want: [i32; 4] = std::array::from_fn(|l| {
                (0..4).map(|t| w[4 * l + t] as i32 * y[4 * l + t] as i32).sum::<i32>() + l as i32
            });
            // SAFETY: the arrays hold 16 bytes.
            let (wv, yv, acc) =
                unsafe { (vld1q_s8(w.as_ptr()), vld1q_s8(y.as_ptr()), vld1q_s32([0, 1, 2, 3].as_ptr())) };
            assert_eq!(lanes(sdot_emulated(acc, wv, yv)), want);
            if std::arch::is_aarch64_feature_detected!("dotprod") {
                // SAFETY: dotprod detected.
                assert_eq!(lanes(unsafe { sdot(acc, wv, yv) }), want);
            }
        }
    }

    #[test]
    fn smmla_is_the_2x2_int8_product() {
        if !std::arch::is_aarch64_feature_detected!("i8mm") {
            return;
        }
        let a: [i8; 16] = std::array::from_fn(|i| (i as i8 * 29).wrapping_sub(100));
        let b: [i8; 16] = std::array::from_fn(|i| 127 - 15 * i as i8);
        let dot = |x: &[i8], y: &[i8]| x.iter().zip(y).map(|(&p, &q)| p as i32 * q as i32).sum::<i32>();
        let want =
            [dot(&a[..8], &b[..8]), dot(&a[..8], &b[8..]), dot(&a[8..], &b[..8]), dot(&a[8..], &b[8..])];
        // SAFETY: i8mm detected; the arrays hold 16 bytes.
        let got = unsafe { smmla(vdupq_n_s32(0), vld1q_s8(a.as_ptr()), vld1q_s8(b.as_ptr())) };
        assert_eq!(lanes(got), want);
    }

    #[test]
    fn f16_scales_widen_exactly() {
        let v = [
            half::f16::from_f32(1.5),
            half::f16::MIN_POSITIVE_SUBNORMAL,
            half::f16::MAX,
            half::f16::from_f32(-0.1),
        ];
        let bytes: Vec<u8> = v.iter().flat_map(|h| h.to_le_bytes()).collect();
        let mut o = [0f32; 4];
        // SAFETY: 8 bytes in, 4 floats out.
        unsafe { vst1q_f32(o.as_mut_ptr(), load_f16x4(bytes.as_ptr())) };
        for (a, b) in o.iter().zip(&v) {
            assert_eq!(a.to_bits(), b.to_f32().to_bits());
        }
    }
}
