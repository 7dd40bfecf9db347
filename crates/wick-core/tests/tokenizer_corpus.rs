//! llama.cpp's tokenizer corpora (`models/ggml-vocab-*.gguf.{inp,out}`, as run by its
//! `tests/test-tokenizer-0`): every case must encode to exactly the expected ids with
//! add_special = false and parse_special = false.

use std::path::{Path, PathBuf};

use wick_core::gguf::GgufFile;
use wick_core::tokenizer::Tokenizer;
use wick_core::WickError;

mod common;

fn vocab_path(src: &Path, name: &str) -> PathBuf {
    src.join("models").join(format!("ggml-vocab-{name}.gguf"))
}

fn load(src: &Path, name: &str) -> wick_core::Result<Tokenizer> {
    Tokenizer::from_gguf(&GgufFile::open(vocab_path(src, name))?.metadata)
}

/// Cases as test-tokenizer-0 reads them: inputs separated by a `__ggml_vocab_test__`
/// line, one line of space-separated ids per case.
fn cases(src: &Path, name: &str) -> Vec<(String, Vec<u32>)> {
    let base = vocab_path(src, name);
    let read = |ext: &str| {
        let p = base.with_extension(format!("gguf.{ext}"));
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    let (inp, out) = (read("inp"), read("out"));
    let sep = "\n__ggml_vocab_test__\n";
    let mut inputs = Vec::new();
    let mut rest = inp.as_str();
    while !rest.is_empty() {
        let (case, tail) = rest.split_once(sep).unwrap_or((rest, ""));
        inputs.push(case.to_string());
        rest = tail;
    }
    let outputs: Vec<Vec<u32>> =
        out.lines().map(|l| l.split_whitespace().map(|t| t.parse().expect("token id")).collect()).collect();
    assert_eq!(inputs.len(), outputs.len(), "{name}: .inp and .out disagree on the number of cases");
    inputs.into_iter().zip(outputs).collect()
}

/// Runs the corpus of vocab `name` as test `test`.
fn check(test: &str, name: &str) {
    let Some(src) = common::llama_src(test) else { return };
    let tok = load(&src, name).unwrap_or_else(|e| panic!("{name}: {e}"));
    let cases = cases(&src, name);
    let mut failures = Vec::new();
    for (text, want) in &cases {
        let got = tok.encode(text, false, false).expect("encode");
        if &got != want {
            failures.push(format!("  {text:?}\n    want {want:?}\n    got  {got:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{name}: {} of {} cases differ from llama.cpp:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

macro_rules! corpus {
    ($($test:ident => $name:literal,)*) => {$(
        #[test]
        fn $test() {
            check(stringify!($test), $name);
        }
    )*};
}

corpus! {
    llama_spm => "llama-spm",
    phi_3 => "phi-3",
    llama_bpe => "llama-bpe",
    qwen2 => "qwen2",
    qwen35 => "qwen35",
    gpt_2 => "gpt-2",
    starcoder => "starcoder",
    deepseek_llm => "deepseek-llm",
    deepseek_coder => "deepseek-coder",
    falcon => "falcon",
    mpt => "mpt",
    refact => "refact",
    command_r => "command-r",
}

#[test]
fn unsupported_models_are_typed_errors() {
    let Some(src) = common::llama_src("unsupported_models_are_typed_errors") else { return };
    for (name, what) in [("bert-bge", "`bert`"), ("gemma-4", "`gemma4`")] {
        match load(&src, name) {
            Err(e @ WickError::UnsupportedTokenizer(_)) => {
                assert!(e.to_string().contains(what), "{e}")
            }
            other => panic!("{name}: expected UnsupportedTokenizer, got {other:?}"),
        }
    }
}
