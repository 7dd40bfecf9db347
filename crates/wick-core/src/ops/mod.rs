//! CPU kernel infrastructure shared by the model files: the persistent thread pool the
//! ggml-exact kernels (`models::ggml_matmul`, ...) run on.

pub mod alloc;
pub mod attn;
pub mod packed;
pub mod pool;
pub mod q8;
pub mod simd;

/// A row's place in its sequence's share of a step: llama.cpp picks kernels by how many
/// rows it multiplies at once, so Wick picks them per sequence, as if each sequence ran alone.
/// That keeps every sequence's numbers independent of what it is batched with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowPos {
    /// Tokens this sequence brings to the step.
    pub seq_len: u32,
    /// This row's index among them.
    pub idx: u32,
}

impl RowPos {
    pub const SINGLE: RowPos = RowPos { seq_len: 1, idx: 0 };
}
