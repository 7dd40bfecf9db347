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
        Self { device: Device::Cpu, exact: true, notice: None, packs: None }
    }
    /// The device path on `device` (candle's CPU device included).
    pub fn generic(device: Device) -> Self {
        Self { device, exact: false, notice: None, packs: None }
    }
    /// The exact path on the CPU, the device path anywhere else.
    pub fn for_device(device: &Device) -> Self {
        if device.is_cpu() {
            Self::cpu()
        } else {
            Self::generic(device.clone())
        }
    }
    /// This placement with `packs` as its pack cache (kept only on the exact path, whose
    /// kernels read packed weights).
    pub fn with_packs(&self, packs: Option<Arc<WeightCache>>) -> Self {
        Self { packs: packs.filter(|_| self.exact), ..self.clone() }
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
        match choice {
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
        }
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
}
