//! Definitions every backend computes alike, written once: RoPE's angles and GELU's tanh form.

use super::Rope;

/// `sqrt(2 / pi)`, and the cubic term's weight, of the tanh approximation of GELU.
pub const GELU_SQRT_2_OVER_PI: f32 = 0.797_884_6;
pub const GELU_CUBIC: f32 = 0.044_715;

/// RoPE's inverse frequencies, `theta^(-2i / dims)` for each rotated pair, in f64.
pub fn rope_inv_freq(rope: Rope) -> Vec<f64> {
    (0..rope.dims / 2).map(|i| (rope.theta as f64).powf(-2.0 * i as f64 / rope.dims as f64)).collect()
}

/// Position `pos`'s `(cos, sin)` pairs into `out`: angles in f64 (position times inverse
/// frequency), rounded once.
pub fn rope_angles(inv_freq: &[f64], pos: usize, out: &mut [(f32, f32)]) {
    for (c, &f) in out.iter_mut().zip(inv_freq) {
        let (s, co) = (pos as f64 * f).sin_cos();
        *c = (co as f32, s as f32);
    }
}
