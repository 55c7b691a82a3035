//! Model files, tokenizer, chat template and architectures.
//!
//! Everything above this layer sees a model through the [`Model`] trait: feed tokens of one or
//! more sequences, each with its own [`KvCache`], and get logits back.

pub mod arch;
pub mod catalogue;
mod chat_literal;
pub mod chat_template;
pub mod config;
mod decoder;
pub mod error;
pub mod fetch;
pub mod gguf;
pub mod gguf_split;
pub mod gguf_write;
pub mod hub;
pub mod kv;
pub mod llama;
pub mod load;
pub mod metadata;
pub mod model_files;
pub mod mtp;
pub mod safetensors;
pub mod sha256;
pub mod tensor;
pub mod tensor_set;
#[cfg(test)]
pub(crate) mod test_models;
pub mod tokenizer;
mod tokenizer_bytes;
mod tokenizer_chat;
mod tokenizer_chunks;
mod tokenizer_cover;
mod tokenizer_error;
mod tokenizer_gguf;
mod tokenizer_spm;
pub mod weights;

use crate::backend::KvFormat;
pub use chat_template::{ChatMessage, ChatTemplate, TemplateError};
pub use config::{Arch, HParams, RopeLayout};
pub use error::ModelError;
pub use gguf::GgufFile;
pub use kv::{KvCache, KvFootprint};
pub use metadata::{MetaValue, Metadata};
pub use model_files::{Format, ModelFiles, TokenizerSource};
pub use tensor::Tensor;
pub use tensor_set::TensorSet;
pub use tokenizer::{ChatPrompt, Tokenizer, TokenizerError};
pub use weights::{LayerWeights, ModelWeights};

/// What the layers above need to know of a loaded model.
#[derive(Clone, Debug)]
pub struct ModelInfo {
    /// `llama`, `qwen2`, `qwen3`.
    pub arch: String,
    /// A human name (from the file's metadata, or the file name).
    pub name: String,
    pub vocab_size: usize,
    /// The context length the model was trained for.
    pub context_length: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub hidden: usize,
    pub bos_token: Option<u32>,
    /// Tokens that end a generation (eos, and e.g. `<|im_end|>`, `<|eot_id|>`).
    pub eos_tokens: Vec<u32>,
}

/// Which logits a sequence wants back from a forward pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogitsWanted {
    /// Only for its last token (prefill, plain decode).
    Last,
    /// For every token fed (speculative verification, teacher-forced evaluation).
    All,
}

/// One sequence's share of a batched forward pass.
pub struct SeqBatch<'a> {
    /// Tokens to append, at positions `cache.len()..cache.len() + tokens.len()`.
    pub tokens: &'a [u32],
    pub cache: &'a mut KvCache,
    pub logits: LogitsWanted,
}

#[derive(Debug)]
pub enum ForwardError {
    /// The sequence would grow past its cache's capacity.
    ContextFull { needed: usize, capacity: usize },
    /// A token id outside the vocabulary.
    BadToken { token: u32, vocab_size: usize },
    /// The device running the model failed (lost, out of memory): what it said.
    Device(String),
}

impl std::fmt::Display for ForwardError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ForwardError::ContextFull { needed, capacity } => {
                write!(f, "sequence needs {needed} positions but its cache holds at most {capacity}")
            }
            ForwardError::BadToken { token, vocab_size } => {
                write!(f, "token id {token} is outside the vocabulary (size {vocab_size})")
            }
            ForwardError::Device(e) => write!(f, "the GPU failed: {e}"),
        }
    }
}

impl std::error::Error for ForwardError {}

/// A loaded language model. Implementations own their weights and are driven from one thread
/// (the decode thread) at a time; `Sync` lets that thread share them with its worker pool.
pub trait Model: Send + Sync {
    fn info(&self) -> &ModelInfo;

    /// How this model's caches store keys and values: the format its backend's attention reads.
    fn kv_format(&self) -> KvFormat {
        KvFormat::F16
    }

    /// An empty cache for one sequence of at most `capacity` positions.
    fn new_cache(&self, capacity: usize) -> KvCache {
        let i = self.info();
        KvCache::new(i.n_layers, i.n_kv_heads * i.head_dim, capacity, self.kv_format())
    }

    /// Runs every sequence of `batch` forward by its tokens, in one pass that reads each weight
    /// once for all rows, appending to each cache. Returns, per sequence, its logits rows
    /// concatenated (`vocab_size` values each: one row for `Last`, `tokens.len()` for `All`).
    fn forward(&self, batch: &mut [SeqBatch<'_>]) -> Result<Vec<Vec<f32>>, ForwardError>;

    /// The trunk side of multi-token prediction (hidden states, shared weights), where this
    /// model supports an MTP head; `None` otherwise.
    fn mtp_trunk(&self) -> Option<&dyn mtp::MtpTrunk> {
        None
    }

    /// One step as the engine runs it: [`Model::forward`], with `hidden` also the last layer's
    /// rows an MTP head reads (where the model is a trunk), and with `argmax` only each wanted
    /// row's most likely token (`backend::math::argmax`'s pick) instead of its logits, for a
    /// step whose every sequence picks greedily and reads nothing else of the row. A device
    /// backend then reads back ids, not rows of logits; this default picks on the host.
    fn step(&self, batch: &mut [SeqBatch<'_>], hidden: bool, argmax: bool) -> Result<mtp::ForwardOutput, ForwardError> {
        let mut out = match self.mtp_trunk() {
            Some(trunk) if hidden => trunk.forward_hidden(batch)?,
            _ => mtp::ForwardOutput { logits: self.forward(batch)?, ..Default::default() },
        };
        if argmax {
            let vocab = self.info().vocab_size.max(1);
            let rows = std::mem::take(&mut out.logits);
            out.tokens =
                rows.iter().map(|l| l.chunks_exact(vocab).map(crate::backend::math::argmax).collect()).collect();
            out.logits = rows.iter().map(|_| Vec::new()).collect();
        }
        Ok(out)
    }

    /// The device's counters and fault, where the model runs on a device backend.
    fn device_stats(&self) -> Option<crate::backend::DeviceStats> {
        None
    }
}
