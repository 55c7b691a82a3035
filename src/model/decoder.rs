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
use crate::backend::{AttnSeq, Backend, Heads, Rope};

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
}

/// One decoder layer's weights as the pass reads them: vectors (norms, biases) converted to f32
/// once at load, matrices in the layout their owner chose.
pub(crate) struct DecoderBlock {
    pub attn_norm: Vec<f32>,
    pub wq: Tensor,
    pub wk: Tensor,
    pub wv: Tensor,
    pub wo: Tensor,
    pub bq: Option<Vec<f32>>,
    pub bk: Option<Vec<f32>>,
    pub bv: Option<Vec<f32>>,
    pub bo: Option<Vec<f32>>,
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub ffn_norm: Vec<f32>,
    pub w_gate: Tensor,
    pub w_up: Tensor,
    pub w_down: Tensor,
    pub post_attn_norm: Option<Vec<f32>>,
    pub post_ffn_norm: Option<Vec<f32>>,
}

impl DecoderBlock {
    /// `l` with its vectors in f32 and each matrix passed through `matrix` (the trunk puts them
    /// in the backend's layout; the head keeps them as read until it is quantized).
    pub fn new(l: &LayerWeights, matrix: impl Fn(&Tensor) -> Tensor) -> DecoderBlock {
        let vec = |t: &Option<Tensor>| t.as_ref().map(Tensor::to_f32);
        DecoderBlock {
            attn_norm: l.attn_norm.to_f32(),
            wq: matrix(&l.wq),
            wk: matrix(&l.wk),
            wv: matrix(&l.wv),
            wo: matrix(&l.wo),
            bq: vec(&l.bq),
            bk: vec(&l.bk),
            bv: vec(&l.bv),
            bo: vec(&l.bo),
            q_norm: vec(&l.q_norm),
            k_norm: vec(&l.k_norm),
            ffn_norm: l.ffn_norm.to_f32(),
            w_gate: matrix(&l.w_gate),
            w_up: matrix(&l.w_up),
            w_down: matrix(&l.w_down),
            post_attn_norm: vec(&l.post_attn_norm),
            post_ffn_norm: vec(&l.post_ffn_norm),
        }
    }
}

/// Adds `bias` (when the block has one) to each row of `rows`.
pub(crate) fn add_bias(rows: &mut [f32], bias: &Option<Vec<f32>>) {
    if let Some(b) = bias {
        for row in rows.chunks_exact_mut(b.len()) {
            row.iter_mut().zip(b).for_each(|(x, b)| *x += b);
        }
    }
}

/// The residual add: `x += y`.
pub(crate) fn add(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(x, y)| *x += y);
}

/// A layer's activation buffers, reused across layers and passes (grown to the largest pass).
#[derive(Default)]
pub(crate) struct LayerScratch {
    h: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    o: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
}

