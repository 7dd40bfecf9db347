//! Constrained decoding through the public engine API, on SmolLM2-135M (`.cache/models`,
//! scripts/fetch_models.py), on `.cache/fixtures`, and on a tiny fixture written by the tests
//! whose vocabulary has LFM2's tool-call markers as control tokens.

use std::sync::Arc;

use wick_core::request::{FinishReason, GenerateRequest};
use wick_core::sampling::grammar::{
    default_limits, Commit, GrammarCompiler, GrammarKind, GrammarSpec, ParserLimits,
};
use wick_core::tokenizer::Tokenizer;

mod common;

use common::engine::{
    cached_fixture, chat, collect, req, run, run_together, sampled, smollm2, tools_fixture,
    tools_fixture_path, TOOL_END, TOOL_START,
};

fn json(source: &str) -> Option<GrammarSpec> {
    Some(GrammarSpec { kind: GrammarKind::JsonSchema, source: source.into(), trigger_token: None })
}

fn lark(source: &str, trigger_token: Option<u32>) -> Option<GrammarSpec> {
    Some(GrammarSpec { kind: GrammarKind::Lark, source: source.into(), trigger_token })
}

/// Nested objects, an array, an enum, number bounds, required fields; bounded strings so
/// that a sampled output ends.
const CITY_SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 24},
    "population": {"type": "integer", "minimum": 0, "maximum": 40000000},
    "climate": {"enum": ["arid", "temperate", "tropical", "polar"]},
    "location": {
      "type": "object",
      "properties": {
        "country": {"type": "string", "maxLength": 24},
        "lat": {"type": "number", "minimum": -90, "maximum": 90},
        "lon": {"type": "number", "minimum": -180, "maximum": 180}
      },
      "required": ["country", "lat", "lon"],
      "additionalProperties": false
    },
    "districts": {"type": "array", "items": {"type": "string", "maxLength": 16}, "minItems": 1, "maxItems": 3}
  },
  "required": ["name", "population", "climate", "location", "districts"],
  "additionalProperties": false
}"#;

/// CITY_SCHEMA checked by hand.
fn check_city(text: &str) -> Result<(), String> {
    use serde_json::Value;
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let o = v.as_object().ok_or("not an object")?;
    let short =
        |v: Option<&Value>, max: usize| v.and_then(Value::as_str).is_some_and(|s| s.chars().count() <= max);
    let within = |v: Option<&Value>, lo: f64, hi: f64| {
        v.and_then(Value::as_f64).is_some_and(|x| (lo..=hi).contains(&x))
    };
    let keys = |o: &serde_json::Map<String, Value>, allowed: &[&str]| {
        o.keys().all(|k| allowed.contains(&k.as_str()))
    };
    if !keys(o, &["name", "population", "climate", "location", "districts"]) {
        return Err("an extra property".into());
    }
    if !short(o.get("name"), 24) {
        return Err("name".into());
    }
    if o.get("population").and_then(Value::as_u64).is_none_or(|p| p > 40_000_000) {
        return Err("population".into());
    }
    if !o
        .get("climate")
        .and_then(Value::as_str)
        .is_some_and(|c| ["arid", "temperate", "tropical", "polar"].contains(&c))
    {
        return Err("climate".into());
    }
    let loc = o.get("location").and_then(Value::as_object).ok_or("location")?;
    if !(keys(loc, &["country", "lat", "lon"])
        && short(loc.get("country"), 24)
        && within(loc.get("lat"), -90.0, 90.0)
        && within(loc.get("lon"), -180.0, 180.0))
    {
        return Err("location fields".into());
    }
    let d = o.get("districts").and_then(Value::as_array).ok_or("districts")?;
    if !((1..=3).contains(&d.len()) && d.iter().all(|x| short(Some(x), 16))) {
        return Err("districts items".into());
    }
    Ok(())
}

