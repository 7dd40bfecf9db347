//! CPU kernel infrastructure shared by the model files: the persistent thread pool the
//! ggml-exact kernels (`models::ggml_matmul`, ...) run on.

pub mod alloc;
pub mod attn;
pub mod expf;
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

    /// Whether ggml's repacked K-quant kernels (Q2_K, Q4_K) send this row through their GEMM:
    /// rows go in groups of four, the remaining `len % 4` (all rows when len < 4) through the GEMV.
    pub fn in_gemm_group(self) -> bool {
        self.seq_len > 3 && self.idx < self.seq_len - self.seq_len % 4
    }
}
