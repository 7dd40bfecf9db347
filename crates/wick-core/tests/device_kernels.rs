//! candle's quantized matmul kernels on the device `WICK_TEST_DEVICE` names (`cuda`), against
//! the CPU reference (the weight dequantized on the CPU, products summed in f64), for every
//! GGUF type the fixtures and the real models use and row counts on both sides of candle's
//! vector-kernel limit (8). Three ways of running one product:
//! - `candle`: `QMatMul::forward` as candle picks (fast MMVQ up to 8 rows, MMQ above);
//! - `f16 gemm`: the weight dequantized to f16 for a cuBLAS GEMM (`forward_via_f16`);
//! - `dmmv` (CUDA builds): candle's older kernels (`set_force_dmmv`);
//! - `mmq − cpu`: up to 8 rows, the product padded with zero rows to 9 (candle's MMQ instead of
//!   its MMVQ, `WICK_DEVICE_QMATMUL=mmq`) against candle's CPU kernels (on candle's CPU device
//!   some types' kernels change with the row count: those are listed).
//!
//! Wick's device path takes its own kernel by default (`kernels::qmatvec`, checked against its
//! host twin by the second test; `models::layers::QMatMulPath`; these are check knobs). All
//! three must agree within tolerance; the whole table is printed. This test
//! found candle's fast kernels returning garbage on an H100 when built for sm_80 alone (no
//! image for the GPU, the launch error unchecked; scripts/nvcc-multiarch.sh). Without
//! `WICK_TEST_DEVICE` it runs on candle's CPU device (where it checks the harness itself).

use candle_core::quantized::{GgmlDType, QMatMul, QStorage, QTensor};
use candle_core::{Device, Module, Tensor};
use wick_core::runtime::device::{DeviceChoice, Placement};

use common::device::values;

mod common;

/// Largest error allowed, relative to the product's largest magnitude: q8_1 activations
/// (MMVQ, MMQ) or f16 weights and activations (GEMM) round each term by ~2⁻⁸ at worst. On the
/// H100: candle 1.0e-2, f16 gemm 6.3e-4, dmmv 9.7e-7 at most (RESULTS.md, GPU section).
const REL_TOL: f32 = 2e-2;

fn device(test: &str) -> Option<Device> {
    let Ok(asked) = std::env::var("WICK_TEST_DEVICE") else { return Some(Device::Cpu) };
    let p = Placement::resolve(asked.parse::<DeviceChoice>().expect("WICK_TEST_DEVICE"), None);
    if p.exact() {
        common::skip(test, p.notice.as_deref().unwrap_or("WICK_TEST_DEVICE names the exact CPU path"));
        return None;
    }
    Some(p.device().clone())
}

/// max |got − want| / max |want|, and how many of `got` are not finite.
fn error(got: &[f32], want: &[f64]) -> (f32, usize) {
    let scale = want.iter().fold(0f64, |m, w| m.max(w.abs())).max(1e-30);
    let bad = got.iter().filter(|g| !g.is_finite()).count();
    let err = got.iter().zip(want).map(|(&g, &w)| ((g as f64 - w).abs() / scale) as f32).fold(0f32, f32::max);
    (err, bad)
}

struct Case {
    dtype: GgmlDType,
    k: usize,
    n: usize,
}

fn cases() -> Vec<Case> {
    use GgmlDType::*;
    let mut out = vec![];
    for dtype in [Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2K, Q3K, Q4K, Q5K, Q6K] {
        let ks: &[usize] = if dtype.block_size() == 256 { &[256, 2048] } else { &[64, 256, 2048] };
        for &k in ks {
            for n in [64, 200, 2048] {
                out.push(Case { dtype, k, n });
            }
        }
    }
    out
}

