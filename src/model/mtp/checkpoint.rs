//! An MTP head stored in the model's own checkpoint, beside its trunk, in one of three namings:
//!
//! - Qwen3-Next / Qwen3.5 (Hugging Face): `mtp.fc`, `mtp.pre_fc_norm_embedding`,
//!   `mtp.pre_fc_norm_hidden`, a full decoder block `mtp.layers.0.*` and `mtp.norm`;
//! - DeepSeek-V3 (Hugging Face): one more block after the trunk's, `model.layers.{n}` with
//!   `n = num_hidden_layers`, carrying `eh_proj`, `enorm`, `hnorm` and `shared_head.norm` beside
//!   the usual block tensors;
//! - llama.cpp's GGUF: block `blk.{n}` with `nextn.eh_proj`, `nextn.enorm`, `nextn.hnorm` and
//!   `nextn.shared_head_norm` beside the usual `attn_*` / `ffn_*` tensors, where llama.cpp's
//!   converter counts the block in `{arch}.block_count` and says so in
//!   `{arch}.nextn_predict_layers` (the trunk's block count then leaves it out, `config.rs`).
//!
//! Each naming is only a map from roles to names: the tensors feed the same [`MtpHead::new`] as a
//! sidecar's do. Such a head belongs to its trunk by construction (no hash to check) and drafts
//! over the whole vocabulary: a checkpoint carries no sub-vocabulary. Its embedding and output
//! head are the trunk's (DeepSeek's per-head `embed_tokens` / `shared_head.head` copies, and
//! GGUF's `nextn.embed_tokens` / `nextn.shared_head_head`, are the same matrices and are not read
//! again). Where a checkpoint has several MTP blocks, the first is the head: chaining it gives
//! the deeper drafts, as for a sidecar.

use super::head::{HeadShape, HeadWeights, MtpHead};
use super::MtpTrunk;
use crate::backend::Heads;
use crate::model::weights::{Naming, Picker, Slot};
use crate::model::{Format, ModelError, ModelFiles};

/// Where, and under which names, a checkpoint keeps its MTP head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointNaming {
    /// Qwen3-Next / Qwen3.5: `mtp.*`.
    Qwen,
    /// DeepSeek-V3: the block `model.layers.{block}` after the trunk's last.
    DeepSeek { block: usize },
    /// llama.cpp GGUF: the block `blk.{block}` after the trunk's last, its head tensors `nextn.*`.
    Gguf { block: usize },
}

impl CheckpointNaming {
    /// The naming of the head `files` carry, if they carry one. A checkpoint that has any of
    /// the head's tensors, or (GGUF) says it has a head, has one: missing or misshapen tensors
    /// are then an error of [`CheckpointNaming::weights`], never a silent "no head".
    pub fn detect(files: &ModelFiles) -> Option<CheckpointNaming> {
        let n = files.hparams.n_layers;
        match files.format {
            Format::Gguf => {
                let key = format!("{}.nextn_predict_layers", files.hparams.arch.name());
                let count = files.metadata.get_u64(&key).unwrap_or(0);
                (count > 0).then_some(CheckpointNaming::Gguf { block: n })
            }
            Format::HuggingFace => {
                let extra = format!("model.layers.{n}.");
                let names = || files.tensors.iter().map(|t| t.name.as_str());
                let in_extra = || names().filter_map(|name| name.strip_prefix(extra.as_str()));
                // A block past the trunk's is an MTP block when the config says there is one or
                // it has a head's own tensors; a plain extra block (a checkpoint cut down by
                // lowering num_hidden_layers) is left alone, as before heads were read.
                let said = files.metadata.get_u64("num_nextn_predict_layers").unwrap_or(0) > 0;
                let head_only = ["eh_proj.", "enorm.", "hnorm.", "shared_head."];
                if names().any(|name| name.starts_with("mtp.")) {
                    Some(CheckpointNaming::Qwen)
                } else if in_extra().any(|rest| said || head_only.iter().any(|p| rest.starts_with(p))) {
                    Some(CheckpointNaming::DeepSeek { block: n })
                } else {
                    None
                }
            }
        }
    }

