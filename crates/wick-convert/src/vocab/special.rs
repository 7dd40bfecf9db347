//! gguf-py's `SpecialVocab` (gguf-py/gguf/vocab.py): merges from tokenizer.json, special
//! token ids from tokenizer_config.json (resolved through tokenizer.json's added tokens) and
//! config.json, the add-BOS/EOS flags (including its crude reading of the post-processor's
//! TemplateProcessing), the chat template, and the normalizer flags.

use std::path::Path;

use serde_json::{Map, Value};

use crate::config::read_json_opt;
use crate::error::Result;
use crate::gguf::Value as V;

pub struct SpecialVocab {
    pub merges: Vec<String>,
    /// (type, id) in insertion order: bos, eos, unk, sep, pad, cls, mask, eot, eom.
    pub ids: Vec<(String, u32)>,
    pub add: Vec<(String, bool)>,
    pub chat_template: Option<Value>,
    pub lowercase: Option<bool>,
    pub strip_accents: Option<bool>,
    types: Vec<&'static str>,
    n_vocab: Option<usize>,
}

impl SpecialVocab {
    pub fn load(dir: &Path, load_merges: bool, n_vocab: Option<usize>) -> Result<Self> {
        let mut sv = SpecialVocab {
            merges: vec![],
            ids: vec![],
            add: vec![],
            chat_template: None,
            lowercase: None,
            strip_accents: None,
            types: vec!["bos", "eos", "unk", "sep", "pad", "cls", "mask"],
            n_vocab,
        };
        sv.read_tokenizer_json(dir, load_merges)?;
        sv.read_config_json(dir)?;
        if load_merges && sv.merges.is_empty() {
            sv.merges_txt(dir)?;
        }
        Ok(sv)
    }

    /// `_set_special_token`: the first id of a type wins; ids past the vocab are dropped.
    pub fn set_id(&mut self, typ: &str, id: Option<&Value>) {
        let Some(id) = id.and_then(|v| v.as_i64()) else { return };
        if id < 0 || self.n_vocab.is_some_and(|n| id as usize >= n) {
            return;
        }
        if !self.ids.iter().any(|(t, _)| t == typ) {
            self.ids.push((typ.to_string(), id as u32));
        }
    }

    fn set_add(&mut self, typ: &str, v: bool) {
        match self.add.iter_mut().find(|(t, _)| t == typ) {
            Some(e) => e.1 = v,
            None => self.add.push((typ.to_string(), v)),
        }
    }

    fn merges_txt(&mut self, dir: &Path) -> Result<()> {
        let path = dir.join("merges.txt");
        let Ok(text) = std::fs::read_to_string(&path) else { return Ok(()) };
        let mut lines = text.lines().peekable();
        if lines.peek().is_some_and(|l| l.trim().starts_with('#')) {
            lines.next();
        }
        self.merges = lines
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .filter_map(|l| {
                let parts: Vec<&str> = l.split_whitespace().collect();
                (parts.len() == 2).then(|| format!("{} {}", parts[0], parts[1]))
            })
            .collect();
        Ok(())
    }

    fn parse_normalizer(&mut self, n: &Value) {
        match n.get("type").and_then(|t| t.as_str()) {
            Some("Lowercase") => self.lowercase = Some(true),
            Some("StripAccents") => self.strip_accents = Some(true),
            Some("BertNormalizer") => {
                if let Some(b) = n.get("lowercase").and_then(|v| v.as_bool()) {
                    self.lowercase = Some(b);
                }
                if let Some(b) = n.get("strip_accents").and_then(|v| v.as_bool()) {
                    self.strip_accents = Some(b);
                }
            }
            Some("Sequence") => {
                for m in n.get("normalizers").and_then(|v| v.as_array()).into_iter().flatten() {
                    self.parse_normalizer(m);
                }
            }
            _ => {}
        }
    }

