//! f16 dot products in llama.cpp's orders over the f16 KV (`ggml_vec_dot_f16` for one new
//! token, tinyBLAS for several), contiguous or block by block over the paged cache, with their
//! AVX2/FMA/F16C versions (x86 orders: the same fma per lane, the same tree sums) and NEON
//! versions (`neon_dots`: the NEON build's orders, which the scalar code states on aarch64).

use half::f16;

#[cfg(target_arch = "aarch64")]
use super::neon_dots as neon;
use crate::cache::BLOCK_SIZE;
#[cfg(target_arch = "aarch64")]
use crate::kernels::cpu::blocks::hsum4;
#[cfg(not(target_arch = "aarch64"))]
use crate::kernels::cpu::blocks::reduce16;
#[cfg(target_arch = "x86_64")]
use crate::kernels::cpu::feats::has_avx2;
#[cfg(target_arch = "aarch64")]
use crate::kernels::cpu::feats::{isa, Isa};
use crate::kernels::cpu::float_dots::dot_single;

/// tinyBLAS order over `x.len()` values (x86: 16 lanes, chunks of 16; aarch64: 4 and 4); a
/// last partial chunk counts as zero-padded (lanes past the end keep their sum).
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
    #[cfg(not(target_arch = "aarch64"))]
    return tiled_scalar::<16>(x, y, reduce16);
    #[cfg(target_arch = "aarch64")]
    tiled_scalar::<4>(x, y, |a| hsum4(*a))
}

/// The tinyBLAS order on `L` lanes (x86: 16, aarch64: 4) in scalar code: lane l takes the
/// products l, l + L, …, then `reduce`.
#[inline(always)]
fn tiled_scalar<const L: usize>(x: &[f16], y: &[f32], reduce: impl Fn(&[f32; L]) -> f32) -> f32 {
    let mut acc = [0f32; L];
    for (xc, yc) in x.chunks(L).zip(y.chunks(L)) {
        for (l, s) in acc.iter_mut().enumerate().take(xc.len()) {
            *s = xc[l].to_f32().mul_add(yc[l], *s);
        }
    }
    reduce(&acc)
}

/// `ggml_vec_dot_f16` order over `n >= x.len()` values, those past `x.len()` zero (x86: 4×16
/// lanes over steps of 64, folded (a0+a2)+(a1+a3), tree sum, the `n % 64` tail added in f64;
/// aarch64: 4×4 lanes over steps of 16, the same fold, `vaddvq_f32`, the `n % 16` tail).
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
/// block, values at and past `y.len()` zero. Blocks are whole 64-steps (and 16-steps).
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

/// One x86 instruction set's registers for ggml's f16 dots: 16 lanes (tinyBLAS's chunks) and
/// 4×16 lanes (`ggml_vec_dot_f16`'s 64-steps), each lane taking one fma per step. The dots
/// below are written once over these; each instruction set's module instantiates them inside
/// its feature-enabled functions (the NEON orders differ: `neon_dots`).
#[cfg(target_arch = "x86_64")]
trait Lanes {
    type Acc16: Copy;
    type Acc64: Copy;
    unsafe fn zero16() -> Self::Acc16;
    unsafe fn zero64() -> Self::Acc64;
    /// Lanes 0..16 at `x`, `y` into `acc`.
    unsafe fn step16(acc: &mut Self::Acc16, x: *const f16, y: *const f32);
    /// One 64-step: lanes 16j..16j+16 of accumulator j.
    unsafe fn step64(acc: &mut Self::Acc64, x: *const f16, y: *const f32);
    unsafe fn lanes16(acc: &Self::Acc16) -> [f32; 16];
    /// The four accumulators folded (a0+a2)+(a1+a3), then the 16-lane tree sum.
    unsafe fn fold64(acc: &Self::Acc64) -> f32;
}

