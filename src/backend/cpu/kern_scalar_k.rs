//! Portable integer dots of Q4_K and Q6_K weight rows with [`QuantRowsK`] activations: the
//! fallback without AVX2, and the reference the SIMD kernels must equal bit for bit.
//!
//! Per block, the sums are exact integers (no overflow: bounds below), and the float work is
//! one expression per block, [`q4k_block`] or [`q6k_block`], added to the row's sum block by
//! block. The SIMD kernels reduce their integer lanes to the same integers and call the same
//! functions in the same order, so the results are the same floats, whatever the level.

use super::block::Block;
use super::block_k::{scales_mins_k4, BlockQ4K, BlockQ6K, QK_K};
use super::float16::f16_at;
use super::quantized_activations_k::QuantRowsK;

/// A Q4_K block's contribution from its integer sums: `isum = sum_j sc_j * sum(q * a)` over
/// its sub-blocks, `msum = sum_j m_j * sum(a)`; `d`, `dmin` the block's scales, `xd` the
/// activations'. Every level calls this, so that the float rounding is the same.
#[inline(always)]
pub fn q4k_block(d: f32, dmin: f32, xd: f32, isum: i32, msum: i32) -> f32 {
    d * xd * isum as f32 - dmin * xd * msum as f32
}

/// A Q6_K block's contribution from `isum = sum_k sc_k * sum((q - 32) * a)` over its 16
/// sub-blocks.
#[inline(always)]
pub fn q6k_block(d: f32, xd: f32, isum: i32) -> f32 {
    d * xd * isum as f32
}

/// `(isum, msum)` of one Q4_K block with 256 activations `a` and their per-16 sums.
///
/// Bounds: `|q * a| <= 15 * 127`, so `|isum| <= 8 * 63 * 32 * 15 * 127` and `|msum| <= 8 * 63 *
/// 32 * 127`, both far inside i32.
pub fn q4k_sums(blk: &[u8], a: &[i8], bsums: &[i16]) -> (i32, i32) {
    let (sc, m) = scales_mins_k4(&blk[4..16]);
    let mut isum = 0i32;
    for (c, q) in blk[16..144].chunks_exact(32).enumerate() {
        // Sub-block 2c is the low nibbles of these 32 bytes, 2c + 1 the high ones.
        let (a_lo, a_hi) = (&a[64 * c..64 * c + 32], &a[64 * c + 32..64 * c + 64]);
        let (mut lo, mut hi) = (0i32, 0i32);
        for l in 0..32 {
            lo += (q[l] & 0x0f) as i32 * a_lo[l] as i32;
            hi += (q[l] >> 4) as i32 * a_hi[l] as i32;
        }
        isum += sc[2 * c] as i32 * lo + sc[2 * c + 1] as i32 * hi;
    }
    let msum = (0..8).map(|j| m[j] as i32 * (bsums[2 * j] as i32 + bsums[2 * j + 1] as i32)).sum();
    (isum, msum)
}

/// `isum` of one Q6_K block with 256 activations `a` and their per-16 sums: the 6-bit values
/// are taken unsigned (0..64) and the `-32` comes from the sums, as the SIMD kernels do it.
///
/// Bounds: `|sc * q * a| <= 128 * 63 * 127` over 256 values, and `|32 * sc * bsum| <= 32 * 128 *
/// 16 * 127` over 16 sub-blocks: both far inside i32.
pub fn q6k_sum(blk: &[u8], a: &[i8], bsums: &[i16]) -> i32 {
    let sc = |k: usize| blk[192 + k] as i8 as i32;
    let mut isum = 0i32;
    for h in 0..2 {
        let (ql, qh) = (&blk[64 * h..64 * h + 64], &blk[128 + 32 * h..128 + 32 * h + 32]);
        // Values 32t..32t + 32 of this half: low 4 bits from ql (bytes 0..32 for even t, 32..64
        // for odd t; the low nibble for t < 2), top 2 bits from bits 2t..2t+2 of qh.
        for t in 0..4 {
            let low = &ql[32 * (t & 1)..32 * (t & 1) + 32];
            let mut s = [0i32; 2];
            for l in 0..32 {
                let q = ((low[l] >> (4 * (t >> 1))) & 0x0f) | (((qh[l] >> (2 * t)) & 3) << 4);
                s[l / 16] += q as i32 * a[128 * h + 32 * t + l] as i32;
            }
            isum += sc(8 * h + 2 * t) * s[0] + sc(8 * h + 2 * t + 1) * s[1];
        }
    }
    let offset: i32 = (0..16).map(|k| sc(k) * bsums[k] as i32).sum();
    isum - 32 * offset
}

