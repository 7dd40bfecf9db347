//! Where an F16 weight's values live, and an adapter's weights gathered into one buffer.

use std::sync::Arc;

use half::f16;

use super::HostF16;
use crate::runtime::alloc::StreamedBytes;

/// Where a weight's values live: a vector of its own, or a part of one mapping on huge pages
/// that holds a set of weights end to end (`HostF16::gather`).
pub(super) enum F16Store {
    Own(Vec<f16>),
    /// The buffer, the byte offset (a multiple of 64 from a 64-aligned start) and the values.
    Shared(Arc<StreamedBytes>, usize, usize),
}

impl std::ops::Deref for F16Store {
    type Target = [f16];
    fn deref(&self) -> &[f16] {
        match self {
            Self::Own(v) => v,
            // SAFETY: `gather` placed `n` values at the even offset `at` of the buffer, which it
            // checked is 64-aligned; the buffer lives as long as this store.
            Self::Shared(b, at, n) => unsafe {
                std::slice::from_raw_parts(b[*at..].as_ptr() as *const f16, *n)
            },
        }
    }
}

impl HostF16 {
    /// Moves `weights` into one buffer, end to end in the order given (each at a cache line),
    /// on 2 MiB pages where the kernel gives them: an adapter's weights are read once per step
    /// as many short streams, and on 4 KiB pages each page is a TLB miss and a place the
    /// hardware prefetcher stops. Left as they are when the buffer would not reach a huge page.
    pub fn gather(weights: &mut [&mut HostF16]) {
        let bytes = |h: &HostF16| h.bytes().len().next_multiple_of(64);
        let total: usize = weights.iter().map(|h| bytes(h)).sum();
        let mut buf = StreamedBytes::zeroed(total);
        if !matches!(buf, StreamedBytes::Mapped(..)) || !(buf.as_ptr() as usize).is_multiple_of(64) {
            return;
        }
        let mut at = 0;
        for h in weights.iter() {
            let b = h.bytes();
            buf[at..at + b.len()].copy_from_slice(b);
            at += bytes(h);
        }
        let buf = Arc::new(buf);
        let mut at = 0;
        for h in weights.iter_mut() {
            let step = bytes(h);
            let store = F16Store::Shared(buf.clone(), at, h.bytes().len() / 2);
            match h.t.is_empty() {
                true => h.w = store,
                false => h.t = store,
            }
            at += step;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::RowPos;

    /// Gathered weights (an A and a B shape, over 2 MiB together) live in one buffer and give
    /// the products they gave before, bit for bit, for single-token and prompt rows.
    #[test]
    fn gathered_weights_give_the_same_products() {
        let value = |i: usize| f16::from_f32(((i * 7919) % 1000) as f32 / 997.0 - 0.5);
        let (a_n, a_k, b_n, b_k) = (16, 1024, 80_000, 16);
        let mut a = HostF16::new((0..a_n * a_k).map(value).collect(), a_n, a_k).unwrap();
        let mut b = HostF16::new((0..b_n * b_k).map(|i| value(i + 5)).collect(), b_n, b_k).unwrap();
        let xs: Vec<f32> = (0..3 * a_k).map(|i| value(i + 11).to_f32()).collect();
        let rows = [vec![RowPos::SINGLE; 3], (0..3).map(|idx| RowPos { seq_len: 3, idx }).collect()];
        let run = |a: &HostF16, b: &HostF16| -> Vec<Vec<u32>> {
            rows.iter()
                .map(|r| b.matmul_host(&a.matmul_host(&xs, r), r).iter().map(|v| v.to_bits()).collect())
                .collect()
        };
        let before = run(&a, &b);
        HostF16::gather(&mut [&mut a, &mut b]);
        // B is kept as `t` where k = 16 is a short dot (x86), as `w` where it is not (aarch64).
        let shared = |h: &HostF16| matches!(if h.t.is_empty() { &h.w } else { &h.t }, F16Store::Shared(..));
        assert!(shared(&a) && shared(&b), "not gathered");
        let (pa, pb) = (a.bytes().as_ptr() as usize, b.bytes().as_ptr() as usize);
        assert_eq!(pb - pa, (a_n * a_k * 2).next_multiple_of(64), "B right after A");
        assert_eq!(run(&a, &b), before);
    }
}
