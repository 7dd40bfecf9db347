//! LFM2-VL fixtures: a random-weight `mmproj` (`general.architecture = clip`,
//! `clip.projector_type = lfm2`: a small SigLIP2-style ViT, pixel-unshuffle ×2, optional
//! `mm.input_norm`, the two-layer `mm.1` / `mm.2` projector) and the LFM2 text model it pairs
//! with (LFM2's chat template and a vocabulary with LFM2-VL's image tokens, `build_vl`).
//! Keys and tensor names are llama.cpp's (`tools/mtmd/clip-impl.h`, case `PROJECTOR_TYPE_LFM2`
//! in `clip.cpp`), so llama-server `--mmproj` loads the same files as Wick.
//!
//! Weights are N(0, 1/√n_in), so activations keep unit scale through the blocks and the
//! projected image embeddings sit in the range of the token embeddings: different images
//! give clearly different answers. As llama.cpp's converter does for real projectors, the
//! patch embedding stays F16 (F32 in the F32 file), the position embedding, norms and biases
//! F32; only the 2-D matrices take the file's type.

use std::path::{Path, PathBuf};

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use wick_core::error::Result;

use super::build::{refs, write_fixture, Gaussian};
use super::gguf_write::{io_err, write_gguf, Meta};
use super::tool_vocab::ToolVocab;
use crate::{tool_spec, FixtureSpec};

/// One projector file.
#[derive(Clone, Debug)]
pub struct VisionSpec {
    pub file_name: String,
    /// Type of the 2-D weight matrices (F32, F16 or Q8_0).
    pub dtype: GgmlDType,
    /// ViT width, depth, heads and MLP width.
    pub d: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub ff: usize,
    /// Projector hidden width (`mm.1` output).
    pub proj_hidden: usize,
    /// Text model width (`mm.2` output, `clip.vision.projection_dim`).
    pub n_embd_text: usize,
    /// Write `mm.input_norm.{weight,bias}` (optional since llama.cpp b7629).
    pub input_norm: bool,
    pub seed: u64,
}

pub const VISION_PATCH: usize = 16;
/// Learned position embeddings form a 16×16 grid (`clip.vision.image_size` = 256).
pub const VISION_IMAGE_SIZE: usize = 256;
pub const VISION_MERGE: usize = 2;

/// The projectors: F32, F16 and Q8_0 with the input norm, and a Q8_0 without it.
pub fn vision_specs() -> Vec<VisionSpec> {
    let base = |tag: &str, dtype, input_norm| VisionSpec {
        file_name: format!("mmproj-tiny-lfm2-vl-{tag}.gguf"),
        dtype,
        d: 64,
        n_layer: 2,
        n_head: 4,
        ff: 128,
        proj_hidden: 128,
        n_embd_text: 64,
        input_norm,
        seed: 80,
    };
    vec![
        base("f32", GgmlDType::F32, true),
        base("f16", GgmlDType::F16, true),
        base("q8_0", GgmlDType::Q8_0, true),
        base("nonorm-q8_0", GgmlDType::Q8_0, false),
    ]
}

/// Benchmark-sized projectors with LFM2-VL-450M's shapes (SigLIP2 base: width 768, 12
/// layers, 12 heads, MLP 3072; projector hidden 2560) for the LFM2-350M-shaped bench text
/// models (width 1024), in F16 and Q8_0 (the types LiquidAI's mmproj files ship).
pub fn bench_vision_specs() -> Vec<VisionSpec> {
    [(GgmlDType::F16, "f16"), (GgmlDType::Q8_0, "q8_0")]
        .into_iter()
        .map(|(dtype, tag)| VisionSpec {
            file_name: format!("bench-mmproj-lfm2-vl-450m-{tag}.gguf"),
            dtype,
            d: 768,
            n_layer: 12,
            n_head: 12,
            ff: 3072,
            proj_hidden: 2560,
            n_embd_text: 1024,
            input_norm: true,
            seed: 81,
        })
        .collect()
}

/// Writes `specs` (projectors) into `out_dir`.
pub fn write_vision_specs(specs: &[VisionSpec], out_dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out_dir).map_err(io_err)?;
    let mut written = vec![];
    for spec in specs {
        let (meta, tensors) = build_vision(spec)?;
        let path = out_dir.join(&spec.file_name);
        write_gguf(&path, &meta, &refs(&tensors))?;
        written.push(path);
    }
    Ok(written)
}

/// The text model the projectors pair with: `tiny-lfm2-tools-q8_0`'s shape (d = 64) with the
/// LFM2-VL vocabulary.
pub fn vl_text_spec() -> FixtureSpec {
    let mut s = tool_spec();
    s.file_name = "tiny-lfm2-vl-q8_0.gguf".into();
    s.seed = 70;
    s
}

/// Writes the LFM2-VL text model and every projector of `vision_specs()` into `out_dir`.
pub fn write_vision_fixtures(out_dir: &Path, llama_src: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out_dir).map_err(io_err)?;
    let vocab = ToolVocab::build_vl(llama_src, &[])?;
    let text = vl_text_spec();
    let mut written = vec![out_dir.join(&text.file_name)];
    write_fixture(&text, &vocab.metadata(), &written[0])?;
    written.extend(write_vision_specs(&vision_specs(), out_dir)?);
    Ok(written)
}

