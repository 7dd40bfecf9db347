//! Constrained decoding: JSON schemas and Lark grammars compiled by llguidance into a matcher
//! per sequence, whose token mask removes what the grammar does not allow before the sampler's
//! filters. Compiling happens at submit (a bad grammar is an immediate INVALID_GRAMMAR);
//! masks are computed on helper threads while the forward pass runs (`worker`). Over a
//! byte-level BPE vocabulary, spans a grammar fixes from its start are forced as the
//! tokenizer's own tokens (llguidance's fast-forward: the mask holds the one canonical next
//! token), so a forced call costs the tokens its text does (`vocab`); lazy grammars, armed by
//! a call the model began itself, leave the tokens to the model.

mod constraint;
mod vocab;
mod worker;

use std::sync::{Arc, Mutex};

use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};

pub use constraint::{Commit, Constraint};
pub use llguidance::api::ParserLimits;
pub use toktrie::SimpleVob;

use crate::error::{Result, WickError};
use crate::tokenizer::Tokenizer;
use worker::{MaskWorker, Next};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrammarKind {
    /// llguidance's Lark dialect: may embed `%json { … }` schemas and name special tokens as
    /// `<|name|>` (docs/syntax.md of llguidance).
    Lark,
    /// A JSON schema as text (`{"type":"object"}` for OpenAI's `json_object`).
    JsonSchema,
}

#[derive(Debug, Clone, PartialEq)]
pub struct GrammarSpec {
    pub kind: GrammarKind,
    pub source: String,
    /// Lazy grammar: free generation until this token is sampled, then the grammar (whose
    /// first terminal is this token) constrains until it completes, then free again.
    pub trigger_token: Option<u32>,
}

/// Grammar sources longer than this are refused before llguidance sees them. Compile time
/// grows with the source, and the caller waits for it; OpenAI caps a schema's strings at
/// ~120k characters.
pub const MAX_SOURCE_BYTES: usize = 128 * 1024;

/// Enough for the deepest recursion a source within the size limit causes (measured: a
/// schema of 12k required properties, 4x MAX_SOURCE_BYTES, needs less than half of it).
const COMPILE_STACK_BYTES: usize = 256 << 20;

/// Caps on what one grammar may cost, so a huge grammar or schema fails with INVALID_GRAMMAR
/// instead of eating memory or time. Within
/// MAX_SOURCE_BYTES llguidance's lazy lexer and grammar rarely come near them; the per-mask
/// caps bound the time of every step.
pub fn default_limits() -> ParserLimits {
    ParserLimits {
        // Symbols in productions; the FHIR schema, a large real one, is ~200k.
        max_grammar_size: 200_000,
        // ~1-2 kB each: at most ~100 MB of lexer states.
        max_lexer_states: 50_000,
        // Building the lexer: bounds the compile time of a lexer-heavy grammar.
        initial_lexer_fuel: 1_000_000,
        // One mask: lexer fuel and Earley items bound the time of every step's mask.
        step_lexer_fuel: 200_000,
        step_max_items: 50_000,
        max_items_in_row: 2_000,
        precompute_large_lexemes: true,
        // The parser state and the whole grammar would go into every client-facing message.
        verbose_errors: false,
    }
}

/// What every grammar of one model shares, built on first use.
struct Shared {
    factory: ParserFactory,
    worker: MaskWorker,
}

/// Compiles grammars for one loaded model. The token trie, the parser factory and the mask
/// threads are built on the first grammar and shared by every sequence after it.
pub struct GrammarCompiler {
    tokenizer: Arc<Tokenizer>,
    limits: ParserLimits,
    shared: Mutex<Option<Arc<Shared>>>,
}

impl GrammarCompiler {
    pub fn new(tokenizer: Arc<Tokenizer>) -> Self {
        Self::with_limits(tokenizer, default_limits())
    }

    pub fn with_limits(tokenizer: Arc<Tokenizer>, limits: ParserLimits) -> Self {
        Self { tokenizer, limits, shared: Mutex::new(None) }
    }

