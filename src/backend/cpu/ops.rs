//! The non-matmul operations of a forward pass but attention (in `attention.rs`): RMSNorm, RoPE
//! (both layouts), SwiGLU, softmax.

use crate::backend::math::{rope_angles, rope_inv_freq};
use crate::backend::{Rope, RopeLayout};
use std::cell::RefCell;

/// Each row of `x` (rows of `weight.len()` values) times `weight / rms(row)`, as ggml's
/// `rms_norm` followed by `mul` (sum of squares in f64, like ggml).
pub fn rms_norm(x: &mut [f32], weight: &[f32], eps: f32) {
    let d = weight.len();
    assert!(d > 0 && x.len().is_multiple_of(d), "rms_norm: {} values are not rows of {d}", x.len());
    for row in x.chunks_exact_mut(d) {
        let sum = sum_squares(row);
        let mean = (sum / d as f64) as f32;
        let scale = 1.0 / (mean + eps).sqrt();
        for (v, &w) in row.iter_mut().zip(weight) {
            *v = (*v * scale) * w;
        }
    }
}

/// The sum of the squares of `row` in f64, in eight running sums: one chain of dependent
/// additions made `rms_norm` a visible share of a batched decode step (its latency, not its
/// work), and eight let the compiler use vectors. f64 keeps the result the same f32 mean
/// whatever the order, but for a sum within 1e-16 of a rounding boundary of f32.
fn sum_squares(row: &[f32]) -> f64 {
    let mut acc = [0f64; 8];
    let chunks = row.chunks_exact(8);
    let rest: f64 = chunks.remainder().iter().map(|&v| (v as f64) * (v as f64)).sum();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += (v as f64) * (v as f64);
        }
    }
    acc.iter().sum::<f64>() + rest
}

/// Rotary position embedding of every head of every row of `x`; row `i` is at `positions[i]`.
/// Angles are computed in f64 (position times inverse frequency), then rounded once.
pub fn rope(x: &mut [f32], n_heads: usize, head_dim: usize, positions: &[usize], rope: Rope) {
    let row = n_heads * head_dim;
    assert_eq!(x.len(), positions.len() * row, "rope: {} values for {} rows of {row}", x.len(), positions.len());
    assert!(
        rope.dims <= head_dim && rope.dims.is_multiple_of(2),
        "rope: {} rotated dims in heads of {head_dim}",
        rope.dims
    );
    let half = rope.dims / 2;
    ANGLES.with_borrow_mut(|angles| {
        angles.prepare(rope, positions.iter().copied().max().unwrap_or(0));
        let mut cs = vec![(0f32, 0f32); half];
        for (xr, &pos) in x.chunks_exact_mut(row).zip(positions) {
            let cs: &[(f32, f32)] = match angles.cs.get(pos * half..(pos + 1) * half) {
                Some(t) => t,
                None => {
                    angles.compute(pos, &mut cs);
                    &cs
                }
            };
            rotate(xr, head_dim, cs, rope.layout);
        }
    });
}

/// Positions whose angles [`ANGLES`] keeps: 32,768 x 32 pairs of f32 (head_dim 64) are 8 MiB.
const CACHED_POSITIONS: usize = 32 * 1024;

thread_local! {
    /// The cos/sin of the last rope's angles, by position: every layer of every pass rotates by
    /// the same angles, and computing them (in f64) took longer than the rotations.
    static ANGLES: RefCell<Angles> = RefCell::new(Angles::default());
}

#[derive(Default)]
struct Angles {
    theta: f32,
    dims: usize,
    inv_freq: Vec<f64>,
    /// `(cos, sin)` of position `p`'s angles at `cs[p * dims / 2..]`.
    cs: Vec<(f32, f32)>,
}

impl Angles {
    /// Ready for `rope`, with the angles of positions `0..=max_pos` (up to `CACHED_POSITIONS`).
    fn prepare(&mut self, rope: Rope, max_pos: usize) {
        if (self.theta.to_bits(), self.dims) != (rope.theta.to_bits(), rope.dims) {
            *self = Angles { theta: rope.theta, dims: rope.dims, inv_freq: rope_inv_freq(rope), cs: Vec::new() };
        }
        let half = self.dims / 2;
        let have = self.cs.len().checked_div(half).unwrap_or(0);
        let want = (max_pos + 1).min(CACHED_POSITIONS);
        let mut row = vec![(0f32, 0f32); half];
        for pos in have..want {
            self.compute(pos, &mut row);
            self.cs.extend_from_slice(&row);
        }
    }

    /// Position `pos`'s `(cos, sin)` pairs into `out`: angles in f64 (position times inverse
    /// frequency), rounded once.
    fn compute(&self, pos: usize, out: &mut [(f32, f32)]) {
        rope_angles(&self.inv_freq, pos, out);
    }
}

/// Rotates every head of one row by the pairs `cs`.
fn rotate(xr: &mut [f32], head_dim: usize, cs: &[(f32, f32)], layout: RopeLayout) {
    let half = cs.len();
    for h in xr.chunks_exact_mut(head_dim) {
        for (i, &(c, s)) in cs.iter().enumerate() {
            let (a, b) = match layout {
                RopeLayout::Interleaved => (2 * i, 2 * i + 1),
                RopeLayout::NeoX => (i, i + half),
            };
            let (x0, x1) = (h[a], h[b]);
            h[a] = x0 * c - x1 * s;
            h[b] = x0 * s + x1 * c;
        }
    }
}

/// `x / (1 + e^-x)`.
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// `gate[k] = silu(gate[k]) * up[k]`.
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "swiglu: gate and up differ in length");
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = silu(*g) * u;
    }
}

