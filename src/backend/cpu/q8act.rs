//! Activations quantized to 8-bit blocks of 32, once per matmul call, so that the 4- and 8-bit
//! weight types can use integer dot products (as llama.cpp does with its Q8_0/Q8_1 blocks).
//!
//! Layout is structure-of-arrays: the int8 values of a row are contiguous (two blocks fill one
//! 512-bit register), and per block we keep the scale `d` and `s = d * sum(q)`, which the
//! offset terms of Q4_0 (`-8`) and Q4_1 (`+m`) need. The SIMD kernels also get both repeated
//! over the 8 lanes a block's integer dot occupies (`s` pre-divided by 8, so that the 8 lanes
//! sum to it): a plain vector load then replaces a broadcast and blend per block and row.

use super::dequant::QK;

/// f32 lanes one block's integer dot fills in the SIMD kernels.
const LANES: usize = 8;
/// Largest magnitude of a quantized activation (symmetric int8, as ggml's Q8_0).
const Q8_MAX: f32 = 127.0;

#[derive(Default)]
pub struct QuantRows {
    qs: Vec<i8>,
    d: Vec<f32>,
    s: Vec<f32>,
    d8: Vec<f32>,
    s8: Vec<f32>,
    cols: usize,
    n: usize,
}

impl QuantRows {
    pub fn new() -> QuantRows {
        QuantRows::default()
    }

    /// Quantizes `n` rows of `cols` values (`cols` a multiple of 32), reusing the buffers.
    pub fn quantize(&mut self, x: &[f32], n: usize, cols: usize) {
        assert!(cols.is_multiple_of(QK) && x.len() == n * cols, "activations: {} values for {n} x {cols}", x.len());
        let nb = n * cols / QK;
        self.qs.resize(n * cols, 0);
        self.d.resize(nb, 0.0);
        self.s.resize(nb, 0.0);
        self.cols = cols;
        self.n = n;
        let blocks = x.chunks_exact(QK).zip(self.qs.chunks_exact_mut(QK));
        for ((xb, qb), (d, s)) in blocks.zip(self.d.iter_mut().zip(self.s.iter_mut())) {
            (*d, *s) = quantize_block(xb, qb);
        }
        self.d8.clear();
        self.s8.clear();
        for (&d, &s) in self.d.iter().zip(&self.s) {
            self.d8.extend_from_slice(&[d; LANES]);
            self.s8.extend_from_slice(&[s / LANES as f32; LANES]);
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
    /// The block scales of row `i`.
    #[inline]
    pub fn d(&self, i: usize) -> &[f32] {
        let nb = self.cols / QK;
        &self.d[i * nb..(i + 1) * nb]
    }
    /// `d * sum(q)` per block of row `i`.
    #[inline]
    pub fn s(&self, i: usize) -> &[f32] {
        let nb = self.cols / QK;
        &self.s[i * nb..(i + 1) * nb]
    }
}

impl QuantRows {
    /// Row `i`'s block scales, each repeated 8 times.
    #[inline]
    pub fn d8(&self, i: usize) -> &[f32] {
        let n = self.cols / QK * LANES;
        &self.d8[i * n..(i + 1) * n]
    }
    /// Row `i`'s `d * sum(q) / 8` per block, each repeated 8 times.
    #[inline]
    pub fn s8(&self, i: usize) -> &[f32] {
        let n = self.cols / QK * LANES;
        &self.s8[i * n..(i + 1) * n]
    }
}

/// Symmetric quantization of one block: returns `(d, d * sum(q))`.
fn quantize_block(x: &[f32], q: &mut [i8]) -> (f32, f32) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / Q8_MAX;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut sum = 0i32;
    for (qv, &v) in q.iter_mut().zip(x) {
        // round() is half away from zero, like C's roundf that ggml uses.
        let r = (v * id).round() as i8;
        *qv = r;
        sum += r as i32;
    }
    (d, d * sum as f32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_within_half_a_step() {
        let x: Vec<f32> = (0..128).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013).collect();
        let mut q = QuantRows::new();
        q.quantize(&x, 2, 64);
        for i in 0..2 {
            for (b, (&d, &s)) in q.d(i).iter().zip(q.s(i)).enumerate() {
                let qs = &q.qs(i)[b * QK..(b + 1) * QK];
                assert!(qs.iter().any(|&v| v.abs() == 127), "the largest value maps to +-127");
                let sum: i32 = qs.iter().map(|&v| v as i32).sum();
                assert_eq!(s, d * sum as f32);
                for (k, &v) in qs.iter().enumerate() {
                    let orig = x[i * 64 + b * QK + k];
                    assert!((v as f32 * d - orig).abs() <= d * 0.5 + 1e-6);
                }
            }
        }
    }

    #[test]
    fn a_zero_block_has_zero_scale_and_no_nan() {
        let mut q = QuantRows::new();
        q.quantize(&[0.0; 32], 1, 32);
        assert_eq!(q.d(0), &[0.0]);
        assert!(q.qs(0).iter().all(|&v| v == 0));
    }
}
