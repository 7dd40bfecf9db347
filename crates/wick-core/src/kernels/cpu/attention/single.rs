//! One new token per task (ggml's one-chunk path): the group's query heads against one KV
//! head, scores, softmax, then V, in `ggml_vec_dot_f16`'s order (one new token in the
//! sequence) or tinyBLAS's (several, without the AVX-512 tiles); on aarch64 as
//! `super`'s module comment says (`kq_tiled`, `p_in_f16`).

#[cfg(target_arch = "x86_64")]
use super::avx512;
use super::dots::{dot_f16_single, dot_f16_single_paged, dot_f16_tiled, dot_f16_tiled_paged};
use super::{kq_tiled, p_in_f16, round_to_f16, softmax_f16, Plan};
#[cfg(target_arch = "x86_64")]
use super::{prefetch, put_scores};
#[cfg(target_arch = "x86_64")]
use crate::cache::BLOCK_SIZE;
use crate::kernels::cpu::feats::with_avx2_codegen;
use crate::runtime::pool::SyncPtr;

/// One new token's task: its sequence `si`, token `i`, KV head `g`, the positions it attends
/// (`t_len`, rounded up to whole chunks of 16 in `padded`) and its dot orders.
#[derive(Clone, Copy)]
struct Token {
    si: usize,
    g: usize,
    t_len: usize,
    padded: usize,
    /// Several new tokens in the sequence: tinyBLAS's order (else `ggml_vec_dot_f16`'s).
    tiled: bool,
    /// One new token, AVX-512 and `hd` a multiple of 64: sixteen dots at a time.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    wide: bool,
}

impl Plan<'_, '_> {
    /// New token `i` of sequence `si` against KV head `g`: the query heads that share it
    /// (as ggml's one-chunk path: scores, softmax, then V).
    pub(super) fn one_token(&self, si: usize, i: usize, g: usize, scratch: &mut [f32], op: SyncPtr<f32>) {
        with_avx2_codegen(
            #[inline(always)]
            || {
                let seq = &self.seqs[si];
                let (q, len) = (seq.q, seq.len);
                let (hd, group, n_head) = (self.hd, self.group, self.n_head);
                let tiled = len > 1;
                #[cfg(target_arch = "x86_64")]
                let wide = !tiled && hd.is_multiple_of(64) && avx512::available();
                #[cfg(not(target_arch = "x86_64"))]
                let wide = false;
                let t_len = seq.seen(i);
                let padded = t_len.div_ceil(16) * 16;
                let tok = Token { si, g, t_len, padded, tiled, wide };
                let (q16, rest) = scratch[..group * (hd + 2 * padded)].split_at_mut(group * hd);
                let (w, p16) = rest.split_at_mut(group * padded);
                let types = seq.kv.types();
                let heads = &q[(i * n_head + g * group) * hd..][..group * hd];
                if types.k.is_quantized() {
                    w.fill(f32::NEG_INFINITY);
                    let t0 = self.window.map_or(0, |w| t_len.saturating_sub(w));
                    self.quant_scores(seq.kv, g, heads, (t0, t_len), w, padded);
                } else {
                    for (qh, qd) in heads.chunks_exact(hd).zip(q16.chunks_exact_mut(hd)) {
                        round_to_f16(qh, qd);
                    }
                    self.token_scores(tok, q16, w);
                }
                // Quantized values meet the weights as they are (f32, no f16 dot type).
                let round = p_in_f16(tiled) && !types.v.is_quantized();
                for (wh, ph) in w.chunks_exact(padded).zip(p16.chunks_exact_mut(padded)) {
                    softmax_f16(wh, ph, self.var, round);
                }
                // SAFETY: row `row0[si] + i` is within the output's `n_rows` rows of
                // `n_head · hd`; this task alone writes its heads' slices of it (the other
                // tasks of this row have other KV heads), and no one reads it during the pass.
                let orow = unsafe {
                    std::slice::from_raw_parts_mut(
                        op.get().add((self.row0[si] + i) * n_head * hd),
                        n_head * hd,
                    )
                };
                if types.v.is_quantized() {
                    self.quant_values(seq.kv, g, p16, (t_len, padded), orow);
                } else {
                    self.token_values(tok, p16, orow);
                }
            },
        )
    }

