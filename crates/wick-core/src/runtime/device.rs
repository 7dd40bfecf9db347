//! Which device a model runs on, and how.
//!
//! Two paths run the same architectures (`models/`): the **exact** path — Wick's own CPU
//! kernels in llama.cpp's summation orders, the default on a CPU — and the **device** path,
//! written on candle's device-generic ops (`QMatMul`, candle-nn's RMSNorm/RoPE/softmax,
//! gather for the paged KV) so that candle's CUDA and Metal backends run it. The device path
//! also runs on candle's CPU device (`cpu-candle`): that is how the test suite checks it on a
//! machine without a GPU. It is a check, not a speed option.
//!
//! A device that is asked for but cannot be had — no GPU, no driver, a feature not compiled
//! in — falls back to the exact CPU path with one line saying why (`Placement::notice`).

use std::fmt;
use std::ops::Deref;
use std::str::FromStr;
use std::sync::Arc;

use candle_core::Device;

use super::weight_cache::WeightCache;
use crate::error::WickError;

/// What a user asks for (`--device`, `WICK_DEVICE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceChoice {
    /// A GPU when this build has one's backend and one answers, else the CPU.
    #[default]
    Auto,
    Cpu,
    /// CUDA device `ordinal` (`cuda`, `cuda:1`).
    Cuda(usize),
    Metal,
    /// The device path on candle's CPU device: checks the GPU code path without a GPU.
    CpuCandle,
}

impl FromStr for DeviceChoice {
    type Err = WickError;
    fn from_str(s: &str) -> Result<Self, WickError> {
        Ok(match s.trim() {
            "" | "auto" => Self::Auto,
            "cpu" => Self::Cpu,
            "cuda" => Self::Cuda(0),
            "metal" => Self::Metal,
            "cpu-candle" => Self::CpuCandle,
            other => match other.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => Self::Cuda(n),
                _ => {
                    return Err(WickError::InvalidRequest(format!(
                        "unknown device `{other}` (expected auto, cpu, cuda, cuda:N, metal or cpu-candle)"
                    )))
                }
            },
        })
    }
}

impl fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Cpu => f.write_str("cpu"),
            Self::Cuda(0) => f.write_str("cuda"),
            Self::Cuda(n) => write!(f, "cuda:{n}"),
            Self::Metal => f.write_str("metal"),
            Self::CpuCandle => f.write_str("cpu-candle"),
        }
    }
}

impl DeviceChoice {
    /// The value after `--device` in a command line (the benches'), `Cpu` when absent.
    pub fn from_args(args: &[String]) -> Result<Self, WickError> {
        match args.iter().position(|a| a == "--device").and_then(|i| args.get(i + 1)) {
            Some(d) => d.parse(),
            None => Ok(Self::Cpu),
        }
    }

    /// `WICK_DEVICE` when set (a bad value is an error, not ignored), else `Auto`.
    pub fn from_env() -> Result<Self, WickError> {
        match std::env::var("WICK_DEVICE") {
            Ok(v) => v.parse(),
            Err(_) => Ok(Self::Auto),
        }
    }
}

/// The device a model was placed on, and which path runs it there. Dereferences to the
/// candle `Device` so that loaders pass it wherever a device is wanted.
#[derive(Debug, Clone)]
pub struct Placement {
    device: Device,
    exact: bool,
    /// Why the placement is not what was asked for (one line), if it is not.
    pub notice: Option<String>,
    /// Where repacked weights are read from or saved to while the model loads (the exact path).
    packs: Option<Arc<WeightCache>>,
    /// `-ngl` as asked, on the device path (None: every layer); settled by `fit_layers`.
    gpu_layers: Option<usize>,
    /// Set by `fit_layers` when only some layers run on the device.
    split: Option<LayerSplit>,
}

/// Which blocks of a model run on the device when only some do (llama-server's `-ngl N` with
/// N ≤ the block count): the last N. The others, the token embedding in front of them and the
/// output head (on the device only past the block count, when nothing is split) run on the
/// exact CPU path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerSplit {
    pub n_layer: usize,
    /// The first block on the device.
    pub first_on_device: usize,
}

