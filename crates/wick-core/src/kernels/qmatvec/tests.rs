//! The host twin (the GPU kernel's own arithmetic) against the exact path's quantizers and row
//! dots: activations bit for bit, products within the float-order tolerance.

use candle_core::quantized::GgmlDType;

use super::{twin, Kernel::Tiles};
use crate::kernels::cpu::dot_checks::{lcg, random_blocks};
use crate::kernels::cpu::k_quants::{dot_q4k, dot_q5k, dot_q6k};
use crate::kernels::cpu::q8::{quantize_q8, quantize_q8k};
use crate::kernels::cpu::quants::{dot_q4_0, dot_q4_1, dot_q5_0, dot_q5_1, dot_q8_0};

const TYPES: [GgmlDType; 8] = [
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q5_1,
    GgmlDType::Q8_0,
    GgmlDType::Q4K,
    GgmlDType::Q5K,
    GgmlDType::Q6K,
];

/// Where each type keeps its f16 scales (random bytes elsewhere are valid quants).
fn scale_offsets(dtype: GgmlDType) -> &'static [usize] {
    match dtype {
        GgmlDType::Q4_1 | GgmlDType::Q5_1 | GgmlDType::Q4K | GgmlDType::Q5K => &[0, 2],
        GgmlDType::Q6K => &[208],
        _ => &[0],
    }
}

fn random_rows(dtype: GgmlDType, n: usize, k: usize, seed: u32) -> Vec<u8> {
    random_blocks(&mut lcg(seed), dtype.type_size(), scale_offsets(dtype), n * k / dtype.block_size())
}

/// Activations spanning magnitudes (tiny blocks whose scales are f16 subnormals, large ones),
/// with exact halves after scaling (ties) and equal opposite extremes in some blocks.
fn activations(len: usize, seed: u32) -> Vec<f32> {
    let mut r = lcg(seed);
    let mut x: Vec<f32> = (0..len).map(|_| (r() as f32 / (1 << 24) as f32) - 0.5).collect();
    for (b, blk) in x.chunks_mut(32).enumerate() {
        match b % 5 {
            // max 127 → multiplier 1: the .5 values are ties.
            1 => {
                for (i, v) in blk.iter_mut().enumerate() {
                    *v = (i as f32 - 15.5) * if i % 2 == 0 { 1.0 } else { -1.0 };
                }
                blk[0] = 127.0;
                blk[1] = -127.0;
            }
            2 => blk.iter_mut().for_each(|v| *v *= 1e-6),
            3 => blk.iter_mut().for_each(|v| *v *= 3e3),
            4 => blk.iter_mut().for_each(|v| *v = 0.0),
            _ => {}
        }
    }
    x
}