impl LayerScratch {
    /// Room for `rows` rows of a layer of `spec` over a residual stream of `hidden` values.
    pub fn fit(&mut self, rows: usize, hidden: usize, spec: &LayerSpec) {
        let (qd, kvd, ffn) = (spec.heads.q_dim(), spec.heads.kv_dim(), spec.ffn);
        for (buf, width) in [
            (&mut self.h, hidden),
            (&mut self.o, hidden),
            (&mut self.q, qd),
            (&mut self.att, qd),
            (&mut self.k, kvd),
            (&mut self.v, kvd),
            (&mut self.gate, ffn),
            (&mut self.up, ffn),
        ] {
            buf.resize(rows * width, 0.0);
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

/// Runs `block` as `spec` describes over `x`, the residual stream of every sequence's rows
/// (sequence after sequence, rows of `x.len() / positions.len()` values), in place: row `i` is the
/// token at `positions[i]`. Each sequence's new keys and values go into its cache layer; the
/// cache's length is advanced by the caller after the last layer. `s` must [`LayerScratch::fit`]
/// the rows.
pub(crate) fn forward_layer(
    be: &dyn Backend,
    block: &DecoderBlock,
    spec: &LayerSpec,
    x: &mut [f32],
    s: &mut LayerScratch,
    positions: &[usize],
    seqs: &mut [LayerSeq<'_>],
) {
    let t = positions.len();
    let (heads, eps) = (spec.heads, spec.rms_eps);
    let (qd, kvd) = (heads.q_dim(), heads.kv_dim());
    s.h.copy_from_slice(x);
    be.rms_norm(&mut s.h, &block.attn_norm, eps);
    // One activation quantization and one pool dispatch for Q, K and V together.
    be.matmul_many(
        &[block.wq.weight(), block.wk.weight(), block.wv.weight()],
        &s.h,
        t,
        &mut [&mut s.q, &mut s.k, &mut s.v],
    );
    add_bias(&mut s.q, &block.bq);
    add_bias(&mut s.k, &block.bk);
    add_bias(&mut s.v, &block.bv);
    // qwen3's per-head q/k norms come before RoPE.
    if let (Some(qn), Some(kn)) = (&block.q_norm, &block.k_norm) {
        be.rms_norm(&mut s.q, qn, eps);
        be.rms_norm(&mut s.k, kn, eps);
    }
    be.rope(&mut s.q, heads.n_heads, heads.head_dim, positions, spec.rope);
    be.rope(&mut s.k, heads.n_kv_heads, heads.head_dim, positions, spec.rope);
    // Each sequence's new keys and values into its cache, then every sequence's attention in one
    // call: one pool dispatch per layer, not one per sequence.
    let (mut q_rows, mut att_rows) = (s.q.as_slice(), s.att.as_mut_slice());
    let (mut k_rows, mut v_rows) = (s.k.as_slice(), s.v.as_slice());
    let mut attn = Vec::with_capacity(seqs.len());
    for seq in seqs.iter_mut() {
        let n = seq.rows;
        let (k, v, q);
        (k, k_rows) = k_rows.split_at(n * kvd);
        (v, v_rows) = v_rows.split_at(n * kvd);
        (q, q_rows) = q_rows.split_at(n * qd);
        let (out, rest) = std::mem::take(&mut att_rows).split_at_mut(n * qd);
        att_rows = rest;
        seq.cache.append(seq.layer, k, v);
        let cache = &*seq.cache;
        let window = match spec.attention {
            AttentionKind::Causal => None,
            AttentionKind::Sliding { window } => Some(window),
        };
        // The cache's length advances after the last layer, so it is still the start.
        attn.push(AttnSeq {
            q,
            keys: &cache.k[seq.layer],
            values: &cache.v[seq.layer],
            format: cache.format(),
            start_pos: cache.len(),
            n_q: n,
            out,
            window,
        });
    }
    be.attention_batch(&mut attn, heads, spec.score_scale);
    drop(attn);
    be.matmul(block.wo.weight(), &s.att, t, &mut s.o);
    add_bias(&mut s.o, &block.bo);
    if let Some(norm) = &block.post_attn_norm {
        be.rms_norm(&mut s.o, norm, eps);
    }
    add(x, &s.o);
    s.h.copy_from_slice(x);
    be.rms_norm(&mut s.h, &block.ffn_norm, eps);
    be.matmul_many(&[block.w_gate.weight(), block.w_up.weight()], &s.h, t, &mut [&mut s.gate, &mut s.up]);
    match spec.activation {
        Activation::SwiGlu => be.swiglu(&mut s.gate, &s.up),
        Activation::GeGlu => be.geglu(&mut s.gate, &s.up),
    }
    be.matmul(block.w_down.weight(), &s.gate, t, &mut s.o);
    if let Some(norm) = &block.post_ffn_norm {
        be.rms_norm(&mut s.o, norm, eps);
    }
    add(x, &s.o);
}
