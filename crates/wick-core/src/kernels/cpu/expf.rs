//! ggml's `expf` as the local llama.cpp CPU build computes it, and the ops built on it
//! (`silu`·u, softmax). Vector lanes follow `ggml_v_expf` op for op, so they round as
//! llama.cpp does; elements past a row's last whole vector use libm, as ggml's tails do.
//! x86: the AVX-512 (16 lanes) or AVX2 (8) variant, by the CPU; aarch64: the NEON variant
//! (4 lanes, the AVX2 variant's lane arithmetic: `vfmsq`/`vfmaq` where AVX2 has
//! `fnmadd`/`fmadd`, the same selects), whatever `WICK_ISA` says, since it is the order of
//! llama.cpp's aarch64 build and the scalar statement computes it too.

use super::blocks::{hsum4, hsum8, reduce16};
use super::feats::{has_avx2_fma, has_avx512_expf, with_avx2_codegen};
use crate::runtime::pool::{self, SyncPtr};

/// Which of ggml's vectorised `expf` approximations the local llama.cpp CPU build uses:
/// its AVX-512 and AVX2 variants round differently, and both differ from libm by ~1 ulp.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ExpVariant {
    Avx512,
    Avx2,
    /// ggml's NEON `ggml_v_expf` (aarch64): 4 lanes; per-vector sums are `vaddvq_f32`.
    Neon,
    Libm,
}

pub fn exp_variant() -> ExpVariant {
    static V: std::sync::OnceLock<ExpVariant> = std::sync::OnceLock::new();
    *V.get_or_init(|| {
        if cfg!(target_arch = "aarch64") {
            ExpVariant::Neon
        } else if has_avx512_expf() {
            ExpVariant::Avx512
        } else if has_avx2_fma() {
            ExpVariant::Avx2
        } else {
            ExpVariant::Libm
        }
    })
}

/// SIMD width of ggml's vectorised loops for the variant (elements past the last full
/// vector use libm `expf`).
pub fn simd_width(v: ExpVariant) -> usize {
    match v {
        ExpVariant::Avx512 => 16,
        ExpVariant::Avx2 => 8,
        ExpVariant::Neon => 4,
        ExpVariant::Libm => 1,
    }
}

/// The horizontal sum ggml's `ggml_vec_soft_max_f32` adds (in f64) per vector of the variant
/// (`l`: the vector's lanes, zero past them): `_mm512_reduce_add_ps`, AVX2's halves-then-pairs,
/// `vaddvq_f32` (pairs, then the two pair sums), or the one value.
#[inline(always)]
pub fn vector_sum(v: ExpVariant, l: &[f32; 16]) -> f32 {
    match v {
        ExpVariant::Avx512 => reduce16(l),
        ExpVariant::Avx2 => hsum8([l[0], l[1], l[2], l[3], l[4], l[5], l[6], l[7]]),
        ExpVariant::Neon => hsum4([l[0], l[1], l[2], l[3]]),
        ExpVariant::Libm => l[0],
    }
}

