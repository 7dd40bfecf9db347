//! Wick's own CUDA kernels' launches, where candle has none for what the device path needs.
//! Each kernel is compiled to PTX by `build.rs` (nvcc, `cuda` feature), loaded once per device
//! by candle (`get_or_load_custom_func`) and run as a candle custom op (`kernels::*`) on the
//! device's stream, so it orders with candle's own kernels. `tests/device_kernels.rs` and
//! `tests/device_attention.rs` check each against its host twin or a reference on a GPU.

mod conv_step;
mod decode_attention;
mod qmatvec;
mod row_ops;
pub use conv_step::conv_step;
pub use decode_attention::{decode_attention, Attend};
pub use qmatvec::{qmatvec, Launch};
pub use row_ops::{geglu, norm_rope, rms_norm, swiglu};
