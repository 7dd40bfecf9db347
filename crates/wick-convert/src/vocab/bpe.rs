//! The GPT-2-style BPE vocabulary (`TextModel._set_vocab_gpt2` / `get_vocab_base`): tokens
//! and types from tokenizer.json (through the `tokenizers` crate, as transformers' fast
//! tokenizer reads it), and the pre-tokenizer name found as llama.cpp finds it: the sha256 of
//! the token ids of a fixed text, looked up in the converter's table.

use std::path::Path;

use sha2::{Digest, Sha256};
use tokenizers::Tokenizer;

use super::chkhsh::{CHKHSH, CHKTXT};
use super::{TokenType, VocabOut};
use crate::error::{ConvertError, Result};

/// `does_token_look_special`.
pub fn looks_special(t: &str) -> bool {
    matches!(t, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
        || (t.starts_with("<|") && t.ends_with("|>"))
        || (t.starts_with("<\u{ff5c}") && t.ends_with("\u{ff5c}>"))
        || (t.starts_with("<unused") && t.ends_with('>'))
}

pub fn load_tokenizer(dir: &Path) -> Result<Tokenizer> {
    let path = dir.join("tokenizer.json");
    if !path.is_file() {
        return Err(ConvertError::Missing { path, what: "tokenizer.json (or tokenizer.model)" });
    }
    Tokenizer::from_file(&path).map_err(|e| ConvertError::tokenizer(format!("{}: {e}", path.display())))
}

/// The hash llama.cpp's converter computes: sha256 of Python's `str(list_of_ids)`.
pub fn chkhsh(tok: &Tokenizer) -> Result<String> {
    let enc = tok.encode(CHKTXT, true).map_err(|e| ConvertError::tokenizer(e.to_string()))?;
    let ids: Vec<String> = enc.get_ids().iter().map(|i| i.to_string()).collect();
    let repr = format!("[{}]", ids.join(", "));
    Ok(Sha256::digest(repr.as_bytes()).iter().map(|b| format!("{b:02x}")).collect())
}

/// `get_vocab_base_pre`: the `tokenizer.ggml.pre` name for this tokenizer.
pub fn detect_pre(tok: &Tokenizer) -> Result<String> {
    let h = chkhsh(tok)?;
    CHKHSH.iter().find(|(k, _)| *k == h).map(|(_, v)| v.to_string()).ok_or_else(|| {
        ConvertError::tokenizer(format!(
            "the BPE pre-tokenizer was not recognized (chkhsh {h}): llama.cpp's converter does not know it either \
             (see get_vocab_base_pre in convert_hf_to_gguf.py)"
        ))
    })
}

/// `get_vocab_base`: `n_vocab` tokens (ids missing from the tokenizer become `[PADi]`), their
/// types, and the pre-tokenizer.
pub fn vocab_base(tok: &Tokenizer, n_vocab: usize) -> Result<VocabOut> {
    let vocab = tok.get_vocab(true);
    if let Some(max) = vocab.values().max() {
        if *max as usize >= n_vocab {
            return Err(ConvertError::tokenizer(format!(
                "token id {max} is past config.json's vocab_size {n_vocab}"
            )));
        }
    }
    let pre = detect_pre(tok)?;
    let mut reverse: Vec<Option<&str>> = vec![None; n_vocab];
    for (t, &id) in &vocab {
        reverse[id as usize] = Some(t.as_str());
    }
    let added = tok.get_added_tokens_decoder();
    let added_contents: std::collections::HashSet<&str> =
        added.values().map(|a| a.content.as_str()).collect();
    let mut tokens = Vec::with_capacity(n_vocab);
    let mut types = Vec::with_capacity(n_vocab);
    for (i, entry) in reverse.iter().enumerate() {
        let Some(t) = entry else {
            tokens.push(format!("[PAD{i}]"));
            types.push(TokenType::Unused);
            continue;
        };
        let mut token = t.to_string();
        if added_contents.contains(t) {
            let info = added.get(&(i as u32));
            let normalized = info.is_none_or(|a| a.normalized);
            if !normalized {
                // As the converter: llama.cpp expects added tokens pre-normalized.
                let enc =
                    tok.encode(token.as_str(), false).map_err(|e| ConvertError::tokenizer(e.to_string()))?;
                token =
                    tok.decode(enc.get_ids(), false).map_err(|e| ConvertError::tokenizer(e.to_string()))?;
            }
            if info.is_some_and(|a| a.special) || looks_special(&token) {
                types.push(TokenType::Control);
            } else {
                token = token.replace('\u{2581}', " ");
                types.push(TokenType::UserDefined);
            }
        } else {
            types.push(TokenType::Normal);
        }
        tokens.push(token);
    }
    Ok(VocabOut { model: "gpt2", pre, tokens, types, scores: None })
}