#[test]
fn quantized_matmuls_agree_with_the_cpu_reference() {
    let test = "quantized_matmuls_agree_with_the_cpu_reference";
    let Some(dev) = device(test) else { return };
    let mut failures = vec![];
    let mut table = vec![format!(
        "{:<6} {:>5} {:>5} {:>4} | {:>16} | {:>16} | {:>16} | {:>12} | {:>12}",
        "type", "k", "n", "m", "candle", "f16 gemm", "dmmv", "candle − cpu", "mmq − cpu"
    )];
    // Products candle's CPU kernels compute differently with padding rows below them.
    let mut cpu_row_dependent = vec![];
    // On candle's CPU device (the harness check) the small shapes do.
    let cases: Vec<Case> =
        cases().into_iter().filter(|c| !dev.is_cpu() || (c.k <= 256 && c.n <= 200)).collect();
    for (ci, c) in cases.iter().enumerate() {
        let w_cpu = Tensor::from_vec(values(c.n * c.k, ci as u64), (c.n, c.k), &Device::Cpu).unwrap();
        let q = QTensor::quantize(&w_cpu, c.dtype).unwrap();
        let wq = q.dequantize(&Device::Cpu).unwrap().to_vec2::<f32>().unwrap();
        let bytes = q.data().unwrap();
        let on_dev = || {
            let s = QStorage::from_data(bytes.clone(), &dev, c.dtype).unwrap();
            QMatMul::from_qtensor(QTensor::new(s, (c.n, c.k)).unwrap()).unwrap()
        };
        let mm = on_dev();
        let mm_cpu = QMatMul::from_qtensor(
            QTensor::new(QStorage::from_data(bytes.clone(), &Device::Cpu, c.dtype).unwrap(), (c.n, c.k))
                .unwrap(),
        )
        .unwrap();
        for m in [1usize, 2, 8, 9, 70, 300] {
            let x = values(m * c.k, 1000 + ci as u64 * 7 + m as u64);
            let want: Vec<f64> = (0..m)
                .flat_map(|i| {
                    let row = &x[i * c.k..(i + 1) * c.k];
                    wq.iter().map(move |w| row.iter().zip(w).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>())
                })
                .collect();
            let xt = Tensor::from_vec(x.clone(), (m, c.k), &dev).unwrap();
            let run = |y: Tensor| error(&y.flatten_all().unwrap().to_vec1::<f32>().unwrap(), &want);
            let fast_y = mm.forward(&xt).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let fast = error(&fast_y, &want);
            // Against candle's CPU kernels on the same q8 activations (the exact path's
            // quantization): how far the GPU's own activation rounding and sums move a product.
            let cpu_y =
                mm_cpu.forward(&Tensor::from_vec(x.clone(), (m, c.k), &Device::Cpu).unwrap()).unwrap();
            let cpu_y: Vec<f64> =
                cpu_y.flatten_all().unwrap().to_vec1::<f32>().unwrap().into_iter().map(f64::from).collect();
            let vs_cpu = error(&fast_y, &cpu_y).0;
            let mmq = (m <= 8).then(|| {
                let pad = Tensor::zeros((9 - m, c.k), xt.dtype(), &dev).unwrap();
                let y = mm.forward(&Tensor::cat(&[&xt, &pad], 0).unwrap()).unwrap().narrow(0, 0, m).unwrap();
                y.flatten_all().unwrap().to_vec1::<f32>().unwrap()
            });
            if let (Some(y), true) = (&mmq, dev.is_cpu()) {
                if y != &fast_y {
                    cpu_row_dependent.push(format!("{:?} k {} m {m}", c.dtype, c.k));
                }
            }
            let mmq_vs_cpu = mmq.map_or("-".into(), |y| format!("{:.1e}", error(&y, &cpu_y).0));
            let gemm = run(mm.forward_via_f16(&xt).unwrap());
            let dmmv = dmmv(&on_dev, &xt).map(run);
            let show = |(e, bad): (f32, usize)| match bad {
                0 => format!("{e:.1e}"),
                _ => format!("{e:.1e} {bad} NaN/inf"),
            };
            table.push(format!(
                "{:<6} {:>5} {:>5} {:>4} | {:>16} | {:>16} | {:>16} | {:>12.1e} | {:>12}",
                format!("{:?}", c.dtype),
                c.k,
                c.n,
                m,
                show(fast),
                show(gemm),
                dmmv.map_or("-".into(), show),
                vs_cpu,
                mmq_vs_cpu
            ));
            for (name, r) in [("candle", Some(fast)), ("f16 gemm", Some(gemm)), ("dmmv", dmmv)] {
                if let Some((e, bad)) = r.filter(|&(e, bad)| bad > 0 || e > REL_TOL) {
                    failures.push(format!(
                        "{:?} k {} n {} m {m}: {name} {}",
                        c.dtype,
                        c.k,
                        c.n,
                        show((e, bad))
                    ));
                }
            }
        }
    }
    eprintln!("{}", table.join("\n"));
    if !cpu_row_dependent.is_empty() {
        eprintln!("candle's CPU kernels give other bits with padding rows: {}", cpu_row_dependent.join(", "));
    }
    assert!(failures.is_empty(), "{} products off:\n{}", failures.len(), failures.join("\n"));
}

