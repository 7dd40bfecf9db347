//! Speculative decoding (n-gram drafts verified in one step) changes nothing but speed: on
//! every fixture architecture and quant type, and on the real models, the tokens with it on
//! equal the tokens with it off — greedy, sampled with a seed, and batched — while drafts were
//! both accepted and rejected (LFM2: rejections inside the conv window roll its state back).

use std::path::Path;

use candle_core::Device;
use wick_core::cache::{KvPool, KvType, KvTypes, SeqCache};
use wick_core::gguf::GgufFile;
use wick_core::metrics::MetricsSnapshot;
use wick_core::models::{self, Model, StepSeq};
use wick_core::request::SpecOptions;
use wick_core::sampling::SamplingParams;
use wick_core::{Engine, EngineOptions};

mod common;
use common::engine::{repo, run, run_together, sampled, spec_req};

fn fixture_dir() -> &'static Path {
    common::engine::standard_fixtures("wick-speculative")
}

fn load(path: &Path) -> Engine {
    load_as(path, KvTypes::F16)
}

fn load_as(path: &Path, kv_types: KvTypes) -> Engine {
    let mut o = EngineOptions::new(path);
    o.context_size = Some(1024);
    o.max_sequences = 4;
    o.kv_types = kv_types;
    Engine::load(o).expect("load")
}

/// Drafts of up to 6 tokens from 1- to 3-grams: on the fixtures' looping output most steps
/// draft, and both outcomes come often.
fn spec() -> Option<SpecOptions> {
    Some(SpecOptions { draft_max: 6, draft_min: 1, ngram_min: 1, ngram_max: 3, ..SpecOptions::ngram(0) })
}

/// A prompt that repeats itself, as copy-heavy work does, cut so the continuation may or may
/// not go on repeating.
fn prompt(seed: u32) -> Vec<u32> {
    let phrase: Vec<u32> = (0..13).map(|i| 3 + (i * 37 + seed * 11) % 250).collect();
    std::iter::once(1).chain(phrase.iter().cycle().take(13 * 3 + 5).copied()).collect()
}

struct Counts {
    drafted: usize,
    accepted: usize,
}

fn counts(before: MetricsSnapshot, after: MetricsSnapshot) -> Counts {
    Counts {
        drafted: after.spec_draft_tokens_total - before.spec_draft_tokens_total,
        accepted: after.spec_accepted_tokens_total - before.spec_accepted_tokens_total,
    }
}

#[test]
fn tokens_with_speculation_equal_tokens_without_on_every_fixture() {
    let (mut report, mut all_drafted, mut all_accepted) = (vec![], 0, 0);
    for spec_file in wick_fixtures::standard_specs() {
        let name = spec_file.file_name;
        let engine = load(&fixture_dir().join(&name));
        let (mut drafted, mut accepted) = (0, 0);
        for seed in 0..3 {
            let p = prompt(seed);
            for sampling in [SamplingParams::greedy(), sampled(7 + seed as u64)] {
                let plain = run(&engine, spec_req(&p, 40, sampling.clone(), None));
                let before = engine.metrics();
                let fast = run(&engine, spec_req(&p, 40, sampling.clone(), spec()));
                let c = counts(before, engine.metrics());
                (drafted, accepted) = (drafted + c.drafted, accepted + c.accepted);
                let how = if sampling.temperature == 0.0 { "greedy" } else { "sampled" };
                assert_eq!(
                    plain.ids, fast.ids,
                    "{name}: {how} tokens with speculation differ (prompt {seed})"
                );
                assert_eq!(plain.text, fast.text, "{name}: {how} text with speculation differs");
            }
        }
        report.push(format!("{name}: {accepted} of {drafted} drafted tokens accepted"));
        (all_drafted, all_accepted) = (all_drafted + drafted, all_accepted + accepted);
    }
    eprintln!("{}", report.join("\n"));
    // Random weights seldom repeat themselves: most fixtures reject nearly every draft (the
    // oracle test below accepts on every one), some accept often.
    assert!(all_accepted > 50 && all_accepted < all_drafted / 2, "{all_accepted} of {all_drafted} accepted");
}

