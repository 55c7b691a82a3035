//! AVX2 + FMA + F16C kernels (x86-64) over f32 rows: the float dot product, f16 row
//! conversion, and the activation block quantizer. Every function here requires those CPU
//! features: the callers only reach them at `Isa::Avx2` or `Isa::Avx512`, which
//! `Isa::available` grants after `is_x86_feature_detected!` said yes.

use std::arch::x86_64::*;

/// The coefficients of [`exp_ps`]'s polynomial for `2^r` on `[-0.5, 0.5]`, highest degree first
/// (its constant term, 1, is the last step); every SIMD width takes them in this order.
pub(super) const EXP2_POLY: [f32; 6] =
    [1.535_336_2e-4, 1.339_887_4e-3, 9.618_437e-3, 5.550_332_5e-2, 0.240_226_48, std::f32::consts::LN_2];

/// `e^x` lane-wise for `x <= 88`: `2^(x log2 e)` as Cephes' `exp2f` computes it (`2^n * 2^r`
/// with `|r| <= 1/2` and a degree-6 polynomial), 13 operations where Cephes' `expf` (`ln 2`
/// in two parts) took 17. Rounding `x log2 e` costs about `|x|` ulps of the result, which only
/// weighs where the result is small (scores far below the row's largest): outputs stay within
/// the attention tests' bound. From `x log2 e = -127` down (masked, minus infinite scores too)
/// it returns exactly 0.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn exp_ps(x: __m256) -> __m256 {
    let x = _mm256_max_ps(_mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)), _mm256_set1_ps(-127.0));
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(x);
    let r = _mm256_sub_ps(x, n);
    let mut p = _mm256_set1_ps(EXP2_POLY[0]);
    for c in &EXP2_POLY[1..] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(*c));
    }
    let y = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0));
    // `n + 127` is 0 at -127: a zero bit pattern, so the product is 0.
    let pow2n =
        _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127))));
    _mm256_mul_ps(y, pow2n)
}

/// `$gate[k] = $step($gate[k], $up[k])`, eight at a time; the last `len % 8` go through the same
/// vector code (padded), so that an element's result does not depend on where it sits in the
/// slice (a row's values do not change with the batch around it). A macro rather than a function
/// taking the step, so that the step stays inlined (a `#[target_feature]` function is no closure).
macro_rules! gated {
    ($gate:expr, $up:expr, $step:ident) => {{
        let (gate, up): (&mut [f32], &[f32]) = ($gate, $up);
        let mut gc = gate.chunks_exact_mut(8);
        let mut uc = up.chunks_exact(8);
        for (g, u) in gc.by_ref().zip(uc.by_ref()) {
            // SAFETY: both chunks are eight f32s.
            unsafe {
                _mm256_storeu_ps(g.as_mut_ptr(), $step(_mm256_loadu_ps(g.as_ptr()), _mm256_loadu_ps(u.as_ptr())))
            };
        }
        let (gr, ur) = (gc.into_remainder(), uc.remainder());
        if !gr.is_empty() {
            let (mut g8, mut u8) = ([0f32; 8], [0f32; 8]);
            g8[..gr.len()].copy_from_slice(gr);
            u8[..ur.len()].copy_from_slice(ur);
            // SAFETY: both buffers are eight f32s.
            unsafe {
                _mm256_storeu_ps(g8.as_mut_ptr(), $step(_mm256_loadu_ps(g8.as_ptr()), _mm256_loadu_ps(u8.as_ptr())))
            };
            gr.copy_from_slice(&g8[..gr.len()]);
        }
    }};
}

/// `gate[k] = silu(gate[k]) * up[k]`, eight at a time with [`exp_ps`] (see `gated!`).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `gate` and `up` have the same length.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn swiglu(gate: &mut [f32], up: &[f32]) {
    gated!(gate, up, swiglu8)
}

