//! [`QuantRows`]: activations quantized to 8-bit blocks of 32, once per matmul call, so that
//! the 4- and 8-bit weight types can use integer dot products (as llama.cpp does with its
//! Q8_0/Q8_1 blocks).
//!
//! Layout is structure-of-arrays: the int8 values of a row are contiguous, and per block we
//! keep the scale `d` and `s = d * sum(q)`, which the offset terms of Q4_0 (`-8`) and Q4_1
//! (`+m`) need. The SIMD kernels also get a copy laid out as they read it, so that a
//! plain vector load replaces shuffles per block and row (the copy is made once per call and
//! read once per weight row): blocks in groups of four, one per 128-bit lane (see [`Grouped`]).
//!
//! The numbers are ggml's Q8_1 exactly (`quantize_row_q8_1` on x86): `q = round_half_even(x *
//! 127 / amax)`, `d` and `s` rounded to f16. Matching the reference format bit for bit moved the
//! demo model's teacher-forced top-1 agreement with llama.cpp from 230 to 232 of 239 positions,
//! and our distance from the exact float64 logits down a little (0.163 to 0.161).

use super::block::QK;
use super::float16::{f16_to_f32, f32_to_f16};
use super::isa::Isa;

/// Largest magnitude of a quantized activation (symmetric int8, as ggml's Q8_0).
const Q8_MAX: f32 = 127.0;
/// Blocks per group of the grouped copy, one per 128-bit lane: an AVX-512 register holds a
/// group, an AVX2 register half of one.
pub(crate) const GROUP: usize = 4;
/// What the AVX-512 kernel adds to a signed Q8_0 weight to make it the unsigned operand of
/// `vpdpbusd`: `w + 128` is in 0..=255 for every int8.
const Q8_BIAS: i32 = 128;
/// Integer lanes per block in the SIMD kernels: lane `k` sums values `4k..4k+4` and
/// `16+4k..16+4k+4`.
const INT_LANES: usize = 4;

/// The activations as the SIMD kernels read them, per row and group of [`GROUP`] blocks (the
/// last group padded with zero blocks): values `0..16` of the four blocks (64 bytes), then
/// values `16..32`; each block's `d` over its 4 integer lanes; `s` per block; and per integer
/// lane `-128 * sum(q)`, the start value that cancels the +128 bias of Q8_0 weights.
#[derive(Default)]
struct Grouped {
    qs: Vec<i8>,
    d: Vec<f32>,
    s: Vec<f32>,
    bias: Vec<i32>,
    groups: usize,
}

#[derive(Default)]
pub struct QuantRows {
    qs: Vec<i8>,
    d: Vec<f32>,
    s: Vec<f32>,
    grouped: Grouped,
    cols: usize,
    n: usize,
}

impl QuantRows {
    pub fn new() -> QuantRows {
        QuantRows::default()
    }

