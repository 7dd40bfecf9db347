//! How a row-dot matmul's work is cut: which of llama.cpp's kernels each activation row
//! follows (`RowPos`), output columns per pool task, activation rows per cache block. Each
//! output's sum is the same however the work is cut.

use crate::runtime::pool;

/// A row's place in its sequence's share of a step: llama.cpp picks kernels by how many
/// rows it multiplies at once, so Wick picks them per sequence, as if each sequence ran alone.
/// That keeps every sequence's numbers independent of what it is batched with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowPos {
    /// Tokens this sequence brings to the step.
    pub seq_len: u32,
    /// This row's index among them.
    pub idx: u32,
}

impl RowPos {
    pub const SINGLE: RowPos = RowPos { seq_len: 1, idx: 0 };

    /// Whether ggml's repacked kernels (Q2_K, Q4_K; Q8_0 and Q6_K on aarch64) send this row
    /// through their GEMM: rows go in groups of four, the remaining `len % 4` (all rows when
    /// len < 4) through the GEMV.
    pub fn in_gemm_group(self) -> bool {
        self.seq_len > 3 && self.idx < self.seq_len - self.seq_len % 4
    }
}

/// Output columns per task: enough tasks to balance `threads` (and a helper that wakes late),
/// whole groups of 8 columns, at least 8.
fn cols_per_task(n: usize, m: usize) -> usize {
    let threads = pool::global().threads();
    if threads == 1 {
        return n;
    }
    let tasks = if m == 1 { threads * 8 } else { threads * 16 };
    (n.div_ceil(tasks).div_ceil(8) * 8).max(8)
}

/// Rows of activations per cache block in the multi-row kernels.
pub(crate) const ROW_BLOCK: usize = 64;

/// Up to `ROW_BLOCK` row indices held inline: the multi-row kernels sort a block's rows per
/// task (one-token decodes too), and a heap vector per sort cost thousands of allocations a
/// token. Rows past `ROW_BLOCK` are never added (a block holds no more).
#[derive(Clone, Copy)]
pub(crate) struct BlockRows {
    len: usize,
    rows: [usize; ROW_BLOCK],
}

impl Default for BlockRows {
    fn default() -> Self {
        Self { len: 0, rows: [0; ROW_BLOCK] }
    }
}

impl std::ops::Deref for BlockRows {
    type Target = [usize];
    fn deref(&self) -> &[usize] {
        &self.rows[..self.len]
    }
}

impl Extend<usize> for BlockRows {
    fn extend<I: IntoIterator<Item = usize>>(&mut self, rows: I) {
        for r in rows {
            if let Some(slot) = self.rows.get_mut(self.len) {
                *slot = r;
                self.len += 1;
            }
        }
    }
}

impl FromIterator<usize> for BlockRows {
    fn from_iter<I: IntoIterator<Item = usize>>(rows: I) -> Self {
        let mut b = Self::default();
        b.extend(rows);
        b
    }
}

/// Runs `f(j0, j1)` over column ranges covering `0..n`, spread over the pool.
pub(crate) fn for_cols(n: usize, m: usize, f: &(dyn Fn(usize, usize) + Sync)) {
    let c = cols_per_task(n, m);
    pool::run(n.div_ceil(c), &|t| f(t * c, ((t + 1) * c).min(n)));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block's rows split in two keep their order, and a full set takes no more.
    #[test]
    fn block_rows_keep_their_order_up_to_a_block() {
        let (even, mut odd): (BlockRows, BlockRows) = (0..ROW_BLOCK).partition(|r| r % 2 == 0);
        assert_eq!(&even[..], &(0..ROW_BLOCK).step_by(2).collect::<Vec<_>>()[..]);
        odd.extend(even[..4].iter().copied());
        assert_eq!(odd.len(), ROW_BLOCK / 2 + 4);
        assert_eq!(&odd[ROW_BLOCK / 2..], &[0, 2, 4, 6]);
        let full: BlockRows = (0..ROW_BLOCK + 5).collect();
        assert_eq!(&full[..], &(0..ROW_BLOCK).collect::<Vec<_>>()[..]);
    }
}
