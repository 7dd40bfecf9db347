//! Where a device-path step's time goes (`WICK_DEVICE_TRACE=1`). The device path wraps its
//! parts in spans: the whole step, the quantized products (by row count), the float products,
//! the norms, the attention and short-conv cores between their projections. With tracing on,
//! a span synchronizes its device before and after and adds its wall time to its name's
//! total, so the table says what a step spends where even on a GPU, whose launches otherwise
//! run behind the host. The synchronizations take a step's launch overlap away (a decode step
//! reads slower traced than not): a trace measures shares, never speed. Off, a span costs one
//! load of a flag.

use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use candle_core::Device;

use crate::error::Result;

/// The span around a whole forward step: the others are its parts.
pub const STEP: &str = "step";

struct Part {
    name: &'static str,
    calls: u64,
    secs: f64,
}

static TABLE: Mutex<Vec<Part>> = Mutex::new(Vec::new());

/// Whether `WICK_DEVICE_TRACE` is `1` (read once).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("WICK_DEVICE_TRACE").as_deref() == Ok("1"))
}

/// `f` as the span `name` on `device` (see the module).
pub fn span<T>(name: &'static str, device: &Device, f: impl FnOnce() -> Result<T>) -> Result<T> {
    if !enabled() {
        return f();
    }
    device.synchronize()?;
    let t = Instant::now();
    let out = f()?;
    device.synchronize()?;
    let secs = t.elapsed().as_secs_f64();
    let mut table = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    match table.iter_mut().find(|p| p.name == name) {
        Some(p) => {
            p.calls += 1;
            p.secs += secs;
        }
        None => table.push(Part { name, calls: 1, secs }),
    }
    Ok(out)
}

/// The spans since the last report as a markdown table (calls, total and per-step ms, share of
/// the steps' time; the rest of the steps' time as "other"), then cleared. None when tracing
/// is off or nothing ran.
pub fn report() -> Option<String> {
    let parts = std::mem::take(&mut *TABLE.lock().unwrap_or_else(|e| e.into_inner()));
    let step = parts.iter().find(|p| p.name == STEP)?;
    let (steps, step_secs) = (step.calls.max(1) as f64, step.secs);
    let mut out = String::from(
        "| part | calls | total ms | ms per step | share of the step |\n| --- | --- | --- | --- | --- |\n",
    );
    let mut rest = step_secs;
    let mut row = |name: &str, calls: String, secs: f64| {
        out.push_str(&format!(
            "| {name} | {calls} | {:.2} | {:.3} | {:.1} % |\n",
            secs * 1e3,
            secs * 1e3 / steps,
            100.0 * secs / step_secs.max(f64::MIN_POSITIVE)
        ));
    };
    for p in parts.iter().filter(|p| p.name != STEP) {
        rest -= p.secs;
        row(p.name, p.calls.to_string(), p.secs);
    }
    row("other (between the parts)", String::new(), rest);
    row(STEP, step.calls.to_string(), step_secs);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_needs_a_step_and_clears_the_table() {
        TABLE.lock().unwrap().push(Part { name: "norm", calls: 3, secs: 0.003 });
        assert!(report().is_none(), "no step span: no report");
        assert!(TABLE.lock().unwrap().is_empty());
        TABLE.lock().unwrap().extend([
            Part { name: STEP, calls: 2, secs: 0.010 },
            Part { name: "norm", calls: 4, secs: 0.004 },
        ]);
        let r = report().unwrap();
        assert!(r.contains("| norm | 4 | 4.00 | 2.000 | 40.0 % |"), "{r}");
        assert!(r.contains("| other (between the parts) |  | 6.00 | 3.000 | 60.0 % |"), "{r}");
        assert!(report().is_none());
    }
}
