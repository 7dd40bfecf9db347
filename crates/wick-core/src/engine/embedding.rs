//! What the engine tells about a model's embeddings, and the admission of embedding requests.

use super::Engine;
use crate::embed::{EmbedHead, EmbedOptions, Pooling};
use crate::error::{Result, WickError};
use crate::request::GenerateRequest;

/// A model's embeddings, as its file describes them.
#[derive(Debug, Clone)]
pub struct EmbeddingInfo {
    /// The pooling its file sets (`{arch}.pooling_type`), if any.
    pub pooling: Option<Pooling>,
    /// What a request naming none gets (`EmbedHead::default_pooling`).
    pub default_pooling: Pooling,
    /// Made for embeddings or ranking only: generation requests are refused.
    pub only: bool,
    /// Width of a pooled embedding (after any dense layers).
    pub n_out: usize,
    /// Every token sees the whole input (bidirectional attention).
    pub bidirectional: bool,
    /// A classifier head for rank pooling (a cross-encoder reranker).
    pub ranks: bool,
    /// The classifier's output labels (`classifier.output_labels`).
    pub labels: Vec<String>,
}

impl EmbeddingInfo {
    pub(super) fn of(h: &EmbedHead) -> Self {
        Self {
            pooling: h.pooling,
            default_pooling: h.default_pooling(),
            only: h.embedding_only(),
            n_out: h.n_out,
            bidirectional: !h.causal,
            ranks: h.check(Pooling::Rank).is_ok(),
            labels: h.labels.clone(),
        }
    }
}

impl Engine {
    /// An embedding request's token limit (its prompt: nothing is generated): the whole input
    /// must fit the context, in one step.
    pub(super) fn check_embedding(
        &self,
        req: &GenerateRequest,
        opts: &EmbedOptions,
        n_prompt: usize,
    ) -> Result<usize> {
        if !req.images.is_empty() {
            return Err(WickError::InvalidRequest("images cannot be embedded".into()));
        }
        if let (Some(p), Some(head)) = (opts.pooling, &self.embed_head) {
            head.check(p)?;
        }
        if n_prompt > self.info.context_size {
            return Err(WickError::ContextLengthExceeded {
                prompt_tokens: n_prompt,
                context_size: self.info.context_size,
                max_tokens: None,
            });
        }
        Ok(n_prompt)
    }
}
