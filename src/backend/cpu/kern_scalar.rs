//! Portable kernels: the reference every SIMD path is tested against, and the fallback on CPUs
//! without AVX2. Same arithmetic as the SIMD paths (integer block dots, one f32 scale per block).

use super::dequant::{f16_at, QK};
use super::q8act::QuantRows;

/// Dot of one Q4_0 weight row with activation row `i`.
pub fn dot_q4_0(w: &[u8], x: &QuantRows, i: usize) -> f32 {
    let (xq, xd, xs) = (x.qs(i), x.d(i), x.s(i));
    let mut acc = 0f32;
    for (b, blk) in w.chunks_exact(18).enumerate() {
        let dw = f16_at(blk, 0);
        let xb = &xq[b * QK..(b + 1) * QK];
        let mut sum = 0i32;
        for (j, &q) in blk[2..18].iter().enumerate() {
            sum += (q & 0x0f) as i32 * xb[j] as i32 + (q >> 4) as i32 * xb[j + 16] as i32;
        }
        acc += dw * xd[b] * sum as f32 - 8.0 * dw * xs[b];
    }
    acc
}

/// Dot of one Q4_1 weight row with activation row `i`.
pub fn dot_q4_1(w: &[u8], x: &QuantRows, i: usize) -> f32 {
    let (xq, xd, xs) = (x.qs(i), x.d(i), x.s(i));
    let mut acc = 0f32;
    for (b, blk) in w.chunks_exact(20).enumerate() {
        let (dw, mw) = (f16_at(blk, 0), f16_at(blk, 2));
        let xb = &xq[b * QK..(b + 1) * QK];
        let mut sum = 0i32;
        for (j, &q) in blk[4..20].iter().enumerate() {
            sum += (q & 0x0f) as i32 * xb[j] as i32 + (q >> 4) as i32 * xb[j + 16] as i32;
        }
        acc += dw * xd[b] * sum as f32 + mw * xs[b];
    }
    acc
}

/// Dot of one Q8_0 weight row with activation row `i`.
pub fn dot_q8_0(w: &[u8], x: &QuantRows, i: usize) -> f32 {
    let (xq, xd) = (x.qs(i), x.d(i));
    let mut acc = 0f32;
    for (b, blk) in w.chunks_exact(34).enumerate() {
        let dw = f16_at(blk, 0);
        let xb = &xq[b * QK..(b + 1) * QK];
        let sum: i32 = blk[2..34]
            .iter()
            .zip(xb)
            .map(|(&q, &v)| (q as i8) as i32 * v as i32)
            .sum();
        acc += dw * xd[b] * sum as f32;
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
