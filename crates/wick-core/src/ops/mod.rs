//! CPU kernel infrastructure shared by the model files: the persistent thread pool the
//! ggml-exact kernels (`models::ggml_matmul`, ...) run on.

pub mod attn;
pub mod packed;
pub mod pool;
pub mod q8;
