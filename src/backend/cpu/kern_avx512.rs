//! AVX-512 kernels (F, BW, VL and VNNI; x86-64): four 32-value blocks of a weight row per
//! 512-bit register, one per 128-bit lane, and `vpdpbusd` for the unsigned-by-signed byte dots.
//! CPUs with AVX-512 but without VNNI (Skylake-X) take the AVX2 path instead: one kernel family
//! less to keep correct.
//!
//! Why this layout: a block's values `0..16` and `16..32` sit in two registers and add into the
//! same four integer lanes, so per activation row four blocks (128 weights) cost two
//! `vpdpbusd`, one convert, one scale multiply and one FMA; with two whole blocks per register
//! the same work took those four operations per 64 weights. The activations are laid out to
//! match once per call ([`QuantRows`]'s grouped copy), and the weights still stream from the
//! file in order, one row at a time, which the hardware prefetchers follow. (Four rows side by
//! side, one per lane, was tried: the interleaved rows cut 1-thread decode to 0.6-0.85x, even
//! with software prefetch.) Every activation row runs the same operations in the same order,
//! so a row's result does not depend on the batch it is in.

use super::block::{IntBlock, Offset, Weights, QK};
use super::quantized_activations::{QuantRows, GROUP};
use std::arch::x86_64::*;

tile_driver!("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c");

/// 16 bytes at `off` in each of `t` (at most four) blocks `bb` bytes apart, block `k` in lane
/// `k`; zeros in the lanes from `t` on.
///
/// # Safety
/// The CPU has the features enabled here; `blk` points at `t` readable blocks of `bb` bytes
/// and `off + 16 <= bb`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn lanes(blk: *const u8, bb: usize, off: usize, t: usize) -> __m512i {
    let ld = |k: usize| {
        if k < t {
            // SAFETY: block `k < t` is readable and its bytes `off..off + 16` are inside it.
            unsafe { _mm_loadu_si128(blk.add(k * bb + off) as *const __m128i) }
        } else {
            _mm_setzero_si128()
        }
    };
    let v = _mm512_castsi128_si512(ld(0));
    let v = _mm512_inserti32x4(v, ld(1), 1);
    let v = _mm512_inserti32x4(v, ld(2), 2);
    _mm512_inserti32x4(v, ld(3), 3)
}

/// `t` (at most four) blocks' weights as unsigned bytes (values `0..16` of each block in its
/// lane, then `16..32`), scales over their lanes (`[d0 x4 | d1 x4 | d2 x4 | d3 x4]`) and
/// offsets per value (Q4_1: `m`; Q4_0: `-8 d`; Q8_0: none) as `[o0, o1, o2, o3]`. Q8_0's int8s
/// are biased by +128; the activations' bias start values take it out again. Lanes from `t` on
/// are zero blocks, which add exactly nothing.
///
/// # Safety
/// The CPU has the features enabled here; `blk` points at `t` readable blocks of `B`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn group<B: IntBlock>(blk: *const u8, t: usize) -> (__m512i, __m512i, __m512, __m128) {
    let bb = B::BYTES;
    // SAFETY: the blocks are readable (our contract) and hold 16 (Int8: 32) weight bytes at
    // `QS_AT`.
    let (lo, hi) = unsafe {
        match B::WEIGHTS {
            Weights::Int8 => {
                let flip = _mm512_set1_epi8(i8::MIN);
                (
                    _mm512_xor_si512(lanes(blk, bb, B::QS_AT, t), flip),
                    _mm512_xor_si512(lanes(blk, bb, B::QS_AT + 16, t), flip),
                )
            }
            Weights::Nibbles => {
                let q = lanes(blk, bb, B::QS_AT, t);
                let m = _mm512_set1_epi8(0x0f);
                (_mm512_and_si512(q, m), _mm512_and_si512(_mm512_srli_epi16(q, 4), m))
            }
        }
    };
    if matches!(B::OFFSET, Offset::Min) {
        // Q4_1 blocks start with (d, m): [d0, m0, d1, m1, ...] from one conversion.
        let h = |k: usize| {
            if k < t {
                // SAFETY: block `k < t` is readable and starts with its two f16s.
                unsafe { std::ptr::read_unaligned(blk.add(k * bb) as *const i32) }
            } else {
                0
            }
        };
        let f = _mm256_cvtph_ps(_mm_setr_epi32(h(0), h(1), h(2), h(3)));
        let d = _mm512_permutexvar_ps(
            _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6),
            _mm512_castps256_ps512(f),
        );
        let m = _mm256_permutevar8x32_ps(f, _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7));
        return (lo, hi, d, _mm256_castps256_ps128(m));
    }
    let h = |k: usize| {
        if k < t {
            // SAFETY: block `k < t` is readable and starts with its f16 scale.
            unsafe { std::ptr::read_unaligned(blk.add(k * bb) as *const i16) }
        } else {
            0
        }
    };
    let f = _mm_cvtph_ps(_mm_setr_epi16(h(0), h(1), h(2), h(3), 0, 0, 0, 0));
    let d = _mm512_permutexvar_ps(
        _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
        _mm512_castps128_ps512(f),
    );
    let o = match B::OFFSET {
        Offset::TimesScale(c) => _mm_mul_ps(_mm_set1_ps(c), f),
        _ => _mm_setzero_ps(),
    };
    (lo, hi, d, o)
}

