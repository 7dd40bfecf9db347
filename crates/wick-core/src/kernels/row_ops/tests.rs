//! The row ops' host twin against the exact path's ops, bit for bit.

use candle_core::{Device, Tensor};

use super::*;
use crate::kernels::cpu::dot_checks::lcg;
use crate::kernels::cpu::elementwise;
use crate::kernels::cpu::expf::{ggml_expf, ExpVariant};

/// Values in ±`scale`, some rows' entries three decades larger or smaller.
fn values(len: usize, scale: f32, seed: u32) -> Vec<f32> {
    let mut r = lcg(seed);
    (0..len)
        .map(|i| {
            let v = (r() as f32 / (1 << 24) as f32 - 0.5) * 2.0 * scale;
            match i % 13 {
                0 => v * 1e3,
                5 => v * 1e-3,
                _ => v,
            }
        })
        .collect()
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.flatten_all().unwrap().to_vec1::<f32>().unwrap().iter().map(|v| v.to_bits()).collect()
}

#[test]
fn the_norm_equals_the_exact_paths_norm_bit_for_bit() {
    // Q/K head norms, LFM2-1.2B's width, a width the block's threads do not divide.
    for (rows, n, seed) in [(400, 64, 1), (40, 2048, 2), (30, 300, 3), (4, 8192, 4)] {
        let x = Tensor::from_vec(values(rows * n, 2.0, seed), (rows, n), &Device::Cpu).unwrap();
        let w = Tensor::from_vec(values(n, 1.0, seed + 10), n, &Device::Cpu).unwrap();
        let exact = elementwise::rms_norm(&x, &w, 1e-5).unwrap();
        assert_eq!(bits(&rms_norm(&x, &w, 1e-5).unwrap()), bits(&exact), "rows of {n}");
    }
}

#[test]
fn the_add_and_norm_equal_the_add_then_the_norm() {
    let (rows, n) = (5, 300);
    let x = Tensor::from_vec(values(rows * n, 2.0, 7), (rows, n), &Device::Cpu).unwrap();
    let y = Tensor::from_vec(values(rows * n, 2.0, 8), (rows, n), &Device::Cpu).unwrap();
    let w = Tensor::from_vec(values(n, 1.0, 9), n, &Device::Cpu).unwrap();
    let (h, normed) = add_rms_norm(&x, &y, &w, 1e-6).unwrap();
    let sum = (&x + &y).unwrap();
    assert_eq!(bits(&h), bits(&sum));
    assert_eq!(bits(&normed), bits(&rms_norm(&sum, &w, 1e-6).unwrap()));
    assert!(add_rms_norm(&x, &y.narrow(0, 0, 4).unwrap(), &w, 1e-6).is_err(), "mismatched shapes");
}

#[test]
fn the_heads_norm_and_rope_equal_the_exact_paths_norm_then_rope() {
    let (n, heads, hd) = (9, 5, 64);
    let x = Tensor::from_vec(values(n * heads * hd, 3.0, 21), (n, heads, hd), &Device::Cpu).unwrap();
    let w = Tensor::from_vec(values(hd, 1.0, 22), hd, &Device::Cpu).unwrap();
    // Angles as the tables hold them: large positions, small ones.
    let angles = values(n * hd / 2, 900.0, 23);
    let table = |f: fn(f32) -> f32| {
        Tensor::from_vec(angles.iter().map(|&a| f(a)).collect::<Vec<f32>>(), (n, 1, hd / 2), &Device::Cpu)
            .unwrap()
    };
    let (cos, sin) = (table(f32::cos), table(f32::sin));
    // ggml's aarch64 build rotates interleaved pairs in a vector loop of its own rounding.
    let styles: &[bool] = if cfg!(target_arch = "aarch64") { &[false] } else { &[false, true] };
    for &interleaved in styles {
        let normed = elementwise::rms_norm(&x, &w, 1e-6).unwrap();
        let want = elementwise::rope(&normed, &cos, &sin, interleaved).unwrap();
        let got = norm_rope(&x, Some((&w, 1e-6)), &cos, &sin, interleaved).unwrap();
        assert_eq!(bits(&got), bits(&want), "normed, interleaved {interleaved}");
        let want = elementwise::rope(&x, &cos, &sin, interleaved).unwrap();
        let got = norm_rope(&x, None, &cos, &sin, interleaved).unwrap();
        assert_eq!(bits(&got), bits(&want), "RoPE alone, interleaved {interleaved}");
    }
    assert!(norm_rope(&x, None, &cos.narrow(0, 0, 8).unwrap(), &sin, false).is_err(), "short tables");
}

#[test]
fn swiglu_takes_ggmls_expf_and_reads_strided_halves_in_place() {
    // Gates across expf's ranges: |n| > 126 and > 192 take their own branches.
    let (rows, n) = (7, 96);
    let mut gu = values(rows * 2 * n, 12.0, 11);
    gu[..6].copy_from_slice(&[-100.0, 95.0, 0.0, -0.0, -88.5, 130.0]);
    let both = Tensor::from_vec(gu.clone(), (rows, 2 * n), &Device::Cpu).unwrap();
    let (g, u) = (both.narrow(1, 0, n).unwrap(), both.narrow(1, n, n).unwrap());
    let got = swiglu(&g, &u).unwrap();
    let want: Vec<u32> = (0..rows * n)
        .map(|e| {
            let (x, m) = (gu[e / n * 2 * n + e % n], gu[e / n * 2 * n + n + e % n]);
            ((x / (1.0 + ggml_expf(0.0 - x, ExpVariant::Avx2))) * m).to_bits()
        })
        .collect();
    assert_eq!(bits(&got), want);
    let contiguous = swiglu(&g.contiguous().unwrap(), &u.contiguous().unwrap()).unwrap();
    assert_eq!(bits(&contiguous), want);
    assert!(swiglu(&g, &u.narrow(0, 0, 3).unwrap()).is_err(), "mismatched shapes");
}
