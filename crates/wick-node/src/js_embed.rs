//! The embedding API's JS objects and their mapping to engine types.

use wick_core::embed::{EmbedOptions, Pooling as CorePooling};
use wick_core::engine::EmbeddingInfo as CoreEmbeddingInfo;
use wick_core::request::GenerateRequest;

/// How hidden states become an embedding (llama.cpp's `pooling_type`).
#[napi(string_enum = "lowercase")]
pub enum Pooling {
    /// One vector per token (ColBERT).
    None,
    Mean,
    /// The first token's.
    Cls,
    /// The last token's.
    Last,
    /// The classifier head's scores (a cross-encoder reranker).
    Rank,
}

impl From<Pooling> for CorePooling {
    fn from(p: Pooling) -> Self {
        match p {
            Pooling::None => Self::None,
            Pooling::Mean => Self::Mean,
            Pooling::Cls => Self::Cls,
            Pooling::Last => Self::Last,
            Pooling::Rank => Self::Rank,
        }
    }
}

impl From<CorePooling> for Pooling {
    fn from(p: CorePooling) -> Self {
        match p {
            CorePooling::None => Self::None,
            CorePooling::Mean => Self::Mean,
            CorePooling::Cls => Self::Cls,
            CorePooling::Last => Self::Last,
            CorePooling::Rank => Self::Rank,
        }
    }
}

/// A model's embeddings as its file describes them (`wick_core::engine::EmbeddingInfo`).
#[napi(object)]
pub struct EmbeddingInfo {
    /// The pooling the file sets, if any.
    pub pooling: Option<Pooling>,
    /// What a request naming none gets: the file's; else `none` for a model made for
    /// embeddings (ColBERT), `mean` for a generative one.
    pub default_pooling: Pooling,
    /// Made for embeddings or ranking only: generation is refused.
    pub only: bool,
    /// Width of a pooled embedding.
    pub n_out: u32,
    /// Bidirectional attention (an embedding model such as LFM2.5-Embedding).
    pub bidirectional: bool,
    /// Has a classifier head: rank pooling gives relevance scores (a reranker).
    pub ranks: bool,
    /// The classifier's output labels.
    pub labels: Vec<String>,
}

impl From<&CoreEmbeddingInfo> for EmbeddingInfo {
    fn from(e: &CoreEmbeddingInfo) -> Self {
        Self {
            pooling: e.pooling.map(Into::into),
            default_pooling: e.default_pooling.into(),
            only: e.only,
            n_out: e.n_out as u32,
            bidirectional: e.bidirectional,
            ranks: e.ranks,
            labels: e.labels.clone(),
        }
    }
}

/// An embedding request (`Engine.embed`).
#[napi(object)]
pub struct EmbedRequest {
    /// Token ids of one input, BOS (and EOS/SEP) included as the caller wants them.
    pub prompt_tokens: Vec<u32>,
    /// Default: the model's (`ModelInfo.embedding.defaultPooling`).
    pub pooling: Option<Pooling>,
    /// llama.cpp's `embd_normalize` for pooled vectors: -1 none, 0 max-abs (int16 range),
    /// 2 Euclidean (default), p the p-norm. Per-token vectors (`none`) are never normalised.
    pub normalize: Option<i32>,
}

impl From<EmbedRequest> for GenerateRequest {
    fn from(r: EmbedRequest) -> Self {
        let opts = EmbedOptions { pooling: r.pooling.map(Into::into), normalize: r.normalize.unwrap_or(2) };
        GenerateRequest::embedding(r.prompt_tokens, opts)
    }
}