/// `dot_f16_tiled` on `L`'s registers.
#[inline(always)]
#[cfg(target_arch = "x86_64")]
unsafe fn tiled_on<L: Lanes>(x: &[f16], y: &[f32]) -> f32 {
    let n = x.len();
    let full = n & !15;
    let mut acc = L::zero16();
    let mut i = 0;
    while i < full {
        L::step16(&mut acc, x.as_ptr().add(i), y.as_ptr().add(i));
        i += 16;
    }
    let mut a = L::lanes16(&acc);
    for (l, s) in a.iter_mut().enumerate().take(n - full) {
        *s = x[full + l].to_f32().mul_add(y[full + l], *s);
    }
    reduce16(&a)
}

/// The zero-padded copies of a 64-step that runs past the data (`len` values, `at(t)` value t).
#[inline(always)]
#[cfg(target_arch = "x86_64")]
fn padded64(base: usize, len: usize, at: impl Fn(usize) -> (f16, f32)) -> ([f16; 64], [f32; 64]) {
    let mut xb = [f16::ZERO; 64];
    let mut yb = [0f32; 64];
    for t in 0..64 {
        if base + t < len {
            (xb[t], yb[t]) = at(base + t);
        }
    }
    (xb, yb)
}

/// `dot_f16_single` on `L`'s registers.
#[inline(always)]
#[cfg(target_arch = "x86_64")]
unsafe fn single_on<L: Lanes>(x: &[f16], y: &[f32], n: usize) -> f32 {
    let len = x.len();
    let np = n & !63;
    let mut acc = L::zero64();
    let mut base = 0;
    // Whole 64-steps inside the data.
    while base + 64 <= np.min(len) {
        L::step64(&mut acc, x.as_ptr().add(base), y.as_ptr().add(base));
        base += 64;
    }
    // A step that runs past the data: zero-padded copies.
    while base < np {
        let (xb, yb) = padded64(base, len, |i| (x[i], y[i]));
        L::step64(&mut acc, xb.as_ptr(), yb.as_ptr());
        base += 64;
    }
    let mut sum = L::fold64(&acc) as f64;
    for i in np..n.min(len) {
        sum += (x[i].to_f32() * y[i]) as f64;
    }
    sum as f32
}

/// `dot_f16_tiled_paged` on `L`'s registers.
#[inline(always)]
#[cfg(target_arch = "x86_64")]
unsafe fn tiled_paged_on<'a, L: Lanes>(run: &dyn Fn(usize) -> &'a [f16], y: &[f32]) -> f32 {
    let n = y.len();
    let full = n & !15;
    let mut acc = L::zero16();
    let mut i = 0;
    while i < full {
        let x = run(i / BLOCK_SIZE).as_ptr();
        let end = (i - i % BLOCK_SIZE + BLOCK_SIZE).min(full);
        while i < end {
            L::step16(&mut acc, x.add(i % BLOCK_SIZE), y.as_ptr().add(i));
            i += 16;
        }
    }
    let mut a = L::lanes16(&acc);
    if full < n {
        let x = run(full / BLOCK_SIZE);
        for (l, s) in a.iter_mut().enumerate().take(n - full) {
            *s = x[(full + l) % BLOCK_SIZE].to_f32().mul_add(y[full + l], *s);
        }
    }
    reduce16(&a)
}

/// `dot_f16_single_paged` on `L`'s registers.
#[inline(always)]
#[cfg(target_arch = "x86_64")]
unsafe fn single_paged_on<'a, L: Lanes>(run: &dyn Fn(usize) -> &'a [f16], y: &[f32], n: usize) -> f32 {
    let len = y.len();
    let mut acc = L::zero64();
    let mut base = 0;
    // Whole 64-steps inside the data, block by block.
    while base + 64 <= len {
        L::step64(&mut acc, run(base / BLOCK_SIZE).as_ptr().add(base % BLOCK_SIZE), y.as_ptr().add(base));
        base += 64;
    }
    // Steps that run past the data: zero-padded copies (a step lies within one block).
    while base < n {
        let x = if base < len { run(base / BLOCK_SIZE) } else { &[] };
        let (xb, yb) = padded64(base, len, |i| (x[i % BLOCK_SIZE], y[i]));
        L::step64(&mut acc, xb.as_ptr(), yb.as_ptr());
        base += 64;
    }
    L::fold64(&acc)
}

