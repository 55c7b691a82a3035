//! Architecture hyper-parameters, read from GGUF metadata or from a Hugging Face `config.json`.

use super::error::ModelError;
use super::metadata::Metadata;
use super::tensor_set::TensorSet;
use std::path::Path;

/// Bounds that keep a corrupt config from sizing absurd buffers (they are far above any model
/// this server can run on a CPU).
const MAX_LAYERS: u64 = 1024;
/// Width bound for hidden size, feed-forward size and heads × head_dim.
const MAX_WIDTH: u64 = 1 << 20;
const MAX_HEADS: u64 = 4096;
const MAX_VOCAB: u64 = 1 << 22;
/// Context lengths beyond 16M positions are certainly corrupt.
const MAX_CONTEXT: u64 = 1 << 24;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
    Gemma3,
}

impl Arch {
    pub fn parse(name: &str) -> Option<Arch> {
        match name {
            "llama" => Some(Arch::Llama),
            "qwen2" => Some(Arch::Qwen2),
            "qwen3" => Some(Arch::Qwen3),
            "gemma3" => Some(Arch::Gemma3),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma3 => "gemma3",
        }
    }
}

/// Gemma 3's default: five sliding-window layers, then a global one (llama.cpp's
/// `set_swa_pattern(6)`; the GGUF converter writes no key for it).
const GEMMA3_GLOBAL_EVERY: usize = 6;
/// Gemma 3's RoPE base on its sliding-window layers (`rope_local_base_freq`).
const GEMMA3_LOCAL_THETA: f32 = 10_000.0;

/// Sliding-window attention on some layers: each sees only the last `window` positions, with
/// its own RoPE base; every `global_every`-th layer (the last of each run) attends causally.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sliding {
    pub window: usize,
    pub global_every: usize,
    pub local_theta: f32,
}

impl Sliding {
    /// Whether layer `l` is one of the sliding-window layers.
    pub fn is_local(&self, l: usize) -> bool {
        !(l + 1).is_multiple_of(self.global_every)
    }
}

/// How RoPE pairs the values of a head. Which one the forward pass must use depends on the
/// architecture AND the file format, because llama.cpp's converter rewrites llama weights:
///
/// - Hugging Face llama, qwen2 and qwen3 checkpoints are written for `rotate_half`: value `i`
///   rotates with value `i + head_dim/2` (NeoX layout).
/// - llama.cpp's `convert_hf_to_gguf.py` permutes the rows of Q and K of *llama* models (its
///   `LlamaModel.permute`) so that, after conversion, value `2i` rotates with `2i + 1` — ggml's
///   "normal" RoPE. A GGUF llama file must therefore use [`RopeLayout::Interleaved`]; applying NeoX to
///   it (or Normal to the HF original) gives a model that runs but talks nonsense.
/// - qwen2 and qwen3 are not permuted by the converter; llama.cpp runs them with NeoX RoPE, so
///   both their GGUF and HF forms use [`RopeLayout::NeoX`].
pub use crate::backend::RopeLayout;

#[derive(Clone, Debug, PartialEq)]
pub struct HParams {
    pub arch: Arch,
    pub n_layers: usize,
    pub hidden: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// Feed-forward (SwiGLU) inner width.
    pub ffn: usize,
    pub vocab: usize,
    pub context_length: usize,
    pub rope_theta: f32,
    pub rms_eps: f32,
    /// The output head reuses the token embeddings.
    pub tied_embeddings: bool,
    pub rope_layout: RopeLayout,
    /// Per-head RMSNorm of q and k before RoPE (qwen3).
    pub qk_norm: bool,
    /// Biases on the q, k and v projections (qwen2).
    pub qkv_bias: bool,
    /// Bias on the attention output projection (llama with `attention_bias`).
    pub o_bias: bool,
    /// Sliding-window layers (Gemma 3).
    pub sliding: Option<Sliding>,
    /// A norm on the attention's and the feed-forward's outputs before each residual add
    /// (Gemma 3's four norms per block).
    pub post_norms: bool,
    /// Token embeddings are scaled by `sqrt(hidden)` (Gemma).
    pub embed_scale: bool,
    /// The feed-forward's gate goes through GELU (tanh form) rather than SiLU (Gemma).
    pub gelu: bool,
}

