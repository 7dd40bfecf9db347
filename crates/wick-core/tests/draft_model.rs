//! Speculative decoding with a draft model (llama-server's `--model-draft`) changes nothing
//! but speed: on every fixture architecture the tokens with a draft model equal the tokens
//! without — greedy, sampled with a seed, and batched — while its guesses were both kept and
//! rejected (LFM2 drafting for LFM2: rejections inside the conv window roll the draft model's
//! conv state back as well as the target's). A draft model of another vocabulary is refused.

use std::path::Path;

use wick_core::request::SpecOptions;
use wick_core::sampling::SamplingParams;
use wick_core::{Engine, EngineOptions, WickError};

mod common;
use common::engine::{repo, run, run_together, sampled, spec_req};

fn fixture_dir() -> &'static Path {
    common::engine::standard_fixtures("wick-draft-model")
}

fn load(target: &Path, draft: Option<&Path>) -> Result<Engine, WickError> {
    let mut o = EngineOptions::new(target);
    o.context_size = Some(1024);
    o.max_sequences = 4;
    o.draft_model = draft.map(Path::to_path_buf);
    Engine::load(o)
}

/// Up to 6 guesses a step, however unsure (p_min 0: rejections come often on random weights).
fn spec() -> Option<SpecOptions> {
    Some(SpecOptions::draft_model(6, 0.0))
}

fn prompt(seed: u32) -> Vec<u32> {
    std::iter::once(1).chain((0..23).map(|i| 3 + (i * 37 + seed * 11) % 250)).collect()
}

/// The draft for a fixture: its architecture's Q4_0 twin (the same weights, rounded coarser:
/// mostly right), Q8_0 for the Q4_0 one, else an LFM2 or itself — the first whose vocabulary fits.
fn draft_candidates(name: &str) -> Vec<String> {
    let arch = name.trim_start_matches("tiny-").split('-').next().unwrap_or("");
    let twin = if name.ends_with("-q4_0.gguf") {
        format!("tiny-{arch}-q8_0.gguf")
    } else {
        format!("tiny-{arch}-q4_0.gguf")
    };
    vec![twin, "tiny-lfm2-q4_0.gguf".into(), "tiny-llama-q4_0.gguf".into(), name.to_string()]
}

#[test]
fn tokens_with_a_draft_model_equal_tokens_without_on_every_fixture() {
    let (mut report, mut all_drafted, mut all_accepted) = (vec![], 0, 0);
    let mut lfm2_rejected = false;
    for spec_file in wick_fixtures::standard_specs() {
        let name = spec_file.file_name;
        let target = fixture_dir().join(&name);
        let (engine, draft) = draft_candidates(&name)
            .into_iter()
            .filter(|d| fixture_dir().join(d).exists())
            .find_map(|d| load(&target, Some(&fixture_dir().join(&d))).ok().map(|e| (e, d)))
            .expect("a draft model loads (itself at least)");
        let (mut drafted, mut accepted) = (0, 0);
        for seed in 0..3 {
            let p = prompt(seed);
            for sampling in [SamplingParams::greedy(), sampled(7 + seed as u64)] {
                let plain = run(&engine, spec_req(&p, 40, sampling.clone(), None));
                let before = engine.metrics();
                let fast = run(&engine, spec_req(&p, 40, sampling.clone(), spec()));
                let after = engine.metrics();
                drafted += after.spec_draft_tokens_total - before.spec_draft_tokens_total;
                accepted += after.spec_accepted_tokens_total - before.spec_accepted_tokens_total;
                let how = if sampling.temperature == 0.0 { "greedy" } else { "sampled" };
                assert_eq!(
                    plain.ids, fast.ids,
                    "{name} (draft {draft}): {how} tokens differ (prompt {seed})"
                );
                assert_eq!(plain.text, fast.text, "{name} (draft {draft}): {how} text differs");
            }
        }
        if name.starts_with("tiny-lfm2-") && draft.starts_with("tiny-lfm2-") && accepted < drafted {
            lfm2_rejected = true;
        }
        report.push(format!("{name} drafted by {draft}: {accepted} of {drafted} guesses kept"));
        (all_drafted, all_accepted) = (all_drafted + drafted, all_accepted + accepted);
    }
    eprintln!("{}", report.join("\n"));
    assert!(all_accepted > 50 && all_accepted < all_drafted, "{all_accepted} of {all_drafted} kept");
    assert!(lfm2_rejected, "no LFM2 draft model had a guess rejected");
}

