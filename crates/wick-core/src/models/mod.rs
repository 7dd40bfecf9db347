//! Model forward passes, one file per architecture. Every model takes a ragged batch: each
//! sequence brings its own new tokens and its own cache (positions, KV, conv state).

use candle_core::{Device, Tensor};

use crate::cache::{KvPool, LayerKind, SeqCache};
use crate::error::{Result, WickError};
use crate::gguf::GgufFile;
use crate::lora::LoraMix;
use crate::runtime::device::Placement;

mod attention;
mod decoder;
mod ffn;
mod gemma3;
pub(crate) mod layers;
mod lfm2;
mod linears;
mod llama;
mod moe;
mod packs;
mod qwen;
mod rope;
mod shortconv;
pub mod vision;

pub use attention::attend_decode_batch;

/// A loaded model's hyperparameters, as the engine and the APIs report them.
#[derive(Debug, Clone, Default)]
pub struct ModelHparams {
    pub architecture: String,
    pub n_vocab: usize,
    /// Context length the model was trained with (`{arch}.context_length`).
    pub n_ctx_train: usize,
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    /// Total parameter count, from the tensor directory.
    pub n_params: u64,
}

/// One sequence's part of a forward step.
pub struct StepSeq<'a> {
    /// Tokens to append at positions `cache.len()..cache.len() + tokens.len()`.
    pub tokens: &'a [u32],
    /// Rows of `tokens` fed as input embeddings instead of token ids (image positions).
    pub embeds: Vec<RowEmbeds<'a>>,
    pub cache: &'a mut SeqCache,
    /// Return the final hidden states of every row of the step (after the output norm)
    /// instead of the last token's logits: an embedding request.
    pub hidden: bool,
    /// The LoRA adapters this sequence runs with.
    pub lora: Option<&'a LoraMix>,
    /// A decode and its speculative drafts: every row is computed as a one-token step would
    /// compute it (single-row kernel orders, one-token attention), and every row's logits are
    /// returned, so each equals what decoding token by token gives.
    pub verify: bool,
}

/// `rows` input embeddings (`rows × n_embd` values) for `tokens[at..at + rows]`.
#[derive(Clone, Copy, Debug)]
pub struct RowEmbeds<'a> {
    pub at: usize,
    pub rows: usize,
    pub data: &'a [f32],
}

impl<'a> StepSeq<'a> {
    /// A step of plain tokens.
    pub fn tokens(tokens: &'a [u32], cache: &'a mut SeqCache) -> Self {
        Self { tokens, embeds: Vec::new(), cache, hidden: false, lora: None, verify: false }
    }
}

/// What one step returns.
pub struct StepOutput {
    /// f32 logits of the last token of each sequence that did not ask for hidden states (of
    /// every token of a `verify` one), in batch order, `[n, n_vocab]`; None when every
    /// sequence asked for hidden states.
    pub logits: Option<Tensor>,
    /// `[len, n_embd]` f32 final hidden states of each sequence that asked (`StepSeq::hidden`),
    /// in batch order.
    pub hidden: Vec<Tensor>,
}

pub trait Model: Send + Sync {
    fn info(&self) -> &ModelHparams;
    /// The per-layer state this model keeps (what a `KvPool` for it holds).
    fn cache_layout(&self) -> Vec<LayerKind>;
    /// False for a bidirectional (embedding) model: a sequence's whole input must come in one
    /// step, and it cannot generate.
    fn causal(&self) -> bool;
    /// Runs one step over a ragged batch: takes KV blocks from `kv` for every sequence's new
    /// tokens, appends them to its cache, and returns each sequence's logits or hidden states.
    fn step(&self, batch: &mut [StepSeq<'_>], kv: &mut KvPool) -> Result<StepOutput>;
    /// `step` of sequences that all want logits: `[batch.len(), n_vocab]`.
    fn forward(&self, batch: &mut [StepSeq<'_>], kv: &mut KvPool) -> Result<Tensor> {
        self.step(batch, kv)?
            .logits
            .ok_or_else(|| WickError::Internal("no sequence of the step asked for logits".into()))
    }
}

/// Builds the model named by `general.architecture` for `device`'s usual path (the exact
/// kernels on the CPU).
pub fn load(gguf: &GgufFile, device: &Device) -> Result<Box<dyn Model>> {
    load_on(gguf, &Placement::for_device(device))
}

/// Builds the model named by `general.architecture`, placed as `device` says.
pub fn load_on(gguf: &GgufFile, device: &Placement) -> Result<Box<dyn Model>> {
    let arch = gguf.architecture()?;
    let model: Box<dyn Model> = match arch {
        "llama" => Box::new(llama::load(gguf, device)?),
        "lfm2" => Box::new(lfm2::load(gguf, device)?),
        "lfm2moe" => Box::new(lfm2::load_moe(gguf, device)?),
        "qwen2" => Box::new(qwen::load_qwen2(gguf, device)?),
        "qwen3" => Box::new(qwen::load_qwen3(gguf, device)?),
        "gemma3" => Box::new(gemma3::load(gguf, device)?),
        other => return Err(WickError::UnsupportedArchitecture(other.to_string())),
    };
    Ok(model)
}
