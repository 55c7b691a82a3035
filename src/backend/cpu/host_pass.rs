//! A [`Pass`] over host memory: each op runs as it is recorded, on a [`Backend`]'s slice ops,
//! with the activation buffers of [`HostActs`] (which the backend owns and reuses across
//! passes). This is how the CPU runs the model's pass.

use super::type_traits::dequantize_row;
use crate::backend::pass::{Act, AttendSeq, Glu, LayerPass, Pass, PassShape};
use crate::backend::{store_keys, store_values, AttnSeq, Backend, Heads, Rope, VectorRef, WeightRef};
use std::sync::MutexGuard;

/// Rows of logits whose buffer a pass keeps for the next (a verify pass has up to 9).
const KEEP_LOGITS_ROWS: usize = 16;

/// A pass's activation buffers, grown to the largest pass seen and kept.
#[derive(Default)]
pub struct HostActs {
    bufs: [Vec<f32>; 9],
    positions: Vec<usize>,
    /// The output head's rows and logits: kept, since freeing a buffer of a megabyte after
    /// every pass made the allocator hand its pages back and fault them in again.
    rows: Vec<f32>,
    logits: Vec<f32>,
}

fn slot(a: Act) -> usize {
    a as usize
}

/// The pass itself: the backend that runs its ops, and the buffers, locked for the pass.
pub struct HostPass<'a> {
    be: &'a dyn Backend,
    acts: MutexGuard<'a, HostActs>,
    shape: PassShape,
}

impl<'a> HostPass<'a> {
    /// A pass of `shape.rows` rows at `positions` on `be`, over `acts`.
    pub fn new(be: &'a dyn Backend, mut acts: MutexGuard<'a, HostActs>, shape: PassShape, positions: &[usize]) -> Self {
        for a in [Act::X, Act::H, Act::Q, Act::K, Act::V, Act::Att, Act::O, Act::Gate, Act::Up] {
            acts.bufs[slot(a)].resize(shape.rows * shape.width(a), 0.0);
        }
        acts.positions.clear();
        acts.positions.extend_from_slice(positions);
        HostPass { be, acts, shape }
    }

    /// Takes `a`'s buffer out (to borrow it beside another); [`HostPass::put`] gives it back.
    fn take(&mut self, a: Act) -> Vec<f32> {
        std::mem::take(&mut self.acts.bufs[slot(a)])
    }

    fn put(&mut self, a: Act, v: Vec<f32>) {
        self.acts.bufs[slot(a)] = v;
    }

    fn buf(&mut self, a: Act) -> &mut Vec<f32> {
        &mut self.acts.bufs[slot(a)]
    }
}

