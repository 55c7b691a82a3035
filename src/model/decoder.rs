//! One decoder layer's forward pass, written once for every architecture and for both the trunk
//! (`llama`) and an MTP head's block (`mtp::head`): what a layer does is data, its [`LayerSpec`]
//! (the architecture's description of the layer) and its [`DecoderBlock`] (the weights it
//! holds); this file runs that description on a [`Backend`].
//!
//! A feature of an architecture (a norm in a new place, another activation, a window on the
//! attention) is added here and in the description once, not in each model's pass.

use super::kv::KvCache;
use super::weights::LayerWeights;
use super::Tensor;
use crate::backend::{Act, Backend, Glu, Heads, LayerPass, PassShape, Rope, Vector};

/// Which keys a layer's queries attend to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionKind {
    /// Every earlier position and its own (the llama family's every layer).
    Causal,
    /// The last `window` positions, its own included (Gemma 3's local layers).
    Sliding { window: usize },
}

/// The non-linearity between a layer's up and down projections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// `silu(gate) * up` (llama, qwen2, qwen3).
    SwiGlu,
    /// `gelu_tanh(gate) * up` (Gemma).
    GeGlu,
}

/// What an architecture says about one decoder layer, beside its weights: its shapes, its
/// norms' epsilon, its rotary embedding, its attention and its activation. Which norms and
/// biases the layer has is said by its block (a `None` is a norm or bias it has not).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerSpec {
    pub heads: Heads,
    /// Width of the feed-forward's hidden layer.
    pub ffn: usize,
    pub rms_eps: f32,
    pub rope: Rope,
    pub attention: AttentionKind,
    pub activation: Activation,
    /// What the attention scores `q . k` are multiplied by (`1 / sqrt(head_dim)` but where an
    /// architecture says otherwise).
    pub score_scale: f32,
}

impl LayerSpec {
    /// The usual score scale for heads of `head_dim`: `1 / sqrt(head_dim)`.
    pub fn default_score_scale(head_dim: usize) -> f32 {
        1.0 / (head_dim as f32).sqrt()
    }

    /// The buffers of a pass of `rows` rows through this layer, over a residual stream of
    /// `hidden` values.
    pub fn pass_shape(&self, rows: usize, hidden: usize) -> PassShape {
        PassShape { rows, hidden, q_dim: self.heads.q_dim(), kv_dim: self.heads.kv_dim(), ffn: self.ffn }
    }
}

/// One decoder layer's weights as the pass reads them: vectors (norms, biases) converted to f32
/// once at load, matrices in the layout their owner chose; each with the backend's device copy
/// where it keeps one.
pub(crate) struct DecoderBlock {
    pub attn_norm: Vector,
    pub wq: Tensor,
    pub wk: Tensor,
    pub wv: Tensor,
    pub wo: Tensor,
    pub bq: Option<Vector>,
    pub bk: Option<Vector>,
    pub bv: Option<Vector>,
    pub bo: Option<Vector>,
    pub q_norm: Option<Vector>,
    pub k_norm: Option<Vector>,
    pub ffn_norm: Vector,
    pub w_gate: Tensor,
    pub w_up: Tensor,
    pub w_down: Tensor,
    pub post_attn_norm: Option<Vector>,
    pub post_ffn_norm: Option<Vector>,
}

impl DecoderBlock {
    /// `l` with its vectors in f32 (on `be`) and each matrix passed through `matrix` (the trunk
    /// puts them in the backend's layout; the head keeps them as read until it is quantized).
    pub fn new(l: &LayerWeights, be: &dyn Backend, matrix: impl Fn(&Tensor) -> Tensor) -> DecoderBlock {
        let vec = |t: &Tensor| Vector::new(t.to_f32(), be);
        let opt = |t: &Option<Tensor>| t.as_ref().map(vec);
        DecoderBlock {
            attn_norm: vec(&l.attn_norm),
            wq: matrix(&l.wq),
            wk: matrix(&l.wk),
            wv: matrix(&l.wv),
            wo: matrix(&l.wo),
            bq: opt(&l.bq),
            bk: opt(&l.bk),
            bv: opt(&l.bv),
            bo: opt(&l.bo),
            q_norm: opt(&l.q_norm),
            k_norm: opt(&l.k_norm),
            ffn_norm: vec(&l.ffn_norm),
            w_gate: matrix(&l.w_gate),
            w_up: matrix(&l.w_up),
            w_down: matrix(&l.w_down),
            post_attn_norm: opt(&l.post_attn_norm),
            post_ffn_norm: opt(&l.post_ffn_norm),
        }
    }
}

/// One sequence's share of a layer's pass: its next `rows` rows of the residual stream, and the
/// cache layer they append to and attend over.
pub(crate) struct LayerSeq<'a> {
    pub rows: usize,
    pub cache: &'a mut KvCache,
    pub layer: usize,
}

/// Runs `block` as `spec` describes over the pass's residual stream `X` (every sequence's rows,
/// sequence after sequence), in place. Each sequence's new keys and values go into its cache
/// layer; the cache's length is advanced by the caller after the last layer.
pub(crate) fn forward_layer(p: &mut dyn LayerPass, block: &DecoderBlock, spec: &LayerSpec, seqs: &mut [LayerSeq<'_>]) {
    let (heads, eps) = (spec.heads, spec.rms_eps);
    p.rms_norm_into(Act::X, Act::H, block.attn_norm.as_ref(), eps);
    // One activation quantization and one pool dispatch for Q, K and V together.
    p.matmul(&[block.wq.weight(), block.wk.weight(), block.wv.weight()], Act::H, &[Act::Q, Act::K, Act::V]);
    for (act, bias) in [(Act::Q, &block.bq), (Act::K, &block.bk), (Act::V, &block.bv)] {
        if let Some(b) = bias {
            p.add_bias(act, b.as_ref());
        }
    }
    // qwen3's per-head q/k norms come before RoPE.
    if let (Some(qn), Some(kn)) = (&block.q_norm, &block.k_norm) {
        p.rms_norm(Act::Q, qn.as_ref(), eps);
        p.rms_norm(Act::K, kn.as_ref(), eps);
    }
    p.rope(Act::Q, heads.n_heads, heads.head_dim, spec.rope);
    p.rope(Act::K, heads.n_kv_heads, heads.head_dim, spec.rope);
    let window = match spec.attention {
        AttentionKind::Causal => None,
        AttentionKind::Sliding { window } => Some(window),
    };
    let mut attend: Vec<_> = seqs.iter_mut().map(|s| s.cache.attend_seq(s.layer, s.rows)).collect();
    p.attend(&mut attend, heads, spec.score_scale, window);
    drop(attend);
    p.matmul(&[block.wo.weight()], Act::Att, &[Act::O]);
    if let Some(b) = &block.bo {
        p.add_bias(Act::O, b.as_ref());
    }
    if let Some(norm) = &block.post_attn_norm {
        p.rms_norm(Act::O, norm.as_ref(), eps);
    }
    p.add(Act::X, Act::O);
    p.rms_norm_into(Act::X, Act::H, block.ffn_norm.as_ref(), eps);
    p.matmul(&[block.w_gate.weight(), block.w_up.weight()], Act::H, &[Act::Gate, Act::Up]);
    p.glu(match spec.activation {
        Activation::SwiGlu => Glu::Silu,
        Activation::GeGlu => Glu::GeluTanh,
    });
    p.matmul(&[block.w_down.weight()], Act::Gate, &[Act::O]);
    if let Some(norm) = &block.post_ffn_norm {
        p.rms_norm(Act::O, norm.as_ref(), eps);
    }
    p.add(Act::X, Act::O);
}
