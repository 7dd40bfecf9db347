//! An LFM2-style tool-calling vocabulary, built rather than copied: LFM2's special tokens at
//! LFM2's ids, the 256 GPT-2 byte tokens, and JSON / Pythonic-call / prose pieces, with
//! LFM2's chat template. Real LFM2 vocabs (65536 tokens) are not in llama.cpp's source; this
//! one is small enough for a tiny fixture yet tokenizes tool calls into realistic pieces.

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::gguf_file;
use wick_core::error::{Result, WickError};

use super::gguf_write::Meta;
use wick_core::tokenizer::byte_chars;

/// Control tokens, id = index: LFM2's first 14, then the image tokens and a reserved token
/// that models emit mid-text and clients must never see.
pub const LFM2_CONTROL_TOKENS: &[&str] = &[
    "<|pad|>",
    "<|startoftext|>",
    "<|endoftext|>",
    "<|fim_pre|>",
    "<|fim_mid|>",
    "<|fim_suf|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|tool_list_start|>",
    "<|tool_list_end|>",
    "<|tool_call_start|>",
    "<|tool_call_end|>",
    "<|tool_response_start|>",
    "<|tool_response_end|>",
    "<|image_start|>",
    "<|image_end|>",
    "<|img_thumbnail|>",
    "<|reserved_special_token_237|>",
];

/// LFM2-VL's image tokens beyond those in `LFM2_CONTROL_TOKENS`: `<image>` and the per-tile
/// `<|img_row_R_col_C|>` (1-based, up to 10×10, as llama.cpp's mtmd writes them for tiled
/// images). `ToolVocab::build_vl` appends them as control tokens after the normal tokens, so
/// the ids of every other fixture's vocabulary stay as they were.
pub fn lfm2_image_tokens() -> Vec<String> {
    let mut out = vec!["<image>".to_string()];
    for r in 1..=10 {
        for c in 1..=10 {
            out.push(format!("<|img_row_{r}_col_{c}|>"));
        }
    }
    out
}

/// LFM2.5's reasoning markers (ids 64400/64401 in the real vocabulary). Its tokenizer marks them
/// special, so the converted GGUF types them as control tokens, and llama.cpp keeps them in the
/// text only as a chat format's "preserved tokens"; `ToolVocab::with_thinking` does the same.
pub const LFM2_THINK_TOKENS: [&str; 2] = ["<think>", "</think>"];

/// The chat template of LFM2.5's reasoning models (`<think>` blocks, past thinking dropped).
const LFM2_THINKING_TEMPLATE: &str = "models/templates/LFM2.5-8B-A1B.jinja";

/// `<|startoftext|>`, `<|im_end|>` (LFM2's BOS and EOS).
pub const LFM2_BOS: u32 = 1;
pub const LFM2_EOS: u32 = 7;

/// Multi-character normal tokens (raw text), on top of the byte tokens: what tool calls,
/// schemas, tool results and short answers are made of, several already split the way the
/// llama3 pre-tokenizer splits text (`"name`, `_weather`, `(city`, ` days`), so sampling
/// under a grammar meets pieces that straddle its boundaries, as with a real vocab.
#[rustfmt::skip]
const PIECES: &[&str] = &[
    // JSON
    "{\"", "\"}", "\":", "\": ", "\": \"", "\", \"", "\",", ", \"", "[{\"", "[{", "}]", "}}", "}}]",
    "\": {\"", "\"},", "}, {\"", "\"]", "[\"", "null", "true", "false",
    // Pythonic calls
    ")]", "),", "), ", "=\"", "='", "\")", "\")]", "\"),", "')", "')]", "', ", "\", ", "None", "True",
    "False", "[get", "(city", "(location", "(query",
    // names and schema words
    "name", "\"name", "arguments", "\"arguments", "get", "get_weather", "_weather", "weather",
    "get_time", "_time", "search", "search_web", "_web", "city", "\"city", "days", "\"days", " days",
    "unit", "\"unit", "celsius", "fahrenheit", "location", "\"location", "query", "\"query",
    "timezone", "type", "\"type", "function", "\"function", "parameters", "\"parameters",
    "properties", "\"properties", "required", "\"required", "description", "\"description",
    "object", "string", "integer", "number", "boolean", "enum",
    // values
    "Paris", "\"Paris", " Paris", "Tokyo", "\"Tokyo", "London", "\"London", "Berlin", " New", " York",
    "UTC", "10", "12", "15", "20", "21", "25", "30", "100", " 21", " 3", "temperature",
    "\"temperature", "condition", "\"condition", "sunny", "\"sunny",
    // prose and chat roles
    "What", " is", " the", " weather", " in", " and", " of", " to", " a", " for", " I", "'ll",
    " will", " check", "Let", " me", " both", " cities", "It", " It", " sunny", " cloudy", " rainy",
    " today", " tomorrow", " temperature", " degrees", "°C", "Sure", "Here", " are", "The", " The",
    "Hello", " world", "You", " helpful", " assistant", "List", " tools", "user", "assistant",
    "system", "tool", "\n\n", "  ", "   ",
];

/// The vocabulary: token texts (control tokens raw, the rest byte-level) in id order.
pub struct ToolVocab {
    tokens: Vec<String>,
    index: HashMap<String, u32>,
    byte_chars: [char; 256],
    chat_template: String,
    /// Control tokens appended after the normal ones (`build_vl`), raw text → id.
    late_controls: HashMap<String, u32>,
}

