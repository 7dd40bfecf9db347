//! The `general.*` keys, as gguf-py's `Metadata.load` and `set_gguf_meta_model` derive them
//! without a model card: name, basename, finetune, version and size label from config.json's
//! `_name_or_path` and the directory name (`get_model_id_components`), the size label from the
//! parameter count otherwise, and the recommended sampling from generation_config.json.
//! (A README.md model card's license, tags, base models and datasets are not read.)

use std::path::Path;

use regex::Regex;
use serde_json::Value as J;

use crate::config::{read_json_opt, HfConfig};
use crate::error::Result;
use crate::gguf::Value;

#[derive(Default, Debug, Clone)]
struct Names {
    name: Option<String>,
    organization: Option<String>,
    basename: Option<String>,
    finetune: Option<String>,
    version: Option<String>,
    size_label: Option<String>,
}

/// Parameter counts as `GGUFWriter.get_total_parameter_count` makes them: experts are
/// tensors named `*_exps.*` with 3 dimensions.
pub struct ParamCount {
    pub total: u64,
    pub shared: u64,
    pub expert: u64,
    pub expert_count: u64,
}

impl ParamCount {
    /// From (name, ggml shape) pairs.
    pub fn of<'a>(tensors: impl Iterator<Item = (&'a str, &'a [usize])>) -> Self {
        let (mut total, mut shared, mut expert, mut expert_sum, mut n_expert_tensors) =
            (0u64, 0u64, 0u64, 0u64, 0u64);
        for (name, ne) in tensors {
            let size: u64 = ne.iter().map(|&n| n as u64).product();
            if name.contains("_exps.") && ne.len() >= 3 {
                // numpy shape[-3] (or [-2] for biases) = ggml ne[2] (or ne[1]).
                let count = if name.contains(".bias") { ne[1] } else { ne[2] } as u64;
                expert += size / count;
                expert_sum += count;
                n_expert_tensors += 1;
            } else {
                shared += size;
            }
            total += size;
        }
        let expert_count = expert_sum.checked_div(n_expert_tensors).unwrap_or(0);
        Self { total, shared, expert, expert_count }
    }

    /// `gguf.size_label`.
    pub fn size_label(&self) -> String {
        if self.expert_count > 0 {
            format!("{}x{}", self.expert_count, rounded(self.shared + self.expert, 2))
        } else {
            rounded(self.total, 2)
        }
    }
}

/// `model_weight_count_rounded_notation`.
fn rounded(n: u64, min_digits: usize) -> String {
    let n = n as f64;
    let (scaled, suffix) = if n > 1e12 {
        (n * 1e-12, "T")
    } else if n > 1e9 {
        (n * 1e-9, "B")
    } else if n > 1e6 {
        (n * 1e-6, "M")
    } else {
        (n * 1e-3, "K")
    };
    // Python's round() is half-to-even; str() of the int, leading zeros stripped.
    let r = scaled.round_ties_even() as i64;
    let digits = r.to_string().trim_start_matches('0').len();
    let fix = min_digits.saturating_sub(digits);
    format!("{scaled:.fix$}{suffix}")
}

