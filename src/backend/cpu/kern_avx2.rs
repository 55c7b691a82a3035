//! AVX2 + FMA + F16C integer-dot kernels (x86-64) for the 32-value block types, in the style
//! of llama.cpp: unsigned 4-bit weights times signed 8-bit activations with `maddubs`, widened
//! with `madd`, one f32 scale per block and integer lane. Every function here requires those
//! CPU features: `matmul.rs` only calls them after `is_x86_feature_detected!` said yes.

use super::block::{IntBlock, Offset, Weights, QK};
use super::kern_avx2_f32::hsum;
use super::quantized_activations::{QuantRows, GROUP};
use std::arch::x86_64::*;

tile_driver!("avx2,fma,f16c");

/// Dots of one weight row (`nb` blocks at `w`) with activation rows `i0..i0 + NR`.
///
/// Two blocks per register, one per 128-bit lane, with a block's values `0..16` and `16..32`
/// in two registers whose products add into the same integer lanes: per activation row two
/// blocks then cost one convert, one scale multiply and one FMA (one per block before). The
/// activations come from `QuantRows`' grouped copy, as for AVX-512. Every activation row runs
/// the same operations in the same order, so a row's result does not depend on its batch.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `w` points at `nb` readable blocks of `B`, `x` holds
/// rows `i0..i0 + NR` of `nb` blocks, quantized for this level (its grouped copy).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn tile<B: IntBlock, const NR: usize>(w: *const u8, nb: usize, x: &QuantRows, i0: usize) -> [f32; NR] {
    let bb = B::BYTES;
    let ones = _mm256_set1_epi16(1);
    let nib = _mm256_set1_epi8(0x0f);
    let mut acc = [_mm256_setzero_ps(); NR];
    let mut off = [_mm_setzero_ps(); NR];
    let xq: [*const i8; NR] = std::array::from_fn(|j| x.grouped_qs(i0 + j).as_ptr());
    let xd: [*const f32; NR] = std::array::from_fn(|j| x.grouped_d(i0 + j).as_ptr());
    let xs: [*const f32; NR] = std::array::from_fn(|j| x.grouped_s(i0 + j).as_ptr());
    for g in 0..nb.div_ceil(GROUP) {
        // SAFETY: group `g` starts inside the row (`g * GROUP < nb`).
        let blk = unsafe { w.add(g * GROUP * bb) };
        let t = (nb - g * GROUP).min(GROUP);
        // 16 bytes at `o` of block `k` of the group, zeros past the row's last block.
        let ld = |k: usize, o: usize| {
            if k < t {
                // SAFETY: block `k < t` is in the row, and `o + 16` is within a block.
                unsafe { _mm_loadu_si128(blk.add(k * bb + o) as *const __m128i) }
            } else {
                _mm_setzero_si128()
            }
        };
        // The group's scales as [d0, m0, d1, m1, ...] (Q4_1) or [d0, d1, d2, d3] (others).
        let h32 = |k: usize| {
            if k < t {
                // SAFETY: block `k < t` is in the row, and starts with at least 4 bytes of
                // scales (or scale and weights).
                unsafe { std::ptr::read_unaligned(blk.add(k * bb) as *const i32) }
            } else {
                0
            }
        };
        let h16 = |k: usize| h32(k) & 0xffff;
        let (d, m) = if matches!(B::OFFSET, Offset::Min) {
            let f = _mm256_cvtph_ps(_mm_setr_epi32(h32(0), h32(1), h32(2), h32(3)));
            let m = _mm256_permutevar8x32_ps(f, _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7));
            (f, _mm256_castps256_ps128(m))
        } else {
            let v = _mm_setr_epi32(h16(0), h16(1), h16(2), h16(3));
            let f = _mm_cvtph_ps(_mm_packus_epi32(v, v));
            let m = match B::OFFSET {
                Offset::TimesScale(c) => _mm_mul_ps(_mm_set1_ps(c), f),
                _ => _mm_setzero_ps(),
            };
            // [d0, d0, d1, d1, ...]: d of block k at 2k, as in Q4_1's, so one permute serves both.
            let d = _mm256_set_m128(_mm_unpackhi_ps(f, f), _mm_unpacklo_ps(f, f));
            (d, m)
        };
        for half in 0..2 {
            if 2 * half >= t {
                break;
            }
            let (k0, k1) = (2 * half, 2 * half + 1);
            let sel = if half == 0 {
                _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2)
            } else {
                _mm256_setr_epi32(4, 4, 4, 4, 6, 6, 6, 6)
            };
            let dh = _mm256_permutevar8x32_ps(d, sel);
            // maddubs wants unsigned weights: Q8_0's magnitudes here, their signs moved onto the
            // activations below.
            let (lo, hi) = match B::WEIGHTS {
                Weights::Int8 => (
                    _mm256_set_m128i(ld(k1, B::QS_AT), ld(k0, B::QS_AT)),
                    _mm256_set_m128i(ld(k1, B::QS_AT + 16), ld(k0, B::QS_AT + 16)),
                ),
                Weights::Nibbles => {
                    let q = _mm256_set_m128i(ld(k1, B::QS_AT), ld(k0, B::QS_AT));
                    (_mm256_and_si256(q, nib), _mm256_and_si256(_mm256_srli_epi16(q, 4), nib))
                }
            };
            let (lo_abs, hi_abs) = (_mm256_sign_epi8(lo, lo), _mm256_sign_epi8(hi, hi));
            for j in 0..NR {
                // SAFETY: each grouped activation row holds `nb.div_ceil(GROUP)` groups of
                // `GROUP * QK` int8s (values 0..16 of the group's blocks, then 16..32) and
                // 16 scales per group.
                let (alo, ahi, xdh) = unsafe {
                    let a = xq[j].add(g * GROUP * QK + half * 32);
                    (
                        _mm256_loadu_si256(a as *const __m256i),
                        _mm256_loadu_si256(a.add(64) as *const __m256i),
                        _mm256_loadu_ps(xd[j].add(g * 16 + half * 8)),
                    )
                };
                let p = if matches!(B::WEIGHTS, Weights::Int8) {
                    // Each half is widened on its own: two int16 sums of 128 * 127 would overflow.
                    let pl = _mm256_maddubs_epi16(lo_abs, _mm256_sign_epi8(alo, lo));
                    let ph = _mm256_maddubs_epi16(hi_abs, _mm256_sign_epi8(ahi, hi));
                    _mm256_add_epi32(_mm256_madd_epi16(pl, ones), _mm256_madd_epi16(ph, ones))
                } else {
                    // 4-bit weights: the two int16 sums stay within 4 * 15 * 127.
                    let s = _mm256_add_epi16(_mm256_maddubs_epi16(lo, alo), _mm256_maddubs_epi16(hi, ahi));
                    _mm256_madd_epi16(s, ones)
                };
                let scale = _mm256_mul_ps(dh, xdh);
                acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, acc[j]);
            }
        }
        if !matches!(B::OFFSET, Offset::None) {
            for j in 0..NR {
                // SAFETY: each grouped activation row holds `GROUP` sums per group.
                let xsg = unsafe { _mm_loadu_ps(xs[j].add(g * GROUP)) };
                off[j] = _mm_fmadd_ps(m, xsg, off[j]);
            }
        }
    }
    std::array::from_fn(|j| hsum(_mm256_add_ps(acc[j], _mm256_insertf128_ps(_mm256_setzero_ps(), off[j], 0))))
}
