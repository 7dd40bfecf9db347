//! What the models run on: the device a model is placed on (`device`), and for the CPU
//! kernels the persistent thread pool and the allocator setting of the forward pass. Kept apart from `kernels` because the KV cache spreads its writes over the
//! same pool while the attention kernels read the cache's views: both depend on this module,
//! neither on the other's users.

pub mod alloc;
pub mod device;
pub mod pool;
pub mod weight_cache;
