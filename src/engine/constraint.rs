//! Constrained decoding: a request's grammar (a JSON schema, any JSON object, or a Lark grammar)
//! compiled by llguidance into a matcher that says, before each token, which tokens may come
//! next. The decode thread masks the logits with it before sampling and speculation's
//! verification, so that every token, drafted or not, is one the grammar allows.
//!
//! The vocabulary llguidance walks is built once per model from our tokenizer: each id's raw
//! bytes (byte-fallback and `▁` resolved by `Tokenizer::token_bytes`), special tokens marked with
//! llguidance's 0xFF prefix so that no text can spell them, and placeholder ids up to the width
//! of the model's logits.

use crate::model::Tokenizer;
use llguidance::api::{ParserLimits, TopLevelGrammar};
use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};
use serde_json::{json, Value};
use std::sync::Arc;

/// Largest JSON schema accepted, in bytes of its JSON: compile time and memory grow with a
/// schema's size, and hand-written schemas are far smaller.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// Deepest nesting of objects and arrays in a schema's JSON: deeper is a generated mistake, and
/// the compiler recurses on it.
pub const MAX_SCHEMA_DEPTH: usize = 32;
/// Largest Lark grammar accepted, in bytes.
pub const MAX_GRAMMAR_BYTES: usize = 64 * 1024;

/// What a request constrains its answer to.
#[derive(Clone, Debug, PartialEq)]
pub enum Grammar {
    /// Any JSON object (OpenAI's `json_object`).
    JsonObject,
    /// An instance of `schema`. With `strict`, a keyword the compiler does not implement is an
    /// error; without, it is ignored (the answer is then less constrained than the schema says).
    JsonSchema { schema: Value, strict: bool },
    /// A grammar in llguidance's Lark dialect.
    Lark(String),
}

impl Grammar {
    /// A JSON grammar's schema as llguidance gets it (this module's options, the limits
    /// checked); `None` for a Lark grammar.
    fn json_schema(&self) -> Result<Option<Value>, ConstraintError> {
        Ok(match self {
            Grammar::JsonObject => Some(compact(json!({"type": "object"}), true)),
            Grammar::JsonSchema { schema, strict } => {
                check_schema(schema)?;
                Some(compact(schema.clone(), *strict))
            }
            Grammar::Lark(_) => None,
        })
    }

    /// The grammar as a rule's body to embed in a larger Lark grammar (`%json {...}`); a Lark
    /// grammar cannot be embedded.
    pub fn lark_rule(&self) -> Result<String, ConstraintError> {
        match self.json_schema()? {
            Some(schema) => Ok(format!("%json {schema}")),
            None => Err(ConstraintError::Compile("a Lark grammar cannot be combined with tools".into())),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConstraintError {
    /// The schema's JSON is larger than [`MAX_SCHEMA_BYTES`] (or a grammar than [`MAX_GRAMMAR_BYTES`]).
    TooLarge { bytes: usize, limit: usize },
    /// The schema nests deeper than [`MAX_SCHEMA_DEPTH`].
    TooDeep { limit: usize },
    /// The compiler refused the grammar; its first line says why.
    Compile(String),
    /// The model's vocabulary could not be made into llguidance's.
    Vocabulary(String),
    /// The matcher failed mid-generation (a bug or a grammar too complex to follow).
    Matcher(String),
}

impl std::fmt::Display for ConstraintError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConstraintError::TooLarge { bytes, limit } => {
                write!(f, "the grammar is {bytes} bytes, more than the limit of {limit}")
            }
            ConstraintError::TooDeep { limit } => {
                write!(f, "the schema nests objects and arrays deeper than the limit of {limit} levels")
            }
            ConstraintError::Compile(e) => write!(f, "the grammar does not compile: {e}"),
            ConstraintError::Vocabulary(e) => write!(f, "the model's vocabulary cannot be constrained: {e}"),
            ConstraintError::Matcher(e) => write!(f, "the grammar matcher failed: {e}"),
        }
    }
}

impl std::error::Error for ConstraintError {}

/// llguidance's view of our tokenizer. `tokenize_bytes` only serves llguidance's forced-token
/// shortcut, which `tokenize_is_canonical() == false` turns off, so a greedy walk of the trie
/// is enough; masks never call it.
struct Vocab {
    trie: TokTrie,
}

impl TokenizerEnv for Vocab {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.greedy_tokenize(s)
    }

    fn tokenize_is_canonical(&self) -> bool {
        false
    }
}

/// The raw bytes llguidance sees for each id of a model whose logits are `width` wide.
pub fn token_bytes(tok: &Tokenizer, width: usize) -> Vec<Vec<u8>> {
    (0..width as u32)
        .map(|id| match tok.token_text(id) {
            // A control token: the marker keeps text from spelling it.
            Some(text) if tok.is_special(id) => [&[TokTrie::SPECIAL_TOKEN_MARKER][..], text.as_bytes()].concat(),
            Some(_) => tok.token_bytes(id),
            // Ids the embedding has beyond the tokenizer's: never text.
            None => {
                let mut v = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                v.extend_from_slice(format!("<[{id}]>").as_bytes());
                v
            }
        })
        .collect()
}

/// A model's vocabulary made ready for grammars, once; compiling a request's grammar against it
/// takes a millisecond or so.
pub struct GrammarVocab {
    factory: Arc<ParserFactory>,
}

impl GrammarVocab {
    /// The vocabulary of `tok` for logits `width` wide; the end of an answer is any of the
    /// tokenizer's end tokens.
    pub fn new(tok: &Tokenizer, width: usize) -> Result<GrammarVocab, ConstraintError> {
        GrammarVocab::from_bytes(&token_bytes(tok, width), tok.eos_tokens())
    }

