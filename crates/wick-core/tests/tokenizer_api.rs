//! Tokenizer API behaviour beyond the corpora: special tokens, BOS/EOS, end of generation,
//! token bytes, decoding, streaming detokenization, errors and hostile input.

use wick_core::gguf::{GgufFile, MetaValue, Metadata};
use wick_core::tokenizer::{Detokenizer, Tokenizer};
use wick_core::WickError;

mod common;

/// A loader of llama.cpp's vocab-only GGUFs by name, or `None` (`test` reported as skipped)
/// without the llama.cpp source.
fn vocabs(test: &str) -> Option<impl Fn(&str) -> Tokenizer> {
    let models = common::llama_src(test)?.join("models");
    Some(move |name: &str| {
        let path = models.join(format!("ggml-vocab-{name}.gguf"));
        assert!(
            path.exists(),
            "{} not found (set WICK_LLAMA_SRC or run ./scripts/llama-src.sh)",
            path.display()
        );
        Tokenizer::from_gguf(&GgufFile::open(&path).unwrap().metadata).unwrap()
    })
}

fn id(tok: &Tokenizer, text: &str) -> u32 {
    tok.token_id(text).unwrap_or_else(|| panic!("no token {text:?}"))
}

fn tiny_gpt2(pre: &str, model: &str) -> Metadata {
    let strings = |v: &[&str]| MetaValue::Array(v.iter().map(|s| MetaValue::String(s.to_string())).collect());
    Metadata {
        entries: vec![
            ("tokenizer.ggml.model".into(), MetaValue::String(model.into())),
            ("tokenizer.ggml.pre".into(), MetaValue::String(pre.into())),
            ("tokenizer.ggml.tokens".into(), strings(&["a", "b", "ab"])),
            ("tokenizer.ggml.merges".into(), strings(&["a b"])),
        ],
    }
}

#[test]
fn unknown_pre_tokenizer_is_a_typed_error() {
    let err = Tokenizer::from_gguf(&tiny_gpt2("xyz", "gpt2")).unwrap_err();
    assert!(matches!(err, WickError::UnsupportedTokenizer(_)), "{err:?}");
    assert_eq!(err.code(), "UNSUPPORTED_TOKENIZER");
    assert!(err.to_string().contains("unknown pre-tokenizer `xyz`"), "{err}");
}

#[test]
fn unknown_model_is_a_typed_error() {
    let err = Tokenizer::from_gguf(&tiny_gpt2("default", "wordpiece")).unwrap_err();
    assert!(matches!(err, WickError::UnsupportedTokenizer(_)), "{err:?}");
    assert!(err.to_string().contains("`wordpiece`"), "{err}");
}

#[test]
fn synthetic_vocab_merges() {
    let tok = Tokenizer::from_gguf(&tiny_gpt2("gpt-2", "gpt2")).unwrap();
    assert_eq!(tok.encode("abba", false, false).unwrap(), vec![2, 1, 0]);
    // Bytes with no token are dropped, as llama.cpp does.
    assert_eq!(tok.encode("a-b", false, false).unwrap(), vec![0, 1]);
}

#[test]
fn missing_pre_uses_the_default_split() {
    let Some(load) = vocabs("missing_pre_uses_the_default_split") else { return };
    // gpt-neox's vocab predates `tokenizer.ggml.pre`; llama.cpp falls back to `default`.
    let tok = load("gpt-neox");
    assert!(!tok.encode("Hello world", false, false).unwrap().is_empty());
}

#[test]
fn special_tokens_are_parsed_only_when_asked() {
    let Some(load) = vocabs("special_tokens_are_parsed_only_when_asked") else { return };
    let tok = load("qwen2");
    let im_start = id(&tok, "<|im_start|>");
    let parsed = tok.encode("<|im_start|>user\nhi", false, true).unwrap();
    assert_eq!(parsed[0], im_start);
    assert_eq!(parsed[1..], tok.encode("user\nhi", false, false).unwrap()[..]);
    let plain = tok.encode("<|im_start|>user", false, false).unwrap();
    assert!(!plain.contains(&im_start) && plain.len() > 2, "{plain:?}");
}

#[test]
fn bos_and_eos_follow_the_vocab() {
    let Some(load) = vocabs("bos_and_eos_follow_the_vocab") else { return };
    let spm = load("llama-spm");
    assert!(spm.add_bos());
    assert_eq!((spm.bos(), spm.eos()), (Some(1), Some(2)));
    assert_eq!(spm.encode("Hello", true, false).unwrap()[0], 1);
    assert_eq!(spm.encode("", true, false).unwrap(), vec![1]);
    assert_eq!(spm.encode("", false, false).unwrap(), Vec::<u32>::new());

    let llama3 = load("llama-bpe");
    assert!(llama3.add_bos());
    assert_eq!(llama3.encode("Hello", true, false).unwrap()[0], 128000);

    let qwen = load("qwen2");
    assert!(!qwen.add_bos());
    assert_eq!(qwen.encode("Hello", true, false).unwrap(), qwen.encode("Hello", false, false).unwrap());
}

#[test]
fn end_of_generation_and_control() {
    let Some(load) = vocabs("end_of_generation_and_control") else { return };
    let qwen = load("qwen2");
    // "</s>" is a plain token in this vocab but llama.cpp ends generation on it regardless.
    for t in ["<|im_end|>", "<|endoftext|>", "</s>"] {
        assert!(qwen.is_eog(id(&qwen, t)), "{t}");
        assert!(qwen.is_control(id(&qwen, t)), "{t}");
    }
    assert!(!qwen.is_eog(id(&qwen, "<|im_start|>")));
    assert!(!qwen.is_eog(id(&qwen, "Hello")) && !qwen.is_control(id(&qwen, "Hello")));

    // A fill-in-the-middle pad token found by its text also ends generation.
    let starcoder = load("starcoder");
    assert!(starcoder.is_eog(id(&starcoder, "<fim_pad>")));
    assert!(!starcoder.is_eog(id(&starcoder, "<fim_prefix>")));

    let llama3 = load("llama-bpe");
    assert!(llama3.is_eog(id(&llama3, "<|eot_id|>")));
    assert!(llama3.is_eog(128001));
    assert!(!llama3.is_eog(u32::MAX) && !llama3.is_control(u32::MAX));
}

