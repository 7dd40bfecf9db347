//! One error type for the engine. Each variant has a stable `code()` that the binding
//! exposes to JS and the server maps to an HTTP status (ts/server/errors.ts).

#[derive(Debug, thiserror::Error)]
pub enum WickError {
    #[error("{0}")]
    InvalidRequest(String),
    #[error("{0}")]
    ContextLengthExceeded(String),
    /// A grammar or JSON schema that does not compile, exceeds the parser limits, or fails
    /// mid-generation; the message is llguidance's.
    #[error("invalid grammar: {0}")]
    InvalidGrammar(String),
    #[error("failed to load model: {0}")]
    ModelLoad(String),
    #[error("unsupported model architecture `{0}`")]
    UnsupportedArchitecture(String),
    #[error("unsupported tokenizer: {0}")]
    UnsupportedTokenizer(String),
    #[error("the request queue is full")]
    QueueFull,
    #[error("the request was cancelled")]
    Cancelled,
    #[error("the engine is not running (unloaded or stopped)")]
    EngineStopped,
    #[error("internal error: {0}")]
    Internal(String),
    /// The model's scheduler thread died (a panic outside a step's guard): every request of
    /// this engine fails with this until it is unloaded and loaded again.
    #[error("the engine stopped after a fault: {0}")]
    EngineDead(String),
}

impl WickError {
    /// Stable machine-readable code; part of the binding's contract.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidRequest(_) => "INVALID_REQUEST",
            Self::ContextLengthExceeded(_) => "CONTEXT_LENGTH_EXCEEDED",
            Self::InvalidGrammar(_) => "INVALID_GRAMMAR",
            Self::ModelLoad(_) => "MODEL_LOAD_FAILED",
            Self::UnsupportedArchitecture(_) => "UNSUPPORTED_ARCHITECTURE",
            Self::UnsupportedTokenizer(_) => "UNSUPPORTED_TOKENIZER",
            Self::QueueFull => "QUEUE_FULL",
            Self::Cancelled => "CANCELLED",
            Self::EngineStopped => "ENGINE_STOPPED",
            Self::Internal(_) => "INTERNAL",
            Self::EngineDead(_) => "ENGINE_DEAD",
        }
    }

    pub fn load(msg: impl Into<String>) -> Self {
        Self::ModelLoad(msg.into())
    }
}

impl From<candle_core::Error> for WickError {
    fn from(e: candle_core::Error) -> Self {
        Self::Internal(e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, WickError>;

/// The message a caught panic carries (`&str` or `String` payloads), for errors that name it.
pub fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}