    fn shared(&self) -> Result<Arc<Shared>> {
        let mut slot =
            self.shared.lock().map_err(|_| WickError::Internal("grammar state poisoned".into()))?;
        if let Some(s) = slot.as_ref() {
            return Ok(s.clone());
        }
        let env = vocab::token_env(&self.tokenizer)?;
        let mut factory = ParserFactory::new_simple(&env)
            .map_err(|e| WickError::Internal(format!("cannot set up grammars for this model: {e}")))?;
        factory.quiet();
        *factory.limits_mut() = self.limits.clone();
        let worker = MaskWorker::start()
            .map_err(|e| WickError::Internal(format!("cannot start the grammar mask thread: {e}")))?;
        let shared = Arc::new(Shared { factory, worker });
        *slot = Some(shared.clone());
        Ok(shared)
    }

    /// Compiles `spec` and computes its first mask (after the trigger token for a lazy
    /// grammar), so every grammar error, parser limits included, surfaces here. Blocks the
    /// caller, for a time that grows with the schema (quick for a tool schema, long for
    /// thousands of object properties).
    pub fn compile(&self, spec: &GrammarSpec) -> Result<Constraint> {
        if spec.source.len() > MAX_SOURCE_BYTES {
            return Err(WickError::InvalidGrammar(format!(
                "the grammar is {} bytes; the limit is {MAX_SOURCE_BYTES}",
                spec.source.len()
            )));
        }
        // llguidance's compilers recurse once per object property or nesting level: a schema
        // within the size limit overflows an ordinary thread stack (an abort, not a panic).
        // The stack is only reserved; pages are used as far as the recursion goes.
        std::thread::scope(|s| {
            std::thread::Builder::new()
                .name("wick-grammar-compile".into())
                .stack_size(COMPILE_STACK_BYTES)
                .spawn_scoped(s, || self.compile_here(spec))
                .map_err(|e| WickError::Internal(format!("cannot start the grammar compiler thread: {e}")))?
                .join()
                .unwrap_or_else(|_| Err(WickError::InvalidGrammar("the grammar compiler panicked".into())))
        })
    }

    fn compile_here(&self, spec: &GrammarSpec) -> Result<Constraint> {
        let invalid = |e: &dyn std::fmt::Display| WickError::InvalidGrammar(e.to_string());
        let grammar = match spec.kind {
            // A lazy grammar holds a call the model began on its own: it goes on in its own
            // tokens; forcing canonical ones is for spans the grammar imposes from the start.
            GrammarKind::Lark if spec.trigger_token.is_some() => {
                TopLevelGrammar::from_lark(format!("%llguidance {{\"no_forcing\": true}}\n{}", spec.source))
            }
            GrammarKind::Lark => TopLevelGrammar::from_lark(spec.source.clone()),
            GrammarKind::JsonSchema => {
                let schema = serde_json::from_str(&spec.source).map_err(|e| {
                    WickError::InvalidGrammar(format!("the JSON schema is not valid JSON: {e}"))
                })?;
                TopLevelGrammar::from_json_schema(schema)
            }
        };
        let shared = self.shared()?;
        let parser = shared.factory.create_parser(grammar).map_err(|e| invalid(&e))?;
        let mut matcher = Matcher::new(Ok(parser)).into_cancellable();
        if let Some(t) = spec.trigger_token {
            if matcher.try_consume_tokens(&[t]).map_err(|e| invalid(&e))? != 1 {
                let text = String::from_utf8_lossy(&self.tokenizer.token_bytes(t)).into_owned();
                return Err(WickError::InvalidGrammar(format!(
                    "the grammar must start with its trigger token {t} ({text:?})"
                )));
            }
        }
        let next = if matcher.is_stopped() {
            if spec.trigger_token.is_none() {
                return Err(WickError::InvalidGrammar("the grammar matches only empty text".into()));
            }
            Next { mask: SimpleVob::alloc(self.tokenizer.n_vocab()), forced: Vec::new() }
        } else {
            let next = worker::next_step(&mut matcher).map_err(|e| invalid(&e))?;
            if next.mask.is_zero() {
                return Err(WickError::InvalidGrammar("the grammar allows no token at its start".into()));
            }
            next
        };
        Ok(Constraint::new(matcher, next, spec.trigger_token, shared.worker.clone()))
    }
}
