//! The token table read from GGUF metadata, with the attribute fix-ups, special ids and
//! end-of-generation set that llama.cpp derives at load time (`llama_vocab::impl::load`).
//! Encoding parity depends on these: a token's attributes decide whether it is split out
//! of raw text before the model's own tokenization runs.

use std::collections::{HashMap, HashSet};

use crate::error::{Result, WickError};
use crate::gguf::Metadata;

/// Token attributes (llama.cpp `llama_token_attr`); 0 is "undefined".
pub(crate) mod attr {
    pub const UNKNOWN: u16 = 1 << 0;
    pub const UNUSED: u16 = 1 << 1;
    pub const NORMAL: u16 = 1 << 2;
    pub const CONTROL: u16 = 1 << 3;
    pub const USER_DEFINED: u16 = 1 << 4;
    pub const BYTE: u16 = 1 << 5;
    pub const RSTRIP: u16 = 1 << 7;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `tokenizer.ggml.model = llama`: SentencePiece merges by score.
    Spm,
    /// `tokenizer.ggml.model = gpt2`: byte-level BPE merges by rank.
    Bpe,
}

pub(crate) struct Vocab {
    pub kind: Kind,
    pub texts: Vec<String>,
    pub scores: Vec<f32>,
    pub attrs: Vec<u16>,
    pub index: HashMap<String, u32>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub unk: Option<u32>,
    pub eog: HashSet<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
    pub add_space_prefix: bool,
}

/// Texts llama.cpp treats as end-of-generation whatever their GGUF type; they are also
/// forced to CONTROL, which keeps them out of plain-text tokenization.
#[rustfmt::skip]
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~[",
];

