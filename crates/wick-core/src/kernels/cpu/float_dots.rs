//! Dots of f16 and bf16 values in the orders llama.cpp's x86 CPU backend sums them:
//! - `ggml_vec_dot_f16` (one token): 4 accumulators of 16 lanes over steps of 64, folded
//!   (a0+a2)+(a1+a3), a 16-lane tree sum, the tail (n % 64) added in f64;
//! - llamafile's tinyBLAS (several tokens): 16 lanes over chunks of 16, the 16-lane tree sum;
//! - BF16: the same pair with AVX512-BF16 `vdpbf16ps` steps (`dot_bf16_single`,
//!   `dot_bf16_tiled`), the AVX2 lane sums in `x86::bf16`.

use super::blocks::reduce16;
#[cfg(target_arch = "x86_64")]
use super::feats::has_avx2_fma;
#[cfg(target_arch = "x86_64")]
use super::x86::bf16 as simd;

/// `ggml_vec_dot_f16` (AVX-512): `x(i)·y(i)` for i < n; values are f16-exact f32s.
#[inline(always)]
pub fn dot_single(n: usize, x: impl Fn(usize) -> f32, y: impl Fn(usize) -> f32) -> f32 {
    let mut sum = dot_head64(n, &x, &y) as f64;
    for i in n & !63..n {
        sum += (x(i) * y(i)) as f64;
    }
    sum as f32
}

