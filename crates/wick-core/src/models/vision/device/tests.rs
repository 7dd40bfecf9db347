//! Each device-path op against the exact kernel it stands for, on candle's CPU device: equal
//! where the rounding steps are the same and only the summation order differs, bounds measured.

use candle_core::{Device, Tensor};

use super::*;
use crate::kernels::cpu::vit;
use crate::models::vision::lfm2_vl;

/// Deterministic values in [lo, hi).
fn values(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            lo + (hi - lo) * ((s >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

fn host(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1::<f32>().unwrap()
}

/// Largest |a − b| over the largest |a|.
fn rel(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let d = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    d / a.iter().map(|x| x.abs()).fold(0f32, f32::max)
}

#[test]
fn layer_norm_follows_ggml_norm() {
    let dev = Device::Cpu;
    for (rows, n) in [(5, 64), (3, 1000), (2, 37)] {
        let x = values(rows * n, n as u64, -2.0, 5.0);
        let (w, b) = (values(n, 1, 0.5, 1.5), values(n, 2, -0.1, 0.1));
        let want = vit::layer_norm(&x, &w, &b, 1e-6);
        let ln = LayerNorm {
            w: Tensor::new(w.as_slice(), &dev).unwrap(),
            b: Tensor::new(b.as_slice(), &dev).unwrap(),
            eps: 1e-6,
        };
        let got = host(&ln.forward(&Tensor::from_vec(x, (rows, n), &dev).unwrap()).unwrap());
        // The variance's f32 squares are summed in f64 in another order: an ulp at most.
        assert!(rel(&want, &got) < 1e-6, "{rows}×{n}: {:e}", rel(&want, &got));
    }
}

#[test]
fn gelu_rounds_as_the_f16_table() {
    let mut x = values(20_000, 3, -12.0, 12.0);
    x.extend([-10.0, 10.0, -10.5, 10.5, 0.0, -0.0, 1e-4]);
    let mut want = x.clone();
    vit::gelu(&mut want);
    let got = host(&gelu(&Tensor::new(x.as_slice(), &Device::Cpu).unwrap()).unwrap());
    // The table's entries and candle's GELU round the same f16 input alike, but for inner
    // products whose f32 rounding (an FMA in ggml's table) crosses an f16 half-way point.
    let moved = want.iter().zip(&got).filter(|(a, b)| a != b).count();
    assert!(moved * 1000 <= x.len(), "{moved} of {} differ", x.len());
    assert!(rel(&want, &got) < 1e-3, "{:e}", rel(&want, &got));
}

#[test]
fn attention_follows_the_exact_kernel() {
    let (n, heads, hd) = (37, 4, 16);
    let d = heads * hd;
    let (q, k, v) = (values(n * d, 4, -1.0, 1.0), values(n * d, 5, -1.0, 1.0), values(n * d, 6, -1.0, 1.0));
    let scale = 1.0 / (hd as f32).sqrt();
    let want = vit::attention(&q, &k, &v, n, heads, scale);
    let t = |x: &[f32]| Tensor::from_slice(x, (n, d), &Device::Cpu).unwrap();
    let got = host(&attention(&t(&q), &t(&k), &t(&v), heads, scale).unwrap());
    assert!(rel(&want, &got) < 1e-5, "{:e}", rel(&want, &got));
}

#[test]
fn patch_embedding_is_ggml_conv_2d() {
    let (w, h, p, d) = (48, 32, 16, 8);
    let pixels = values(3 * w * h, 7, -1.0, 1.0);
    let kernel = values(d * 3 * p * p, 8, -0.05, 0.05);
    let want = vit::patch_embed(&pixels, w, h, p, &kernel);
    let dev = Device::Cpu;
    let k = Tensor::from_slice(&kernel, (d, 3 * p * p), &dev).unwrap();
    let k = k.to_dtype(DType::F16).unwrap().to_dtype(DType::F32).unwrap();
    let got = host(&patch_embed(&Tensor::new(pixels.as_slice(), &dev).unwrap(), w, h, p, &k).unwrap());
    assert!(rel(&want, &got) < 1e-6, "{:e}", rel(&want, &got));
}

#[test]
fn unshuffle_is_the_exact_permutation() {
    for (nx, ny, f) in [(4, 2, 2), (5, 3, 2), (7, 7, 3)] {
        let d = 3;
        let x = values(nx * ny * d, 9, -1.0, 1.0);
        let (want, n) = lfm2_vl::unshuffle(&x, nx, ny, f);
        let got = unshuffle(&Tensor::from_slice(&x, (nx * ny, d), &Device::Cpu).unwrap(), nx, ny, f).unwrap();
        assert_eq!(got.dims2().unwrap(), (n, f * f * d));
        assert_eq!(host(&got), want, "{nx}×{ny} by {f}");
    }
}
