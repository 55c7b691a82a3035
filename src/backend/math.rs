//! Definitions every backend computes alike, written once: RoPE's angles, GELU's tanh form,
//! and greedy picking's argmax.

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

/// The position of the largest logit, the lowest on ties; NaN is never larger (a NaN first
/// is kept). A device's argmax kernel picks the same for finite rows.
pub fn argmax(logits: &[f32]) -> u32 {
    // The largest value first, in sixteen running maxima the compiler can put in vectors (one
    // comparison after another, each on the last's result, made greedy picking over a large
    // vocabulary a visible share of a batched decode step), then its first position: the same
    // pick as a scan for the first strict maximum (NaN is never larger).
    if logits.first().is_some_and(|l| l.is_nan()) {
        // Nothing is larger than a NaN at position 0, so a scan would keep it.
        return 0;
    }
    let mut lanes = [f32::NEG_INFINITY; 16];
    let chunks = logits.chunks_exact(16);
    let mut max = chunks.remainder().iter().fold(f32::NEG_INFINITY, |m, &l| if l > m { l } else { m });
    for c in chunks {
        for (m, &l) in lanes.iter_mut().zip(c) {
            *m = if l > *m { l } else { *m };
        }
    }
    max = lanes.iter().fold(max, |m, &l| if l > m { l } else { m });
    logits.iter().position(|&l| l == max).unwrap_or(0) as u32
}
