//! The tokenizer as GGUF `tokenizer.*` keys, chosen per architecture as llama.cpp's
//! converter's `set_vocab` does: SentencePiece when a `tokenizer.model` is there (llama,
//! qwen2/3, gemma3), GPT-2 BPE from tokenizer.json otherwise (and always for lfm2).

mod bpe;
mod chkhsh;
mod special;
mod spm;

use std::path::Path;

pub use bpe::{chkhsh as tokenizer_chkhsh, load_tokenizer};
pub use chkhsh::{CHKHSH, CHKTXT};

use crate::arch::Arch;
use crate::config::{read_json_opt, HfConfig};
use crate::error::{ConvertError, Result};
use crate::gguf::Value;
use special::SpecialVocab;

/// llama.cpp's token types (`llama_token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenType {
    Normal = 1,
    Unknown = 2,
    Control = 3,
    UserDefined = 4,
    Unused = 5,
    Byte = 6,
}

/// A vocabulary before it becomes keys.
pub struct VocabOut {
    pub model: &'static str,
    pub pre: String,
    pub tokens: Vec<String>,
    pub types: Vec<TokenType>,
    pub scores: Option<Vec<f32>>,
}

impl VocabOut {
    fn to_kv(&self, kv: &mut Vec<(String, Value)>) {
        kv.push(("tokenizer.ggml.model".into(), Value::Str(self.model.into())));
        kv.push(("tokenizer.ggml.pre".into(), Value::Str(self.pre.clone())));
        kv.push(("tokenizer.ggml.tokens".into(), Value::Strs(self.tokens.clone())));
        if let Some(s) = &self.scores {
            kv.push(("tokenizer.ggml.scores".into(), Value::F32s(s.clone())));
        }
        kv.push((
            "tokenizer.ggml.token_type".into(),
            Value::I32s(self.types.iter().map(|&t| t as i32).collect()),
        ));
    }
}

/// The `tokenizer.*` keys of `dir`'s tokenizer, and the number of tokens.
pub fn tokenizer_keys(dir: &Path, arch: Arch, cfg: &HfConfig) -> Result<(Vec<(String, Value)>, usize)> {
    let mut kv = vec![];
    let has_spm = dir.join("tokenizer.model").is_file();
    let vocab_size = cfg.find_u64(&["vocab_size"]).map(|n| n as usize);
    if arch == Arch::Llama {
        // LlamaModel.set_vocab: the tokenizer's add_prefix_space first.
        if let Some(b) = read_json_opt(&dir.join("tokenizer_config.json"))?
            .and_then(|c| c.get("add_prefix_space")?.as_bool())
        {
            kv.push(("tokenizer.ggml.add_space_prefix".into(), Value::Bool(b)));
        }
    }
    let spm = has_spm && matches!(arch, Arch::Llama | Arch::Qwen2 | Arch::Qwen3 | Arch::Gemma3);
    let n_tokens = if spm {
        let v = spm::vocab(dir, vocab_size)?;
        v.to_kv(&mut kv);
        SpecialVocab::load(dir, false, Some(v.tokens.len()))?.to_kv(&mut kv);
        if arch == Arch::Gemma3 {
            kv.push(("tokenizer.ggml.add_space_prefix".into(), Value::Bool(false)));
        }
        v.tokens.len()
    } else {
        if arch == Arch::Llama && is_spm_json(dir)? {
            return Err(ConvertError::tokenizer(
                "a SentencePiece-style tokenizer.json without tokenizer.model (llama.cpp's LlamaHfVocab path) is not supported; add tokenizer.model",
            ));
        }
        let tok = load_tokenizer(dir)?;
        let n = vocab_size.unwrap_or_else(|| tok.get_vocab_size(true));
        let v = bpe::vocab_base(&tok, n)?;
        v.to_kv(&mut kv);
        SpecialVocab::load(dir, true, None)?.to_kv(&mut kv);
        v.tokens.len()
    };
    if arch == Arch::Llama {
        llama_extras(cfg, &mut kv);
    }
    Ok((kv, n_tokens))
}

/// LlamaModel.set_vocab's special cases: CodeLlama (vocab 32016) gets EOT 32010 (gguf-py has
/// no keys for the prefix/suffix/middle ids it also sets), and vocab 49152 (granite small;
/// SmolLM's size too) add_bos_token = false.
fn llama_extras(cfg: &HfConfig, kv: &mut Vec<(String, Value)>) {
    let (key, value) = match cfg.find_u64(&["vocab_size"]).unwrap_or(32000) {
        32016 if !kv.iter().any(|(k, _)| k == "tokenizer.ggml.eot_token_id") => {
            ("tokenizer.ggml.eot_token_id", Value::U32(32010))
        }
        49152 => ("tokenizer.ggml.add_bos_token", Value::Bool(false)),
        _ => return,
    };
    match kv.iter_mut().find(|(k, _)| k == key) {
        Some(e) => e.1 = value,
        None => kv.push((key.into(), value)),
    }
}

/// Whether tokenizer.json is a SentencePiece model written as BPE with byte fallback
/// (`LlamaHfVocab`'s test), which llama.cpp converts as an SPM vocabulary.
fn is_spm_json(dir: &Path) -> Result<bool> {
    let Some(tok) = read_json_opt(&dir.join("tokenizer.json"))? else { return Ok(false) };
    let model = &tok["model"];
    let llama3 = model["type"] == "BPE"
        && model["ignore_merges"].as_bool().unwrap_or(false)
        && !model["byte_fallback"].as_bool().unwrap_or(true);
    Ok(!llama3
        && model["type"] == "BPE"
        && model["byte_fallback"].as_bool().unwrap_or(false)
        && tok["decoder"]["type"] == "Sequence")
}
