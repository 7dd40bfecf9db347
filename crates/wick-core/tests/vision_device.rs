//! The LFM2-VL vision encoder on the device path (`models/vision/device.rs`: candle's
//! device-generic ops, what CUDA and Metal run) checked on candle's CPU device against the
//! exact path, which equals llama.cpp bit for bit (`tests/vision.rs`):
//! - the image embeddings of every projector fixture type (F32, F16, Q8_0, Q8_0 without
//!   `mm.input_norm`), single images and tiled ones, and of the bench-size projectors when
//!   they are there, within a stated tolerance of the exact path's (`FLOAT_TOL`, `Q8_TOL`:
//!   largest |Δ| over the largest |value|, and cosine similarity);
//! - the engine's greedy answer to a prompt with images, the same on both paths.
//!
//! `WICK_TEST_DEVICE=cuda` (or `metal`), in a build with that backend, runs the same checks
//! on the GPU instead; without the GPU or the backend they report themselves skipped.
//!
//! Why a tolerance and not bits: candle sums in its own orders (GEMM tiles, f32 softmax where
//! ggml sums in f64 with its own `expf`); each op alone agrees with its exact kernel to an ulp
//! or so (`models/vision/device/tests.rs`), but the tower rounds to f16 (GELU's table, the
//! inputs of F16 matmuls) and to 8 bits (Q8_0 activations), and an ulp moved just before such
//! a rounding moves a value by a whole f16 or 8-bit step. (Candle's CPU Q8_0 quantizer scales
//! by `1/d` where ggml's x86 one takes `127/max`; with ggml's the Q8_0 error is about the same.) Measured on candle's CPU device (see
//! benches/RESULTS.md): relative ≤ 6e-4 on F32 and F16, ≤ 2.2e-2 on Q8_0.

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use candle_core::Device;
use common::engine::run;
use wick_core::models::vision::{Rgb8, VisionModel, VisionOptions};
use wick_core::request::{GenerateRequest, PromptImage};
use wick_core::runtime::device::{DeviceChoice, Placement};
use wick_core::{Engine, EngineOptions};
use wick_fixtures::pattern;

/// How close an encoder input's embeddings must be on the two paths: `rel` bounds the largest
/// |e_device − e_exact| over the largest |e_exact|, `cos` the cosine similarity from below.
#[derive(Clone, Copy)]
struct Tol {
    rel: f32,
    cos: f64,
}

/// F32 and F16 projectors (measured: relative ≤ 5.9e-4, cosine ≥ 0.99999985).
const FLOAT_TOL: Tol = Tol { rel: 2e-3, cos: 0.99999 };
/// Q8_0 projectors, where an activation's 8-bit rounding can flip (measured: relative
/// ≤ 2.2e-2, cosine ≥ 0.9998 on the bench size, ≤ 1.6e-2 and ≥ 0.99991 on the fixtures).
const Q8_TOL: Tol = Tol { rel: 5e-2, cos: 0.9995 };

fn tol_for(proj: &str) -> Tol {
    if proj.contains("q8_0") {
        Q8_TOL
    } else {
        FLOAT_TOL
    }
}

/// The device path under test: candle's CPU device, or the GPU `WICK_TEST_DEVICE` names; None
/// (after reporting `test` skipped) when that GPU cannot be had.
fn under_test(test: &str) -> Option<(DeviceChoice, Placement)> {
    let Ok(asked) = std::env::var("WICK_TEST_DEVICE") else {
        return Some((DeviceChoice::CpuCandle, Placement::generic(Device::Cpu)));
    };
    let choice: DeviceChoice = asked.parse().expect("WICK_TEST_DEVICE");
    let p = Placement::resolve(choice, None);
    match (p.exact(), &p.notice) {
        (false, _) => Some((choice, p)),
        (true, why) => {
            common::skip(test, why.as_deref().unwrap_or("WICK_TEST_DEVICE names the exact CPU path"));
            None
        }
    }
}

/// The LFM2-VL fixtures, written once per test binary into a temporary directory.
fn fixtures() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let src = common::llama_src("vision fixtures")?;
        let dir = std::env::temp_dir().join(format!("wick-vision-device-{}", std::process::id()));
        wick_fixtures::write_vision_fixtures(&dir, &src).expect("write vision fixtures");
        Some(dir)
    })
    .as_deref()
}

/// How far apart two encodings of one input are.
struct Agreement {
    max_abs: f32,
    rel: f32,
    cos: f64,
}

fn agreement(exact: &[f32], dev: &[f32]) -> Agreement {
    assert_eq!(exact.len(), dev.len(), "embedding counts differ");
    let max_abs = exact.iter().zip(dev).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    let scale = exact.iter().map(|a| a.abs()).fold(0f32, f32::max);
    let dot: f64 = exact.iter().zip(dev).map(|(&a, &b)| a as f64 * b as f64).sum();
    let norm = |v: &[f32]| v.iter().map(|&a| a as f64 * a as f64).sum::<f64>().sqrt();
    Agreement { max_abs, rel: max_abs / scale.max(f32::MIN_POSITIVE), cos: dot / (norm(exact) * norm(dev)) }
}

