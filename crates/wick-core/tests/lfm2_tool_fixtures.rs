//! The LFM2 tool-calling fixtures: the built vocabulary tokenizes LFM2's special
//! tokens to LFM2's ids and round-trips text, and each scripted model, prompted the way the
//! server renders LFM2's chat template, greedily generates exactly its script and then EOS.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use wick_core::gguf::GgufFile;
use wick_core::request::{Event, FinishReason, GenerateRequest};
use wick_core::tokenizer::Tokenizer;
use wick_core::{Engine, EngineOptions};
use wick_fixtures::{Script, SCRIPTS, SCRIPTS_MANIFEST};

mod common;

/// The tool fixtures written once per run; `None` (reported as skipped) without the llama.cpp
/// source, which holds LFM2's chat template.
fn fixture_dir(test: &str) -> Option<&'static Path> {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let src = common::llama_src(test)?;
    Some(DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("wick-tool-fixtures");
        wick_fixtures::write_tool_fixtures(&dir, &src).expect("write tool fixtures");
        dir
    }))
}

fn tokenizer(path: &Path) -> Tokenizer {
    Tokenizer::from_gguf(&GgufFile::open(path).expect("open").metadata).expect("tokenizer")
}

/// `<|startoftext|>` + one user turn + the generation prompt, as LFM2-8B-A1B.jinja renders it.
const ONE_TURN: &str =
    "<|startoftext|><|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n";

/// A system prompt with a tool list, the user's question, an earlier tool call and its result,
/// then the generation prompt (the template's tool list, tojson spacing, tool-response wrap).
const WITH_TOOLS: &str = concat!(
    "<|startoftext|><|im_start|>system\nYou are a helpful assistant.\nList of tools: <|tool_list_start|>",
    r#"[{"type": "function", "function": {"name": "get_weather", "description": "Current weather", "#,
    r#""parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": "#,
    r#"{"type": "integer"}}, "required": ["city"]}}}]"#,
    "<|tool_list_end|><|im_end|>\n<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n",
    "<|im_start|>assistant\n<|tool_call_start|>[get_weather(city=\"Paris\")]<|tool_call_end|><|im_end|>\n",
    "<|im_start|>tool\n<|tool_response_start|>",
    r#"{"temperature": 21, "condition": "sunny"}"#,
    "<|tool_response_end|><|im_end|>\n<|im_start|>assistant\n",
);

/// Tokenized as the server does: special-token parsing, no automatic specials, one BOS.
fn prompt(tok: &Tokenizer, text: &str) -> Vec<u32> {
    let ids = tok.encode(text, false, true).expect("encode");
    assert_eq!(ids.first().copied(), tok.bos(), "the rendered prompt starts with BOS");
    ids
}

/// Greedy generation through the engine until it stops: the generated ids.
fn generate(engine: &Engine, prompt: Vec<u32>) -> Vec<u32> {
    let mut handle = engine.submit(GenerateRequest::greedy(prompt, 64)).expect("submit");
    let mut ids = vec![];
    loop {
        match handle.events.blocking_recv().expect("event stream ended before Done") {
            Event::Token(t) => ids.extend(t.ids),
            Event::Done(d) => {
                assert_eq!(d.finish_reason, FinishReason::Stop, "generated {ids:?}");
                return ids;
            }
            Event::Error(e) => panic!("generation failed: {e}"),
            Event::Embedding(_) => panic!("an embedding from a generation"),
        }
    }
}

/// The ids `script` should generate: each piece the one token that renders as it, then EOS.
fn script_ids(tok: &Tokenizer, script: &Script) -> Vec<u32> {
    let mut ids: Vec<u32> = script
        .pieces
        .iter()
        .map(|p| {
            let ids: Vec<u32> =
                (0..tok.n_vocab() as u32).filter(|&id| tok.token_bytes(id) == p.as_bytes()).collect();
            assert_eq!(ids.len(), 1, "{}: piece {p:?} is not exactly one token: {ids:?}", script.file_name);
            ids[0]
        })
        .collect();
    ids.push(7);
    ids
}

