//! Engine errors → JS errors whose `code` is the engine's stable code (INVALID_REQUEST, …).

use wick_core::WickError;

/// The error "status" napi puts in `err.code`.
pub struct Code(pub &'static str);

impl AsRef<str> for Code {
    fn as_ref(&self) -> &str {
        self.0
    }
}

pub type Result<T> = napi::Result<T, Code>;

pub fn to_js(e: WickError) -> napi::Error<Code> {
    napi::Error::new(Code(e.code()), e.to_string())
}

/// Async functions can only reject with napi's own status type, so the code travels in front
/// of the message ("CODE: message"); ts/engine/errors.ts splits it back into `err.code`.
pub fn to_js_async(e: WickError) -> napi::Error {
    napi::Error::from_reason(format!("{}: {e}", e.code()))
}
