//! LoRA adapters as llama.cpp writes and applies them: a GGUF with `general.type = adapter`,
//! `adapter.type = lora`, `adapter.lora.alpha` and, per adapted base weight `W` (`{in, out}`),
//! `W.lora_a` (`{in, r}`) and `W.lora_b` (`{r, out}`). Applied beside the base weights, never
//! merged: `y = W·x + s·B·(A·x)` (then the bias), `s = scale·alpha/r` (`scale` when alpha is
//! 0), as `build_lora_mm` computes it — so one loaded model serves many adapters, and the
//! rows of a step that use different adapters (or none) share the base matmul.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::{Device, Tensor};

use crate::error::{Result, WickError};
use crate::gguf::GgufFile;
use crate::kernels::cpu::host_f16::HostF16;
use crate::kernels::{with_host_f32, RowPos};
use crate::models::layers::{Linear, WeightDeltas};
use crate::runtime::device::Placement;
use crate::runtime::pool;

/// One adapted weight: `A` (`in → r`) and `B` (`r → out`).
struct LoraWeight {
    a: Linear,
    b: Linear,
    rank: usize,
}

/// A loaded adapter.
pub struct Adapter {
    /// Its place in the engine's list (llama-server's adapter `id`): a sequence with several
    /// adapters adds them in this order, alone or batched.
    pub id: usize,
    /// Its name (a model id for vLLM's API; the file stem by default).
    pub name: String,
    pub path: PathBuf,
    pub alpha: f32,
    weights: HashMap<String, LoraWeight>,
    /// Every weight is an F16 one kept on the host (the exact path): `LoraRows` applies
    /// them there.
    host: bool,
}

/// The base model's tensors an adapter is checked against: name → ggml dims.
pub type BaseTensors = HashMap<String, Vec<usize>>;

impl std::fmt::Debug for Adapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adapter").field("name", &self.name).field("path", &self.path).finish()
    }
}

impl Adapter {
    /// Loads `path` for a base of architecture `arch` whose tensors are `base`, on `dev`.
    pub fn load(
        path: &Path,
        id: usize,
        name: &str,
        arch: &str,
        base: &BaseTensors,
        dev: &Placement,
    ) -> Result<Self> {
        let g = GgufFile::open(path)?;
        let bad = |why: String| WickError::load(format!("LoRA adapter {}: {why}", path.display()));
        let m = &g.metadata;
        if m.opt_str("general.type")? != Some("adapter") || m.opt_str("adapter.type")? != Some("lora") {
            return Err(bad("not a LoRA adapter (general.type = adapter, adapter.type = lora)".into()));
        }
        let own = g.architecture()?;
        if own != arch {
            return Err(bad(format!("made for a `{own}` model, the loaded model is `{arch}`")));
        }
        let alpha = m.opt_f32("adapter.lora.alpha")?.unwrap_or(0.0);
        let mut weights = HashMap::new();
        let mut order = vec![];
        for t in &g.tensors {
            let Some(target) = t.name.strip_suffix(".lora_a") else {
                if !t.name.ends_with(".lora_b") {
                    return Err(bad(format!("tensor `{}` is neither a lora_a nor a lora_b", t.name)));
                }
                continue;
            };
            let b_name = format!("{target}.lora_b");
            let b_info = g.info(&b_name).ok_or_else(|| bad(format!("`{}` has no `{b_name}`", t.name)))?;
            if target.contains("_exps") || target.contains("ffn_gate_inp") || target == "token_embd.weight" {
                return Err(bad(format!(
                    "`{target}`: LoRA on experts, routers and embeddings is not supported"
                )));
            }
            let dims = base.get(target).ok_or_else(|| {
                bad(format!("the base model has no tensor `{target}` (an adapter for another base model?)"))
            })?;
            let (&[n_in, rank], &[b_rank, n_out], &[w_in, w_out]) =
                (&t.dims[..], &b_info.dims[..], &dims[..])
            else {
                return Err(bad(format!("`{target}`: lora_a, lora_b and the base weight must be matrices")));
            };
            if (n_in, n_out) != (w_in, w_out) || rank != b_rank || rank == 0 {
                return Err(bad(format!(
                    "`{target}` is {w_in}→{w_out}, the adapter has lora_a {n_in}→{rank} and lora_b {b_rank}→{n_out} (another base model?)"
                )));
            }
            // Beside its base weight (a split model's first blocks on the host).
            let dev = &dev.of_tensor(target);
            let a = Linear::load_weight(&g, &t.name, n_in, rank, dev)?;
            let b = Linear::load_weight(&g, &b_name, rank, n_out, dev)?;
            weights.insert(target.to_string(), LoraWeight { a, b, rank });
            order.push(target.to_string());
        }
        if weights.is_empty() {
            return Err(bad("it adapts no tensor".into()));
        }
        let host = weights.values().all(|w| w.a.host_f16().is_some() && w.b.host_f16().is_some());
        if host {
            // End to end in the order a step reads them: each target's A, then its B.
            let mut by_name: HashMap<&str, &mut LoraWeight> =
                weights.iter_mut().map(|(k, v)| (k.as_str(), v)).collect();
            let mut held: Vec<&mut HostF16> = vec![];
            for name in &order {
                if let Some(w) = by_name.remove(name.as_str()) {
                    held.extend([w.a.host_f16_mut(), w.b.host_f16_mut()].into_iter().flatten());
                }
            }
            HostF16::gather(&mut held);
        }
        Ok(Self { id, name: name.to_string(), path: path.to_path_buf(), alpha, weights, host })
    }