impl LayerSplit {
    /// How many blocks run on the device.
    pub fn on_device(&self) -> usize {
        self.n_layer - self.first_on_device
    }
}

impl Deref for Placement {
    type Target = Device;
    fn deref(&self) -> &Device {
        &self.device
    }
}

impl Placement {
    /// The exact CPU path.
    pub fn cpu() -> Self {
        Self { device: Device::Cpu, exact: true, notice: None, packs: None, gpu_layers: None, split: None }
    }
    /// The device path on `device` (candle's CPU device included).
    pub fn generic(device: Device) -> Self {
        Self { device, exact: false, notice: None, packs: None, gpu_layers: None, split: None }
    }
    /// The exact path on the CPU, the device path anywhere else.
    pub fn for_device(device: &Device) -> Self {
        if device.is_cpu() {
            Self::cpu()
        } else {
            Self::generic(device.clone())
        }
    }
    /// This placement with `packs` as its pack cache (kept only where the exact path runs
    /// layers: its kernels read packed weights).
    pub fn with_packs(&self, packs: Option<Arc<WeightCache>>) -> Self {
        Self { packs: packs.filter(|_| self.has_host_layers()), ..self.clone() }
    }
    /// Whether the exact CPU path runs some of the model (all of it, or a split's first blocks).
    pub fn has_host_layers(&self) -> bool {
        self.exact || self.split.is_some()
    }

    /// This placement for a model of `n_layer` blocks: with `-ngl N` below `n_layer + 1` on
    /// the device path, the blocks split as llama-server splits them (`LayerSplit`).
    pub fn fit_layers(&self, n_layer: usize) -> Self {
        if self.gpu_layers == Some(0) {
            return Self { notice: self.notice.clone(), packs: self.packs.clone(), ..Self::cpu() };
        }
        let split = match self.gpu_layers {
            Some(n) if !self.exact && n <= n_layer => {
                Some(LayerSplit { n_layer, first_on_device: n_layer - n })
            }
            _ => None,
        };
        Self { split, ..self.clone() }
    }
    pub fn split(&self) -> Option<LayerSplit> {
        self.split
    }
    /// Where block `il` runs: the exact CPU path before a split's first device block, else
    /// this placement's device path.
    pub fn layer(&self, il: usize) -> Self {
        self.part(self.layer_on_device(il))
    }
    /// Whether block `il` runs on the device path.
    pub fn layer_on_device(&self, il: usize) -> bool {
        self.split.map_or(!self.exact, |s| il >= s.first_on_device)
    }
    /// Whether the output norm and head run on the device path.
    pub fn head_on_device(&self) -> bool {
        self.split.is_none() && !self.exact
    }
    /// Where the token embedding runs: with the first block.
    pub fn input(&self) -> Self {
        self.layer(0)
    }
    /// Where the output norm and head run.
    pub fn output(&self) -> Self {
        self.part(self.head_on_device())
    }
    /// Where the weight named `name` (`blk.N.…`, else an input or output tensor) runs.
    pub fn of_tensor(&self, name: &str) -> Self {
        let block = name.strip_prefix("blk.").and_then(|r| r.split('.').next()).and_then(|n| n.parse().ok());
        match block {
            Some(il) => self.layer(il),
            None if name.starts_with("token_embd") => self.input(),
            None => self.output(),
        }
    }
    /// A split's device side (`on_device`) or host side; this placement when not split.
    pub fn part(&self, on_device: bool) -> Self {
        match (self.split, on_device) {
            (None, _) => self.clone(),
            (Some(_), true) => self.device_part(),
            (Some(_), false) => self.host_part(),
        }
    }
    fn host_part(&self) -> Self {
        Self { packs: self.packs.clone(), ..Self::cpu() }
    }
    fn device_part(&self) -> Self {
        Self { split: None, packs: None, ..self.clone() }
    }
    /// The pack cache a load reads packed weights from or saves them to.
    pub fn packs(&self) -> Option<&WeightCache> {
        self.packs.as_deref()
    }
    /// Whether Wick's exact CPU kernels run the model (else candle's generic ops).
    pub fn exact(&self) -> bool {
        self.exact
    }
    pub fn device(&self) -> &Device {
        &self.device
    }
    /// How the placement is reported (`cpu`, `cpu-candle`, `cuda:0`, `metal`).
    pub fn name(&self) -> String {
        match self.device.location() {
            candle_core::DeviceLocation::Cpu if self.exact => "cpu".into(),
            candle_core::DeviceLocation::Cpu => "cpu-candle".into(),
            candle_core::DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
            candle_core::DeviceLocation::Metal { .. } => "metal".into(),
        }
    }

