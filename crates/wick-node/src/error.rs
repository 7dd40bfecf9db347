//! Engine errors → JS errors whose `code` is the engine's stable code (INVALID_REQUEST, …),
//! for sync calls (thrown) and async ones (the promise rejects) alike.

use std::future::Future;

use napi::bindgen_prelude::{AsyncBlock, AsyncBlockBuilder, ToNapiValue};
use napi::{Env, JsError};
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
        result.map_err(|e| napi::Error::from(JsError::from(to_js(e)).into_unknown(env)))
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
