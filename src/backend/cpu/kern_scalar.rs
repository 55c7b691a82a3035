//! Portable kernels: the reference every SIMD path is tested against, and the fallback on CPUs
//! without AVX2. Same arithmetic as the SIMD paths (integer block dots, one f32 scale per block).

use super::block::{IntBlock, QK};
use super::quantized_activations::QuantRows;

/// Dot of one weight row of `B` with activation row `i`, a block at a time.
pub fn vec_dot<B: IntBlock>(w: &[u8], x: &QuantRows, i: usize) -> f32 {
    let (xq, xd, xs) = (x.qs(i), x.d(i), x.s(i));
    let mut acc = 0f32;
    for (b, blk) in w.chunks_exact(B::BYTES).enumerate() {
        acc += B::block_dot(blk, &xq[b * QK..(b + 1) * QK], xd[b], xs[b]);
    }
    acc
}

/// f32 dot product (the float and K-quant paths, after dequantizing the weight row).
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    // Eight partial sums let the compiler vectorize without reassociation licence.
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}
