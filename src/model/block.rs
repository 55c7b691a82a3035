//! One decoder block as the forward passes run it: the trunk's layers (`llama`) and an MTP
//! head's block (`mtp::head`) are the same block, read by the same `Picker::layer`, and kept in
//! the same form: vectors (norms, biases) converted to f32 once at load, matrices in the layout
//! their owner chose.

use super::weights::LayerWeights;
use super::Tensor;

pub(crate) struct Block {
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
}

impl Block {
    /// `l` with its vectors in f32 and each matrix passed through `matrix` (the trunk puts them
    /// in the backend's layout; the head keeps them as read until `quantized`).
    pub fn new(l: &LayerWeights, matrix: impl Fn(&Tensor) -> Tensor) -> Block {
        let vec = |t: &Option<Tensor>| t.as_ref().map(Tensor::to_f32);
        Block {
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
