//! wick-core: the engine behind Wick. GGUF → config + tokenizer + weights → forward passes,
//! sampling and a scheduler thread per loaded model. Knows tensors, never HTTP.

pub mod cache;
pub mod embed;
pub mod engine;
pub mod error;
pub mod gguf;
pub mod kernels;
pub mod lora;
pub mod metrics;
pub mod models;
pub mod request;
pub mod runtime;
pub mod sampling;
pub mod scheduler;
pub mod tokenizer;

pub use engine::{Engine, EngineOptions};
pub use error::{Result, WickError};
