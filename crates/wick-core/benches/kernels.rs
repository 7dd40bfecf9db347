//! Quantized matmul kernels: Wick's packed panels (`ops::packed`, what the CPU path runs)
//! against candle's `QMatMul` on the same weights, per type, for one row (decode) and 64 rows
//! (a prefill chunk). `cargo bench -p wick-core --bench kernels [-- FILTER]`; threads:
//! `WICK_THREADS` for Wick, `RAYON_NUM_THREADS` for candle (set both to compare like with like).

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use wick_core::ops::packed::PackedWeight;
use wick_core::ops::RowPos;

/// LFM2-350M's FFN up/gate shape.
const N: usize = 4608;
const K: usize = 1024;

fn kernels(c: &mut Criterion) {
    let dev = Device::Cpu;
    let w = Tensor::randn(0f32, 0.02, (N, K), &dev).unwrap();
    for dtype in
        [GgmlDType::Q4_0, GgmlDType::Q4_1, GgmlDType::Q5_0, GgmlDType::Q8_0, GgmlDType::Q4K, GgmlDType::Q6K]
    {
        let q = QTensor::quantize(&w, dtype).unwrap();
        let Some(packed) = PackedWeight::pack(&q).unwrap() else {
            eprintln!("{dtype:?}: no packed kernel on this CPU, skipped");
            continue;
        };
        let candle = QMatMul::from_qtensor(q).unwrap();
        let mut group = c.benchmark_group(format!("{dtype:?}"));
        for m in [1usize, 64] {
            group.throughput(Throughput::Elements((m * N * K) as u64));
            let xs: Vec<f32> = (0..m * K).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect();
            let rows: Vec<RowPos> = (0..m).map(|i| RowPos { seq_len: m as u32, idx: i as u32 }).collect();
            let x = Tensor::from_vec(xs.clone(), (m, K), &dev).unwrap();
            group.bench_function(BenchmarkId::new("wick-packed", m), |b| {
                b.iter(|| packed.matmul(&xs, &rows).unwrap())
            });
            group.bench_function(BenchmarkId::new("candle", m), |b| b.iter(|| candle.forward(&x).unwrap()));
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).warm_up_time(std::time::Duration::from_millis(500)).measurement_time(std::time::Duration::from_secs(2));
    targets = kernels
}
criterion_main!(benches);