    /// Quantizes `n` rows of `cols` values (`cols` a multiple of 32), reusing the buffers, and
    /// with `grouped` makes the SIMD levels' grouped copy that the row-major kernels read (the
    /// interleaved ones read the rows as they are). Every instruction set gives bit-identical
    /// results.
    pub(crate) fn quantize(&mut self, isa: Isa, x: &[f32], n: usize, cols: usize, grouped: bool) {
        assert!(cols.is_multiple_of(QK) && x.len() == n * cols, "activations: {} values for {n} x {cols}", x.len());
        let nb = n * cols / QK;
        self.qs.resize(n * cols, 0);
        self.d.resize(nb, 0.0);
        self.s.resize(nb, 0.0);
        self.cols = cols;
        self.n = n;
        match isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: both x86 SIMD levels imply AVX2, FMA and F16C (detected); `qs`, `d` and `s`
            // were sized for the blocks of `x` above.
            Isa::Avx2 | Isa::Avx512 => unsafe {
                super::kern_avx2_f32::quantize_blocks(x, &mut self.qs, &mut self.d, &mut self.s)
            },
            _ => {
                let blocks = x.chunks_exact(QK).zip(self.qs.chunks_exact_mut(QK));
                for ((xb, qb), (d, s)) in blocks.zip(self.d.iter_mut().zip(self.s.iter_mut())) {
                    let (dq, sum) = quantize_block(xb, qb);
                    (*d, *s) = f16_scales(dq, sum);
                }
            }
        }
        if grouped && matches!(isa, Isa::Avx2 | Isa::Avx512) {
            // Only the AVX-512 kernel biases Q8_0 weights; AVX2 moves their signs instead.
            self.group(isa == Isa::Avx512);
        }
    }

    /// Fills [`Grouped`] from the row-major blocks; its bias start values only `with_bias`.
    fn group(&mut self, with_bias: bool) {
        let nb = self.cols / QK;
        let groups = nb.div_ceil(GROUP);
        let g = &mut self.grouped;
        g.groups = groups;
        g.qs.clear();
        g.qs.resize(self.n * groups * GROUP * QK, 0);
        g.d.clear();
        g.s.clear();
        g.bias.clear();
        for i in 0..self.n {
            for b in 0..groups * GROUP {
                let (gi, lane) = (i * groups + b / GROUP, b % GROUP);
                if b >= nb {
                    g.d.extend_from_slice(&[0.0; INT_LANES]);
                    g.s.push(0.0);
                    if with_bias {
                        g.bias.extend_from_slice(&[0; INT_LANES]);
                    }
                    continue;
                }
                let k = i * nb + b;
                let q = &self.qs[k * QK..(k + 1) * QK];
                let half = QK / 2;
                let at = gi * GROUP * QK + lane * half;
                g.qs[at..at + half].copy_from_slice(&q[..half]);
                let at = at + GROUP * half;
                g.qs[at..at + half].copy_from_slice(&q[half..]);
                g.d.extend_from_slice(&[self.d[k]; INT_LANES]);
                g.s.push(self.s[k]);
                if with_bias {
                    g.bias.extend((0..INT_LANES).map(|l| {
                        let sum = |o: usize| q[o + 4 * l..o + 4 * l + 4].iter().map(|&v| v as i32);
                        -Q8_BIAS * sum(0).chain(sum(half)).sum::<i32>()
                    }));
                }
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
    /// Where the int8 values, the scales and the sums of rows `i0..i0 + NR` start: what a
    /// kernel's tile walks. Plain loops, not `array::from_fn`, whose closures were not inlined
    /// into the kernels (they lack their target features) and cost a call each per group.
    #[inline(always)]
    #[allow(clippy::type_complexity)] // three arrays of row starts, named by the doc
    pub fn row_starts<const NR: usize>(&self, i0: usize) -> ([*const i8; NR], [*const f32; NR], [*const f32; NR]) {
        let (mut q, mut d, mut s) = ([std::ptr::null(); NR], [std::ptr::null(); NR], [std::ptr::null(); NR]);
        for j in 0..NR {
            q[j] = self.qs(i0 + j).as_ptr();
            d[j] = self.d(i0 + j).as_ptr();
            s[j] = self.s(i0 + j).as_ptr();
        }
        (q, d, s)
    }
}

/// Row `i` as [`Grouped`]: filled only when quantizing for AVX2 or AVX-512.
impl QuantRows {
    /// Groups of [`GROUP`] blocks per row.
    #[inline]
    pub fn groups(&self) -> usize {
        self.grouped.groups
    }
    #[inline]
    pub fn grouped_qs(&self, i: usize) -> &[i8] {
        let n = self.grouped.groups * GROUP * QK;
        &self.grouped.qs[i * n..(i + 1) * n]
    }
    #[inline]
    pub fn grouped_d(&self, i: usize) -> &[f32] {
        let n = self.grouped.groups * GROUP * INT_LANES;
        &self.grouped.d[i * n..(i + 1) * n]
    }
    #[inline]
    pub fn grouped_s(&self, i: usize) -> &[f32] {
        let n = self.grouped.groups * GROUP;
        &self.grouped.s[i * n..(i + 1) * n]
    }
    #[inline]
    pub fn grouped_bias(&self, i: usize) -> &[i32] {
        let n = self.grouped.groups * GROUP * INT_LANES;
        &self.grouped.bias[i * n..(i + 1) * n]
    }
}

/// Symmetric quantization of one block: returns `(d, sum(q))`.
fn quantize_block(x: &[f32], q: &mut [i8]) -> (f32, i32) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / Q8_MAX;
    let id = if amax != 0.0 { Q8_MAX / amax } else { 0.0 };
    let mut sum = 0i32;
    for (qv, &v) in q.iter_mut().zip(x) {
        let r = (v * id).round_ties_even() as i32;
        *qv = r as i8;
        sum += r;
    }
    (d, sum)
}

/// The block's `(d, d * sum)` as ggml keeps them in its Q8_1 blocks: rounded to f16.
#[inline]
fn f16_scales(d: f32, sum: i32) -> (f32, f32) {
    (f16_to_f32(f32_to_f16(d)), f16_to_f32(f32_to_f16(d * sum as f32)))
}

#[cfg(test)]
mod tests {
    use super::super::test_inputs::isas_under_test;
    use super::*;

    #[test]
    fn blocks_round_trip_within_half_a_step() {
        let x: Vec<f32> = (0..128).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013).collect();
        let mut q = QuantRows::new();
        q.quantize(Isa::Scalar, &x, 2, 64, true);
        for i in 0..2 {
            for (b, (&d, &s)) in q.d(i).iter().zip(q.s(i)).enumerate() {
                let qs = &q.qs(i)[b * QK..(b + 1) * QK];
                assert!(qs.iter().any(|&v| v.abs() == 127), "the largest value maps to +-127");
                let sum: i32 = qs.iter().map(|&v| v as i32).sum();
                assert_eq!(d, f16_round(d), "d is kept at f16 precision");
                assert!((s - d * sum as f32).abs() <= (d * sum as f32).abs() / 1024.0);
                for (k, &v) in qs.iter().enumerate() {
                    let orig = x[i * 64 + b * QK + k];
                    // Half a step, plus the f16 rounding of d over at most 127 steps.
                    assert!((v as f32 * d - orig).abs() <= d * (0.5 + 127.0 / 2048.0) + 1e-6);
                }
            }
        }
    }

    fn f16_round(v: f32) -> f32 {
        f16_to_f32(f32_to_f16(v))
    }

    #[test]
    fn ties_round_to_even_as_ggml_does() {
        // amax 127 makes the multiplier exactly 1, so the inputs are the rounded values' inputs.
        let mut x = vec![0f32; 32];
        x[..6].copy_from_slice(&[127.0, 0.5, 1.5, 2.5, -0.5, -2.5]);
        let mut q = QuantRows::new();
        q.quantize(Isa::Scalar, &x, 1, 32, true);
        assert_eq!(&q.qs(0)[..6], &[127, 0, 2, 2, 0, -2]);
    }

    #[test]
    fn every_isa_quantizes_identically() {
        let x: Vec<f32> =
            (0..3 * 96).map(|i| ((i * 53 % 255) as f32 - 127.0) * 0.5 + if i % 7 == 0 { 0.25 } else { 0.0 }).collect();
        let mut want = QuantRows::new();
        want.quantize(Isa::Scalar, &x, 3, 96, true);
        for isa in isas_under_test() {
            let mut got = QuantRows::new();
            got.quantize(isa, &x, 3, 96, true);
            for i in 0..3 {
                assert_eq!((got.qs(i), got.d(i), got.s(i)), (want.qs(i), want.d(i), want.s(i)), "{}", isa.name());
            }
        }
    }

    #[test]
    fn the_grouped_copy_holds_every_block_in_its_lane_and_pads_with_zeros() {
        // 6 blocks per row: one full group and one of 2 blocks plus 2 of padding.
        let (n, cols) = (2, 6 * QK);
        let x: Vec<f32> = (0..n * cols).map(|i| ((i * 31 % 97) as f32 - 48.0) * 0.07).collect();
        for isa in isas_under_test().into_iter().filter(|&i| i != Isa::Scalar) {
            let mut q = QuantRows::new();
            q.quantize(isa, &x, n, cols, true);
            assert_eq!(q.groups(), 2);
            // The bias start values are the AVX-512 kernel's alone.
            let with_bias = isa == Isa::Avx512;
            for i in 0..n {
                let (gq, gd, gs) = (q.grouped_qs(i), q.grouped_d(i), q.grouped_s(i));
                for b in 0..2 * GROUP {
                    let (g, lane) = (b / GROUP, b % GROUP);
                    let lo = &gq[g * 128 + lane * 16..][..16];
                    let hi = &gq[g * 128 + 64 + lane * 16..][..16];
                    let (d, s) = (&gd[b * 4..b * 4 + 4], gs[b]);
                    let bias = with_bias.then(|| &q.grouped_bias(i)[b * 4..b * 4 + 4]);
                    if b >= 6 {
                        assert!(lo.iter().chain(hi).all(|&v| v == 0) && s == 0.0);
                        assert!(d == [0.0; 4] && bias.is_none_or(|c| c == [0; 4]));
                        continue;
                    }
                    let block = &q.qs(i)[b * QK..(b + 1) * QK];
                    assert_eq!((lo, hi), (&block[..16], &block[16..]));
                    assert_eq!((d, s), (&[q.d(i)[b]; 4][..], q.s(i)[b]));
                    for (l, &c) in bias.unwrap_or_default().iter().enumerate() {
                        let sum: i32 =
                            [4 * l, 16 + 4 * l].iter().flat_map(|&o| &block[o..o + 4]).map(|&v| v as i32).sum();
                        assert_eq!(c, -128 * sum, "row {i} block {b} lane {l}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_f16c_scales_are_the_hand_rounded_ones_bit_for_bit() {
        if !isas_under_test().contains(&Isa::Avx2) {
            return;
        }
        // Scales across the f16 range and past it (subnormal, normal, overflow to infinity),
        // with mantissas that land on, beside and between f16 steps, times every block sum's
        // magnitude class.
        let mut seed = 1u32;
        for exp in 90..160u32 {
            for _ in 0..64 {
                seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                let man = match seed % 4 {
                    0 => seed >> 9 & !0x1fff,
                    1 => (seed >> 9 & !0x1fff) | 0x1000,
                    _ => seed >> 9,
                };
                let d = f32::from_bits(exp << 23 | man);
                for sum in [0, 1, -1, 127, -4064, 4064, (seed % 8129) as i32 - 4064] {
                    // SAFETY: AVX2 (and so F16C, which the level requires) was detected.
                    let got = unsafe { super::super::kern_avx2_f32::f16_scales(d, sum) };
                    let want = f16_scales(d, sum);
                    assert_eq!(
                        (got.0.to_bits(), got.1.to_bits()),
                        (want.0.to_bits(), want.1.to_bits()),
                        "{d:e} x {sum}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_zero_block_has_zero_scale_and_no_nan() {
        let mut q = QuantRows::new();
        q.quantize(Isa::Scalar, &[0.0; 32], 1, 32, true);
        assert_eq!(q.d(0), &[0.0]);
        assert!(q.qs(0).iter().all(|&v| v == 0));
    }
}
