//! What a request controls outside grammars: which control tokens reach the text (and so
//! the stop strings), and logit bias, through the public engine API.

use wick_core::request::{FinishReason, GenerateRequest};

mod common;

use common::engine::{chat, run, sampled, smollm2, tools_fixture, TOOL_START};

#[test]
fn control_tokens_render_only_as_markers_and_stop_strings_see_visible_text() {
    let engine = tools_fixture();
    let force_start = |markers: Vec<u32>, stop: Vec<String>| {
        let mut r =
            GenerateRequest { marker_tokens: markers, stop, ..GenerateRequest::greedy(vec![1, 65], 3) };
        r.sampling.logit_bias = vec![(TOOL_START, 100.0)];
        run(&engine, r)
    };
    let hidden = force_start(vec![], vec![]);
    assert_eq!(hidden.ids, vec![TOOL_START; 3]);
    assert_eq!(hidden.text, "");
    let shown = force_start(vec![TOOL_START], vec![]);
    assert_eq!(shown.text, "<|tool_call_start|>".repeat(3));
    // A stop string matches the visible text only.
    let stopped = force_start(vec![TOOL_START], vec!["_start|><|tool".into()]);
    assert_eq!(
        (stopped.finish, stopped.text.as_str(), stopped.ids.len()),
        (FinishReason::Stop, "<|tool_call", 2)
    );
    let not_stopped = force_start(vec![], vec!["<|tool".into()]);
    assert_eq!((not_stopped.finish, not_stopped.ids.len()), (FinishReason::Length, 3));
}

#[test]
fn logit_bias_bans_and_forces_tokens() {
    let Some(engine) = smollm2("logit_bias_bans_and_forces_tokens", |_| {}) else { return };
    let prompt = chat(&engine, "What is the capital of France?");
    let base = run(&engine, GenerateRequest::greedy(prompt.clone(), 4));
    let mut banned = GenerateRequest::greedy(prompt.clone(), 4);
    banned.sampling.logit_bias = vec![(base.ids[0], -100.0)];
    let out = run(&engine, banned);
    assert_ne!(out.ids[0], base.ids[0]);
    let forced_id = engine.tokenizer().encode(" banana", false, false).expect("encode")[0];
    let mut forced = GenerateRequest { sampling: sampled(5), ..GenerateRequest::greedy(prompt.clone(), 4) };
    forced.sampling.logit_bias = vec![(forced_id, 100.0)];
    assert_eq!(run(&engine, forced).ids, vec![forced_id; 4]);
    let n = engine.info().model.n_vocab as u32;
    let mut bad = GenerateRequest::greedy(prompt, 4);
    bad.sampling.logit_bias = vec![(n, 1.0)];
    assert_eq!(engine.submit(bad).err().map(|e| e.code()), Some("INVALID_REQUEST"));
}
