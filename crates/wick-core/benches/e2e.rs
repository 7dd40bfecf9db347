//! End-to-end prefill / decode tokens/s of one GGUF through `models::Model::forward`, the way
//! llama-bench measures (pp512 / tg128): `cargo bench -p wick-core --bench e2e -- MODEL.gguf
//! [--prompt 512] [--gen 128] [--repeats 3] [--same-token] [--device cpu|cpu-candle|cuda|metal]
//! [-ngl N] [--verify K] [--pack-cache DIR]`
//! (`--same-token`: decode feeds one token over and over, as a model that echoes does;
//! `--device`: where and how the model runs, `runtime::device`, default the exact CPU path;
//! `-ngl N`: llama-server's layer split, the last N blocks on the device, the rest on the CPU;
//! `--verify K`: also the time of a speculative step checking K drafts, 1 + K rows computed as
//! decodes, against a decode step, at the same cache length; `--pack-cache DIR`: the repacked
//! weights mapped from the pack cache in DIR, as `wick serve` holds them — a first run writes it).
//! Threads: `WICK_THREADS` (default: all cores). With `WICK_DEVICE_TRACE=1` it also prints where
//! the last repeat's prefill and decode steps spent their time (`runtime::trace`; the traced
//! runs are slower, so read the shares, not the speed).
//! Prints median and min–max per phase. With `WICK_THREADS=1` it also prints tokens per second
//! of the thread's CPU time (`/proc/thread-self/schedstat`), which a loaded machine moves much
//! less than wall time: the figure to compare two builds by on a shared machine.

use std::time::Instant;