/// Fill-in-the-middle roles: GGUF keys, then the texts llama.cpp recognises when no key is
/// set (the first match becomes CONTROL), and whether the role ends generation.
#[rustfmt::skip]
const FIM_ROLES: &[(&[&str], &[&str], bool)] = &[
    (&["tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"],
     &["<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>"],
     false),
    (&["tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id"],
     &["<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>"],
     false),
    (&["tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id"],
     &["<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>"],
     false),
    (&["tokenizer.ggml.fim_pad_token_id"], &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"], true),
    (&["tokenizer.ggml.fim_rep_token_id"], &["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"], true),
    (&["tokenizer.ggml.fim_sep_token_id"], &["<|file_sep|>"], true),
];

impl Vocab {
    /// `add_bos` is llama.cpp's default for this model when the GGUF flag is absent.
    pub fn from_gguf(meta: &Metadata, kind: Kind, add_bos: bool) -> Result<Self> {
        let tokens = meta
            .str_array("tokenizer.ggml.tokens")?
            .ok_or_else(|| WickError::load("missing metadata key `tokenizer.ggml.tokens`"))?;
        let n = tokens.len();
        if n == 0 || n > u32::MAX as usize {
            return Err(WickError::load(format!("tokenizer has {n} tokens")));
        }
        let scores = match meta.f32_array("tokenizer.ggml.scores")? {
            Some(s) if s.len() < n => {
                return Err(WickError::load(format!("tokenizer has {n} tokens but {} scores", s.len())))
            }
            Some(s) => s[..n].to_vec(),
            None => vec![0.0; n],
        };
        let types = meta.i64_array("tokenizer.ggml.token_type")?;
        if types.as_ref().is_some_and(|t| t.len() < n) {
            return Err(WickError::load("tokenizer.ggml.token_type is shorter than the token list"));
        }
        let mut texts = Vec::with_capacity(n);
        let mut attrs = Vec::with_capacity(n);
        let mut index = HashMap::with_capacity(n);
        for (i, t) in tokens.iter().enumerate() {
            // llama.cpp renames empty tokens so they never match text.
            let text = if t.is_empty() { format!("[EMPTY_{i}]") } else { t.to_string() };
            index.insert(text.clone(), i as u32);
            texts.push(text);
            attrs.push(match types.as_ref().map_or(1, |t| t[i]) {
                1 => attr::NORMAL,
                2 => attr::UNKNOWN,
                3 => attr::CONTROL,
                4 => attr::USER_DEFINED,
                5 => attr::UNUSED,
                6 => attr::BYTE,
                _ => 0,
            });
        }

        let in_range = |id: u64| (id < n as u64).then_some(id as u32);
        let key_id = |key: &str| meta.get(key).and_then(|v| v.as_u64()).and_then(in_range);
        let (bos0, eos0, unk0) = match kind {
            Kind::Spm => (Some(1), Some(2), Some(0)),
            Kind::Bpe => (Some(11), Some(11), None),
        };
        let default = |d: Option<u64>| d.and_then(in_range);
        let bos = key_id("tokenizer.ggml.bos_token_id").or(default(bos0));
        let eos = key_id("tokenizer.ggml.eos_token_id").or(default(eos0));
        let unk = key_id("tokenizer.ggml.unknown_token_id").or(default(unk0));
        let eot = key_id("tokenizer.ggml.eot_token_id");
        let eom = key_id("tokenizer.ggml.eom_token_id");

        let flag = |key: &str, d: bool| meta.get(key).and_then(|v| v.as_bool()).unwrap_or(d);
        let mut v = Vocab {
            kind,
            texts,
            scores,
            attrs,
            index,
            bos,
            eos,
            unk,
            eog: HashSet::new(),
            add_bos: flag("tokenizer.ggml.add_bos_token", add_bos),
            add_eos: flag("tokenizer.ggml.add_eos_token", false),
            add_space_prefix: flag("tokenizer.ggml.add_space_prefix", kind == Kind::Spm),
        };

        for (keys, candidates, ends) in FIM_ROLES {
            let id = keys.iter().find_map(|k| key_id(k)).or_else(|| {
                let id = v.first_with_text(candidates)?;
                v.attrs[id as usize] |= attr::CONTROL;
                Some(id)
            });
            if let (Some(id), true) = (id, *ends) {
                v.eog.insert(id);
            }
        }
        for id in 0..n {
            if EOG_TEXTS.contains(&v.texts[id].as_str()) {
                v.eog.insert(id as u32);
                v.attrs[id] |= attr::CONTROL;
            }
        }
        // gpt-oss channel markers are always rendered as text.
        for t in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
            v.set_attr(t, attr::USER_DEFINED);
        }
        v.eog.extend([eos, eot, eom].into_iter().flatten());
        // Harmony-style vocabs end a turn with <|return|>/<|call|>, not <|end|>.
        let has = |v: &Vocab, t: &str| v.index.get(t).is_some_and(|id| v.eog.contains(id));
        if has(&v, "<|end|>")
            && ((has(&v, "<|return|>") && has(&v, "<|call|>"))
                || (has(&v, "<|calls|>") && has(&v, "<|flush|>")))
        {
            let id = v.index["<|end|>"];
            v.eog.remove(&id);
            v.attrs[id as usize] = attr::USER_DEFINED;
        }
        if has(&v, "<|tool_response>") && has(&v, "</s>") {
            let id = v.index["</s>"];
            v.eog.remove(&id);
            v.attrs[id as usize] = attr::NORMAL;
        }
        v.apply_model_quirks(meta);
        Ok(v)
    }

    fn first_with_text(&self, candidates: &[&str]) -> Option<u32> {
        self.texts.iter().position(|t| candidates.contains(&t.as_str())).map(|i| i as u32)
    }

    fn set_attr(&mut self, text: &str, value: u16) {
        if let Some(&id) = self.index.get(text) {
            self.attrs[id as usize] = value;
        }
    }

    /// Phi-3 strips whitespace after its chat markers; llama.cpp keys this on the model name.
    fn apply_model_quirks(&mut self, meta: &Metadata) {
        let name = meta.get("general.name").and_then(|v| v.as_str()).unwrap_or("").to_lowercase();
        if !(name.contains("phi-3") || name.contains("phi3")) {
            return;
        }
        for a in self.attrs.iter_mut() {
            if *a & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0 {
                *a |= attr::RSTRIP;
            }
        }
        for (text, on) in [("</s>", true), ("<unk>", false), ("<s>", false), ("<|endoftext|>", false)] {
            if let Some(&id) = self.index.get(text) {
                let a = &mut self.attrs[id as usize];
                *a = if on { *a | attr::RSTRIP } else { *a & !attr::RSTRIP };
            }
        }
    }

    pub fn attr(&self, id: u32) -> u16 {
        self.attrs.get(id as usize).copied().unwrap_or(0)
    }

    pub fn lookup(&self, text: &str) -> Option<u32> {
        self.index.get(text).copied()
    }

    /// Tokens split out of raw text before tokenization, longest first (ties by id, which
    /// makes llama.cpp's unspecified order deterministic).
    pub fn special_tokens(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = (0..self.texts.len() as u32)
            .filter(|&id| self.attr(id) & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0)
            .collect();
        ids.sort_by_key(|&id| std::cmp::Reverse(self.texts[id as usize].len()));
        ids
    }
}