/// `Metadata.id_to_title`.
fn id_to_title(s: &str) -> String {
    let re = Regex::new(r"^(v\d+(?:\.\d+)*|\d.*)$").expect("regex");
    s.trim()
        .replace('-', " ")
        .split_whitespace()
        .map(|w| {
            if w.chars().all(|c| !c.is_uppercase()) && w.chars().any(|c| c.is_lowercase()) && !re.is_match(w)
            {
                title(w)
            } else {
                w.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Python's `str.title()` for one word: upper after a non-letter, lower otherwise.
fn title(w: &str) -> String {
    let mut out = String::new();
    let mut prev_letter = false;
    for c in w.chars() {
        if c.is_alphabetic() {
            if prev_letter {
                out.extend(c.to_lowercase());
            } else {
                out.extend(c.to_uppercase());
            }
            prev_letter = true;
        } else {
            out.push(c);
            prev_letter = false;
        }
    }
    out
}

/// `Metadata.get_model_id_components`.
fn components(model_id: &str, total: u64) -> Names {
    if model_id.contains(' ') {
        return Names { name: Some(model_id.into()), ..Default::default() };
    }
    let (mut org, full) = match model_id.split_once('/') {
        Some((o, f)) => (Some(o.to_string()), f.to_string()),
        None => (None, model_id.to_string()),
    };
    if org.as_deref().is_some_and(|o| o.starts_with('.')) {
        org = None;
    }
    let mut parts: Vec<String> = full.split('-').filter(|p| !p.is_empty()).map(String::from).collect();
    let mut types: Vec<Vec<&str>> = vec![vec![]; parts.len()];
    let version = Regex::new(r"(?i)^(v|iter)?\d+([.]\d+)*$").expect("regex");
    let quant = Regex::new(r"(?i)^(i?q\d(_\w)*|b?fp?(16|32))$").expect("regex");
    let size = Regex::new(r"(?i)^(([A]|\d+[x])?\d+([._]\d+)?[KMBT][\d]?|small|mini|medium|large|x?xl)$")
        .expect("regex");
    let tune = Regex::new(r"(?i)^(chat|instruct|vision|lora)$").expect("regex");
    for i in 0..parts.len() {
        let part = parts[i].clone();
        if version.is_match(&part) {
            types[i].push("version");
        } else if quant.is_match(&part) {
            types[i].push("type");
            parts[i] = part.to_uppercase();
        } else if i > 0 && size.is_match(&part) {
            let mut p: Vec<char> = part.replace('_', ".").chars().collect();
            if p.last().is_some_and(|c| c.is_ascii_digit()) && p.len() >= 2 {
                // bloom-7b1 → 7.1b
                let (a, b) = (p[p.len() - 2], p[p.len() - 1]);
                p.truncate(p.len() - 2);
                p.extend(['.', b, a]);
            }
            if p.len() > 1 && p[p.len() - 2].is_ascii_digit() && "kmbt".contains(p[p.len() - 1]) {
                let last = p.len() - 1;
                p[last] = p[last].to_ascii_uppercase();
            }
            let mut s: String = p.iter().collect();
            if total != 0 {
                let unit = " KMBT".find(s.chars().last().unwrap_or(' '));
                let num: Option<f64> = s[..s.len() - 1].parse().ok();
                if let (Some(num), Some(unit)) = (num, unit.filter(|&u| u > 0)) {
                    let label = num * 1000f64.powi(unit as i32);
                    if (label - total as f64).abs() > (7 * total / 8) as f64 {
                        types[i].push("finetune");
                        let last = s.pop().map(|c| c.to_ascii_lowercase()).unwrap_or_default();
                        s.push(last);
                    }
                }
            }
            if types[i].is_empty() {
                types[i].push("size_label");
            }
            parts[i] = s;
        } else if i > 0 && tune.is_match(&part) {
            types[i].push("finetune");
        }
    }
    let has_numeric_size = parts
        .iter()
        .zip(&types)
        .any(|(n, t)| t.contains(&"size_label") && n.chars().any(|c| c.is_ascii_digit()));
    if has_numeric_size {
        for (n, t) in parts.iter().zip(types.iter_mut()) {
            if t.contains(&"size_label") && n.chars().all(|c| c.is_alphabetic()) {
                t.retain(|x| *x != "size_label");
            }
        }
    }
    let mut at_start = true;
    for (part, t) in parts.iter().zip(types.iter_mut()) {
        let alpha_start = part.chars().next().is_some_and(|c| c.is_alphabetic());
        if at_start && ((t.is_empty() && alpha_start) || t.contains(&"version")) {
            t.push("basename");
        } else {
            at_start = false;
            if t.is_empty() {
                t.push("finetune");
            }
        }
    }
    for t in types.iter_mut().rev() {
        if t.contains(&"basename") && t.len() > 1 {
            t.retain(|x| *x != "basename");
        } else {
            break;
        }
    }
    let join = |want: &str, exclude: Option<&str>| -> Option<String> {
        let mut seen: Vec<&str> = vec![];
        for (n, t) in parts.iter().zip(&types) {
            if t.contains(&want)
                && exclude.is_none_or(|x| !t.contains(&x))
                && (want != "size_label" || !seen.contains(&n.as_str()))
            {
                seen.push(n);
            }
        }
        (!seen.is_empty()).then(|| seen.join("-"))
    };
    let mut basename = join("basename", None);
    let size_label = join("size_label", None);
    let finetune = join("finetune", None);
    let version = join("version", Some("basename"));
    if size_label.is_none() && finetune.is_none() && version.is_none() {
        basename = None;
    }
    Names { name: Some(full), organization: org, basename, finetune, version, size_label }
}

fn fill(m: &mut Names, from: Names) {
    let title = |s: Option<String>| s.map(|s| id_to_title(&s));
    m.name = m.name.take().or(title(from.name));
    m.organization = m.organization.take().or(title(from.organization));
    m.basename = m.basename.take().or(from.basename);
    m.finetune = m.finetune.take().or(from.finetune);
    m.version = m.version.take().or(from.version);
    m.size_label = m.size_label.take().or(from.size_label);
}

/// The `general.*` keys (after `general.architecture` and `general.type`).
pub fn general_keys(dir: &Path, cfg: &HfConfig, params: &ParamCount) -> Result<Vec<(String, Value)>> {
    let mut m = Names::default();
    if let Some(id) =
        cfg.raw.get("_name_or_path").and_then(|v| v.as_str()).filter(|p| p.matches('/').count() <= 1)
    {
        fill(&mut m, components(id, params.total));
    }
    let dir_name = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    if let Some(n) = dir_name.file_name().and_then(|n| n.to_str()) {
        fill(&mut m, components(n, params.total));
    }
    if m.size_label.is_none() && params.total > 0 {
        m.size_label = Some(params.size_label());
    }
    let mut kv: Vec<(String, Value)> = vec![];
    if let Some(J::Object(g)) = read_json_opt(&dir.join("generation_config.json")).ok().flatten() {
        let f = |k: &str| g.get(k).and_then(|v| v.as_f64());
        let i = |k: &str| g.get(k).and_then(|v| v.as_i64());
        let mut push = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                kv.push((format!("general.sampling.{k}"), v));
            }
        };
        push("sequence", g.get("sequence").and_then(|v| v.as_str()).map(|s| Value::Str(s.into())));
        push("top_k", i("top_k").map(|v| Value::I32(v as i32)));
        push("top_p", f("top_p").map(|v| Value::F32(v as f32)));
        push("min_p", f("min_p").map(|v| Value::F32(v as f32)));
        push("xtc_probability", f("xtc_probability").map(|v| Value::F32(v as f32)));
        push("xtc_threshold", f("xtc_threshold").map(|v| Value::F32(v as f32)));
        push("temp", f("temperature").map(|v| Value::F32(v as f32)));
        push("penalty_last_n", i("penalty_last_n").map(|v| Value::I32(v as i32)));
        push("penalty_repeat", f("penalty_repeat").or(f("repetition_penalty")).map(|v| Value::F32(v as f32)));
        push("mirostat", i("mirostat").map(|v| Value::I32(v as i32)));
        push("mirostat_tau", f("mirostat_tau").map(|v| Value::F32(v as f32)));
        push("mirostat_eta", f("mirostat_eta").map(|v| Value::F32(v as f32)));
    }
    let name = m.name.clone().unwrap_or_else(|| "model".into());
    kv.push(("general.name".into(), Value::Str(name)));
    for (k, v) in [
        ("version", m.version),
        ("organization", m.organization),
        ("finetune", m.finetune),
        ("basename", m.basename),
        ("size_label", m.size_label),
    ] {
        if let Some(v) = v {
            kv.push((format!("general.{k}"), Value::Str(v)));
        }
    }
    Ok(kv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_labels_as_gguf_py() {
        assert_eq!(rounded(135_000_000, 2), "135M");
        assert_eq!(rounded(1_200_000_000, 2), "1.2B");
        assert_eq!(rounded(8_300, 2), "8.3K");
        assert_eq!(rounded(360_000, 2), "360K");
    }

    #[test]
    fn model_ids_split_as_gguf_py() {
        let n = components("HuggingFaceTB/SmolLM2-135M-Instruct", 135_000_000);
        assert_eq!(n.basename.as_deref(), Some("SmolLM2"));
        assert_eq!(n.size_label.as_deref(), Some("135M"));
        assert_eq!(n.finetune.as_deref(), Some("Instruct"));
        assert_eq!(id_to_title("smollm2-135m"), "Smollm2 135m");
    }
}
