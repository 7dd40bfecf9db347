//! Embeddings and ranking scores from a model's final hidden states, made as llama.cpp makes
//! them: pooling (`build_pooling`: none, mean, cls, last, and rank with its classifier head),
//! the sentence-transformers dense layers after it (`build_dense_out`: ColBERT's `dense_2`),
//! and the server's normalisation (`common_embd_normalize`). Runs on the host: the heads are
//! one small matrix at most, per sequence.

use std::str::FromStr;

use candle_core::{Device, Tensor};

use crate::error::{Result, WickError};
use crate::gguf::GgufFile;
use crate::kernels::RowPos;
use crate::models::layers::Linear;
use crate::runtime::device::Placement;

/// How a sequence's hidden states become its embedding (llama.cpp's `pooling_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// One vector per token (ColBERT's late interaction).
    None,
    Mean,
    /// The first token's.
    Cls,
    /// The last token's.
    Last,
    /// A relevance score from the classifier head (cross-encoder rerankers).
    Rank,
}

impl Pooling {
    pub const NAMES: [&'static str; 5] = ["none", "mean", "cls", "last", "rank"];

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// `{arch}.pooling_type` as llama.cpp numbers it (-1: unspecified).
    fn from_gguf(v: i64) -> Result<Option<Self>> {
        Ok(Some(match v {
            -1 => return Ok(None),
            0 => Self::None,
            1 => Self::Mean,
            2 => Self::Cls,
            3 => Self::Last,
            4 => Self::Rank,
            _ => {
                return Err(WickError::load(format!("pooling_type {v} is not one llama.cpp knows (-1..=4)")))
            }
        }))
    }
}

impl FromStr for Pooling {
    type Err = WickError;
    fn from_str(s: &str) -> Result<Self> {
        const ALL: [Pooling; 5] = [Pooling::None, Pooling::Mean, Pooling::Cls, Pooling::Last, Pooling::Rank];
        ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            WickError::InvalidRequest(format!("pooling `{s}`: expected one of {}", Self::NAMES.join(", ")))
        })
    }
}

/// What an embedding request asks of the engine.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbedOptions {
    /// None: the model's own (`EmbedHead::pooling`).
    pub pooling: Option<Pooling>,
    /// llama.cpp's `embd_normalize`: -1 none, 0 max-abs scaled to int16's range, 2 Euclidean
    /// (llama-server's and Ollama's default), any other p > 0 the p-norm. Pooled vectors only:
    /// per-token vectors and rank scores come as the model makes them, as llama-server's.
    pub normalize: i32,
}

impl Default for EmbedOptions {
    fn default() -> Self {
        Self { pooling: None, normalize: 2 }
    }
}

/// A dense layer `y = W·x (+ b)` on the exact CPU kernels, so each product rounds as ggml's
/// `mul_mat` does for the weight's type (the input quantized to the weight's dot type).
struct Dense {
    linear: Linear,
    n_out: usize,
}

impl Dense {
    fn load(g: &GgufFile, name: &str, n_in: usize) -> Result<Option<Self>> {
        let weight = format!("{name}.weight");
        let Some(info) = g.info(&weight) else { return Ok(None) };
        let n_out = match info.dims[..] {
            [i, o] if i == n_in => o,
            _ => {
                return Err(WickError::load(format!(
                    "`{weight}` has dims {:?}, expected [{n_in}, outputs]",
                    info.dims
                )))
            }
        };
        let linear = Linear::load(g, name, n_in, n_out, &Placement::for_device(&Device::Cpu))?;
        Ok(Some(Self { linear, n_out }))
    }

    /// `rows` inputs of one sequence (`rows × n_in`), each row placed as llama.cpp's batch
    /// places it (its kernel choice).
    fn apply(&self, x: &[f32], rows: usize) -> Result<Vec<f32>> {
        let pos: Vec<RowPos> = match rows {
            1 => vec![RowPos::SINGLE],
            n => (0..n).map(|idx| RowPos { seq_len: n as u32, idx: idx as u32 }).collect(),
        };
        let x = Tensor::from_slice(x, (rows, x.len() / rows), &Device::Cpu)?;
        Ok(self.linear.forward(&x, &pos)?.flatten_all()?.to_vec1::<f32>()?)
    }
}

