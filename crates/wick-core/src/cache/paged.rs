//! The paged KV pool: every attention layer's keys and values for all sequences, in blocks of
//! `BLOCK_SIZE` tokens that sequences take and give back through their block tables.
//!
//! Layout per attention layer: `view.rs` (f16 as llama.cpp's default cache type, or the
//! quantized types of `--cache-type-k/-v`, `kv_type.rs`).
//! `BLOCK_SIZE` is a multiple of 64 so that the exact-order dot products (16 lanes over chunks of
//! 16, or 4×16 lanes over steps of 64) never straddle a block: a block-by-block sum is the sum
//! llama.cpp takes over its contiguous cache.
//!
//! Storage is mapped zeroed for the whole pool up front; the OS backs pages as blocks are
//! first written, so an idle pool costs address space, not memory.
//!
//! Writes and views go through a shared `&KvPool`, so that the sequences of one step can run
//! on different threads at once. What makes that sound is who touches which block: during a
//! step a sequence writes only positions past its cache length, which lie in blocks it alone
//! holds (blocks shared through the prefix cache are full, never written again), and a view
//! reads only its own sequence's blocks. Storage is therefore reached through raw pointers
//! and borrowed block by block, never as one slice over a whole layer.

use candle_core::{Device, Tensor};
use half::f16;
use half::slice::HalfFloatSliceExt;

use super::blocks::{chain_hash, BlockId, BlockPool};
use super::device_kv::DeviceKv;
use super::kv_type::KvTypes;
use super::view::{LayerKv, PagedView, Zeroed};
use super::{Checkpoint, LayerKind, SeqCache};
use crate::error::{Result, WickError};
use crate::runtime::device::Placement;
use crate::runtime::pool::{self, SyncPtr};

/// Tokens per KV block (the prefix cache's granularity too).
pub const BLOCK_SIZE: usize = 64;

/// One sequence's new keys and values for `KvPool::write_many`.
pub struct KvWrite<'a> {
    pub seq: &'a SeqCache,
    pub pos0: usize,
    pub k: &'a [f32],
    pub v: &'a [f32],
}

/// Positions per task of `KvPool::write_many`.
const WRITE_ROWS: usize = 16;

pub struct KvPool {
    alloc: BlockPool,
    layout: Vec<LayerKind>,
    kv: Vec<Option<LayerKv>>,
    /// Per conv layer, the conv state at the end of each block: `[block][rows·width]` f32.
    conv: Vec<Option<Zeroed<f32>>>,
    prefix_cache: bool,
    /// Where each layer runs (a split model's first layers on the host).
    placement: Placement,
    /// The device path's keys and values (`kv` then holds none for its layers).
    on_device: Option<DeviceKv>,
    types: KvTypes,
}

impl KvPool {
    /// A pool for a model on `device`'s usual path (`Placement::for_device`).
    pub fn new(layout: &[LayerKind], n_blocks: usize, prefix_cache: bool, device: &Device) -> Result<Self> {
        Self::new_on(layout, n_blocks, prefix_cache, &Placement::for_device(device), KvTypes::F16)
    }

    /// A pool for a model placed as `placement`: host blocks for the exact CPU path, device
    /// tensors (`DeviceKv`) for the device path. Conv snapshots stay in host memory. Keys and
    /// values are stored as `types` says (quantized types on the exact path only).
    pub fn new_on(
        layout: &[LayerKind],
        n_blocks: usize,
        prefix_cache: bool,
        placement: &Placement,
        types: KvTypes,
    ) -> Result<Self> {
        if n_blocks == 0 {
            return Err(WickError::InvalidRequest("the KV pool needs at least one block".into()));
        }
        if !placement.exact() && types != KvTypes::F16 {
            return Err(WickError::InvalidRequest(format!(
                "KV cache types {}/{} run on the CPU path only; the device path stores f16",
                types.k.name(),
                types.v.name()
            )));
        }
        let mut kv = Vec::with_capacity(layout.len());
        let mut conv = Vec::with_capacity(layout.len());
        for (il, l) in layout.iter().enumerate() {
            let (k, c) = match *l {
                LayerKind::Attention { .. } if placement.layer_on_device(il) => (None, None),
                LayerKind::Attention { n_kv_head, head_dim } => {
                    (Some(LayerKv::new(n_blocks, n_kv_head, head_dim, types)?), None)
                }
                LayerKind::Conv { rows, width } => (None, Some(Zeroed::new(n_blocks * rows * width)?)),
            };
            kv.push(k);
            conv.push(c);
        }
        Ok(Self {
            alloc: BlockPool::new(n_blocks, BLOCK_SIZE),
            layout: layout.to_vec(),
            kv,
            conv,
            prefix_cache,
            placement: placement.clone(),
            on_device: (!placement.exact())
                .then(|| {
                    DeviceKv::new(layout, |il| placement.layer_on_device(il), n_blocks, placement.device())
                })
                .transpose()?,
            types,
        })
    }

