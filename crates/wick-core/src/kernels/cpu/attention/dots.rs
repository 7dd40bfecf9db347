//! f16 dot products in llama.cpp's orders over the f16 KV (`ggml_vec_dot_f16` for one new
//! token, tinyBLAS for several), contiguous or block by block over the paged cache, with their
//! AVX2/FMA/F16C and NEON versions (the same fma per lane, the same tree sums).

use half::f16;

use crate::cache::BLOCK_SIZE;
use crate::kernels::cpu::blocks::reduce16;
#[cfg(target_arch = "x86_64")]
use crate::kernels::cpu::feats::has_avx2;
#[cfg(target_arch = "aarch64")]
use crate::kernels::cpu::feats::{isa, Isa};
use crate::kernels::cpu::float_dots::dot_single;

/// tinyBLAS order over `x.len()` values (16 lanes, chunks of 16); a last partial chunk counts
/// as zero-padded (lanes past the end keep their sum).
pub fn dot_f16_tiled(x: &[f16], y: &[f32]) -> f32 {
    debug_assert_eq!(x.len(), y.len());
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2/FMA/F16C checked.
        return unsafe { avx::tiled(x, y) };
    }
    #[cfg(target_arch = "aarch64")]
    if isa() >= Isa::Neon {
        // SAFETY: NEON is baseline on aarch64.
        return unsafe { neon::tiled(x, y) };
    }
    let mut acc = [0f32; 16];
    for (xc, yc) in x.chunks(16).zip(y.chunks(16)) {
        for (l, s) in acc.iter_mut().enumerate().take(xc.len()) {
            *s = xc[l].to_f32().mul_add(yc[l], *s);
        }
    }
    reduce16(&acc)
}

/// `ggml_vec_dot_f16` order over `n >= x.len()` values, those past `x.len()` zero: 4×16 lanes
/// over steps of 64, folded (a0+a2)+(a1+a3), tree sum, the `n % 64` tail added in f64.
pub fn dot_f16_single(x: &[f16], y: &[f32], n: usize) -> f32 {
    debug_assert_eq!(x.len(), y.len());
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2/FMA/F16C checked.
        return unsafe { avx::single(x, y, n) };
    }
    #[cfg(target_arch = "aarch64")]
    if isa() >= Isa::Neon {
        // SAFETY: NEON is baseline on aarch64.
        return unsafe { neon::single(x, y, n) };
    }
    let xv = |i: usize| if i < x.len() { x[i].to_f32() } else { 0.0 };
    let yv = |i: usize| if i < y.len() { y[i] } else { 0.0 };
    dot_single(n, xv, yv)
}

/// `dot_f16_tiled` over positions `0..y.len()` of one value row stored block by block
/// (`run(j)`: block j's `BLOCK_SIZE` values). Blocks are whole 16-chunks, so the lanes carry
/// from block to block exactly as over one contiguous row.
pub fn dot_f16_tiled_paged<'a>(run: impl Fn(usize) -> &'a [f16], y: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2/FMA/F16C checked.
        return unsafe { avx::tiled_paged(&run, y) };
    }
    #[cfg(target_arch = "aarch64")]
    if isa() >= Isa::Neon {
        // SAFETY: NEON is baseline on aarch64.
        return unsafe { neon::tiled_paged(&run, y) };
    }
    dot_f16_tiled(&gather(&run, y.len()), y)
}

/// `dot_f16_single` over positions `0..n` (a multiple of 64) of one value row stored block by
/// block, values at and past `y.len()` zero. Blocks are whole 64-steps.
pub fn dot_f16_single_paged<'a>(run: impl Fn(usize) -> &'a [f16], y: &[f32], n: usize) -> f32 {
    debug_assert!(n.is_multiple_of(64) && n >= y.len());
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2/FMA/F16C checked.
        return unsafe { avx::single_paged(&run, y, n) };
    }
    #[cfg(target_arch = "aarch64")]
    if isa() >= Isa::Neon {
        // SAFETY: NEON is baseline on aarch64.
        return unsafe { neon::single_paged(&run, y, n) };
    }
    dot_f16_single(&gather(&run, y.len()), y, n)
}

fn gather<'a>(run: &impl Fn(usize) -> &'a [f16], len: usize) -> Vec<f16> {
    let mut x = Vec::with_capacity(len);
    for j in 0..len.div_ceil(BLOCK_SIZE) {
        let r = run(j);
        x.extend_from_slice(&r[..(len - j * BLOCK_SIZE).min(BLOCK_SIZE)]);
    }
    x
}

#[cfg(target_arch = "x86_64")]
mod avx {
    use std::arch::x86_64::*;

    use half::f16;