    /// `tok`'s scaled scores `q·k` into `w` (`group` rows of `padded`), those outside its
    /// window left at −∞.
    #[inline(always)]
    fn token_scores(&self, tok: Token, q16: &[f32], w: &mut [f32]) {
        let (kv, hd, g, t_len, padded) = (self.seqs[tok.si].kv, self.hd, tok.g, tok.t_len, tok.padded);
        let qs = |h: usize| &q16[h * hd..(h + 1) * hd];
        // Sliding-window layers see the last `window` positions; the others are masked to
        // -inf, i.e. they add exact zeros, as in llama.cpp's SWA mask.
        let t0 = self.window.map_or(0, |w| t_len.saturating_sub(w));
        w.fill(f32::NEG_INFINITY);
        // Sixteen positions at a time from a multiple of 16 (those before t0 stay masked).
        #[allow(unused_mut)]
        let mut t = t0 & !15;
        #[cfg(target_arch = "x86_64")]
        if tok.wide {
            // Kernel results for up to four heads, sized for `by_count!`'s widest arm (set
            // once: the kernels fill what is read).
            let mut scores = [[0f32; 16]; 6];
            // The last chunk too: its keys past `t_len` are stored (blocks are whole
            // chunks), their scores are not used, and each score is its own dot.
            while t < t_len {
                // The next sixteen keys stream in while these are used (a step's KV
                // comes from DRAM: too scattered for the hardware prefetcher).
                if t + 16 < t_len {
                    prefetch(kv.keys(g, t + 16, 16));
                }
                for (c, hs) in self.all_heads.chunks(4).enumerate() {
                    // SAFETY: `tok.wide` checked AVX-512 and that hd is a multiple of 64; t is
                    // a multiple of 16 below the stored positions (blocks are whole chunks).
                    unsafe {
                        by_count!(avx512::kq16_single, hs.len(), |k: usize| qs(hs[k]), scores, kv, g, t)
                    };
                    for (k, s) in scores.iter().take(hs.len()).enumerate() {
                        put_scores(&mut w[(4 * c + k) * padded + t..], s, t, (t0, t_len), self.scale);
                    }
                }
                t += 16;
            }
        }
        let t = t.max(t0);
        for (h, wh) in w.chunks_exact_mut(padded).enumerate() {
            for (tt, wt) in wh.iter_mut().enumerate().take(t_len).skip(t) {
                let kt = kv.key(g, tt);
                let dot = if kq_tiled(tok.tiled) && hd.is_multiple_of(16) {
                    dot_f16_tiled(kt, qs(h))
                } else {
                    dot_f16_single(kt, qs(h), hd)
                };
                *wt = dot * self.scale;
            }
        }
        #[cfg(target_arch = "x86_64")]
        if tok.wide && !kv.types().v.is_quantized() {
            for j in 0..t_len.div_ceil(BLOCK_SIZE) {
                prefetch(kv.values(g, 0, hd.min(16), j));
            }
        }
    }

    /// `tok`'s outputs `Σ p·v` of its group's heads into `orow` (the token's output row), from
    /// the weights `p16` (`group` rows of `padded`).
    #[inline(always)]
    fn token_values(&self, tok: Token, p16: &[f32], orow: &mut [f32]) {
        let (kv, hd, g, group) = (self.seqs[tok.si].kv, self.hd, tok.g, self.group);
        let (t_len, padded) = (tok.t_len, tok.padded);
        let ps = |h: usize| &p16[h * padded..h * padded + t_len];
        #[allow(unused_mut)]
        let mut d0 = 0;
        #[cfg(target_arch = "x86_64")]
        if tok.wide {
            let mut outs = [[0f32; 16]; 6];
            while d0 + 16 <= hd {
                if d0 + 32 <= hd {
                    for j in 0..t_len.div_ceil(BLOCK_SIZE) {
                        prefetch(kv.values(g, d0 + 16, 16, j));
                    }
                }
                for (c, hs) in self.all_heads.chunks(4).enumerate() {
                    // SAFETY: `tok.wide` checked AVX-512; dims d0..d0 + 16 are below hd and the
                    // view holds positions `0..t_len`.
                    unsafe {
                        by_count!(avx512::pv16_single, hs.len(), |k: usize| ps(hs[k]), outs, kv, g, d0)
                    };
                    for (k, o) in outs.iter().take(hs.len()).enumerate() {
                        let h = g * group + 4 * c + k;
                        orow[h * hd + d0..h * hd + d0 + 16].copy_from_slice(o);
                    }
                }
                d0 += 16;
            }
        }
        for (k, h) in (g * group..(g + 1) * group).enumerate() {
            for d in d0..hd {
                let run = |j: usize| kv.value_run(g, d, j);
                // The KV length ggml multiplies is padded to 256 cells: always 16-aligned.
                orow[h * hd + d] = if tok.tiled {
                    dot_f16_tiled_paged(run, ps(k))
                } else {
                    dot_f16_single_paged(run, ps(k), padded.div_ceil(64) * 64)
                };
            }
        }
    }
}