    /// Base weights this adapter changes.
    pub fn n_targets(&self) -> usize {
        self.weights.len()
    }

    /// `build_lora_mm`'s scale for `w` at the request's `scale`.
    fn scale(&self, w: &LoraWeight, scale: f32) -> f32 {
        if self.alpha != 0.0 {
            scale * self.alpha / w.rank as f32
        } else {
            scale
        }
    }
}

/// The adapters one sequence runs with, each at its scale, in id order (scale 0 entries dropped).
pub type LoraMix = Vec<(Arc<Adapter>, f32)>;

/// One step's LoRA work over a set of rows (all the step's, or those read out): per (adapter,
/// scale), the rows that use it.
pub struct LoraRows {
    groups: Vec<Group>,
}

/// A group's adapter, scale, rows and their places while a step's rows are gathered.
type Gathered<'a> = (&'a Arc<Adapter>, f32, Vec<u32>, Vec<RowPos>);

struct Group {
    adapter: Arc<Adapter>,
    scale: f32,
    rows: Vec<u32>,
    idx: Tensor,
    pos: Vec<RowPos>,
}

impl LoraRows {
    /// `rows[i]` = (the sequence of row i, its `RowPos`); `mixes[s]` = sequence s's adapters.
    /// None when no row uses one.
    pub fn new(rows: &[(usize, RowPos)], mixes: &[Option<&LoraMix>], dev: &Device) -> Result<Option<Self>> {
        // Per (adapter, scale): its rows and their places.
        let mut found: Vec<Gathered<'_>> = vec![];
        for (r, &(s, pos)) in rows.iter().enumerate() {
            for (adapter, scale) in mixes.get(s).copied().flatten().into_iter().flatten() {
                let at = found.iter().position(|g| Arc::ptr_eq(g.0, adapter) && g.1 == *scale);
                let i = at.unwrap_or_else(|| {
                    found.push((adapter, *scale, vec![], vec![]));
                    found.len() - 1
                });
                found[i].2.push(r as u32);
                found[i].3.push(pos);
            }
        }
        if found.is_empty() {
            return Ok(None);
        }
        // Adapters added in id order on every row, whatever else shares the step.
        found.sort_by_key(|g| (g.0.id, g.1.to_bits()));
        let groups = found
            .into_iter()
            .map(|(adapter, scale, idx, pos)| {
                let n = idx.len();
                Ok(Group {
                    adapter: adapter.clone(),
                    scale,
                    idx: Tensor::from_vec(idx.clone(), n, dev)?,
                    rows: idx,
                    pos,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Some(Self { groups }))
    }
}

impl WeightDeltas for LoraRows {
    /// `y` (`W·x` of base weight `name`, before any bias) plus each adapter's `s·B·(A·x)` on
    /// its rows.
    fn add(&self, name: &str, x: &Tensor, mut y: Tensor) -> Result<Tensor> {
        if x.device().is_cpu() && self.on_host() {
            let mut yv = y.flatten_all()?.to_vec1::<f32>()?;
            with_host_f32(x, |xs| self.add_in_place(name, xs, &mut yv))??;
            return Ok(Tensor::from_vec(yv, y.dims(), y.device())?);
        }
        for g in &self.groups {
            let Some(w) = g.adapter.weights.get(name) else { continue };
            let xs = x.index_select(&g.idx, 0)?;
            let ab = w.b.forward(&w.a.forward(&xs, &g.pos)?, &g.pos)?;
            let ab = (ab * g.adapter.scale(w, g.scale) as f64)?;
            y = y.index_add(&g.idx, &ab, 0)?;
        }
        Ok(y)
    }

    /// On the exact path: the adapters' F16 weights kept on the host, each group's rows
    /// through A and B there — the groups spread over the pool when there are as many as
    /// threads (a row's result does not depend on the rows beside it) — then added into `y` in
    /// group order with the same operations as the tensor path (`s·B·(A·x)` as `u·s + 0`, as
    /// candle's affine computes it, then the add).
    fn add_in_place(&self, name: &str, xs: &[f32], y: &mut [f32]) -> Result<bool> {
        if !self.on_host() {
            return Ok(false);
        }
        // Per adapted group: its A, B and scale.
        let mut work: Vec<(&Group, &HostF16, &HostF16, f32)> = vec![];
        for g in &self.groups {
            let Some(w) = g.adapter.weights.get(name) else { continue };
            let (Some(a), Some(b)) = (w.a.host_f16(), w.b.host_f16()) else {
                return Err(WickError::Internal(format!("LoRA `{name}`: weights not on the host")));
            };
            work.push((g, a, b, g.adapter.scale(w, g.scale)));
        }
        let Some(&(_, a0, b0, _)) = work.first() else { return Ok(true) };
        let (k, n) = (a0.dims().1, b0.dims().0);
        let m = y.len() / n.max(1);
        if xs.len() != m * k || y.len() != m * n {
            return Err(WickError::Internal(format!(
                "LoRA `{name}`: {} inputs and {} outputs for {m} rows of {k} → {n}",
                xs.len(),
                y.len()
            )));
        }
        let outs: Vec<std::sync::Mutex<Vec<f32>>> = work.iter().map(|_| Default::default()).collect();
        // The rows as A reads them, prepared once for all groups.
        let x16 = HostF16::prepare(xs);
        let run = |t: usize| {
            let (g, a, b, _) = work[t];
            let mut xg = Vec::with_capacity(g.rows.len() * k);
            for &r in &g.rows {
                xg.extend_from_slice(&x16[r as usize * k..(r as usize + 1) * k]);
            }
            let u = b.matmul_host(&a.matmul_prepared(&xg, &g.pos), &g.pos);
            *outs[t].lock().unwrap_or_else(|e| e.into_inner()) = u;
        };
        // Fewer groups than threads: one at a time, each product's columns over the pool.
        match work.len() >= pool::global().threads() {
            true => pool::run(work.len(), &run),
            false => (0..work.len()).for_each(run),
        }
        // In group (id) order: a row with several adapters adds them as it would alone.
        for (&(g, _, _, s), u) in work.iter().zip(outs) {
            let u = u.into_inner().unwrap_or_else(|e| e.into_inner());
            for (ur, &r) in u.chunks_exact(n).zip(&g.rows) {
                for (yj, &uj) in y[r as usize * n..(r as usize + 1) * n].iter_mut().zip(ur) {
                    *yj += uj * s + 0.0;
                }
            }
        }
        Ok(true)
    }
}

impl LoraRows {
    /// Every group's adapter is held on the host (`Adapter::host`).
    fn on_host(&self) -> bool {
        self.groups.iter().all(|g| g.adapter.host)
    }
}