    #[inline(always)]
    unsafe fn load_f16(x: *const f16) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(x as *const __m128i))
    }

    #[inline(always)]
    unsafe fn store16(lo: __m256, hi: __m256) -> [f32; 16] {
        let mut a = [0f32; 16];
        _mm256_storeu_ps(a.as_mut_ptr(), lo);
        _mm256_storeu_ps(a.as_mut_ptr().add(8), hi);
        a
    }

    /// One 64-step of `ggml_vec_dot_f16`: 4×16 lanes (8 vectors) each take one fma.
    #[inline(always)]
    unsafe fn step64(acc: &mut [__m256; 8], x: *const f16, y: *const f32) {
        for (v, a) in acc.iter_mut().enumerate() {
            *a = _mm256_fmadd_ps(load_f16(x.add(8 * v)), _mm256_loadu_ps(y.add(8 * v)), *a);
        }
    }

    /// Accumulator j holds lanes 16j..16j+16 as vectors 2j (low 8) and 2j+1 (high 8): fold
    /// (a0+a2)+(a1+a3), then the 16-lane tree sum.
    #[inline(always)]
    unsafe fn fold64(acc: &[__m256; 8]) -> f32 {
        let f_lo = _mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6]));
        let f_hi = _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7]));
        super::reduce16(&store16(f_lo, f_hi))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn tiled(x: &[f16], y: &[f32]) -> f32 {
        let n = x.len();
        let full = n & !15;
        let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let (xp, yp) = (x.as_ptr(), y.as_ptr());
        let mut i = 0;
        while i < full {
            lo = _mm256_fmadd_ps(load_f16(xp.add(i)), _mm256_loadu_ps(yp.add(i)), lo);
            hi = _mm256_fmadd_ps(load_f16(xp.add(i + 8)), _mm256_loadu_ps(yp.add(i + 8)), hi);
            i += 16;
        }
        let mut a = store16(lo, hi);
        for (l, s) in a.iter_mut().enumerate().take(n - full) {
            *s = x[full + l].to_f32().mul_add(y[full + l], *s);
        }
        super::reduce16(&a)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn single(x: &[f16], y: &[f32], n: usize) -> f32 {
        let len = x.len();
        let np = n & !63;
        let mut acc = [_mm256_setzero_ps(); 8];
        let (xp, yp) = (x.as_ptr(), y.as_ptr());
        let mut base = 0;
        // Whole 64-steps inside the data.
        while base + 64 <= np.min(len) {
            step64(&mut acc, xp.add(base), yp.add(base));
            base += 64;
        }
        // A step that runs past the data: zero-padded copies.
        while base < np {
            let mut xb = [f16::ZERO; 64];
            let mut yb = [0f32; 64];
            for t in 0..64 {
                if base + t < len {
                    xb[t] = x[base + t];
                    yb[t] = y[base + t];
                }
            }
            step64(&mut acc, xb.as_ptr(), yb.as_ptr());
            base += 64;
        }
        let mut sum = fold64(&acc) as f64;
        for i in np..n.min(len) {
            sum += (x[i].to_f32() * y[i]) as f64;
        }
        sum as f32
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn tiled_paged<'a>(run: &dyn Fn(usize) -> &'a [f16], y: &[f32]) -> f32 {
        let n = y.len();
        let full = n & !15;
        let bs = super::BLOCK_SIZE;
        let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let yp = y.as_ptr();
        let mut i = 0;
        while i < full {
            let x = run(i / bs).as_ptr();
            let end = (i - i % bs + bs).min(full);
            while i < end {
                let xo = x.add(i % bs);
                lo = _mm256_fmadd_ps(load_f16(xo), _mm256_loadu_ps(yp.add(i)), lo);
                hi = _mm256_fmadd_ps(load_f16(xo.add(8)), _mm256_loadu_ps(yp.add(i + 8)), hi);
                i += 16;
            }
        }
        let mut a = store16(lo, hi);
        if full < n {
            let x = run(full / bs);
            for (l, s) in a.iter_mut().enumerate().take(n - full) {
                *s = x[(full + l) % bs].to_f32().mul_add(y[full + l], *s);
            }
        }
        super::reduce16(&a)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn single_paged<'a>(run: &dyn Fn(usize) -> &'a [f16], y: &[f32], n: usize) -> f32 {
        let len = y.len();
        let bs = super::BLOCK_SIZE;
        let mut acc = [_mm256_setzero_ps(); 8];
        let yp = y.as_ptr();
        let mut base = 0;
        // Whole 64-steps inside the data, block by block.
        while base + 64 <= len {
            step64(&mut acc, run(base / bs).as_ptr().add(base % bs), yp.add(base));
            base += 64;
        }
        // Steps that run past the data: zero-padded copies.
        while base < n {
            let mut xb = [f16::ZERO; 64];
            let mut yb = [0f32; 64];
            if base < len {
                let x = run(base / bs);
                for t in 0..len - base {
                    xb[t] = x[(base + t) % bs];
                    yb[t] = y[base + t];
                }
            }
            step64(&mut acc, xb.as_ptr(), yb.as_ptr());
            base += 64;
        }
        fold64(&acc)
    }
}