/// What a model's GGUF says about its embeddings: pooling, heads, output width.
pub struct EmbedHead {
    /// `{arch}.pooling_type`, when the file sets one.
    pub pooling: Option<Pooling>,
    /// The model attends causally (`Model::causal`).
    pub causal: bool,
    /// Width of the hidden states.
    pub n_embd: usize,
    /// Width of an embedding: `{arch}.embedding_length_out` (the last dense layer's).
    pub n_out: usize,
    /// `dense_2` then `dense_3` (sentence-transformers' Dense modules, after pooling).
    dense: Vec<Dense>,
    /// The rank head: `cls` (then tanh) and `cls.output`.
    cls: Option<Dense>,
    cls_out: Option<Dense>,
    /// Qwen3 rerankers: the last token is ranked and the scores go through a softmax.
    qwen3: bool,
    /// `{arch}.classifier.output_labels`.
    pub labels: Vec<String>,
}

impl EmbedHead {
    pub fn load(g: &GgufFile, n_embd: usize, causal: bool) -> Result<Self> {
        let arch = g.architecture()?;
        let key = |k: &str| format!("{arch}.{k}");
        let pooling =
            match g.metadata.get(&key("pooling_type")) {
                None => None,
                Some(v) => Pooling::from_gguf(v.as_i64().ok_or_else(|| {
                    WickError::load(format!("`{}` is not an integer", key("pooling_type")))
                })?)?,
            };
        let mut dense = vec![];
        let mut width = n_embd;
        for name in ["dense_2", "dense_3"] {
            if let Some(d) = Dense::load(g, name, width)? {
                width = d.n_out;
                dense.push(d);
            }
        }
        if let Some(out) = g.metadata.opt_usize(&key("embedding_length_out"))? {
            if out != width {
                return Err(WickError::load(format!(
                    "{} is {out}, the dense layers give {width}",
                    key("embedding_length_out")
                )));
            }
        }
        let cls = Dense::load(g, "cls", n_embd)?;
        let cls_out = Dense::load(g, "cls.output", cls.as_ref().map_or(n_embd, |c| c.n_out))?;
        let labels = match g.metadata.opt_array(&key("classifier.output_labels"))? {
            Some(a) => a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect(),
            None => vec![],
        };
        Ok(Self {
            pooling,
            causal,
            n_embd,
            n_out: width,
            dense,
            cls,
            cls_out,
            qwen3: arch == "qwen3",
            labels,
        })
    }

    /// The pooling an embedding request gets when it names none: the model's; else, for a
    /// model made for embeddings, none (per-token vectors, as llama.cpp gives a ColBERT model);
    /// else mean (a generative model's hidden states averaged, sentence-transformers' default).
    pub fn default_pooling(&self) -> Pooling {
        match (self.pooling, self.embedding_only()) {
            (Some(p), _) => p,
            (None, true) => Pooling::None,
            (None, false) => Pooling::Mean,
        }
    }

    /// The model is made for embeddings or ranking (its file sets a pooling type, or it is
    /// bidirectional, or it carries embedding heads): it does not generate text.
    pub fn embedding_only(&self) -> bool {
        self.pooling.is_some() || !self.causal || !self.dense.is_empty() || self.cls_out.is_some()
    }

    /// Rank pooling needs a classifier head.
    pub fn check(&self, pooling: Pooling) -> Result<()> {
        if pooling == Pooling::Rank && self.cls.is_none() && self.cls_out.is_none() {
            return Err(WickError::InvalidRequest(
                "rank pooling needs a classifier head (cls.output), and this model has none".into(),
            ));
        }
        Ok(())
    }

