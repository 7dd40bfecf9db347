//! GGUF vocab → tokenizer (placeholder until the tokenizer lands).

use crate::error::{Result, WickError};
use crate::gguf::Metadata;

pub struct Tokenizer {
    n_vocab: usize,
}

impl Tokenizer {
    pub fn from_gguf(meta: &Metadata) -> Result<Self> {
        let n = meta.str_array("tokenizer.ggml.tokens")?.map(|t| t.len()).unwrap_or(0);
        Err(WickError::UnsupportedTokenizer(format!("pending ({n} tokens)")))
    }
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }
}
