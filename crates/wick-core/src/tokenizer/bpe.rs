//! GPT-2 style byte-level BPE: every byte of a pre-tokenized word maps to a printable
//! character, then merges apply by rank. The merging itself is the HF `tokenizers` BPE
//! model, which pops the lowest rank first and the leftmost pair on ties, as llama.cpp does.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;

use tokenizers::models::bpe::{Vocab as HfVocab, BPE};
use tokenizers::Model;

use super::pretokenize::{PreSpec, PreTokenizer};
use super::vocab::Vocab;
use crate::error::{Result, WickError};
use crate::gguf::Metadata;

/// GPT-2's byte ↔ char table: printable Latin-1 bytes stand for themselves, the rest are
/// shifted to U+0100 onwards so no byte maps to whitespace or a control character.
pub fn byte_chars() -> [char; 256] {
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
    model: LazyModel,
    pre: PreTokenizer,
    byte_chars: [char; 256],
    /// Bytes whose character is a token. Some vocabs (falcon) lack a few; llama.cpp keeps
    /// such a character as a barrier no merge crosses and then drops it, whereas HF's
    /// BPE would drop it first and merge its neighbours.
    known: [bool; 256],
    /// A word that is itself a token is emitted whole, skipping merges (llama3 family).
    ignore_merges: bool,
}

impl Bpe {
    pub fn new(meta: &Metadata, vocab: &Vocab, spec: &PreSpec) -> Result<Self> {
        let merges = meta
            .str_array("tokenizer.ggml.merges")?
            .ok_or_else(|| WickError::load("missing metadata key `tokenizer.ggml.merges`"))?
            .iter()
            .map(|m| m.to_string())
            .collect::<Vec<_>>();
        let index = vocab.index.clone();
        let byte_chars = byte_chars();
        let known = byte_chars.map(|c| vocab.index.contains_key(c.encode_utf8(&mut [0; 4]) as &str));
        Ok(Self {
            model: LazyModel::build(move || merge_table(index, &merges)),
            pre: PreTokenizer::new(spec)?,
            byte_chars,
            known,
            ignore_merges: spec.ignore_merges,
        })
    }

    pub fn encode(&self, vocab: &Vocab, text: &str, out: &mut Vec<u32>) -> Result<()> {
        let mut word = String::new();
        for piece in self.pre.split(text) {
            word.clear();
            word.extend(piece.bytes().map(|b| self.byte_chars[b as usize]));
            if let Some(id) = self.ignore_merges.then(|| vocab.lookup(&word)).flatten() {
                out.push(id);
                continue;
            }
            // Merge each run between characters that are not tokens; those are dropped.
            let mut start = 0;
            for ((at, c), b) in word.char_indices().zip(piece.bytes()) {
                if !self.known[b as usize] {
                    self.merge(&word[start..at], out)?;
                    start = at + c.len_utf8();
                }
            }
            self.merge(&word[start..], out)?;
        }
        Ok(())
    }

    fn merge(&self, run: &str, out: &mut Vec<u32>) -> Result<()> {
        if run.is_empty() {
            return Ok(());
        }
        let tokens = self
            .model
            .get()?
            .tokenize(run)
            .map_err(|e| WickError::Internal(format!("BPE tokenization failed: {e}")))?;
        out.extend(tokens.into_iter().map(|t| t.id));
        Ok(())
    }
}

/// HF's BPE model over the vocabulary and its merges. llama.cpp keeps the first rank of a
/// repeated pair. HF's builder also rejects a merge whose parts or result are not tokens;
/// llama.cpp would never emit such a result as one token either, so dropping those merges
/// only matters for broken vocabs. `ignore_merges` applies to whole words only, so it is
/// handled by `Bpe`, not by HF.
fn merge_table(index: HashMap<String, u32>, merges: &[String]) -> Result<BPE> {
    let mut seen = HashSet::with_capacity(merges.len());
    let mut joined = String::new();
    let merges = merges
        .iter()
        .filter_map(|m| {
            // Split at the first space after the first byte, so a part may be " ".
            let split = m.bytes().skip(1).position(|b| b == b' ')? + 1;
            let (a, b) = (&m[..split], &m[split + 1..]);
            joined.clear();
            joined.push_str(a);
            joined.push_str(b);
            let known = index.contains_key(a) && index.contains_key(b) && index.contains_key(&joined);
            (known && seen.insert((a, b))).then(|| (a.to_string(), b.to_string()))
        })
        .collect();
    let hf_vocab: HfVocab = index.into_iter().collect();
    BPE::builder()
        .vocab_and_merges(hf_vocab, merges)
        .build()
        .map_err(|e| WickError::load(format!("cannot build BPE tokenizer: {e}")))
}

/// The merge table, built on a thread of its own from the load on: with a large vocabulary
/// it is most of the tokenizer's load time, and only encoding text needs it — by then the
/// server has started (an engine that never encodes never waits for it).
struct LazyModel {
    built: OnceLock<std::result::Result<BPE, String>>,
    building: Mutex<Option<JoinHandle<Result<BPE>>>>,
}

impl LazyModel {
    fn build(f: impl FnOnce() -> Result<BPE> + Send + 'static) -> Self {
        let (built, building) = match std::thread::Builder::new().name("wick-bpe".into()).spawn(f) {
            Ok(h) => (OnceLock::new(), Some(h)),
            Err(e) => (OnceLock::from(Err(format!("cannot start the BPE build: {e}"))), None),
        };
        Self { built, building: Mutex::new(building) }
    }

    /// The model, once built (waiting for the build the first time).
    fn get(&self) -> Result<&BPE> {
        let built = self.built.get_or_init(|| {
            let handle = self.building.lock().ok().and_then(|mut h| h.take());
            match handle.map(JoinHandle::join) {
                Some(Ok(built)) => built.map_err(|e| e.to_string()),
                Some(Err(_)) => Err("the BPE build panicked".into()),
                None => Err("the BPE build was lost".into()),
            }
        });
        built.as_ref().map_err(|e| WickError::load(e.clone()))
    }
}