#[test]
fn json_schema_output_validates_for_every_seed() {
    let Some(engine) = smollm2("json_schema_output_validates_for_every_seed", |_| {}) else { return };
    let prompt = chat(&engine, "Describe a city as JSON.");
    for seed in 1..=6 {
        let r = GenerateRequest { grammar: json(CITY_SCHEMA), ..req(prompt.clone(), 400, sampled(seed)) };
        let out = run(&engine, r);
        assert_eq!(out.finish, FinishReason::Stop, "seed {seed}: {}", out.text);
        if let Err(e) = check_city(&out.text) {
            panic!("seed {seed}: {e}: {}", out.text);
        }
    }
    let m = engine.metrics();
    assert!(m.grammar_masks_total > 0);
}

#[test]
fn json_object_mode_gives_an_object() {
    let Some(engine) = smollm2("json_object_mode_gives_an_object", |_| {}) else { return };
    let prompt = chat(&engine, "Reply with a JSON object.");
    let out = run(
        &engine,
        GenerateRequest { grammar: json(r#"{"type":"object"}"#), ..req(prompt, 300, sampled(3)) },
    );
    if out.finish == FinishReason::Stop {
        let v: serde_json::Value = serde_json::from_str(&out.text).expect("JSON");
        assert!(v.is_object(), "{}", out.text);
    } else {
        // An unbounded object may run out of tokens; what there is must still be a prefix.
        assert_eq!(out.finish, FinishReason::Length);
        assert!(out.text.trim_start().starts_with('{'), "{}", out.text);
    }
}

/// The tool-call grammar the TS layer generates for LFM2 (pythonic calls between the
/// markers), with argument values as `%json`.
const WEATHER_TOOL: &str = r#"
start: <|tool_call_start|> "[" call ("," " "? call)* "]" <|tool_call_end|>
call: "get_weather(" "city=" city ", " "days=" days ")"
city: %json { "type": "string", "maxLength": 12 }
days: %json { "type": "integer", "minimum": 1, "maximum": 14 }
"#;

/// `[get_weather(city="…", days=N), …]` → the (city, days) pairs.
fn parse_weather_calls(body: &str) -> Result<Vec<(String, i64)>, String> {
    let inner = body.strip_prefix('[').and_then(|b| b.strip_suffix(']')).ok_or("brackets")?;
    let mut calls = vec![];
    for call in inner.split("get_weather(").skip(1) {
        let call = call.trim_end_matches([',', ' ']).strip_suffix(')').ok_or("closing paren")?;
        let (city, days) = call.rsplit_once(", days=").ok_or("days")?;
        let city = city.strip_prefix("city=").ok_or("city")?;
        let city: String = serde_json::from_str(city).map_err(|e| format!("city {city}: {e}"))?;
        let days: i64 = days.parse().map_err(|e| format!("days {days}: {e}"))?;
        if city.chars().count() > 12 || !(1..=14).contains(&days) {
            return Err(format!("out of bounds: {city:?} {days}"));
        }
        calls.push((city, days));
    }
    if calls.is_empty() {
        return Err("no call".into());
    }
    Ok(calls)
}

#[test]
fn lark_tool_call_with_special_tokens_and_json() {
    let engine = tools_fixture();
    let tok = engine.tokenizer();
    assert_eq!(tok.token_id("<|tool_call_start|>"), Some(TOOL_START));
    assert!(tok.is_control(TOOL_START) && tok.is_control(TOOL_END));
    for seed in 1..=5 {
        let r = GenerateRequest {
            grammar: lark(WEATHER_TOOL, None),
            marker_tokens: vec![TOOL_START, TOOL_END],
            ..req(vec![1, 72, 105], 200, sampled(seed))
        };
        let out = run(&engine, r);
        assert_eq!(out.finish, FinishReason::Stop, "seed {seed}: {:?}", out.text);
        assert_eq!((out.ids.first(), out.ids.last()), (Some(&TOOL_START), Some(&TOOL_END)));
        let body = out
            .text
            .strip_prefix("<|tool_call_start|>")
            .and_then(|t| t.strip_suffix("<|tool_call_end|>"))
            .unwrap_or_else(|| panic!("seed {seed}: markers missing: {:?}", out.text));
        parse_weather_calls(body).unwrap_or_else(|e| panic!("seed {seed}: {e}: {body:?}"));
    }
    // Without markers the control tokens are in the ids but not in the text.
    let out = run(
        &engine,
        GenerateRequest { grammar: lark(WEATHER_TOOL, None), ..req(vec![1, 72], 200, sampled(1)) },
    );
    assert_eq!(out.ids.first(), Some(&TOOL_START));
    assert!(out.text.starts_with("[get_weather(") && out.text.ends_with(")]"), "{:?}", out.text);
}

/// The reference call, fed token by token (the fixture's byte tokens): the grammar allows
/// each token in turn and is complete after the end marker.
#[test]
fn weather_grammar_accepts_the_reference_call() {
    let gguf = wick_core::gguf::GgufFile::open(tools_fixture_path()).expect("open");
    let tok = Arc::new(Tokenizer::from_gguf(&gguf.metadata).expect("tokenizer"));
    let compiler = GrammarCompiler::new(tok);
    let text = r#"[get_weather(city="Paris", days=3), get_weather(city="Oslo", days=14)]"#;
    let mut ids = vec![TOOL_START];
    ids.extend(text.bytes().map(|b| 3 + b as u32)); // <0xNN> is token 3 + NN
    ids.push(TOOL_END);
    let mut c = compiler.compile(&lark(WEATHER_TOOL, None).expect("spec")).expect("compile");
    for (i, &id) in ids.iter().enumerate() {
        c.ready().expect("mask");
        let mask = c.mask().expect("eager grammars always constrain");
        assert!(mask.is_allowed(id), "token {i} ({id}) refused");
        let done = c.commit(&[id]).expect("commit");
        assert_eq!(done == Commit::Complete, i == ids.len() - 1, "token {i}");
    }
    // A control token never matches text, even its own: a quoted "<|tool_call_start|>" is
    // text, the bare name is the token.
    let mut as_text =
        compiler.compile(&lark(r#"start: "<|tool_call_start|>""#, None).expect("spec")).expect("compile");
    as_text.ready().expect("mask");
    let m = as_text.mask().expect("mask");
    assert!(!m.is_allowed(TOOL_START) && m.is_allowed(3 + b'<' as u32));
    // A string where an integer belongs, and days out of bounds, are refused.
    for bad in [r#"[get_weather(city="Paris", days="3")]"#, r#"[get_weather(city="Paris", days=15)]"#] {
        let mut c = compiler.compile(&lark(WEATHER_TOOL, None).expect("spec")).expect("compile");
        let ids = std::iter::once(TOOL_START).chain(bad.bytes().map(|b| 3 + b as u32));
        let mut accepted = true;
        for id in ids {
            c.ready().expect("mask");
            accepted = c.mask().is_some_and(|m| m.is_allowed(id)) && c.commit(&[id]).is_ok();
            if !accepted {
                break;
            }
        }
        assert!(!accepted, "accepted {bad}");
    }
}

#[test]
fn lazy_trigger_is_free_until_the_trigger_then_constrains_and_rearms() {
    let engine = tools_fixture();
    let prompt = vec![1, 87, 101];
    // The trigger banned: a lazy grammar never engages, so greedy output is exactly that of
    // the same request without a grammar.
    let mut free = GenerateRequest::greedy(prompt.clone(), 40);
    free.sampling.logit_bias = vec![(TOOL_START, -100.0)];
    let plain = run(&engine, free.clone());
    let lazy = run(&engine, GenerateRequest { grammar: lark(WEATHER_TOOL, Some(TOOL_START)), ..free });
    assert_eq!(lazy.ids, plain.ids);

    // The trigger forced wherever generation is free: block after block, each valid, the
    // grammar re-armed after each end marker.
    let mut r = GenerateRequest {
        grammar: lark(WEATHER_TOOL, Some(TOOL_START)),
        marker_tokens: vec![TOOL_START, TOOL_END],
        ..req(prompt, 400, sampled(9))
    };
    r.sampling.logit_bias = vec![(TOOL_START, 100.0)];
    let out = run(&engine, r);
    assert_eq!(out.finish, FinishReason::Length);
    let blocks: Vec<&str> = out.text.split("<|tool_call_start|>").skip(1).collect();
    assert!(blocks.len() >= 2, "expected several blocks: {:?} {:?}", out.text, out.ids);
    for b in &blocks[..blocks.len() - 1] {
        let body = b.strip_suffix("<|tool_call_end|>").unwrap_or_else(|| panic!("unterminated block {b:?}"));
        parse_weather_calls(body).unwrap_or_else(|e| panic!("{e}: {body:?}"));
    }
}

#[test]
fn bad_grammars_fail_at_submit_with_invalid_grammar() {
    let engine = tools_fixture();
    let submit = |g: Option<GrammarSpec>| {
        engine.submit(GenerateRequest { grammar: g, ..GenerateRequest::greedy(vec![1], 8) })
    };
    let code = |g: Option<GrammarSpec>| submit(g).err().map(|e| (e.code(), e.to_string()));
    let cases = [
        ("not JSON", json("{\"type\": ")),
        ("unknown type", json(r#"{"type": "strng"}"#)),
        ("Lark syntax", lark("start: (", None)),
        ("undefined rule", lark("start: foo", None)),
        ("unknown special token", lark("start: <|nope|> \"x\"", None)),
        ("trigger not first", lark(WEATHER_TOOL, Some(65))),
        ("source too long", lark(&format!("start: \"{}\"", "a".repeat(200_000)), None)),
    ];
    for (what, g) in cases {
        match code(g) {
            Some(("INVALID_GRAMMAR", msg)) => eprintln!("{what}: {msg}"),
            other => panic!("{what}: expected INVALID_GRAMMAR, got {other:?}"),
        }
    }
    // Over llguidance's parser limits (tightened here: within the source limit, realistic
    // grammars stay far below the defaults; the plumbing is what is tested).
    let gguf = wick_core::gguf::GgufFile::open(tools_fixture_path()).expect("open");
    let tok = Arc::new(Tokenizer::from_gguf(&gguf.metadata).expect("tokenizer"));
    let tight = |f: fn(&mut ParserLimits)| {
        let mut l = default_limits();
        f(&mut l);
        GrammarCompiler::with_limits(tok.clone(), l)
    };
    for (what, compiler) in [
        ("grammar size", tight(|l| l.max_grammar_size = 20)),
        ("lexer fuel", tight(|l| l.initial_lexer_fuel = 50)),
    ] {
        match compiler.compile(&json(CITY_SCHEMA).expect("spec")) {
            Err(e) => {
                assert_eq!(e.code(), "INVALID_GRAMMAR", "{what}");
                eprintln!("{what}: {e}");
            }
            Ok(_) => panic!("{what}: compiled within a tightened limit"),
        }
    }
    // Ids outside the vocabulary are the request's fault.
    let bad_trigger = submit(lark(WEATHER_TOOL, Some(99_999))).err().map(|e| e.code());
    assert_eq!(bad_trigger, Some("INVALID_REQUEST"));
}

#[test]
fn two_sequences_each_with_its_own_grammar_state() {
    let engine = tools_fixture();
    let reqs = (1..=2)
        .map(|seed| GenerateRequest {
            grammar: lark(WEATHER_TOOL, None),
            marker_tokens: vec![TOOL_START, TOOL_END],
            ..req(vec![1, 80], 200, sampled(seed))
        })
        .collect();
    let outs = run_together(&engine, reqs);
    for out in &outs {
        assert_eq!(out.finish, FinishReason::Stop, "{:?}", out.text);
        let body =
            out.text.strip_prefix("<|tool_call_start|>").and_then(|t| t.strip_suffix("<|tool_call_end|>"));
        parse_weather_calls(body.expect("markers")).expect("valid calls");
    }
    assert_ne!(outs[0].ids, outs[1].ids, "different seeds, same output: the states are not separate");
}

#[test]
fn unconstrained_neighbour_of_a_constrained_sequence_is_unchanged() {
    let Some(engine) = smollm2("unconstrained_neighbour_of_a_constrained_sequence_is_unchanged", |o| {
        o.max_sequences = 4;
    }) else {
        return;
    };
    let free = GenerateRequest::greedy(chat(&engine, "Write a short poem about rivers."), 48);
    let alone = run(&engine, free.clone());
    let constrained = GenerateRequest {
        grammar: json(CITY_SCHEMA),
        ..req(chat(&engine, "Describe a city as JSON."), 300, sampled(4))
    };
    let outs = run_together(&engine, vec![constrained, free]);
    assert_eq!(outs[1].ids, alone.ids);
    check_city(&outs[0].text).unwrap_or_else(|e| panic!("{e}: {}", outs[0].text));
}

#[test]
fn grammar_survives_preemption_and_prefix_reuse() {
    // A pool of 8 blocks (512 tokens) for four sequences of up to ~240 tokens forces
    // preemption and recompute.
    let Some(engine) = smollm2("grammar_survives_preemption_and_prefix_reuse", |o| {
        o.max_sequences = 4;
        o.kv_tokens = Some(512);
        o.context_size = Some(512);
    }) else {
        return;
    };
    let ask = "Describe a city as JSON. Use realistic values and short names, keep the answer \
               compact, and do not add any commentary before or after the object. The city can be \
               anywhere in the world, large or small, old or new. Give its name, its population, \
               its climate, where it lies (country, latitude and longitude) and up to three of its \
               districts.";
    let prompt = chat(&engine, ask);
    assert!(prompt.len() > 64, "the prompt ({} tokens) must fill a KV block to be cached", prompt.len());
    let reqs: Vec<_> = (0..4)
        .map(|s| GenerateRequest { grammar: json(CITY_SCHEMA), ..req(prompt.clone(), 160, sampled(20 + s)) })
        .collect();
    let outs = run_together(&engine, reqs.clone());
    assert!(engine.metrics().preemptions_total > 0, "no preemption happened");
    // Each output equals that of the same request run alone: replayed tokens never reach
    // the grammar twice.
    for (r, out) in reqs.into_iter().zip(&outs) {
        let alone = run(&engine, r);
        assert_eq!(out.ids, alone.ids);
        assert!(alone.cached_tokens > 0, "the prompt prefix was not reused");
        if out.finish == FinishReason::Stop {
            check_city(&out.text).unwrap_or_else(|e| panic!("{e}: {}", out.text));
        }
    }
}

#[test]
fn max_tokens_mid_grammar_is_length_and_cancel_works() {
    let engine = tools_fixture();
    let out =
        run(&engine, GenerateRequest { grammar: lark(WEATHER_TOOL, None), ..req(vec![1], 5, sampled(1)) });
    assert_eq!(out.finish, FinishReason::Length);
    assert_eq!(out.ids.len(), 5);
    let h = engine
        .submit(GenerateRequest { grammar: lark(WEATHER_TOOL, None), ..req(vec![1], 500, sampled(2)) })
        .expect("submit");
    h.cancel();
    let out = collect(h).expect("cancelled sequence");
    assert_eq!(out.finish, FinishReason::Cancelled);
}

/// Only bounded values, and compact JSON (`x-guidance`, llguidance's compile options): a
/// random model would otherwise fill an object with whitespace.
const BOUNDED_SCHEMA: &str = r#"{
  "x-guidance": {"whitespace_flexible": false},
  "type": "object",
  "properties": {
    "id": {"type": "integer", "minimum": 0, "maximum": 999},
    "ok": {"type": "boolean"},
    "kind": {"enum": ["a", "b", "c"]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3}
  },
  "required": ["id", "ok", "kind", "tags"],
  "additionalProperties": false
}"#;

/// A hybrid model (LFM2: conv state restored on preemption) with llama.cpp's llama-bpe vocab
/// (128k byte-level BPE tokens): two constrained sequences in one batch, preempted and
/// recomputed, each as valid as alone and equal to its solo run.
#[test]
fn bpe_fixture_json_in_a_preempted_batch() {
    let test = "bpe_fixture_json_in_a_preempted_batch";
    let Some(engine) = cached_fixture(test, "tiny-lfm2-q8_0.gguf", |o| {
        o.kv_tokens = Some(256);
        o.context_size = Some(256);
    }) else {
        return;
    };
    // 60-token prompts: every sequence crosses into a second block while it generates, and
    // three of them need six blocks of the pool's four.
    let prompt: Vec<u32> = (400..460).collect();
    let reqs: Vec<_> = (0..3)
        .map(|s| GenerateRequest { grammar: json(BOUNDED_SCHEMA), ..req(prompt.clone(), 120, sampled(s)) })
        .collect();
    let outs = run_together(&engine, reqs.clone());
    assert!(engine.metrics().preemptions_total > 0, "no preemption happened");
    for (r, out) in reqs.into_iter().zip(&outs) {
        assert_eq!(out.finish, FinishReason::Stop, "{:?}", out.text);
        let v: serde_json::Value =
            serde_json::from_str(&out.text).unwrap_or_else(|e| panic!("{e}: {:?}", out.text));
        let id = v["id"].as_u64().expect("id");
        assert!(
            id <= 999 && v["ok"].is_boolean() && ["a", "b", "c"].contains(&v["kind"].as_str().expect("kind"))
        );
        assert!(v["tags"].as_array().is_some_and(|t| t.len() <= 3));
        assert_eq!(run(&engine, r).ids, out.ids);
    }
}

/// Forced spans come out as the tokenizer's own tokens (llguidance's fast-forward over a
/// canonical, byte-level tokenizer): SmolLM2 writes a call the grammar fixes byte for byte in
/// exactly the tokens `encode` gives the same text, sampling or not, never one sampled sliver
/// at a time, and the forced run costs one forward step, not one per token. A free span
/// between forced ones is still the model's own choice.
#[test]
fn forced_spans_are_the_tokenizers_canonical_tokens() {
    let test = "forced_spans_are_the_tokenizers_canonical_tokens";
    let Some(engine) = smollm2(test, |_| {}) else { return };
    let call =
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"celsius\"}}\n</tool_call>";
    let canonical = engine.tokenizer().encode(call, false, false).expect("encode");
    let prompt = chat(&engine, "What is the weather in Paris?");
    for (sampling, logprobs) in
        [(GenerateRequest::greedy(vec![], 1).sampling, None), (sampled(3), None), (sampled(3), Some(2))]
    {
        let r = GenerateRequest {
            grammar: lark(&format!("start: {}", serde_json::json!(call)), None),
            top_logprobs: logprobs,
            ..req(prompt.clone(), 80, sampling)
        };
        let steps = engine.metrics().steps_total;
        let out = run(&engine, r);
        // The run after the first forced token goes in with one forward; with logprobs asked
        // for, each forced token is sampled (and reported) on its own.
        let took = engine.metrics().steps_total - steps;
        if logprobs.is_none() {
            assert!(took <= 3, "{took} steps for a forced call of {} tokens", canonical.len());
        } else {
            assert!(took >= canonical.len(), "{took} steps");
        }
        assert_eq!(out.text, call);
        assert_eq!(out.finish, FinishReason::Stop);
        let eos = out.ids.last().copied().filter(|&id| engine.tokenizer().is_eog(id));
        let body = &out.ids[..out.ids.len() - eos.map_or(0, |_| 1)];
        assert_eq!(body, canonical.as_slice(), "forced span tokens");
    }
    // A free value between forced spans: the whole call still validates and ends.
    let grammar = lark(
        "start: \"<tool_call>\\n{\\\"name\\\": \\\"get_weather\\\", \\\"arguments\\\": {\\\"city\\\": \" city \"}}\\n</tool_call>\"\ncity: %json {\"type\": \"string\", \"maxLength\": 20}",
        None,
    );
    let out = run(&engine, GenerateRequest { grammar, ..req(prompt, 80, sampled(5)) });
    assert_eq!(out.finish, FinishReason::Stop, "{}", out.text);
    assert!(out.text.starts_with("<tool_call>\n{\"name\": \"get_weather\""), "{}", out.text);
}
