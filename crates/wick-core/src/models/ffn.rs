//! Feed-forward variants of the decoder blocks: a gated MLP (SwiGLU, or GeGLU for Gemma 3)
//! and a routed mixture of experts (`moe::Moe`).

use std::sync::{Mutex, OnceLock};

use candle_core::{DeviceLocation, Tensor};
use half::f16;

use super::layers::{Linear, RowPos, WeightDeltas};
use super::linears::Linears;
use super::moe::Moe;
use crate::error::{Result, WickError};
use crate::gguf::GgufFile;
use crate::kernels::cpu::elementwise::swiglu;
use crate::kernels::row_ops;
use crate::runtime::device::Placement;
use crate::runtime::trace;

pub enum Ffn {
    Dense(Mlp),
    Moe(Moe),
}

impl Ffn {
    /// `lora`: the step's adapters on these rows (a mixture of experts takes none: its
    /// adapters are refused at load).
    pub fn forward(&self, x: &Tensor, rows: &[RowPos], lora: Option<&dyn WeightDeltas>) -> Result<Tensor> {
        match self {
            Ffn::Dense(m) => m.forward(x, rows, lora),
            Ffn::Moe(m) => m.forward(x, rows),
        }
    }
}

/// How a gated MLP activates its gate before multiplying by `up`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// SwiGLU (llama, qwen, lfm2): `silu(g)·u`.
    Silu,
    /// GeGLU (Gemma 3; llama.cpp `LLM_FFN_GELU` + `LLM_FFN_PAR`): `gelu_tanh(g)·u`.
    GeluTanh,
}

/// Gated feed-forward: `down(act(gate x) ⊙ up x)`.
pub struct Mlp {
    /// Gate and up.
    gate_up: Linears,
    down: Linear,
    act: Gate,
    exact: bool,
    /// GeGLU on the device path with Wick's row ops: ggml's f16 GELU table on the device.
    gelu_table: Option<Tensor>,
}

impl Mlp {
    pub fn load(g: &GgufFile, prefix: &str, d: usize, ff: usize, act: Gate, dev: &Placement) -> Result<Self> {
        Ok(Self {
            gate_up: Linears::load_stacked(
                g,
                &[(format!("{prefix}.ffn_gate"), ff), (format!("{prefix}.ffn_up"), ff)],
                d,
                dev,
            )?,
            down: Linear::load(g, &format!("{prefix}.ffn_down"), ff, d, dev)?,
            act,
            exact: dev.exact(),
            gelu_table: match act == Gate::GeluTanh && !dev.exact() && row_ops::available(dev.device()) {
                true => Some(device_gelu_table(dev.device())?),
                false => None,
            },
        })
    }
    pub fn forward(&self, x: &Tensor, rows: &[RowPos], lora: Option<&dyn WeightDeltas>) -> Result<Tensor> {
        let [g, u]: [Tensor; 2] = self
            .gate_up
            .forward(x, rows, lora)?
            .try_into()
            .map_err(|_| WickError::Internal("mlp: gate and up expected".into()))?;
        let h = match (self.act, self.exact) {
            (Gate::Silu, true) => swiglu(&g, &u)?,
            (Gate::GeluTanh, true) => geglu(&g, &u)?,
            (Gate::Silu, false) => trace::span("ffn activations", g.device(), || row_ops::silu_mul(&g, &u))?,
            (Gate::GeluTanh, false) => {
                trace::span("ffn activations", g.device(), || match &self.gelu_table {
                    Some(table) => row_ops::geglu(&g, &u, table),
                    None => geglu_on_device(&g, &u),
                })?
            }
        };
        self.down.forward_lora(&h, rows, lora)
    }
}

/// ggml's tanh-GELU in f32 (`ggml_gelu_f32`), evaluated left to right as written in C.
#[allow(clippy::excessive_precision)]
fn gelu_f32(x: f32) -> f32 {
    const GELU_COEF_A: f32 = 0.044715;
    const SQRT_2_OVER_PI: f32 = 0.797_884_560_802_865_355_879_892_119_868_76;
    0.5f32 * x * (1.0f32 + (SQRT_2_OVER_PI * x * (1.0f32 + GELU_COEF_A * x * x)).tanh())
}