/// GELU in its tanh form, `0.5 x (1 + tanh(z))` with `z = sqrt(2 / pi) (x + 0.044715 x^3)`,
/// written as `x / (1 + e^(-2z))` (the same function), which the vector kernel computes too.
#[inline]
pub fn gelu_tanh(x: f32) -> f32 {
    let z = GELU_SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x);
    x / (1.0 + (-2.0 * z).min(88.0).exp())
}

pub use crate::backend::math::{GELU_CUBIC, GELU_SQRT_2_OVER_PI};

/// `gate[k] = gelu_tanh(gate[k]) * up[k]`.
pub fn geglu(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "geglu: gate and up differ in length");
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = gelu_tanh(*g) * u;
    }
}

/// In-place softmax of `x` (max-subtracted, so large logits do not overflow).
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    if max == f32::NEG_INFINITY {
        return;
    }
    let mut sum = 0f32;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    x.iter_mut().for_each(|v| *v *= inv);
}

#[cfg(test)]
mod tests {
    use super::super::test_inputs::noise;
    use super::*;

    fn near(a: f32, b: f32, tol: f32) -> bool {
        (a - b).abs() <= tol * b.abs().max(1.0)
    }

    #[test]
    fn rms_norm_scales_rows_to_unit_rms_times_weight() {
        let mut x = vec![3.0, 4.0, 0.0, 0.0];
        rms_norm(&mut x, &[1.0, 2.0], 1e-5);
        let rms = (12.5f32 + 1e-5).sqrt();
        assert!(near(x[0], 3.0 / rms, 1e-6) && near(x[1], 8.0 / rms, 1e-6));
        assert_eq!(&x[2..], &[0.0, 0.0], "eps keeps a zero row finite");
    }

    fn rope_cfg(layout: RopeLayout, theta: f32, dims: usize) -> Rope {
        Rope { layout, theta, dims }
    }

    #[test]
    fn rope_rotates_pairs_by_position_times_frequency() {
        // head_dim 4, theta 100: inverse frequencies 1 and 100^-1/2 = 0.1; position 2.
        let mut x = vec![1.0, 0.0, 1.0, 0.0];
        rope(&mut x, 1, 4, &[2], rope_cfg(RopeLayout::Interleaved, 100.0, 4));
        let want = [2f32.cos(), 2f32.sin(), 0.2f32.cos(), 0.2f32.sin()];
        assert!(x.iter().zip(&want).all(|(a, b)| near(*a, *b, 1e-6)), "{x:?}");
        // NeoX pairs element i with i + 2.
        let mut y = vec![1.0, 1.0, 0.0, 0.0];
        rope(&mut y, 1, 4, &[2], rope_cfg(RopeLayout::NeoX, 100.0, 4));
        let want = [2f32.cos(), 0.2f32.cos(), 2f32.sin(), 0.2f32.sin()];
        assert!(y.iter().zip(&want).all(|(a, b)| near(*a, *b, 1e-6)), "{y:?}");
    }

    #[test]
    fn rope_scores_depend_only_on_the_relative_position() {
        for layout in [RopeLayout::Interleaved, RopeLayout::NeoX] {
            let (q0, k0) = (noise(64, 1), noise(64, 2));
            let score = |m: usize, n: usize| {
                let (mut q, mut k) = (q0.clone(), k0.clone());
                rope(&mut q, 1, 64, &[m], rope_cfg(layout, 10000.0, 64));
                rope(&mut k, 1, 64, &[n], rope_cfg(layout, 10000.0, 64));
                q.iter().zip(&k).map(|(a, b)| a * b).sum::<f32>()
            };
            assert!(near(score(7, 3), score(104, 100), 1e-4), "{layout:?}");
            assert!(!near(score(7, 3), score(3, 7), 1e-4), "{layout:?}: rotation direction matters");
        }
    }

    /// The cached angles give what computing them afresh gives, across a change of theta and
    /// for positions past the cache.
    #[test]
    fn cached_angles_equal_fresh_ones_after_a_theta_change_and_past_the_cache() {
        let x0 = noise(2 * 64, 5);
        let at = |theta: f32, pos: usize| {
            let mut x = x0.clone();
            rope(&mut x, 2, 64, &[pos], rope_cfg(RopeLayout::NeoX, theta, 64));
            x
        };
        let first = at(10000.0, 300);
        let other = at(500.0, 300);
        assert_ne!(first, other, "theta matters");
        assert_eq!(at(10000.0, 300), first, "after theta 500 the angles of theta 10000 again");
        let far = CACHED_POSITIONS + 3;
        let (near_pos, far_pos) = (at(10000.0, 2), at(10000.0, far));
        let mut both = [x0.clone(), x0.clone()].concat();
        rope(&mut both, 2, 64, &[2, far], rope_cfg(RopeLayout::NeoX, 10000.0, 64));
        assert_eq!(both, [near_pos, far_pos].concat(), "a row past the cache beside one in it");
        let mut a = Angles::default();
        a.prepare(rope_cfg(RopeLayout::NeoX, 10000.0, 64), 300);
        let mut fresh = vec![(0f32, 0f32); 32];
        a.compute(300, &mut fresh);
        assert_eq!(&a.cs[300 * 32..301 * 32], &fresh[..]);
    }

    #[test]
    fn softmax_and_swiglu() {
        let mut x = vec![1000.0, 1000.0, f32::NEG_INFINITY];
        softmax(&mut x);
        assert_eq!(x, vec![0.5, 0.5, 0.0]);
        let mut g = vec![0.0, 20.0, -20.0];
        swiglu(&mut g, &[5.0, 2.0, 2.0]);
        assert_eq!(g[0], 0.0);
        assert!(near(g[1], 40.0, 1e-6) && g[2].abs() < 1e-6);
    }
}