#[test]
fn tools_vocab_specials_and_round_trip() {
    let Some(dir) = fixture_dir("tools_vocab_specials_and_round_trip") else { return };
    let tok = tokenizer(&dir.join("tiny-lfm2-tools-q8_0.gguf"));
    let specials = [
        "<|pad|>",
        "<|startoftext|>",
        "<|endoftext|>",
        "<|fim_pre|>",
        "<|fim_mid|>",
        "<|fim_suf|>",
        "<|im_start|>",
        "<|im_end|>",
        "<|tool_list_start|>",
        "<|tool_list_end|>",
        "<|tool_call_start|>",
        "<|tool_call_end|>",
        "<|tool_response_start|>",
        "<|tool_response_end|>",
    ];
    for (id, text) in specials.iter().enumerate() {
        assert_eq!(tok.encode(text, false, true).unwrap(), [id as u32], "{text}");
        assert!(tok.is_control(id as u32), "{text} is a control token");
        // Without special parsing the text is plain text, never the control token.
        let plain = tok.encode(text, false, false).unwrap();
        assert!(plain.len() > 1 && !plain.contains(&(id as u32)), "{text}: {plain:?}");
    }
    for text in ["<|reserved_special_token_237|>", "<|img_thumbnail|>"] {
        let ids = tok.encode(text, false, true).unwrap();
        assert!(ids.len() == 1 && tok.is_control(ids[0]), "{text}: {ids:?}");
        assert_eq!(tok.decode(&ids, true), "", "{text} is hidden from client text");
    }
    assert_eq!((tok.bos(), tok.eos(), tok.add_bos()), (Some(1), Some(7), true));
    assert!(tok.is_eog(7) && tok.is_eog(2));
    assert_eq!(tok.encode("hi", true, false).unwrap()[0], 1, "add_bos_token");
    let template = std::fs::read_to_string(
        common::llama_src("tools_vocab_specials_and_round_trip")
            .unwrap()
            .join("models/templates/LFM2-8B-A1B.jinja"),
    )
    .unwrap();
    assert_eq!(tok.chat_template(), Some(template.as_str()));

    // Words that are tokens are taken whole (pre = "lfm2" ignores merges for them).
    for word in ["Paris", "get", "_weather", "\"name", " days", "°C"] {
        assert_eq!(tok.encode(word, false, false).unwrap().len(), 1, "{word:?}");
    }
    for text in [
        "What is the weather in Paris?",
        r#"[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]"#,
        r#"[get_weather(city="Paris", days=3), search_web(query='Tokyo')]"#,
        "It is sunny in Paris, 21°C. Ünïcödé ✓ 東京\n\n\ttabs  and   spaces",
        "Parisian weatherman",
    ] {
        let ids = tok.encode(text, false, false).unwrap();
        assert_eq!(tok.decode(&ids, false), text);
        assert!(ids.len() < text.len(), "{text:?} uses multi-character tokens: {ids:?}");
    }
    // The same text with special parsing keeps the markers as single ids.
    let ids = prompt(&tok, WITH_TOOLS);
    assert_eq!(tok.decode(&ids, false), WITH_TOOLS);
    for id in [6, 7, 8, 9, 10, 11, 12, 13] {
        assert!(ids.contains(&id), "{id} in {ids:?}");
    }
}

#[test]
fn scripted_models_generate_their_scripts() {
    let Some(dir) = fixture_dir("scripted_models_generate_their_scripts") else { return };
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(SCRIPTS_MANIFEST)).unwrap()).unwrap();
    for script in SCRIPTS {
        let path = dir.join(script.file_name);
        let mut opts = EngineOptions::new(&path);
        opts.context_size = Some(512);
        opts.max_sequences = 1;
        let engine = Engine::load(opts).expect("load");
        let tok = engine.tokenizer();
        let want = script_ids(tok, script);
        assert_eq!(tok.decode(&want[..want.len() - 1], false), script.text());

        let entry = &manifest[script.file_name];
        assert_eq!(entry["text"], script.text(), "{SCRIPTS_MANIFEST}");
        assert_eq!(entry["pieces"], serde_json::json!(script.pieces), "{SCRIPTS_MANIFEST}");
        assert_eq!(entry["ids"], serde_json::json!(want), "{SCRIPTS_MANIFEST}");

        for (name, text) in [("one user turn", ONE_TURN), ("tools, a call and its result", WITH_TOOLS)] {
            let got = generate(&engine, prompt(tok, text));
            assert_eq!(got, want, "{} after {name}: {:?}", script.file_name, tok.decode(&got, false));
        }
        engine.shutdown();
    }
}

#[test]
fn tools_model_samples_from_its_vocabulary() {
    let Some(dir) = fixture_dir("tools_model_samples_from_its_vocabulary") else { return };
    let path = dir.join("tiny-lfm2-tools-q8_0.gguf");
    let n_tokens =
        GgufFile::open(&path).unwrap().metadata.str_array("tokenizer.ggml.tokens").unwrap().unwrap().len();
    let mut opts = EngineOptions::new(&path);
    opts.context_size = Some(512);
    let engine = Engine::load(opts).expect("load");
    assert_eq!(engine.info().model.n_vocab, n_tokens);
    assert_eq!(engine.info().model.architecture, "lfm2");
    let mut req = GenerateRequest::greedy(prompt(engine.tokenizer(), ONE_TURN), 8);
    req.ignore_eos = true;
    let mut handle = engine.submit(req).expect("submit");
    let mut n = 0;
    while let Some(ev) = handle.events.blocking_recv() {
        match ev {
            Event::Token(t) => n += t.ids.len(),
            Event::Embedding(_) => panic!("an embedding from a generation"),
            Event::Done(d) => {
                assert_eq!(d.finish_reason, FinishReason::Length);
                break;
            }
            Event::Error(e) => panic!("{e}"),
        }
    }
    assert_eq!(n, 8);
}