/// Wick's own kernels (`kernels::qmatvec`, the device path's default) on `WICK_TEST_DEVICE`
/// against their host twin, the same C arithmetic compiled for the CPU: equal to the bit for
/// every type they take, every row count (chunks of eight, the last partial; above eight rows
/// both the tensor-core tiles and the vector kernel) and shape. The
/// twin itself is checked against the exact path's row dots in the crate's unit tests. On
/// candle's CPU device the op runs the twin: this checks the op's plumbing there.
#[test]
fn wicks_quantized_kernel_equals_its_host_twin_bit_for_bit() {
    use wick_core::kernels::qmatvec;
    let test = "wicks_quantized_kernel_equals_its_host_twin_bit_for_bit";
    let Some(dev) = device(test) else { return };
    if !qmatvec::available(GgmlDType::Q8_0, &dev) || !qmatvec::available(GgmlDType::Q8_0, &Device::Cpu) {
        common::skip(test, "this build has no qmatvec kernel for the device, or no host twin");
        return;
    }
    use GgmlDType::*;
    let mut off = vec![];
    let mut checked = 0;
    for (ti, dtype) in [Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4K, Q5K, Q6K].into_iter().enumerate() {
        let ks: &[usize] = if dtype.block_size() == 256 { &[256, 768, 2048] } else { &[96, 2048] };
        for &k in ks {
            for n in [64, 200, 2048] {
                if dev.is_cpu() && n > 200 {
                    continue;
                }
                let seed = (ti * 7919 + k * 31 + n) as u64;
                let w = Tensor::from_vec(values(n * k, seed), (n, k), &Device::Cpu).unwrap();
                let q = QTensor::quantize(&w, dtype).unwrap();
                let bytes = q.data().unwrap().into_owned();
                let on_dev = std::sync::Arc::new(
                    QTensor::new(QStorage::from_data(bytes.clone().into(), &dev, dtype).unwrap(), (n, k))
                        .unwrap(),
                );
                // Up to 8 rows the vector kernel; above, the tiles, or the vector kernel asked.
                let runs = [1usize, 3, 8, 9, 70]
                    .into_iter()
                    .flat_map(|m| [(m, qmatvec::Kernel::Tiles), (m, qmatvec::Kernel::Vector)])
                    .filter(|&(m, kernel)| m > qmatvec::CHUNK || kernel == qmatvec::Kernel::Tiles);
                for (m, kernel) in runs {
                    let x = values(m * k, seed + 1 + m as u64);
                    let xt = Tensor::from_vec(x.clone(), (m, k), &dev).unwrap();
                    let got = qmatvec::qmatvec(&on_dev, &xt, kernel)
                        .unwrap()
                        .flatten_all()
                        .unwrap()
                        .to_vec1::<f32>()
                        .unwrap();
                    let want = qmatvec::twin::matvec(dtype, &bytes, n, k, &x, m).unwrap();
                    let diff = got.iter().zip(&want).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
                    checked += 1;
                    if diff > 0 {
                        let worst = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                        off.push(format!(
                            "{dtype:?} k {k} n {n} m {m} {kernel:?}: {diff} of {} differ, by up to {worst:e}",
                            got.len()
                        ));
                    }
                }
            }
        }
    }
    eprintln!("qmatvec on {dev:?} vs its host twin: {checked} products, {} off", off.len());
    assert!(off.is_empty(), "{}", off.join("\n"));
}

