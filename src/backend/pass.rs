//! A forward pass as a backend runs it: begun with its rows' positions, fed ops that name the
//! pass's activation buffers ([`Act`]) instead of handing over host slices, and read only at its
//! end ([`Pass::read_x`], [`Pass::head`]). The model (`model/decoder.rs`, `model/llama.rs`)
//! writes an architecture's pass once against these traits; the CPU runs each op as it comes
//! (`host_pass.rs`), a GPU records them into one command buffer and submits at the first read
//! (`gpu/pass.rs`).

use super::{Heads, KvBuf, KvFormat, Rope, VectorRef, WeightRef};
use std::any::Any;

/// The activation buffers of a pass, one row per token of the pass: the residual stream `X`
/// and a layer's working buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// The residual stream (`hidden` values a row).
    X,
    /// A normed copy of the residual stream (`hidden`).
    H,
    /// Queries (`q_dim`).
    Q,
    /// New keys (`kv_dim`).
    K,
    /// New values (`kv_dim`).
    V,
    /// Attention's output (`q_dim`).
    Att,
    /// A projection back to the residual stream (`hidden`).
    O,
    /// The feed-forward's gate, then its activation (`ffn`).
    Gate,
    /// The feed-forward's up projection (`ffn`).
    Up,
}

/// The widths of a pass's buffers, and its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PassShape {
    pub rows: usize,
    pub hidden: usize,
    pub q_dim: usize,
    pub kv_dim: usize,
    pub ffn: usize,
}

impl PassShape {
    /// Values a row of `act` holds.
    pub fn width(&self, act: Act) -> usize {
        match act {
            Act::X | Act::H | Act::O => self.hidden,
            Act::Q | Act::Att => self.q_dim,
            Act::K | Act::V => self.kv_dim,
            Act::Gate | Act::Up => self.ffn,
        }
    }
}

/// The gated activation between a feed-forward's up and down projections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Glu {
    /// `silu(gate) * up`.
    Silu,
    /// `gelu_tanh(gate) * up`.
    GeluTanh,
}

/// A sequence's cache storage as a device backend keeps it; the host buffers of an
/// [`AttendSeq`] stay empty beside it.
pub trait DeviceKv: Send + Sync {
    /// Bytes of device memory it holds.
    fn bytes(&self) -> usize;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// One sequence's share of a layer's attention: its next `rows` rows, at positions
/// `start..start + rows`, appended to layer `layer` of its cache and attending over it.
pub struct AttendSeq<'a> {
    pub rows: usize,
    pub start: usize,
    pub layer: usize,
    /// The host storage of this layer's keys and values (a CPU cache).
    pub keys: &'a mut KvBuf,
    pub values: &'a mut KvBuf,
    pub format: KvFormat,
    /// The cache's device storage, made by the device backend on first use.
    pub device: &'a mut Option<Box<dyn DeviceKv>>,
    /// The cache's layers and the most positions it may hold (to size device storage).
    pub layers: usize,
    pub capacity: usize,
}

/// The ops of one decoder layer, on the pass's buffers.
pub trait LayerPass {
    /// `to = from` (same width).
    fn copy(&mut self, from: Act, to: Act);
    /// Each row of `x`, in pieces of `weight`'s length, scaled to unit RMS, times `weight`.
    fn rms_norm(&mut self, x: Act, weight: VectorRef<'_>, eps: f32);
    /// `to` becomes `from` scaled to unit RMS per row, times `weight`; `from` stays (a layer's
    /// pre-norm, read beside the residual stream). A device fuses the copy into the norm.
    fn rms_norm_into(&mut self, from: Act, to: Act, weight: VectorRef<'_>, eps: f32) {
        self.copy(from, to);
        self.rms_norm(to, weight, eps);
    }
    /// Adds `bias` to each row of `x`.
    fn add_bias(&mut self, x: Act, bias: VectorRef<'_>);
    /// `outs[m] = x . ws[m]^T`, every matrix over the same input (one activation quantization).
    fn matmul(&mut self, ws: &[WeightRef<'_>], x: Act, outs: &[Act]);
    /// Rotates the `n_heads` heads of each row of `x` by its row's position.
    fn rope(&mut self, x: Act, n_heads: usize, head_dim: usize, rope: Rope);
    /// Appends each sequence's rows of `K` and `V` to its cache layer, then writes the
    /// attention of its rows of `Q` over the cache (the last `window` positions where a window
    /// is given) to `Att`.
    fn attend(&mut self, seqs: &mut [AttendSeq<'_>], heads: Heads, scale: f32, window: Option<usize>);
    /// `Gate = glu(Gate) * Up`.
    fn glu(&mut self, glu: Glu);
    /// `x += y`.
    fn add(&mut self, x: Act, y: Act);
}

/// A whole forward pass: the layer ops, plus the way in (embeddings, or given rows) and the
/// ways out.
pub trait Pass: LayerPass {
    /// `X`'s rows become the rows of `table` for `tokens`, times `scale` where given.
    fn embed(&mut self, table: WeightRef<'_>, tokens: &[u32], scale: Option<f32>);
    /// `X` becomes `rows` (every row of the pass).
    fn load_x(&mut self, rows: &[f32]);
    /// Rows `from..from + n` of `X`; an error names a device's fault.
    fn read_x(&mut self, from: usize, n: usize) -> Result<Vec<f32>, String>;
    /// The rows `rows` of `X`, each normed by `norm` and multiplied by `w` (`w.rows` values a
    /// row, back to back). Leaves `X` as it was. An error names a device's fault.
    fn head(&mut self, rows: &[usize], norm: VectorRef<'_>, eps: f32, w: WeightRef<'_>) -> Result<Vec<f32>, String>;
    /// [`Pass::head`]'s most likely token for each of `rows` ([`super::math::argmax`]'s pick):
    /// what a greedy step needs. A device computes it there and reads back ids, not logits.
    fn head_argmax(
        &mut self,
        rows: &[usize],
        norm: VectorRef<'_>,
        eps: f32,
        w: WeightRef<'_>,
    ) -> Result<Vec<u32>, String> {
        let logits = self.head(rows, norm, eps, w)?;
        Ok(logits.chunks_exact(w.rows.max(1)).map(super::math::argmax).collect())
    }
}
