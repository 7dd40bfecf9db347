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

/// Bytes streamed end to end every step (repacked weights): from one huge page up, a mapping of
/// their own advised onto 2 MiB pages (`MADV_HUGEPAGE`; `transparent_hugepage = madvise` is the
/// usual default) — on 4 KiB pages each page is a TLB miss and a boundary the hardware
/// prefetcher stops at, and faulting them in was most of a 1 GB model's load; smaller ones,
/// which would gain nothing, on the heap.
pub enum StreamedBytes {
    Mapped(memmap2::MmapMut, usize),
    Heap(Vec<u8>),
}

impl StreamedBytes {
    /// `len` zero bytes to fill in place (the kernel zero-fills a mapping's pages as they are
    /// first written); the heap when no mapping could be made.
    pub fn zeroed(len: usize) -> Self {
        if len >= 2 << 20 {
            if let Ok(map) = memmap2::MmapMut::map_anon(len) {
                #[cfg(target_os = "linux")]
                let _ = map.advise(memmap2::Advice::HugePage); // a hint: refused, the pages stay small
                return Self::Mapped(map, len);
            }
        }
        Self::Heap(vec![0u8; len])
    }
}

impl std::ops::Deref for StreamedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Self::Mapped(map, len) => &map[..*len],
            Self::Heap(v) => v,
        }
    }
}

impl std::ops::DerefMut for StreamedBytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            Self::Mapped(map, len) => &mut map[..*len],
            Self::Heap(v) => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::StreamedBytes;

    /// Bytes written in read back byte for byte, on the heap and in a mapping (empty, a part
    /// of a page, just under and over a huge page).
    #[test]
    fn streamed_bytes_hold_what_was_written() {
        for len in [0usize, 1, 4095, (2 << 20) - 1, (2 << 20) + 12345] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let mut s = StreamedBytes::zeroed(len);
            assert!(s.iter().all(|&b| b == 0), "len {len}: not zeroed");
            s.copy_from_slice(&bytes);
            assert_eq!(matches!(s, StreamedBytes::Mapped(..)), len >= 2 << 20, "len {len}");
            assert_eq!(&s[..], &bytes[..], "len {len}");
        }
    }
}