    /// The device path's KV storage; an error for a pool made for the exact path.
    pub(crate) fn on_device(&self) -> Result<&DeviceKv> {
        self.on_device.as_ref().ok_or_else(|| {
            WickError::InvalidRequest(
                "the KV pool was made for the exact CPU path, not the device path".into(),
            )
        })
    }

    /// A pool holding at least `tokens` tokens.
    pub fn with_capacity(layout: &[LayerKind], tokens: usize, device: &Device) -> Result<Self> {
        Self::new(layout, tokens.div_ceil(BLOCK_SIZE).max(1), true, device)
    }

    pub fn layout(&self) -> &[LayerKind] {
        &self.layout
    }
    /// How keys and values are stored.
    pub fn types(&self) -> KvTypes {
        self.types
    }
    /// An empty sequence state shaped for this pool's model.
    pub fn new_seq(&self) -> SeqCache {
        SeqCache::new(&self.layout)
    }
    pub fn n_blocks(&self) -> usize {
        self.alloc.n_blocks()
    }
    /// Blocks held by sequences.
    pub fn n_used(&self) -> usize {
        self.alloc.n_used()
    }
    /// Blocks a sequence could still get (free, or cached but unused).
    pub fn n_available(&self) -> usize {
        self.alloc.n_available()
    }
    pub fn n_cached(&self) -> usize {
        self.alloc.n_cached()
    }
    pub fn capacity_tokens(&self) -> usize {
        self.n_blocks() * BLOCK_SIZE
    }

    /// New blocks `seq` needs to take `n_new` more tokens.
    pub fn blocks_needed(&self, seq: &SeqCache, n_new: usize) -> usize {
        (seq.len + n_new).div_ceil(BLOCK_SIZE).saturating_sub(seq.blocks.len())
    }

    /// Gives `seq` the blocks for `n_new` more tokens.
    pub fn reserve(&mut self, seq: &mut SeqCache, n_new: usize) -> Result<()> {
        let need = self.blocks_needed(seq, n_new);
        if need > self.alloc.n_available() {
            return Err(WickError::Internal(format!(
                "KV pool exhausted: {need} more blocks wanted, {} available",
                self.alloc.n_available()
            )));
        }
        for _ in 0..need {
            let b = self.alloc.allocate().ok_or_else(|| WickError::Internal("KV pool exhausted".into()))?;
            seq.blocks.push(b);
        }
        Ok(())
    }

    /// Drops `seq`'s positions from `len` on, within its last step (rejected drafts; see
    /// `SeqCache::rewind`), and returns the blocks no longer reached.
    pub fn truncate(&mut self, seq: &mut SeqCache, len: usize) -> Result<()> {
        seq.rewind(len)?;
        let keep = len.div_ceil(BLOCK_SIZE).max(seq.registered);
        if seq.blocks.len() > keep {
            self.alloc.release(&seq.blocks[keep..]);
            seq.blocks.truncate(keep);
        }
        Ok(())
    }

    /// Returns `seq` to `at`, a checkpoint it passed since (steps of a draft model whose later
    /// drafts were rejected): its length and conv states as they were there, and the blocks
    /// no longer reached freed. Keys and values past it are left to be overwritten.
    pub fn restore(&mut self, seq: &mut SeqCache, at: &Checkpoint) -> Result<()> {
        if at.len > seq.len || at.convs.len() != seq.layers.len() || at.len < seq.registered * BLOCK_SIZE {
            return Err(WickError::Internal(format!(
                "restore to {} tokens from a sequence of {} it never passed",
                at.len, seq.len
            )));
        }
        for (layer, state) in seq.layers.iter_mut().zip(&at.convs) {
            if let Some(conv) = layer {
                conv.restore(state.clone());
            }
        }
        seq.len = at.len;
        let keep = at.len.div_ceil(BLOCK_SIZE);
        if seq.blocks.len() > keep {
            self.alloc.release(&seq.blocks[keep..]);
            seq.blocks.truncate(keep);
        }
        Ok(())
    }