    /// One sequence's embedding(s) from its final hidden states `hidden` (`rows × n_embd`):
    /// one vector, or one per token for `Pooling::None`; rank gives the classifier's scores.
    pub fn embed(&self, hidden: &[f32], opts: &EmbedOptions) -> Result<Vec<Vec<f32>>> {
        let pooling = opts.pooling.unwrap_or_else(|| self.default_pooling());
        self.check(pooling)?;
        let d = self.n_embd;
        let n = hidden.len() / d;
        if n == 0 {
            return Err(WickError::InvalidRequest("nothing to embed".into()));
        }
        let row = |i: usize| &hidden[i * d..(i + 1) * d];
        let through_dense = |v: Vec<f32>, rows: usize| -> Result<Vec<f32>> {
            self.dense.iter().try_fold(v, |v, l| l.apply(&v, rows))
        };
        let pooled = match pooling {
            Pooling::None => {
                let all = through_dense(hidden[..n * d].to_vec(), n)?;
                return Ok(all.chunks_exact(self.n_out).map(<[f32]>::to_vec).collect());
            }
            Pooling::Mean => {
                (0..d).map(|i| ((0..n).map(|t| row(t)[i] as f64).sum::<f64>() / n as f64) as f32).collect()
            }
            Pooling::Cls => row(0).to_vec(),
            Pooling::Last => row(n - 1).to_vec(),
            Pooling::Rank => self.rank(row(if self.qwen3 { n - 1 } else { 0 }))?,
        };
        // Scores are not normalised (llama-server ranks by the raw first value).
        Ok(vec![match pooling {
            Pooling::Rank => pooled,
            _ => normalize(&through_dense(pooled, 1)?, opts.normalize),
        }])
    }

    /// The classifier head on the ranked token's hidden state (llama.cpp: `cls` then tanh,
    /// `cls.output`, a softmax for Qwen3 rerankers).
    fn rank(&self, h: &[f32]) -> Result<Vec<f32>> {
        let mut v = h.to_vec();
        if let Some(c) = &self.cls {
            v = c.apply(&v, 1)?.into_iter().map(f32::tanh).collect();
        }
        if let Some(c) = &self.cls_out {
            v = c.apply(&v, 1)?;
        }
        if self.qwen3 {
            let max = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let e: Vec<f64> = v.iter().map(|&x| ((x - max) as f64).exp()).collect();
            let sum: f64 = e.iter().sum();
            v = e.iter().map(|&x| (x / sum) as f32).collect();
        }
        Ok(v)
    }
}

/// llama.cpp's `common_embd_normalize`.
pub fn normalize(v: &[f32], mode: i32) -> Vec<f32> {
    let sum: f64 = match mode {
        m if m < 0 => 1.0,
        0 => v.iter().fold(0f64, |m, &x| m.max(x.abs() as f64)) / 32760.0,
        2 => v.iter().map(|&x| (x * x) as f64).sum::<f64>().sqrt(),
        p => v.iter().map(|&x| (x.abs() as f64).powi(p)).sum::<f64>().powf(1.0 / p as f64),
    };
    let norm = if sum > 0.0 { (1.0 / sum) as f32 } else { 0.0 };
    v.iter().map(|&x| x * norm).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisations_follow_llama_cpp() {
        let v = [3.0f32, -4.0];
        assert_eq!(normalize(&v, -1), v.to_vec());
        assert_eq!(normalize(&v, 2), vec![0.6, -0.8]);
        // Scaled by the f32 of 1/norm, as llama.cpp does (not divided).
        let inv = (1.0f64 / 7.0) as f32;
        assert_eq!(normalize(&v, 1), vec![3.0 * inv, -4.0 * inv]);
        let m = normalize(&v, 0);
        assert!((m[1] + 32760.0).abs() < 1e-2, "{m:?}");
        assert_eq!(normalize(&[0.0, 0.0], 2), vec![0.0, 0.0]);
    }

    #[test]
    fn pooling_names_round_trip() {
        for n in Pooling::NAMES {
            assert_eq!(n.parse::<Pooling>().unwrap().name(), n);
        }
        assert!("max".parse::<Pooling>().is_err());
        assert_eq!(Pooling::from_gguf(-1).unwrap(), None);
        assert_eq!(Pooling::from_gguf(2).unwrap(), Some(Pooling::Cls));
        assert!(Pooling::from_gguf(9).is_err());
    }
}
