//! The one home of Wick's numeric kernels, laid out as ggml-cpu and candle's quantized
//! backend are:
//!
//! - `cpu/feats.rs`: CPU-feature detection, once, and the `WICK_ISA=scalar|avx2` cap that
//!   every kernel family below obeys;
//! - `cpu/blocks.rs`: GGUF quant block layouts (sizes, field offsets) and the shared field
//!   decoders and horizontal sums;
//! - `cpu/q8.rs`: activation rows quantized as ggml does (q8_0 / q8_1 / q8_K);
//! - `cpu/quants.rs`, `cpu/k_quants.rs`, `cpu/float_dots.rs`: portable row dots per weight type
//!   in llama.cpp's summation orders; `cpu/x86/`: their AVX2 twins;
//! - `cpu/repack/`: weights repacked at load into 16-column panels, per type (AVX-512 VNNI,
//!   AVX2, portable);
//! - `cpu/matmul.rs`: the row-dot matmul for types without panels, and `RowPos`;
//!   `cpu/float_matmul.rs`: f32 × f32 / f16 matmuls (the vision tower's);
//! - `cpu/attention/`: causal attention over the paged f16 KV cache, and the vision tower's
//!   bidirectional attention;
//! - `cpu/expf.rs`, `cpu/elementwise.rs`: ggml's `expf`, SwiGLU, RMSNorm, RoPE, short conv,
//!   LayerNorm, GELU; `cpu/image.rs`: image resampling and the vision tower's image ops
//!   (`cpu/vit.rs` lists the vision tower's ops where they live).
//!
//! The CPU kernels run on `runtime::pool`. The device path (`runtime::device`) runs the models
//! on candle's own CUDA, Metal and CPU kernels; kernels Wick adds for a device get their own
//! directory beside `cpu/`: `cuda/` (`cuda` feature; PTX built by `build.rs`) holds the fused
//! decode attention over the paged cache, the quantized matmuls `qmatvec.rs` runs (their C
//! arithmetic also built for the CPU as a host twin, which candle's CPU device runs) and the
//! short convolution's decode step `conv_step.rs` runs.
//!
//! Dependencies point one way: `feats` and `blocks` at the bottom, the row dots and panels on
//! them, `matmul` and `attention` on those; kernels never import `models`.

// Kernels walk several arrays in lockstep by lane, row or head; index loops say that more
// plainly than zipped iterators.
#![allow(clippy::needless_range_loop)]

pub mod conv_step;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod decode_attention;
pub mod qmatvec;
pub mod row_ops;

/// Whether Wick's device kernels that have a host twin (the quantized products, the row ops, the
/// paged attention) run on `device` in this build: their CUDA kernels with the `cuda` feature,
/// their twin on candle's CPU device (Linux builds: cfg `wick_qmv_twin`).
pub fn twinned_on(device: &candle_core::Device) -> bool {
    match device {
        candle_core::Device::Cpu => cfg!(wick_qmv_twin),
        d => cfg!(feature = "cuda") && d.is_cuda(),
    }
}

pub use cpu::attention::{attend, attend_many, SeqAttn};
pub(crate) use cpu::elementwise::with_host_f32;
pub use cpu::hadamard::rotate_runs;
pub use cpu::matmul::RowPos;
pub use cpu::repack::PackedWeight;
