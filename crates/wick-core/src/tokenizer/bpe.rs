//! GPT-2 style byte-level BPE: every byte of a pre-tokenized word maps to a printable
//! character, then merges apply by rank. The merging itself is the HF `tokenizers` BPE
//! model, which pops the lowest rank first and the leftmost pair on ties, as llama.cpp does.

use std::collections::HashSet;

use tokenizers::models::bpe::{Vocab as HfVocab, BPE};
use tokenizers::Model;

use super::pretokenize::{PreSpec, PreTokenizer};
use super::vocab::Vocab;
use crate::error::{Result, WickError};
use crate::gguf::Metadata;

/// GPT-2's byte ↔ char table: printable Latin-1 bytes stand for themselves, the rest are
/// shifted to U+0100 onwards so no byte maps to whitespace or a control character.
pub(crate) fn byte_chars() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut shifted = 0u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        table[b as usize] = if printable {
            b as char
        } else {
            shifted += 1;
            char::from_u32(255 + shifted).unwrap_or('\0')
        };
    }
    table
}

pub(crate) struct Bpe {
    model: BPE,
    pre: PreTokenizer,
    byte_chars: [char; 256],
}

impl Bpe {
    pub fn new(meta: &Metadata, vocab: &Vocab, spec: &PreSpec) -> Result<Self> {
        let merges = meta
            .str_array("tokenizer.ggml.merges")?
            .ok_or_else(|| WickError::load("missing metadata key `tokenizer.ggml.merges`"))?;
        let hf_vocab: HfVocab = vocab.index.iter().map(|(t, &id)| (t.clone(), id)).collect();
        // llama.cpp keeps the first rank of a repeated pair. HF's builder also rejects a
        // merge whose parts or result are not tokens; llama.cpp would never emit such a
        // result as one token either, so dropping those merges only matters for broken vocabs.
        let mut seen = HashSet::with_capacity(merges.len());
        let merges = merges
            .iter()
            .filter_map(|m| {
                // Split at the first space after the first byte, so a part may be " ".
                let split = m.bytes().skip(1).position(|b| b == b' ')? + 1;
                let (a, b) = (&m[..split], &m[split + 1..]);
                let known = vocab.index.contains_key(a)
                    && vocab.index.contains_key(b)
                    && vocab.index.contains_key(&format!("{a}{b}"));
                (known && seen.insert((a, b))).then(|| (a.to_string(), b.to_string()))
            })
            .collect();
        let model = BPE::builder()
            .vocab_and_merges(hf_vocab, merges)
            .ignore_merges(spec.ignore_merges)
            .build()
            .map_err(|e| WickError::load(format!("cannot build BPE tokenizer: {e}")))?;
        Ok(Self { model, pre: PreTokenizer::new(spec)?, byte_chars: byte_chars() })
    }

    pub fn encode(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        let mut word = String::new();
        for piece in self.pre.split(text) {
            word.clear();
            word.extend(piece.bytes().map(|b| self.byte_chars[b as usize]));
            let tokens = self
                .model
                .tokenize(&word)
                .map_err(|e| WickError::Internal(format!("BPE tokenization failed: {e}")))?;
            out.extend(tokens.into_iter().map(|t| t.id));
        }
        Ok(())
    }
}