/// AVX2/FMA/F16C: 8-lane registers, two per 16 lanes.
#[cfg(target_arch = "x86_64")]
mod avx {
    use std::arch::x86_64::*;

    use half::f16;

    use super::Lanes;

    pub struct Avx;

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

    impl Lanes for Avx {
        type Acc16 = [__m256; 2];
        type Acc64 = [__m256; 8];

        #[inline(always)]
        unsafe fn zero16() -> Self::Acc16 {
            [_mm256_setzero_ps(); 2]
        }

        #[inline(always)]
        unsafe fn zero64() -> Self::Acc64 {
            [_mm256_setzero_ps(); 8]
        }

        #[inline(always)]
        unsafe fn step16(acc: &mut Self::Acc16, x: *const f16, y: *const f32) {
            for (h, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(load_f16(x.add(8 * h)), _mm256_loadu_ps(y.add(8 * h)), *a);
            }
        }

        /// Accumulator j is vectors 2j (lanes 16j..16j+8) and 2j+1.
        #[inline(always)]
        unsafe fn step64(acc: &mut Self::Acc64, x: *const f16, y: *const f32) {
            for (v, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(load_f16(x.add(8 * v)), _mm256_loadu_ps(y.add(8 * v)), *a);
            }
        }

        #[inline(always)]
        unsafe fn lanes16(acc: &Self::Acc16) -> [f32; 16] {
            store16(acc[0], acc[1])
        }

        #[inline(always)]
        unsafe fn fold64(acc: &Self::Acc64) -> f32 {
            let f_lo = _mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6]));
            let f_hi = _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7]));
            super::reduce16(&store16(f_lo, f_hi))
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn tiled(x: &[f16], y: &[f32]) -> f32 {
        super::tiled_on::<Avx>(x, y)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn single(x: &[f16], y: &[f32], n: usize) -> f32 {
        super::single_on::<Avx>(x, y, n)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn tiled_paged<'a>(run: &dyn Fn(usize) -> &'a [f16], y: &[f32]) -> f32 {
        super::tiled_paged_on::<Avx>(run, y)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn single_paged<'a>(run: &dyn Fn(usize) -> &'a [f16], y: &[f32], n: usize) -> f32 {
        super::single_paged_on::<Avx>(run, y, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The build's lanes: tinyBLAS's per output, and `ggml_vec_dot_f16`'s per accumulator
    /// (four accumulators per step); `reduce`: its horizontal sum of them.
    #[cfg(not(target_arch = "aarch64"))]
    const LANES: usize = 16;
    #[cfg(target_arch = "aarch64")]
    const LANES: usize = 4;

    fn reduce(a: &[f32; LANES]) -> f32 {
        #[cfg(not(target_arch = "aarch64"))]
        return reduce16(a);
        #[cfg(target_arch = "aarch64")]
        hsum4(*a)
    }

    fn reference_tiled(x: &[f16], y: &[f32]) -> f32 {
        let mut acc = [0f32; LANES];
        for base in (0..x.len()).step_by(LANES) {
            for l in 0..LANES {
                let (a, b) =
                    if base + l < x.len() { (x[base + l].to_f32(), y[base + l]) } else { (0.0, 0.0) };
                acc[l] = a.mul_add(b, acc[l]);
            }
        }
        reduce(&acc)
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
                let np = total / (4 * LANES) * (4 * LANES);
                let mut acc = [[0f32; LANES]; 4];
                for base in (0..np).step_by(4 * LANES) {
                    for j in 0..4 {
                        for l in 0..LANES {
                            let i = base + LANES * j + l;
                            acc[j][l] = xv(i).mul_add(yv(i), acc[j][l]);
                        }
                    }
                }
                let f: [f32; LANES] =
                    std::array::from_fn(|l| (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]));
                let mut sum = reduce(&f) as f64;
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
