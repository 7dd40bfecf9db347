//! What goes into the engine (requests) and what comes out of it (events). Shared by the
//! engine and the scheduler, and depending on neither.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc::error::{SendError, TryRecvError};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::embed::EmbedOptions;
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
    /// Ends the answer's thinking block after so many tokens by forcing its closing marker.
    pub reasoning_budget: Option<ReasoningBudget>,
    /// Some: an embedding request. The whole prompt runs in one step, its final hidden states
    /// come back pooled as one `Event::Embedding`, and nothing is generated (sampling,
    /// `max_tokens` and the rest do not apply).
    pub embed: Option<EmbedOptions>,
    /// LoRA adapters by id (`Engine::adapters`) with their scales; None: the engine's
    /// defaults (llama-server's global scales, `Engine::set_adapter_scales`).
    pub lora: Option<Vec<(usize, f32)>>,
    /// Speculative decoding for this request; None: the engine's (`EngineOptions::speculative`).
    pub speculative: Option<SpecOptions>,
    /// The consumer reads the whole answer at once (a response that is not streamed): token
    /// events are held in the engine and sent with the last one, so nothing wakes the reader
    /// per token. Where the decoding threads hold every core, each wake-up takes one from the
    /// step: ~3 % of 2-thread decode (benches/RESULTS.md, session 32).
    pub hold_events: bool,
}

/// Speculative decoding: tokens are drafted — by n-gram lookup in the sequence's own tokens
/// (llama-server's `ngram-simple`, vLLM's `ngram` method) or by a small draft model
/// (llama-server's `--model-draft`, `draft-simple`) — and one forward step of the model checks
/// them all. Every token is still sampled from the model's own logits for its position,
/// computed as decoding one by one computes them, so the output is the same token for token
/// (greedy or sampled with a seed).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpecOptions {
    /// Where drafts come from.
    pub method: SpecMethod,
    /// Most tokens drafted per step (llama-server's `--draft-max`); 0: off.
    pub draft_max: usize,
    /// No draft when fewer tokens than this are found (`--draft-min`).
    pub draft_min: usize,
    /// The n-gram lengths looked up, the longest first (vLLM's `prompt_lookup_min`/`_max`).
    pub ngram_min: usize,
    pub ngram_max: usize,
    /// A draft model stops drafting at a token it gives less than this probability
    /// (llama-server's `--draft-p-min`).
    pub p_min: f32,
}

/// The source of drafts (`SpecOptions::method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecMethod {
    Ngram,
    /// The engine's draft model (`EngineOptions::draft`).
    DraftModel,
}

impl SpecOptions {
    /// Speculation off.
    pub const OFF: SpecOptions = SpecOptions {
        method: SpecMethod::Ngram,
        draft_max: 0,
        draft_min: 0,
        ngram_min: 1,
        ngram_max: 1,
        p_min: 0.0,
    };

    /// N-gram lookup drafting up to `draft_max` tokens, matching 2- to 4-grams.
    pub fn ngram(draft_max: usize) -> Self {
        Self { method: SpecMethod::Ngram, draft_max, draft_min: 1, ngram_min: 2, ngram_max: 4, p_min: 0.0 }
    }

    /// Drafting by the engine's draft model, up to `draft_max` tokens, while it is at least
    /// `p_min` sure of each.
    pub fn draft_model(draft_max: usize, p_min: f32) -> Self {
        Self { method: SpecMethod::DraftModel, p_min, ..Self::ngram(draft_max) }
    }

    pub fn is_on(&self) -> bool {
        self.draft_max > 0
    }
}

/// How long a thinking block may run, and its markers as token ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReasoningBudget {
    /// Tokens generated inside the block before its end is forced (0: closed at once).
    pub tokens: usize,
    /// The opening marker the answer starts with when the prompt did not open the block.
    pub start: Vec<u32>,
    /// The closing marker, forced token by token when the budget is spent.
    pub end: Vec<u32>,
    /// The prompt's generation prompt already opened the block.
    pub inside: bool,
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
            reasoning_budget: None,
            embed: None,
            lora: None,
            speculative: None,
            hold_events: false,
        }
    }

    /// An embedding request for `prompt`.
    pub fn embedding(prompt: Vec<u32>, opts: EmbedOptions) -> Self {
        Self { embed: Some(opts), ..Self::greedy(prompt, 1) }
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
    /// The stop string that ended generation (`Stop` by a stop string; Anthropic's `stop_sequence`).
    pub stop: Option<String>,
}

#[derive(Debug)]
pub enum Event {
    Token(TokenEvent),
    /// An embedding request's vectors: one pooled vector, or one per prompt token
    /// (`Pooling::None`), or the classifier's scores (`Pooling::Rank`). Then `Done`.
    Embedding(Vec<Vec<f32>>),
    Done(DoneEvent),
    Error(crate::WickError),
}

