//! A packed weight as the pack cache (`runtime::weight_cache`) saves it and gives it back:
//! a few numbers (type, shape, parts) beside its panels, checked against this CPU's kernels
//! when read, and a digest of the packing code that keys the cache's files.

use std::sync::Arc;

use candle_core::quantized::QTensor;
use sha2::{Digest, Sha256};

use super::{PackedWeight, Panels, PANEL, TYPES};
use crate::kernels::cpu::feats::isa;
use crate::runtime::alloc::StreamedBytes;
use crate::runtime::weight_cache::MappedBytes;

impl PackedWeight {
    /// What the pack cache saves of this weight: its numbers (type, shape, parts) and its
    /// panels; None for panels mapped from the cache already.
    pub fn cache_entry(&self) -> Option<(Vec<u64>, Arc<StreamedBytes>)> {
        let Panels::Packed(bytes) = &self.data else { return None };
        let ty = TYPES.iter().position(|(_, t)| std::ptr::eq(*t, self.ty))?;
        let dims = [ty, self.n, self.k].into_iter().chain(self.parts.iter().copied());
        Some((dims.map(|v| v as u64).collect(), bytes.clone()))
    }

    /// The weight `cache_entry` saved, around its panels mapped from the cache's file; None
    /// when the numbers do not describe those bytes for this CPU's kernels.
    pub fn from_cache_entry(meta: &[u64], panels: MappedBytes) -> Option<Self> {
        let meta: Vec<usize> = meta.iter().map(|&v| usize::try_from(v).ok()).collect::<Option<_>>()?;
        let (head, parts): (&[usize; 3], _) = (meta.get(..3)?.try_into().ok()?, &meta[3..]);
        let [ty, n, k] = *head;
        let &(dtype, ty) = TYPES.get(ty)?;
        // Numbers read from a file: checked arithmetic, so a damaged entry is refused, not wrapped.
        let panel_bytes = (k / ty.qk).checked_mul(ty.block_bytes)?;
        let fits = k > 0
            && k.is_multiple_of(dtype.block_size())
            && k.is_multiple_of(ty.qk)
            && (ty.packs_on)(isa())
            && !parts.is_empty()
            && parts.iter().try_fold(0usize, |a, &p| a.checked_add(p)) == Some(n)
            && parts[..parts.len() - 1].iter().all(|p| p.is_multiple_of(PANEL))
            && n.div_ceil(PANEL).checked_mul(panel_bytes) == Some(panels.len());
        fits.then(|| Self { ty, n, k, data: Panels::Mapped(panels), panel_bytes, parts: parts.to_vec() })
    }

    /// A digest of this CPU's kernel set and of what this build's packing makes of a fixed
    /// weight of every packed type: a pack cache file written by other packing code is never read.
    pub fn layout_fingerprint() -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(format!("{:?}", isa()).as_bytes());
        let (n, k) = (PANEL + 5, 256);
        let xs: Vec<f32> = (0..n * k).map(|i| ((i * 7919 % 1013) as f32 / 1013.0 - 0.5) * 3.0).collect();
        for (i, (dtype, ty)) in TYPES.iter().enumerate() {
            h.update((i as u64).to_le_bytes());
            let packed = candle_core::Tensor::from_vec(xs.clone(), (n, k), &candle_core::Device::Cpu)
                .and_then(|w| QTensor::quantize(&w, *dtype))
                .and_then(|q| q.data().map(|raw| raw.into_owned()));
            if let (Ok(raw), true) = (packed, (ty.packs_on)(isa())) {
                let mut p = vec![0u8; n.div_ceil(PANEL) * (k / ty.qk * ty.block_bytes)];
                (ty.pack)(&raw, n, k, &mut p);
                h.update(&p);
            }
        }
        h.finalize().into()
    }

    /// Bytes of the panels (what one matmul streams; the benches' GB/s).
    pub fn packed_bytes(&self) -> usize {
        self.data.len()
    }
}
