//! Shared checks of the row-dot tests: random blocks against the scalar reference and the
//! dequantized f64 product.

use half::f16;

#[cfg(target_arch = "x86_64")]
use super::feats::has_avx2_fma;

pub fn lcg(seed: u32) -> impl FnMut() -> u32 {
    let mut s = seed;
    move || {
        s = s.wrapping_mul(1664525).wrapping_add(1013904223);
        s >> 8
    }
}

/// `count` blocks of `size` random bytes (every bit pattern is a valid quant) with an f16
/// scale of 1e-3..0.1 at each offset of `scales`.
pub fn random_blocks(r: &mut impl FnMut() -> u32, size: usize, scales: &[usize], count: usize) -> Vec<u8> {
    let mut w = Vec::with_capacity(size * count);
    for _ in 0..count {
        let mut blk: Vec<u8> = (0..size).map(|_| r() as u8).collect();
        for &o in scales {
            let d = f16::from_f32((r() % 1000) as f32 * 1e-4 + 1e-3);
            blk[o..o + 2].copy_from_slice(&d.to_le_bytes());
        }
        w.extend_from_slice(&blk);
    }
    w
}

/// A row dot: weight blocks against activation blocks.
pub type Dot<A> = fn(&[u8], &[A]) -> f32;
pub(crate) use super::matmul::Dot4;

/// Random blocks of `size` bytes with f16 scales written at `scales` (offsets), and the
/// activations; checks SIMD (1 and 4 rows) against `reference` bit for bit and both
/// against the f64 dot of `deq(block)` within 1% of Σ|w·x|.
#[allow(clippy::too_many_arguments)] // a test table row: each argument names one property
pub fn check_block_type<A>(
    size: usize,
    scales: &[usize],
    per_block: usize,
    quantize: fn(&[f32]) -> Vec<A>,
    deq: fn(&[u8]) -> Vec<f32>,
    dot: Dot<A>,
    reference: Dot<A>,
    #[allow(unused_variables)] dot4: Option<Dot4<A>>,
) {
    let mut r = lcg(7);
    let k = 512;
    for _ in 0..20 {
        let w = random_blocks(&mut r, size, scales, k / per_block);
        let x: Vec<f32> = (0..k).map(|_| (r() as f32 / (1 << 24) as f32) - 0.5).collect();
        let a = quantize(&x);
        let fast = dot(&w, &a);
        let slow = reference(&w, &a);
        assert_eq!(fast.to_bits(), slow.to_bits(), "{fast} vs {slow}");
        let deqv: Vec<f32> = w.chunks_exact(size).flat_map(deq).collect();
        let exact: f64 = deqv.iter().zip(&x).map(|(&p, &q)| p as f64 * q as f64).sum();
        let norm: f64 = deqv.iter().zip(&x).map(|(&p, &q)| (p as f64 * q as f64).abs()).sum();
        assert!(((fast as f64) - exact).abs() <= 1e-2 * norm, "{fast} vs {exact} (Σ|·| {norm})");
        #[cfg(target_arch = "x86_64")]
        if let (true, Some(d4)) = (has_avx2_fma(), dot4) {
            // SAFETY: AVX2+FMA checked by the `if let`; the four activations match the row's length.
            let four = unsafe { d4(&w, [&a, &a, &a, &a]) };
            assert!(four.iter().all(|v| v.to_bits() == slow.to_bits()));
        }
    }
}
