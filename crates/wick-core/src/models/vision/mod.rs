//! Vision: LFM2-VL's projector file (`mmproj`, `general.architecture = clip`,
//! `clip.projector_type = lfm2`): the SigLIP2 tower (`siglip2.rs`), the pixel-unshuffle MLP
//! projector (`lfm2_vl.rs`), llama.cpp's preprocessing plan (`preprocess.rs`), and the
//! image's place in a prompt (`layout`). Numeric code is in `kernels::cpu::{vit, image}` on
//! the exact path, and in `device.rs` (candle's device-generic ops) on the device path.

mod device;
mod lfm2_vl;
pub mod preprocess;
mod siglip2;

use std::path::Path;

use candle_core::{DType, Tensor};

use crate::error::{Result, WickError};
use crate::gguf::GgufFile;
use crate::runtime::device::Placement;
use crate::tokenizer::Tokenizer;

pub use crate::kernels::cpu::image::{Rgb8, RgbView};
pub use preprocess::{ImagePlan, PreprocessConfig};

/// Settings of a loaded projector (llama.cpp's `--image-min-tokens` / `--image-max-tokens`).
#[derive(Debug, Clone, Copy, Default)]
pub struct VisionOptions {
    pub image_min_tokens: Option<usize>,
    pub image_max_tokens: Option<usize>,
}

pub struct VisionModel {
    pub cfg: PreprocessConfig,
    path: Encoders,
    patch: usize,
    n_embd: usize,
    pub file_size: usize,
}

/// The tower and projector on the path the placement picks.
enum Encoders {
    Exact(siglip2::Siglip2, lfm2_vl::Projector),
    Device(device::Tower, device::Projector),
}

/// Output width of the matmul `name` (`{name}.weight` of dims `{in, out}`).
fn out_width(g: &GgufFile, name: &str) -> Result<usize> {
    let w = format!("{name}.weight");
    let info = g.info(&w).ok_or_else(|| WickError::load(format!("missing tensor `{w}`")))?;
    info.dims.get(1).copied().ok_or_else(|| WickError::load(format!("`{w}` has dims {:?}", info.dims)))
}

impl VisionModel {
    /// On the exact CPU path.
    pub fn load(path: &Path, opts: VisionOptions) -> Result<Self> {
        Self::load_on(path, opts, &Placement::cpu())
    }

    /// On `placement`: Wick's exact CPU kernels, or the device path on its device.
    pub fn load_on(path: &Path, opts: VisionOptions, placement: &Placement) -> Result<Self> {
        let g = GgufFile::open(path)?;
        let arch = g.architecture().unwrap_or("");
        if arch != "clip" {
            return Err(WickError::load(format!(
                "{}: a projector file has general.architecture `clip`, this one `{arch}`",
                path.display()
            )));
        }
        let kind = g.metadata.opt_str("clip.projector_type")?.unwrap_or("");
        if kind != "lfm2" {
            return Err(WickError::UnsupportedArchitecture(format!(
                "clip projector `{kind}` (only `lfm2` is supported)"
            )));
        }
        if g.metadata.opt_bool("clip.has_vision_encoder")? == Some(false) {
            return Err(WickError::load("the projector file has no vision encoder"));
        }
        let shape = siglip2::Shape::read(&g)?;
        let factor = lfm2_vl::scale_factor(&g)?;
        let (path, n_embd) = if placement.exact() {
            let projector = lfm2_vl::Projector::load(&g, shape.d)?;
            let n = projector.n_embd();
            (Encoders::Exact(siglip2::Siglip2::load(&g, &shape)?, projector), n)
        } else {
            let (hidden, n_embd) = (out_width(&g, "mm.1")?, out_width(&g, "mm.2")?);
            let tower = device::Tower::load(&g, &shape, placement)?;
            let projector = device::Projector::load(&g, shape.d, factor, hidden, n_embd, placement)?;
            (Encoders::Device(tower, projector), n_embd)
        };
        for (k, n) in
            [("image_min_tokens", opts.image_min_tokens), ("image_max_tokens", opts.image_max_tokens)]
        {
            if n == Some(0) {
                return Err(WickError::InvalidRequest(format!("{k} must be at least 1")));
            }
        }
        let mut cfg =
            PreprocessConfig::lfm2(shape.patch, factor, opts.image_min_tokens, opts.image_max_tokens);
        for (key, slot) in
            [("clip.vision.image_mean", &mut cfg.mean), ("clip.vision.image_std", &mut cfg.std)]
        {
            if let Some(v) = g.metadata.f32_array(key)? {
                if v.len() < 3 || (key.ends_with("std") && v.contains(&0.0)) {
                    return Err(WickError::load(format!("`{key}` must hold 3 values (std non-zero)")));
                }
                slot.copy_from_slice(&v[..3]);
            }
        }
        Ok(Self { cfg, path, patch: shape.patch, n_embd, file_size: g.file_size() })
    }

