//! The model's vocabulary as llguidance sees it: one `TokTrie` of the bytes each token adds to
//! the visible text, built the way llama.cpp's llguidance sampler builds it
//! (`common/llguidance.cpp`): a token that renders as nothing without special tokens (control,
//! unknown) is a special token, its text behind llguidance's 0xFF marker, so a Lark grammar
//! names it as `<|tool_call_start|>` and no text terminal can ever match it. Every
//! end-of-generation token counts as EOS.

use std::sync::Arc;

use toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use crate::error::{Result, WickError};
use crate::tokenizer::Tokenizer;

struct WickTokEnv {
    trie: TokTrie,
    /// The model's own tokenizer where it is canonical over fragments (byte-level BPE), so
    /// llguidance forces a grammar's fixed spans (`<tool_call>\n{"name": "`) as the tokens the
    /// tokenizer would write, not one sampled sliver at a time; None for SentencePiece vocabs,
    /// whose fragments would gain a space prefix.
    canonical: Option<Arc<Tokenizer>>,
}

impl TokenizerEnv for WickTokEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    /// Used to force tokens (llguidance's `ff_tokens`). Text is encoded by the model's
    /// tokenizer; bytes past the last whole UTF-8 character go greedily over the trie (every
    /// byte is a token in a byte-level vocabulary).
    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        let Some(tok) = &self.canonical else { return self.trie.greedy_tokenize(s) };
        let valid = match std::str::from_utf8(s) {
            Ok(_) => s.len(),
            Err(e) => e.valid_up_to(),
        };
        let text = std::str::from_utf8(&s[..valid]).unwrap_or_default();
        let mut ids =
            tok.encode(text, false, false).unwrap_or_else(|_| self.trie.greedy_tokenize(&s[..valid]));
        ids.extend(self.trie.greedy_tokenize(&s[valid..]));
        ids
    }

    fn tokenize_is_canonical(&self) -> bool {
        self.canonical.is_some()
    }
}

/// The bytes of every token as the trie holds them.
fn token_words(tok: &Tokenizer) -> Vec<Vec<u8>> {
    (0..tok.n_vocab() as u32)
        .map(|id| {
            let bytes = tok.token_bytes(id);
            if tok.is_hidden(id) {
                let mut w = Vec::with_capacity(bytes.len() + 1);
                w.push(TokTrie::SPECIAL_TOKEN_MARKER);
                w.extend_from_slice(&bytes);
                w
            } else if bytes.first() == Some(&TokTrie::SPECIAL_TOKEN_MARKER) {
                // A text token starting with byte 0xFF (never valid UTF-8) would read as a
                // special token; no grammar over text can use it, so leave it out.
                Vec::new()
            } else {
                bytes
            }
        })
        .collect()
}

/// Builds the trie (tens of milliseconds for a 50k vocabulary): once per model, on first use.
pub(super) fn token_env(tok: &Arc<Tokenizer>) -> Result<TokEnv> {
    let eos = tok.eog_tokens();
    let Some(&first) = eos.first() else {
        return Err(WickError::InvalidGrammar(
            "this model's vocabulary has no end-of-generation token, which grammars need".into(),
        ));
    };
    let words = token_words(tok);
    let info = TokRxInfo { tok_bos: tok.bos(), ..TokRxInfo::new(words.len() as u32, first) };
    // toktrie asserts on malformed input; a vocabulary is not the client's, but never panic.
    let trie = std::panic::catch_unwind(|| TokTrie::from(&info, &words).with_eos_tokens(&eos))
        .map_err(|_| WickError::Internal("cannot build the token trie for this vocabulary".into()))?;
    let canonical = tok.is_byte_level().then(|| tok.clone());
    Ok(Arc::new(WickTokEnv { trie, canonical }))
}
