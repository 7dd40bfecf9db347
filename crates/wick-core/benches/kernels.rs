//! Wick's CPU kernels against candle's path for the same work:
//! - quantized matmuls: the packed panels (`kernels::cpu::repack`) against `QMatMul` on the same
//!   weights, per type, for one row (decode) and 64 rows (a prefill chunk);
//! - attention of a decode step (8 sequences × 160 cached positions, SmolLM2's 9 query heads
//!   on 3 KV heads): `kernels::attend_many` over the paged f16 cache against candle's
//!   matmul/softmax attention on contiguous f16 K/V (`tensor_attention` below);
//! - attention of a prefill chunk at long context (512 new tokens after 3584 cached);
//! - SwiGLU of 8 rows of 1536: `kernels::cpu::expf::swiglu` against candle's `silu(g) * u`.
//!
//! `cargo bench -p wick-core --bench kernels [-- FILTER]`; threads: `WICK_THREADS` for Wick,
//! `RAYON_NUM_THREADS` for candle (set both to compare like with like).

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use wick_core::cache::{KvPool, KvWrite, LayerKind, PagedView, SeqCache};
use wick_core::kernels::{attend_many, PackedWeight, RowPos, SeqAttn};

/// Keys and values of positions `0..t` as contiguous `[n_kv_head, t, head_dim]` f16 tensors.
fn gather(view: &PagedView<'_>, t: usize, dev: &Device) -> (Tensor, Tensor) {
    let (n_kv, hd) = (view.n_kv_head, view.head_dim);
    let (mut k, mut v) = (Vec::with_capacity(n_kv * t * hd), Vec::with_capacity(n_kv * t * hd));
    for g in 0..n_kv {
        for p in 0..t {
            k.extend_from_slice(view.key(g, p));
            v.extend((0..hd).map(|d| half::f16::from_f32(view.value(g, d, p))));
        }
    }
    let shape = (n_kv, t, hd);
    (Tensor::from_vec(k, shape, dev).unwrap(), Tensor::from_vec(v, shape, dev).unwrap())
}

