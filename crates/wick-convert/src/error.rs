//! One error type for the converter. Every variant names what is wrong with the input (or
//! the disk) so the CLI can print it on one line; none leaves a partial output file behind.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// A file the checkpoint needs (config.json, a shard named in the index, …) is absent.
    #[error("{path}: missing ({what})")]
    Missing { path: PathBuf, what: &'static str },
    /// config.json names an architecture this converter does not write.
    #[error(
        "unsupported architecture `{0}` (wick convert writes llama, qwen2, qwen3, gemma3, lfm2, lfm2moe)"
    )]
    UnknownArchitecture(String),
    /// A config value is absent or of the wrong type.
    #[error("config.json: {0}")]
    Config(String),
    /// A tensor's shape disagrees with config.json or with the tensors it is stacked with.
    #[error("tensor `{name}`: shape {got:?}, expected {want:?}")]
    ShapeMismatch { name: String, got: Vec<usize>, want: Vec<usize> },
    /// A tensor the architecture needs is absent, or one it does not know is present.
    #[error("{0}")]
    Tensor(String),
    /// A safetensors dtype the converter cannot read as floats (integers, fp8, …).
    #[error("tensor `{name}`: unsupported dtype {dtype} (expected F32, F16 or BF16)")]
    Dtype { name: String, dtype: String },
    /// A safetensors file whose header or data is cut short or inconsistent.
    #[error("{path}: not a valid safetensors file: {why}")]
    Safetensors { path: PathBuf, why: String },
    /// tokenizer.json / tokenizer.model / tokenizer_config.json that cannot be turned into a
    /// GGUF vocabulary.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A JSON file that does not parse.
    #[error("{path}: {why}")]
    Json { path: PathBuf, why: String },
    /// Reading the input or writing the output failed (disk full included).
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// An option the caller gave that makes no sense (unknown output type, output = input, …).
    #[error("{0}")]
    InvalidArgument(String),
    /// The caller cancelled the conversion.
    #[error("conversion cancelled")]
    Cancelled,
    /// A bug (a panic caught at the boundary, a lost thread).
    #[error("internal error: {0}")]
    Internal(String),
}

impl ConvertError {
    /// Stable machine-readable code for the binding: the caller's fault (bad options) or
    /// the checkpoint's / the disk's.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidArgument(_) => "INVALID_REQUEST",
            Self::Cancelled => "CANCELLED",
            Self::Internal(_) => "INTERNAL",
            Self::UnknownArchitecture(_) => "UNSUPPORTED_ARCHITECTURE",
            _ => "CONVERT_FAILED",
        }
    }

    pub fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io { path: path.to_path_buf(), source }
    }

    pub fn config(msg: impl Into<String>) -> Self {
        Self::Config(msg.into())
    }

    pub fn tensor(msg: impl Into<String>) -> Self {
        Self::Tensor(msg.into())
    }

    pub fn tokenizer(msg: impl Into<String>) -> Self {
        Self::Tokenizer(msg.into())
    }
}

pub type Result<T> = std::result::Result<T, ConvertError>;
