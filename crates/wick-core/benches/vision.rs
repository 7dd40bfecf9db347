//! Vision encoder timing: one LFM2-VL projector input (a 512×512 tile, 256 image tokens),
//! preprocessing and encoding, as `VisionModel::encode_image` runs it inside a scheduler step.
//! llama.cpp's time for the same tile comes from scripts/mtmd-embd.cpp (`ENCODE … ms`).
//!
//! Usage: WICK_BENCH_MMPROJ=<mmproj.gguf> [WICK_THREADS=n] [WICK_BENCH_REF=<mtmd-embd output>]
//!        cargo bench --bench vision [-- --device cpu|cpu-candle|cuda|metal]
//! `--device`: where and how the encoder runs (`runtime::device`), default the exact CPU path.
//! With `WICK_BENCH_REF` (scripts/mtmd-embd.cpp's output for the same 512×512 pattern, e.g.
//! `mtmd-embd <text.gguf> <mmproj> tile.rgb 512 512 ref.txt`), it also prints the largest
//! difference from llama.cpp's embeddings.
//! (projectors from `wick-fixtures <dir> --bench`: bench-mmproj-lfm2-vl-450m-{f16,q8_0}.gguf).

use std::time::Instant;

use wick_core::models::vision::{VisionModel, VisionOptions};
use wick_core::runtime::device::{DeviceChoice, Placement};
use wick_fixtures::pattern;

fn main() {
    let Some(path) = std::env::var_os("WICK_BENCH_MMPROJ") else {
        eprintln!("vision bench: set WICK_BENCH_MMPROJ to a projector GGUF (wick-fixtures <dir> --bench)");
        return;
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    // As `Engine::load` sets the allocator up for the server before it loads a projector.
    wick_core::runtime::alloc::keep_freed_memory();
    let placement = Placement::resolve(DeviceChoice::from_args(&args).expect("--device"), None);
    if let Some(n) = &placement.notice {
        eprintln!("{n}");
    }
    let model = VisionModel::load_on(path.as_ref(), VisionOptions::default(), &placement)
        .expect("load the projector");
    let rounds: usize = std::env::var("WICK_BENCH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(3);
    let img = pattern(512, 512, 1);
    let plan = model.plan(512, 512).expect("plan");
    let mut best = f64::MAX;
    let mut last = vec![];
    for r in 0..rounds {
        let t = Instant::now();
        let e = model.encode_image(&plan, img.view()).expect("encode");
        let ms = t.elapsed().as_secs_f64() * 1e3;
        best = best.min(ms);
        println!("round {r}: {} tokens in {ms:.1} ms", e[0].len() / model.n_embd());
        last = e.into_iter().next().unwrap_or_default();
    }
    if let Some(r) = std::env::var_os("WICK_BENCH_REF") {
        let text = std::fs::read_to_string(r).expect("read the reference");
        let want: Vec<f32> = text
            .lines()
            .find(|l| l.starts_with("E "))
            .expect("an embedding line")
            .split(' ')
            .skip(3)
            .map(|v| v.parse().expect("a number"))
            .collect();
        let worst = last.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        println!("largest difference from llama.cpp over {} values: {worst:e}", want.len());
    }
    println!(
        "vision encode, 512×512 tile on {}: best {best:.1} ms ({})",
        placement.name(),
        std::path::Path::new(&path).display()
    );
}