/// One decode token's attention with candle's tensor ops: softmax(q kᵀ · scale) v, grouped
/// query heads (`q`: `[1, n_head, hd]`; `k`, `v`: `[n_kv, t, hd]` f16), rounding q and the
/// probabilities to f16 where ggml does.
fn tensor_attention(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Tensor {
    let (_, n_head, hd) = q.dims3().unwrap();
    let n_kv = k.dims3().unwrap().0;
    let f32_of = |t: &Tensor| t.to_dtype(DType::F32).unwrap();
    let q = f32_of(&q.transpose(0, 1).unwrap().contiguous().unwrap().to_dtype(DType::F16).unwrap());
    let q = q.reshape((n_kv, n_head / n_kv, hd)).unwrap();
    let scores = (q.matmul(&f32_of(k).t().unwrap()).unwrap() * scale).unwrap();
    let probs = f32_of(&candle_nn::ops::softmax_last_dim(&scores).unwrap().to_dtype(DType::F16).unwrap());
    probs.matmul(&f32_of(v)).unwrap().reshape((1, n_head * hd)).unwrap()
}

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

fn values(seed: usize, n: usize) -> Vec<f32> {
    (0..n).map(|i| (((i + seed) * 7919) % 1000) as f32 / 1000.0 - 0.5).collect()
}

fn attention(c: &mut Criterion) {
    let dev = Device::Cpu;
    let (n_seq, t, n_head, n_kv, hd) = (8usize, 160usize, 9usize, 3usize, 64usize);
    let layout = [LayerKind::Attention { n_kv_head: n_kv, head_dim: hd }];
    let mut pool = KvPool::with_capacity(&layout, n_seq * (t + 64), &dev).unwrap();
    let mut seqs: Vec<SeqCache> = (0..n_seq).map(|_| pool.new_seq()).collect();
    let kv: Vec<(Vec<f32>, Vec<f32>)> =
        (0..n_seq).map(|s| (values(s, t * n_kv * hd), values(s + 99, t * n_kv * hd))).collect();
    for s in seqs.iter_mut() {
        pool.reserve(s, t).unwrap();
    }
    let writes: Vec<KvWrite<'_>> =
        seqs.iter().zip(&kv).map(|(seq, (k, v))| KvWrite { seq, pos0: 0, k, v }).collect();
    pool.write_many(0, &writes).unwrap();
    let views: Vec<_> = seqs.iter().map(|s| pool.view(0, s).unwrap()).collect();
    let qs: Vec<Vec<f32>> = (0..n_seq).map(|s| values(s + 7, n_head * hd)).collect();
    let step: Vec<SeqAttn<'_>> =
        views.iter().zip(&qs).map(|(kv, q)| SeqAttn::causal(q, kv, 1, t - 1)).collect();
    // candle's path on contiguous caches (no gather in the timing).
    let dense: Vec<(Tensor, Tensor, Tensor)> = views
        .iter()
        .zip(&qs)
        .map(|(v, q)| {
            let (k, val) = gather(v, t, &dev);
            (Tensor::from_vec(q.clone(), (1, n_head, hd), &dev).unwrap(), k, val)
        })
        .collect();
    let mut group = c.benchmark_group("attention decode 8x160");
    group.bench_function("wick-paged", |b| b.iter(|| attend_many(&step, n_head, 0.125, None)));
    group.bench_function("candle", |b| {
        b.iter(|| {
            for (q, k, v) in &dense {
                tensor_attention(q, k, v, 0.125);
            }
        })
    });
    group.finish();

    // The same step over 96 layers (~37 MB of KV, past the caches), as a real step reads
    // its KV from DRAM: per layer = time / 96.
    const LAYERS: usize = 96;
    let layout = vec![LayerKind::Attention { n_kv_head: n_kv, head_dim: hd }; LAYERS];
    let mut deep = KvPool::with_capacity(&layout, n_seq * (t + 64), &dev).unwrap();
    let mut dseqs: Vec<SeqCache> = (0..n_seq).map(|_| deep.new_seq()).collect();
    for s in dseqs.iter_mut() {
        deep.reserve(s, t).unwrap();
    }
    let dwrites: Vec<KvWrite<'_>> =
        dseqs.iter().zip(&kv).map(|(seq, (k, v))| KvWrite { seq, pos0: 0, k, v }).collect();
    for l in 0..LAYERS {
        deep.write_many(l, &dwrites).unwrap();
    }
    let dviews: Vec<Vec<_>> =
        (0..LAYERS).map(|l| dseqs.iter().map(|s| deep.view(l, s).unwrap()).collect()).collect();
    let dsteps: Vec<Vec<SeqAttn<'_>>> = dviews
        .iter()
        .map(|vs| vs.iter().zip(&qs).map(|(kv, q)| SeqAttn::causal(q, kv, 1, t - 1)).collect())
        .collect();
    let mut group = c.benchmark_group("attention decode 8x160 x96 layers");
    group.bench_function("wick-paged", |b| {
        b.iter(|| {
            for step in &dsteps {
                std::hint::black_box(attend_many(step, n_head, 0.125, None));
            }
        })
    });
    group.finish();
}

/// A prefill chunk's attention at long context (LFM2-350M's 16 query heads on 8 KV heads):
/// 512 new tokens after 3584 cached positions, the chunk a 4k prompt ends with.
fn attention_prefill(c: &mut Criterion) {
    let dev = Device::Cpu;
    let (len, pos0, n_head, n_kv, hd) = (512usize, 3584usize, 16usize, 8usize, 64usize);
    let t = pos0 + len;
    let layout = [LayerKind::Attention { n_kv_head: n_kv, head_dim: hd }];
    let mut pool = KvPool::with_capacity(&layout, t, &dev).unwrap();
    let mut seq = pool.new_seq();
    pool.reserve(&mut seq, t).unwrap();
    let (k, v) = (values(1, t * n_kv * hd), values(2, t * n_kv * hd));
    pool.write_many(0, &[KvWrite { seq: &seq, pos0: 0, k: &k, v: &v }]).unwrap();
    let view = pool.view(0, &seq).unwrap();
    let q = values(3, len * n_head * hd);
    let step = [SeqAttn::causal(&q, &view, len, pos0)];
    let mut group = c.benchmark_group("attention prefill 512 at 4k");
    group.throughput(Throughput::Elements(len as u64));
    group.bench_function("wick-paged", |b| b.iter(|| attend_many(&step, n_head, 0.125, None)));
    group.finish();
}

fn swiglu(c: &mut Criterion) {
    let dev = Device::Cpu;
    let (m, n) = (8usize, 1536usize);
    let (g, u) = (values(1, m * n), values(2, m * n));
    let (gt, ut) = (
        Tensor::from_vec(g.clone(), (m, n), &dev).unwrap(),
        Tensor::from_vec(u.clone(), (m, n), &dev).unwrap(),
    );
    let mut group = c.benchmark_group("swiglu 8x1536");
    group.throughput(Throughput::Elements((m * n) as u64));
    group.bench_function("wick", |b| b.iter(|| wick_core::kernels::cpu::expf::swiglu(&g, &u, n)));
    group.bench_function("candle", |b| b.iter(|| (gt.silu().unwrap() * &ut).unwrap()));
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).warm_up_time(std::time::Duration::from_millis(500)).measurement_time(std::time::Duration::from_secs(2));
    targets = kernels, attention, attention_prefill, swiglu
}
criterion_main!(benches);
