//! The pool's storage (`Zeroed`: zero-filled memory straight from the OS) and one sequence's
//! read view of a layer (`PagedView`), byte offsets for every storage type:
//! - keys `[block][kv_head][slot][row]`, a row being `head_dim` f16 or its quantized blocks;
//! - f16 values transposed per block `[block][kv_head][head_dim][slot]` (llama.cpp's
//!   `v_trans` cache, so the probability·V dot runs over contiguous positions);
//! - quantized values in rows as keys (llama.cpp stores them so with flash attention: a
//!   block of 32 is quantized from one token's values, never across tokens written apart).

use half::f16;

use super::kv_type::{KvType, KvTypes};
use super::{BlockId, BLOCK_SIZE};
use crate::error::{Result, WickError};

/// Zero-filled memory straight from the OS (an anonymous map), so pages a sequence never
/// writes are never made resident, whatever the allocator would do with a large `calloc`.
pub(super) struct Zeroed<T> {
    /// Owns the mapping (unmapped on drop); reached through `base`.
    _map: memmap2::MmapMut,
    /// The map's first element, kept so hot reads need no call into the map.
    base: *mut T,
    len: usize,
}

// SAFETY: a plain memory region; who may touch which part of it at once is the module's
// ownership rule, enforced by its users.
unsafe impl<T: Send> Send for Zeroed<T> {}
// SAFETY: as for `Send` above.
unsafe impl<T: Sync> Sync for Zeroed<T> {}

/// Plain numbers for which all-zero bytes are a valid value.
pub(super) trait ZeroValid: Copy {}
impl ZeroValid for u8 {}
impl ZeroValid for f32 {}

impl<T: ZeroValid> Zeroed<T> {
    pub(super) fn new(len: usize) -> Result<Self> {
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| too_big(len))?;
        let mut map = memmap2::MmapMut::map_anon(bytes.max(1)).map_err(|_| too_big(len))?;
        let base = map.as_mut_ptr() as *mut T;
        Ok(Self { _map: map, base, len })
    }
    pub(super) fn len(&self) -> usize {
        self.len
    }
    /// The first element; writes through it follow the module's ownership rule.
    #[inline]
    pub(super) fn ptr(&self) -> *mut T {
        self.base
    }
    /// `n` elements from `at`.
    ///
    /// # Safety
    /// Nobody writes those elements while the slice lives.
    #[inline]
    pub(super) unsafe fn range(&self, at: usize, n: usize) -> &[T] {
        assert!(at <= self.len && n <= self.len - at, "{at}+{n} past {}", self.len);
        // SAFETY: in bounds (asserted), page-aligned, any bytes are a valid T; no writer (caller).
        unsafe { std::slice::from_raw_parts(self.ptr().add(at), n) }
    }
    pub(super) fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: the map holds `len` Ts and is borrowed exclusively.
        unsafe { std::slice::from_raw_parts_mut(self.base, self.len) }
    }
}

fn too_big(len: usize) -> WickError {
    WickError::InvalidRequest(format!("cannot reserve a KV pool of {len} values"))
}

/// One attention layer's storage: `n_kv` heads of `hd` values per token.
pub(super) struct LayerKv {
    pub n_kv: usize,
    pub hd: usize,
    pub types: KvTypes,
    pub k: Zeroed<u8>,
    pub v: Zeroed<u8>,
}

impl LayerKv {
    pub fn new(n_blocks: usize, n_kv: usize, hd: usize, types: KvTypes) -> Result<Self> {
        for t in [types.k, types.v] {
            if !t.fits(hd) {
                return Err(WickError::InvalidRequest(format!(
                    "KV cache type {} needs a head size that is a multiple of 32, not {hd}",
                    t.name()
                )));
            }
        }
        let per_block = |t: KvType| n_kv.checked_mul(BLOCK_SIZE * t.row_bytes(hd));
        let size = |t: KvType| {
            per_block(t)
                .and_then(|b| b.checked_mul(n_blocks))
                .ok_or_else(|| WickError::InvalidRequest("KV pool size overflows".into()))
        };
        Ok(Self { n_kv, hd, types, k: Zeroed::new(size(types.k)?)?, v: Zeroed::new(size(types.v)?)? })
    }

    /// Byte offset of head `g`'s row at `slot` of block `b` in a side stored as `ty` in rows
    /// (keys; quantized values).
    #[inline(always)]
    pub fn row_at(&self, ty: KvType, b: usize, g: usize, slot: usize) -> usize {
        ((b * self.n_kv + g) * BLOCK_SIZE + slot) * ty.row_bytes(self.hd)
    }

    pub fn view<'a>(&'a self, blocks: &'a [BlockId]) -> PagedView<'a> {
        PagedView { layer: self, blocks, n_kv_head: self.n_kv, head_dim: self.hd }
    }
}

/// One sequence's keys and values in one attention layer, read through its block table.
pub struct PagedView<'a> {
    layer: &'a LayerKv,
    blocks: &'a [BlockId],
    pub n_kv_head: usize,
    pub head_dim: usize,
}