/// The metadata and tensors of a projector, before writing.
pub fn build_vision(spec: &VisionSpec) -> Result<(Meta, Vec<(String, QTensor)>)> {
    use gguf_file::Value as V;
    let (d, ff, p) = (spec.d, spec.ff, VISION_PATCH);
    let half = |x: f32| V::Array(vec![V::F32(x); 3]);
    let meta: Meta = vec![
        ("general.architecture".into(), V::String("clip".into())),
        ("general.name".into(), V::String(spec.file_name.trim_end_matches(".gguf").into())),
        ("clip.projector_type".into(), V::String("lfm2".into())),
        ("clip.has_vision_encoder".into(), V::Bool(true)),
        ("clip.use_gelu".into(), V::Bool(true)),
        ("clip.vision.image_size".into(), V::U32(VISION_IMAGE_SIZE as u32)),
        ("clip.vision.patch_size".into(), V::U32(p as u32)),
        ("clip.vision.embedding_length".into(), V::U32(d as u32)),
        ("clip.vision.feed_forward_length".into(), V::U32(ff as u32)),
        ("clip.vision.block_count".into(), V::U32(spec.n_layer as u32)),
        ("clip.vision.attention.head_count".into(), V::U32(spec.n_head as u32)),
        ("clip.vision.attention.layer_norm_epsilon".into(), V::F32(1e-6)),
        ("clip.vision.projection_dim".into(), V::U32(spec.n_embd_text as u32)),
        ("clip.vision.image_mean".into(), half(0.5)),
        ("clip.vision.image_std".into(), half(0.5)),
        ("clip.vision.projector.scale_factor".into(), V::U32(VISION_MERGE as u32)),
    ];
    let mut rng = Gaussian::new(spec.seed);
    let mut out: Vec<(String, QTensor)> = vec![];
    let mut put = |name: &str, shape: &[usize], mean: f32, sigma: f32, dtype: GgmlDType| -> Result<()> {
        let t = rng.tensor(shape, mean, sigma)?;
        out.push((name.to_string(), QTensor::quantize(&t, dtype)?));
        Ok(())
    };
    let wt = spec.dtype;
    let patch_dt = if wt == GgmlDType::F32 { GgmlDType::F32 } else { GgmlDType::F16 };
    let f32 = GgmlDType::F32;
    let inv = |n: usize| 1.0 / (n as f32).sqrt();
    // Candle shapes (ggml dims reversed): the conv kernel is ggml {16, 16, 3, D}.
    put("v.patch_embd.weight", &[d, 3, p, p], 0.0, inv(3 * p * p), patch_dt)?;
    put("v.patch_embd.bias", &[d], 0.0, 0.1, f32)?;
    let n_pos = (VISION_IMAGE_SIZE / p) * (VISION_IMAGE_SIZE / p);
    put("v.position_embd.weight", &[n_pos, d], 0.0, 0.5, f32)?;
    for il in 0..spec.n_layer {
        let b = format!("v.blk.{il}");
        for t in ["attn_q", "attn_k", "attn_v", "attn_out"] {
            put(&format!("{b}.{t}.weight"), &[d, d], 0.0, inv(d), wt)?;
            put(&format!("{b}.{t}.bias"), &[d], 0.0, 0.1, f32)?;
        }
        for ln in ["ln1", "ln2"] {
            put(&format!("{b}.{ln}.weight"), &[d], 1.0, 0.1, f32)?;
            put(&format!("{b}.{ln}.bias"), &[d], 0.0, 0.1, f32)?;
        }
        put(&format!("{b}.ffn_up.weight"), &[ff, d], 0.0, inv(d), wt)?;
        put(&format!("{b}.ffn_up.bias"), &[ff], 0.0, 0.1, f32)?;
        put(&format!("{b}.ffn_down.weight"), &[d, ff], 0.0, inv(ff), wt)?;
        put(&format!("{b}.ffn_down.bias"), &[d], 0.0, 0.1, f32)?;
    }
    put("v.post_ln.weight", &[d], 1.0, 0.1, f32)?;
    put("v.post_ln.bias", &[d], 0.0, 0.1, f32)?;
    let merged = d * VISION_MERGE * VISION_MERGE;
    if spec.input_norm {
        put("mm.input_norm.weight", &[merged], 1.0, 0.1, f32)?;
        put("mm.input_norm.bias", &[merged], 0.0, 0.1, f32)?;
    }
    put("mm.1.weight", &[spec.proj_hidden, merged], 0.0, inv(merged), wt)?;
    put("mm.1.bias", &[spec.proj_hidden], 0.0, 0.1, f32)?;
    put("mm.2.weight", &[spec.n_embd_text, spec.proj_hidden], 0.0, inv(spec.proj_hidden), wt)?;
    put("mm.2.bias", &[spec.n_embd_text], 0.0, 0.1, f32)?;
    Ok((meta, out))
}

/// A deterministic colour pattern of `w × h` pixels (the vision tests' and bench's images):
/// smooth ramps with a product term, so tiles and resizes differ visibly, varied by `seed`.
pub fn pattern(w: usize, h: usize, seed: usize) -> wick_core::models::vision::Rgb8 {
    let mut data = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            data.extend([
                ((x * 7 + y * 3 + seed * 40) % 256) as u8,
                ((x * y / 7 + seed) % 256) as u8,
                (255 + y as i64 - 2 * x as i64).rem_euclid(256) as u8,
            ]);
        }
    }
    wick_core::models::vision::Rgb8 { width: w, height: h, data }
}
