//! What the models run on: the device a model is placed on (`device`), and for the CPU
//! kernels the persistent thread pool and the allocator setting of the forward pass. Kept apart from `kernels` because the KV cache spreads its writes over the
//! same pool while the attention kernels read the cache's views: both depend on this module,
//! neither on the other's users.

pub mod alloc;
pub mod device;
pub mod pool;
pub mod trace;
pub mod weight_cache;

/// What `cell` holds, made by `make` the first time: a step's tables, built once and shared by
/// its layers (`what` names the table in the error if it was not kept).
pub(crate) fn kept<'a, T>(
    cell: &'a std::sync::OnceLock<T>,
    what: &str,
    make: impl FnOnce() -> crate::error::Result<T>,
) -> crate::error::Result<&'a T> {
    if let Some(v) = cell.get() {
        return Ok(v);
    }
    let _ = cell.set(make()?);
    cell.get().ok_or_else(|| crate::error::WickError::Internal(format!("{what} was not kept")))
}
