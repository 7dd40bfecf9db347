//! GGUF vocab → tokenizer that encodes exactly as llama.cpp does (the parity reference).
//!
//! `gpt2` vocabs: special-token partition → per-`pre` regex split → byte-level BPE (the HF
//! `tokenizers` BPE model does the merging). `llama` vocabs: partition → `▁` escaping →
//! llama.cpp's score-ordered SentencePiece merge, which HF's rank-based BPE cannot mirror
//! on ties. Everything around the merge follows llama.cpp's code paths, since that is
//! where HF and llama.cpp disagree (special tokens, multi-regex splitting, attributes).

mod bpe;
mod detokenize;
mod partition;
mod pretokenize;
mod spm;
mod vocab;

pub use bpe::byte_chars;
pub use detokenize::Detokenizer;

use crate::error::{Result, WickError};
use crate::gguf::Metadata;
use bpe::Bpe;
use detokenize::Pieces;
use partition::{partition, Fragment};
use spm::Spm;
use vocab::{attr, Kind, Vocab};

enum Model {
    Spm(Box<Spm>),
    Bpe(Box<Bpe>),
}

pub struct Tokenizer {
    vocab: Vocab,
    model: Model,
    /// Partition order: longest text first.
    specials: Vec<u32>,
    pieces: Pieces,
    chat_template: Option<String>,
}

impl Tokenizer {
    pub fn from_gguf(meta: &Metadata) -> Result<Self> {
        let model_name = meta
            .opt_str("tokenizer.ggml.model")?
            .ok_or_else(|| WickError::load("missing metadata key `tokenizer.ggml.model`"))?;
        let (vocab, model) = match model_name {
            "llama" => {
                let vocab = Vocab::from_gguf(meta, Kind::Spm, true)?;
                let spm = Spm::new(&vocab);
                (vocab, Model::Spm(Box::new(spm)))
            }
            "gpt2" => {
                // Like llama.cpp, a vocab without `pre` gets the default split.
                let pre = meta.opt_str("tokenizer.ggml.pre")?.filter(|p| !p.is_empty()).unwrap_or("default");
                let spec = pretokenize::spec(pre).ok_or_else(|| {
                    WickError::UnsupportedTokenizer(format!("unknown pre-tokenizer `{pre}`"))
                })?;
                let vocab = Vocab::from_gguf(meta, Kind::Bpe, spec.add_bos)?;
                let bpe = Bpe::new(meta, &vocab, &spec)?;
                (vocab, Model::Bpe(Box::new(bpe)))
            }
            other => {
                return Err(WickError::UnsupportedTokenizer(format!("unknown tokenizer model `{other}`")))
            }
        };
        let chat_template = meta.get("tokenizer.chat_template").and_then(|v| v.as_str()).map(str::to_string);
        Ok(Self {
            specials: vocab.special_tokens(),
            pieces: Pieces::new(&vocab),
            vocab,
            model,
            chat_template,
        })
    }

    pub fn n_vocab(&self) -> usize {
        self.vocab.texts.len()
    }

    /// `add_special`: BOS/EOS as the vocab's `add_bos_token`/`add_eos_token` say.
    /// `parse_special`: control-token text such as "<|im_start|>" becomes that token;
    /// otherwise it is tokenized as plain text (user-defined tokens are always matched).
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<u32>> {
        let v = &self.vocab;
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && v.add_bos {
            out.extend(v.bos);
        }
        // SentencePiece text gets a leading space at the start and after each special token.
        let mut after_special = true;
        for frag in partition(v, &self.specials, text, parse_special) {
            match frag {
                Fragment::Token(id) => {
                    out.push(id);
                    after_special = true;
                }
                Fragment::Text(r) => {
                    let t = &text[r];
                    match &self.model {
                        Model::Bpe(bpe) => bpe.encode(v, t, &mut out)?,
                        Model::Spm(spm) => {
                            let mut escaped = String::with_capacity(t.len() + 3);
                            if v.add_space_prefix && after_special {
                                escaped.push('▁');
                            }
                            escaped.extend(t.chars().map(|c| if c == ' ' { '▁' } else { c }));
                            spm.encode(v, &escaped, &mut out);
                        }
                    }
                    after_special = false;
                }
            }
        }
        if add_special && v.add_eos {
            out.extend(v.eos);
        }
        Ok(out)
    }

    /// Bytes of one token as llama.cpp's `token_to_piece(special = true)` renders them;
    /// empty for an id outside the vocab.
    pub fn token_bytes(&self, id: u32) -> Vec<u8> {
        self.piece(id).to_vec()
    }

    /// Whole-sequence text, the inverse of `encode` where the bytes are valid UTF-8: the
    /// space SentencePiece prefixed at the start and after each special token is removed
    /// again. `skip_special` drops control (and unknown) tokens.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        let prefixed = self.vocab.kind == Kind::Spm && self.vocab.add_space_prefix;
        let mut bytes = Vec::new();
        let mut strip = prefixed;
        for &id in ids {
            let piece = self.piece(id);
            if self.vocab.attr(id) & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0 {
                if !(skip_special && self.is_hidden(id)) {
                    bytes.extend_from_slice(piece);
                }
                strip = prefixed;
                continue;
            }
            let piece = match piece {
                [b' ', rest @ ..] if strip => rest,
                p => p,
            };
            strip = false;
            bytes.extend_from_slice(piece);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    pub fn bos(&self) -> Option<u32> {
        self.vocab.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.vocab.eos
    }

    /// Whether llama.cpp prepends BOS for this vocab.
    pub fn add_bos(&self) -> bool {
        self.vocab.add_bos && self.vocab.bos.is_some()
    }

    /// End of generation: EOS, EOT, EOM, FIM pad/repo/sep and the turn-end texts llama.cpp
    /// recognises ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", …).
    pub fn is_eog(&self, id: u32) -> bool {
        self.vocab.eog.contains(&id)
    }

    /// Every end-of-generation id, ascending.
    pub fn eog_tokens(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self.vocab.eog.iter().copied().collect();
        ids.sort_unstable();
        ids
    }

    pub fn is_control(&self, id: u32) -> bool {
        self.vocab.attr(id) & attr::CONTROL != 0
    }

    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.lookup(text)
    }

    /// Byte-level BPE (`gpt2` vocabs): any text fragment encodes as the whole text would
    /// around it (no SentencePiece space prefix), which forcing grammar spans relies on.
    pub fn is_byte_level(&self) -> bool {
        matches!(self.model, Model::Bpe(_))
    }

    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    fn piece(&self, id: u32) -> &[u8] {
        self.pieces.get(id)
    }

    /// Tokens llama.cpp's `token_to_piece(special = false)` renders as nothing: control and
    /// unknown tokens. User-defined tokens are text and always render.
    pub fn is_hidden(&self, id: u32) -> bool {
        self.vocab.attr(id) & (attr::CONTROL | attr::UNKNOWN) != 0
    }
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("kind", &self.vocab.kind)
            .field("n_vocab", &self.n_vocab())
            .field("bos", &self.vocab.bos)
            .field("eos", &self.vocab.eos)
            .finish_non_exhaustive()
    }
}
