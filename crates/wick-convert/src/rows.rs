//! A planned tensor's values, produced a range at a time in ggml order: read from the mmapped
//! checkpoint, rows reordered for llama's rotary layout, experts concatenated, constants
//! added. Ranges are whole rows, so any slab of rows can be made on its own (and on its own
//! thread).

use crate::arch::{Planned, Source};
use crate::error::Result;
use crate::safetensors::Checkpoint;

/// HF's rotary layout → llama.cpp's (`LlamaModel.permute`): within each head of `2·half`
/// rows, row `i·2 + j` of the output is row `j·half + i` of the input.
pub(crate) fn permuted_row(r: usize, rows: usize, n_head: usize) -> usize {
    let per_head = rows / n_head;
    let half = per_head / 2;
    let (h, rem) = (r / per_head, r % per_head);
    let (i, j) = (rem / 2, rem % 2);
    h * per_head + j * half + i
}

/// Fills `out` with elements `first..first + out.len()` of `p` (in ggml order).
pub fn fill(ck: &Checkpoint, p: &Planned, first: usize, out: &mut [f32]) -> Result<()> {
    match &p.src {
        Source::Tensor { hf, permute_heads, add } => {
            let t = &ck.tensors[hf];
            match permute_heads {
                None => ck.read_f32(t, first, out)?,
                Some(n_head) => {
                    // Items are the HF tensor's outer rows (single values for a bias).
                    let rows = t.shape[0];
                    let item = t.numel() / rows;
                    debug_assert!(first.is_multiple_of(item) && out.len().is_multiple_of(item));
                    for (k, chunk) in out.chunks_mut(item).enumerate() {
                        let r = first / item + k;
                        ck.read_f32(t, permuted_row(r, rows, *n_head) * item, chunk)?;
                    }
                }
            }
            if *add != 0.0 {
                out.iter_mut().for_each(|v| *v += add);
            }
        }
        Source::Stack(names) => {
            let per = ck.tensors[&names[0]].numel();
            let mut pos = first;
            let mut done = 0;
            while done < out.len() {
                let (e, off) = (pos / per, pos % per);
                let n = (per - off).min(out.len() - done);
                ck.read_f32(&ck.tensors[&names[e]], off, &mut out[done..done + n])?;
                done += n;
                pos += n;
            }
        }
        Source::Values(v) => out.copy_from_slice(&v[first..first + out.len()]),
    }
    Ok(())
}

/// Drops the checkpoint pages `p` was read from (see `Checkpoint::release`).
pub fn release(ck: &Checkpoint, p: &Planned) {
    match &p.src {
        Source::Tensor { hf, .. } => ck.release(&ck.tensors[hf]),
        Source::Stack(names) => names.iter().for_each(|n| ck.release(&ck.tensors[n])),
        Source::Values(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::permuted_row;

    #[test]
    fn rotary_permutation_interleaves_the_two_halves_of_each_head() {
        // One head of 8 rows: halves [0..4) and [4..8) interleave as 0,4,1,5,2,6,3,7.
        let got: Vec<usize> = (0..8).map(|r| permuted_row(r, 8, 1)).collect();
        assert_eq!(got, [0, 4, 1, 5, 2, 6, 3, 7]);
        // Two heads of 4.
        let got: Vec<usize> = (0..8).map(|r| permuted_row(r, 8, 2)).collect();
        assert_eq!(got, [0, 2, 1, 3, 4, 6, 5, 7]);
    }
}
