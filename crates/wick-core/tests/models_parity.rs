//! Parity with llama.cpp on reference files written by `scripts/greedy-ref.mjs`:
//!
//!   cargo run --release -p wick-fixtures -- .cache/fixtures
//!   for f in .cache/fixtures/tiny-{llama,lfm2}-{q8_0,q4_0,f16,q4_k}.gguf .cache/models/*.gguf; do
//!     node scripts/greedy-ref.mjs $f .cache/parity/$(basename $f .gguf).json --fa off; done
//!   cargo test --release -p wick-core --test models_parity -- --ignored --nocapture
//!
//! (`--fa off`: Wick's CPU kernels round as llama.cpp does with flash attention off; with it
//! on, llama.cpp accumulates V in f16. `WICK_PARITY_DEBUG=1` prints every compared step.
//! `WICK_PARITY_DIR` reads the references from elsewhere: scripts/parity-arm64.sh points it at
//! llama.cpp's aarch64 build's, written by scripts/greedy-ref-server.mjs.)
//!
//! For each prompt, llama.cpp's greedy ids are fed back (teacher forcing) and Wick's argmax
//! must equal llama.cpp's at every step, so the free-running greedy sequences are identical.
//! The same steps also run as one ragged batch of all prompts. Probabilities of llama.cpp's
//! top tokens are compared over the first steps it recorded.

use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use serde_json::Value;
use wick_core::cache::{KvPool, SeqCache};
use wick_core::gguf::GgufFile;
use wick_core::models::{self, Model, StepSeq};

/// Absolute tolerance on the probabilities of llama.cpp's top tokens (measured ≤ 5e-5).
const PROB_TOLERANCE: f32 = 2e-3;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn probs(logits: &Tensor) -> Vec<f32> {
    let v = logits.to_vec1::<f32>().expect("logits");
    let max = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = v.iter().map(|x| (x - max).exp()).collect();
    let s: f32 = e.iter().sum();
    e.into_iter().map(|x| x / s).collect()
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().expect("array").iter().map(|x| x.as_u64().expect("id") as u32).collect()
}

struct Case {
    prompt: Vec<u32>,
    tokens: Vec<u32>,
    /// Per recorded step: (id, probability) of llama.cpp's top tokens.
    steps: Vec<Vec<(u32, f32)>>,
}

/// Per step of a case: Wick's distribution after the prompt and each fed-back token.
fn run_single(model: &dyn Model, kv: &mut KvPool, c: &Case) -> Vec<Vec<f32>> {
    let mut cache = kv.new_seq();
    let mut out = vec![];
    let mut input = c.prompt.clone();
    for &t in &c.tokens {
        let logits = model.forward(&mut [StepSeq::tokens(&input, &mut cache)], kv).expect("forward");
        out.push(probs(&logits.get(0).expect("row")));
        input = vec![t];
    }
    kv.release(&mut cache);
    out
}

/// All cases as one ragged batch per step (prefills together, then decodes together).
fn run_batched(model: &dyn Model, kv: &mut KvPool, cases: &[Case]) -> Vec<Vec<u32>> {
    let mut caches: Vec<SeqCache> = cases.iter().map(|_| kv.new_seq()).collect();
    let mut inputs: Vec<Vec<u32>> = cases.iter().map(|c| c.prompt.clone()).collect();
    let mut argmaxes = vec![vec![]; cases.len()];
    for step in 0..cases[0].tokens.len() {
        let mut batch: Vec<StepSeq> =
            inputs.iter().zip(caches.iter_mut()).map(|(t, cache)| StepSeq::tokens(t, cache)).collect();
        let logits = model.forward(&mut batch, kv).expect("batched forward");
        for (i, c) in cases.iter().enumerate() {
            argmaxes[i].push(argmax(&logits.get(i).expect("row").to_vec1::<f32>().expect("v")));
            inputs[i] = vec![c.tokens[step]];
        }
    }
    for c in &mut caches {
        kv.release(c);
    }
    argmaxes
}