impl ToolVocab {
    /// The vocabulary with `extra` pieces (raw text) added as normal tokens, and the chat
    /// template read from `llama_src` (`models/templates/LFM2-8B-A1B.jinja`).
    pub fn build(llama_src: &Path, extra: &[&str]) -> Result<Self> {
        let chat_template = read_template(llama_src, "models/templates/LFM2-8B-A1B.jinja")?;
        let byte_chars = byte_chars();
        let mut v = Self {
            tokens: vec![],
            index: HashMap::new(),
            byte_chars,
            chat_template,
            late_controls: HashMap::new(),
        };
        for t in LFM2_CONTROL_TOKENS {
            v.push(t.to_string());
        }
        for c in byte_chars {
            v.push(c.to_string());
        }
        // Every prefix of a token is a token too, so each has a merge that builds it.
        for piece in PIECES.iter().chain(extra) {
            let text = v.byte_level(piece);
            for (end, _) in text.char_indices().skip(1) {
                v.push(text[..end].to_string());
            }
            v.push(text);
        }
        Ok(v)
    }

    /// `build` plus LFM2-VL's image tokens (`lfm2_image_tokens`) as control tokens at the end.
    pub fn build_vl(llama_src: &Path, extra: &[&str]) -> Result<Self> {
        let mut v = Self::build(llama_src, extra)?;
        for t in lfm2_image_tokens() {
            v.late_controls.insert(t.clone(), v.tokens.len() as u32);
            v.tokens.push(t);
        }
        Ok(v)
    }

    /// A reasoning model's vocabulary: `<think>`/`</think>` as control tokens at the end (the
    /// other ids unchanged) and LFM2.5-8B-A1B's chat template, which reads them.
    pub fn with_thinking(mut self, llama_src: &Path) -> Result<Self> {
        self.chat_template = read_template(llama_src, LFM2_THINKING_TEMPLATE)?;
        for t in LFM2_THINK_TOKENS {
            self.late_controls.insert(t.to_string(), self.tokens.len() as u32);
            self.tokens.push(t.to_string());
        }
        Ok(self)
    }

    fn is_control(&self, id: usize) -> bool {
        id < LFM2_CONTROL_TOKENS.len() || self.late_controls.contains_key(&self.tokens[id])
    }

    fn push(&mut self, text: String) {
        if !self.index.contains_key(&text) {
            self.index.insert(text.clone(), self.tokens.len() as u32);
            self.tokens.push(text);
        }
    }

    fn byte_level(&self, raw: &str) -> String {
        raw.bytes().map(|b| self.byte_chars[b as usize]).collect()
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The id of a control token's text or of a normal token's raw text.
    pub fn id(&self, piece: &str) -> Option<u32> {
        match LFM2_CONTROL_TOKENS.iter().position(|t| *t == piece) {
            Some(i) => Some(i as u32),
            None => {
                self.late_controls.get(piece).or_else(|| self.index.get(&self.byte_level(piece))).copied()
            }
        }
    }

    /// The `tokenizer.*` GGUF keys. Merges join each token's longest proper prefix with its
    /// last character, shortest results first, so every merge's parts and result are tokens;
    /// with `pre = "lfm2"` (llama.cpp's ignore_merges) a word that is a token is taken whole.
    pub fn metadata(&self) -> Meta {
        use gguf_file::Value as V;
        let n_control = LFM2_CONTROL_TOKENS.len();
        let mut merged: Vec<&String> = self.tokens[n_control..]
            .iter()
            .filter(|t| t.chars().count() > 1 && !self.late_controls.contains_key(*t))
            .collect();
        merged.sort_by_key(|t| t.chars().count());
        let merges = merged
            .into_iter()
            .map(|t| {
                let last = t.char_indices().last().map_or(0, |(i, _)| i);
                V::String(format!("{} {}", &t[..last], &t[last..]))
            })
            .collect();
        let types = (0..self.tokens.len()).map(|i| V::I32(if self.is_control(i) { 3 } else { 1 })).collect();
        vec![
            ("tokenizer.ggml.model".into(), V::String("gpt2".into())),
            ("tokenizer.ggml.pre".into(), V::String("lfm2".into())),
            ("tokenizer.ggml.tokens".into(), V::Array(self.tokens.iter().cloned().map(V::String).collect())),
            ("tokenizer.ggml.token_type".into(), V::Array(types)),
            ("tokenizer.ggml.merges".into(), V::Array(merges)),
            ("tokenizer.ggml.bos_token_id".into(), V::U32(LFM2_BOS)),
            ("tokenizer.ggml.eos_token_id".into(), V::U32(LFM2_EOS)),
            ("tokenizer.ggml.padding_token_id".into(), V::U32(0)),
            ("tokenizer.ggml.add_bos_token".into(), V::Bool(true)),
            ("tokenizer.chat_template".into(), V::String(self.chat_template.clone())),
        ]
    }
}

fn read_template(llama_src: &Path, rel: &str) -> Result<String> {
    let path = llama_src.join(rel);
    std::fs::read_to_string(&path).map_err(|e| {
        WickError::Internal(format!(
            "LFM2 chat template {}: {e} (the llama.cpp source is unpacked by scripts/llama-src.sh)",
            path.display()
        ))
    })
}