/// The AVX2 kernels' steps on 4-lane vectors: 16 lanes are four registers, a 64-step sixteen.
#[cfg(target_arch = "aarch64")]
mod neon {
    use std::arch::aarch64::*;

    use half::f16;

    use crate::kernels::cpu::arm::load_f16x4;

    #[inline(always)]
    unsafe fn load4(x: *const f16) -> float32x4_t {
        load_f16x4(x as *const u8)
    }

    #[inline(always)]
    unsafe fn store16(v: &[float32x4_t]) -> [f32; 16] {
        let mut a = [0f32; 16];
        for (q, &v) in v.iter().take(4).enumerate() {
            vst1q_f32(a.as_mut_ptr().add(4 * q), v);
        }
        a
    }

    /// Lanes 16c..16c + 16 at `x`, `y` into `acc` (one fma per lane).
    #[inline(always)]
    unsafe fn step16(acc: &mut [float32x4_t], x: *const f16, y: *const f32) {
        for (q, a) in acc.iter_mut().take(4).enumerate() {
            *a = vfmaq_f32(*a, load4(x.add(4 * q)), vld1q_f32(y.add(4 * q)));
        }
    }

    /// One 64-step of `ggml_vec_dot_f16`: 4×16 lanes (16 vectors) each take one fma.
    #[inline(always)]
    unsafe fn step64(acc: &mut [float32x4_t; 16], x: *const f16, y: *const f32) {
        for j in 0..4 {
            step16(&mut acc[4 * j..], x.add(16 * j), y.add(16 * j));
        }
    }

    /// Accumulator j holds lanes 16j..16j+16 as vectors 4j..4j+4: fold (a0+a2)+(a1+a3), then
    /// the 16-lane tree sum.
    #[inline(always)]
    unsafe fn fold64(acc: &[float32x4_t; 16]) -> f32 {
        let f: [float32x4_t; 4] = std::array::from_fn(|q| {
            vaddq_f32(vaddq_f32(acc[q], acc[8 + q]), vaddq_f32(acc[4 + q], acc[12 + q]))
        });
        super::reduce16(&store16(&f))
    }

    pub unsafe fn tiled(x: &[f16], y: &[f32]) -> f32 {
        let n = x.len();
        let full = n & !15;
        let mut acc = [vdupq_n_f32(0.0); 4];
        let (xp, yp) = (x.as_ptr(), y.as_ptr());
        let mut i = 0;
        while i < full {
            step16(&mut acc, xp.add(i), yp.add(i));
            i += 16;
        }
        let mut a = store16(&acc);
        for (l, s) in a.iter_mut().enumerate().take(n - full) {
            *s = x[full + l].to_f32().mul_add(y[full + l], *s);
        }
        super::reduce16(&a)
    }

    pub unsafe fn single(x: &[f16], y: &[f32], n: usize) -> f32 {
        let len = x.len();
        let np = n & !63;
        let mut acc = [vdupq_n_f32(0.0); 16];
        let (xp, yp) = (x.as_ptr(), y.as_ptr());
        let mut base = 0;
        // Whole 64-steps inside the data.
        while base + 64 <= np.min(len) {
            step64(&mut acc, xp.add(base), yp.add(base));
            base += 64;
        }
        // A step that runs past the data: zero-padded copies.
        while base < np {
            let mut xb = [f16::ZERO; 64];
            let mut yb = [0f32; 64];
            for t in 0..64 {
                if base + t < len {
                    xb[t] = x[base + t];
                    yb[t] = y[base + t];
                }
            }
            step64(&mut acc, xb.as_ptr(), yb.as_ptr());
            base += 64;
        }
        let mut sum = fold64(&acc) as f64;
        for i in np..n.min(len) {
            sum += (x[i].to_f32() * y[i]) as f64;
        }
        sum as f32
    }

