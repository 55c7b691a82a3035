//! Multi-token prediction: a draft head that reads the trunk's last hidden state.
//!
//! One step, as in DeepSeek-V3 and Qwen3-Next:
//! `h' = layer(fc(concat(enorm(embed(t_next)), hnorm(h))))`, draft logits =
//! `output[subvocab] · final_norm(h')`. The embedding and the output rows are the trunk's own (tied
//! in the demo model), so a sidecar carries only the head's layer, its norms, `fc` and the list of
//! sub-vocabulary ids (FR-Spec: drafting over a few thousand frequent tokens costs a fraction of
//! the full output head, and the verify pass over the full vocabulary keeps the output exact). A
//! head stored in the model's own checkpoint (`checkpoint.rs`) has no sub-vocabulary and drafts
//! over the whole vocabulary.
//!
//! Positions: head row `i` pairs the trunk's hidden state at position `i` with the token at
//! `i + 1`, and the head's own [`KvCache`] keeps one entry per row at position `i`, so after a
//! verify step both caches roll back to the same length with [`KvCache::truncate`].

pub mod checkpoint;
mod head;
pub mod sidecar;
pub mod tiny;

pub use checkpoint::CheckpointNaming;
pub use head::{HeadShape, HeadWeights, MtpError, MtpHead, MtpStep};
pub use sidecar::{Sidecar, SidecarMeta, FORMAT, FORMAT_VERSION};

use super::{ForwardError, Model, SeqBatch, Tensor};
use crate::backend::{Backend, Rope};

/// A forward pass's logits (as [`Model::forward`] returns them) and, per sequence, the
/// last layer's output for every token fed (`tokens.len()` rows of `hidden` values each; the
/// residual stream before the final norm). A step that wanted only each row's most likely token
/// ([`Model::step`] with `argmax`) has it in `tokens`, one id a wanted row, and no logits.
#[derive(Default)]
pub struct ForwardOutput {
    pub logits: Vec<Vec<f32>>,
    pub hidden: Vec<Vec<f32>>,
    pub tokens: Vec<Vec<u32>>,
}

/// What an MTP head borrows from its trunk: the kernels (so that the head's matmuls run on the
/// trunk's worker pool rather than on a second pool fighting it for the cores), the token
/// embedding, the output head and the RoPE settings.
pub struct TrunkShared<'a> {
    pub backend: &'a (dyn Backend + Sync),
    pub embed: &'a Tensor,
    pub output: &'a Tensor,
    pub rope: Rope,
}

/// A trunk an MTP head can ride on. [`Model::mtp_trunk`] returns it where the architecture
/// supports it.
pub trait MtpTrunk: Model {
    /// [`Model::forward`], also returning every fed row's hidden state.
    fn forward_hidden(&self, batch: &mut [SeqBatch<'_>]) -> Result<ForwardOutput, ForwardError>;

    fn shared(&self) -> TrunkShared<'_>;
}