use wick_core::cache::{KvPool, KvTypes, BLOCK_SIZE};
use wick_core::gguf::GgufFile;
use wick_core::models::{self, StepSeq};
use wick_core::runtime::device::{DeviceChoice, Placement};
use wick_core::runtime::trace;

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn stats(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// Nanoseconds this thread has run on a CPU (Linux), 0 elsewhere.
fn cpu_ns() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()))
        .unwrap_or(0.0)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.iter().find(|a| a.ends_with(".gguf")) else {
        eprintln!("usage: e2e MODEL.gguf [--prompt 512] [--gen 128] [--repeats 3]");
        return;
    };
    let (np, ng, reps) = (arg(&args, "--prompt", 512), arg(&args, "--gen", 128), arg(&args, "--repeats", 3));
    let same_token = args.iter().any(|a| a == "--same-token");
    let gpu_layers = args.iter().any(|a| a == "-ngl").then(|| arg(&args, "-ngl", usize::MAX));
    let placement = Placement::resolve(DeviceChoice::from_args(&args).expect("--device"), gpu_layers);
    if let Some(n) = &placement.notice {
        eprintln!("{n}");
    }
    let loading = Instant::now();
    let g = GgufFile::open(path).expect("open");
    let placement = placement.fit_layers(g.block_count().expect("block_count").unwrap_or(0));
    // As `wick serve` holds the weights: mapped from the pack cache (a first run writes it).
    let packs = args.iter().position(|a| a == "--pack-cache").and_then(|i| args.get(i + 1));
    let packs = packs.map(|dir| wick_core::engine::pack_cache(dir.as_ref(), path.as_ref(), &g, &placement));
    let model = models::load_on(&g, &placement.with_packs(packs.clone())).expect("load");
    if let Some(p) = packs {
        let state = p.finish();
        eprintln!("pack cache: {state:?}");
        // The file is written off the load's thread: wait for it, or an exit mid-write loses
        // it (a writer that fails leaves no file: give up after a while).
        if let wick_core::runtime::weight_cache::WeightCacheUse::Writing { path } = state {
            let deadline = Instant::now() + std::time::Duration::from_secs(300);
            while !path.exists() && Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
    }
    let split = placement.split().map(|s| format!(", {}/{} blocks on it", s.on_device(), s.n_layer));
    eprintln!(
        "load: {:.0} ms on {}{}",
        loading.elapsed().as_secs_f64() * 1e3,
        placement.name(),
        split.unwrap_or_default()
    );
    let vocab = model.info().n_vocab as u32;
    let mut seed = 12345u64;
    let mut next = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((seed >> 33) as u32) % vocab
    };
    let verify = arg(&args, "--verify", 0);
    let blocks = (np + ng + 64 + verify).div_ceil(BLOCK_SIZE);
    let mut kv =
        KvPool::new_on(&model.cache_layout(), blocks, true, &placement, KvTypes::F16).expect("kv pool");
    let (mut pp, mut tg) = (vec![], vec![]);
    let (mut pp_cpu, mut tg_cpu) = (vec![], vec![]);
    let mut verify_ms = vec![];
    let mut traces = (None, None);
    for rep in 0..=reps {
        let prompt: Vec<u32> = (0..np).map(|_| next()).collect();
        let mut cache = kv.new_seq();
        let (t, c) = (Instant::now(), cpu_ns());
        model.forward(&mut [StepSeq::tokens(&prompt, &mut cache)], &mut kv).expect("prefill");
        let (pp_s, pp_c) = (t.elapsed().as_secs_f64(), (cpu_ns() - c) / 1e9);
        traces.0 = trace::report();
        let (t, c) = (Instant::now(), cpu_ns());
        for _ in 0..ng {
            let tok = [if same_token { 1000 } else { next() }];
            model.forward(&mut [StepSeq::tokens(&tok, &mut cache)], &mut kv).expect("decode");
        }
        let (tg_s, tg_c) = (t.elapsed().as_secs_f64(), (cpu_ns() - c) / 1e9);
        traces.1 = trace::report();
        if verify > 0 && rep > 0 {
            verify_ms.push(verify_step_ms(model.as_ref(), &mut kv, &mut cache, verify, &mut next));
        }
        kv.release(&mut cache);
        if rep > 0 {
            pp.push(np as f64 / pp_s);
            tg.push(ng as f64 / tg_s);
            pp_cpu.push(np as f64 / pp_c);
            tg_cpu.push(ng as f64 / tg_c);
        }
    }
    let (pm, pl, ph) = stats(&mut pp);
    let (tm, tl, th) = stats(&mut tg);
    println!(
        "{path}: pp{np} {pm:.1} tok/s ({pl:.1}-{ph:.1})  tg{ng} {tm:.1} tok/s ({tl:.1}-{th:.1})  threads={}",
        wick_core::runtime::pool::global().threads()
    );
    if verify > 0 {
        let (vm, vl, vh) = stats(&mut verify_ms);
        println!(
            "  verify 1+{verify} rows: {vm:.2} ms/step ({vl:.2}-{vh:.2}) = {:.2} decode steps",
            vm / (1e3 / tm)
        );
    }
    if let (Some(pre), Some(dec)) = traces {
        println!(
            "\nWhere the steps' time went (WICK_DEVICE_TRACE, the last repeat), prefill of {np}:\n\n{pre}"
        );
        println!("decode, {ng} steps:\n\n{dec}");
    }
    if wick_core::runtime::pool::global().threads() == 1 {
        let ((pm, pl, ph), (tm, tl, th)) = (stats(&mut pp_cpu), stats(&mut tg_cpu));
        println!("  per CPU second: pp{np} {pm:.1} ({pl:.1}-{ph:.1})  tg{ng} {tm:.1} ({tl:.1}-{th:.1})");
    }
}

/// Median milliseconds of a step verifying `k` drafts (1 + k rows computed as decodes), each
/// rewound after, so every step runs at the same cache length.
fn verify_step_ms(
    model: &dyn models::Model,
    kv: &mut KvPool,
    cache: &mut wick_core::cache::SeqCache,
    k: usize,
    next: &mut impl FnMut() -> u32,
) -> f64 {
    let at = cache.len();
    let mut ms = vec![];
    for _ in 0..16 {
        let rows: Vec<u32> = (0..=k).map(|_| next()).collect();
        let t = Instant::now();
        let step = StepSeq { verify: true, ..StepSeq::tokens(&rows, cache) };
        model.forward(&mut [step], kv).expect("verify");
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        kv.truncate(cache, at).expect("rewind");
    }
    stats(&mut ms).0
}