/// The product through candle's older CUDA kernels, when this build has CUDA and `dev` is a GPU.
#[allow(unused_variables)]
fn dmmv(make: &dyn Fn() -> QMatMul, x: &Tensor) -> Option<Tensor> {
    #[cfg(feature = "cuda")]
    if x.device().is_cuda() {
        candle_core::quantized::cuda::set_force_dmmv(true);
        let y = make().forward(x).ok();
        candle_core::quantized::cuda::set_force_dmmv(false);
        return y;
    }
    None
}

/// The short convolution's decode step in one op (`kernels::conv_step::fused`: the CUDA kernel
/// on a GPU, its loops on candle's CPU device) against the composed candle ops on the same
/// device: the outputs and next states equal to the bit, for LFM2's width 3 and others, one
/// sequence and a batch.
#[test]
fn the_fused_conv_step_equals_the_composed_ops_bit_for_bit() {
    use wick_core::kernels::conv_step;
    let test = "the_fused_conv_step_equals_the_composed_ops_bit_for_bit";
    let Some(dev) = device(test) else { return };
    if !conv_step::available(&dev) {
        common::skip(test, "this build has no fused conv step for the device");
        return;
    }
    let bits = |t: &Tensor| -> Vec<u32> {
        t.flatten_all().unwrap().to_vec1::<f32>().unwrap().into_iter().map(f32::to_bits).collect()
    };
    let mut checked = 0;
    for (batch, d, l) in [(1usize, 2048usize, 3usize), (5, 300, 3), (3, 64, 2), (2, 130, 4)] {
        let seed = (batch * 1000 + d * 10 + l) as u64;
        let bcx = Tensor::from_vec(values(batch * 3 * d, seed), (batch, 3 * d), &dev).unwrap();
        let prev = Tensor::from_vec(values(batch * (l - 1) * d, seed + 1), (batch, l - 1, d), &dev).unwrap();
        let taps = Tensor::from_vec(values(l * d, seed + 2), (l, d), &dev).unwrap();
        let fused = conv_step::fused(&bcx, &prev, &taps).unwrap();
        let composed = conv_step::composed(&bcx, &prev, &taps).unwrap();
        assert_eq!(fused.out.dims(), [batch, d]);
        assert_eq!(fused.next.dims(), [batch, l - 1, d]);
        assert!(bits(&fused.out) == bits(&composed.out), "B {batch} d {d} L {l}: outputs differ");
        assert!(bits(&fused.next) == bits(&composed.next), "B {batch} d {d} L {l}: next states differ");
        checked += 1;
    }
    eprintln!("conv step on {dev:?}: {checked} shapes bit-equal to the composed ops");
}

