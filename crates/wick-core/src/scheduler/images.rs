//! Images inside a sequence's prompt: expanding a request's images into the projector's
//! token layout, encoding them when a step first needs their positions, and a small cache
//! of embeddings by image content so a repeated image is encoded once.
//!
//! Image positions hold placeholder ids (`IMAGE_ID_FLAG` set, the rest derived from the
//! image's content hash and the position's index in the image), never vocabulary ids: the
//! prefix cache hashes them like any token, so a cached prefix is reused only for the same
//! image content, and the forward step feeds those rows from the embeddings.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Instant;

use crate::error::{Result, WickError};
use crate::metrics::Metrics;
use crate::models::vision::{layout, ImagePlan, LayoutPart, Rgb8, RgbView, VisionModel};
use crate::models::RowEmbeds;
use crate::request::PromptImage;
use crate::tokenizer::Tokenizer;

/// Marks a prompt position fed from an image's embeddings.
pub const IMAGE_ID_FLAG: u32 = 0x8000_0000;

/// One image of a sequence's prompt.
pub(crate) struct SeqImage {
    pub hash: u64,
    pub plan: ImagePlan,
    pub rgb: Arc<[u8]>,
    /// (first position, positions, encoder input) of each embedding run.
    pub runs: Vec<(usize, usize, usize)>,
    /// One `[tokens, n_embd]` block per encoder input, each once encoded: inputs are encoded
    /// when a step first feeds them, so a tiled image spreads its encoding over several steps.
    pub embeds: Vec<Option<Arc<Vec<f32>>>>,
    /// The image letterboxed to its tile grid, kept while tiles are still to be encoded.
    refined: Option<Rgb8>,
}

/// A prompt with its images laid out.
pub(crate) struct Expanded {
    pub tokens: Vec<u32>,
    pub images: Vec<SeqImage>,
    /// Positions where prompt chunks must end: each embedding run's start and end, as
    /// llama.cpp decodes every text and image chunk of a prompt on its own.
    pub breaks: Vec<usize>,
}

pub(crate) fn content_hash(img: &PromptImage) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (img.width, img.height).hash(&mut h);
    img.rgb.hash(&mut h);
    h.finish()
}

/// `prompt` with every image's layout inserted before its `at` token.
pub(crate) fn expand(
    prompt: &[u32],
    images: &[PromptImage],
    vision: &VisionModel,
    tok: &Tokenizer,
) -> Result<Expanded> {
    let mut out = Expanded { tokens: Vec::new(), images: Vec::new(), breaks: Vec::new() };
    let mut next = 0;
    for (i, img) in images.iter().enumerate() {
        if img.at < next || img.at > prompt.len() {
            return Err(WickError::InvalidRequest(format!(
                "image {i} is placed at token {} (images go in prompt order, at most at {})",
                img.at,
                prompt.len()
            )));
        }
        if img.rgb.len() != img.width * img.height * 3 {
            return Err(WickError::InvalidRequest(format!(
                "image {i}: {} bytes for {}×{} RGB pixels",
                img.rgb.len(),
                img.width,
                img.height
            )));
        }
        out.tokens.extend_from_slice(&prompt[next..img.at]);
        next = img.at;
        let plan = vision.plan(img.width, img.height)?;
        let hash = content_hash(img);
        let mut runs = vec![];
        let mut k = 0u64;
        for part in layout(&plan, &vision.cfg, tok)? {
            match part {
                LayoutPart::Tokens(t) => out.tokens.extend(t),
                LayoutPart::Embeds { input, n } => {
                    let at = out.tokens.len();
                    out.breaks.extend([at, at + n]);
                    runs.push((at, n, input));
                    for _ in 0..n {
                        let mixed = (hash ^ k.wrapping_mul(0x9E37_79B9_7F4A_7C15)).rotate_left(17);
                        out.tokens.push(IMAGE_ID_FLAG | (mixed as u32 & !IMAGE_ID_FLAG));
                        k += 1;
                    }
                }
            }
        }
        let embeds = vec![None; plan.inputs().len()];
        out.images.push(SeqImage { hash, plan, rgb: img.rgb.clone(), runs, embeds, refined: None });
    }
    out.tokens.extend_from_slice(&prompt[next..]);
    Ok(out)
}

/// Every input's embeddings of one image.
type Embeds = Arc<Vec<Arc<Vec<f32>>>>;

/// Recently encoded images by content hash (a few, least recently used out first).
pub(crate) struct ImageCache {
    entries: VecDeque<(u64, Embeds)>,
    cap: usize,
}

impl ImageCache {
    pub fn new(cap: usize) -> Self {
        Self { entries: VecDeque::new(), cap }
    }

    fn get(&mut self, hash: u64) -> Option<Embeds> {
        let i = self.entries.iter().position(|(h, _)| *h == hash)?;
        let e = self.entries.remove(i)?;
        let v = e.1.clone();
        self.entries.push_front(e);
        Some(v)
    }

    fn put(&mut self, hash: u64, v: Embeds) {
        self.entries.retain(|(h, _)| *h != hash);
        self.entries.push_front((hash, v));
        self.entries.truncate(self.cap);
    }
}

/// Encodes (or takes from `cache`) the image inputs whose positions fall in `from..to`.
pub(crate) fn ensure_encoded(
    images: &mut [SeqImage],
    from: usize,
    to: usize,
    vision: &VisionModel,
    cache: &mut ImageCache,
    metrics: &Metrics,
) -> Result<()> {
    use std::sync::atomic::Ordering::Relaxed;
    for img in images.iter_mut() {
        let needed: Vec<usize> = img
            .runs
            .iter()
            .filter(|&&(at, n, input)| at < to && at + n > from && img.embeds[input].is_none())
            .map(|&(_, _, input)| input)
            .collect();
        if needed.is_empty() {
            continue;
        }
        if img.embeds.iter().all(Option::is_none) {
            if let Some(all) = cache.get(img.hash) {
                metrics.image_cache_hits_total.fetch_add(1, Relaxed);
                img.embeds = all.iter().cloned().map(Some).collect();
                continue;
            }
        }
        let view = RgbView { width: img.plan.width, height: img.plan.height, data: &img.rgb };
        let inputs = img.plan.inputs();
        for input in needed {
            let t = Instant::now();
            let px = img.plan.input_pixels(&vision.cfg, view, input, &mut img.refined);
            let (w, h) = inputs[input];
            img.embeds[input] = Some(Arc::new(vision.encode(&px, w, h)?));
            metrics.image_tiles_encoded_total.fetch_add(1, Relaxed);
            metrics.image_encode_us_total.fetch_add(t.elapsed().as_micros() as usize, Relaxed);
        }
        if img.embeds.iter().all(Option::is_some) {
            img.refined = None;
            metrics.images_encoded_total.fetch_add(1, Relaxed);
            cache.put(img.hash, Arc::new(img.embeds.iter().flatten().cloned().collect()));
        }
    }
    Ok(())
}

/// The embeddings a step over positions `from..to` feeds (offsets relative to `from`).
pub(crate) fn row_embeds(images: &[SeqImage], from: usize, to: usize, n_embd: usize) -> Vec<RowEmbeds<'_>> {
    let mut out = vec![];
    for img in images {
        for &(at, n, input) in &img.runs {
            let (a, b) = (at.max(from), (at + n).min(to));
            if let (true, Some(e)) = (a < b, &img.embeds[input]) {
                let data = &e[(a - at) * n_embd..(b - at) * n_embd];
                out.push(RowEmbeds { at: a - from, rows: b - a, data });
            }
        }
    }
    out
}
