//! Text to token ids and back: a thin layer over the `tokenizers` crate that knows a model's
//! special tokens (bos, the tokens that end a turn) and where its chat template lives.
//!
//! Two sources: a GGUF file's `tokenizer.ggml.*` metadata (built in `tokenizer_gguf.rs`), or a
//! Hugging Face `tokenizer.json` with its optional `tokenizer_config.json`.

use std::path::{Path, PathBuf};

use tokenizers::Tokenizer as HfTokenizer;

use super::files::{ModelFiles, TokenizerSource};
use super::metadata::Metadata;

/// Longest text `encode` accepts, in bytes. Far above any context window the server offers (a
/// token is rarely under 2 bytes), it bounds the work one request can ask of the tokenizer.
pub const MAX_ENCODE_BYTES: usize = 16 << 20;

/// Largest tokenizer.json / tokenizer_config.json read from disk; real ones are under 20 MiB.
pub const MAX_TOKENIZER_FILE_BYTES: u64 = 256 << 20;

/// Token texts that end a turn in the chat formats we know (ChatML, Llama 3, Gemma, Phi,
/// DeepSeek, GPT-2 style). Generation stops on any of these that the vocabulary holds as a
/// special token, besides the model's declared eos.
pub const END_OF_TURN_TOKENS: &[&str] = &[
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end_of_text|>",
    "<|endoftext|>",
    "<|end|>",
    "<end_of_turn>",
    "<EOT>",
    "<｜end▁of▁sentence｜>",
];

#[derive(Debug)]
pub enum TokenizerError {
    /// The model's files carry no tokenizer (no `tokenizer.ggml.*` keys, no tokenizer.json).
    NoTokenizer { path: PathBuf },
    /// A tokenizer file could not be read.
    Io { path: PathBuf, error: std::io::Error },
    /// A tokenizer file is larger than [`MAX_TOKENIZER_FILE_BYTES`].
    FileTooLarge { path: PathBuf, size: u64, max: u64 },
    /// tokenizer.json or tokenizer_config.json is not what the format says.
    BadJson { what: String, detail: String },
    /// A GGUF metadata key the tokenizer needs is absent or of the wrong type.
    MissingKey { key: &'static str, expected: &'static str },
    /// `tokenizer.ggml.model` names a kind of tokenizer we do not build.
    UnsupportedModel { model: String },
    /// `tokenizer.ggml.pre` names a pre-tokenizer we have no split rules for.
    UnknownPreTokenizer { name: String },
    /// The GGUF vocabulary is empty or larger than the bound.
    BadVocabSize { len: usize, max: usize },
    /// Two parallel GGUF arrays disagree in length.
    LengthMismatch { key: &'static str, len: usize, expected: usize },
    /// A GGUF special-token id points outside the vocabulary.
    BadTokenId { key: &'static str, id: u64, vocab_size: usize },
    /// A GGUF merge rule is not two tokens separated by a space.
    BadMerge { index: usize, merge: String },
    /// The `tokenizers` crate refused the vocabulary, merges or split rules.
    Build { detail: String },
    /// The text to encode is longer than [`MAX_ENCODE_BYTES`].
    TextTooLong { len: usize, max: usize },
    /// The `tokenizers` crate failed to encode a text.
    Encode { detail: String },
}

impl std::fmt::Display for TokenizerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use TokenizerError::*;
        match self {
            NoTokenizer { path } => write!(
                f,
                "{} has no tokenizer (no tokenizer.ggml.* metadata, no tokenizer.json)",
                path.display()
            ),
            Io { path, error } => write!(f, "cannot read {}: {error}", path.display()),
            FileTooLarge { path, size, max } => {
                write!(
                    f,
                    "{} is {size} bytes, more than the {max} a tokenizer file may be",
                    path.display()
                )
            }
            BadJson { what, detail } => write!(f, "invalid {what}: {detail}"),
            MissingKey { key, expected } => {
                write!(f, "GGUF metadata key {key} is missing or not {expected}")
            }
            UnsupportedModel { model } => write!(
                f,
                "tokenizer.ggml.model is '{model}'; supported are 'gpt2' (byte-level BPE) and \
                 'llama' (SentencePiece BPE)"
            ),
            UnknownPreTokenizer { name } => write!(
                f,
                "tokenizer.ggml.pre is '{name}', a pre-tokenizer without known split rules \
                 (known: {})",
                super::tokenizer_gguf::KNOWN_PRE_TOKENIZERS.join(", ")
            ),
            BadVocabSize { len, max } => {
                write!(f, "the vocabulary has {len} tokens; it must have between 1 and {max}")
            }
            LengthMismatch { key, len, expected } => {
                write!(f, "{key} has {len} entries but the vocabulary has {expected}")
            }
            BadTokenId { key, id, vocab_size } => {
                write!(f, "{key} is {id}, outside the vocabulary of {vocab_size} tokens")
            }
            BadMerge { index, merge } => {
                write!(f, "merge rule {index} ({merge:?}) is not two tokens separated by a space")
            }
            Build { detail } => write!(f, "cannot build the tokenizer: {detail}"),
            TextTooLong { len, max } => {
                write!(
                    f,
                    "text of {len} bytes is longer than the {max} bytes the tokenizer accepts"
                )
            }
            Encode { detail } => write!(f, "cannot encode the text: {detail}"),
        }
    }
}

