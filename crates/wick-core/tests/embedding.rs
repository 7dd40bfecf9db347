//! Embedding requests in the scheduler: batched with generation and each other without
//! changing a bit, the bidirectional path really bidirectional, no KV kept, and clean refusals.
//! Parity with llama.cpp (`llama-server --embeddings`) is in `test/embeddings-parity.test.ts`.

use wick_core::embed::{EmbedOptions, Pooling};
use wick_core::request::GenerateRequest;
use wick_core::runtime::device::DeviceChoice;
use wick_core::{Engine, WickError};

mod common;
use common::engine::{cached_fixture, collect, run, run_together};

const FIXTURES: [&str; 4] = [
    "tiny-lfm2-embed-q8_0.gguf",
    "tiny-lfm2-colbert-q8_0.gguf",
    "tiny-qwen3-rerank-q8_0.gguf",
    "tiny-lfm2-q8_0.gguf",
];

/// Every other architecture Wick serves, embedded with its default (mean) pooling.
const GENERATIVE: [&str; 6] = [
    "tiny-llama-q8_0.gguf",
    "tiny-qwen2-q8_0.gguf",
    "tiny-qwen3-q8_0.gguf",
    "tiny-gemma3-q8_0.gguf",
    "tiny-lfm2moe-e8-lead2-q8_0.gguf",
    "tiny-lfm2-q4_k.gguf",
];

fn embed_req(prompt: Vec<u32>, pooling: Option<Pooling>) -> GenerateRequest {
    GenerateRequest::embedding(prompt, EmbedOptions { pooling, ..EmbedOptions::default() })
}

/// Deterministic prompts of the given lengths within the fixture vocabulary.
fn prompts(engine: &Engine, lens: &[usize]) -> Vec<Vec<u32>> {
    let n = engine.info().model.n_vocab as u32;
    lens.iter()
        .enumerate()
        .map(|(k, &len)| (0..len as u32).map(|i| (i * 7919 + k as u32 * 104729 + 11) % n).collect())
        .collect()
}

fn bits(v: &[Vec<f32>]) -> Vec<Vec<u32>> {
    v.iter().map(|r| r.iter().map(|x| x.to_bits()).collect()).collect()
}

#[test]
fn embeddings_batched_with_generation_and_each_other_equal_their_runs_alone() {
    for name in FIXTURES.into_iter().chain(GENERATIVE) {
        let Some(engine) = cached_fixture("embedding batching", name, |_| {}) else { return };
        let only = engine.info().embedding.as_ref().is_some_and(|e| e.only);
        let ps = prompts(&engine, &[1, 5, 37, 130, 16]);
        let alone: Vec<_> = ps.iter().map(|p| run(&engine, embed_req(p.clone(), None)).vectors).collect();
        // Every input's vectors, all submitted in one schedule, with generations beside them on
        // a generative model (their tokens must not change either).
        let mut reqs: Vec<GenerateRequest> = ps.iter().map(|p| embed_req(p.clone(), None)).collect();
        let gens: Vec<GenerateRequest> = match only {
            true => vec![],
            false => prompts(&engine, &[9, 60]).into_iter().map(|p| GenerateRequest::greedy(p, 12)).collect(),
        };
        let gen_alone: Vec<Vec<u32>> = gens.iter().map(|g| run(&engine, g.clone()).ids).collect();
        reqs.extend(gens);
        let together = run_together(&engine, reqs);
        for (i, a) in alone.iter().enumerate() {
            assert!(!a.is_empty() && a.iter().all(|v| v.iter().all(|x| x.is_finite())), "{name}: input {i}");
            assert_eq!(bits(a), bits(&together[i].vectors), "{name}: input {i} batched differs from alone");
        }
        for (k, ids) in gen_alone.iter().enumerate() {
            assert_eq!(ids, &together[ps.len() + k].ids, "{name}: a generation beside embeddings changed");
        }
        // Nothing kept: the pool's blocks all came back, none are cached.
        let m = engine.metrics();
        assert_eq!(m.kv_blocks_used, 0, "{name}");
    }
}

