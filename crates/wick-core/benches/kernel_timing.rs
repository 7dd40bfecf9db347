//! Quick timings of single kernels, printed as one table (no statistics: for before/after
//! comparisons while working on a kernel; `benches/kernels.rs` holds the criterion cases):
//! - packed panels per type, `[4608, 1024]` (LFM2-350M's FFN up/gate): streamed from DRAM
//!   (24 copies cycled, as a decode step reads its weights) for 1 and 8 rows, and
//!   cache-resident for 1, 8 and 64 rows;
//! - the one-token AVX-512 attention kernels alone, one thread, cache-resident (SmolLM2:
//!   3 query heads per KV head, 160 positions, head_dim 64);
//! - `attend_many` for 8 decoding sequences (SmolLM2's 9 query heads on 3 KV heads, 160 cached
//!   positions each), cache-resident and over 64 layers' worth of KV (~24 MB, from DRAM).
//!
//! - `attend_many` for one sequence at 4096 positions (LFM2-350M's 16 query heads on 8 KV
//!   heads), over 6 layers' worth of KV.
//!
//! - `memory`: the machine's read bandwidth from DRAM on 1 and 2 threads (a 2 GiB buffer summed
//!   in 64-byte lines, best of 5 passes), plain and with a non-temporal prefetch 4 KiB ahead —
//!   the denominator of a decode's bandwidth floor; `floor`: the same quickly, on 2 threads.
//!
//! `cargo bench -p wick-core --bench kernel_timing [-- packed|attention|decode|long|memory|floor]`

use std::time::Instant;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use wick_core::cache::{KvPool, KvWrite, LayerKind, SeqCache};
use wick_core::kernels::{attend_many, PackedWeight, RowPos, SeqAttn};

fn row(what: &str, case: &str, time: f64, rate: &str) {
    println!("| {what:<28} | {case:<24} | {:>10.2} µs | {rate:<24} |", time * 1e6);
}

fn rows_of(m: usize) -> Vec<RowPos> {
    (0..m).map(|i| RowPos { seq_len: m as u32, idx: i as u32 }).collect()
}

fn inputs(len: usize) -> Vec<f32> {
    (0..len).map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5).collect()
}

