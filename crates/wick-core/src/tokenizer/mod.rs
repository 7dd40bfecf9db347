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
    pub fn encode(&self, _t: &str, _a: bool, _p: bool) -> Result<Vec<u32>> { Ok(vec![]) }
    pub fn token_bytes(&self, _id: u32) -> Vec<u8> { vec![] }
    pub fn decode(&self, _ids: &[u32], _s: bool) -> String { String::new() }
    pub fn bos(&self) -> Option<u32> { None }
    pub fn eos(&self) -> Option<u32> { None }
    pub fn add_bos(&self) -> bool { false }
    pub fn is_eog(&self, _id: u32) -> bool { false }
    pub fn is_control(&self, _id: u32) -> bool { false }
    pub fn token_id(&self, _t: &str) -> Option<u32> { None }
    pub fn chat_template(&self) -> Option<&str> { None }
}
// PLACEHOLDER API (replaced by the tokenizer implementation)
pub struct Detokenizer;
impl Detokenizer {
    pub fn new() -> Self { Self }
    pub fn push(&mut self, _t: &Tokenizer, _id: u32, _s: bool) -> String { String::new() }
    pub fn flush(&mut self) -> String { String::new() }
}