/// `gate[k] = gelu_tanh(gate[k]) * up[k]` (`ops::gelu_tanh`), as [`swiglu`] does its.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `gate` and `up` have the same length.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn geglu(gate: &mut [f32], up: &[f32]) {
    gated!(gate, up, geglu8)
}

/// `silu(g) * u` lane-wise: `g / (1 + e^-g) * u`, with `e^-g` saturated at `e^88` (past it the
/// exponent trick would overflow) where silu is already 0 to f32's precision.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn swiglu8(g: __m256, u: __m256) -> __m256 {
    let e = exp_ps(_mm256_min_ps(_mm256_sub_ps(_mm256_setzero_ps(), g), _mm256_set1_ps(88.0)));
    _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0), e)), u)
}

/// `gelu_tanh(g) * u` lane-wise: `g / (1 + e^(-2z)) * u` with `z = sqrt(2 / pi) (g + 0.044715
/// g^3)`, `e^(-2z)` saturated at `e^88` as in [`swiglu8`].
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn geglu8(g: __m256, u: __m256) -> __m256 {
    use super::ops::{GELU_CUBIC, GELU_SQRT_2_OVER_PI};
    let g3 = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
    let z = _mm256_mul_ps(_mm256_set1_ps(GELU_SQRT_2_OVER_PI), _mm256_fmadd_ps(_mm256_set1_ps(GELU_CUBIC), g3, g));
    let e = exp_ps(_mm256_min_ps(_mm256_mul_ps(_mm256_set1_ps(-2.0), z), _mm256_set1_ps(88.0)));
    _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0), e)), u)
}

/// The sum of the eight lanes of `v`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(crate) fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
}

/// f32 dot product with four FMA accumulators.
///
/// # Safety
/// The CPU must support AVX2 and FMA; `a` and `b` have the same length.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut k = 0;
    // SAFETY: every read is at an offset below `n` (the loop conditions), inside both slices.
    unsafe {
        while k + 32 <= n {
            for (u, accu) in acc.iter_mut().enumerate() {
                let o = k + 8 * u;
                *accu = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(o)), _mm256_loadu_ps(pb.add(o)), *accu);
            }
            k += 32;
        }
        while k + 8 <= n {
            acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(k)), _mm256_loadu_ps(pb.add(k)), acc[0]);
            k += 8;
        }
    }
    let mut s = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    while k < n {
        // SAFETY: `k < n`, inside both slices.
        s += unsafe { *pa.add(k) * *pb.add(k) };
        k += 1;
    }
    s
}

/// f16 bytes to f32 values with F16C (exact, like the scalar conversion): [`f16s_to_f32`] over
/// the bytes (little-endian, as x86 reads them).
///
/// # Safety
/// The CPU must support F16C and AVX; `src` holds `2 * out.len()` bytes.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn f16_row(src: &[u8], out: &mut [f32]) {
    let n = out.len().min(src.len() / 2);
    // SAFETY: `src` holds `n` f16 values and `out` room for them; `f16s_to_f32` reads them
    // unaligned.
    unsafe { f16s_to_f32(src.as_ptr() as *const u16, n, out.as_mut_ptr()) };
}

/// f32 values to f16 bits with F16C, rounding to nearest even (the scalar `f32_to_f16`'s
/// bits, NaN payloads aside); the last `len % 8` through the scalar conversion.
///
/// # Safety
/// The CPU must support AVX and F16C; `src` and `dst` have the same length.
#[target_feature(enable = "avx,f16c")]
pub unsafe fn f32_to_f16_row(src: &[f32], dst: &mut [u16]) {
    let n = src.len().min(dst.len());
    let mut k = 0;
    while k + 8 <= n {
        // SAFETY: values `k..k + 8` are within both slices (`k + 8 <= n`).
        unsafe {
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(src.as_ptr().add(k)));
            _mm_storeu_si128(dst.as_mut_ptr().add(k) as *mut __m128i, h);
        }
        k += 8;
    }
    for j in k..n {
        dst[j] = super::float16::f32_to_f16(src[j]);
    }
}