/// The first `n & !63` terms as ggml's AVX-512 vector dots sum them: 4 accumulators of 16
/// lanes over steps of 64, folded (a0+a2)+(a1+a3), the 16-lane tree sum. The f16 and f32 dots
/// differ only in how they add the tail.
#[inline(always)]
pub fn dot_head64(n: usize, x: impl Fn(usize) -> f32, y: impl Fn(usize) -> f32) -> f32 {
    let mut acc = [[0f32; 16]; 4];
    for base in (0..n & !63).step_by(64) {
        for (j, a) in acc.iter_mut().enumerate() {
            for (l, s) in a.iter_mut().enumerate() {
                let i = base + 16 * j + l;
                *s = x(i).mul_add(y(i), *s);
            }
        }
    }
    let mut folded = [0f32; 16];
    for l in 0..16 {
        folded[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    }
    reduce16(&folded)
}

/// tinyBLAS `gemm_bloc` for one output: 16 lanes over chunks of 16 (n % 16 == 0).
#[inline(always)]
pub fn dot_tiled(n: usize, x: impl Fn(usize) -> f32, y: impl Fn(usize) -> f32) -> f32 {
    let mut acc = [0f32; 16];
    for base in (0..n).step_by(16) {
        for (l, s) in acc.iter_mut().enumerate() {
            *s = x(base + l).mul_add(y(base + l), *s);
        }
    }
    reduce16(&acc)
}

/// f32 → bf16 bits, rounding to nearest even (ggml's `vec_dot_type` conversion for BF16
/// weights; NaN stays a quiet NaN).
pub fn to_bf16(v: f32) -> u16 {
    let u = v.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    ((u + 0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

#[inline(always)]
fn bf16_f32(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// One lane step of AVX512-BF16's `vdpbf16ps` (the zen4/sapphirerapids builds ggml picks on
/// CPUs that have it): both products of a bf16 pair are exact in f32 and are added one after
/// the other, the odd element's first.
#[inline(always)]
fn dp_pair(acc: f32, w: &[u8], x: &[u16], i: usize) -> f32 {
    let odd = bf16_f32(u16::from_le_bytes([w[2 * i + 2], w[2 * i + 3]])) * bf16_f32(x[i + 1]);
    let even = bf16_f32(u16::from_le_bytes([w[2 * i], w[2 * i + 1]])) * bf16_f32(x[i]);
    (acc + odd) + even
}

/// `ggml_vec_dot_bf16` for one token: two 16-lane `vdpbf16ps` accumulators over steps of 64
/// (the first and second 32 values), each reduced by the 16-lane tree and summed in f64 with
/// the tail (k % 64) products.
pub fn dot_bf16_single(w: &[u8], x: &[u16]) -> f32 {
    let k = x.len();
    let np = k & !63;
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // Safety: AVX2 checked; `w` is the weight row of `k` bf16 values.
        let c = unsafe { simd::bf16_single_lanes(w, x) };
        let mut sum = reduce16(&c[0]) as f64;
        sum += reduce16(&c[1]) as f64;
        for i in np..k {
            sum += (bf16_f32(u16::from_le_bytes([w[2 * i], w[2 * i + 1]])) * bf16_f32(x[i])) as f64;
        }
        return sum as f32;
    }
    dot_bf16_single_ref(w, x)
}

fn dot_bf16_single_ref(w: &[u8], x: &[u16]) -> f32 {
    let k = x.len();
    let np = k & !63;
    let mut c = [[0f32; 16]; 2];
    for base in (0..np).step_by(64) {
        for (h, acc) in c.iter_mut().enumerate() {
            for (l, a) in acc.iter_mut().enumerate() {
                *a = dp_pair(*a, w, x, base + 32 * h + 2 * l);
            }
        }
    }
    let mut sum = reduce16(&c[0]) as f64;
    sum += reduce16(&c[1]) as f64;
    for i in np..k {
        sum += (bf16_f32(u16::from_le_bytes([w[2 * i], w[2 * i + 1]])) * bf16_f32(x[i])) as f64;
    }
    sum as f32
}

/// tinyBLAS for several tokens (k % 32 == 0): one 16-lane `vdpbf16ps` accumulator over chunks
/// of 32, then the 16-lane tree sum.
pub fn dot_bf16_tiled(w: &[u8], x: &[u16]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // Safety: AVX2 checked; k % 32 == 0 (the caller's `shapes_ok`).
        return reduce16(&unsafe { simd::bf16_tiled_lanes(w, x) });
    }
    dot_bf16_tiled_ref(w, x)
}

fn dot_bf16_tiled_ref(w: &[u8], x: &[u16]) -> f32 {
    let mut c = [0f32; 16];
    for base in (0..x.len()).step_by(32) {
        for (l, a) in c.iter_mut().enumerate() {
            *a = dp_pair(*a, w, x, base + 2 * l);
        }
    }
    reduce16(&c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cpu::dot_checks::lcg;

    #[test]
    fn bf16_matches_scalar_and_f32_reference() {
        let mut r = lcg(5);
        let mut f = move || (r() as f32 / (1 << 24) as f32) - 0.5;
        for k in [256, 320, 96] {
            let w: Vec<u16> = (0..k).map(|_| to_bf16(f())).collect();
            let wb: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
            let x: Vec<f32> = (0..k).map(|_| f()).collect();
            let xb: Vec<u16> = x.iter().map(|&v| to_bf16(v)).collect();
            let exact: f64 = w.iter().zip(&x).map(|(&p, &q)| bf16_f32(p) as f64 * q as f64).sum();
            let norm: f64 = w.iter().zip(&x).map(|(&p, &q)| (bf16_f32(p) as f64 * q as f64).abs()).sum();
            let single = dot_bf16_single(&wb, &xb);
            assert_eq!(single.to_bits(), dot_bf16_single_ref(&wb, &xb).to_bits());
            assert!(((single as f64) - exact).abs() <= 1e-2 * norm, "{single} vs {exact}");
            if k % 32 == 0 {
                let tiled = dot_bf16_tiled(&wb, &xb);
                assert_eq!(tiled.to_bits(), dot_bf16_tiled_ref(&wb, &xb).to_bits());
                assert!(((tiled as f64) - exact).abs() <= 1e-2 * norm, "{tiled} vs {exact}");
            }
        }
        // Round to nearest even, ties included.
        assert_eq!(to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
    }
}