    /// Width of the image embeddings (the text model's `n_embd`).
    pub fn n_embd(&self) -> usize {
        self.n_embd
    }

    pub fn plan(&self, width: usize, height: usize) -> Result<ImagePlan> {
        ImagePlan::new(&self.cfg, width, height)
    }

    /// One encoder input (planar normalised pixels of `w`×`h`) → `[tokens, n_embd]`.
    pub fn encode(&self, pixels: &[f32], w: usize, h: usize) -> Result<Vec<f32>> {
        let p = self.patch;
        if pixels.len() != 3 * w * h || w == 0 || h == 0 || !w.is_multiple_of(p) || !h.is_multiple_of(p) {
            return Err(WickError::Internal(format!("encoder input of {} values for {w}×{h}", pixels.len())));
        }
        match &self.path {
            Encoders::Exact(encoder, projector) => {
                let feats = encoder.forward(pixels, w, h)?;
                projector.forward(&feats, w / p, h / p)
            }
            Encoders::Device(tower, projector) => {
                let px = Tensor::from_slice(pixels, 3 * w * h, tower.device())?;
                let e = projector.forward(&tower.forward(&px, w, h)?, w / p, h / p)?;
                Ok(e.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
            }
        }
    }

    /// Every input of an image's plan, encoded, in prompt order.
    pub fn encode_image(&self, plan: &ImagePlan, img: RgbView<'_>) -> Result<Vec<Vec<f32>>> {
        if img.data.len() != img.width * img.height * 3
            || (img.width, img.height) != (plan.width, plan.height)
        {
            return Err(WickError::InvalidRequest(format!(
                "image of {}×{} pixels has {} bytes of RGB (expected {})",
                img.width,
                img.height,
                img.data.len(),
                img.width * img.height * 3
            )));
        }
        let inputs = plan.inputs();
        plan.pixels(&self.cfg, img).iter().zip(&inputs).map(|(px, &(w, h))| self.encode(px, w, h)).collect()
    }
}

/// One piece of an image's place in the prompt: text tokens, or the embeddings of one
/// encoder input (`input` indexes `ImagePlan::inputs`) taking `n` positions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutPart {
    Tokens(Vec<u32>),
    Embeds { input: usize, n: usize },
}

/// llama.cpp's LFM2 layout (`mtmd.cpp`, `PROJECTOR_TYPE_LFM2`): `<|image_start|>`, then for a
/// tiled image `<|img_row_R_col_C|>` + the tile for each tile row-major, `<|img_thumbnail|>` +
/// the thumbnail; for a single image just its embeddings; then `<|image_end|>`. The marker
/// texts are tokenized with special tokens parsed, as mtmd does (so a vocabulary without
/// them gets their plain-text tokens, as with llama.cpp).
pub fn layout(plan: &ImagePlan, cfg: &PreprocessConfig, tok: &Tokenizer) -> Result<Vec<LayoutPart>> {
    let text = |s: &str| -> Result<LayoutPart> { Ok(LayoutPart::Tokens(tok.encode(s, false, true)?)) };
    let inputs = plan.inputs();
    let mut out = vec![text("<|image_start|>")?];
    if let Some((cols, rows)) = plan.grid {
        for r in 0..rows {
            for c in 0..cols {
                out.push(text(&format!("<|img_row_{}_col_{}|>", r + 1, c + 1))?);
                let i = r * cols + c;
                out.push(LayoutPart::Embeds { input: i, n: cfg.tokens(inputs[i].0, inputs[i].1) });
            }
        }
        out.push(text("<|img_thumbnail|>")?);
    }
    let last = inputs.len() - 1;
    out.push(LayoutPart::Embeds { input: last, n: cfg.tokens(inputs[last].0, inputs[last].1) });
    out.push(text("<|image_end|>")?);
    Ok(out)
}