fn bad(file: &Path, key: &str, problem: String) -> ModelError {
    ModelError::BadValue { file: file.to_path_buf(), key: key.to_string(), problem }
}

/// A count read from a file: present (unless `default`), an integer, within `1..=max`.
fn count(file: &Path, key: &str, v: Option<u64>, present: bool, max: u64) -> Result<usize, ModelError> {
    match v {
        Some(n) if (1..=max).contains(&n) => Ok(n as usize),
        Some(n) => Err(bad(file, key, format!("{n} is outside 1..={max}"))),
        None if present => Err(bad(file, key, "not a non-negative integer".into())),
        None => Err(ModelError::MissingKey { file: file.to_path_buf(), key: key.to_string() }),
    }
}

fn positive_f32(file: &Path, key: &str, v: f64) -> Result<f32, ModelError> {
    let x = v as f32;
    if x.is_finite() && x > 0.0 {
        Ok(x)
    } else {
        Err(bad(file, key, format!("{v} is not a positive finite number")))
    }
}

impl HParams {
    /// From GGUF metadata (`{arch}.block_count` …); `tensors` tell whether the output head is
    /// tied (no `output.weight`) and whether q/k/v carry biases.
    pub fn from_gguf(meta: &Metadata, tensors: &TensorSet, file: &Path) -> Result<HParams, ModelError> {
        let arch_name = meta
            .get_str("general.architecture")
            .ok_or_else(|| ModelError::MissingKey { file: file.to_path_buf(), key: "general.architecture".into() })?;
        let arch = Arch::parse(arch_name)
            .ok_or_else(|| ModelError::UnknownArchitecture { file: file.to_path_buf(), arch: arch_name.to_string() })?;
        let a = arch.name();
        let get = |key: &str, max: u64| -> Result<usize, ModelError> {
            let k = format!("{a}.{key}");
            count(file, &k, meta.get_u64(&k), meta.get(&k).is_some(), max)
        };
        let opt = |key: &str, max: u64| -> Result<Option<usize>, ModelError> {
            if meta.get(&format!("{a}.{key}")).is_some() {
                get(key, max).map(Some)
            } else {
                Ok(None)
            }
        };
        let block_count = get("block_count", MAX_LAYERS)?;
        // llama.cpp's converter counts a checkpoint's MTP ("NextN") blocks in block_count and says
        // how many of the last blocks they are in nextn_predict_layers: the trunk is the rest.
        let nextn_key = format!("{a}.nextn_predict_layers");
        let n_layers = match meta.get(&nextn_key).map(|_| meta.get_u64(&nextn_key)) {
            None | Some(Some(0)) => block_count,
            Some(Some(n)) if n < block_count as u64 => block_count - n as usize,
            Some(Some(n)) => {
                let problem = format!("{n} MTP blocks leave no trunk of the {block_count} blocks");
                return Err(bad(file, &nextn_key, problem));
            }
            Some(None) => return Err(bad(file, &nextn_key, "not a non-negative integer".into())),
        };
        let hidden = get("embedding_length", MAX_WIDTH)?;
        let n_heads = get("attention.head_count", MAX_HEADS)?;
        let n_kv_heads = opt("attention.head_count_kv", MAX_HEADS)?.unwrap_or(n_heads);
        let head_dim = match opt("attention.key_length", MAX_WIDTH)? {
            Some(d) => d,
            None => hidden / n_heads,
        };
        if let Some(v) = opt("attention.value_length", MAX_WIDTH)? {
            if v != head_dim {
                return Err(bad(
                    file,
                    &format!("{a}.attention.value_length"),
                    format!("{v} differs from the key length {head_dim}"),
                ));
            }
        }
        if let Some(r) = opt("rope.dimension_count", MAX_WIDTH)? {
            if r != head_dim {
                return Err(bad(
                    file,
                    &format!("{a}.rope.dimension_count"),
                    format!("partial rotary ({r} of {head_dim} dimensions) is not supported"),
                ));
            }
        }
        let ffn = get("feed_forward_length", MAX_WIDTH)?;
        let context_length = get("context_length", MAX_CONTEXT)?;
        // The vocabulary: the explicit key, else the tokenizer's token list, else the embeddings.
        let vocab = match opt("vocab_size", MAX_VOCAB)? {
            Some(v) => v,
            None => match meta.get("tokenizer.ggml.tokens").and_then(|t| t.as_array()) {
                Some(t) => count(file, "tokenizer.ggml.tokens", Some(t.len() as u64), true, MAX_VOCAB)?,
                None => {
                    let emb = tensors.get("token_embd.weight").ok_or_else(|| ModelError::MissingTensor {
                        file: file.to_path_buf(),
                        tensor: "token_embd.weight".into(),
                    })?;
                    count(
                        file,
                        "token_embd.weight rows",
                        Some(emb.shape.last().copied().unwrap_or(0) as u64),
                        true,
                        MAX_VOCAB,
                    )?
                }
            },
        };
        let rope_theta = match meta.get_f64(&format!("{a}.rope.freq_base")) {
            Some(v) => positive_f32(file, &format!("{a}.rope.freq_base"), v)?,
            None => 10_000.0, // llama.cpp's default when the key is absent
        };
        if let Some(kind) = meta.get_str(&format!("{a}.rope.scaling.type")).filter(|k| *k != "none") {
            let problem = format!("RoPE scaling of type {kind:?} is not supported");
            return Err(bad(file, &format!("{a}.rope.scaling.type"), problem));
        }
        let sliding = match (arch, opt("attention.sliding_window", MAX_CONTEXT)?) {
            (Arch::Gemma3, Some(window)) => Some(Sliding {
                window,
                global_every: opt("attention.sliding_window_pattern", MAX_LAYERS)?.unwrap_or(GEMMA3_GLOBAL_EVERY),
                local_theta: GEMMA3_LOCAL_THETA,
            }),
            (Arch::Gemma3, None) => {
                let key = format!("{a}.attention.sliding_window");
                return Err(ModelError::MissingKey { file: file.to_path_buf(), key });
            }
            (_, Some(_)) => {
                let problem = format!("sliding-window attention is supported for gemma3, not for {a}");
                return Err(bad(file, &format!("{a}.attention.sliding_window"), problem));
            }
            (_, None) => None,
        };
        let gemma = arch == Arch::Gemma3;
        let eps_key = format!("{a}.attention.layer_norm_rms_epsilon");
        let rms_eps = match meta.get_f64(&eps_key) {
            Some(v) => positive_f32(file, &eps_key, v)?,
            None => return Err(ModelError::MissingKey { file: file.to_path_buf(), key: eps_key }),
        };
        let hp = HParams {
            arch,
            n_layers,
            hidden,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn,
            vocab,
            context_length,
            rope_theta,
            rms_eps,
            tied_embeddings: !tensors.contains("output.weight"),
            rope_layout: if arch == Arch::Llama { RopeLayout::Interleaved } else { RopeLayout::NeoX },
            qk_norm: arch == Arch::Qwen3 || gemma,
            qkv_bias: arch == Arch::Qwen2 || tensors.contains("blk.0.attn_q.bias"),
            o_bias: tensors.contains("blk.0.attn_output.bias"),
            sliding,
            post_norms: gemma,
            embed_scale: gemma,
            gelu: gemma,
        };
        hp.check(file)
    }