impl LayerPass for HostPass<'_> {
    fn copy(&mut self, from: Act, to: Act) {
        let src = self.take(from);
        self.buf(to).copy_from_slice(&src);
        self.put(from, src);
    }

    fn rms_norm(&mut self, x: Act, weight: VectorRef<'_>, eps: f32) {
        let be = self.be;
        be.rms_norm(self.buf(x), weight.values, eps);
    }

    fn add_bias(&mut self, x: Act, bias: VectorRef<'_>) {
        let b = bias.values;
        for row in self.buf(x).chunks_exact_mut(b.len()) {
            row.iter_mut().zip(b).for_each(|(x, b)| *x += b);
        }
    }

    fn matmul(&mut self, ws: &[WeightRef<'_>], x: Act, outs: &[Act]) {
        let (be, n) = (self.be, self.shape.rows);
        let input = self.take(x);
        let mut taken: Vec<Vec<f32>> = outs.iter().map(|&o| self.take(o)).collect();
        if let [w] = ws {
            be.matmul(*w, &input, n, &mut taken[0]);
        } else {
            let mut views: Vec<&mut [f32]> = taken.iter_mut().map(|v| v.as_mut_slice()).collect();
            be.matmul_many(ws, &input, n, &mut views);
        }
        for (&o, v) in outs.iter().zip(taken) {
            self.put(o, v);
        }
        self.put(x, input);
    }

    fn rope(&mut self, x: Act, n_heads: usize, head_dim: usize, rope: Rope) {
        let be = self.be;
        let acts = &mut *self.acts;
        be.rope(&mut acts.bufs[slot(x)], n_heads, head_dim, &acts.positions, rope);
    }

    fn attend(&mut self, seqs: &mut [AttendSeq<'_>], heads: Heads, scale: f32, window: Option<usize>) {
        let (qd, kvd) = (heads.q_dim(), heads.kv_dim());
        let be = self.be;
        let mut att = self.take(Act::Att);
        let acts = &*self.acts;
        let (q_all, k_all, v_all) = (&acts.bufs[slot(Act::Q)], &acts.bufs[slot(Act::K)], &acts.bufs[slot(Act::V)]);
        // Each sequence's new keys and values into its cache, then every sequence's attention in
        // one call: one pool dispatch per layer, not one per sequence.
        let mut row = 0;
        for s in seqs.iter_mut() {
            let rows = row..row + s.rows;
            store_keys(s.keys, s.start, &k_all[rows.start * kvd..rows.end * kvd], kvd, s.format);
            store_values(s.values, s.start, &v_all[rows.start * kvd..rows.end * kvd], kvd, s.format);
            row = rows.end;
        }
        let mut out_rows = att.as_mut_slice();
        let mut attn = Vec::with_capacity(seqs.len());
        let mut row = 0;
        for s in seqs.iter() {
            let (out, rest) = std::mem::take(&mut out_rows).split_at_mut(s.rows * qd);
            out_rows = rest;
            attn.push(AttnSeq {
                q: &q_all[row * qd..(row + s.rows) * qd],
                keys: s.keys,
                values: s.values,
                format: s.format,
                start_pos: s.start,
                n_q: s.rows,
                out,
                window,
            });
            row += s.rows;
        }
        be.attention_batch(&mut attn, heads, scale);
        drop(attn);
        self.put(Act::Att, att);
    }

    fn glu(&mut self, glu: Glu) {
        let be = self.be;
        let up = self.take(Act::Up);
        match glu {
            Glu::Silu => be.swiglu(self.buf(Act::Gate), &up),
            Glu::GeluTanh => be.geglu(self.buf(Act::Gate), &up),
        }
        self.put(Act::Up, up);
    }

    fn add(&mut self, x: Act, y: Act) {
        let src = self.take(y);
        self.buf(x).iter_mut().zip(&src).for_each(|(x, y)| *x += y);
        self.put(y, src);
    }
}

impl Pass for HostPass<'_> {
    fn embed(&mut self, table: WeightRef<'_>, tokens: &[u32], scale: Option<f32>) {
        let hidden = self.shape.hidden;
        for (row, &tok) in self.buf(Act::X).chunks_exact_mut(hidden).zip(tokens) {
            dequantize_row(table.dtype, table.row(tok as usize), row);
            if let Some(scale) = scale {
                row.iter_mut().for_each(|v| *v *= scale);
            }
        }
    }

    fn load_x(&mut self, rows: &[f32]) {
        self.buf(Act::X).copy_from_slice(rows);
    }

    fn read_x(&mut self, from: usize, n: usize) -> Result<Vec<f32>, String> {
        let hidden = self.shape.hidden;
        Ok(self.buf(Act::X)[from * hidden..(from + n) * hidden].to_vec())
    }

    fn head(&mut self, rows: &[usize], norm: VectorRef<'_>, eps: f32, w: WeightRef<'_>) -> Result<Vec<f32>, String> {
        let (be, hidden) = (self.be, self.shape.hidden);
        let acts = &mut *self.acts;
        let x = &acts.bufs[slot(Act::X)];
        acts.rows.clear();
        for &r in rows {
            acts.rows.extend_from_slice(&x[r * hidden..(r + 1) * hidden]);
        }
        be.rms_norm(&mut acts.rows, norm.values, eps);
        let m = rows.len();
        acts.logits.resize(m * w.rows, 0.0);
        be.matmul(w, &acts.rows, m, &mut acts.logits);
        let out = acts.logits[..m * w.rows].to_vec();
        if m > KEEP_LOGITS_ROWS {
            // A pass with logits for a whole prompt: not worth keeping its megabytes.
            acts.logits = Vec::new();
        }
        Ok(out)
    }
}