#[test]
#[ignore = "needs .cache/parity/*.json from scripts/greedy-ref.mjs"]
fn greedy_and_probabilities_match_llama_cpp() {
    let dir = std::env::var_os("WICK_PARITY_DIR").map_or_else(|| repo().join(".cache/parity"), PathBuf::from);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        // WICK_PARITY_ONLY=a,b: only the references whose name contains one of these.
        .filter(|p| match std::env::var("WICK_PARITY_ONLY") {
            Ok(only) => only.split(',').any(|o| p.to_string_lossy().contains(o)),
            Err(_) => true,
        })
        .collect();
    files.sort();
    let mut failures = vec![];
    for file in files {
        let reference: Value = serde_json::from_slice(&std::fs::read(&file).expect("read")).expect("json");
        let model_path = repo().join(reference["model"].as_str().expect("model"));
        let g = GgufFile::open(&model_path).expect("open");
        let model = models::load(&g, &Device::Cpu).expect("load");
        let mut kv = KvPool::with_capacity(&model.cache_layout(), 1 << 15, &Device::Cpu).expect("kv");
        let cases: Vec<Case> = reference["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|r| Case {
                prompt: ids(&r["prompt"]),
                tokens: ids(&r["tokens"]),
                steps: r["steps"]
                    .as_array()
                    .expect("steps")
                    .iter()
                    .map(|s| {
                        s.as_array()
                            .expect("step")
                            .iter()
                            .map(|p| (p[0].as_u64().expect("id") as u32, p[1].as_f64().expect("p") as f32))
                            .collect()
                    })
                    .collect(),
            })
            .collect();
        // A reference without tokens or probabilities would compare nothing.
        assert!(
            cases.iter().all(|c| !c.tokens.is_empty() && !c.steps.is_empty()),
            "{}: a prompt with no greedy tokens or no probabilities",
            file.display()
        );
        let (mut seq_ok, mut step_bad, mut max_diff, mut min_margin) = (0, 0, 0f32, f32::INFINITY);
        for c in &cases {
            let dists = run_single(model.as_ref(), &mut kv, c);
            let bad = dists.iter().zip(&c.tokens).filter(|(d, &t)| argmax(d) != t).count();
            if std::env::var("WICK_PARITY_DEBUG").is_ok() {
                for (i, (d, top)) in dists.iter().zip(&c.steps).enumerate() {
                    let mine: Vec<(usize, f32)> =
                        top.iter().map(|&(id, _)| (id as usize, d[id as usize])).take(3).collect();
                    println!(
                        "  step {i} llama.cpp {:?} wick {mine:?} wick argmax {}",
                        &top[..3.min(top.len())],
                        argmax(d)
                    );
                }
            }
            step_bad += bad;
            if bad == 0 {
                seq_ok += 1;
            }
            for (d, top) in dists.iter().zip(&c.steps) {
                for &(id, p) in top {
                    max_diff = max_diff.max((d[id as usize] - p).abs());
                }
                if top.len() > 1 {
                    min_margin = min_margin.min(top[0].1 - top[1].1);
                }
            }
        }
        let batched = run_batched(model.as_ref(), &mut kv, &cases);
        let batch_bad: usize = batched
            .iter()
            .zip(&cases)
            .map(|(a, c)| a.iter().zip(&c.tokens).filter(|(x, y)| x != y).count())
            .sum();
        let name = file.file_stem().and_then(|s| s.to_str()).unwrap_or("?").to_string();
        println!(
            "{name:40} greedy {seq_ok}/{} sequences identical ({step_bad} steps differ; batched: {batch_bad}), max |Δp| {max_diff:.5} on top tokens, min llama.cpp top-1 margin {min_margin:.4}",
            cases.len()
        );
        if seq_ok != cases.len() || batch_bad != 0 || max_diff > PROB_TOLERANCE {
            failures.push(name);
        }
    }
    assert!(failures.is_empty(), "parity failures: {failures:?}");
}
