//! The device path (`runtime::device`: candle's device-generic ops, what CUDA and Metal run)
//! checked on candle's CPU device against the exact path, on every fixture architecture and on
//! the real models; batched runs equal runs alone; prefix reuse restores the same state.
//!
//! The measure: both paths read the same tokens — the exact path's greedy continuation
//! ("teacher forcing"), so one flip cannot snowball — and at every step
//! - the next-token probabilities differ by at most `PROB_TOL` (max over the vocabulary);
//! - the greedy choice is the same wherever the exact path's top-1 leads its runner-up by
//!   more than `2·PROB_TOL` (a closer call is a tie to within the stated tolerance).
//!
//! Free-running greedy text is also compared up to the first such near-tie.
//!
//! `WICK_TEST_DEVICE=cuda` (or `metal`), in a build with that backend, runs the same checks on
//! the GPU instead of candle's CPU device (`scripts/gpu-check.sh`); without the GPU or the
//! backend those tests report themselves skipped.
//!
//! Why a tolerance and not bits: candle's kernels sum in their own orders (f32 RMSNorm sums
//! where ggml sums in f64, libm `exp` in SiLU and softmax where ggml has its own `expf`,
//! attention in GEMM order), and on SmolLM2 a one-ulp difference anywhere flips a q8 rounding
//! in the next quantized matmul and moves a probability by ~1e-2. The exact path is the one
//! equal to llama.cpp bit for bit; llama.cpp's own CUDA backend parts from its CPU backend
//! the same way.

use wick_core::gguf::GgufFile;
use wick_core::runtime::device::{DeviceChoice, Placement};

mod common;
use common::device::*;
use common::engine::{repo, run, run_together};

#[test]
fn every_fixture_architecture_agrees_with_the_exact_path() {
    let p = prompt(80);
    let Some(dev_at) = under_test("every_fixture_architecture_agrees_with_the_exact_path") else { return };
    let mut report = Vec::new();
    for spec in wick_fixtures::standard_specs() {
        let path = fixture_dir().join(&spec.file_name);
        let (mut exact, mut dev) = (load(&path, &Placement::cpu()), load(&path, &dev_at));
        // Chunks of 48 cross the block boundary inside a step (conv snapshots, two-block
        // gathers) and attend over a cached prefix.
        let a = compare(&mut exact, &mut dev, &p, 48, 16);
        report.push(
            verdict(&spec.file_name, &a)
                .map(|line| line + &same_bits_as_the_check_device(&path, &dev_at, &mut dev, &p)),
        );
    }
    let lines: Vec<&str> = report.iter().map(|r| r.as_deref().unwrap_or_else(|e| e)).collect();
    eprintln!("device path ({}) vs exact:\n  {}", dev_at.name(), lines.join("\n  "));
    let failed: Vec<&String> = report.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(failed.is_empty(), "{} fixtures off:\n{}", failed.len(), lines.join("\n"));
}

/// On a GPU, how many of the probability rows along the prompt and 16 decodes equal candle's CPU
/// device's bit for bit (Wick's ops there run their host twins, so every op of a quantized model
/// should; f16 weights take cuBLAS): a note on the fixture's line, no verdict. Empty on the CPU.
fn same_bits_as_the_check_device(
    path: &std::path::Path,
    at: &Placement,
    dev: &mut Loaded,
    p: &[u32],
) -> String {
    if at.device().is_cpu() {
        return String::new();
    }
    let follow: Vec<u32> = (0..16).map(|i| 3 + (i * 53) % 250).collect();
    let on_gpu = probs_along(dev, p, 48, &follow);
    let on_cpu = probs_along(&mut load(path, &Placement::generic(candle_core::Device::Cpu)), p, 48, &follow);
    let same = on_gpu
        .iter()
        .zip(&on_cpu)
        .filter(|(a, b)| a.iter().map(|v| v.to_bits()).eq(b.iter().map(|v| v.to_bits())))
        .count();
    format!("; bit-equal to the check device on {same}/{} rows", on_gpu.len())
}

/// The real models: three prompts each, 32 tokens.
fn real_model_agrees(test: &str, file: &str) {
    let path = repo().join(".cache/models").join(file);
    if !path.exists() {
        common::skip(test, &format!("{} is missing (python3 scripts/fetch_models.py)", path.display()));
        return;
    }
    let Some(dev_at) = under_test(test) else { return };
    let g = GgufFile::open(&path).expect("open");
    let tok = wick_core::tokenizer::Tokenizer::from_gguf(&g.metadata).expect("tokenizer");
    let (mut exact, mut dev) = (load(&path, &Placement::cpu()), load(&path, &dev_at));
    let mut report = vec![];
    for text in PROMPTS {
        let p = tok.encode(text, true, false).expect("encode");
        report.push(check(&format!("{file} {text:?}"), &compare(&mut exact, &mut dev, &p, 512, 32)));
    }
    eprintln!("{}", report.join("\n"));
}

#[test]
fn a_ragged_batch_equals_its_sequences_run_alone_on_the_device_path() {
    let Some(dev_at) = under_test("a_ragged_batch_equals_its_sequences_run_alone_on_the_device_path") else {
        return;
    };
    ragged_batch_equals_each_alone(&dev_at);
}

/// `batched_decodes_equal_each_alone` (common/device.rs) on the device path.
#[test]
fn decodes_batched_together_equal_each_alone_on_the_device_path() {
    let Some(dev_at) = under_test("decodes_batched_together_equal_each_alone_on_the_device_path") else {
        return;
    };
    batched_decodes_equal_each_alone(&dev_at);
}

#[test]
fn a_reused_prefix_restores_the_same_state_on_the_device_path() {
    let Some(dev_at) = under_test("a_reused_prefix_restores_the_same_state_on_the_device_path") else {
        return;
    };
    reused_prefix_restores_the_state(&dev_at);
}

/// The engine on `cpu-candle`: it reports the device, and continuous batching gives each
/// sequence the text it gets alone.
#[test]
fn the_engine_serves_on_the_device_path_and_batches_invariantly() {
    let t = "the_engine_serves_on_the_device_path_and_batches_invariantly";
    let Some(dev) = common::engine::smollm2(t, |o| o.device = DeviceChoice::CpuCandle) else { return };
    assert_eq!(dev.info().device, "cpu-candle");
    assert_eq!(dev.info().device_notice, None);
    let req = |text: &str| {
        let ids = dev.tokenizer().encode(text, true, false).expect("encode");
        let mut r = wick_core::request::GenerateRequest::greedy(ids, 16);
        r.ignore_eos = true;
        r
    };
    let together = run_together(&dev, PROMPTS.iter().map(|p| req(p)).collect());
    for (p, out) in PROMPTS.iter().zip(together) {
        assert_eq!(out.text, run(&dev, req(p)).text, "batched text differs for {p:?}");
    }
}

const PROMPTS: [&str; 3] =
    ["The capital of France is", "def fibonacci(n):", "Three things to pack for a hike in the rain:"];

#[test]
fn smollm2_agrees_with_the_exact_path() {
    real_model_agrees("smollm2_agrees_with_the_exact_path", "SmolLM2-135M-Instruct.Q4_1.gguf");
}

#[test]
fn gemma3_agrees_with_the_exact_path() {
    real_model_agrees("gemma3_agrees_with_the_exact_path", "gemma-3-270m-q4_k_m.gguf");
}