/// Dot of one Q4_K weight row with activation row `i`, a block at a time.
pub fn vec_dot_q4k(w: &[u8], x: &QuantRowsK, i: usize) -> f32 {
    let (xq, xd, bs) = (x.qs(i), x.d(i), x.bsums(i));
    let mut acc = 0f32;
    for (b, blk) in w.chunks_exact(BlockQ4K::BYTES).enumerate() {
        let (isum, msum) = q4k_sums(blk, &xq[b * QK_K..(b + 1) * QK_K], &bs[b * 16..(b + 1) * 16]);
        acc += q4k_block(f16_at(blk, 0), f16_at(blk, 2), xd[b], isum, msum);
    }
    acc
}

/// Dot of one Q6_K weight row with activation row `i`, a block at a time.
pub fn vec_dot_q6k(w: &[u8], x: &QuantRowsK, i: usize) -> f32 {
    let (xq, xd, bs) = (x.qs(i), x.d(i), x.bsums(i));
    let mut acc = 0f32;
    for (b, blk) in w.chunks_exact(BlockQ6K::BYTES).enumerate() {
        let isum = q6k_sum(blk, &xq[b * QK_K..(b + 1) * QK_K], &bs[b * 16..(b + 1) * 16]);
        acc += q6k_block(f16_at(blk, 208), xd[b], isum);
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::super::test_inputs::{noise, weight};
    use super::super::type_traits::dequantize_row;
    use super::*;
    use crate::backend::DType;

    /// The dot of the dequantized weight row with the dequantized activations, in f64, and
    /// the sum of the magnitudes of its terms (what the float rounding scales with).
    fn exact(dtype: DType, w: &[u8], x: &QuantRowsK, cols: usize) -> (f64, f64) {
        let mut wf = vec![0f32; cols];
        dequantize_row(dtype, w, &mut wf);
        let xf = x.qs(0).iter().enumerate().map(|(k, &q)| q as f64 * x.d(0)[k / QK_K] as f64);
        wf.iter().zip(xf).fold((0.0, 0.0), |(s, m), (&a, b)| (s + a as f64 * b, m + (a as f64 * b).abs()))
    }

    #[test]
    fn integer_dots_equal_the_dequantized_product_up_to_float_rounding() {
        // Q4_K's decoder rounds `d * sc` and `dmin * m` to f32 before multiplying, the integer
        // dot rounds `d * xd` instead: a few f32 ulps of the terms apart, no more.
        let cols = 4 * QK_K;
        for (dtype, dot) in
            [(DType::Q4K, vec_dot_q4k as fn(&[u8], &QuantRowsK, usize) -> f32), (DType::Q6K, vec_dot_q6k)]
        {
            for seed in 0..8 {
                let w = weight(dtype, 1, cols, seed);
                let mut x = QuantRowsK::new();
                x.quantize(&noise(cols, 100 + seed), 1, cols);
                let (want, mag) = exact(dtype, &w, &x, cols);
                let got = dot(&w, &x, 0) as f64;
                assert!((got - want).abs() <= 1e-6 * mag, "{dtype} seed {seed}: {got} vs {want} (terms {mag})");
            }
        }
    }

    #[test]
    fn extreme_values_stay_exact_integers() {
        // Every 6-bit scale, min and weight at its maximum, Q6_K scales at -128, activations at
        // +-127: the bounds the SIMD kernels rely on, and sums the f64 reference checks.
        let mut q4 = vec![0xffu8; BlockQ4K::BYTES];
        q4[..4].copy_from_slice(&[0x00, 0x3c, 0x00, 0x3c]); // d = dmin = 1.0
        let mut q6 = vec![0xffu8; BlockQ6K::BYTES];
        q6[192..208].fill(0x80);
        q6[208..210].copy_from_slice(&[0x00, 0x3c]);
        let mut x = QuantRowsK::new();
        // amax 127 makes the activation scale exactly 1: the expected values are integers.
        let xs: Vec<f32> = (0..QK_K).map(|k| if k % 3 == 0 { -127.0 } else { 127.0 }).collect();
        x.quantize(&xs, 1, QK_K);
        let (s1, s_1) = (QK_K as i32 - QK_K as i32 / 3 - 1, QK_K as i32 / 3 + 1); // counts of +1, -1
        let sum_a = 127 * (s1 - s_1);
        // Q4_K: every value is 63 * 15 - 63 per unit activation.
        assert_eq!(vec_dot_q4k(&q4, &x, 0), ((63 * 15 - 63) * sum_a) as f32);
        // Q6_K: every value is -128 * (63 - 32).
        assert_eq!(vec_dot_q6k(&q6, &x, 0), (-128 * 31 * sum_a) as f32);
    }
}