    fn read_tokenizer_json(&mut self, dir: &Path, load_merges: bool) -> Result<()> {
        let tokenizer = read_json_opt(&dir.join("tokenizer.json"))?;
        let mut config: Option<Map<String, Value>> = match read_json_opt(&dir.join("tokenizer_config.json"))?
        {
            Some(Value::Object(m)) => Some(m),
            _ => None,
        };
        let mut added: Vec<Value> = vec![];
        if let Some(tok) = &tokenizer {
            if load_merges {
                self.merges = merges_of(tok);
            }
            if let Some(n) = tok.get("normalizer").filter(|n| !n.is_null()) {
                self.parse_normalizer(n);
            }
            added = tok.get("added_tokens").and_then(|a| a.as_array()).cloned().unwrap_or_default();
            self.post_processor(tok, &mut config);
        }
        let Some(config) = config.filter(|c| !c.is_empty()) else { return Ok(()) };
        self.chat_template = chat_template(dir, &config);
        for typ in self.types.clone() {
            if let Some(b) = config.get(&format!("add_{typ}_token")).and_then(|v| v.as_bool()) {
                self.set_add(typ, b);
            }
            let content = match config.get(&format!("{typ}_token")) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Object(o)) => match o.get("content") {
                    Some(Value::String(s)) => s.clone(),
                    _ => continue,
                },
                _ => continue,
            };
            let id = added.iter().find(|a| a.get("content").and_then(|c| c.as_str()) == Some(&content));
            self.set_id(typ, id.and_then(|a| a.get("id")));
        }
        Ok(())
    }

    /// The post-processor part of `_try_load_read_tokenizer_json`: a RobertaProcessing adds
    /// BOS, EOS and SEP; a TemplateProcessing's first and last special tokens decide
    /// add_bos / add_eos (and may name the BOS/EOS/EOT tokens).
    fn post_processor(&mut self, tok: &Value, config: &mut Option<Map<String, Value>>) {
        // Python truthiness of a tokenizer_config entry (a string, or an AddedToken dict).
        let entry = |c: &Option<Map<String, Value>>, k: &str| -> Option<Value> {
            c.as_ref().and_then(|c| c.get(k)).filter(|v| truthy(v)).cloned()
        };
        let is = |v: &Option<Value>, s: &str| v.as_ref().and_then(|v| v.as_str()) == Some(s);
        let has_config = config.as_ref().is_some_and(|c| !c.is_empty());
        let mut bos = entry(config, "bos_token");
        let mut cls = entry(config, "cls_token");
        let mut eos = entry(config, "eos_token");
        let sep = entry(config, "sep_token");
        if bos.is_none() && cls.is_some() && has_config {
            config.as_mut().expect("config").insert("bos_token".into(), cls.clone().expect("cls"));
            bos = cls.clone();
        }
        if eos.is_none() && sep.is_some() && has_config {
            config.as_mut().expect("config").insert("eos_token".into(), sep.clone().expect("sep"));
            eos = sep.clone();
        }
        let Some(pp) = tok.get("post_processor").filter(|p| !p.is_null()) else { return };
        let list: Vec<&Value> = match pp.get("processors").and_then(|p| p.as_array()) {
            Some(a) => a.iter().collect(),
            None => vec![pp],
        };
        let special = |v: &Value| -> Option<String> {
            v.get("SpecialToken")
                .and_then(|s| s.get("id"))
                .and_then(|i| i.as_str())
                .filter(|s| !s.is_empty())
                .map(String::from)
        };
        for proc in list {
            match proc.get("type").and_then(|t| t.as_str()) {
                Some("RobertaProcessing") => {
                    self.set_add("bos", true);
                    self.set_add("eos", true);
                    self.set_add("sep", true);
                }
                Some("TemplateProcessing") => {
                    let single = proc.get("single").and_then(|s| s.as_array()).cloned().unwrap_or_default();
                    let (mut first_tok, mut last_tok) = (None, None);
                    if single.len() > 1 {
                        first_tok = single.first().and_then(special);
                        if let Some(first) = &first_tok {
                            if !has_config {
                                bos = Some(Value::String(first.clone()));
                            } else if !is(&bos, first) && !is(&cls, first) {
                                let c = config.as_mut().expect("config");
                                if bos.is_none() {
                                    c.insert("bos_token".into(), Value::String(first.clone()));
                                    bos = Some(Value::String(first.clone()));
                                }
                                if cls.is_none() {
                                    c.insert("cls_token".into(), Value::String(first.clone()));
                                    cls = Some(Value::String(first.clone()));
                                }
                            }
                            self.set_add("bos", is(&bos, first) || is(&cls, first));
                        }
                        last_tok = single.last().and_then(special);
                        if let Some(last) = &last_tok {
                            if !has_config {
                                eos = Some(Value::String(last.clone()));
                            } else if !is(&eos, last) {
                                let c = config.as_mut().expect("config");
                                let slot = ["eot", "eom"].into_iter().find(|s| !self.types.contains(s));
                                if let Some(slot) = slot {
                                    self.types.push(slot);
                                    c.insert(format!("{slot}_token"), eos.clone().unwrap_or(Value::Null));
                                }
                                c.insert("eos_token".into(), Value::String(last.clone()));
                                eos = Some(Value::String(last.clone()));
                            }
                            self.set_add("eos", is(&eos, last));
                        }
                    }
                    let pair = proc.get("pair").and_then(|s| s.as_array()).cloned().unwrap_or_default();
                    self.pair_template(&pair, first_tok.as_deref(), last_tok.as_deref(), &sep, &eos);
                }
                _ => {}
            }
        }
    }

    /// The `pair` template (`A [sep] [eos] B`) decides add_sep.
    fn pair_template(
        &mut self,
        pair: &[Value],
        first: Option<&str>,
        last: Option<&str>,
        sep: &Option<Value>,
        eos: &Option<Value>,
    ) {
        if pair.is_empty() {
            return;
        }
        fn special(v: &Value) -> Option<&str> {
            v.get("SpecialToken").and_then(|s| s.get("id")).and_then(|i| i.as_str()).filter(|s| !s.is_empty())
        }
        fn sequence(v: &Value) -> Option<&str> {
            v.get("Sequence").and_then(|s| s.get("id")).and_then(|i| i.as_str())
        }
        let start = usize::from(first.is_some() && special(&pair[0]) == first);
        let stop =
            if last.is_some() && pair.last().and_then(special) == last { pair.len() - 1 } else { pair.len() };
        let Some(inner) = pair.get(start..stop.max(start)).filter(|p| !p.is_empty()) else { return };
        if sequence(&inner[0]) != Some("A") || inner.last().and_then(sequence) != Some("B") || inner.len() < 3
        {
            return;
        }
        let middle = &inner[1..inner.len() - 1];
        let is_sep_or_eos =
            |t: &str| [sep, eos].iter().any(|v| v.as_ref().and_then(|v| v.as_str()) == Some(t));
        let mut add_sep = false;
        if let Some(entry) = special(&middle[0]) {
            if is_sep_or_eos(entry) && last.is_none() {
                add_sep = true;
            }
        }
        if middle.len() == 2 && special(&middle[1]).is_some_and(is_sep_or_eos) {
            add_sep = true;
        }
        self.set_add("sep", add_sep);
    }

    fn read_config_json(&mut self, dir: &Path) -> Result<()> {
        let Some(cfg) = read_json_opt(&dir.join("config.json"))? else { return Ok(()) };
        for typ in self.types.clone() {
            let key = format!("{typ}_token_id");
            let id = cfg.get(&key).or_else(|| cfg.get("text_config").and_then(|t| t.get(&key))).cloned();
            self.set_id(typ, id.as_ref());
        }
        Ok(())
    }

    /// The GGUF keys, in `add_to_gguf`'s order.
    pub fn to_kv(&self, kv: &mut Vec<(String, V)>) {
        if !self.merges.is_empty() {
            kv.push(("tokenizer.ggml.merges".into(), V::Strs(self.merges.clone())));
        }
        for (typ, id) in &self.ids {
            let key = match typ.as_str() {
                "bos" => "bos_token_id",
                "eos" => "eos_token_id",
                "unk" => "unknown_token_id",
                "sep" => "seperator_token_id",
                "pad" => "padding_token_id",
                "mask" => "mask_token_id",
                "eot" => "eot_token_id",
                "eom" => "eom_token_id",
                _ => continue, // cls: gguf-py has no key for it
            };
            kv.push((format!("tokenizer.ggml.{key}"), V::U32(*id)));
        }
        for (typ, b) in &self.add {
            if matches!(typ.as_str(), "bos" | "eos" | "sep") {
                kv.push((format!("tokenizer.ggml.add_{typ}_token"), V::Bool(*b)));
            }
        }
        match &self.chat_template {
            Some(Value::String(s)) => kv.push(("tokenizer.chat_template".into(), V::Str(s.clone()))),
            Some(Value::Array(list)) => named_templates(list, kv),
            _ => {}
        }
        if let Some(b) = self.lowercase {
            kv.push(("tokenizer.ggml.normalizer.lowercase".into(), V::Bool(b)));
        }
        if let Some(b) = self.strip_accents {
            kv.push(("tokenizer.ggml.normalizer.strip_accents".into(), V::Bool(b)));
        }
    }
}