/// The row ops (`kernels::row_ops`: RMSNorm, with the residual add, SwiGLU, GeGLU, the heads'
/// norm-and-RoPE) on the test
/// device against their host twin on the CPU, bit for bit: on a GPU that is the CUDA kernels
/// against the twin; here, the fused add and the strided halves against the add and the norm
/// apart and contiguous copies.
#[test]
fn the_row_ops_equal_their_host_twin_bit_for_bit() {
    use wick_core::kernels::row_ops;
    let test = "the_row_ops_equal_their_host_twin_bit_for_bit";
    let Some(dev) = device(test) else { return };
    if !row_ops::available(&dev) || !row_ops::available(&Device::Cpu) {
        common::skip(test, "this build has no row ops for the device, or no host twin");
        return;
    }
    let bits = |t: &Tensor| -> Vec<u32> {
        t.flatten_all().unwrap().to_vec1::<f32>().unwrap().into_iter().map(f32::to_bits).collect()
    };
    let on = |t: &Tensor, d: &Device| t.to_device(d).unwrap();
    let mut checked = 0;
    for (rows, n) in [(1usize, 2048usize), (48, 64), (7, 300), (3, 8192), (130, 2048)] {
        let seed = (rows * 100_000 + n) as u64;
        let x = Tensor::from_vec(values(rows * n, seed), (rows, n), &Device::Cpu).unwrap();
        let y = Tensor::from_vec(values(rows * n, seed + 1), (rows, n), &Device::Cpu).unwrap();
        let w = Tensor::from_vec(values(n, seed + 2), n, &Device::Cpu).unwrap();
        let twin = row_ops::rms_norm(&x, &w, 1e-5).unwrap();
        let got = row_ops::rms_norm(&on(&x, &dev), &on(&w, &dev), 1e-5).unwrap();
        assert!(bits(&got) == bits(&twin), "rms_norm, {rows} rows of {n}");
        // The twin's add-and-norm as the add, then the norm (on the CPU this checks the op's
        // plumbing, on a GPU the kernel).
        let h = (&x + &y).unwrap();
        let normed = row_ops::rms_norm(&h, &w, 1e-5).unwrap();
        let (dh, dnormed) = row_ops::add_rms_norm(&on(&x, &dev), &on(&y, &dev), &on(&w, &dev), 1e-5).unwrap();
        assert!(bits(&dh) == bits(&h) && bits(&dnormed) == bits(&normed), "add_rms_norm, {rows} rows of {n}");
        // SwiGLU over the halves of one [rows, 2n] product, as the FFN reads them.
        let gu = Tensor::from_vec(values(rows * 2 * n, seed + 3), (rows, 2 * n), &Device::Cpu).unwrap();
        let gu = (gu * 8.0).unwrap();
        let halves = |t: &Tensor| (t.narrow(1, 0, n).unwrap(), t.narrow(1, n, n).unwrap());
        let ((g, u), (dg, du)) = (halves(&gu), halves(&on(&gu, &dev)));
        let want = row_ops::swiglu(&g.contiguous().unwrap(), &u.contiguous().unwrap()).unwrap();
        assert!(bits(&row_ops::swiglu(&dg, &du).unwrap()) == bits(&want), "swiglu, {rows} rows of {n}");
        // GeGLU by a table of arbitrary f16 values (what the kernel looks up is the point).
        let table: Vec<half::f16> =
            values(1 << 16, seed + 4).iter().map(|&v| half::f16::from_f32(v * 3.0)).collect();
        let table = Tensor::from_vec(table, 1 << 16, &Device::Cpu).unwrap();
        let want = row_ops::geglu(&g.contiguous().unwrap(), &u.contiguous().unwrap(), &table).unwrap();
        let got = row_ops::geglu(&dg, &du, &on(&table, &dev)).unwrap();
        assert!(bits(&got) == bits(&want), "geglu, {rows} rows of {n}");
        checked += 1;
    }
    // The heads' norm-and-RoPE: against the twin's norm-and-RoPE on the GPU; here, against the
    // twin's RoPE of the twin's norm (a norm by a head's width is RMSNorm over rows of it).
    for (tokens, heads, hd) in [(1usize, 32usize, 64usize), (37, 8, 64), (3, 5, 80)] {
        let seed = (tokens * 1000 + heads * 10 + hd) as u64;
        let x =
            Tensor::from_vec(values(tokens * heads * hd, seed), (tokens, heads, hd), &Device::Cpu).unwrap();
        let w = Tensor::from_vec(values(hd, seed + 1), hd, &Device::Cpu).unwrap();
        let angles =
            Tensor::from_vec(values(tokens * hd / 2, seed + 2), (tokens, 1, hd / 2), &Device::Cpu).unwrap();
        let angles = (angles * 500.0).unwrap();
        let (cos, sin) = (angles.cos().unwrap(), angles.sin().unwrap());
        for interleaved in [false, true] {
            let normed = row_ops::rms_norm(&x, &w, 1e-6).unwrap();
            let want = row_ops::norm_rope(&normed, None, &cos, &sin, interleaved).unwrap();
            let got = row_ops::norm_rope(
                &on(&x, &dev),
                Some((&on(&w, &dev), 1e-6)),
                &on(&cos, &dev),
                &on(&sin, &dev),
                interleaved,
            )
            .unwrap();
            let what = format!("norm_rope, {tokens} tokens of {heads}×{hd}, interleaved {interleaved}");
            assert!(bits(&got) == bits(&want), "{what}");
        }
        checked += 1;
    }
    eprintln!("row ops on {dev:?}: {checked} shapes bit-equal to the host twin");
}