/// Dots of one weight row (`nb` blocks at `w`) with activation rows `i0..i0 + NR`.
///
/// # Safety
/// The CPU has the features enabled here; `w` points at `nb` readable blocks of `B`, `x` holds
/// rows `i0..i0 + NR` of `nb` blocks, quantized for this level (its grouped copy).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn tile<B: IntBlock, const NR: usize>(w: *const u8, nb: usize, x: &QuantRows, i0: usize) -> [f32; NR] {
    let bb = B::BYTES;
    let mut acc = [_mm512_setzero_ps(); NR];
    let mut off = [_mm_setzero_ps(); NR];
    let xq: [*const i8; NR] = std::array::from_fn(|j| x.grouped_qs(i0 + j).as_ptr());
    let xd: [*const f32; NR] = std::array::from_fn(|j| x.grouped_d(i0 + j).as_ptr());
    let xs: [*const f32; NR] = std::array::from_fn(|j| x.grouped_s(i0 + j).as_ptr());
    let xb: [*const i32; NR] = std::array::from_fn(|j| x.grouped_bias(i0 + j).as_ptr());
    // One group of four blocks against every activation row of the tile.
    let step = |g: usize,
                (lo, hi, d, o): (__m512i, __m512i, __m512, __m128),
                acc: &mut [__m512; NR],
                off: &mut [__m128; NR]| {
        // SAFETY: `g < nb.div_ceil(GROUP)`, the groups each grouped row holds, and a group is
        // `GROUP * QK` int8s, 16 scales and bias start values, and `GROUP` sums; the bias copy
        // exists for int8 weights, which only this level biases.
        unsafe {
            for j in 0..NR {
                let a = xq[j].add(g * GROUP * QK);
                let start = if matches!(B::WEIGHTS, Weights::Int8) {
                    _mm512_loadu_si512(xb[j].add(g * 16) as *const _)
                } else {
                    _mm512_setzero_si512()
                };
                let dot = _mm512_dpbusd_epi32(start, lo, _mm512_loadu_si512(a as *const _));
                let dot = _mm512_dpbusd_epi32(dot, hi, _mm512_loadu_si512(a.add(64) as *const _));
                let scale = _mm512_mul_ps(d, _mm512_loadu_ps(xd[j].add(g * 16)));
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[j]);
                if !matches!(B::OFFSET, Offset::None) {
                    off[j] = _mm_fmadd_ps(o, _mm_loadu_ps(xs[j].add(g * GROUP)), off[j]);
                }
            }
        }
    };
    let full = nb / GROUP;
    for g in 0..full {
        step(
            g,
            // SAFETY: group `g` of the row is `GROUP` whole blocks (`g < nb / GROUP`).
            unsafe { group::<B>(w.add(g * GROUP * bb), GROUP) },
            &mut acc,
            &mut off,
        );
    }
    if !nb.is_multiple_of(GROUP) {
        // SAFETY: the last `nb % GROUP` blocks of the row.
        let tail = unsafe { group::<B>(w.add(full * GROUP * bb), nb % GROUP) };
        step(full, tail, &mut acc, &mut off);
    }
    // The offsets join lane 0, then each row's 16 lanes are summed by one fixed tree that
    // takes four rows at once (a short tile pads with zeros): the same additions, in the same
    // order, for a row whatever its tile.
    let row = |j: usize| {
        if j < NR {
            _mm512_add_ps(acc[j], _mm512_zextps128_ps512(off[j]))
        } else {
            _mm512_setzero_ps()
        }
    };
    let half = |v: __m512| {
        _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)))
    };
    let t = _mm256_hadd_ps(_mm256_hadd_ps(half(row(0)), half(row(1))), _mm256_hadd_ps(half(row(2)), half(row(3))));
    let sums = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    let mut all = [0f32; 4];
    // SAFETY: `all` has room for the four lanes.
    unsafe { _mm_storeu_ps(all.as_mut_ptr(), sums) };
    let mut res = [0f32; NR];
    res.copy_from_slice(&all[..NR]);
    res
}