impl std::error::Error for TokenizerError {}

/// A model's tokenizer. Cheap to share (`&self` everywhere, `Send + Sync`).
pub struct Tokenizer {
    pub(super) inner: HfTokenizer,
    pub(super) bos: Option<u32>,
    pub(super) eos: Option<u32>,
    /// eos first, then every end-of-turn token, without duplicates.
    pub(super) eos_tokens: Vec<u32>,
    /// Prepend bos / append eos in `encode(.., true)` ourselves, because the inner tokenizer's
    /// post-processor does not (GGUF files carry flags, not a post-processor).
    pub(super) add_bos: bool,
    pub(super) add_eos: bool,
    pub(super) vocab_size: usize,
    /// Ids of special added tokens, sorted (the inner tokenizer only hands out a copy of its map).
    pub(super) special_ids: Vec<u32>,
    pub(super) chat_template: Option<String>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size)
            .field("bos", &self.bos)
            .field("eos_tokens", &self.eos_tokens)
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    /// The tokenizer a model's files name: GGUF metadata or tokenizer.json. The files' own
    /// end-of-generation ids (generation_config.json, eot/eom keys) and chat template (from
    /// wherever the files keep it) are added to what the tokenizer knows.
    pub fn from_model_files(files: &ModelFiles) -> Result<Self, TokenizerError> {
        let mut tok = match &files.tokenizer {
            Some(TokenizerSource::GgufMetadata) => Self::from_gguf_metadata(&files.metadata)?,
            Some(TokenizerSource::HfJson { tokenizer_json, tokenizer_config }) => {
                Self::from_json_files(tokenizer_json, tokenizer_config.as_deref())?
            }
            None => return Err(TokenizerError::NoTokenizer { path: files.path.clone() }),
        };
        for &id in &files.eos_tokens {
            if (id as usize) < tok.vocab_size && !tok.eos_tokens.contains(&id) {
                tok.eos_tokens.push(id);
            }
        }
        if let Some(t) = &files.chat_template {
            tok.chat_template = Some(t.clone());
        }
        Ok(tok)
    }

    /// Builds the tokenizer a GGUF file describes (`tokenizer.ggml.*` keys).
    pub fn from_gguf_metadata(meta: &Metadata) -> Result<Self, TokenizerError> {
        super::tokenizer_gguf::build(meta)
    }

    /// Loads `tokenizer.json` and, when present, `tokenizer_config.json` from a model directory.
    pub fn from_hf_dir(dir: &Path) -> Result<Self, TokenizerError> {
        let config = dir.join("tokenizer_config.json");
        let config = config.exists().then_some(config);
        Self::from_json_files(&dir.join("tokenizer.json"), config.as_deref())
    }

    pub fn from_json_files(
        tokenizer_json: &Path,
        tokenizer_config: Option<&Path>,
    ) -> Result<Self, TokenizerError> {
        let json = read_limited(tokenizer_json)?;
        let config = tokenizer_config.map(read_limited).transpose()?;
        Self::from_json_bytes(&json, config.as_deref())
    }

    /// From the bytes of a `tokenizer.json` and, optionally, of its `tokenizer_config.json`.
    pub fn from_json_bytes(json: &[u8], config: Option<&[u8]>) -> Result<Self, TokenizerError> {
        let inner = HfTokenizer::from_bytes(json).map_err(|e| TokenizerError::BadJson {
            what: "tokenizer.json".into(),
            detail: e.to_string(),
        })?;
        let config: serde_json::Value = match config {
            Some(bytes) => serde_json::from_slice(bytes).map_err(|e| TokenizerError::BadJson {
                what: "tokenizer_config.json".into(),
                detail: e.to_string(),
            })?,
            None => serde_json::Value::Null,
        };
        let token_of = |key: &str| -> Option<u32> {
            let v = config.get(key)?;
            let text = v.as_str().or_else(|| v.get("content")?.as_str())?;
            inner.token_to_id(text)
        };
        let bos = token_of("bos_token");
        let eos = token_of("eos_token");
        let flag = |key: &str| config.get(key).and_then(|v| v.as_bool()).unwrap_or(false);
        let chat_template = match config.get("chat_template") {
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            // A list of named templates: the one called "default", else the first.
            Some(serde_json::Value::Array(list)) => list
                .iter()
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                .or_else(|| list.first())
                .and_then(|t| t.get("template")?.as_str())
                .map(str::to_owned),
            _ => None,
        };
        let mut tok = Tokenizer {
            inner,
            bos,
            eos,
            eos_tokens: Vec::new(),
            add_bos: false,
            add_eos: false,
            vocab_size: 0,
            special_ids: Vec::new(),
            chat_template,
        };
        tok.finish_special_tokens();
        // The config's flags are honoured only where the post-processor does not already add
        // the token (transformers rewrites the post-processor to the same effect).
        let probe =
            tok.inner.encode_fast("", true).map(|e| e.get_ids().to_vec()).unwrap_or_default();
        tok.add_bos = flag("add_bos_token") && bos.is_some() && probe.first() != bos.as_ref();
        tok.add_eos = flag("add_eos_token") && eos.is_some() && probe.last() != eos.as_ref();
        Ok(tok)
    }

    /// Fills `vocab_size` and `eos_tokens` from the inner tokenizer and `bos`/`eos`.
    pub(super) fn finish_special_tokens(&mut self) {
        let vocab = self.inner.get_vocab(true);
        self.vocab_size = vocab.values().copied().max().map_or(0, |m| m as usize + 1);
        let added = self.inner.get_added_tokens_decoder();
        let mut special_ids: Vec<u32> =
            added.iter().filter(|(_, t)| t.special).map(|(&id, _)| id).collect();
        special_ids.sort_unstable();
        self.special_ids = special_ids;
        let mut eos_tokens: Vec<u32> = self.eos.into_iter().collect();
        for text in END_OF_TURN_TOKENS {
            if let Some(&id) = vocab.get(*text) {
                if self.is_special(id) && !eos_tokens.contains(&id) {
                    eos_tokens.push(id);
                }
            }
        }
        self.eos_tokens = eos_tokens;
    }

    /// Token ids of `text`. Special tokens written in the text (`<|im_start|>`) become their
    /// ids; `add_special` adds what the model wants around a sequence (e.g. bos).
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>, TokenizerError> {
        if text.len() > MAX_ENCODE_BYTES {
            return Err(TokenizerError::TextTooLong { len: text.len(), max: MAX_ENCODE_BYTES });
        }
        let enc = self
            .inner
            .encode_fast(text, add_special)
            .map_err(|e| TokenizerError::Encode { detail: e.to_string() })?;
        let ids = enc.get_ids();
        let mut out = Vec::with_capacity(ids.len() + 2);
        if add_special && self.add_bos {
            out.extend(self.bos);
        }
        out.extend_from_slice(ids);
        if add_special && self.add_eos {
            out.extend(self.eos);
        }
        Ok(out)
    }

    /// The text of `ids`, special tokens included. Ids outside the vocabulary are skipped;
    /// bytes that do not form whole UTF-8 characters become U+FFFD (a streaming decoder should
    /// hold such a tail back until the next token completes it).
    pub fn decode(&self, ids: &[u32]) -> String {
        self.decode_inner(ids, false)
    }

    /// Like [`decode`](Self::decode), without the special tokens (`<|im_end|>` and the like).
    pub fn decode_skip_special(&self, ids: &[u32]) -> String {
        self.decode_inner(ids, true)
    }

    fn decode_inner(&self, ids: &[u32], skip_special: bool) -> String {
        match self.inner.decode(ids, skip_special) {
            Ok(s) => s,
            // The decoders we build cannot fail; a tokenizer.json with an exotic decoder might.
            // Raw token texts are the most faithful fallback that cannot panic.
            Err(_) => ids.iter().filter_map(|&id| self.inner.id_to_token(id)).collect(),
        }
    }

    /// The vocabulary entry of `id` as stored (byte-level BPE spells a space `Ġ`).
    pub fn token_text(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The id of a vocabulary entry or special token, spelled as stored.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.inner.token_to_id(text)
    }

    /// Whether `id` is a special (control) token, such as `<|im_start|>`.
    pub fn is_special(&self, id: u32) -> bool {
        self.special_ids.binary_search(&id).is_ok()
    }

    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// Every token that ends a generation: eos, then end-of-turn tokens such as `<|im_end|>`.
    pub fn eos_tokens(&self) -> &[u32] {
        &self.eos_tokens
    }

    pub fn is_eos(&self, id: u32) -> bool {
        self.eos_tokens.contains(&id)
    }

    /// Whether `encode(.., true)` prepends bos.
    pub fn adds_bos(&self) -> bool {
        self.add_bos
    }

    /// One past the largest token id (the model's embedding table may be larger).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// The bos token's text, for chat templates (`bos_token`).
    pub fn bos_text(&self) -> Option<String> {
        self.bos.and_then(|id| self.token_text(id))
    }

    /// The eos token's text, for chat templates (`eos_token`).
    pub fn eos_text(&self) -> Option<String> {
        self.eos.and_then(|id| self.token_text(id))
    }

    /// The model's own Jinja chat template, if its files carry one.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }
}

fn read_limited(path: &Path) -> Result<Vec<u8>, TokenizerError> {
    let io = |error| TokenizerError::Io { path: path.to_owned(), error };
    let size = std::fs::metadata(path).map_err(io)?.len();
    if size > MAX_TOKENIZER_FILE_BYTES {
        return Err(TokenizerError::FileTooLarge {
            path: path.to_owned(),
            size,
            max: MAX_TOKENIZER_FILE_BYTES,
        });
    }
    std::fs::read(path).map_err(io)
}
