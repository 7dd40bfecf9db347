//! Partial offload (llama-server's `-ngl N` below the block count): the first blocks run on
//! the exact CPU path, the last N on the device path, the activations cross once. Checked on
//! candle's CPU device (or the GPU `WICK_TEST_DEVICE` names) with the device path's own
//! measures (`common::device`): agreement with the exact path on every fixture architecture
//! at several split points, batched runs equal runs alone, a reused prefix restores the same
//! state — KV rows and conv states on both sides of the split.

use wick_core::runtime::device::{DeviceChoice, Placement};

mod common;
use common::device::*;
use common::engine::{run, run_together};

/// The splits a fixture of `n` blocks is checked at: one block on the device, half of them,
/// and every block with the output head left on the CPU (`-ngl n`, llama-server's reading).
fn splits(n: usize) -> Vec<usize> {
    let mut v = vec![1, n / 2, n];
    v.dedup();
    v.retain(|&k| k > 0);
    v
}

#[test]
fn split_models_agree_with_the_exact_path() {
    let Some(dev_at) = under_test("split_models_agree_with_the_exact_path") else { return };
    let p = prompt(80);
    let mut report = Vec::new();
    for spec in wick_fixtures::standard_specs() {
        let path = fixture_dir().join(&spec.file_name);
        let mut exact = load(&path, &Placement::cpu());
        let n = n_layer(&path);
        for k in splits(n) {
            let at = dev_at.with_gpu_layers(Some(k));
            let split = at.fit_layers(n).split();
            assert!(split.is_some_and(|s| s.on_device() == k), "{}: -ngl {k} splits", spec.file_name);
            let mut dev = load(&path, &at);
            let a = compare(&mut exact, &mut dev, &p, 48, 16);
            report.push(verdict(&format!("{} -ngl {k}", spec.file_name), &a));
        }
    }
    let lines: Vec<&str> = report.iter().map(|r| r.as_deref().unwrap_or_else(|e| e)).collect();
    eprintln!("split models ({}) vs exact:\n  {}", dev_at.name(), lines.join("\n  "));
    let failed: Vec<&String> = report.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(failed.is_empty(), "{} splits off:\n{}", failed.len(), lines.join("\n"));
}

/// Each split point runs a different mix of the two paths: on a fixture whose device path is
/// not bit-equal to the exact path in any block (tiny-lfm2's F16 weights: candle's f16 products
/// sum in their own order; the tiny llama's blocks are now bit-equal, the norms being ggml's),
/// the probabilities along a prompt and 16 decodes at `-ngl 0` (exact), each split and every
/// layer with the head (`-ngl all`) all differ — the split is where it says, the head moves only past the block count.
#[test]
fn each_split_point_places_the_blocks_it_names() {
    let Some(dev_at) = under_test("each_split_point_places_the_blocks_it_names") else { return };
    let path = fixture_dir().join("tiny-lfm2-f16.gguf");
    let n = n_layer(&path);
    let p = prompt(80);
    let follow: Vec<u32> = (0..16).map(|i| 3 + (i * 53) % 250).collect();
    let logits: Vec<(usize, Vec<Vec<f32>>)> = (0..=n + 1)
        .map(|k| (k, probs_along(&mut load(&path, &dev_at.with_gpu_layers(Some(k))), &p, 48, &follow)))
        .collect();
    for (i, (ka, a)) in logits.iter().enumerate() {
        for (kb, b) in &logits[i + 1..] {
            assert!(a != b, "-ngl {ka} and -ngl {kb} give the same probabilities");
        }
    }
}

/// Where the blocks split changes where each sequence's state lives, not what a batch does:
/// each batch check of the device path, at a split in the middle.
#[test]
fn a_split_model_batches_and_reuses_prefixes_as_each_side_does() {
    let Some(dev_at) = under_test("a_split_model_batches_and_reuses_prefixes_as_each_side_does") else {
        return;
    };
    // The fixtures have 4 blocks at most: -ngl 2 splits every one of them in the middle.
    let at = dev_at.with_gpu_layers(Some(2));
    ragged_batch_equals_each_alone(&at);
    batched_decodes_equal_each_alone(&at);
    reused_prefix_restores_the_state(&at);
}

/// The engine with `-ngl` below SmolLM2's 30 blocks: it reports how many are on the device,
/// batches invariantly, and its greedy text is the device path's.
#[test]
fn the_engine_serves_a_split_model() {
    let t = "the_engine_serves_a_split_model";
    let Some(split) = common::engine::smollm2(t, |o| {
        o.device = DeviceChoice::CpuCandle;
        o.gpu_layers = Some(12);
    }) else {
        return;
    };
    assert_eq!(split.info().device, "cpu-candle");
    assert_eq!(split.info().device_layers, Some(12));
    let Some(exact) = common::engine::smollm2(t, |_| {}) else { return };
    assert_eq!(exact.info().device_layers, None);
    let prompts = ["The capital of France is", "def fibonacci(n):"];
    let req = |e: &wick_core::Engine, text: &str| {
        let ids = e.tokenizer().encode(text, true, false).expect("encode");
        let mut r = wick_core::request::GenerateRequest::greedy(ids, 12);
        r.ignore_eos = true;
        r
    };
    let together = run_together(&split, prompts.iter().map(|p| req(&split, p)).collect());
    for (p, out) in prompts.iter().zip(together) {
        assert_eq!(out.text, run(&split, req(&split, p)).text, "batched text differs for {p:?}");
        eprintln!("{p:?}: split {:?}, exact {:?}", out.text, run(&exact, req(&exact, p)).text);
    }
}