/// One lane of ggml's `ggml_v_expf` (ARM optimized-routines polynomial), op for op (the
/// `Neon` variant takes the `Avx2` arithmetic: the two are the same operations).
#[inline(always)]
pub fn ggml_expf(x: f32, v: ExpVariant) -> f32 {
    if v == ExpVariant::Libm {
        return x.exp();
    }
    let r = f32::from_bits(0x4B40_0000); // 0x1.8p23
    let z = x.mul_add(f32::from_bits(0x3FB8_AA3B), r); // 0x1.715476p+0
    let n = z - r;
    let b = (-n).mul_add(f32::from_bits(0x35BF_BE8E), (-n).mul_add(f32::from_bits(0x3F31_7200), x));
    let u = b * b;
    let p = f32::from_bits(0x3C07_2010).mul_add(b, f32::from_bits(0x3D2B_9F17)); // 0x1.0e4020p-7, 0x1.573e2ep-5
    let q = f32::from_bits(0x3E2A_AF33).mul_add(b, f32::from_bits(0x3EFF_FEDB)); // 0x1.555e66p-3, 0x1.fffdb6p-2
    if v == ExpVariant::Avx512 {
        let j = p.mul_add(u, q).mul_add(u, f32::from_bits(0x3F7F_FFF6).mul_add(b, 1.0)); // 0x1.ffffecp-1
        if n.abs() > 192.0 {
            return if n <= 0.0 { 0.0 } else { f32::INFINITY };
        }
        // _mm512_scalef_ps: j·2^n with one rounding (exact in f64, rounded once to f32).
        let pow2 = f64::from_bits(((n as i64 + 1023) as u64) << 52);
        return (j as f64 * pow2) as f32;
    }
    let j = p.mul_add(u, q).mul_add(u, f32::from_bits(0x3F7F_FFF6) * b);
    let e = z.to_bits() << 23;
    let k = f32::from_bits(e.wrapping_add(1.0f32.to_bits()));
    if n.abs() <= 126.0 {
        return k.mul_add(j, k);
    }
    let g: u32 = if n <= 0.0 { 0x8200_0000 } else { 0 };
    let s1 = f32::from_bits(g.wrapping_add(0x7F00_0000));
    let s2 = f32::from_bits(e.wrapping_sub(g));
    if n.abs() > 192.0 {
        s1 * s1
    } else {
        s2.mul_add(j, s2) * s1
    }
}

/// Sixteen lanes of ggml's AVX-512 `ggml_v_expf` (the same operations as `ggml_expf`'s
/// `Avx512` arm, which emulates `_mm512_scalef_ps` in f64).
///
/// # Safety
/// The CPU must have AVX-512 F and DQ (`exp_variant() == ExpVariant::Avx512`).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
pub unsafe fn expf16(x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    let c = |bits: u32| _mm512_set1_ps(f32::from_bits(bits));
    let r = c(0x4B40_0000);
    let z = _mm512_fmadd_ps(x, c(0x3FB8_AA3B), r);
    let n = _mm512_sub_ps(z, r);
    let b = _mm512_fnmadd_ps(n, c(0x35BF_BE8E), _mm512_fnmadd_ps(n, c(0x3F31_7200), x));
    let big = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(_mm512_abs_ps(n), _mm512_set1_ps(192.0));
    let u = _mm512_mul_ps(b, b);
    let j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(
            _mm512_fmadd_ps(c(0x3C07_2010), b, c(0x3D2B_9F17)),
            u,
            _mm512_fmadd_ps(c(0x3E2A_AF33), b, c(0x3EFF_FEDB)),
        ),
        u,
        _mm512_fmadd_ps(c(0x3F7F_FFF6), b, _mm512_set1_ps(1.0)),
    );
    let res = _mm512_scalef_ps(j, n);
    if big == 0 {
        return res;
    }
    let zero = _mm512_setzero_ps();
    let alt =
        _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_LE_OQ>(n, zero), _mm512_set1_ps(f32::INFINITY), zero);
    _mm512_mask_blend_ps(big, res, alt)
}

/// Elements per task of `swiglu` (whole 16-lane vectors, so vector lanes stay where ggml has them).
const PIECE: usize = 1024;

