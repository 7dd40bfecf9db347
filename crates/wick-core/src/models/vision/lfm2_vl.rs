//! The LFM2-VL projector (`PROJECTOR_TYPE_LFM2` in llama.cpp's `clip_graph_siglip`):
//! pixel-unshuffle of the patch grid by `scale_factor` (`build_patch_merge_permute`, the grid
//! padded with zeros to a multiple of the factor), the optional `mm.input_norm` LayerNorm
//! (ε 1e-5), then `mm.2(gelu(mm.1(·)))` with llama.cpp's tanh GELU (HF uses the erf form).

use super::siglip2::{Norm, VLinear};
use crate::error::{Result, WickError};
use crate::gguf::GgufFile;
use crate::kernels::cpu::vit::gelu;

pub struct Projector {
    pub factor: usize,
    input_norm: Option<Norm>,
    mm1: VLinear,
    mm2: VLinear,
}

impl Projector {
    pub fn load(g: &GgufFile, d: usize) -> Result<Self> {
        let factor = scale_factor(g)?;
        let merged = d * factor * factor;
        let input_norm = if g.has("mm.input_norm.weight") {
            Some(Norm::load(g, "mm.input_norm", merged, 1e-5)?)
        } else {
            None
        };
        let mm1 = VLinear::load(g, "mm.1", merged, None)?;
        let mm2 = VLinear::load(g, "mm.2", mm1.n_out, None)?;
        Ok(Self { factor, input_norm, mm1, mm2 })
    }

    pub fn n_embd(&self) -> usize {
        self.mm2.n_out
    }

    /// `[ny·nx, d]` encoder features (row-major) → `[⌈ny/f⌉·⌈nx/f⌉, n_embd]` embeddings.
    pub fn forward(&self, x: &[f32], nx: usize, ny: usize) -> Result<Vec<f32>> {
        let (t, n) = unshuffle(x, nx, ny, self.factor);
        let t = match &self.input_norm {
            Some(ln) => ln.forward(&t),
            None => t,
        };
        let mut h = self.mm1.forward(&t, n)?;
        gelu(&mut h);
        self.mm2.forward(&h, n)
    }
}

/// `clip.vision.projector.scale_factor` (2 when absent), checked.
pub fn scale_factor(g: &GgufFile) -> Result<usize> {
    let factor = g.metadata.opt_usize("clip.vision.projector.scale_factor")?.unwrap_or(2);
    if factor < 2 {
        return Err(WickError::load(format!(
            "clip: projector scale_factor {factor} (LFM2-VL needs 2 or more)"
        )));
    }
    Ok(factor)
}

/// The unshuffled token grid of an `nx`×`ny` patch grid: (⌈nx/f⌉, ⌈ny/f⌉).
pub fn unshuffle_dims(nx: usize, ny: usize, f: usize) -> (usize, usize) {
    (nx.div_ceil(f), ny.div_ceil(f))
}

/// Token (i, j) = concat over dy, dx of X[f·i + dy, f·j + dx] (channel (dy·f + dx)·d + c),
/// zero past the grid's edge; tokens row-major. Returns the tokens and their count.
pub fn unshuffle(x: &[f32], nx: usize, ny: usize, f: usize) -> (Vec<f32>, usize) {
    let d = x.len() / (nx * ny);
    let (ox, oy) = unshuffle_dims(nx, ny, f);
    let w = d * f * f;
    let mut t = vec![0f32; ox * oy * w];
    for i in 0..oy {
        for j in 0..ox {
            let tok = &mut t[(i * ox + j) * w..(i * ox + j + 1) * w];
            for dy in 0..f {
                for dx in 0..f {
                    let (y, xx) = (f * i + dy, f * j + dx);
                    if y < ny && xx < nx {
                        let src = &x[(y * nx + xx) * d..(y * nx + xx + 1) * d];
                        tok[(dy * f + dx) * d..(dy * f + dx + 1) * d].copy_from_slice(src);
                    }
                }
            }
        }
    }
    (t, ox * oy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unshuffle_orders_dy_dx_channels() {
        // 4×2 grid of 1-wide features valued y·10 + x.
        let x: Vec<f32> = (0..2).flat_map(|y| (0..4).map(move |xx| (y * 10 + xx) as f32)).collect();
        let (t, n) = unshuffle(&x, 4, 2, 2);
        assert_eq!(n, 2);
        assert_eq!(t, vec![0.0, 1.0, 10.0, 11.0, 2.0, 3.0, 12.0, 13.0]);
        // A 3×1 grid pads to 4×2 with zeros.
        let (t, n) = unshuffle(&[1.0, 2.0, 3.0], 3, 1, 2);
        assert_eq!((n, t), (2, vec![1.0, 2.0, 0.0, 0.0, 3.0, 0.0, 0.0, 0.0]));
    }
}
