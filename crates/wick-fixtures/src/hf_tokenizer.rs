//! Tokenizer files of a synthetic Hugging Face checkpoint, rebuilt from one of llama.cpp's
//! vocab-only GGUFs (which llama.cpp made from the real models): a BPE `tokenizer.json` with
//! the model's vocabulary, merges, pre-tokenizer regex and post-processor, or a SentencePiece
//! `tokenizer.model` (protobuf) with pieces, scores and types. The rebuilt BPE tokenizers
//! tokenize as the originals do, so llama.cpp's pre-tokenizer hash recognizes them.

use serde_json::{json, Value};

use std::path::Path;

use wick_core::error::{Result, WickError};
use wick_core::gguf::GgufFile;

/// A vocabulary read back from a vocab GGUF.
pub struct VocabFile {
    /// `tokenizer.ggml.model`: gpt2 or llama.
    pub model: String,
    pub pre: String,
    pub tokens: Vec<String>,
    pub types: Vec<i32>,
    pub scores: Vec<f32>,
    pub merges: Vec<String>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
}

impl VocabFile {
    pub fn read(llama_src: &Path, vocab_file: &str) -> Result<Self> {
        let g = GgufFile::open(llama_src.join("models").join(vocab_file))?;
        let m = &g.metadata;
        let strs = |k: &str| -> Result<Vec<String>> {
            Ok(m.str_array(k)?.unwrap_or_default().into_iter().map(String::from).collect())
        };
        let n = strs("tokenizer.ggml.tokens")?.len();
        let types = match m.opt_array("tokenizer.ggml.token_type")? {
            Some(a) => a.iter().map(|v| v.as_i64().unwrap_or(1) as i32).collect(),
            None => vec![1; n],
        };
        Ok(Self {
            model: m.str("tokenizer.ggml.model")?.to_string(),
            pre: m.opt_str("tokenizer.ggml.pre")?.unwrap_or("default").to_string(),
            tokens: strs("tokenizer.ggml.tokens")?,
            types,
            scores: m.f32_array("tokenizer.ggml.scores")?.unwrap_or_else(|| vec![0.0; n]),
            merges: strs("tokenizer.ggml.merges")?,
            bos: m.opt_u64("tokenizer.ggml.bos_token_id")?.map(|v| v as u32),
            eos: m.opt_u64("tokenizer.ggml.eos_token_id")?.map(|v| v as u32),
        })
    }

    /// Appends `extra` as control tokens (LFM2's special tokens on a borrowed vocabulary).
    pub fn with_control_tokens(mut self, extra: &[&str]) -> Self {
        for t in extra {
            if !self.tokens.iter().any(|x| x == t) {
                self.tokens.push(t.to_string());
                self.types.push(3);
                self.scores.push(0.0);
            }
        }
        self
    }

    pub fn id(&self, token: &str) -> Option<u32> {
        self.tokens.iter().position(|t| t == token).map(|i| i as u32)
    }
}

/// The pre-tokenizer regex HF's tokenizer.json uses for a llama.cpp `pre` name (None: GPT-2's
/// own, inside its ByteLevel pre-tokenizer).
fn split_regex(pre: &str) -> Result<Option<&'static str>> {
    Ok(Some(match pre {
        "gpt-2" => return Ok(None),
        "llama-bpe" | "llama3" => {
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
        }
        "qwen2" => {
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
        }
        other => {
            return Err(WickError::Internal(format!("no tokenizer.json recipe for pre-tokenizer `{other}`")))
        }
    }))
}

/// A BPE tokenizer.json for a `gpt2` vocabulary.
pub fn bpe_tokenizer_json(v: &VocabFile) -> Result<Value> {
    let regex = split_regex(&v.pre)?;
    let vocab: serde_json::Map<String, Value> = v
        .tokens
        .iter()
        .enumerate()
        .filter(|(i, _)| v.types[*i] == 1)
        .map(|(i, t)| (t.clone(), json!(i)))
        .collect();
    let added: Vec<Value> = v
        .tokens
        .iter()
        .enumerate()
        .filter(|(i, _)| matches!(v.types[*i], 3 | 4))
        .map(|(i, t)| {
            json!({"id": i, "content": t, "single_word": false, "lstrip": false, "rstrip": false,
                   "normalized": false, "special": v.types[i] == 3})
        })
        .collect();
    let llama3 = matches!(v.pre.as_str(), "llama-bpe" | "llama3");
    let pre_tokenizer = match regex {
        Some(r) => json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]}),
        None => {
            json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true})
        }
    };
    let post = if llama3 {
        let bos = v.bos.and_then(|b| v.tokens.get(b as usize)).cloned().unwrap_or_default();
        json!({"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {bos.clone(): {"id": bos, "ids": [v.bos], "tokens": [bos]}}}]})
    } else {
        json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false})
    };
    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": if v.pre == "qwen2" { json!({"type": "NFC"}) } else { Value::Null },
        "pre_tokenizer": pre_tokenizer,
        "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "ignore_merges": llama3, "vocab": vocab, "merges": v.merges},
    }))
}

/// A Unigram tokenizer.json for a SentencePiece vocabulary (as HF writes for SPM models
/// without merges): pieces with scores, byte fallback, `▁` for spaces.
pub fn spm_tokenizer_json(v: &VocabFile) -> Value {
    let vocab: Vec<Value> = v.tokens.iter().zip(&v.scores).map(|(t, s)| json!([t, s])).collect();
    let added: Vec<Value> = v
        .tokens
        .iter()
        .enumerate()
        .filter(|(i, _)| matches!(v.types[*i], 2..=4))
        .map(|(i, t)| {
            json!({"id": i, "content": t, "single_word": false, "lstrip": false, "rstrip": false,
                   "normalized": false, "special": v.types[i] != 4})
        })
        .collect();
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u{2581}"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u{2581}"}]},
        "pre_tokenizer": null,
        "post_processor": null,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "Unigram", "unk_id": v.types.iter().position(|&t| t == 2), "vocab": vocab, "byte_fallback": true},
    })
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A SentencePiece `ModelProto` holding only the pieces (field 1: piece, score, type).
pub fn spm_model_proto(v: &VocabFile) -> Vec<u8> {
    let mut out = vec![];
    for (i, t) in v.tokens.iter().enumerate() {
        let mut p = vec![0x0a];
        varint(&mut p, t.len() as u64);
        p.extend_from_slice(t.as_bytes());
        p.push(0x15);
        p.extend_from_slice(&v.scores[i].to_le_bytes());
        if v.types[i] != 1 {
            p.push(0x18);
            varint(&mut p, v.types[i] as u64);
        }
        out.push(0x0a);
        varint(&mut out, p.len() as u64);
        out.extend_from_slice(&p);
    }
    out
}