    pub unsafe fn tiled_paged<'a>(run: &dyn Fn(usize) -> &'a [f16], y: &[f32]) -> f32 {
        let n = y.len();
        let full = n & !15;
        let bs = super::BLOCK_SIZE;
        let mut acc = [vdupq_n_f32(0.0); 4];
        let yp = y.as_ptr();
        let mut i = 0;
        while i < full {
            let x = run(i / bs).as_ptr();
            let end = (i - i % bs + bs).min(full);
            while i < end {
                step16(&mut acc, x.add(i % bs), yp.add(i));
                i += 16;
            }
        }
        let mut a = store16(&acc);
        if full < n {
            let x = run(full / bs);
            for (l, s) in a.iter_mut().enumerate().take(n - full) {
                *s = x[(full + l) % bs].to_f32().mul_add(y[full + l], *s);
            }
        }
        super::reduce16(&a)
    }

    pub unsafe fn single_paged<'a>(run: &dyn Fn(usize) -> &'a [f16], y: &[f32], n: usize) -> f32 {
        let len = y.len();
        let bs = super::BLOCK_SIZE;
        let mut acc = [vdupq_n_f32(0.0); 16];
        let yp = y.as_ptr();
        let mut base = 0;
        // Whole 64-steps inside the data, block by block.
        while base + 64 <= len {
            step64(&mut acc, run(base / bs).as_ptr().add(base % bs), yp.add(base));
            base += 64;
        }
        // Steps that run past the data: zero-padded copies.
        while base < n {
            let mut xb = [f16::ZERO; 64];
            let mut yb = [0f32; 64];
            if base < len {
                let x = run(base / bs);
                for t in 0..len - base {
                    xb[t] = x[(base + t) % bs];
                    yb[t] = y[base + t];
                }
            }
            step64(&mut acc, xb.as_ptr(), yb.as_ptr());
            base += 64;
        }
        fold64(&acc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference_tiled(x: &[f16], y: &[f32]) -> f32 {
        let mut acc = [0f32; 16];
        for base in (0..x.len()).step_by(16) {
            for l in 0..16 {
                let (a, b) =
                    if base + l < x.len() { (x[base + l].to_f32(), y[base + l]) } else { (0.0, 0.0) };
                acc[l] = a.mul_add(b, acc[l]);
            }
        }
        reduce16(&acc)
    }

    #[test]
    fn simd_dots_match_the_scalar_order_bit_for_bit() {
        let mut s = 7u32;
        let mut r = || {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1 << 24) as f32 - 0.5
        };
        for n in [16usize, 48, 64, 100, 130, 256, 333] {
            let x: Vec<f16> = (0..n).map(|_| f16::from_f32(r() * 4.0)).collect();
            let y: Vec<f32> = (0..n).map(|_| f16::from_f32(r()).to_f32()).collect();
            assert_eq!(dot_f16_tiled(&x, &y).to_bits(), reference_tiled(&x, &y).to_bits(), "tiled n={n}");
            for total in [n, n.div_ceil(64) * 64] {
                let xv = |i: usize| if i < n { x[i].to_f32() } else { 0.0 };
                let yv = |i: usize| if i < n { y[i] } else { 0.0 };
                let np = total & !63;
                let mut acc = [[0f32; 16]; 4];
                for base in (0..np).step_by(64) {
                    for j in 0..4 {
                        for l in 0..16 {
                            let i = base + 16 * j + l;
                            acc[j][l] = xv(i).mul_add(yv(i), acc[j][l]);
                        }
                    }
                }
                let f: [f32; 16] = std::array::from_fn(|l| (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]));
                let mut sum = reduce16(&f) as f64;
                for i in np..total {
                    sum += (xv(i) * yv(i)) as f64;
                }
                assert_eq!(
                    dot_f16_single(&x, &y, total).to_bits(),
                    (sum as f32).to_bits(),
                    "single n={n}/{total}"
                );
            }
        }
    }

    #[test]
    fn paged_dots_match_the_contiguous_ones_bit_for_bit() {
        let mut s = 11u32;
        let mut r = || {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1 << 24) as f32 - 0.5
        };
        for n in [1usize, 15, 16, 63, 64, 65, 128, 200, 257] {
            let x: Vec<f16> = (0..n).map(|_| f16::from_f32(r() * 4.0)).collect();
            let y: Vec<f32> = (0..n).map(|_| f16::from_f32(r()).to_f32()).collect();
            // Blocks stored in reverse order, as a block table would scatter them.
            let nb = n.div_ceil(BLOCK_SIZE);
            let mut store = vec![f16::ZERO; nb * BLOCK_SIZE];
            for (t, &v) in x.iter().enumerate() {
                store[(nb - 1 - t / BLOCK_SIZE) * BLOCK_SIZE + t % BLOCK_SIZE] = v;
            }
            let run = |j: usize| &store[(nb - 1 - j) * BLOCK_SIZE..(nb - j) * BLOCK_SIZE];
            let total = n.div_ceil(64) * 64;
            assert_eq!(dot_f16_tiled_paged(run, &y).to_bits(), dot_f16_tiled(&x, &y).to_bits(), "tiled {n}");
            assert_eq!(
                dot_f16_single_paged(run, &y, total).to_bits(),
                dot_f16_single(&x, &y, total).to_bits(),
                "single {n}"
            );
        }
    }
}