/// ggml `swiglu` over rows of `n`: `y = (x / (1 + expf(0 − x)))·m`, spread over the pool.
pub fn swiglu(g: &[f32], u: &[f32], n: usize) -> Vec<f32> {
    debug_assert_eq!(g.len(), u.len());
    let var = exp_variant();
    let vec_end = n - n % simd_width(var);
    let mut y = vec![0f32; g.len()];
    let per_row = n.div_ceil(PIECE);
    let yp = SyncPtr(y.as_mut_ptr());
    let task = |it: usize| {
        let (r, lo) = (it / per_row, (it % per_row) * PIECE);
        let hi = (lo + PIECE).min(n);
        let (gs, us) = (&g[r * n + lo..r * n + hi], &u[r * n + lo..r * n + hi]);
        // SAFETY: task `it` alone writes this slice of `y`.
        let ys = unsafe { std::slice::from_raw_parts_mut(yp.get().add(r * n + lo), hi - lo) };
        let mut i = 0;
        #[cfg(target_arch = "x86_64")]
        if var == ExpVariant::Avx512 {
            let end = vec_end.clamp(lo, hi) - lo;
            // SAFETY: `Avx512` is only detected with AVX-512 F and DQ; 16-lane steps inside `end`.
            unsafe { swiglu16(gs, us, ys, end) };
            i = end;
        }
        with_avx2_codegen(
            #[inline(always)]
            || {
                for ((o, &x), &m) in ys.iter_mut().zip(gs).zip(us).skip(i) {
                    let e = if lo + i < vec_end { ggml_expf(0.0 - x, var) } else { (-x).exp() };
                    *o = (x / (1.0 + e)) * m;
                    i += 1;
                }
            },
        );
    };
    let tasks = (g.len() / n.max(1)) * per_row;
    if g.len() >= 2 * PIECE {
        pool::run(tasks, &task);
    } else {
        (0..tasks).for_each(task);
    }
    y
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn swiglu16(g: &[f32], u: &[f32], y: &mut [f32], end: usize) {
    use std::arch::x86_64::*;
    for i in (0..end).step_by(16) {
        let x = _mm512_loadu_ps(g.as_ptr().add(i));
        let e = expf16(_mm512_sub_ps(_mm512_setzero_ps(), x));
        let s = _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0), e));
        _mm512_storeu_ps(y.as_mut_ptr().add(i), _mm512_mul_ps(s, _mm512_loadu_ps(u.as_ptr().add(i))));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> Vec<f32> {
        let mut xs: Vec<f32> = (-2000..2000).map(|i| i as f32 * 0.071).collect();
        xs.extend([0.0, -0.0, 88.7, 88.8, 89.0, -87.0, -103.0, -104.0, -150.0, -200.0, 300.0, -1e30, 1e30]);
        xs.extend([f32::INFINITY, f32::NEG_INFINITY, f32::MIN_POSITIVE, -f32::MIN_POSITIVE]);
        let mut s = 7u32;
        for _ in 0..4000 {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            xs.push(f32::from_bits(s) % 120.0);
        }
        while !xs.len().is_multiple_of(16) {
            xs.push(1.5);
        }
        xs
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn vector_expf_matches_the_lane_emulation() {
        use std::arch::x86_64::*;
        if exp_variant() != ExpVariant::Avx512 {
            return;
        }
        for c in inputs().chunks(16) {
            let mut v = [0f32; 16];
            // SAFETY: AVX-512 F/DQ detected (`Avx512`).
            unsafe { _mm512_storeu_ps(v.as_mut_ptr(), expf16(_mm512_loadu_ps(c.as_ptr()))) };
            for (x, e) in c.iter().zip(v) {
                let want = ggml_expf(*x, ExpVariant::Avx512);
                assert!(
                    e.to_bits() == want.to_bits() || (e.is_nan() && want.is_nan()),
                    "expf({x}): {e} vs {want}"
                );
            }
        }
    }

    #[test]
    fn swiglu_matches_the_lane_formula() {
        let var = exp_variant();
        let x = inputs();
        for n in [16usize, 40, 1536, 2500] {
            let rows = x.len() / n;
            let g = &x[..rows * n];
            let u: Vec<f32> = g.iter().map(|v| (v * 0.37).sin()).collect();
            let y = swiglu(g, &u, n);
            let vec_end = n - n % simd_width(var);
            for (i, ((&gi, &ui), yi)) in g.iter().zip(&u).zip(&y).enumerate() {
                let e = if i % n < vec_end { ggml_expf(0.0 - gi, var) } else { (-gi).exp() };
                let want = (gi / (1.0 + e)) * ui;
                assert!(yi.to_bits() == want.to_bits() || (yi.is_nan() && want.is_nan()), "n {n} i {i}");
            }
        }
    }
}