/// f32 values rounded to f16 and then to bf16 (both to nearest even, as a bf16 cache stores
/// them: `float16::f32s_to_bf16_through_f16`), 8 at a time; the last `len % 8` and groups of 8
/// with a NaN through the scalar conversions.
///
/// # Safety
/// The CPU must support AVX2 and F16C; `src` and `dst` have the same length.
#[target_feature(enable = "avx2,f16c")]
pub unsafe fn f32_to_bf16_through_f16_row(src: &[f32], dst: &mut [u16]) {
    use super::float16::{f16_to_f32, f32_to_bf16, f32_to_f16};
    let scalar = |x: f32| f32_to_bf16(f16_to_f32(f32_to_f16(x)));
    let n = src.len().min(dst.len());
    let mut k = 0;
    while k + 8 <= n {
        // SAFETY: values `k..k + 8` are within both slices (`k + 8 <= n`).
        let x = unsafe { _mm256_loadu_ps(src.as_ptr().add(k)) };
        if _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_UNORD_Q>(x, x)) != 0 {
            (k..k + 8).for_each(|j| dst[j] = scalar(src[j]));
            k += 8;
            continue;
        }
        let w = _mm256_castps_si256(_mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x)));
        let odd = _mm256_and_si256(_mm256_srli_epi32(w, 16), _mm256_set1_epi32(1));
        let b = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(w, _mm256_set1_epi32(0x7fff)), odd), 16);
        // The eight 32-bit lanes' low halves, in order: the two 128-bit halves packed together.
        let packed = _mm_packus_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256::<1>(b));
        // SAFETY: as above.
        unsafe { _mm_storeu_si128(dst.as_mut_ptr().add(k) as *mut __m128i, packed) };
        k += 8;
    }
    (k..n).for_each(|j| dst[j] = scalar(src[j]));
}

/// `n` f16 values from `src` (aligned or not) to f32 at `dst`, exact.
///
/// # Safety
/// The CPU must support AVX and F16C; `src` holds `n` values and `dst` room for `n`.
#[target_feature(enable = "avx,f16c")]
#[inline]
pub(super) unsafe fn f16s_to_f32(src: *const u16, n: usize, dst: *mut f32) {
    let mut k = 0;
    while k + 8 <= n {
        // SAFETY: values `k..k + 8 <= n` of both (contract).
        unsafe { _mm256_storeu_ps(dst.add(k), _mm256_cvtph_ps(_mm_loadu_si128(src.add(k) as *const __m128i))) };
        k += 8;
    }
    while k < n {
        // SAFETY: value `k < n` of both (contract).
        unsafe { *dst.add(k) = super::float16::f16_to_f32(src.add(k).read_unaligned()) };
        k += 1;
    }
}

/// Every 32-value block of `x` quantized into `q` ([`quantize_block`]), its `(d, d * sum)`
/// rounded to f16 ([`f16_scales`]) into `d` and `s`: one loop with this level's features, so that
/// both inline (called from the portable loop, the scales' conversion stayed a call per block).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize_blocks(x: &[f32], q: &mut [i8], d: &mut [f32], s: &mut [f32]) {
    for ((xb, qb), (d, s)) in x.chunks_exact(32).zip(q.chunks_exact_mut(32)).zip(d.iter_mut().zip(s)) {
        // SAFETY: the blocks are 32 long; the features are ours.
        let (dq, sum) = unsafe { quantize_block(xb, qb) };
        (*d, *s) = f16_scales(dq, sum);
    }
}

