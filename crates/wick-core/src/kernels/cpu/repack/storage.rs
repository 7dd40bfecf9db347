//! Where a packed weight's bytes live.

/// A packed weight's bytes: from a huge page up, a mapping of their own on huge pages
/// (`HugeBytes`); smaller ones, which would gain nothing, on the heap.
pub enum Storage {
    Huge(crate::runtime::alloc::HugeBytes),
    Heap(Vec<u8>),
}

impl Storage {
    /// `len` zero bytes, packed into in place (a copy afterwards would zero and fault every
    /// page twice: most of the load time of a 1 GB model).
    pub fn zeroed(len: usize) -> Self {
        match (len >= 2 << 20).then(|| crate::runtime::alloc::HugeBytes::zeroed(len)).flatten() {
            Some(h) => Storage::Huge(h),
            None => Storage::Heap(vec![0u8; len]),
        }
    }
}

impl std::ops::Deref for Storage {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Storage::Huge(h) => h,
            Storage::Heap(v) => v,
        }
    }
}

impl std::ops::DerefMut for Storage {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            Storage::Huge(h) => h,
            Storage::Heap(v) => v,
        }
    }
}