/// Encodes `img` with `proj` on both paths; checks and reports each input's agreement.
fn compare(proj: &Path, dev: &Placement, images: &[Rgb8]) -> Vec<(String, bool)> {
    let exact = VisionModel::load(proj, VisionOptions::default()).expect("load exact");
    let on_dev = VisionModel::load_on(proj, VisionOptions::default(), dev).expect("load on the device");
    assert_eq!(exact.n_embd(), on_dev.n_embd());
    let name = proj.file_name().unwrap_or_default().to_string_lossy().into_owned();
    let mut report = vec![];
    for img in images {
        let plan = exact.plan(img.width, img.height).expect("plan");
        let want = exact.encode_image(&plan, img.view()).expect("encode exact");
        let got = on_dev.encode_image(&plan, img.view()).expect("encode on the device");
        assert_eq!(want.len(), got.len());
        let (mut worst_rel, mut worst_abs, mut worst_cos) = (0f32, 0f32, 1f64);
        for (w, g) in want.iter().zip(&got) {
            let a = agreement(w, g);
            worst_rel = worst_rel.max(a.rel);
            worst_abs = worst_abs.max(a.max_abs);
            worst_cos = worst_cos.min(a.cos);
        }
        let line = format!(
            "{name} {}×{} ({} inputs): max |Δ| {worst_abs:.3e}, relative {worst_rel:.3e}, cosine {worst_cos:.9}",
            img.width,
            img.height,
            want.len()
        );
        let tol = tol_for(&name);
        let ok = worst_rel <= tol.rel && worst_cos >= tol.cos;
        report.push((
            if ok { line } else { format!("{line}: OUT of relative {:e}, cosine {}", tol.rel, tol.cos) },
            ok,
        ));
    }
    report
}

/// Prints the report, then fails on any line out of tolerance.
fn check(title: &str, report: &[(String, bool)]) {
    let lines: Vec<&str> = report.iter().map(|(l, _)| l.as_str()).collect();
    eprintln!("{title}:\n  {}", lines.join("\n  "));
    let bad: Vec<&str> = report.iter().filter(|(_, ok)| !ok).map(|(l, _)| l.as_str()).collect();
    assert!(bad.is_empty(), "out of tolerance:\n  {}", bad.join("\n  "));
}

#[test]
fn embeddings_agree_with_the_exact_path_on_every_projector_type() {
    let Some((_, dev)) = under_test("vision embeddings on the device path") else { return };
    let Some(dir) = fixtures() else { return };
    let images = [pattern(200, 150, 1), pattern(333, 97, 5), pattern(1200, 900, 2)];
    let mut report = vec![];
    for proj in [
        "mmproj-tiny-lfm2-vl-f32.gguf",
        "mmproj-tiny-lfm2-vl-f16.gguf",
        "mmproj-tiny-lfm2-vl-q8_0.gguf",
        "mmproj-tiny-lfm2-vl-nonorm-q8_0.gguf",
    ] {
        report.extend(compare(&dir.join(proj), &dev, &images));
    }
    check(&format!("vision device path ({}) vs exact", dev.name()), &report);
}

#[test]
fn bench_size_projectors_agree_with_the_exact_path() {
    let Some((_, dev)) = under_test("bench-size vision on the device path") else { return };
    // LFM2-VL-450M's shapes (0.3 GB, written in seconds), removed after the check.
    let dir = std::env::temp_dir().join(format!("wick-vision-device-bench-{}", std::process::id()));
    let paths = wick_fixtures::write_vision_specs(&wick_fixtures::bench_vision_specs(), &dir)
        .expect("write the bench-size projectors");
    let mut report = vec![];
    for path in &paths {
        report.extend(compare(path, &dev, &[pattern(512, 512, 1)]));
    }
    let _ = std::fs::remove_dir_all(&dir);
    check(&format!("vision device path ({}) vs exact, bench size", dev.name()), &report);
}

const USER: &str = "<|im_start|>user\n";
const ASK: &str = "What is in the image?<|im_end|>\n<|im_start|>assistant\n";

fn image_req(engine: &Engine, images: &[&Rgb8], n: usize) -> GenerateRequest {
    let tok = engine.tokenizer();
    let mut prompt = tok.encode(USER, true, true).unwrap();
    let mut placed = vec![];
    for img in images {
        let rgb = Arc::from(&img.data[..]);
        placed.push(PromptImage { at: prompt.len(), width: img.width, height: img.height, rgb });
        prompt.extend(tok.encode("and\n", false, true).unwrap());
    }
    prompt.extend(tok.encode(ASK, false, true).unwrap());
    GenerateRequest { images: placed, ignore_eos: true, ..GenerateRequest::greedy(prompt, n) }
}

#[test]
fn the_engine_answers_an_image_prompt_as_the_exact_path_does() {
    let Some((choice, _)) = under_test("vision engine on the device path") else { return };
    let Some(dir) = fixtures() else { return };
    let (tiled, single) = (pattern(1200, 900, 2), pattern(200, 150, 1));
    let answer = |device: DeviceChoice| {
        let mut o = EngineOptions::new(dir.join("tiny-lfm2-vl-q8_0.gguf"));
        o.context_size = Some(4096);
        o.mmproj = Some(dir.join("mmproj-tiny-lfm2-vl-q8_0.gguf"));
        o.device = device;
        let engine = Engine::load(o).expect("load the VL fixture");
        assert!(engine.info().vision);
        let placed = engine.info().device.clone();
        (placed, run(&engine, image_req(&engine, &[&tiled, &single], 16)).ids)
    };
    let (exact_at, exact) = answer(DeviceChoice::Cpu);
    let (dev_at, dev) = answer(choice);
    assert_eq!((exact_at.as_str(), dev_at.as_str() != "cpu"), ("cpu", true));
    assert_eq!(dev, exact, "greedy answers differ ({dev_at} vs {exact_at})");
}
