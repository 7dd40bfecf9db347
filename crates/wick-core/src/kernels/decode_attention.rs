//! Attention of query rows read straight from the paged f16 KV cache, each row as a one-token
//! decode computes it — a step's decodes, or a prompt's rows at their causal lengths — one op
//! per layer (the composed candle path takes about fourteen launches and three copies of every
//! key and value read). Its CUDA kernel (`cuda/decode_attention.cu`, `cuda` feature) and host twin
//! (`cuda/attention_twin.c`, Linux builds: cfg `wick_qmv_twin`) give the same bits, so candle's
//! CPU device runs the GPU's arithmetic: the query rounded to f16, f32 scores times the scale,
//! softmax with ggml's `expf`, each probability rounded to f16, Σ p·v in f32 — as ggml's CPU
//! backend rounds with flash attention off; only the order of the sums differs from it.

use candle_core::{CpuStorage, CustomOp3, DType, Layout, Shape, Storage, Tensor};

use crate::error::{Result, WickError};
use crate::runtime::pool::{self, SyncPtr};

/// Threads of a block (the kernel's and the twin's: the order of the sums follows it).
pub const THREADS: usize = 128;

/// Whether this build runs the op on `device`.
pub fn available(device: &candle_core::Device) -> bool {
    super::twinned_on(device)
}

/// Which slots each query row reads: row b reads `lens[b]` positions (u32 `[B]`; the last
/// `window` of them when there is one) of its row of `reads` (u32, `t_pad` slots a row: a
/// sequence's slot of each position) — row b, or the one row all share (`one_sequence`: a
/// prompt's rows).
pub struct Reads<'a> {
    pub reads: &'a Tensor,
    pub lens: &'a Tensor,
    pub t_pad: usize,
    pub one_sequence: bool,
}

/// `q` `[B, n_head · hd]` (or `[B, n_head, hd]`) f32 against a layer's pages `kc`/`vc`
/// `[slots, n_kv, hd]` f16, each row reading the slots `at` says, as a one-token decode would.
/// Returns `[B, n_head · hd]` f32.
pub fn decode_attention(
    q: &Tensor,
    (kc, vc): (&Tensor, &Tensor),
    at: &Reads<'_>,
    window: Option<usize>,
    scale: f32,
) -> Result<Tensor> {
    let Reads { reads, lens, t_pad, one_sequence } = *at;
    let (slots, n_kv, hd) = kc.dims3()?;
    // `[B, n_head, hd]` as the model holds it, or already `[B, n_head · hd]`.
    let q = q.flatten_from(1)?;
    let (b, width) = q.dims2()?;
    let shapes_ok = n_kv > 0
        && hd > 0
        && width.is_multiple_of(n_kv * hd)
        && width / (n_kv * hd) <= THREADS
        && vc.dims() == kc.dims()
        && t_pad > 0
        && reads.elem_count() == if one_sequence { t_pad } else { b * t_pad }
        && lens.elem_count() == b
        && (kc.dtype(), vc.dtype(), q.dtype()) == (DType::F16, DType::F16, DType::F32);
    if !shapes_ok {
        return Err(WickError::Internal(format!(
            "decode attention: q [{b}, {width}], cache {:?} and {:?} ({slots} slots), {} slots for {b}×{t_pad}, {} lengths",
            kc.dims(),
            vc.dims(),
            reads.elem_count(),
            lens.elem_count()
        )));
    }
    let op = Attend {
        reads: reads.contiguous()?,
        lens: lens.contiguous()?,
        t_pad,
        reads_stride: if one_sequence { 0 } else { t_pad },
        window: window.unwrap_or(0),
        scale,
        group: width / (n_kv * hd),
    };
    Ok(q.contiguous()?.apply_op3_no_bwd(&kc.contiguous()?, &vc.contiguous()?, &op)?)
}

/// The op's tables and settings.
struct Attend {
    reads: Tensor,
    lens: Tensor,
    t_pad: usize,
    /// Slots between query rows' rows of `reads`: `t_pad`, or 0 when all read one.
    reads_stride: usize,
    /// 0: no window.
    window: usize,
    scale: f32,
    /// Query heads per KV head.
    group: usize,
}

/// A u32 table's host values (the op's tables on candle's CPU device).
fn host_u32(t: &Tensor) -> candle_core::Result<Vec<u32>> {
    let (storage, layout) = t.storage_and_layout();
    match (&*storage, layout.contiguous_offsets()) {
        (Storage::Cpu(CpuStorage::U32(v)), Some((a, b))) => Ok(v[a..b].to_vec()),
        _ => candle_core::bail!("decode attention: slot tables must be contiguous u32 on the CPU"),
    }
}