/// ggml's CPU backend looks GELU up in a table indexed by the f16 bits of the input
/// (`GGML_GELU_FP16`): the input is rounded to f16, the result stored as f16.
fn gelu_table() -> &'static [f16] {
    static T: OnceLock<Vec<f16>> = OnceLock::new();
    T.get_or_init(|| (0..=u16::MAX).map(|b| f16::from_f32(gelu_f32(f16::from_bits(b).to_f32()))).collect())
}

/// `gelu_table` on `device`, uploaded once per device and shared by the layers.
fn device_gelu_table(device: &candle_core::Device) -> Result<Tensor> {
    static TABLES: Mutex<Vec<(DeviceLocation, Tensor)>> = Mutex::new(Vec::new());
    let mut tables = TABLES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, t)) = tables.iter().find(|(at, _)| *at == device.location()) {
        return Ok(t.clone());
    }
    let t = Tensor::from_slice(gelu_table(), 1 << 16, device)?;
    tables.push((device.location(), t.clone()));
    Ok(t)
}

/// `geglu` on candle ops, any device: the table's values computed in place — the input rounded
/// to f16, candle's tanh GELU (the same expression as `gelu_f32`), the result rounded to f16 —
/// with the same ±10 cut-offs. Small models swing on that rounding: a tiny Gemma 3 parts from
/// the exact path within a token with an unrounded GELU and agrees to the bit with this one.
fn geglu_on_device(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    use candle_core::DType::{F16, F32};
    let f16_round = |t: &Tensor| t.to_dtype(F16)?.to_dtype(F32);
    let table = f16_round(&f16_round(gate)?.gelu()?)?;
    let high = gate.ge(10f64)?;
    let low = gate.le(-10f64)?;
    let y = high.where_cond(gate, &low.where_cond(&gate.zeros_like()?, &table)?)?;
    Ok((y * up)?)
}

/// ggml `geglu`: `gelu(g)·u`, with the table lookup and the ±10 cut-offs of the CPU backend.
pub fn geglu(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    let (gate, up) = (gate.contiguous()?, up.contiguous()?);
    let dims = gate.dims().to_vec();
    let (g, u) = (gate.flatten_all()?.to_vec1::<f32>()?, up.flatten_all()?.to_vec1::<f32>()?);
    let table = gelu_table();
    let y: Vec<f32> = g
        .iter()
        .zip(&u)
        .map(|(&x, &m)| {
            if x <= -10.0 {
                0.0
            } else if x >= 10.0 {
                x * m
            } else {
                table[f16::from_f32(x).to_bits() as usize].to_f32() * m
            }
        })
        .collect();
    Ok(Tensor::from_vec(y, dims, gate.device())?)
}

#[cfg(all(test, wick_qmv_twin))]
mod tests {
    use candle_core::{Device, Tensor};

    use super::*;

    /// Wick's device op (the host twin here) against the exact path's table lookup, bit for bit:
    /// gates through every f16 binade, at the ±10 cut-offs, at f16 rounding ties and subnormals.
    #[test]
    fn the_device_geglu_equals_the_exact_paths_bit_for_bit() {
        let mut gates = vec![-10.0f32, 10.0, -9.999, 9.999, 0.0, -0.0, 1e-8, -3e-6, 6.1e-5, 65504.0, 7e4];
        // f16 ties in [1, 2): half an ulp (2⁻¹¹) past each value, even and odd.
        gates.extend((0..200).map(|i| f16::from_bits(0x3c00 + i).to_f32() + f16::from_bits(0x1000).to_f32()));
        let mut r = crate::kernels::cpu::dot_checks::lcg(5);
        gates.extend((0..4000).map(|i| {
            let v = r() as f32 / (1 << 24) as f32 - 0.5;
            v * [24.0, 1.0, 1e-3, 1e-6][i % 4]
        }));
        let n = gates.len();
        let up: Vec<f32> = (0..n).map(|i| 0.5 + (i % 7) as f32 * 0.25).collect();
        let both = Tensor::from_vec([gates, up].concat(), (2, n), &Device::Cpu).unwrap();
        let (g, u) = (both.get(0).unwrap().unsqueeze(0).unwrap(), both.get(1).unwrap().unsqueeze(0).unwrap());
        let table = device_gelu_table(&Device::Cpu).unwrap();
        let bits = |t: &Tensor| {
            t.flatten_all().unwrap().to_vec1::<f32>().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        };
        assert_eq!(bits(&row_ops::geglu(&g, &u, &table).unwrap()), bits(&geglu(&g, &u).unwrap()));
    }
}
