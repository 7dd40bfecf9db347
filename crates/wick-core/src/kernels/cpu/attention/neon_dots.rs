//! The f16 dots of `dots` on aarch64, in llama.cpp's NEON build's orders (armv8.2-a+dotprod,
//! no FP16 arithmetic; f16 widened by `fcvtl`, one `vfmaq_f32` per lane and step):
//! - `single`: `ggml_vec_dot_f16` — 4 accumulators of 4 lanes over steps of 16, folded
//!   (a0+a2)+(a1+a3), `vaddvq_f32`, the n % 16 tail added in f64;
//! - `tiled`: tinyBLAS's `tinyBLAS<4, float32x4_t, …, ggml_fp16_t, float, float>` — one 4-lane
//!   accumulator over chunks of 4, `vaddvq_f32` (the f32 operand as it is).
//!
//! The scalar statements are `float_dots::dot_single` / `dot_tiled` (`head16_order`,
//! `tiled4_order`), which the tests of `dots` hold these to bit for bit.

use std::arch::aarch64::*;

use half::f16;

use crate::cache::BLOCK_SIZE;
use crate::kernels::cpu::arm::load_f16x4;
use crate::kernels::cpu::blocks::hsum4;

/// The lanes of `acc`, lanes `0..tail` each taking one more product `at(l)`, then `vaddvq_f32`.
#[inline(always)]
unsafe fn finish4(acc: float32x4_t, tail: usize, at: impl Fn(usize) -> (f32, f32)) -> f32 {
    let mut a = [0f32; 4];
    vst1q_f32(a.as_mut_ptr(), acc);
    for (l, s) in a.iter_mut().enumerate().take(tail) {
        let (x, y) = at(l);
        *s = x.mul_add(y, *s);
    }
    hsum4(a)
}

/// `acc + x[0..4]·y[0..4]` lane by lane.
#[inline(always)]
unsafe fn fma4(acc: float32x4_t, x: *const f16, y: *const f32) -> float32x4_t {
    vfmaq_f32(acc, load_f16x4(x as *const u8), vld1q_f32(y))
}

/// One 16-step of `ggml_vec_dot_f16`: lanes 4j..4j+4 into accumulator j.
#[inline(always)]
unsafe fn step16(acc: &mut [float32x4_t; 4], x: *const f16, y: *const f32) {
    for (j, a) in acc.iter_mut().enumerate() {
        *a = fma4(*a, x.add(4 * j), y.add(4 * j));
    }
}

/// `GGML_F32x4_REDUCE`: (a0+a2)+(a1+a3) lane by lane, then `vaddvq_f32`.
#[inline(always)]
unsafe fn fold16(acc: &[float32x4_t; 4]) -> f32 {
    let f = vaddq_f32(vaddq_f32(acc[0], acc[2]), vaddq_f32(acc[1], acc[3]));
    let mut a = [0f32; 4];
    vst1q_f32(a.as_mut_ptr(), f);
    hsum4(a)
}

/// Zero-padded copies of a 16-step that runs past the data (`len` values, `at(t)` value t).
#[inline(always)]
fn padded16(base: usize, len: usize, at: impl Fn(usize) -> (f16, f32)) -> ([f16; 16], [f32; 16]) {
    let mut xb = [f16::ZERO; 16];
    let mut yb = [0f32; 16];
    for t in 0..16 {
        if base + t < len {
            (xb[t], yb[t]) = at(base + t);
        }
    }
    (xb, yb)
}

/// tinyBLAS's NEON order over `x.len()` values (a last partial chunk counts as zero-padded).
///
/// # Safety
/// `x.len() == y.len()`.
pub unsafe fn tiled(x: &[f16], y: &[f32]) -> f32 {
    let n = x.len();
    let full = n & !3;
    let mut acc = vdupq_n_f32(0.0);
    let mut i = 0;
    while i < full {
        acc = fma4(acc, x.as_ptr().add(i), y.as_ptr().add(i));
        i += 4;
    }
    finish4(acc, n - full, |l| (x[full + l].to_f32(), y[full + l]))
}

/// `ggml_vec_dot_f16`'s NEON order over `n >= x.len()` values, those past `x.len()` zero.
///
/// # Safety
/// `x.len() == y.len()`.
pub unsafe fn single(x: &[f16], y: &[f32], n: usize) -> f32 {
    let len = x.len();
    let np = n & !15;
    let mut acc = [vdupq_n_f32(0.0); 4];
    let mut base = 0;
    while base + 16 <= np.min(len) {
        step16(&mut acc, x.as_ptr().add(base), y.as_ptr().add(base));
        base += 16;
    }
    while base < np {
        let (xb, yb) = padded16(base, len, |i| (x[i], y[i]));
        step16(&mut acc, xb.as_ptr(), yb.as_ptr());
        base += 16;
    }
    let mut sum = fold16(&acc) as f64;
    for i in np..n.min(len) {
        sum += (x[i].to_f32() * y[i]) as f64;
    }
    sum as f32
}

/// `tiled` over positions `0..y.len()` of a row stored block by block (`run(j)`: block j's
/// `BLOCK_SIZE` values; blocks are whole chunks of 4).
///
/// # Safety
/// Each block `run(j)` holds `BLOCK_SIZE` values.
pub unsafe fn tiled_paged<'a>(run: &dyn Fn(usize) -> &'a [f16], y: &[f32]) -> f32 {
    let n = y.len();
    let full = n & !3;
    let mut acc = vdupq_n_f32(0.0);
    let mut i = 0;
    while i < full {
        let x = run(i / BLOCK_SIZE).as_ptr();
        let end = (i - i % BLOCK_SIZE + BLOCK_SIZE).min(full);
        while i < end {
            acc = fma4(acc, x.add(i % BLOCK_SIZE), y.as_ptr().add(i));
            i += 4;
        }
    }
    if full == n {
        return finish4(acc, 0, |_| (0.0, 0.0));
    }
    let x = run(full / BLOCK_SIZE);
    finish4(acc, n - full, |l| (x[(full + l) % BLOCK_SIZE].to_f32(), y[full + l]))
}

/// `single` over positions `0..n` (a multiple of 16) of a row stored block by block, values at
/// and past `y.len()` zero (blocks are whole 16-steps).
///
/// # Safety
/// Each block `run(j)` holds `BLOCK_SIZE` values.
pub unsafe fn single_paged<'a>(run: &dyn Fn(usize) -> &'a [f16], y: &[f32], n: usize) -> f32 {
    let len = y.len();
    let mut acc = [vdupq_n_f32(0.0); 4];
    let mut base = 0;
    while base + 16 <= len {
        step16(&mut acc, run(base / BLOCK_SIZE).as_ptr().add(base % BLOCK_SIZE), y.as_ptr().add(base));
        base += 16;
    }
    while base < n {
        let x = if base < len { run(base / BLOCK_SIZE) } else { &[] };
        let (xb, yb) = padded16(base, len, |i| (x[i % BLOCK_SIZE], y[i]));
        step16(&mut acc, xb.as_ptr(), yb.as_ptr());
        base += 16;
    }
    fold16(&acc)
}