impl CustomOp3 for Attend {
    fn name(&self) -> &'static str {
        "wick-decode-attention"
    }

    fn cpu_fwd(
        &self,
        q: &CpuStorage,
        ql: &Layout,
        k: &CpuStorage,
        kl: &Layout,
        v: &CpuStorage,
        vl: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (b, width) = ql.shape().dims2()?;
        let (slots, n_kv, hd) = kl.shape().dims3()?;
        let (reads, lens) = (host_u32(&self.reads)?, host_u32(&self.lens)?);
        let range =
            |l: &Layout| l.contiguous_offsets().ok_or_else(|| candle_core::Error::msg("not contiguous"));
        let (q, k, v) = match (q, k, v) {
            (CpuStorage::F32(q), CpuStorage::F16(k), CpuStorage::F16(v)) => {
                let ((qa, qb), (ka, kb), (va, vb)) = (range(ql)?, range(kl)?, range(vl)?);
                (&q[qa..qb], &k[ka..kb], &v[va..vb])
            }
            _ => candle_core::bail!("decode attention: f32 queries, f16 pages"),
        };
        // Every slot read lies in the pages, every length within the padding: the C trusts it.
        if reads.iter().any(|&s| s as usize >= slots) || lens.iter().any(|&l| l as usize > self.t_pad) {
            candle_core::bail!("decode attention: a slot past the pages or a length past the padding")
        }
        let mut out = vec![0f32; b * width];
        let op = twin::Step { q, k, v, reads: &reads, lens: &lens, n_kv, hd, attend: self };
        twin::run(&op, b, &mut out).map_err(candle_core::Error::msg)?;
        Ok((CpuStorage::F32(out), Shape::from((b, width))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        q: &candle_core::CudaStorage,
        ql: &Layout,
        k: &candle_core::CudaStorage,
        kl: &Layout,
        v: &candle_core::CudaStorage,
        vl: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let launch = super::cuda::Attend {
            reads: &self.reads,
            lens: &self.lens,
            t_pad: self.t_pad,
            reads_stride: self.reads_stride,
            window: self.window,
            scale: self.scale,
            group: self.group,
            threads: THREADS,
        };
        super::cuda::decode_attention(&launch, (q, ql), (k, kl), (v, vl))
    }
}

/// The host twin through its C entry point, a block (sequence, KV head) per pool task.
mod twin {
    use super::*;

    #[cfg(wick_qmv_twin)]
    extern "C" {
        fn wick_decode_attention_twin(
            q: *const f32,
            kc: *const u16,
            vc: *const u16,
            reads: *const u32,
            lens: *const u32,
            scratch: *mut f32,
            out: *mut f32,
            b: i32,
            kvh: i32,
            n_kv: i32,
            group: i32,
            hd: i32,
            t_pad: i32,
            reads_stride: i32,
            window: i32,
            scale: f32,
            threads: i32,
        ) -> i32;
    }

    /// A step's operands, checked by `cpu_fwd`.
    pub struct Step<'a> {
        pub q: &'a [f32],
        pub k: &'a [half::f16],
        pub v: &'a [half::f16],
        pub reads: &'a [u32],
        pub lens: &'a [u32],
        pub n_kv: usize,
        pub hd: usize,
        pub attend: &'a Attend,
    }

    #[cfg(wick_qmv_twin)]
    pub fn run(s: &Step<'_>, b: usize, out: &mut [f32]) -> std::result::Result<(), String> {
        let a = s.attend;
        let ints = [b, s.n_kv, a.group, s.hd, a.t_pad, a.reads_stride, a.window];
        if ints.iter().any(|&v| i32::try_from(v).is_err()) || out.len() != b * s.n_kv * a.group * s.hd {
            return Err("decode attention: sizes past the twin's".into());
        }
        let (op, failed) = (SyncPtr(out.as_mut_ptr()), std::sync::atomic::AtomicBool::new(false));
        pool::run(b * s.n_kv, &|task| {
            let (seq, kvh) = (task / s.n_kv, task % s.n_kv);
            let mut scratch = vec![0f32; a.group * a.t_pad];
            // SAFETY: the operands were checked by `cpu_fwd` (slots within the pages, lengths
            // within t_pad, q and out B·n_head·hd); this task writes only its sequence's KV
            // head's `group` rows of `out`.
            let rc = unsafe {
                wick_decode_attention_twin(
                    s.q.as_ptr(),
                    s.k.as_ptr().cast(),
                    s.v.as_ptr().cast(),
                    s.reads.as_ptr(),
                    s.lens.as_ptr(),
                    scratch.as_mut_ptr(),
                    op.get(),
                    seq as i32,
                    kvh as i32,
                    s.n_kv as i32,
                    a.group as i32,
                    s.hd as i32,
                    a.t_pad as i32,
                    a.reads_stride as i32,
                    a.window as i32,
                    a.scale,
                    THREADS as i32,
                )
            };
            if rc != 0 {
                failed.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        });
        match failed.into_inner() {
            false => Ok(()),
            true => Err("decode attention: the twin refused the shapes".into()),
        }
    }

    #[cfg(not(wick_qmv_twin))]
    pub fn run(_: &Step<'_>, _: usize, _: &mut [f32]) -> std::result::Result<(), String> {
        Err("this build has no decode-attention host twin (Linux builds only)".into())
    }
}