    /// The vocabulary whose id `i` spells `tokens[i]` (control tokens start with llguidance's
    /// marker byte), ending answers with any of `eos`.
    pub fn from_bytes(tokens: &[Vec<u8>], eos: &[u32]) -> Result<GrammarVocab, ConstraintError> {
        let first = *eos.first().ok_or_else(|| ConstraintError::Vocabulary("the tokenizer has no end token".into()))?;
        let info = TokRxInfo::new(tokens.len() as u32, first);
        let trie = TokTrie::from(&info, tokens).with_eos_tokens(eos);
        let env: TokEnv = Arc::new(Vocab { trie });
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| ConstraintError::Vocabulary(e.to_string()))?;
        factory.quiet();
        *factory.limits_mut() = ParserLimits { verbose_errors: false, ..Default::default() };
        Ok(GrammarVocab { factory: Arc::new(factory) })
    }

    /// Compiles `g` into a fresh matcher, or says why it cannot be.
    pub fn compile(&self, g: &Grammar) -> Result<Constraint, ConstraintError> {
        let top = match (g.json_schema()?, g) {
            (Some(schema), _) => TopLevelGrammar::from_json_schema(schema),
            (None, Grammar::Lark(src)) if src.len() > MAX_GRAMMAR_BYTES => {
                return Err(ConstraintError::TooLarge { bytes: src.len(), limit: MAX_GRAMMAR_BYTES });
            }
            (None, Grammar::Lark(src)) => TopLevelGrammar::from_lark(src.clone()),
            (None, _) => unreachable!("every grammar but Lark has a schema"),
        };
        let parser =
            self.factory.create_parser(top).map_err(|e| ConstraintError::Compile(first_line(&e.to_string())))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(ConstraintError::Compile(first_line(&e)));
        }
        Ok(Constraint { matcher })
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or(s).trim().to_string()
}

/// The schema with llguidance's options: JSON without free whitespace between tokens (a small
/// model given room for whitespace can spend its whole answer on it), and unimplemented keywords
/// ignored unless `strict`. Options the schema sets itself (`x-guidance`) win.
fn compact(mut schema: Value, strict: bool) -> Value {
    if let Value::Object(o) = &mut schema {
        let opts = o.entry("x-guidance").or_insert_with(|| json!({}));
        if let Value::Object(opts) = opts {
            opts.entry("whitespace_flexible").or_insert(json!(false));
            if !strict {
                opts.entry("lenient").or_insert(json!(true));
            }
        }
    }
    schema
}

/// Refuses a schema over the size or depth limits before it reaches the compiler.
fn check_schema(schema: &Value) -> Result<(), ConstraintError> {
    let bytes = serde_json::to_vec(schema).map_or(usize::MAX, |v| v.len());
    if bytes > MAX_SCHEMA_BYTES {
        return Err(ConstraintError::TooLarge { bytes, limit: MAX_SCHEMA_BYTES });
    }
    fn depth(v: &Value, d: usize) -> bool {
        if d > MAX_SCHEMA_DEPTH {
            return false;
        }
        match v {
            Value::Object(o) => o.values().all(|v| depth(v, d + 1)),
            Value::Array(a) => a.iter().all(|v| depth(v, d + 1)),
            _ => true,
        }
    }
    if !depth(schema, 1) {
        return Err(ConstraintError::TooDeep { limit: MAX_SCHEMA_DEPTH });
    }
    Ok(())
}

/// One request's grammar state: where in the grammar the answer so far stands.
#[derive(Clone)]
pub struct Constraint {
    matcher: Matcher,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint").field("complete", &self.is_complete()).finish()
    }
}

impl Constraint {
    /// `row` with every token the grammar forbids next set to minus infinity, into `out`.
    pub fn mask(&mut self, row: &[f32], out: &mut Vec<f32>) -> Result<(), ConstraintError> {
        let allowed = self.matcher.compute_mask().map_err(|e| ConstraintError::Matcher(first_line(&e.to_string())))?;
        out.clear();
        out.extend_from_slice(row);
        // A word of the mask at a time: most words are all allowed or all forbidden, and
        // testing 262,144 ids one by one would cost more than computing the mask.
        let words = allowed.as_slice();
        let mut chunks = out.chunks_mut(32);
        for (chunk, &w) in chunks.by_ref().zip(words) {
            match w {
                u32::MAX => {}
                0 => chunk.fill(f32::NEG_INFINITY),
                _ => {
                    for (b, l) in chunk.iter_mut().enumerate() {
                        if w >> b & 1 == 0 {
                            *l = f32::NEG_INFINITY;
                        }
                    }
                }
            }
        }
        // Ids past the grammar's vocabulary are never allowed.
        chunks.for_each(|c| c.fill(f32::NEG_INFINITY));
        Ok(())
    }

    /// Moves past `id`, which the last mask allowed.
    pub fn accept(&mut self, id: u32) -> Result<(), ConstraintError> {
        self.matcher.consume_token(id).map_err(|e| ConstraintError::Matcher(first_line(&e.to_string())))
    }

    /// The grammar is complete and allows nothing more (a JSON value closed): the answer ends.
    pub fn is_complete(&self) -> bool {
        self.matcher.is_stopped()
    }

    /// How many of `draft`'s tokens, in order, the grammar allows from here (nothing is moved).
    pub fn allowed_prefix(&mut self, draft: &[u32]) -> usize {
        self.matcher.validate_tokens(draft).unwrap_or(0)
    }
}

#[cfg(test)]
#[path = "constraint_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "constraint_conformance_tests.rs"]
mod conformance_tests;

#[cfg(test)]
#[path = "constraint_vocab_tests.rs"]
mod vocab_tests;
