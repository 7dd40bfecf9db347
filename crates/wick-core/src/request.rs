//! What goes into the engine (requests) and what comes out of it (events). Shared by the
//! engine and the scheduler, and depending on neither.

use std::sync::Arc;

use crate::sampling::grammar::GrammarSpec;
use crate::sampling::{SamplingParams, TokenLogprob};

#[derive(Debug, Clone)]
pub struct GenerateRequest {
    /// Prompt token ids, BOS included when wanted (the caller decides, as llama.cpp's API does).
    pub prompt: Vec<u32>,
    /// None: until the context is full.
    pub max_tokens: Option<usize>,
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    /// Keep generating past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Some(n): report the chosen token's logprob and the n most likely alternatives.
    pub top_logprobs: Option<usize>,
    /// Control tokens whose text is rendered in the generated text (a tool parser's markers,
    /// such as `<|tool_call_start|>`); other control tokens render as nothing, as llama-server
    /// does without `--special`. Ids are reported in events either way.
    pub marker_tokens: Vec<u32>,
    /// Constrains generation to a grammar or JSON schema (compiled at submit).
    pub grammar: Option<GrammarSpec>,
    /// Images placed in the prompt (needs a vision projector), in prompt order.
    pub images: Vec<PromptImage>,
}

/// An image in a prompt: decoded RGB8 pixels (row-major, 3 bytes a pixel), placed before
/// prompt token `at` (`prompt.len()` = after the last). The engine expands it into the
/// projector's layout (LFM2-VL: `<|image_start|>` … `<|image_end|>`, tiles and thumbnail)
/// and the image's embeddings take its positions.
#[derive(Debug, Clone)]
pub struct PromptImage {
    pub at: usize,
    pub width: usize,
    pub height: usize,
    pub rgb: Arc<[u8]>,
}

impl GenerateRequest {
    pub fn greedy(prompt: Vec<u32>, max_tokens: usize) -> Self {
        Self {
            prompt,
            max_tokens: Some(max_tokens),
            sampling: SamplingParams::greedy(),
            stop: Vec::new(),
            ignore_eos: false,
            top_logprobs: None,
            marker_tokens: Vec::new(),
            grammar: None,
            images: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token, a stop string, or a grammar (without trigger) complete.
    Stop,
    /// max_tokens or the context length.
    Length,
    Cancelled,
}

#[derive(Debug, Clone)]
pub struct TokenEvent {
    /// Generated ids covered by this event (empty for a final flush of held-back text).
    pub ids: Vec<u32>,
    /// UTF-8-safe text delta; stop strings and partial characters are held back.
    pub text: String,
    /// One entry per id when logprobs were requested.
    pub logprobs: Vec<(TokenLogprob, Vec<TokenLogprob>)>,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: usize,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Timings {
    /// Waiting for admission.
    pub queue_ms: f64,
    /// Admission to first sampled token.
    pub prompt_ms: f64,
    /// First sampled token to the end.
    pub decode_ms: f64,
}

#[derive(Debug, Clone)]
pub struct DoneEvent {
    pub finish_reason: FinishReason,
    pub usage: Usage,
    pub timings: Timings,
}

#[derive(Debug)]
pub enum Event {
    Token(TokenEvent),
    Done(DoneEvent),
    Error(crate::WickError),
}
