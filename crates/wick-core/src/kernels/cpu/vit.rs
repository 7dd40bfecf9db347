//! The vision encoder's CPU ops, each in the file of its op, rounding as llama.cpp's CPU
//! backend rounds the ops of `clip.cpp`'s graph (AVX-512 build, flash attention off); with
//! these orders the embeddings equal llama.cpp's bit for bit (`tests/vision.rs`):
//! - `layer_norm`, `gelu`, `add_rows`: `elementwise` (`ggml_norm` + `ggml_mul` + `ggml_add`;
//!   `ggml_gelu`'s f16 table; the biases' and residuals' `ggml_add`);
//! - `matmul_f32`, `matmul_f16w`: `float_matmul` (tinyBLAS or `ggml_vec_dot_f32`, the orders
//!   of `float_dots`);
//! - `attention`: `attention::bidirectional`;
//! - `resize_antialias`, `patch_embed`: `image` (`ggml_interpolate`, `ggml_conv_2d`).
//!
//! Scalar statements that GCC contracts into FMAs in llama.cpp's build are `mul_add` there
//! (the interpolation's `val += pixel * weight`; not `ggml_vec_dot_f32`'s tail, which stays
//! a multiply and an add).

pub use super::attention::bidirectional as attention;
pub use super::elementwise::{add_rows, gelu, layer_norm};
pub use super::float_matmul::{matmul_f16w, matmul_f32};
pub use super::image::{patch_embed, resize_antialias};
