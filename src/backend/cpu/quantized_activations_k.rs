//! [`QuantRowsK`]: activations quantized to 8-bit blocks of 256, once per matmul call, for the
//! K-quant integer kernels (llama.cpp's Q8_K).
//!
//! A K-quant weight block spans 256 values, with one f16 scale for all of them and a 6- or
//! 8-bit factor per sub-block of 32 or 16; so one activation scale per 256 values lets a whole
//! block's integer sum take a single float multiply. The per-16 sums `bsums` turn the terms
//! that do not depend on the weight's value (Q4_K's `-dmin * m`, Q6_K's `-32`) into one small
//! integer dot per block instead of a pass over the values.
//!
//! The scale stays f32 (as in Q8_K: nothing is gained by rounding it, no file stores it), and
//! every instruction set reads the same numbers, made by the portable code below: quantizing
//! is a small share of a call (one pass over `n * cols` values against `rows * n * cols`
//! multiply-adds).

use super::block_k::QK_K;

/// Values per partial sum: the sub-block of Q6_K, half a sub-block of Q4_K.
pub const BSUM_LEN: usize = 16;
/// Largest magnitude of a quantized value: symmetric, so -128 never occurs and the SIMD
/// kernels' `maddubs` sums stay exact.
const Q8_MAX: f32 = 127.0;

#[derive(Default)]
pub struct QuantRowsK {
    qs: Vec<i8>,
    d: Vec<f32>,
    bsums: Vec<i16>,
    cols: usize,
    n: usize,
}

impl QuantRowsK {
    pub fn new() -> QuantRowsK {
        QuantRowsK::default()
    }

    /// Quantizes `n` rows of `cols` values (`cols` a multiple of 256), reusing the buffers.
    pub fn quantize(&mut self, x: &[f32], n: usize, cols: usize) {
        assert!(cols.is_multiple_of(QK_K) && x.len() == n * cols, "activations: {} values for {n} x {cols}", x.len());
        self.qs.resize(n * cols, 0);
        self.d.resize(n * cols / QK_K, 0.0);
        self.bsums.resize(n * cols / BSUM_LEN, 0);
        (self.cols, self.n) = (cols, n);
        let blocks = x.chunks_exact(QK_K).zip(self.qs.chunks_exact_mut(QK_K));
        let sums = self.d.iter_mut().zip(self.bsums.chunks_exact_mut(QK_K / BSUM_LEN));
        for ((xb, qb), (d, bs)) in blocks.zip(sums) {
            *d = quantize_block(xb, qb);
            for (s, q) in bs.iter_mut().zip(qb.chunks_exact(BSUM_LEN)) {
                // At most 16 * 127: an i16 holds it.
                *s = q.iter().map(|&v| v as i16).sum();
            }
        }
    }

    pub fn rows(&self) -> usize {
        self.n
    }
    pub fn cols(&self) -> usize {
        self.cols
    }
    /// The int8 values of row `i`.
    #[inline]
    pub fn qs(&self, i: usize) -> &[i8] {
        &self.qs[i * self.cols..(i + 1) * self.cols]
    }
    /// The scale of each 256-value block of row `i`.
    #[inline]
    pub fn d(&self, i: usize) -> &[f32] {
        let nb = self.cols / QK_K;
        &self.d[i * nb..(i + 1) * nb]
    }
    /// The sums of each 16 consecutive int8 values of row `i`.
    #[inline]
    pub fn bsums(&self, i: usize) -> &[i16] {
        let ns = self.cols / BSUM_LEN;
        &self.bsums[i * ns..(i + 1) * ns]
    }
}

/// Symmetric quantization of one block; returns its scale. Ties round to even, as `QuantRows`.
fn quantize_block(x: &[f32], q: &mut [i8]) -> f32 {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let id = if amax != 0.0 { Q8_MAX / amax } else { 0.0 };
    for (qv, &v) in q.iter_mut().zip(x) {
        // `v * id` may exceed 127 by a rounding error at `v = amax`: the clamp keeps -128 out.
        *qv = (v * id).round_ties_even().clamp(-Q8_MAX, Q8_MAX) as i8;
    }
    amax / Q8_MAX
}

#[cfg(test)]
mod tests {
    use super::super::test_inputs::noise;
    use super::*;

    #[test]
    fn values_round_trip_within_half_a_step_and_the_sums_are_the_values_sums() {
        let (n, cols) = (3, 512);
        let mut x = noise(n * cols, 17);
        // Blocks of very different magnitudes: each block has its own scale.
        x[256..512].iter_mut().for_each(|v| *v *= 1e-3);
        x[1024..1280].iter_mut().for_each(|v| *v *= 40.0);
        let mut q = QuantRowsK::new();
        q.quantize(&x, n, cols);
        assert_eq!((q.rows(), q.cols()), (n, cols));
        for i in 0..n {
            for (b, &d) in q.d(i).iter().enumerate() {
                let (xb, qb) = (&x[i * cols + b * QK_K..][..QK_K], &q.qs(i)[b * QK_K..][..QK_K]);
                let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
                assert_eq!(d, amax / 127.0);
                assert!(qb.iter().any(|&v| v.abs() == 127) && qb.iter().all(|&v| v != -128));
                for (&v, &o) in qb.iter().zip(xb) {
                    assert!((v as f32 * d - o).abs() <= d * 0.5 * (1.0 + 1e-5), "row {i} block {b}: {v} for {o}");
                }
            }
            for (s, chunk) in q.bsums(i).iter().zip(q.qs(i).chunks_exact(BSUM_LEN)) {
                assert_eq!(*s as i32, chunk.iter().map(|&v| v as i32).sum::<i32>());
            }
        }
    }

    #[test]
    fn ties_round_to_even_and_a_zero_block_has_zero_scale() {
        let mut x = vec![0f32; 2 * QK_K];
        x[..5].copy_from_slice(&[127.0, 0.5, 1.5, 2.5, -2.5]);
        let mut q = QuantRowsK::new();
        q.quantize(&x, 1, 2 * QK_K);
        assert_eq!(&q.qs(0)[..5], &[127, 0, 2, 2, -2]);
        assert_eq!(q.d(0), &[1.0, 0.0]);
        assert!(q.qs(0)[QK_K..].iter().all(|&v| v == 0) && q.bsums(0)[16..].iter().all(|&s| s == 0));
    }

    #[test]
    #[should_panic(expected = "activations: 300 values")]
    fn a_row_that_is_not_whole_blocks_is_refused() {
        QuantRowsK::new().quantize(&[0.0; 300], 1, 300);
    }
}
