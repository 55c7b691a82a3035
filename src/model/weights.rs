//! The weights the forward pass uses, by logical role, whatever the file format called them;
//! every shape is checked against the hyper-parameters at load time, so the forward pass can
//! index without checks of its own.
//!
//! Shapes are outermost first: a projection from `n` to `m` values is `[m, n]` (one row per
//! output), as in PyTorch and as the GGUF reader presents ggml's `ne = [n, m]`.

use super::config::{HParams, RopeLayout};
use super::error::ModelError;
use super::tensor::Tensor;
use super::tensor_set::TensorSet;
use std::path::Path;

/// Which naming scheme a tensor set uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Naming {
    /// llama.cpp's GGUF names (`blk.0.attn_q.weight`).
    Gguf,
    /// Hugging Face transformers names (`model.layers.0.self_attn.q_proj.weight`).
    HuggingFace,
}

/// The role of a weight inside one transformer block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    AttnNorm,
    Q,
    K,
    V,
    O,
    QBias,
    KBias,
    VBias,
    OBias,
    QNorm,
    KNorm,
    FfnNorm,
    Gate,
    Up,
    Down,
    PostAttnNorm,
    PostFfnNorm,
}

impl Naming {
    pub fn layer(self, layer: usize, slot: Slot) -> String {
        match self {
            Naming::Gguf => format!("blk.{layer}.{}", self.slot(slot)),
            Naming::HuggingFace => format!("model.layers.{layer}.{}", self.slot(slot)),
        }
    }

    /// A block tensor's name inside its block (`attn_q.weight`, `self_attn.q_proj.weight`): what
    /// follows the block's prefix, which an MTP head's block has its own of (`mtp.layers.0.`).
    pub fn slot(self, slot: Slot) -> &'static str {
        use Slot::*;
        match self {
            Naming::Gguf => match slot {
                AttnNorm => "attn_norm.weight",
                Q => "attn_q.weight",
                K => "attn_k.weight",
                V => "attn_v.weight",
                O => "attn_output.weight",
                QBias => "attn_q.bias",
                KBias => "attn_k.bias",
                VBias => "attn_v.bias",
                OBias => "attn_output.bias",
                QNorm => "attn_q_norm.weight",
                KNorm => "attn_k_norm.weight",
                FfnNorm => "ffn_norm.weight",
                Gate => "ffn_gate.weight",
                Up => "ffn_up.weight",
                Down => "ffn_down.weight",
                PostAttnNorm => "post_attention_norm.weight",
                PostFfnNorm => "post_ffw_norm.weight",
            },
            Naming::HuggingFace => match slot {
                AttnNorm => "input_layernorm.weight",
                Q => "self_attn.q_proj.weight",
                K => "self_attn.k_proj.weight",
                V => "self_attn.v_proj.weight",
                O => "self_attn.o_proj.weight",
                QBias => "self_attn.q_proj.bias",
                KBias => "self_attn.k_proj.bias",
                VBias => "self_attn.v_proj.bias",
                OBias => "self_attn.o_proj.bias",
                QNorm => "self_attn.q_norm.weight",
                KNorm => "self_attn.k_norm.weight",
                FfnNorm => "post_attention_layernorm.weight",
                Gate => "mlp.gate_proj.weight",
                Up => "mlp.up_proj.weight",
                Down => "mlp.down_proj.weight",
                // Gemma's names. Its FFN norm is `pre_feedforward_layernorm`, and its
                // `post_attention_layernorm` is this slot, not llama's FFN norm: Hugging Face
                // Gemma checkpoints are refused at the config until their naming is read whole.
                PostAttnNorm => "post_attention_layernorm.weight",
                PostFfnNorm => "post_feedforward_layernorm.weight",
            },
        }
    }

    pub fn embed(self) -> &'static str {
        match self {
            Naming::Gguf => "token_embd.weight",
            Naming::HuggingFace => "model.embed_tokens.weight",
        }
    }

    pub fn output_norm(self) -> &'static str {
        match self {
            Naming::Gguf => "output_norm.weight",
            Naming::HuggingFace => "model.norm.weight",
        }
    }

    pub fn output(self) -> &'static str {
        match self {
            Naming::Gguf => "output.weight",
            Naming::HuggingFace => "lm_head.weight",
        }
    }
}

/// The weights of one transformer block.
#[derive(Clone, Debug)]
pub struct LayerWeights {
    /// `[hidden]`
    pub attn_norm: Tensor,
    /// `[n_heads * head_dim, hidden]`
    pub wq: Tensor,
    /// `[n_kv_heads * head_dim, hidden]`
    pub wk: Tensor,
    /// `[n_kv_heads * head_dim, hidden]`
    pub wv: Tensor,
    /// `[hidden, n_heads * head_dim]`
    pub wo: Tensor,
    /// `[n_heads * head_dim]`, `[n_kv_heads * head_dim]` ×2, when `HParams::qkv_bias`.
    pub bq: Option<Tensor>,
    pub bk: Option<Tensor>,
    pub bv: Option<Tensor>,
    /// `[hidden]`, when `HParams::o_bias`.
    pub bo: Option<Tensor>,
    /// `[head_dim]` each, shared by all heads, when `HParams::qk_norm` (qwen3).
    pub q_norm: Option<Tensor>,
    pub k_norm: Option<Tensor>,
    /// `[hidden]`
    pub ffn_norm: Tensor,
    /// `[ffn, hidden]`
    pub w_gate: Tensor,
    /// `[ffn, hidden]`
    pub w_up: Tensor,
    /// `[hidden, ffn]`
    pub w_down: Tensor,
    /// `[hidden]` each, when `HParams::post_norms` (Gemma 3): on the attention's and the
    /// feed-forward's outputs, before each residual add.
    pub post_attn_norm: Option<Tensor>,
    pub post_ffn_norm: Option<Tensor>,
}

