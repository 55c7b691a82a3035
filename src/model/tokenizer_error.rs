//! What can go wrong building a tokenizer or encoding a text. A leaf of the tokenizer files, so
//! that they can all name it without importing each other.

use std::path::PathBuf;

#[derive(Debug)]
pub enum TokenizerError {
    /// The model's files carry no tokenizer (no `tokenizer.ggml.*` keys, no tokenizer.json).
    NoTokenizer { path: PathBuf },
    /// A tokenizer file could not be read.
    Io { path: PathBuf, error: std::io::Error },
    /// A tokenizer file is larger than `tokenizer::MAX_TOKENIZER_FILE_BYTES`.
    FileTooLarge { path: PathBuf, size: u64, max: u64 },
    /// tokenizer.json or tokenizer_config.json is not what the format says.
    BadJson { what: String, detail: String },
    /// A GGUF metadata key the tokenizer needs is absent or of the wrong type.
    MissingKey { key: &'static str, expected: &'static str },
    /// `tokenizer.ggml.model` names a kind of tokenizer we do not build.
    UnsupportedModel { model: String },
    /// `tokenizer.ggml.pre` names a pre-tokenizer we have no split rules for.
    UnknownPreTokenizer { name: String, known: &'static [&'static str] },
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
    /// The text to encode is longer than `tokenizer::MAX_ENCODE_BYTES`.
    TextTooLong { len: usize, max: usize },
    /// The `tokenizers` crate failed to encode a text.
    Encode { detail: String },
}

impl std::fmt::Display for TokenizerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use TokenizerError::*;
        match self {
            NoTokenizer { path } => {
                write!(f, "{} has no tokenizer (no tokenizer.ggml.* metadata, no tokenizer.json)", path.display())
            }
            Io { path, error } => write!(f, "cannot read {}: {error}", path.display()),
            FileTooLarge { path, size, max } => {
                write!(f, "{} is {size} bytes, more than the {max} a tokenizer file may be", path.display())
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
            UnknownPreTokenizer { name, known } => write!(
                f,
                "tokenizer.ggml.pre is '{name}', a pre-tokenizer without known split rules \
                 (known: {})",
                known.join(", ")
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
                write!(f, "text of {len} bytes is longer than the {max} bytes the tokenizer accepts")
            }
            Encode { detail } => write!(f, "cannot encode the text: {detail}"),
        }
    }
}

impl std::error::Error for TokenizerError {}