fn f32_at(b: &[u8], at: usize) -> f32 {
    f32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

#[test]
fn activations_round_as_the_exact_path_rounds_them() {
    for k in [256, 2048] {
        let x = activations(k, k as u32);
        let a32 = twin::quantize(GgmlDType::Q4_1, &x, 1, k).unwrap();
        for (i, (blk, want)) in a32.chunks_exact(40).zip(quantize_q8(&x)).enumerate() {
            assert_eq!(f32_at(blk, 0).to_bits(), want.d.to_bits(), "q8 block {i}: d");
            assert_eq!(f32_at(blk, 4).to_bits(), want.s.to_bits(), "q8 block {i}: s");
            let qs: Vec<i8> = blk[8..40].iter().map(|&b| b as i8).collect();
            assert_eq!(qs, want.qs, "q8 block {i}: quants");
        }
        let a256 = twin::quantize(GgmlDType::Q6K, &x, 1, k).unwrap();
        for (i, (blk, want)) in a256.chunks_exact(292).zip(quantize_q8k(&x)).enumerate() {
            assert_eq!(f32_at(blk, 0).to_bits(), want.d.to_bits(), "q8_K block {i}: d");
            let sums: Vec<i32> =
                (0..8).map(|j| i32::from_le_bytes(blk[4 + 4 * j..8 + 4 * j].try_into().unwrap())).collect();
            assert_eq!(sums, want.sums, "q8_K block {i}: sums");
            let qs: Vec<i8> = blk[36..292].iter().map(|&b| b as i8).collect();
            assert_eq!(qs, want.qs, "q8_K block {i}: quants");
        }
    }
}

/// The exact path's row dot of `row` with `x` for `dtype` (x86 and portable orders).
fn exact_dot(dtype: GgmlDType, row: &[u8], x: &[f32]) -> f32 {
    match dtype {
        GgmlDType::Q4_0 => dot_q4_0(row, &quantize_q8(x)),
        GgmlDType::Q4_1 => dot_q4_1(row, &quantize_q8(x)),
        GgmlDType::Q5_0 => dot_q5_0(row, &quantize_q8(x)),
        GgmlDType::Q5_1 => dot_q5_1(row, &quantize_q8(x)),
        GgmlDType::Q8_0 => dot_q8_0(row, &quantize_q8(x)),
        GgmlDType::Q4K => dot_q4k(row, &quantize_q8k(x), false),
        GgmlDType::Q5K => dot_q5k(row, &quantize_q8k(x)),
        GgmlDType::Q6K => dot_q6k(row, &quantize_q8k(x)),
        _ => unreachable!(),
    }
}

/// Largest difference from the exact path over the product, relative to the largest
/// Σ|term| of a row (the scale float reordering errs on): integer dots are exact, so only
/// the order of the f32 sums over blocks may differ.
const REL_TOL: f64 = 1e-6;

#[test]
fn products_agree_with_the_exact_path_for_every_type() {
    let mut worst = vec![];
    for dtype in TYPES {
        let block = dtype.block_size();
        // Whole and partial lane sweeps: 3 and 9 units (32-value types), 3 and 24 blocks.
        let ks: &[usize] = if block == 256 { &[256, 768, 2048, 6144] } else { &[96, 288, 1024, 2048] };
        let mut err = 0f64;
        for &k in ks {
            let n = 37;
            let w = random_rows(dtype, n, k, k as u32 + 3);
            let row_bytes = k / block * dtype.type_size();
            for m in [1, 3, 8] {
                let x = activations(m * k, (m * k) as u32);
                let y = twin::matvec(dtype, &w, n, k, &x, m).unwrap();
                for v in 0..m {
                    let xv = &x[v * k..(v + 1) * k];
                    for r in 0..n {
                        let row = &w[r * row_bytes..(r + 1) * row_bytes];
                        let want = exact_dot(dtype, row, xv);
                        let got = y[v * n + r];
                        let scale = terms_scale(dtype, row, xv).max(1e-30);
                        let e = (got as f64 - want as f64).abs() / scale;
                        assert!(
                            e <= REL_TOL,
                            "{dtype:?} k={k} m={m} row {r} vec {v}: {got} vs {want} (rel {e:.2e})"
                        );
                        err = err.max(e);
                    }
                }
            }
        }
        worst.push(format!("{dtype:?} {err:.1e}"));
    }
    eprintln!("qmatvec twin vs exact path, worst relative error: {}", worst.join(", "));
}

/// Σ|w·x| of a row, from candle's dequantized weights: the magnitude its sums carry.
fn terms_scale(dtype: GgmlDType, row: &[u8], x: &[f32]) -> f64 {
    let k = x.len();
    let t = candle_core::quantized::QTensor::new(
        candle_core::quantized::QStorage::from_data(
            std::borrow::Cow::Borrowed(row),
            &candle_core::Device::Cpu,
            dtype,
        )
        .unwrap(),
        (k,),
    )
    .unwrap();
    let wf: Vec<f32> = t.dequantize(&candle_core::Device::Cpu).unwrap().to_vec1().unwrap();
    wf.iter().zip(x).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum()
}

/// Each activation row's result is the same alone or among others, in the first chunk of
/// eight or a later, partial one (bit for bit).
#[test]
fn a_row_gets_the_same_product_alone_and_among_others() {
    for dtype in [GgmlDType::Q4_0, GgmlDType::Q4K, GgmlDType::Q6K] {
        let (n, k, m) = (19, 1024, 19);
        let w = random_rows(dtype, n, k, 11);
        let x = activations(m * k, 5);
        let all = twin::matvec(dtype, &w, n, k, &x, m).unwrap();
        for v in [0, 5, 7, 8, 18] {
            let alone = twin::matvec(dtype, &w, n, k, &x[v * k..(v + 1) * k], 1).unwrap();
            let among: Vec<u32> = all[v * n..(v + 1) * n].iter().map(|f| f.to_bits()).collect();
            assert_eq!(alone.iter().map(|f| f.to_bits()).collect::<Vec<_>>(), among, "{dtype:?} row {v}");
        }
    }
}

#[test]
fn bad_shapes_are_refused() {
    let w = random_rows(GgmlDType::Q8_0, 4, 64, 1);
    let x = vec![0.5f32; 9 * 64];
    assert!(twin::matvec(GgmlDType::Q8_0, &w, 5, 64, &x[..64], 1).is_err(), "weights too short");
    assert!(twin::matvec(GgmlDType::Q2K, &w, 1, 256, &x[..256], 1).is_err(), "no kernel for Q2_K");
    assert!(twin::quantize(GgmlDType::Q8_0, &x[..40], 1, 40).is_err(), "not whole blocks");
    // Through the op: a bad width is an error, no rows an empty product.
    let q = std::sync::Arc::new(
        candle_core::quantized::QTensor::quantize(
            &candle_core::Tensor::ones((4, 64), candle_core::DType::F32, &candle_core::Device::Cpu).unwrap(),
            GgmlDType::Q8_0,
        )
        .unwrap(),
    );
    let cpu = candle_core::Device::Cpu;
    assert!(super::qmatvec(
        &q,
        &candle_core::Tensor::zeros((2, 32), candle_core::DType::F32, &cpu).unwrap(),
        Tiles
    )
    .is_err());
    let none = super::qmatvec(
        &q,
        &candle_core::Tensor::zeros((0, 64), candle_core::DType::F32, &cpu).unwrap(),
        Tiles,
    )
    .unwrap();
    assert_eq!(none.dims(), &[0, 4]);
}