/// Python's truthiness for a JSON value.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        Value::Number(n) => n.as_f64() != Some(0.0),
    }
}

/// tokenizer.json's merges: "a b" strings, or (transformers ≥ 4.45) pairs whose spaces are
/// written as U+0120 + 256 … as gguf-py encodes them.
fn merges_of(tok: &Value) -> Vec<String> {
    let Some(merges) = tok.get("model").and_then(|m| m.get("merges")).and_then(|m| m.as_array()) else {
        return vec![];
    };
    merges
        .iter()
        .filter_map(|m| match m {
            Value::String(s) => Some(s.clone()),
            Value::Array(pair) if pair.len() == 2 => {
                let enc = |v: &Value| -> String {
                    v.as_str().unwrap_or("").chars().map(|c| if c == ' ' { '\u{120}' } else { c }).collect()
                };
                Some(format!("{} {}", enc(&pair[0]), enc(&pair[1])))
            }
            _ => None,
        })
        .collect()
}

/// tokenizer_config.json's `chat_template`, else chat_template.jinja (with any
/// additional_chat_templates/*.jinja as named ones), else chat_template.json's.
fn chat_template(dir: &Path, config: &Map<String, Value>) -> Option<Value> {
    if let Some(t) = config.get("chat_template") {
        return matches!(t, Value::String(_) | Value::Array(_)).then(|| t.clone());
    }
    let jinja = dir.join("chat_template.jinja");
    if let Ok(t) = std::fs::read_to_string(&jinja) {
        let mut extra: Vec<_> = std::fs::read_dir(dir.join("additional_chat_templates"))
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "jinja"))
            .collect();
        if extra.is_empty() {
            return Some(Value::String(t));
        }
        extra.sort();
        let mut list = vec![serde_json::json!({"name": "default", "template": t})];
        for p in extra {
            let name = p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            list.push(serde_json::json!({"name": name, "template": std::fs::read_to_string(&p).ok()?}));
        }
        return Some(Value::Array(list));
    }
    let json = read_json_opt(&dir.join("chat_template.json")).ok().flatten()?;
    json.get("chat_template").cloned()
}

/// `add_chat_template` with a list of named templates.
fn named_templates(list: &[Value], kv: &mut Vec<(String, V)>) {
    let mut default = None;
    let mut names = vec![];
    for choice in list {
        let name: String = choice
            .get("name")
            .and_then(|n| n.as_str())
            .unwrap_or("")
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let Some(template) = choice.get("template").and_then(|t| t.as_str()) else { continue };
        if name.is_empty() {
            continue;
        }
        if name == "default" {
            default = Some(template.to_string());
        } else {
            kv.push((format!("tokenizer.chat_template.{name}"), V::Str(template.into())));
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    if !names.is_empty() {
        kv.push(("tokenizer.chat_templates".into(), V::Strs(names)));
    }
    if let Some(t) = default {
        kv.push(("tokenizer.chat_template".into(), V::Str(t)));
    }
}
