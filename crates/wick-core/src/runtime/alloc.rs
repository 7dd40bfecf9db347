//! Allocator tuning for the forward pass. Every op allocates its output, and a prefill step's
//! FFN activations are large blocks; with glibc's defaults such blocks are mapped fresh and
//! freed back to the kernel, so each step pays page faults and page clearing for them.
//! Keeping freed memory in the process makes later steps reuse it.
//!
//! The scheduler runs on its own thread, so its blocks live in a thread arena, whose 64 MiB heaps
//! glibc unmaps as soon as one is wholly free — whatever the trim threshold — and maps again on
//! the next step: Gemma 3 270M's 512-token prefill took ~27k page faults a run so (`perf stat`),
//! 10 % of its time at one thread. A 64 MiB top pad keeps a freed heap for the next step.

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
            const M_TOP_PAD: i32 = -2;
            const M_MMAP_THRESHOLD: i32 = -3;
            // SAFETY: mallopt only changes allocator parameters; 32 MiB is glibc's maximum
            // mmap threshold on 64-bit targets, 64 MiB its thread-arena heap size.
            unsafe {
                mallopt(M_MMAP_THRESHOLD, 32 << 20);
                mallopt(M_TRIM_THRESHOLD, 512 << 20);
                mallopt(M_TOP_PAD, 64 << 20);
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

/// Bytes in their own anonymous mapping, backed by 2 MiB pages where the kernel allows
/// (`MADV_HUGEPAGE`; `transparent_hugepage = madvise` is the usual default): repacked weights
/// are streamed end to end every decode step, and on 4 KiB pages each page is a TLB miss and a
/// boundary the hardware prefetcher stops at.
pub struct HugeBytes {
    map: memmap2::MmapMut,
    len: usize,
}

impl HugeBytes {
    /// `len` zero bytes (the kernel zero-fills each page as it is first written); `None` when
    /// no mapping could be made (then use the heap).
    pub fn zeroed(len: usize) -> Option<Self> {
        let map = memmap2::MmapMut::map_anon(len.max(1)).ok()?;
        #[cfg(target_os = "linux")]
        let _ = map.advise(memmap2::Advice::HugePage); // a hint: refused, the pages stay small
        Some(Self { map, len })
    }

    /// A copy of `bytes`.
    pub fn copy_of(bytes: &[u8]) -> Option<Self> {
        let mut h = Self::zeroed(bytes.len())?;
        h.copy_from_slice(bytes);
        Some(h)
    }
}

impl std::ops::DerefMut for HugeBytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.map[..self.len]
    }
}

impl std::ops::Deref for HugeBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.map[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::HugeBytes;

    /// A copy onto its own mapping reads back byte for byte, whatever its length (empty, a
    /// part of a page, over a huge page).
    #[test]
    fn huge_bytes_hold_what_they_copied() {
        for len in [0usize, 1, 4095, (2 << 20) + 12345] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let h = HugeBytes::copy_of(&bytes).expect("an anonymous mapping");
            assert_eq!(&h[..], &bytes[..], "len {len}");
        }
    }
}