#[test]
fn a_batch_with_a_draft_model_gives_each_sequence_its_tokens_alone() {
    for (target, draft) in
        [("tiny-lfm2-q8_0.gguf", "tiny-lfm2-q4_0.gguf"), ("tiny-llama-f16.gguf", "tiny-llama-q4_0.gguf")]
    {
        let engine = load(&fixture_dir().join(target), Some(&fixture_dir().join(draft))).expect("load");
        let prompts: Vec<Vec<u32>> = (0..3).map(prompt).collect();
        let alone: Vec<Vec<u32>> = prompts
            .iter()
            .map(|p| run(&engine, spec_req(p, 48, SamplingParams::greedy(), None)).ids)
            .collect();
        let reqs = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| spec_req(p, 48, SamplingParams::greedy(), if i % 2 == 0 { spec() } else { None }))
            .collect();
        let before = engine.metrics();
        let together = run_together(&engine, reqs);
        assert!(engine.metrics().spec_drafts_total > before.spec_drafts_total, "{target}: nothing drafted");
        for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
            assert_eq!(a, &t.ids, "{target}: sequence {i} in a batch with a draft model differs from alone");
        }
        // Again, now that the draft pool holds the prompts' blocks: the same tokens.
        let again = run(&engine, spec_req(&prompts[0], 48, SamplingParams::greedy(), spec()));
        assert_eq!(again.ids, alone[0], "{target}: a second run on the draft model's cached prefix differs");
    }
}

#[test]
fn a_draft_model_of_another_vocabulary_is_refused() {
    let target = fixture_dir().join("tiny-llama-q8_0.gguf");
    // No draft model: a request asking for its drafts is refused.
    let engine = load(&target, None).expect("load");
    let err = engine.submit(spec_req(&prompt(0), 4, SamplingParams::greedy(), spec())).err();
    assert!(matches!(&err, Some(WickError::InvalidRequest(m)) if m.contains("draft model")), "{err:?}");
    // The fixtures share one small vocabulary; SmolLM2's is another.
    let smollm2 = repo().join(".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    if !smollm2.exists() {
        common::skip(
            "a_draft_model_of_another_vocabulary_is_refused",
            "SmolLM2 is missing (python3 scripts/fetch_models.py)",
        );
        return;
    }
    for (t, d) in [(&target, &smollm2), (&smollm2, &target)] {
        let err = load(t, Some(d)).err();
        assert!(
            matches!(&err, Some(WickError::ModelLoad(m)) if m.contains("draft model") && m.contains("tokenizer is")),
            "{err:?}"
        );
    }
}

/// SmolLM2 drafting for itself (every guess it is sure of is right) and for its F16 twin when
/// the quant matrix wrote it: greedy tokens equal on a chat-like prompt.
#[test]
fn smollm2_tokens_equal_with_a_draft_model() {
    let q4 = repo().join(".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    if !q4.exists() {
        common::skip(
            "smollm2_tokens_equal_with_a_draft_model",
            "SmolLM2 is missing (python3 scripts/fetch_models.py)",
        );
        return;
    }
    let engine = load(&q4, Some(&q4)).expect("load");
    let p = engine.tokenizer().encode("The three primary colors are", true, false).expect("encode");
    let plain = run(&engine, spec_req(&p, 64, SamplingParams::greedy(), None));
    let before = engine.metrics();
    let fast =
        run(&engine, spec_req(&p, 64, SamplingParams::greedy(), Some(SpecOptions::draft_model(8, 0.5))));
    let m = engine.metrics();
    assert_eq!(plain.ids, fast.ids, "greedy tokens with a draft model differ");
    let kept = m.spec_accepted_tokens_total - before.spec_accepted_tokens_total;
    assert!(kept > 32, "only {kept} guesses kept from a draft model that is the model itself");
}

/// A pool too small for the batch: sequences are preempted (their caches freed, their tokens
/// replayed later) while the draft model holds state for them; each output still equals its
/// run alone, and the draft model keeps drafting after.
#[test]
fn preempted_sequences_with_a_draft_model_give_their_tokens_alone() {
    let mut o = EngineOptions::new(fixture_dir().join("tiny-lfm2-q8_0.gguf"));
    (o.context_size, o.kv_tokens, o.max_sequences) = (Some(128), Some(192), 3);
    o.draft_model = Some(fixture_dir().join("tiny-lfm2-q4_0.gguf"));
    let engine = Engine::load(o).expect("load");
    let reqs: Vec<_> = (0..3).map(|s| spec_req(&prompt(s), 60, SamplingParams::greedy(), spec())).collect();
    let alone: Vec<Vec<u32>> = reqs.iter().map(|r| run(&engine, r.clone()).ids).collect();
    let before = engine.metrics();
    let together = run_together(&engine, reqs);
    let after = engine.metrics();
    assert!(after.preemptions_total > before.preemptions_total, "no preemption happened");
    assert!(after.spec_drafts_total > before.spec_drafts_total, "nothing was drafted");
    for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
        assert_eq!(a, &t.ids, "sequence {i} preempted beside others differs from alone");
    }
}
