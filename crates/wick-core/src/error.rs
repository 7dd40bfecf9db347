//! One error type for the engine. Each variant has a stable `code()` that the binding
//! exposes to JS and the server maps to an HTTP status (ts/server/errors.ts).

#[derive(Debug, thiserror::Error)]
pub enum WickError {
    #[error("{0}")]
    InvalidRequest(String),
    /// The prompt (as laid out, images included), or it plus the tokens asked for, does not
    /// fit the context.
    #[error(
        "this model's context length is {context_size} tokens; the request has {prompt_tokens} prompt tokens{}",
        max_tokens.map_or(String::new(), |m| format!(" and asks for {m} more"))
    )]
    ContextLengthExceeded {
        /// Prompt tokens as laid out (image placeholders included).
        prompt_tokens: usize,
        /// Tokens per sequence of the engine.
        context_size: usize,
        /// The request's `max_tokens`, when it set one.
        max_tokens: Option<usize>,
    },
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

/// The error codes, written once: `(variant, code)` per `WickError` variant. `code()` and
/// `WickError::CODES` are generated from it here, and the binding's JS list (`errorCodes()`,
/// the `ErrorCode` type) from the same list (`with_error_codes!(callback)`).
#[macro_export]
macro_rules! with_error_codes {
    ($callback:ident) => {
        $callback! {
            InvalidRequest => "INVALID_REQUEST",
            ContextLengthExceeded => "CONTEXT_LENGTH_EXCEEDED",
            InvalidGrammar => "INVALID_GRAMMAR",
            ModelLoad => "MODEL_LOAD_FAILED",
            UnsupportedArchitecture => "UNSUPPORTED_ARCHITECTURE",
            UnsupportedTokenizer => "UNSUPPORTED_TOKENIZER",
            QueueFull => "QUEUE_FULL",
            Cancelled => "CANCELLED",
            EngineStopped => "ENGINE_STOPPED",
            Internal => "INTERNAL",
            EngineDead => "ENGINE_DEAD",
        }
    };
}

macro_rules! declare_error_codes {
    ($($variant:ident => $code:literal,)*) => {
        impl WickError {
            /// Every code `code()` returns, in the enum's order.
            pub const CODES: &'static [&'static str] = &[$($code),*];

            /// Stable machine-readable code; part of the binding's contract.
            pub fn code(&self) -> &'static str {
                match self {
                    $(Self::$variant { .. } => $code,)*
                }
            }
        }
    };
}

with_error_codes!(declare_error_codes);

impl WickError {
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
