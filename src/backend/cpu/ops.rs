//! The non-matmul operations of a forward pass but attention (in `attention.rs`): RMSNorm, RoPE
//! (both layouts), SwiGLU, softmax.

use crate::backend::{Rope, RopeLayout};

/// Each row of `x` (rows of `weight.len()` values) times `weight / rms(row)`, as ggml's
/// `rms_norm` followed by `mul` (sum of squares in f64, like ggml).
pub fn rms_norm(x: &mut [f32], weight: &[f32], eps: f32) {
    let d = weight.len();
    assert!(d > 0 && x.len().is_multiple_of(d), "rms_norm: {} values are not rows of {d}", x.len());
    for row in x.chunks_exact_mut(d) {
        let sum: f64 = row.iter().map(|&v| (v as f64) * (v as f64)).sum();
        let mean = (sum / d as f64) as f32;
        let scale = 1.0 / (mean + eps).sqrt();
        for (v, &w) in row.iter_mut().zip(weight) {
            *v = (*v * scale) * w;
        }
    }
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
    let inv_freq: Vec<f64> = (0..half).map(|i| (rope.theta as f64).powf(-2.0 * i as f64 / rope.dims as f64)).collect();
    let mut cs = vec![(0f32, 0f32); half];
    for (xr, &pos) in x.chunks_exact_mut(row).zip(positions) {
        for (c, &f) in cs.iter_mut().zip(&inv_freq) {
            let (s, co) = (pos as f64 * f).sin_cos();
            *c = (co as f32, s as f32);
        }
        for h in xr.chunks_exact_mut(head_dim) {
            for (i, &(c, s)) in cs.iter().enumerate() {
                let (a, b) = match rope.layout {
                    RopeLayout::Interleaved => (2 * i, 2 * i + 1),
                    RopeLayout::NeoX => (i, i + half),
                };
                let (x0, x1) = (h[a], h[b]);
                h[a] = x0 * c - x1 * s;
                h[b] = x0 * s + x1 * c;
            }
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