fn packed() {
    let (n, k) = (4608, 1024);
    let w = Tensor::randn(0f32, 0.02, (n, k), &Device::Cpu).unwrap();
    for dt in [GgmlDType::Q4_0, GgmlDType::Q4K, GgmlDType::Q8_0, GgmlDType::Q4_1, GgmlDType::Q6K] {
        let q = QTensor::quantize(&w, dt).unwrap();
        let Some(p) = PackedWeight::pack(&q).unwrap() else {
            println!("| {:<28} | no packed kernel on this CPU |", format!("{dt:?}"));
            continue;
        };
        let many: Vec<PackedWeight> = (0..24).map(|_| PackedWeight::pack(&q).unwrap().unwrap()).collect();
        for m in [1usize, 8] {
            let (xs, rows) = (inputs(m * k), rows_of(m));
            let t = Instant::now();
            for _ in 0..40 {
                for w in &many {
                    std::hint::black_box(w.matmul(&xs, &rows).unwrap());
                }
            }
            let s = t.elapsed().as_secs_f64() / 960.0;
            let rate = format!(
                "{:.1} GB/s, {:.1} GMAC/s",
                p.packed_bytes() as f64 / s / 1e9,
                (m * n * k) as f64 / s / 1e9
            );
            row(&format!("packed {dt:?}"), &format!("m={m} streamed"), s, &rate);
        }
        for m in [1usize, 8, 64] {
            let (xs, rows) = (inputs(m * k), rows_of(m));
            let _ = p.matmul(&xs, &rows).unwrap();
            let iters = if m == 1 { 200 } else { 10 };
            let t = Instant::now();
            for _ in 0..iters {
                std::hint::black_box(p.matmul(&xs, &rows).unwrap());
            }
            let s = t.elapsed().as_secs_f64() / iters as f64;
            row(
                &format!("packed {dt:?}"),
                &format!("m={m}"),
                s,
                &format!("{:.1} GMAC/s", (m * n * k) as f64 / s / 1e9),
            );
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn attention_kernels() {
    use wick_core::kernels::cpu::attention::avx512;
    if !avx512::available() {
        println!("| attention kernels            | need AVX-512, skipped |");
        return;
    }
    let (n_kv, hd, t) = (3usize, 64usize, 160usize);
    let layout = [LayerKind::Attention { n_kv_head: n_kv, head_dim: hd }];
    let mut pool = KvPool::with_capacity(&layout, t + 64, &Device::Cpu).unwrap();
    let mut seq = pool.new_seq();
    pool.reserve(&mut seq, t).unwrap();
    let k = inputs(t * n_kv * hd);
    pool.write_many(0, &[KvWrite { seq: &seq, pos0: 0, k: &k, v: &k }]).unwrap();
    let kv = pool.view(0, &seq).unwrap();
    let q: Vec<f32> = (0..3 * hd).map(|i| (i % 17) as f32 / 17.0).collect();
    let p: Vec<f32> = (0..3 * t).map(|i| (i % 13) as f32 / 1300.0).collect();
    let qs = [&q[..hd], &q[hd..2 * hd], &q[2 * hd..]];
    let ps = [&p[..t], &p[t..2 * t], &p[2 * t..]];
    let n = 20_000;
    let s = Instant::now();
    for _ in 0..n {
        for c in (0..t).step_by(16) {
            // SAFETY: AVX-512 checked; 160 positions written, chunks of 16 inside one block.
            std::hint::black_box(unsafe { avx512::kq16_single::<3>(&kv, 0, c, qs) });
        }
    }
    let kq = s.elapsed().as_secs_f64() / n as f64;
    let s = Instant::now();
    for _ in 0..n {
        for d0 in (0..hd).step_by(16) {
            // SAFETY: AVX-512 checked; 160 positions and head_dim 64 in the view.
            std::hint::black_box(unsafe { avx512::pv16_single::<3>(&kv, 0, d0, ps) });
        }
    }
    let pv = s.elapsed().as_secs_f64() / n as f64;
    row("kq16_single (3 heads)", "per (token, KV head)", kq, "160 positions");
    row("pv16_single (3 heads)", "per (token, KV head)", pv, "160 positions");
}

#[cfg(not(target_arch = "x86_64"))]
fn attention_kernels() {
    println!("| attention kernels            | need AVX-512, skipped |");
}

/// A pool with `t` positions of layer 0 written for one sequence.
fn filled(n_kv: usize, hd: usize, t: usize, seed: usize) -> (KvPool, SeqCache) {
    let layout = [LayerKind::Attention { n_kv_head: n_kv, head_dim: hd }];
    let mut pool = KvPool::with_capacity(&layout, t + 64, &Device::Cpu).unwrap();
    let mut seq = pool.new_seq();
    pool.reserve(&mut seq, t).unwrap();
    let k: Vec<f32> = inputs(t * n_kv * hd + seed)[seed..].iter().map(|v| v * 3.0).collect();
    let v = inputs(t * n_kv * hd + seed + 1)[seed + 1..].to_vec();
    pool.write_many(0, &[KvWrite { seq: &seq, pos0: 0, k: &k, v: &v }]).unwrap();
    (pool, seq)
}

fn decode_step() {
    let (n_kv, n_head, hd, t) = (3, 9, 64, 160);
    let made: Vec<_> = (0..8).map(|s| filled(n_kv, hd, t, s)).collect();
    let views: Vec<_> = made.iter().map(|(pool, seq)| pool.view(0, seq).unwrap()).collect();
    let qs: Vec<Vec<f32>> = (0..8).map(|s| inputs(n_head * hd + s)[s..].to_vec()).collect();
    let seqs: Vec<SeqAttn<'_>> =
        views.iter().zip(&qs).map(|(kv, q)| SeqAttn::causal(q, kv, 1, t - 1)).collect();
    for round in 0..3 {
        let s = Instant::now();
        for _ in 0..300 {
            std::hint::black_box(attend_many(&seqs, n_head, 0.125, None));
        }
        row("attend_many 8×160", &format!("cached, round {round}"), s.elapsed().as_secs_f64() / 300.0, "");
    }
    let layers: Vec<Vec<_>> =
        (0..64).map(|l| (0..8).map(|s| filled(n_kv, hd, t, 8 * l + s)).collect()).collect();
    let views: Vec<Vec<_>> =
        layers.iter().map(|l| l.iter().map(|(pool, seq)| pool.view(0, seq).unwrap()).collect()).collect();
    let steps: Vec<Vec<SeqAttn<'_>>> = views
        .iter()
        .map(|vs| vs.iter().zip(&qs).map(|(kv, q)| SeqAttn::causal(q, kv, 1, t - 1)).collect())
        .collect();
    for round in 0..3 {
        let s = Instant::now();
        for _ in 0..10 {
            for step in &steps {
                std::hint::black_box(attend_many(step, n_head, 0.125, None));
            }
        }
        let per_layer = s.elapsed().as_secs_f64() / 640.0;
        row("attend_many 8×160", &format!("DRAM, round {round}"), per_layer, "per layer");
    }
}

/// One sequence decoding after 4096 positions (LFM2-350M: 16 query heads on 8 KV heads,
/// head_dim 64), over 6 layers' worth of KV (its attention layers, ~50 MB: from DRAM).
fn long_decode() {
    let (n_kv, n_head, hd, t) = (8, 16, 64, 4096);
    let made: Vec<_> = (0..6).map(|l| filled(n_kv, hd, t, l)).collect();
    let views: Vec<_> = made.iter().map(|(pool, seq)| pool.view(0, seq).unwrap()).collect();
    let q = inputs(n_head * hd);
    for round in 0..3 {
        let s = Instant::now();
        for _ in 0..20 {
            for kv in &views {
                let seqs = [SeqAttn::causal(&q, kv, 1, t - 1)];
                std::hint::black_box(attend_many(&seqs, n_head, 0.125, None));
            }
        }
        let per_layer = s.elapsed().as_secs_f64() / 120.0;
        row("attend_many 1×4096", &format!("6 layers, round {round}"), per_layer, "per layer");
    }
}

/// Sums `words` 8 at a time (one 64-byte line per step in 8 independent lanes), compiled for
/// AVX2 so that the loads are 32 bytes wide and the adds never limit the rate; with `PREFETCH`,
/// each line also prefetches (non-temporal) the line 4 KiB ahead, as the Q8_0 one-row tiles
/// stream their panels (`repack::panel::prefetch_stream`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sum_lines<const PREFETCH: bool>(words: &[u64]) -> u64 {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_NTA};
    let mut acc = [0u64; 8];
    for line in words.chunks_exact(8) {
        if PREFETCH {
            _mm_prefetch::<_MM_HINT_NTA>(line.as_ptr().wrapping_add(512) as *const i8);
        }
        for (a, w) in acc.iter_mut().zip(line) {
            *a = a.wrapping_add(*w);
        }
    }
    acc.iter().fold(0, |s, a| s.wrapping_add(*a))
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn sum_lines<const PREFETCH: bool>(words: &[u64]) -> u64 {
    words.iter().fold(0, |s, a| s.wrapping_add(*a))
}

/// A buffer of `bytes` on 2 MiB pages (as the weights are held), every word written.
fn read_buffer(bytes: usize) -> memmap2::MmapMut {
    let mut map = memmap2::MmapMut::map_anon(bytes).expect("map");
    let _ = map.advise(memmap2::Advice::HugePage);
    for (i, w) in map.chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(&(i as u64).to_ne_bytes());
    }
    map
}

/// Seconds for `threads` threads to sum `words`, each its contiguous share, plain or with a
/// non-temporal prefetch 4 KiB ahead.
fn read_pass(words: &[u64], threads: usize, prefetch: bool) -> f64 {
    let share = words.len().div_ceil(threads);
    let t = Instant::now();
    std::thread::scope(|s| {
        let parts: Vec<_> = words
            .chunks(share)
            .map(|c| {
                s.spawn(move || match prefetch {
                    // SAFETY: AVX2 is on every x86-64 machine Wick's benches run on.
                    false => std::hint::black_box(unsafe { sum_lines::<false>(c) }),
                    // SAFETY: as above; a prefetch of any address has no effect on memory.
                    true => std::hint::black_box(unsafe { sum_lines::<true>(c) }),
                })
            })
            .collect();
        parts.into_iter().for_each(|p| drop(p.join()));
    });
    t.elapsed().as_secs_f64()
}

fn words(map: &memmap2::Mmap) -> &[u64] {
    // SAFETY: the map is page-aligned, so 8-byte aligned, and its length a multiple of 8.
    unsafe { std::slice::from_raw_parts(map.as_ptr() as *const u64, map.len() / 8) }
}

/// The read rate from DRAM: a 2 GiB buffer summed by 1 and 2 threads, best of 5 passes.
fn memory() {
    let bytes = 2usize << 30;
    let map = read_buffer(bytes).make_read_only().expect("map");
    let words = words(&map);
    for threads in [1usize, 2] {
        // Plain and prefetched passes alternate, so that the machine's drift falls on both.
        let mut best = [f64::MAX; 2];
        for _ in 0..5 {
            for (prefetch, best) in best.iter_mut().enumerate() {
                *best = best.min(read_pass(words, threads, prefetch == 1));
            }
        }
        for (how, best) in [" thread(s)", " thr., NTA +4K"].iter().zip(best) {
            let rate = format!("{:.1} GB/s", bytes as f64 / best / 1e9);
            row("memory read", &format!("2 GiB, {threads}{how}"), best, &rate);
        }
    }
}

/// The bandwidth floor's denominator now, quickly (~1 s), for a benchmark to take beside each
/// decode it times (`benches/compare.ts micro --floor`): the best 2-thread read rate of a 1 GiB
/// buffer over 3 plain and 3 prefetched passes. This machine's rate moves by up to 2× within
/// minutes, so a floor measured once for a whole run says little about any one decode.
/// With `--serve`, once per line read from stdin until it closes (benches/lib/floor.ts).
fn floor() {
    let bytes = 1usize << 30;
    let map = read_buffer(bytes).make_read_only().expect("map");
    let words = words(&map);
    let best = (0..6).map(|i| read_pass(words, 2, i % 2 == 1)).fold(f64::MAX, f64::min);
    row("memory floor", "1 GiB, 2 threads, best", best, &format!("{:.1} GB/s", bytes as f64 / best / 1e9));
}

fn main() {
    // `cargo bench` passes `--bench`; any other argument picks sections by name.
    let picked: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let run = |name: &str| picked.is_empty() || picked.iter().any(|p| name.contains(p.as_str()));
    println!("| {:<28} | {:<24} | {:>13} | {:<24} |", "kernel", "case", "time", "rate");
    println!("|{:-<30}|{:-<26}|{:->15}|{:-<26}|", "", "", "", "");
    if run("long") {
        long_decode();
    }
    if run("packed") {
        packed();
    }
    if run("attention") {
        attention_kernels();
    }
    if run("decode") {
        decode_step();
    }
    if run("memory") {
        memory();
    }
    if run("floor") && std::env::args().any(|a| a == "--serve") {
        // One process for every probe of a run: a benchmark holding an engine would otherwise
        // fork itself for each one (benches/lib/floor.ts says why that matters).
        for _ in std::io::stdin().lines().map_while(|l| l.ok()) {
            floor();
            let _ = std::io::Write::flush(&mut std::io::stdout());
        }
    } else if run("floor") {
        floor();
    }
}