#[test]
fn token_bytes_render_like_llama_cpp() {
    let Some(load) = vocabs("token_bytes_render_like_llama_cpp") else { return };
    let llama3 = load("llama-bpe");
    assert_eq!(llama3.token_bytes(id(&llama3, "Ġhello")), b" hello");
    assert_eq!(llama3.token_bytes(id(&llama3, "<|eot_id|>")), b"<|eot_id|>");
    let spm = load("llama-spm");
    assert_eq!(spm.token_bytes(id(&spm, "▁Hello")), b" Hello");
    assert_eq!(spm.token_bytes(id(&spm, "<0x0A>")), b"\n");
    assert_eq!(spm.token_bytes(id(&spm, "<0xF0>")), [0xF0]);
    assert_eq!(spm.token_bytes(1), b"<s>");
    assert!(spm.token_bytes(spm.n_vocab() as u32).is_empty());
    assert!(spm.token_bytes(u32::MAX).is_empty());
}

#[test]
fn decode_inverts_encode() {
    let Some(load) = vocabs("decode_inverts_encode") else { return };
    let texts = ["Hello world", " Hello  world\n", "\t tabs\tand  spaces ", "🦙 llama 你好", "a\u{0}b", ""];
    for name in ["llama-spm", "llama-bpe", "qwen2", "gpt-2"] {
        let tok = load(name);
        for text in texts {
            let ids = tok.encode(text, false, false).unwrap();
            assert_eq!(tok.decode(&ids, false), text, "{name}: {ids:?}");
        }
    }
    let spm = load("llama-spm");
    let ids = spm.encode("a<s>b", true, true).unwrap();
    assert_eq!(ids.iter().filter(|&&t| t == 1).count(), 2, "{ids:?}");
    assert_eq!(spm.decode(&ids, false), "<s>a<s>b");
    assert_eq!(spm.decode(&ids, true), "ab");
    assert_eq!(spm.decode(&[u32::MAX, 999_999], false), "");
}

#[test]
fn detokenizer_holds_back_partial_characters() {
    let Some(load) = vocabs("detokenizer_holds_back_partial_characters") else { return };
    let spm = load("llama-spm");
    // Not in the vocab: "▁" followed by four byte tokens.
    let ids = spm.encode("🦙", false, false).unwrap();
    assert_eq!(ids.len(), 5, "{ids:?}");
    let mut d = Detokenizer::new();
    let out: Vec<String> = ids.iter().map(|&t| d.push(&spm, t, false)).collect();
    assert_eq!(out, [" ", "", "", "", "🦙"]);
    assert_eq!(d.flush(), "");
}

#[test]
fn detokenizer_replaces_invalid_bytes_and_flushes_the_rest() {
    let Some(load) = vocabs("detokenizer_replaces_invalid_bytes_and_flushes_the_rest") else { return };
    let spm = load("llama-spm");
    let mut d = Detokenizer::new();
    assert_eq!(d.push(&spm, id(&spm, "<0xE4>"), false), "");
    // 0xE4 followed by an ASCII byte can never complete.
    assert_eq!(d.push(&spm, id(&spm, "a"), false), "\u{FFFD}a");
    assert_eq!(d.push(&spm, id(&spm, "<0xFF>"), false), "\u{FFFD}");
    assert_eq!(d.push(&spm, id(&spm, "<0xE4>"), false), "");
    assert_eq!(d.push(&spm, id(&spm, "<0xBD>"), false), "");
    assert_eq!(d.flush(), "\u{FFFD}");
    assert_eq!(d.flush(), "");
}

#[test]
fn detokenizer_skips_control_tokens_on_request() {
    let Some(load) = vocabs("detokenizer_skips_control_tokens_on_request") else { return };
    let spm = load("llama-spm");
    let mut d = Detokenizer::new();
    assert_eq!(d.push(&spm, 1, true), "");
    assert_eq!(d.push(&spm, 1, false), "<s>");
    assert_eq!(d.push(&spm, u32::MAX, false), "");
}

#[test]
fn hostile_input_does_not_panic() {
    let Some(load) = vocabs("hostile_input_does_not_panic") else { return };
    let mut big = String::new();
    for i in 0..20_000 {
        big.push_str(["a ", "  ", "\n", "🦙", "<|im_end|>", "\u{3000}", "9", "\u{301}", "<s>"][i % 9]);
    }
    for name in ["llama-spm", "phi-3", "llama-bpe", "qwen2", "deepseek-llm", "falcon"] {
        let tok = load(name);
        for parse_special in [false, true] {
            let ids = tok.encode(&big, true, parse_special).unwrap();
            assert!(ids.iter().all(|&t| (t as usize) < tok.n_vocab()));
            tok.decode(&ids, true);
        }
        assert!(tok.encode("\u{0}\u{1}\u{7f}", false, true).is_ok());
    }
}

#[test]
fn chat_template_comes_from_the_gguf() {
    let Some(load) = vocabs("chat_template_comes_from_the_gguf") else { return };
    assert!(load("qwen2").chat_template().is_some_and(|t| t.contains("im_start")));
    assert_eq!(load("llama-spm").chat_template(), None);
}
