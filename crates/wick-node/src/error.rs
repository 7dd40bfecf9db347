//! Engine errors → JS errors whose `code` is the engine's stable code (INVALID_REQUEST, …),
//! for sync calls (thrown) and async ones (the promise rejects) alike.

use std::future::Future;

use napi::bindgen_prelude::JsObjectValue;
use napi::bindgen_prelude::{AsyncBlock, AsyncBlockBuilder, ToNapiValue};
use napi::{Env, JsError, JsValue};
use wick_core::WickError;

/// Every `err.code` the binding sets, generated from the engine's list
/// (`wick_core::with_error_codes!`) plus the converter's own CONVERT_FAILED. `ts/engine/errors.ts`
/// reads it (`errorCodes()`, the `ErrorCode` type): a new engine code reaches JS by itself.
macro_rules! js_error_codes {
    ($($variant:ident => $code:literal,)*) => {
        /// An error code the binding puts in `err.code`.
        #[napi(string_enum)]
        pub enum ErrorCode {
            $( #[napi(value = $code)] $variant, )*
            /// `wick convert` failed for a reason of its own (wick_convert's ConvertError).
            #[napi(value = "CONVERT_FAILED")]
            ConvertFailed,
        }

        /// Every error code, the engine's in its order, then CONVERT_FAILED.
        #[napi]
        pub fn error_codes() -> Vec<ErrorCode> {
            vec![$(ErrorCode::$variant,)* ErrorCode::ConvertFailed]
        }

        #[cfg(test)]
        const ENGINE_CODES: &[&str] = &[$($code),*];
    };
}

wick_core::with_error_codes!(js_error_codes);

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

/// `e` as a JS error value: `code`, `message`, and for CONTEXT_LENGTH_EXCEEDED its numbers
/// (`promptTokens`, `contextSize`, and `maxTokens` when the request set one).
pub fn js_error(env: &Env, e: WickError) -> napi::Error {
    let numbers = match &e {
        WickError::ContextLengthExceeded { prompt_tokens, context_size, max_tokens } => {
            Some((*prompt_tokens, *context_size, *max_tokens))
        }
        _ => None,
    };
    let value = JsError::from(to_js(e)).into_unknown(*env);
    if let Some((prompt_tokens, context_size, max_tokens)) = numbers {
        let set = || -> napi::Result<()> {
            let mut obj = value.coerce_to_object()?;
            obj.set_named_property("promptTokens", prompt_tokens as f64)?;
            obj.set_named_property("contextSize", context_size as f64)?;
            if let Some(m) = max_tokens {
                obj.set_named_property("maxTokens", m as f64)?;
            }
            Ok(())
        };
        // The numbers are extras: without them the error still has its code and message.
        let _ = set();
    }
    napi::Error::from(value)
}

/// Runs a synchronous call into the core that may fail with an engine error, thrown as
/// `js_error` makes it; a panic becomes an INTERNAL error naming `what`.
pub fn guarded_core<T>(env: &Env, what: &str, f: impl FnOnce() -> wick_core::Result<T>) -> napi::Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|p| {
            Err(WickError::Internal(format!("{what} panicked: {}", wick_core::error::panic_message(&p))))
        })
        .map_err(|e| js_error(env, e))
}

/// Runs a synchronous call into the core; a panic becomes an INTERNAL error naming `what`.
/// Every entry point also has `#[napi(catch_unwind)]`, but that one throws napi's generic
/// error with no engine code: it stays as the last guard for the argument conversion napi
/// runs before the body.
pub fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        Err(to_js(WickError::Internal(format!("{what} panicked: {}", wick_core::error::panic_message(&p)))))
    })
}

/// Runs `work` off the JS thread and settles a promise with its result. A rejection carries
/// the engine's code: napi rejects async fns with its own status type only, so the JS error
/// is built here, on the JS thread, and handed to napi as an already made value.
pub fn promise<T, F>(env: &Env, work: F) -> napi::Result<AsyncBlock<T>>
where
    T: ToNapiValue + Send + 'static,
    F: Future<Output = wick_core::Result<T>> + Send + 'static,
{
    AsyncBlockBuilder::build_with_map(env, async move { Ok(work.await) }, |env, result| {
        result.map_err(|e| js_error(&env, e))
    })
}

/// As `promise`, for work whose errors already carry their code (the converter's).
pub fn promise_coded<T, F>(env: &Env, work: F) -> napi::Result<AsyncBlock<T>>
where
    T: ToNapiValue + Send + 'static,
    F: Future<Output = Result<T>> + Send + 'static,
{
    AsyncBlockBuilder::build_with_map(env, async move { Ok(work.await) }, |env, result| {
        result.map_err(|e| napi::Error::from(JsError::from(e).into_unknown(env)))
    })
}

/// Runs blocking engine work on tokio's blocking pool (not the libuv pool, which serves file
/// and DNS I/O). A panic becomes `on_panic`; a lost task, INTERNAL.
pub async fn blocking<T, F>(f: F, on_panic: WickError) -> wick_core::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> wick_core::Result<T> + Send + 'static,
{
    tokio::task::spawn_blocking(move || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(Err(on_panic))
    })
    .await
    .unwrap_or_else(|e| Err(WickError::Internal(e.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_js_list_is_the_engine_codes_and_convert_failed() {
        assert_eq!(ENGINE_CODES, WickError::CODES);
        assert_eq!(error_codes().len(), WickError::CODES.len() + 1);
        assert!(matches!(error_codes().last(), Some(ErrorCode::ConvertFailed)));
    }
}
