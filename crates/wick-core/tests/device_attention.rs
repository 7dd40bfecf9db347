//! The device path's one-token attention over the paged f16 cache against a reference in f64
//! (the same roundings: the query and each probability to f16): the composed candle ops
//! (`models::attend_decode_batch` on the gathered pages, `WICK_DEVICE_ATTENTION=composed`) and
//! Wick's fused op (`kernels::decode_attention`, the default where built: its host twin on
//! candle's CPU device, its CUDA kernel on a GPU with `WICK_TEST_DEVICE=cuda`, there also
//! checked against the twin bit for bit). Sequences of ragged lengths read scattered, shuffled
//! pages, with and without a sliding window, at grouped-query shapes of the fixtures and the
//! real models.

use candle_core::{Device, Tensor};
use half::f16;
use wick_core::cache::{padded_mask, BLOCK_SIZE as BLOCK};
use wick_core::kernels::decode_attention;
use wick_core::models::attend_decode_batch;

mod common;

use common::device::values;

/// Largest error allowed, relative to the output's largest magnitude: a probability rounded to
/// f16 on the other side of a tie moves by one f16 step (2⁻¹¹ relative), and the sums' order
/// differs.
const REL_TOL: f64 = 2e-3;

struct Case {
    n_kv: usize,
    group: usize,
    hd: usize,
    lens: Vec<usize>,
    window: Option<usize>,
}

struct Inputs {
    q: Vec<f32>,
    kc: Vec<f16>,
    vc: Vec<f16>,
    /// `[B · t_pad]`: each sequence's slot per position (past its length: its first slot).
    reads: Vec<u32>,
    t_pad: usize,
    scale: f32,
}

/// Random queries and cache, each sequence's pages scattered over the pool in shuffled order.
fn inputs(c: &Case, seed: u64) -> Inputs {
    let n_head = c.n_kv * c.group;
    let blocks: usize = c.lens.iter().map(|l| l.div_ceil(BLOCK)).sum::<usize>() + 3;
    let mut order: Vec<u32> = (0..blocks as u32).collect();
    // A fixed shuffle: every sequence's pages out of order and interleaved with the others'.
    for i in (1..order.len()).rev() {
        order.swap(i, (i * 7 + seed as usize) % (i + 1));
    }
    let t_pad = c.lens.iter().max().copied().unwrap_or(0).div_ceil(64) * 64;
    let (mut reads, mut next) = (Vec::new(), 0);
    for &len in &c.lens {
        let table: Vec<u32> = order[next..next + len.div_ceil(BLOCK)].to_vec();
        next += table.len();
        let slot = |p: usize| table[p / BLOCK] * BLOCK as u32 + (p % BLOCK) as u32;
        reads.extend((0..t_pad).map(|p| slot(if p < len { p } else { 0 })));
    }
    let cache = blocks * BLOCK * c.n_kv * c.hd;
    Inputs {
        q: values(c.lens.len() * n_head * c.hd, seed).iter().map(|v| v * 3.0).collect(),
        kc: values(cache, seed + 1).into_iter().map(f16::from_f32).collect(),
        vc: values(cache, seed + 2).into_iter().map(f16::from_f32).collect(),
        reads,
        t_pad,
        scale: 1.0 / (c.hd as f32).sqrt(),
    }
}

/// `[B, n_head · hd]` in f64, as the device path rounds: the query and each probability to f16.
fn reference(c: &Case, x: &Inputs) -> Vec<f64> {
    let n_head = c.n_kv * c.group;
    let mut out = vec![0f64; c.lens.len() * n_head * c.hd];
    for (b, &len) in c.lens.iter().enumerate() {
        let from = c.window.map_or(0, |w| len.saturating_sub(w));
        for h in 0..n_head {
            let kvh = h / c.group;
            let q: Vec<f64> =
                (0..c.hd).map(|d| f16::from_f32(x.q[(b * n_head + h) * c.hd + d]).to_f64()).collect();
            let row = |cache: &[f16], p: usize, d: usize| {
                cache[(x.reads[b * x.t_pad + p] as usize * c.n_kv + kvh) * c.hd + d].to_f64()
            };
            let s: Vec<f64> = (from..len)
                .map(|p| (0..c.hd).map(|d| q[d] * row(&x.kc, p, d)).sum::<f64>() * x.scale as f64)
                .collect();
            let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = s.iter().map(|v| (v - m).exp()).sum();
            for d in 0..c.hd {
                out[(b * n_head + h) * c.hd + d] = s
                    .iter()
                    .enumerate()
                    .map(|(i, v)| f16::from_f64((v - m).exp() / sum).to_f64() * row(&x.vc, from + i, d))
                    .sum();
            }
        }
    }
    out
}