    /// Returns `seq`'s blocks (full cached ones stay cached until space is needed) and resets
    /// it to an empty sequence.
    pub fn release(&mut self, seq: &mut SeqCache) {
        self.alloc.release(&seq.blocks);
        *seq = SeqCache::new(&self.layout);
    }

    /// Starts an empty `seq` on the longest cached prefix of `tokens` made of whole blocks:
    /// takes those blocks, restores the conv states saved at the prefix's end, and returns
    /// the number of tokens reused. The caller passes only tokens it may skip.
    pub fn reuse_prefix(&mut self, seq: &mut SeqCache, tokens: &[u32], salt: u64) -> Result<usize> {
        if !self.prefix_cache || !seq.is_empty() || !seq.blocks.is_empty() {
            return Ok(0);
        }
        // The blocks it fills are registered on the same chain.
        seq.chain = salt;
        let (found, chain) = self.alloc.lookup(tokens, salt);
        let Some(&last) = found.last() else { return Ok(0) };
        for (layer, snaps) in self.conv.iter_mut().enumerate() {
            let (Some(snaps), Some(Some(state))) = (snaps, seq.layers.get_mut(layer)) else { continue };
            let n = state.rows * state.width;
            let s = &snaps.as_mut_slice()[last as usize * n..(last as usize + 1) * n];
            let dev = self.placement.layer(layer);
            state.set(Tensor::from_slice(s, (state.rows, state.width), dev.device())?)?;
        }
        seq.len = found.len() * BLOCK_SIZE;
        seq.registered = found.len();
        seq.chain = chain;
        seq.blocks = found;
        Ok(seq.len)
    }

    /// Enters `seq`'s newly filled blocks in the prefix cache. `tokens` are the sequence's
    /// tokens from position 0 (at least `seq.len()` of them).
    pub fn register_full(&mut self, seq: &mut SeqCache, tokens: &[u32]) {
        if !self.prefix_cache {
            return;
        }
        let full = seq.len.min(tokens.len()) / BLOCK_SIZE;
        for j in seq.registered..full {
            seq.chain = chain_hash(seq.chain, &tokens[j * BLOCK_SIZE..(j + 1) * BLOCK_SIZE]);
            self.alloc.register(seq.blocks[j], seq.chain);
        }
        seq.registered = seq.registered.max(full);
    }

    /// Writes keys and values `[n, n_kv_head, head_dim]` of positions `pos0..pos0+n` of `seq`
    /// into attention layer `layer` (its blocks must be reserved).
    #[cfg(test)]
    pub(crate) fn write(
        &mut self,
        layer: usize,
        seq: &SeqCache,
        pos0: usize,
        k: &[f32],
        v: &[f32],
    ) -> Result<()> {
        self.write_many(layer, &[KvWrite { seq, pos0, k, v }])
    }