    /// Settles `choice`: a device that cannot be had falls back to the exact CPU path with
    /// a notice. `gpu_layers == Some(0)` (`-ngl 0`) keeps everything on the CPU.
    pub fn resolve(choice: DeviceChoice, gpu_layers: Option<usize>) -> Self {
        if gpu_layers == Some(0) {
            return Self::cpu();
        }
        let placed = match choice {
            DeviceChoice::Cpu => Self::cpu(),
            DeviceChoice::CpuCandle => Self::generic(Device::Cpu),
            DeviceChoice::Cuda(n) => Self::gpu(cuda(n)),
            DeviceChoice::Metal => Self::gpu(metal()),
            DeviceChoice::Auto => match (cuda(0), metal()) {
                (Ok(d), _) | (_, Ok(d)) => Self::generic(d),
                // Nothing to say when this build has no GPU backend: the CPU is what it does.
                (Err(Unavailable::NotCompiled(_)), Err(Unavailable::NotCompiled(_))) => Self::cpu(),
                (Err(e), _) => Self::fallback(&e),
            },
        };
        placed.with_gpu_layers(gpu_layers)
    }

    /// This placement with `-ngl n` asked (on the device path; the exact path has no layers
    /// to offload). `fit_layers` settles it against the model.
    pub fn with_gpu_layers(&self, n: Option<usize>) -> Self {
        Self { gpu_layers: n.filter(|_| !self.exact), split: None, ..self.clone() }
    }

    fn gpu(d: Result<Device, Unavailable>) -> Self {
        match d {
            Ok(d) => Self::generic(d),
            Err(e) => Self::fallback(&e),
        }
    }

    fn fallback(why: &Unavailable) -> Self {
        Self { notice: Some(format!("{why}; running on the CPU")), ..Self::cpu() }
    }
}

impl Placement {
    /// Bytes of device memory free now (weights already loaded), where the backend says;
    /// None on the CPU and on Metal (unified memory: the OS decides).
    pub fn free_memory(&self) -> Option<usize> {
        #[cfg(feature = "cuda")]
        if let Device::Cuda(d) = &self.device {
            return d.cuda_stream().context().mem_get_info().ok().map(|(free, _total)| free);
        }
        None
    }
}

/// Why a GPU backend cannot be used.
#[derive(Debug)]
enum Unavailable {
    /// This build was made without the backend's cargo feature.
    NotCompiled(&'static str),
    /// The backend is compiled in but no device answered (no GPU, no driver).
    #[cfg_attr(not(any(feature = "cuda", feature = "metal")), allow(dead_code))]
    NoDevice(String),
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotCompiled(b) => {
                write!(f, "this build has no {b} backend (the `{}` feature)", b.to_lowercase())
            }
            Self::NoDevice(why) => f.write_str(why),
        }
    }
}