/// `(d, d * sum)` rounded to f16 and back, as `quantized_activations::f16_scales` does by hand:
/// F16C rounds half to even as that code does, so the bits are the same, in two instructions
/// instead of two calls of branchy integer code per block.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn f16_scales(d: f32, sum: i32) -> (f32, f32) {
    let v = _mm_setr_ps(d, d * sum as f32, 0.0, 0.0);
    let r = _mm_cvtph_ps(_mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v));
    (_mm_cvtss_f32(r), _mm_cvtss_f32(_mm_shuffle_ps(r, r, 1)))
}

/// Quantizes one block of 32 activations to int8 with scale `d = amax / 127`; returns
/// `(d, sum(q))`. Bit-identical to the portable `quantize_block` of `quantized_activations.rs`
/// (same max, same products, the same half-to-even rounding).
///
/// # Safety
/// The CPU must support AVX2.
///
/// # Panics
/// When `x` or `q` holds fewer than 32 values.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quantize_block(x: &[f32], q: &mut [i8]) -> (f32, i32) {
    assert!(x.len() >= 32 && q.len() >= 32);
    let p = x.as_ptr();
    // SAFETY: `x` holds at least 32 values (asserted).
    let v = unsafe {
        [_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)), _mm256_loadu_ps(p.add(16)), _mm256_loadu_ps(p.add(24))]
    };
    let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let m = _mm256_max_ps(
        _mm256_max_ps(_mm256_and_ps(v[0], abs), _mm256_and_ps(v[1], abs)),
        _mm256_max_ps(_mm256_and_ps(v[2], abs), _mm256_and_ps(v[3], abs)),
    );
    let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
    let d = amax / 127.0;
    let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
    let mut t = [_mm256_setzero_si256(); 4];
    for k in 0..4 {
        // The default MXCSR mode rounds half to even, as ggml's `_mm256_round_ps(_MM_ROUND_NEAREST)`.
        t[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], id));
    }
    let sum = _mm256_add_epi32(_mm256_add_epi32(t[0], t[1]), _mm256_add_epi32(t[2], t[3]));
    let sum = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    let sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0b01_00_11_10));
    let sum = _mm_cvtsi128_si32(_mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0b10_11_00_01)));
    // The packs interleave 128-bit lanes; the permute puts the 32 bytes back in order.
    let p16 = _mm256_packs_epi16(_mm256_packs_epi32(t[0], t[1]), _mm256_packs_epi32(t[2], t[3]));
    let ordered = _mm256_permutevar8x32_epi32(p16, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    // SAFETY: `q` holds at least 32 values (asserted).
    unsafe { _mm256_storeu_si256(q.as_mut_ptr() as *mut __m256i, ordered) };
    (d, sum)
}

#[cfg(test)]
mod tests {
    use super::super::isa::Isa;
    use super::super::ops;
    use super::super::test_inputs::{isas_under_test, noise};

    #[test]
    fn swiglu_matches_the_portable_one_and_an_element_does_not_depend_on_its_place() {
        if !isas_under_test().contains(&Isa::Avx2) {
            return;
        }
        let mut g: Vec<f32> = noise(37, 3).iter().map(|v| v * 12.0).collect();
        g.extend([0.0, -0.0, 88.5, -88.5, 200.0, -200.0, 1e-30, f32::MIN_POSITIVE]);
        let u: Vec<f32> = noise(g.len(), 4);
        let mut want = g.clone();
        ops::swiglu(&mut want, &u);
        let mut got = g.clone();
        // SAFETY: AVX2, FMA and F16C were detected (the level is available); equal lengths.
        unsafe { super::swiglu(&mut got, &u) };
        for (k, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!((a - b).abs() <= 2e-6 * b.abs().max(1e-3), "entry {k} (g = {}): {a} vs {b}", g[k]);
        }
        // The same values at other offsets and lengths (the padded tail included).
        for start in [1, 5, 9] {
            let mut part = g[start..].to_vec();
            // SAFETY: as above.
            unsafe { super::swiglu(&mut part, &u[start..]) };
            assert_eq!(part, got[start..], "offset {start}");
        }
    }
}
