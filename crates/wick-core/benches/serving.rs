//! The latency server's published benchmark, through the engine in-process (no HTTP): SGLang's
//! `bench_serving` random dataset — fixed-length random prompts, `--output-len` tokens each
//! (`ignore_eos`), all released at once and held to `--concurrency` in flight — after a
//! warm-up. For a GPU host, where nothing but carried binaries runs (`scripts/gpu-check.sh`):
//!
//!   cargo bench -p wick-core --bench serving -- MODEL.gguf [--device cuda] [--input-len 1024]
//!       [--output-len 128] [--concurrency 1,16,64,256] [--num-prompts 256] [--warmup 128]
//!       [--prefill-chunk 0] [--step-tokens 8192] [--gpu-memory-utilization 0.9] [-ngl N]
//!
//! Per level: mean and median TTFT (submit → first token), mean TPOT ((E2E − TTFT) / (out − 1)),
//! output tokens/s and requests/s over the level's wall time; one Markdown table on stdout.
//! `--num-prompts` applies to concurrency 1; higher levels run max(4 × concurrency, that) prompts.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use wick_core::request::{Event, GenerateRequest};
use wick_core::runtime::device::DeviceChoice;
use wick_core::{Engine, EngineOptions};

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One request's timings, in seconds.
struct Timing {
    ttft: f64,
    e2e: f64,
    out: usize,
}

fn run_one(engine: &Engine, prompt: Vec<u32>, out: usize) -> Timing {
    let mut req = GenerateRequest::greedy(prompt, out);
    req.ignore_eos = true;
    let t0 = Instant::now();
    let mut h = engine.submit(req).expect("submit");
    let (mut ttft, mut n) = (None, 0);
    while let Some(ev) = h.events.blocking_recv() {
        match ev {
            Event::Token(t) if !t.ids.is_empty() => {
                ttft.get_or_insert_with(|| t0.elapsed().as_secs_f64());
                n += t.ids.len();
            }
            Event::Token(_) | Event::Embedding(_) => {}
            Event::Done(_) => break,
            Event::Error(e) => panic!("generation failed: {e}"),
        }
    }
    Timing { ttft: ttft.unwrap_or(f64::NAN), e2e: t0.elapsed().as_secs_f64(), out: n }
}

/// `prompts` run with at most `concurrency` in flight; the timings and the wall time.
fn level(engine: &Engine, prompts: Vec<Vec<u32>>, out: usize, concurrency: usize) -> (Vec<Timing>, f64) {
    let next = AtomicUsize::new(0);
    let prompts: Vec<Mutex<Option<Vec<u32>>>> = prompts.into_iter().map(|p| Mutex::new(Some(p))).collect();
    let done = Mutex::new(Vec::with_capacity(prompts.len()));
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..concurrency.min(prompts.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(slot) = prompts.get(i) else { break };
                let p = slot.lock().expect("prompt").take().expect("taken once");
                let t = run_one(engine, p, out);
                done.lock().expect("timings").push(t);
            });
        }
    });
    (done.into_inner().expect("timings"), t0.elapsed().as_secs_f64())
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.iter().find(|a| a.ends_with(".gguf")) else {
        eprintln!("usage: serving MODEL.gguf [--device cuda] [--input-len 1024] [--output-len 128] ...");
        return;
    };
    let (input, out) = (arg(&args, "--input-len", 1024usize), arg(&args, "--output-len", 128usize));
    let (n_prompts, warmup) = (arg(&args, "--num-prompts", 256usize), arg(&args, "--warmup", 128usize));
    let levels: Vec<usize> = arg(&args, "--concurrency", "1,16,64,256".to_string())
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    let device = DeviceChoice::from_args(&args).expect("--device");
    let max_c = levels.iter().copied().max().unwrap_or(1);
    let mut o = EngineOptions::new(path);
    o.device = device;
    o.gpu_layers = args.iter().any(|a| a == "-ngl").then(|| arg(&args, "-ngl", usize::MAX));
    o.context_size = Some(input + out + 16);
    o.max_sequences = max_c;
    o.max_queue = 4 * max_c.max(n_prompts);
    o.step_tokens = arg(&args, "--step-tokens", 8192usize);
    o.prefill_chunk = Some(arg(&args, "--prefill-chunk", 0usize)).filter(|&n| n > 0);
    o.gpu_memory_utilization = args
        .iter()
        .any(|a| a == "--gpu-memory-utilization")
        .then(|| arg(&args, "--gpu-memory-utilization", 0.9f32));
    if o.gpu_memory_utilization.is_none() {
        o.kv_tokens = Some(max_c * (input + out + 16));
    }
    let loading = Instant::now();
    let engine = Engine::load(o).expect("load");
    let info = engine.info();
    eprintln!(
        "loaded in {:.2} s on {}{}{}; KV pool {} tokens",
        loading.elapsed().as_secs_f64(),
        info.device,
        info.device_layers.map(|n| format!(", {n}/{} blocks on it", info.model.n_layer)).unwrap_or_default(),
        info.device_notice.as_deref().map(|n| format!(" ({n})")).unwrap_or_default(),
        info.kv_tokens
    );
    // Random ids past the first 100 (control tokens sit low in most vocabularies).
    let n_vocab = info.model.n_vocab as u64;
    let mut seed = 7u64;
    let mut prompt = || -> Vec<u32> {
        (0..input)
            .map(|_| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (100 + (seed >> 33) % (n_vocab - 100)) as u32
            })
            .collect()
    };
    if warmup > 0 {
        let w: Vec<Vec<u32>> = (0..warmup).map(|_| prompt()).collect();
        level(&engine, w, out, levels.first().copied().unwrap_or(1));
    }
    println!("| concurrency | prompts | in / out | mean TTFT ms | median TTFT ms | mean TPOT ms | output tok/s | req/s |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for &c in &levels {
        let n = if c == 1 { n_prompts } else { (4 * c).max(n_prompts) };
        let ps: Vec<Vec<u32>> = (0..n).map(|_| prompt()).collect();
        let (ts, wall) = level(&engine, ps, out, c);
        let mut ttft: Vec<f64> = ts.iter().map(|t| t.ttft * 1e3).collect();
        let tpot: Vec<f64> =
            ts.iter().filter(|t| t.out > 1).map(|t| (t.e2e - t.ttft) * 1e3 / (t.out - 1) as f64).collect();
        let total_out: usize = ts.iter().map(|t| t.out).sum();
        println!(
            "| {c} | {n} | {input} / {out} | {:.2} | {:.2} | {:.3} | {:.1} | {:.2} |",
            mean(&ttft),
            median(&mut ttft),
            mean(&tpot),
            total_out as f64 / wall,
            n as f64 / wall
        );
    }
}