#[cfg(feature = "cuda")]
fn cuda(ordinal: usize) -> Result<Device, Unavailable> {
    // cudarc loads libcuda at run time and panics when it is absent: caught here so that a
    // machine without a driver falls back instead of dying.
    match std::panic::catch_unwind(|| Device::new_cuda(ordinal)) {
        Ok(Ok(d)) => Ok(d),
        Ok(Err(e)) => Err(Unavailable::NoDevice(format!("no CUDA device {ordinal} ({e})"))),
        Err(p) => Err(Unavailable::NoDevice(format!("no CUDA driver ({})", crate::error::panic_message(&p)))),
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda(_ordinal: usize) -> Result<Device, Unavailable> {
    Err(Unavailable::NotCompiled("CUDA"))
}

#[cfg(feature = "metal")]
fn metal() -> Result<Device, Unavailable> {
    match std::panic::catch_unwind(|| Device::new_metal(0)) {
        Ok(Ok(d)) => Ok(d),
        Ok(Err(e)) => Err(Unavailable::NoDevice(format!("no Metal device ({e})"))),
        Err(p) => {
            Err(Unavailable::NoDevice(format!("no Metal device ({})", crate::error::panic_message(&p))))
        }
    }
}

#[cfg(not(feature = "metal"))]
fn metal() -> Result<Device, Unavailable> {
    Err(Unavailable::NotCompiled("Metal"))
}

/// The GPU backends this build has (`cuda`, `metal`), for `wick --version`-style reports.
pub fn compiled_backends() -> Vec<&'static str> {
    let mut v = Vec::new();
    if cfg!(feature = "cuda") {
        v.push("cuda");
    }
    if cfg!(feature = "metal") {
        v.push("metal");
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_parse_and_print_back() {
        for s in ["auto", "cpu", "cuda", "cuda:2", "metal", "cpu-candle"] {
            assert_eq!(s.parse::<DeviceChoice>().unwrap().to_string(), s);
        }
        assert!("gpu".parse::<DeviceChoice>().is_err());
        assert!("cuda:x".parse::<DeviceChoice>().is_err());
    }

    #[test]
    fn a_missing_backend_falls_back_with_a_notice() {
        let p = Placement::resolve(DeviceChoice::CpuCandle, None);
        assert!(!p.exact() && p.is_cpu() && p.notice.is_none());
        assert_eq!(p.name(), "cpu-candle");
        let p = Placement::resolve(DeviceChoice::CpuCandle, Some(0));
        assert!(p.exact(), "-ngl 0 keeps the exact CPU path");
        if !cfg!(feature = "cuda") {
            let p = Placement::resolve(DeviceChoice::Cuda(0), None);
            assert!(p.exact());
            let n = p.notice.unwrap();
            assert!(n.contains("no CUDA backend") && n.ends_with("running on the CPU"), "{n}");
            assert!(Placement::resolve(DeviceChoice::Auto, None).notice.is_none() || cfg!(feature = "metal"));
        }
    }

    /// llama-server's reading of `-ngl N`: the last N blocks on the device, the head too only
    /// past the block count; the embedding with the first block.
    #[test]
    fn gpu_layers_split_the_blocks_as_llama_server_does() {
        let dev = Placement::generic(Device::Cpu);
        let at = |n: Option<usize>| dev.with_gpu_layers(n).fit_layers(8);
        for all in [None, Some(9), Some(99)] {
            let p = at(all);
            assert!(p.split().is_none() && !p.exact() && p.head_on_device(), "{all:?}");
            assert!((0..8).all(|il| p.layer_on_device(il)));
        }
        let p = at(Some(3));
        assert_eq!(p.split(), Some(LayerSplit { n_layer: 8, first_on_device: 5 }));
        assert_eq!(
            (0..8).map(|il| p.layer_on_device(il)).collect::<Vec<_>>(),
            [[false; 5], [true; 5]].concat()[..8]
        );
        assert!(p.layer(4).exact() && !p.layer(5).exact() && p.input().exact() && p.output().exact());
        assert!(!p.exact() && p.has_host_layers() && p.layer(5).split().is_none());
        assert!(p.of_tensor("blk.4.attn_q.weight").exact() && !p.of_tensor("blk.7.ffn_up.weight").exact());
        assert!(p.of_tensor("output.weight").exact() && p.of_tensor("token_embd.weight").exact());
        let p = at(Some(8));
        assert!((0..8).all(|il| p.layer_on_device(il)) && !p.input().exact() && p.output().exact());
        assert!(at(Some(0)).exact(), "-ngl 0: the exact path");
        assert!(Placement::cpu().with_gpu_layers(Some(3)).fit_layers(8).split().is_none());
    }
}