#[test]
fn widths_and_pooling_follow_the_file() {
    let cases = [
        ("tiny-lfm2-embed-q8_0.gguf", Pooling::Cls, 64, 1),
        ("tiny-lfm2-colbert-q8_0.gguf", Pooling::None, 32, 9),
        ("tiny-qwen3-rerank-q8_0.gguf", Pooling::Rank, 2, 1),
        ("tiny-lfm2-q8_0.gguf", Pooling::Mean, 64, 1),
    ];
    for (name, pooling, width, rows) in cases {
        let Some(engine) = cached_fixture("embedding widths", name, |_| {}) else { return };
        assert_eq!(engine.info().embedding.as_ref().map(|e| e.default_pooling), Some(pooling), "{name}");
        let p = prompts(&engine, &[9]).remove(0);
        let v = run(&engine, embed_req(p, None)).vectors;
        assert_eq!((v.len(), v[0].len()), (rows, width), "{name}");
        match pooling {
            Pooling::Rank => {
                assert!((v[0].iter().sum::<f32>() - 1.0).abs() < 1e-5, "{name}: a softmax of two")
            }
            Pooling::None => {}
            _ => {
                assert!((v[0].iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-5, "{name}: L2-normalised")
            }
        }
    }
}

/// The first token's state depends on the tokens after it only when attention and the conv
/// look both ways.
#[test]
fn a_bidirectional_model_reads_the_whole_input_a_causal_one_does_not() {
    for (name, bidirectional) in [("tiny-lfm2-embed-q8_0.gguf", true), ("tiny-lfm2-q8_0.gguf", false)] {
        let Some(engine) = cached_fixture("bidirectional embeddings", name, |_| {}) else { return };
        let a = vec![5, 17, 29, 41, 53];
        let mut b = a.clone();
        *b.last_mut().unwrap() = 77;
        let first = |p: Vec<u32>| run(&engine, embed_req(p, Some(Pooling::Cls))).vectors;
        let (ea, eb) = (first(a.clone()), first(b));
        assert_eq!(ea != eb, bidirectional, "{name}: the first token's embedding");
        // Per token: a change at token 2 reaches the earlier tokens only looking both ways.
        let mut c = a.clone();
        c[2] = 99;
        let per_token = |p: Vec<u32>| run(&engine, embed_req(p, Some(Pooling::None))).vectors;
        let (ta, tc) = (per_token(a.clone()), per_token(c));
        for t in 0..2 {
            assert_eq!(ta[t] != tc[t], bidirectional, "{name}: token {t} sees token 2");
        }
        assert_ne!(ta[2], tc[2], "{name}");
    }
}

#[test]
fn refusals_are_clear() {
    let Some(embed) = cached_fixture("embedding refusals", "tiny-lfm2-embed-q8_0.gguf", |o| {
        o.context_size = Some(64);
    }) else {
        return;
    };
    let invalid = |r: Result<wick_core::engine::SequenceHandle, WickError>, want: &str| match r {
        Err(WickError::InvalidRequest(m)) => assert!(m.contains(want), "{m}"),
        Err(e) => panic!("expected INVALID_REQUEST ({want}), got {e}"),
        Ok(_) => panic!("expected INVALID_REQUEST ({want})"),
    };
    invalid(embed.submit(GenerateRequest::greedy(vec![1, 2, 3], 4)), "does not generate text");
    invalid(embed.submit(embed_req(vec![1, 2], Some(Pooling::Rank))), "classifier head");
    invalid(embed.submit(embed_req(vec![], None)), "empty");
    match embed.submit(embed_req(vec![3; 65], None)) {
        Err(WickError::ContextLengthExceeded { prompt_tokens: 65, context_size: 64, max_tokens: None }) => {}
        Err(e) => panic!("expected CONTEXT_LENGTH_EXCEEDED, got {e}"),
        Ok(_) => panic!("expected CONTEXT_LENGTH_EXCEEDED"),
    }
    // The whole context is allowed (nothing is generated after it).
    let full = collect(embed.submit(embed_req(vec![3; 64], None)).expect("submit")).expect("embed");
    assert_eq!(full.vectors.len(), 1);
}

/// The device path (candle's ops, what CUDA and Metal run) on candle's CPU device gives the
/// same embeddings within float-order tolerance, bidirectional model included.
#[test]
fn the_device_path_embeds_as_the_exact_path_does() {
    for name in FIXTURES {
        let Some(exact) = cached_fixture("device-path embeddings", name, |_| {}) else { return };
        let Some(dev) =
            cached_fixture("device-path embeddings", name, |o| o.device = DeviceChoice::CpuCandle)
        else {
            return;
        };
        for p in prompts(&exact, &[3, 40]) {
            let (a, b) =
                (run(&exact, embed_req(p.clone(), None)).vectors, run(&dev, embed_req(p, None)).vectors);
            assert_eq!(a.len(), b.len(), "{name}");
            for (x, y) in a.iter().zip(&b) {
                let dot: f64 = x.iter().zip(y).map(|(p, q)| *p as f64 * *q as f64).sum();
                let n = |v: &[f32]| v.iter().map(|p| (*p as f64).powi(2)).sum::<f64>().sqrt();
                let cos = dot / (n(x) * n(y));
                assert!(cos > 0.9999, "{name}: cosine {cos}");
            }
        }
    }
}

/// An embedding larger than what a step's decodes leave of the token budget still runs while a
/// generation goes on (sharing the time), and the generation keeps going meanwhile.
#[test]
fn an_embedding_over_the_step_budget_is_not_held_back_by_a_generation() {
    let Some(engine) = cached_fixture("embedding beside a generation", "tiny-lfm2-q8_0.gguf", |o| {
        o.step_tokens = 16;
    }) else {
        return;
    };
    let ps = prompts(&engine, &[8, 100, 120, 90]);
    engine.pause().expect("pause");
    let gen =
        engine.submit(GenerateRequest { ignore_eos: true, ..GenerateRequest::greedy(ps[0].clone(), 400) });
    let embeds: Vec<_> =
        ps[1..].iter().map(|p| engine.submit(embed_req(p.clone(), None)).expect("submit")).collect();
    engine.resume().expect("resume");
    let gen = std::thread::spawn(move || {
        let out = collect(gen.expect("submit")).expect("generation");
        (out.ids.len(), std::time::Instant::now())
    });
    let mut last_embedding = std::time::Instant::now();
    for h in embeds {
        let out = collect(h).expect("embedding");
        assert_eq!(out.vectors.len(), 1);
        last_embedding = std::time::Instant::now();
    }
    let (generated, gen_done) = gen.join().expect("generation thread");
    assert_eq!(generated, 400);
    assert!(last_embedding < gen_done, "the embeddings waited for the generation to end");
}