#[test]
fn a_batch_with_speculation_gives_each_sequence_its_tokens_alone_without() {
    for name in ["tiny-lfm2-q8_0.gguf", "tiny-llama-f16.gguf", "tiny-lfm2moe-e4-q8_0.gguf"] {
        let engine = load(&fixture_dir().join(name));
        // Three: from two per kernel thread on, the batch decodes row-parallel without drafts.
        let prompts: Vec<Vec<u32>> = (0..3).map(prompt).collect();
        let alone: Vec<Vec<u32>> = prompts
            .iter()
            .map(|p| run(&engine, spec_req(p, 48, SamplingParams::greedy(), None)).ids)
            .collect();
        // Two with speculation and one without, in one schedule.
        let reqs = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| spec_req(p, 48, SamplingParams::greedy(), if i % 2 == 0 { spec() } else { None }))
            .collect();
        let before = engine.metrics();
        let together = run_together(&engine, reqs);
        assert!(
            engine.metrics().spec_drafts_total > before.spec_drafts_total,
            "{name}: nothing was drafted in the batch"
        );
        for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
            assert_eq!(a, &t.ids, "{name}: sequence {i} in a batch with speculation differs from alone");
        }
    }
}

#[test]
fn a_draft_running_into_the_token_limit_stops_at_it() {
    let engine = load(&fixture_dir().join("tiny-lfm2-q8_0.gguf"));
    for n in [1, 2, 3, 7] {
        let p = prompt(1);
        let plain = run(&engine, spec_req(&p, n, SamplingParams::greedy(), None));
        let fast = run(&engine, spec_req(&p, n, SamplingParams::greedy(), spec()));
        assert_eq!(plain.ids, fast.ids, "max_tokens {n}");
        assert_eq!(fast.ids.len(), n, "max_tokens {n}");
    }
}

#[test]
fn bad_settings_are_refused() {
    let engine = load(&fixture_dir().join("tiny-llama-q8_0.gguf"));
    let p = prompt(0);
    for bad in [
        SpecOptions { draft_max: 65, ..SpecOptions::ngram(4) },
        SpecOptions { draft_min: 5, ..SpecOptions::ngram(4) },
        SpecOptions { ngram_min: 0, ..SpecOptions::ngram(4) },
        SpecOptions { ngram_min: 4, ngram_max: 2, ..SpecOptions::ngram(4) },
    ] {
        let err = engine.submit(spec_req(&p, 4, SamplingParams::greedy(), Some(bad))).err();
        assert!(
            matches!(err, Some(wick_core::WickError::InvalidRequest(ref m)) if m.contains("speculative")),
            "{bad:?} → {err:?}"
        );
    }
}

/// The real models, on a copy-heavy request: greedy tokens equal with and without.
fn real_model_equal(test: &str, file: &str, kv_types: KvTypes) {
    let path = repo().join(".cache/models").join(file);
    if !path.exists() {
        common::skip(test, &format!("{} is missing (python3 scripts/fetch_models.py)", path.display()));
        return;
    }
    let engine = load_as(&path, kv_types);
    let doc = "fn area(w: u32, h: u32) -> u32 {\n    let a = w * h;\n    a\n}\n\nfn perimeter(w: u32, h: u32) -> u32 {\n    2 * (w + h)\n}\n";
    let text =
        format!("Rename `area` to `surface` in this code and repeat all of it:\n\n{doc}\nHere it is:\n\n");
    let p = engine.tokenizer().encode(&text, true, false).expect("encode");
    let plain = run(&engine, spec_req(&p, 64, SamplingParams::greedy(), None));
    let before = engine.metrics();
    let fast = run(&engine, spec_req(&p, 64, SamplingParams::greedy(), Some(SpecOptions::ngram(8))));
    let c = counts(before, engine.metrics());
    assert_eq!(plain.ids, fast.ids, "{file}: greedy tokens with speculation differ");
    assert!(c.drafted > 0, "{file}: nothing was drafted on a copy-heavy prompt");
    eprintln!("{file}: {} of {} drafted tokens accepted", c.accepted, c.drafted);
}

#[test]
fn smollm2_tokens_equal_with_speculation() {
    real_model_equal(
        "smollm2_tokens_equal_with_speculation",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        KvTypes::F16,
    );
}

/// A quantized cache too: a verified step's rows read its blocks as one-token steps do.
#[test]
fn smollm2_tokens_equal_with_speculation_on_quantized_caches() {
    for (k, v) in [(KvType::Q8_0, KvType::F16), (KvType::Q4_0, KvType::Q4_0)] {
        let file = "SmolLM2-135M-Instruct.Q4_1.gguf";
        real_model_equal("smollm2_tokens_equal_with_speculation_on_quantized_caches", file, KvTypes { k, v });
    }
}