    /// From a Hugging Face `config.json` (already parsed); `file` names it in errors.
    pub fn from_hf_config(cfg: &serde_json::Value, file: &Path) -> Result<HParams, ModelError> {
        let model_type = cfg
            .get("model_type")
            .and_then(|v| v.as_str())
            .ok_or_else(|| ModelError::MissingKey { file: file.to_path_buf(), key: "model_type".into() })?;
        let arch = Arch::parse(model_type).ok_or_else(|| ModelError::UnknownArchitecture {
            file: file.to_path_buf(),
            arch: model_type.to_string(),
        })?;
        if arch == Arch::Gemma3 {
            let problem = "gemma3 is read from GGUF files (llama.cpp's convert_hf_to_gguf.py makes one)".to_string();
            return Err(bad(file, "model_type", problem));
        }
        let get = |key: &str, max: u64| {
            count(file, key, cfg.get(key).and_then(|v| v.as_u64()), cfg.get(key).is_some_and(|v| !v.is_null()), max)
        };
        let has = |key: &str| cfg.get(key).is_some_and(|v| !v.is_null());
        let flag = |key: &str, default: bool| -> Result<bool, ModelError> {
            match cfg.get(key) {
                None | Some(serde_json::Value::Null) => Ok(default),
                Some(v) => v.as_bool().ok_or_else(|| bad(file, key, format!("{v} is not a boolean"))),
            }
        };
        let float = |key: &str, default: Option<f64>| -> Result<f32, ModelError> {
            match cfg.get(key).filter(|v| !v.is_null()) {
                Some(v) => {
                    positive_f32(file, key, v.as_f64().ok_or_else(|| bad(file, key, format!("{v} is not a number")))?)
                }
                None => default
                    .map(|d| d as f32)
                    .ok_or_else(|| ModelError::MissingKey { file: file.to_path_buf(), key: key.to_string() }),
            }
        };
        let n_layers = get("num_hidden_layers", MAX_LAYERS)?;
        let hidden = get("hidden_size", MAX_WIDTH)?;
        let n_heads = get("num_attention_heads", MAX_HEADS)?;
        let n_kv_heads = if has("num_key_value_heads") { get("num_key_value_heads", MAX_HEADS)? } else { n_heads };
        let head_dim = if has("head_dim") { get("head_dim", MAX_WIDTH)? } else { hidden / n_heads };
        if let Some(s) = cfg.get("rope_scaling").filter(|v| !v.is_null()) {
            let kind = s.get("rope_type").or_else(|| s.get("type")).and_then(|v| v.as_str()).unwrap_or("?");
            if kind != "default" {
                return Err(bad(file, "rope_scaling", format!("RoPE scaling of type {kind:?} is not supported")));
            }
        }
        if flag("mlp_bias", false)? {
            return Err(bad(file, "mlp_bias", "biases on the feed-forward projections are not supported".into()));
        }
        let attention_bias = flag("attention_bias", false)?;
        // Newer transformers releases move rope_theta into `rope_parameters`.
        let rope_theta = match cfg.get("rope_parameters").and_then(|p| p.get("rope_theta")).and_then(|v| v.as_f64()) {
            Some(v) if !has("rope_theta") => positive_f32(file, "rope_parameters.rope_theta", v)?,
            _ => float("rope_theta", Some(10_000.0))?,
        };
        let hp = HParams {
            arch,
            n_layers,
            hidden,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn: get("intermediate_size", MAX_WIDTH)?,
            vocab: get("vocab_size", MAX_VOCAB)?,
            context_length: get("max_position_embeddings", MAX_CONTEXT)?,
            rope_theta,
            rms_eps: float("rms_norm_eps", None)?,
            // The transformers classes of all three default to untied.
            tied_embeddings: flag("tie_word_embeddings", false)?,
            rope_layout: RopeLayout::NeoX,
            qk_norm: arch == Arch::Qwen3,
            // Qwen2 always has q/k/v biases (its attention ignores `attention_bias`); llama and
            // qwen3 put biases on q, k, v and o when `attention_bias` is set.
            qkv_bias: arch == Arch::Qwen2 || attention_bias,
            o_bias: arch != Arch::Qwen2 && attention_bias,
            sliding: None,
            post_norms: false,
            embed_scale: false,
            gelu: false,
        };
        hp.check(file)
    }

    /// Cross-field checks every source must pass.
    fn check(self, file: &Path) -> Result<HParams, ModelError> {
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return Err(bad(
                file,
                "head_dim",
                format!("{} is not a positive even number (RoPE rotates pairs)", self.head_dim),
            ));
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return Err(bad(
                file,
                "n_kv_heads",
                format!("{} does not divide the {} attention heads", self.n_kv_heads, self.n_heads),
            ));
        }
        if self.n_heads as u64 * self.head_dim as u64 > MAX_WIDTH {
            return Err(bad(
                file,
                "head_dim",
                format!("{} heads of {} exceed the width limit {MAX_WIDTH}", self.n_heads, self.head_dim),
            ));
        }
        Ok(self)
    }

    /// Width of the q projection's output (all heads).
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    /// Width of the k and v projections' outputs.
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