/// The device path's composed ops: the gather `DeviceKv::read_decodes` does, then
/// `models::attend_decode_batch` under `cache::padded_mask`.
fn composed(c: &Case, x: &Inputs, dev: &Device) -> Vec<f32> {
    let (b, n_kv, hd, t) = (c.lens.len(), c.n_kv, c.hd, x.t_pad);
    let slots = x.kc.len() / (n_kv * hd);
    let reads = Tensor::from_vec(x.reads.clone(), b * t, dev).unwrap();
    let gather = |cache: &[f16]| {
        let pages = Tensor::from_vec(cache.to_vec(), (slots, n_kv, hd), dev).unwrap();
        pages.index_select(&reads, 0).unwrap().reshape((b, t, n_kv, hd)).unwrap()
    };
    let mask = padded_mask(&c.lens, t, c.window, dev).unwrap();
    let q = Tensor::from_vec(x.q.clone(), (b, n_kv * c.group * hd), dev).unwrap();
    let out = attend_decode_batch(&q, &gather(&x.kc), &gather(&x.vc), &mask, x.scale as f64).unwrap();
    out.flatten_all().unwrap().to_vec1().unwrap()
}

fn fused(c: &Case, x: &Inputs, dev: &Device) -> Vec<f32> {
    let (b, n_kv, hd) = (c.lens.len(), c.n_kv, c.hd);
    let slots = x.kc.len() / (n_kv * hd);
    let kc = Tensor::from_vec(x.kc.clone(), (slots, n_kv, hd), dev).unwrap();
    let vc = Tensor::from_vec(x.vc.clone(), (slots, n_kv, hd), dev).unwrap();
    let reads = Tensor::from_vec(x.reads.clone(), b * x.t_pad, dev).unwrap();
    let lens = Tensor::from_vec(c.lens.iter().map(|&l| l as u32).collect::<Vec<_>>(), b, dev).unwrap();
    let q = Tensor::from_vec(x.q.clone(), (b, n_kv * c.group * hd), dev).unwrap();
    let at = decode_attention::Reads { reads: &reads, lens: &lens, t_pad: x.t_pad, one_sequence: false };
    decode_attention::decode_attention(&q, (&kc, &vc), &at, c.window, x.scale)
        .expect("fused decode attention")
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

/// max |got − want| / max |want|, and how many of `got` are not finite.
fn error(got: &[f32], want: &[f64]) -> (f64, usize) {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f64, |m, w| m.max(w.abs())).max(1e-30);
    let bad = got.iter().filter(|g| !g.is_finite()).count();
    (got.iter().zip(want).map(|(&g, &w)| (g as f64 - w).abs() / scale).fold(0f64, f64::max), bad)
}

fn cases() -> Vec<Case> {
    vec![
        // LFM2-1.2B's attention layers: 32 query heads on 8 KV heads of 64.
        Case { n_kv: 8, group: 4, hd: 64, lens: vec![1, 17, 300, 64, 1024], window: None },
        // SmolLM2-135M: 9 on 3 of 64.
        Case { n_kv: 3, group: 3, hd: 64, lens: vec![5, 160, 33], window: None },
        // Gemma3's sliding layers: a window shorter than some sequences; head_dim 256.
        Case { n_kv: 1, group: 4, hd: 256, lens: vec![40, 600, 7], window: Some(128) },
        // A head_dim under a warp and one query head per KV head.
        Case { n_kv: 2, group: 1, hd: 16, lens: vec![3, 70], window: None },
    ]
}

#[test]
fn decode_attention_matches_the_reference() {
    let Some(placement) = common::device::under_test("decode_attention_matches_the_reference") else {
        return;
    };
    let dev = placement.device().clone();
    let mut failed = Vec::new();
    eprintln!("| heads (kv×group×hd) | lengths | window | composed − ref | fused − ref |");
    for (i, c) in cases().iter().enumerate() {
        let x = inputs(c, 11 + i as u64);
        let want = reference(c, &x);
        let (comp, comp_bad) = error(&composed(c, &x, &dev), &want);
        let fused_out = decode_attention::available(&dev).then(|| fused(c, &x, &dev));
        let fused_err = fused_out.as_ref().map(|got| error(got, &want));
        let shown = fused_err.map_or("not run (not built for the device)".to_string(), |(e, n)| {
            format!("{e:.1e} ({n} not finite)")
        });
        // On a GPU: the kernel against its host twin, bit for bit.
        if let (Some(got), false, true) =
            (&fused_out, dev.is_cpu(), decode_attention::available(&Device::Cpu))
        {
            let twin = fused(c, &x, &Device::Cpu);
            if got.iter().map(|v| v.to_bits()).ne(twin.iter().map(|v| v.to_bits())) {
                failed.push(format!("case {i}: the kernel differs from its host twin"));
            }
        }
        eprintln!(
            "| {}×{}×{} | {:?} | {:?} | {comp:.1e} ({comp_bad} not finite) | {shown} |",
            c.n_kv, c.group, c.hd, c.lens, c.window
        );
        if comp > REL_TOL || comp_bad > 0 {
            failed.push(format!("case {i}: composed {comp:.1e}, {comp_bad} not finite"));
        }
        if let Some((e, n)) = fused_err {
            if e > REL_TOL || n > 0 {
                failed.push(format!("case {i}: fused {e:.1e}, {n} not finite"));
            }
        }
    }
    assert!(failed.is_empty(), "over {REL_TOL:e}: {failed:?}");
}