/// A sequence's event channel, counting what was sent and not yet taken: past `max_unread`
/// the consumer counts as gone and the scheduler cancels the sequence, so a client that stops
/// reading cannot make the engine buffer a whole generation or hold a batch slot for it.
/// `hold`: token events wait in the sender until a done or error event (`hold_events`).
pub fn event_channel(max_unread: usize, hold: bool) -> (EventSender, EventReceiver) {
    let (tx, rx) = unbounded_channel();
    let unread = Arc::new(AtomicUsize::new(0));
    let held = hold.then(Vec::new);
    (EventSender { tx, unread: unread.clone(), max_unread, held }, EventReceiver { rx, unread })
}

#[derive(Debug)]
pub struct EventSender {
    tx: UnboundedSender<Event>,
    unread: Arc<AtomicUsize>,
    max_unread: usize,
    /// Some: the token events not sent yet (bounded by the request's own length).
    held: Option<Vec<Event>>,
}

impl EventSender {
    pub fn send(&mut self, event: Event) -> Result<(), SendError<Event>> {
        if let Some(held) = &mut self.held {
            if matches!(event, Event::Token(_)) {
                held.push(event);
                return Ok(());
            }
            for e in std::mem::take(held) {
                self.send_now(e)?;
            }
        }
        self.send_now(event)
    }

    fn send_now(&self, event: Event) -> Result<(), SendError<Event>> {
        // Counted before it is visible, so the reader's decrement never comes first.
        self.unread.fetch_add(1, Ordering::Relaxed);
        self.tx.send(event).inspect_err(|_| {
            self.unread.fetch_sub(1, Ordering::Relaxed);
        })
    }

    /// The consumer dropped its receiver.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// The consumer stopped taking events: more than `max_unread` wait for it.
    pub fn is_stalled(&self) -> bool {
        self.unread.load(Ordering::Relaxed) > self.max_unread
    }
}

/// The consumer's end; the same calls as tokio's receiver.
#[derive(Debug)]
pub struct EventReceiver {
    rx: UnboundedReceiver<Event>,
    unread: Arc<AtomicUsize>,
}

impl EventReceiver {
    pub async fn recv(&mut self) -> Option<Event> {
        let e = self.rx.recv().await;
        self.took(e.is_some());
        e
    }

    pub fn blocking_recv(&mut self) -> Option<Event> {
        let e = self.rx.blocking_recv();
        self.took(e.is_some());
        e
    }

    pub fn try_recv(&mut self) -> Result<Event, TryRecvError> {
        let e = self.rx.try_recv();
        self.took(e.is_ok());
        e
    }

    fn took(&self, one: bool) {
        if one {
            self.unread.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done() -> Event {
        Event::Error(crate::WickError::EngineStopped)
    }

    #[test]
    fn a_receiver_that_stops_taking_events_stalls_its_sender() {
        let (mut tx, mut rx) = event_channel(3, false);
        for _ in 0..3 {
            tx.send(done()).unwrap();
        }
        assert!(!tx.is_stalled(), "at the bound");
        tx.send(done()).unwrap();
        assert!(tx.is_stalled(), "past the bound");
        rx.try_recv().unwrap();
        assert!(!tx.is_stalled(), "reading again clears it");
        while rx.try_recv().is_ok() {}
        assert!(!tx.is_stalled());
        drop(rx);
        assert!(tx.is_closed());
    }

    fn token(id: u32) -> Event {
        Event::Token(TokenEvent { ids: vec![id], text: id.to_string(), logprobs: vec![] })
    }

    /// A held channel shows nothing until the last event, then every event in order; a plain
    /// one shows each as it is sent.
    #[test]
    fn a_held_channel_sends_its_tokens_with_the_last_event() {
        let (mut tx, mut rx) = event_channel(2, true);
        for id in 0..5 {
            tx.send(token(id)).unwrap();
        }
        assert!(rx.try_recv().is_err(), "tokens are held");
        assert!(!tx.is_stalled(), "held tokens are not unread");
        tx.send(done()).unwrap();
        let ids: Vec<u32> = std::iter::from_fn(|| match rx.try_recv().ok()? {
            Event::Token(t) => Some(t.ids[0]),
            _ => Some(u32::MAX),
        })
        .collect();
        assert_eq!(ids, [0, 1, 2, 3, 4, u32::MAX]);

        let (mut tx, mut rx) = event_channel(2, false);
        tx.send(token(7)).unwrap();
        assert!(matches!(rx.try_recv(), Ok(Event::Token(t)) if t.ids == [7]));
    }
}