    /// The naming, as errors name it.
    pub fn describe(self) -> &'static str {
        match self {
            CheckpointNaming::Qwen => "Qwen mtp.* tensors",
            CheckpointNaming::DeepSeek { .. } => "DeepSeek-V3 extra block",
            CheckpointNaming::Gguf { .. } => "GGUF nextn block",
        }
    }

    /// `fc`: `[hidden, 2 * hidden]`, embedding half first.
    pub fn fc(self) -> String {
        self.head_tensor("fc.weight", "eh_proj.weight", "nextn.eh_proj.weight")
    }

    pub fn enorm(self) -> String {
        self.head_tensor("pre_fc_norm_embedding.weight", "enorm.weight", "nextn.enorm.weight")
    }

    pub fn hnorm(self) -> String {
        self.head_tensor("pre_fc_norm_hidden.weight", "hnorm.weight", "nextn.hnorm.weight")
    }

    /// The norm before the (trunk's) output head.
    pub fn final_norm(self) -> String {
        self.head_tensor("norm.weight", "shared_head.norm.weight", "nextn.shared_head_norm.weight")
    }

    /// A tensor of the head's decoder block.
    pub fn layer(self, slot: Slot) -> String {
        match self {
            CheckpointNaming::Qwen => format!("mtp.layers.0.{}", Naming::HuggingFace.slot(slot)),
            CheckpointNaming::DeepSeek { block } => Naming::HuggingFace.layer(block, slot),
            CheckpointNaming::Gguf { block } => Naming::Gguf.layer(block, slot),
        }
    }

    fn head_tensor(self, qwen: &str, deepseek: &str, gguf: &str) -> String {
        match self {
            CheckpointNaming::Qwen => format!("mtp.{qwen}"),
            CheckpointNaming::DeepSeek { block } => format!("model.layers.{block}.{deepseek}"),
            CheckpointNaming::Gguf { block } => format!("blk.{block}.{gguf}"),
        }
    }

    /// The head's weights, each checked against the trunk's shapes: a missing tensor is
    /// [`ModelError::MissingTensor`], a misshapen one [`ModelError::WrongShape`] (naming the
    /// tensor, its shape and the one expected).
    pub fn weights(self, files: &ModelFiles) -> Result<HeadWeights, ModelError> {
        let p = Picker { tensors: &files.tensors, file: &files.path };
        let h = files.hparams.hidden;
        Ok(HeadWeights {
            enorm: p.get(&self.enorm(), &[h])?,
            hnorm: p.get(&self.hnorm(), &[h])?,
            final_norm: p.get(&self.final_norm(), &[h])?,
            fc: p.get(&self.fc(), &[h, 2 * h])?,
            layer: p.layer(&files.hparams, &|s| self.layer(s))?,
        })
    }
}

impl MtpHead {
    /// The head `files` carry in their own checkpoint, riding on `trunk` (the model built from
    /// the same `files`), over the whole vocabulary; `Ok(None)` when they carry none.
    pub fn from_checkpoint(files: &ModelFiles, trunk: &dyn MtpTrunk) -> Result<Option<MtpHead>, ModelError> {
        let Some(naming) = CheckpointNaming::detect(files) else { return Ok(None) };
        let problem = |e| ModelError::BadMtpHead { naming: naming.describe(), problem: Box::new(e) };
        let weights = naming.weights(files).map_err(problem)?;
        let hp = &files.hparams;
        let shape = HeadShape {
            hidden: hp.hidden,
            heads: Heads { n_heads: hp.n_heads, n_kv_heads: hp.n_kv_heads, head_dim: hp.head_dim },
            ffn: hp.ffn,
            vocab: hp.vocab,
            rms_eps: hp.rms_eps,
            // Checkpoint heads are trained to predict one token further; deeper drafts chain it.
            depth_trained: 1,
        };
        Ok(Some(MtpHead::new(weights, shape, None, trunk)))
    }
}

#[cfg(test)]
#[path = "checkpoint_tests.rs"]
mod tests;