/// All weights of a model, checked against its [`HParams`].
#[derive(Clone, Debug)]
pub struct ModelWeights {
    /// `[vocab, hidden]`
    pub embed: Tensor,
    pub layers: Vec<LayerWeights>,
    /// `[hidden]`
    pub output_norm: Tensor,
    /// `[vocab, hidden]`: the output head, or a second handle on `embed` when tied.
    pub output: Tensor,
    /// The RoPE pairing these Q/K weights need; see [`RopeLayout`] for why it depends on the
    /// source format (it equals `HParams::rope_layout`, repeated here so the forward pass
    /// cannot pick up weights without it).
    pub rope_layout: RopeLayout,
}

/// Picks tensors by name from a set, checking each one's shape; `file` names the model in errors.
pub struct Picker<'a> {
    pub tensors: &'a TensorSet,
    pub file: &'a Path,
}

impl Picker<'_> {
    /// The tensor `name`, which must have exactly `shape`: [`ModelError::MissingTensor`] or
    /// [`ModelError::WrongShape`] (naming the tensor and both shapes) otherwise.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<Tensor, ModelError> {
        let t = self
            .tensors
            .get(name)
            .ok_or_else(|| ModelError::MissingTensor { file: self.file.to_path_buf(), tensor: name.to_string() })?;
        if t.shape != shape {
            return Err(ModelError::WrongShape {
                file: self.file.to_path_buf(),
                tensor: name.to_string(),
                expected: shape.to_vec(),
                found: t.shape.clone(),
            });
        }
        Ok(t.clone())
    }

    fn opt(&self, want: bool, name: &str, shape: &[usize]) -> Result<Option<Tensor>, ModelError> {
        if want {
            self.get(name, shape).map(Some)
        } else {
            Ok(None)
        }
    }

    /// One transformer block of `hp`'s shapes, each slot's tensor named by `name`. The trunk's
    /// layers and an MTP head's layer (which sits under other names) are read by this one path.
    pub fn layer(&self, hp: &HParams, name: &dyn Fn(Slot) -> String) -> Result<LayerWeights, ModelError> {
        let (h, q, kv, ffn) = (hp.hidden, hp.q_dim(), hp.kv_dim(), hp.ffn);
        Ok(LayerWeights {
            attn_norm: self.get(&name(Slot::AttnNorm), &[h])?,
            wq: self.get(&name(Slot::Q), &[q, h])?,
            wk: self.get(&name(Slot::K), &[kv, h])?,
            wv: self.get(&name(Slot::V), &[kv, h])?,
            wo: self.get(&name(Slot::O), &[h, q])?,
            bq: self.opt(hp.qkv_bias, &name(Slot::QBias), &[q])?,
            bk: self.opt(hp.qkv_bias, &name(Slot::KBias), &[kv])?,
            bv: self.opt(hp.qkv_bias, &name(Slot::VBias), &[kv])?,
            bo: self.opt(hp.o_bias, &name(Slot::OBias), &[h])?,
            q_norm: self.opt(hp.qk_norm, &name(Slot::QNorm), &[hp.head_dim])?,
            k_norm: self.opt(hp.qk_norm, &name(Slot::KNorm), &[hp.head_dim])?,
            ffn_norm: self.get(&name(Slot::FfnNorm), &[h])?,
            w_gate: self.get(&name(Slot::Gate), &[ffn, h])?,
            w_up: self.get(&name(Slot::Up), &[ffn, h])?,
            w_down: self.get(&name(Slot::Down), &[h, ffn])?,
            post_attn_norm: self.opt(hp.post_norms, &name(Slot::PostAttnNorm), &[h])?,
            post_ffn_norm: self.opt(hp.post_norms, &name(Slot::PostFfnNorm), &[h])?,
        })
    }
}

impl ModelWeights {
    /// Picks and checks every weight `hp` calls for; `file` names the model in errors.
    pub fn from_tensors(
        tensors: &TensorSet,
        naming: Naming,
        hp: &HParams,
        file: &Path,
    ) -> Result<ModelWeights, ModelError> {
        let p = Picker { tensors, file };
        let h = hp.hidden;
        let embed = p.get(naming.embed(), &[hp.vocab, h])?;
        let layers = (0..hp.n_layers).map(|l| p.layer(hp, &|s| naming.layer(l, s))).collect::<Result<Vec<_>, _>>()?;
        let output_norm = p.get(naming.output_norm(), &[h])?;
        // Tied checkpoints sometimes still store a copy of the head; the embeddings win, as in
        // transformers, where tying replaces the head's parameter with the embedding's.
        let output = if hp.tied_embeddings { embed.clone() } else { p.get(naming.output(), &[hp.vocab, h])? };
        Ok(ModelWeights { embed, layers, output_norm, output, rope_layout: hp.rope_layout })
    }
}

#[cfg(test)]
#[path = "weights_tests.rs"]
mod tests;
