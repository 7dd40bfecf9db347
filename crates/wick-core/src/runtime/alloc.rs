//! Allocator tuning for the forward pass. Every op allocates its output, and a prefill step's
//! FFN activations are large blocks; with glibc's defaults such blocks are mapped fresh and
//! freed back to the kernel, so each step pays page faults and page clearing for them.
//! Keeping freed memory in the process makes later steps reuse it.

/// Raises glibc's mmap and trim thresholds once per process (no-op elsewhere).
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            extern "C" {
                fn mallopt(param: i32, value: i32) -> i32;
            }
            const M_TRIM_THRESHOLD: i32 = -1;
            const M_MMAP_THRESHOLD: i32 = -3;
            // SAFETY: mallopt only changes allocator parameters; 32 MiB is glibc's maximum
            // mmap threshold on 64-bit targets.
            unsafe {
                mallopt(M_MMAP_THRESHOLD, 32 << 20);
                mallopt(M_TRIM_THRESHOLD, 512 << 20);
            }
        });
    }
}

/// Hands freed heap memory back to the kernel (glibc `malloc_trim`). With the raised trim
/// threshold above, an unloaded model's freed buffers would otherwise stay in the process
/// (~130 MiB for a 135M model): call it once a model is gone.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: malloc_trim only returns free pages to the kernel.
        unsafe {
            malloc_trim(0);
        }
    }
}