    /// `write` for several sequences at once, spread over the thread pool: a step's new
    /// positions scatter into the transposed V blocks (a cache line per value), which is
    /// latency-bound work worth two cores.
    pub fn write_many(&self, layer: usize, items: &[KvWrite<'_>]) -> Result<()> {
        let l = self.kv.get(layer).and_then(Option::as_ref).ok_or_else(|| no_kv(layer))?;
        let (n_kv, hd, bs) = (l.n_kv, l.hd, BLOCK_SIZE);
        let row = n_kv * hd;
        // (item, first token) of every task.
        let mut tasks = Vec::new();
        for (at, it) in items.iter().enumerate() {
            if it.k.len() != it.v.len() || !it.k.len().is_multiple_of(row) {
                return Err(WickError::Internal(format!(
                    "kv write: {} keys, {} values, rows of {row}",
                    it.k.len(),
                    it.v.len()
                )));
            }
            let n = it.k.len() / row;
            if (it.pos0 + n).div_ceil(bs) > it.seq.blocks.len() {
                return Err(WickError::Internal("kv write past the sequence's reserved blocks".into()));
            }
            self.check_blocks(it.seq)?;
            tasks.extend((0..n).step_by(WRITE_ROWS).map(|i| (at, i)));
        }
        let (kp, vp) = (SyncPtr(l.k.ptr()), SyncPtr(l.v.ptr()));
        let (kt, vt) = (l.types.k, l.types.v);
        let (k_row, v_row) = (kt.row_bytes(hd), vt.row_bytes(hd));
        let transposed_v = !vt.is_quantized();
        let task = |t: usize| {
            let (at, first) = tasks[t];
            let it = &items[at];
            let rows = first..(first + WRITE_ROWS).min(it.k.len() / row);
            // Each f16 value lands in its own cache line of the transposed V blocks, lines
            // last touched a step (and ~100 MB of weights) ago: ask for all of them before
            // the first store, so their misses overlap instead of queueing in the store buffer.
            let vp16 = vp.get() as *mut u16;
            for i in rows.clone().filter(|_| transposed_v) {
                let p = it.pos0 + i;
                let (b, slot) = (it.seq.blocks[p / bs] as usize, p % bs);
                for line in 0..row {
                    // In the layer: block b < n_blocks (checked above).
                    prefetch_write(vp16.wrapping_add((b * row + line) * bs + slot));
                }
            }
            let mut vh = vec![f16::ZERO; hd];
            for i in rows {
                let p = it.pos0 + i;
                let (b, slot) = (it.seq.blocks[p / bs] as usize, p % bs);
                for g in 0..n_kv {
                    let src = (i * n_kv + g) * hd;
                    // SAFETY: in the layer (b < n_blocks, g < n_kv, slot < bs), and only this
                    // task writes position p of this sequence (module docs).
                    let key = unsafe {
                        std::slice::from_raw_parts_mut(kp.get().add(l.row_at(kt, b, g, slot)), k_row)
                    };
                    kt.quantize_row(&it.k[src..src + hd], key);
                    if !transposed_v {
                        // SAFETY: as the key.
                        let value = unsafe {
                            std::slice::from_raw_parts_mut(vp.get().add(l.row_at(vt, b, g, slot)), v_row)
                        };
                        vt.quantize_row(&it.v[src..src + hd], value);
                        continue;
                    }
                    vh.convert_from_f32_slice(&it.v[src..src + hd]);
                    for (d, x) in vh.iter().enumerate() {
                        // SAFETY: in the layer (as the key, and d < hd); this task's position.
                        unsafe { *vp16.add(((b * n_kv + g) * hd + d) * bs + slot) = x.to_bits() };
                    }
                }
            }
        };
        pool::run(tasks.len(), &task);
        Ok(())
    }

    /// `seq`'s keys and values of one attention layer, for reading.
    pub fn view<'a>(&'a self, layer: usize, seq: &'a SeqCache) -> Result<PagedView<'a>> {
        let l = self.kv.get(layer).and_then(Option::as_ref).ok_or_else(|| no_kv(layer))?;
        self.check_blocks(seq)?;
        Ok(l.view(&seq.blocks))
    }

    /// Every block of `seq` lies in this pool: what makes the raw offsets of writes and views
    /// stay inside a layer's storage.
    fn check_blocks(&self, seq: &SeqCache) -> Result<()> {
        match seq.blocks.iter().all(|&b| (b as usize) < self.n_blocks()) {
            true => Ok(()),
            false => Err(WickError::Internal("a sequence holds a block outside the KV pool".into())),
        }
    }

    /// Saves a conv layer's state as it stands at the end of `block`.
    pub(crate) fn save_conv(&self, layer: usize, block: BlockId, state: &[f32]) -> Result<()> {
        let snaps = self.conv.get(layer).and_then(Option::as_ref);
        let Some(snaps) = snaps else {
            return Err(WickError::Internal(format!("layer {layer} keeps no conv snapshots")));
        };
        let n = state.len();
        let at = block as usize * n;
        if at + n > snaps.len() {
            return Err(WickError::Internal("conv snapshot out of range".into()));
        }
        // SAFETY: in range (checked); `block` belongs to the sequence being stepped, whose
        // task alone writes its snapshots (module docs).
        unsafe { std::ptr::copy_nonoverlapping(state.as_ptr(), snaps.ptr().add(at), n) };
        Ok(())
    }
}

/// Brings the line holding `x` into L1 ahead of a store (a hint; no effect elsewhere).
#[inline(always)]
fn prefetch_write<T>(x: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and has no architectural effect.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_ET0 }>(x as *const i8)
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as above (`prfm` is a hint).
    unsafe {
        std::arch::asm!("prfm pstl1keep, [{x}]", x = in(reg) x, options(nostack, preserves_flags, readonly))
    };
}