#[test]
fn gemma3_tokens_equal_with_speculation() {
    real_model_equal("gemma3_tokens_equal_with_speculation", "gemma-3-270m-q4_k_m.gguf", KvTypes::F16);
}

/// The model under the scheduler: a verified step's rows, fed the true continuation with a
/// wrong token at a varying place (an oracle drafter), equal bit for bit the logits of
/// decoding one token at a time up to the wrong input; the cache then rewinds to it and
/// decoding goes on exactly — also when the wrong token is the first or second draft, inside
/// LFM2's conv window (3 taps).
#[test]
fn verified_rows_equal_one_token_steps_bit_for_bit_and_rewind_exactly() {
    const N: usize = 40;
    let mut report = vec![];
    for spec_file in wick_fixtures::standard_specs() {
        let name = spec_file.file_name;
        let g = GgufFile::open(fixture_dir().join(&name)).expect("open");
        let model = models::load(&g, &Device::Cpu).expect("load");
        let mut kv = KvPool::new(&model.cache_layout(), 64, true, &Device::Cpu).expect("kv pool");
        let p = prompt(2);
        // One token at a time: every step's logits.
        let (mut cache, mut want) = (SeqCache::default(), vec![]);
        let mut last = step(model.as_ref(), &mut kv, &mut cache, &p, false).pop().expect("row");
        let mut ids = vec![];
        for _ in 0..N {
            ids.push(argmax(&last));
            want.push(last);
            last = step(model.as_ref(), &mut kv, &mut cache, &[ids[ids.len() - 1]], false).remove(0);
        }
        want.push(last);
        kv.release(&mut cache);
        // Verified steps of 1 + k inputs; the j-th draft of each step is wrong (none when j = k).
        let (mut cache, mut at, mut round, mut rewinds) = (SeqCache::default(), 0, 0, 0);
        let first = step(model.as_ref(), &mut kv, &mut cache, &p, false).pop().expect("row");
        assert_eq!(bits(&first), bits(&want[0]), "{name}: the prompt's logits");
        while at + 1 < N {
            let k = [4, 3, 6, 2, 5][round % 5].min(N - 1 - at);
            let wrong = [2, 0, 1, 7, 3, 0][round % 6];
            round += 1;
            let mut inputs = ids[at..=at + k].to_vec();
            if wrong < k {
                inputs[1 + wrong] = (inputs[1 + wrong] + 1) % 256;
            }
            let rows = step(model.as_ref(), &mut kv, &mut cache, &inputs, true);
            assert_eq!(rows.len(), inputs.len(), "{name}: one logits row per verified input");
            // Rows whose inputs were all right are decodes' logits; the first after is not used.
            let good = inputs.iter().zip(&ids[at..]).take_while(|(a, b)| a == b).count();
            for (i, row) in rows.iter().take(good).enumerate() {
                assert_eq!(bits(row), bits(&want[at + i + 1]), "{name}: row {i} of the step at {at}");
            }
            let pos0 = p.len() + at;
            kv.truncate(&mut cache, pos0 + good).expect("truncate");
            rewinds += usize::from(good < inputs.len());
            at += good;
        }
        kv.release(&mut cache);
        report.push(format!("{name}: {round} verified steps, {rewinds} rewound"));
        assert!(rewinds >= round / 2, "{name}: too few rewinds to test them ({rewinds} of {round})");
    }
    eprintln!("{}", report.join("\n"));
}

/// Logits rows of one step of `tokens` (every row when `verify`, else the last).
fn step(
    model: &dyn Model,
    kv: &mut KvPool,
    cache: &mut SeqCache,
    tokens: &[u32],
    verify: bool,
) -> Vec<Vec<f32>> {
    let seq = StepSeq { verify, ..StepSeq::tokens(tokens, cache) };
    model.forward(&mut [seq], kv).expect("forward").to_vec2::<f32>().expect("logits")
}

fn argmax(v: &[f32]) -> u32 {
    v.iter().enumerate().fold((0, f32::NEG_INFINITY), |b, (i, &x)| if x > b.1 { (i, x) } else { b }).0 as u32
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}