impl PagedView<'_> {
    pub fn types(&self) -> KvTypes {
        self.layer.types
    }
    #[inline(always)]
    fn k_bytes(&self, at: usize, n: usize) -> &[u8] {
        // SAFETY: the range lies in this sequence's blocks, which no other task writes while
        // its view lives (module docs of `paged`).
        unsafe { self.layer.k.range(at, n) }
    }
    #[inline(always)]
    fn v_bytes(&self, at: usize, n: usize) -> &[u8] {
        // SAFETY: as in `k_bytes`.
        unsafe { self.layer.v.range(at, n) }
    }
    /// `n` f16 values from byte `at` (the map is page-aligned and f16 rows start at even
    /// offsets).
    #[inline(always)]
    fn f16s(bytes: &[u8]) -> &[f16] {
        // SAFETY: 2-byte aligned (above), any bits are an f16, the length halves.
        unsafe { std::slice::from_raw_parts(bytes.as_ptr() as *const f16, bytes.len() / 2) }
    }
    /// Key of KV head `g` at position `t`, `head_dim` values (f16 keys).
    #[inline(always)]
    pub fn key(&self, g: usize, t: usize) -> &[f16] {
        Self::f16s(self.key_row(g, t))
    }
    /// Rows of KV head `g` at positions `t0..t0 + n` of the keys (`value` false) or the
    /// quantized values, contiguous as stored; the positions must lie in one block.
    #[inline(always)]
    fn rows(&self, value: bool, g: usize, t0: usize, n: usize) -> &[u8] {
        assert!(t0 % BLOCK_SIZE + n <= BLOCK_SIZE, "rows {t0}..{} cross a block", t0 + n);
        let b = self.blocks[t0 / BLOCK_SIZE] as usize;
        let ty = if value { self.layer.types.v } else { self.layer.types.k };
        let at = self.layer.row_at(ty, b, g, t0 % BLOCK_SIZE);
        let len = n * ty.row_bytes(self.head_dim);
        if value {
            self.v_bytes(at, len)
        } else {
            self.k_bytes(at, len)
        }
    }
    /// Key row of KV head `g` at position `t` as stored (`types().k.row_bytes(head_dim)`).
    #[inline(always)]
    pub fn key_row(&self, g: usize, t: usize) -> &[u8] {
        self.rows(false, g, t, 1)
    }
    /// Key rows of KV head `g` at positions `t0..t0 + n`, contiguous; the positions must lie
    /// in one block.
    #[inline(always)]
    pub fn key_rows(&self, g: usize, t0: usize, n: usize) -> &[u8] {
        self.rows(false, g, t0, n)
    }
    /// Keys of KV head `g` at positions `t0..t0 + n` (f16 keys), contiguous (`n · head_dim`
    /// values); the positions must lie in one block.
    #[inline(always)]
    pub fn keys(&self, g: usize, t0: usize, n: usize) -> &[f16] {
        Self::f16s(self.key_rows(g, t0, n))
    }
    /// Value row of KV head `g` at position `t` as stored (quantized values).
    #[inline(always)]
    pub fn value_row(&self, g: usize, t: usize) -> &[u8] {
        self.rows(true, g, t, 1)
    }
    /// Value rows of KV head `g` at positions `t0..t0 + n` as stored (quantized values),
    /// contiguous; the positions must lie in one block.
    #[inline(always)]
    pub fn value_rows(&self, g: usize, t0: usize, n: usize) -> &[u8] {
        self.rows(true, g, t0, n)
    }
    /// Values of KV head `g`, dimensions `d0..d0 + n`, over the positions of block `j` (f16
    /// values): contiguous (`n · BLOCK_SIZE` values, dimension by dimension).
    #[inline(always)]
    pub fn values(&self, g: usize, d0: usize, n: usize, j: usize) -> &[f16] {
        let bs = BLOCK_SIZE;
        let b = self.blocks[j] as usize;
        let at = ((b * self.n_kv_head + g) * self.head_dim + d0) * bs;
        Self::f16s(self.v_bytes(2 * at, 2 * n * bs))
    }
    /// Values of KV head `g`, dimension `d`, over the `BLOCK_SIZE` positions of block `j`.
    #[inline(always)]
    pub fn value_run(&self, g: usize, d: usize, j: usize) -> &[f16] {
        self.values(g, d, 1, j)
    }
    /// Value of head `g`, dimension `d`, position `t`, whatever the storage type.
    pub fn value(&self, g: usize, d: usize, t: usize) -> f32 {
        match self.layer.types.v {
            KvType::F16 => self.value_run(g, d, t / BLOCK_SIZE)[t % BLOCK_SIZE].to_f32(),
            ty => {
                let mut row = vec![0f32; self.head_dim];
                ty.dequantize_row(self.value_row(g, t), &mut row);
                row[d]
            }
        }
    }
    /// Key of head `g` at position `t` as values, whatever the storage type.
    pub fn key_values(&self, g: usize, t: usize) -> Vec<f32> {
        let mut row = vec![0f32; self.head_dim];
        self.layer.types.k.dequantize_row(self.key_row(g, t), &mut row);
        row
    }
}
