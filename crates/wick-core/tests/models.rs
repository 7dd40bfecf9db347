//! Model forward passes on the synthetic fixtures: loading, ragged batches, determinism, and
//! clean failures on broken files. Parity with llama.cpp itself is in `models_parity.rs` and
//! `test/parity.test.ts`.

use std::path::Path;

use candle_core::{Device, Tensor};
use wick_core::cache::{KvPool, SeqCache};
use wick_core::gguf::GgufFile;
use wick_core::models::{self, Model, StepSeq};
use wick_core::WickError;
use wick_fixtures::FixtureSpec;

mod common;

/// The standard fixture shapes written once per test run with the built-in byte vocab
/// (259 tokens), so these tests need no external files.
fn fixture_dir() -> &'static Path {
    common::engine::standard_fixtures("wick-models")
}

/// A loaded fixture with a KV pool of its own (large enough for every test's sequences).
struct Loaded {
    model: Box<dyn Model>,
    kv: KvPool,
}

impl Loaded {
    fn info(&self) -> &models::ModelHparams {
        self.model.info()
    }
    fn new_cache(&self) -> SeqCache {
        self.kv.new_seq()
    }
    fn forward(&mut self, batch: &mut [StepSeq<'_>]) -> wick_core::Result<Tensor> {
        self.model.forward(batch, &mut self.kv)
    }
}

fn load(name: &str) -> Loaded {
    let g = GgufFile::open(fixture_dir().join(name)).expect("open fixture");
    let model = models::load(&g, &Device::Cpu).expect("load fixture");
    let kv = KvPool::with_capacity(&model.cache_layout(), 1 << 16, &Device::Cpu).expect("kv pool");
    Loaded { model, kv }
}

fn step(model: &mut Loaded, tokens: &[u32], cache: &mut SeqCache) -> Vec<f32> {
    let logits = model.forward(&mut [StepSeq::tokens(tokens, cache)]).expect("forward");
    assert_eq!(logits.dims(), [1, model.info().n_vocab]);
    logits.get(0).and_then(|r| r.to_vec1::<f32>()).expect("logits")
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn argmax(v: &[f32]) -> u32 {
    (0..v.len()).max_by(|&i, &j| v[i].total_cmp(&v[j])).unwrap_or(0) as u32
}

fn row(t: &Tensor, i: usize) -> Vec<f32> {
    t.get(i).and_then(|r| r.to_vec1::<f32>()).expect("row")
}

const PROMPT_A: [u32; 7] = [1, 72, 101, 108, 108, 111, 44];
const PROMPT_B: [u32; 5] = [1, 200, 17, 99, 3];

#[test]
fn every_standard_fixture_loads_and_runs() {
    for spec in wick_fixtures::standard_specs() {
        let mut model = load(&spec.file_name);
        let info = model.info().clone();
        assert_eq!(info.n_vocab, 259, "{}", spec.file_name);
        assert_eq!(info.n_layer, spec.n_kv.len(), "{}", spec.file_name);
        assert_eq!(info.n_embd, spec.d, "{}", spec.file_name);
        assert!(info.n_params > 0);
        let mut cache = model.new_cache();
        let logits = step(&mut model, &PROMPT_A, &mut cache);
        assert!(logits.iter().all(|x| x.is_finite()), "{}: non-finite logits", spec.file_name);
        assert_eq!(cache.len(), PROMPT_A.len());
        step(&mut model, &[5], &mut cache);
        assert_eq!(cache.len(), PROMPT_A.len() + 1);
    }
}

/// A prefill of one sequence and a decode of another in one step give each sequence the
/// logits it gets alone — bit for bit on the CPU, where kernels are chosen per sequence
/// (batch invariance) — and leave both caches as running alone would.
#[test]
fn ragged_batch_matches_sequences_run_alone() {
    for name in [
        "tiny-llama-q8_0.gguf",
        "tiny-llama-f16.gguf",
        "tiny-llama-q4_k.gguf",
        "tiny-lfm2-q8_0.gguf",
        "tiny-lfm2-q4_0.gguf",
        "tiny-lfm2-f16.gguf",
        "tiny-lfm2-q4_k.gguf",
        "tiny-qwen2-q8_0.gguf",
        "tiny-qwen3-q8_0.gguf",
        "tiny-gemma3-q8_0.gguf",
        "tiny-lfm2moe-e4-q8_0.gguf",
        "tiny-lfm2moe-e8-lead2-q8_0.gguf",
    ] {
        let mut m = load(name);
        // Alone: A prefills, B prefills then decodes twice.
        let mut a = m.new_cache();
        let a0 = step(&mut m, &PROMPT_A, &mut a);
        let a1 = step(&mut m, &[9], &mut a);
        let mut b = m.new_cache();
        step(&mut m, &PROMPT_B, &mut b);
        let b1 = step(&mut m, &[42], &mut b);
        let b2 = step(&mut m, &[7], &mut b);

        // Batched: B's prompt first, then [A prefill + B decode], then [A decode + B decode].
        let (mut ca, mut cb) = (m.new_cache(), m.new_cache());
        step(&mut m, &PROMPT_B, &mut cb);
        let out = m
            .forward(&mut [StepSeq::tokens(&PROMPT_A, &mut ca), StepSeq::tokens(&[42], &mut cb)])
            .expect("ragged step");
        assert_eq!(out.dims(), [2, m.info().n_vocab]);
        let d1 = max_abs_diff(&row(&out, 0), &a0).max(max_abs_diff(&row(&out, 1), &b1));
        let out = m
            .forward(&mut [StepSeq::tokens(&[9], &mut ca), StepSeq::tokens(&[7], &mut cb)])
            .expect("decode step");
        let d2 = max_abs_diff(&row(&out, 0), &a1).max(max_abs_diff(&row(&out, 1), &b2));
        assert!(d1 == 0.0 && d2 == 0.0, "{name}: batched logits differ by {d1} / {d2}");
        assert_eq!((ca.len(), cb.len()), (PROMPT_A.len() + 1, PROMPT_B.len() + 2));
    }
}

/// A decode step of many one-token sequences (run row-parallel: each pool thread takes a
/// share of the sequences through the whole model) gives each sequence the logits it gets
/// alone, bit for bit, and twice in a row (caches and conv states written by the shares).
#[test]
fn row_parallel_decode_matches_sequences_run_alone() {
    for name in
        ["tiny-llama-q8_0.gguf", "tiny-llama-q4_k.gguf", "tiny-lfm2-q4_0.gguf", "tiny-lfm2moe-e4-q8_0.gguf"]
    {
        let mut m = load(name);
        let prompts: Vec<Vec<u32>> =
            (0..5u32).map(|i| (1..=3 + 4 * i).map(|t| (t * 7 + i) % 250 + 1).collect()).collect();
        let solo: Vec<(Vec<f32>, Vec<f32>)> = prompts
            .iter()
            .map(|p| {
                let mut c = m.new_cache();
                step(&mut m, p, &mut c);
                (step(&mut m, &[9], &mut c), step(&mut m, &[5], &mut c))
            })
            .collect();
        let mut caches: Vec<SeqCache> = prompts.iter().map(|_| m.new_cache()).collect();
        for (p, c) in prompts.iter().zip(caches.iter_mut()) {
            step(&mut m, p, c);
        }
        for (k, tok) in [9u32, 5].into_iter().enumerate() {
            let mut batch: Vec<StepSeq> =
                caches.iter_mut().map(|cache| StepSeq::tokens(std::slice::from_ref(&tok), cache)).collect();
            let out = m.forward(&mut batch).expect("decode step");
            drop(batch);
            for (i, want) in solo.iter().enumerate() {
                let want = if k == 0 { &want.0 } else { &want.1 };
                assert_eq!(max_abs_diff(&row(&out, i), want), 0.0, "{name}: sequence {i}, step {k}");
            }
        }
    }
}

/// Splitting a prompt into chunks (prefill continuing from a cache, conv state carried over)
/// gives the logits of a single prefill.
#[test]
fn chunked_prefill_matches_single_prefill() {
    for name in ["tiny-llama-f16.gguf", "tiny-lfm2-f16.gguf", "tiny-lfm2-q4_0.gguf"] {
        let mut m = load(name);
        let mut whole = m.new_cache();
        let expect = step(&mut m, &PROMPT_A, &mut whole);
        let mut parts = m.new_cache();
        step(&mut m, &PROMPT_A[..3], &mut parts);
        step(&mut m, &PROMPT_A[3..4], &mut parts);
        let got = step(&mut m, &PROMPT_A[4..], &mut parts);
        let d = max_abs_diff(&expect, &got);
        assert!(d < 1e-3, "{name}: chunked prefill differs by {d}");
        assert_eq!(argmax(&expect), argmax(&got));
    }
}

#[test]
fn greedy_decoding_is_deterministic() {
    for name in ["tiny-llama-q4_0.gguf", "tiny-lfm2-q8_0.gguf"] {
        let mut model = load(name);
        let mut run = || {
            let mut cache = model.new_cache();
            let mut logits = step(&mut model, &PROMPT_B, &mut cache);
            let mut out = vec![];
            for _ in 0..24 {
                let t = argmax(&logits);
                out.push(t);
                logits = step(&mut model, &[t], &mut cache);
            }
            out
        };
        let first = run();
        assert_eq!(first, run(), "{name}");
    }
}

/// `output_norm.weight` (ollama-converted files) is accepted as LFM2's final norm.
#[test]
fn lfm2_final_norm_under_either_name() {
    for (a, b) in [
        ("tiny-lfm2-q8_0.gguf", "tiny-lfm2-outnorm-q8_0.gguf"),
        ("tiny-lfm2moe-e8-lead2-q8_0.gguf", "tiny-lfm2moe-e8-lead2-outnorm-q8_0.gguf"),
    ] {
        let (mut a, mut b) = (load(a), load(b));
        let (mut ca, mut cb) = (a.new_cache(), b.new_cache());
        assert_eq!(step(&mut a, &PROMPT_A, &mut ca), step(&mut b, &PROMPT_A, &mut cb));
    }
}

/// Greedy decoding of several MoE sequences batched together, continuously (sequences join
/// mid-way with their prefill while others decode), gives each exactly its solo tokens.
#[test]
fn moe_continuous_batching_matches_solo_runs() {
    for name in ["tiny-lfm2moe-e4-q8_0.gguf", "tiny-lfm2moe-e8-lead2-q8_0.gguf"] {
        let mut m = load(name);
        let prompts: [&[u32]; 3] = [&PROMPT_A, &PROMPT_B, &[1, 33, 34, 35, 36, 37, 38, 39, 40]];
        let n = 16;
        let mut solo = |p: &[u32]| {
            let mut cache = m.new_cache();
            let mut logits = step(&mut m, p, &mut cache);
            (0..n)
                .map(|_| {
                    let t = argmax(&logits);
                    logits = step(&mut m, &[t], &mut cache);
                    t
                })
                .collect::<Vec<_>>()
        };
        let want: Vec<Vec<u32>> = prompts.iter().map(|p| solo(p)).collect();
        // Sequence i joins at step 3·i; every step runs all active sequences as one batch.
        let mut caches: Vec<SeqCache> = prompts.iter().map(|_| m.new_cache()).collect();
        let mut got: Vec<Vec<u32>> = vec![vec![]; prompts.len()];
        let mut next: Vec<Vec<u32>> = prompts.iter().map(|p| p.to_vec()).collect();
        for s in 0.. {
            let active: Vec<usize> = (0..prompts.len()).filter(|&i| s >= 3 * i && got[i].len() < n).collect();
            if active.is_empty() && got.iter().all(|g| g.len() == n) {
                break;
            }
            let mut batch: Vec<StepSeq> = caches
                .iter_mut()
                .enumerate()
                .filter(|(i, _)| active.contains(i))
                .map(|(i, cache)| StepSeq::tokens(&next[i], cache))
                .collect();
            let out = m.forward(&mut batch).expect("batched step");
            drop(batch);
            for (r, &i) in active.iter().enumerate() {
                let t = argmax(&row(&out, r));
                got[i].push(t);
                next[i] = vec![t];
            }
        }
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn default_cache_is_adopted_and_foreign_cache_rejected() {
    let mut llama = load("tiny-llama-q8_0.gguf");
    let mut lfm2 = load("tiny-lfm2-q8_0.gguf");
    let mut fresh = SeqCache::default();
    let x = step(&mut llama, &PROMPT_A, &mut fresh);
    let mut made = llama.new_cache();
    assert_eq!(x, step(&mut llama, &PROMPT_A, &mut made));
    // The llama's pool handed to the lfm2.
    let err = lfm2.model.forward(&mut [StepSeq::tokens(&[1], &mut lfm2.kv.new_seq())], &mut llama.kv);
    assert_eq!(err.unwrap_err().code(), "INVALID_REQUEST");
    // A 2-layer llama cache in a 6-layer lfm2.
    let err = lfm2.forward(&mut [StepSeq::tokens(&[1], &mut fresh)]).unwrap_err();
    assert_eq!(err.code(), "INVALID_REQUEST", "{err}");
}

#[test]
fn invalid_batches_are_rejected() {
    let mut m = load("tiny-lfm2-q4_0.gguf");
    assert_eq!(m.forward(&mut []).unwrap_err().code(), "INVALID_REQUEST");
    let mut c = m.new_cache();
    assert_eq!(m.forward(&mut [StepSeq::tokens(&[], &mut c)]).unwrap_err().code(), "INVALID_REQUEST");
    let err = m.forward(&mut [StepSeq::tokens(&[1, 259], &mut c)]).unwrap_err();
    assert!(matches!(err, WickError::InvalidRequest(ref s) if s.contains("259")), "{err}");
    assert!(c.is_empty(), "a rejected step must not advance the cache");
    assert_eq!(m.kv.n_used(), 0, "nor take KV blocks");
}

#[test]
fn broken_files_fail_with_clear_errors() {
    let dir = fixture_dir().join("bad");
    let bad = wick_fixtures::write_bad_files(&dir).expect("write bad files");
    assert!(bad.len() >= 6);
    for b in bad {
        let name = b.path.file_name().and_then(|n| n.to_str()).unwrap_or("?").to_string();
        let err = match GgufFile::open(&b.path) {
            Err(e) => {
                assert!(b.fails_at_open, "{name}: expected open to succeed, got {e}");
                e
            }
            Ok(g) => {
                assert!(!b.fails_at_open, "{name}: expected open to fail");
                match models::load(&g, &Device::Cpu) {
                    Err(e) => e,
                    Ok(_) => panic!("{name}: loaded a broken model"),
                }
            }
        };
        let msg = err.to_string();
        assert!(msg.contains(b.expect), "{name}: error `{msg}` does not mention `{}`", b.expect);
        let want =
            if name.contains("unknown-arch") { "UNSUPPORTED_ARCHITECTURE" } else { "MODEL_LOAD_FAILED" };
        assert_eq!(err.code(), want, "{name}: {msg}");
    }
}

/// With llama.cpp's vocab files present (scripts/llama-src.sh), the standard fixtures carry
/// the real tokenizers and load with their full vocabularies.
#[test]
fn standard_fixtures_with_real_vocabs() {
    let Some(src) = common::llama_src("standard_fixtures_with_real_vocabs") else { return };
    let dir = fixture_dir().join("real-vocab");
    let written = wick_fixtures::write_standard(&dir, &src).expect("write standard fixtures");
    let specs: Vec<FixtureSpec> = wick_fixtures::standard_specs();
    assert_eq!(written.len(), specs.len());
    for (path, spec) in written.iter().zip(&specs) {
        let g = GgufFile::open(path).expect("open");
        let tokens = g.metadata.str_array("tokenizer.ggml.tokens").expect("tokens").map_or(0, |t| t.len());
        let model = models::load(&g, &Device::Cpu).expect("load");
        assert_eq!(model.info().n_vocab, tokens, "{}", spec.file_name);
        let expect = match spec.vocab_file {
            v if v.contains("spm") => 32000,
            v if v.contains("qwen2") => 151936,
            _ => 128256,
        };
        assert_eq!(tokens, expect, "{}", spec.file_name);
    }
}