fn no_kv(layer: usize) -> WickError {
    WickError::Internal(format!("layer {layer} has no KV storage in this pool"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAYOUT: [LayerKind; 2] =
        [LayerKind::Attention { n_kv_head: 2, head_dim: 4 }, LayerKind::Conv { rows: 2, width: 3 }];

    #[test]
    fn writes_land_where_views_read_them_across_blocks() {
        let mut pool = KvPool::new(&LAYOUT, 4, true, &Device::Cpu).unwrap();
        // Take a block first so the sequence's table is not the identity.
        let mut other = pool.new_seq();
        pool.reserve(&mut other, 1).unwrap();
        let mut seq = pool.new_seq();
        let n = BLOCK_SIZE + 5;
        pool.reserve(&mut seq, n).unwrap();
        assert_eq!(seq.blocks().len(), 2);
        let k: Vec<f32> = (0..n * 8).map(|i| i as f32).collect();
        let v: Vec<f32> = (0..n * 8).map(|i| -(i as f32)).collect();
        pool.write(0, &seq, 0, &k, &v).unwrap();
        let view = pool.view(0, &seq).unwrap();
        for t in [0, 63, 64, n - 1] {
            for g in 0..2 {
                let want: Vec<f32> = (0..4).map(|d| ((t * 2 + g) * 4 + d) as f32).collect();
                assert_eq!(view.key(g, t).iter().map(|x| x.to_f32()).collect::<Vec<_>>(), want);
                assert_eq!(view.value(g, 3, t), -(((t * 2 + g) * 4 + 3) as f32));
            }
        }
        assert!(pool.write(0, &seq, n, &k[..8 * 60], &v[..8 * 60]).is_err(), "past the reserved blocks");
    }

    #[test]
    fn a_released_prefix_is_found_again_with_its_conv_state() {
        let mut pool = KvPool::new(&LAYOUT, 3, true, &Device::Cpu).unwrap();
        let tokens: Vec<u32> = (0..150).collect();
        let mut seq = pool.new_seq();
        pool.reserve(&mut seq, 150).unwrap();
        let b1 = seq.blocks()[1];
        pool.save_conv(1, b1, &[1., 2., 3., 4., 5., 6.]).unwrap();
        seq.advance(150);
        pool.register_full(&mut seq, &tokens);
        pool.release(&mut seq);
        assert_eq!((pool.n_used(), pool.n_cached()), (0, 2));

        let mut again = pool.new_seq();
        assert_eq!(pool.reuse_prefix(&mut again, &tokens[..149], 0).unwrap(), 128);
        assert_eq!(again.len(), 128);
        let (state, _) = again.conv_mut(1).unwrap();
        let s = state.get(&Device::Cpu).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(s, vec![1., 2., 3., 4., 5., 6.]);
        let mut diverged = tokens.clone();
        diverged[70] = 999;
        let mut third = pool.new_seq();
        assert_eq!(pool.reuse_prefix(&mut third, &diverged, 0).unwrap(), 64, "block 1 differs");
    }

    #[test]
    fn exhaustion_is_an_error_not_a_panic() {
        let mut pool = KvPool::new(&LAYOUT, 1, false, &Device::Cpu).unwrap();
        let mut seq = pool.new_seq();
        assert_eq!(pool.blocks_needed(&seq, BLOCK_SIZE + 1), 2);
        assert!(pool.reserve(&mut seq, BLOCK_SIZE + 1).is_err());
        assert!(pool.reserve(&mut seq, BLOCK_SIZE).is_ok());
        assert_eq!(pool.n_available(), 0);
    }
}
