//! AVX2 + FMA + F16C kernels over the row-interleaved layout (`repack.rs`): eight weight rows
//! per pass, one per 32-bit lane, against up to four activation rows.
//!
//! Per super-block (block `b` of eight rows) and activation row, Q4_0/Q4_1 cost eight
//! broadcasts of four activation bytes, eight `maddubs` and seven 16-bit adds, one `madd`, one
//! convert and two FMAs (the scale, the offset), for 8 x 32 weights; the row-major kernel
//! spends about that on two rows, plus a horizontal sum per row at the end. The weights are
//! unpacked (mask, shift) and their scales converted once per super-block for all activation
//! rows of the tile. Q8_0 keeps the sign trick (`maddubs` wants one unsigned operand), with one
//! `madd` per chunk: two 16-bit sums of 128 x 127 would overflow.
//!
//! Every activation row runs the same operations in the same order whatever the tile, so a
//! row's result does not depend on the batch it is in.

use super::block::{IntBlock, Offset, Weights};
use super::quantized_activations::QuantRows;
use super::repack::{group_block_bytes, ROWS};
use std::arch::x86_64::*;

/// Activation rows per pass over a group's weights (the drivers' tile).
const TILE: usize = 4;
/// How far ahead of the super-block being read a pass prefetches the weights, in bytes: at 2+
/// rows the dots take long enough that the hardware prefetcher falls behind (4,096 was the best
/// of 2,048-8,192 in `bench --rows`; docs/performance.md). At 1 row AMD Zen 4's prefetcher keeps
/// up alone, but Intel Sapphire Rapids' does not: there the hints make a 1-row pass 1.4-1.7x
/// faster, and on Zen 4 they cost nothing measurable.
pub(super) const PREFETCH_AHEAD: usize = 4096;

r8_driver!("avx2,fma,f16c", 4, [4 3 2]);

/// Dots of one group (`nb` super-blocks at `grp`) with activation rows `i0..i0 + NR`, written
/// to `res[j]`, one weight row per entry.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `grp` points at `nb` readable super-blocks of `B`;
/// rows `i0..i0 + NR` are rows of `x` with `nb` blocks each.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn tile<B: IntBlock, const NR: usize>(
    grp: *const u8,
    nb: usize,
    x: &QuantRows,
    i0: usize,
    res: &mut [[f32; ROWS]; TILE],
) {
    let gb = group_block_bytes::<B>();
    let ones = _mm256_set1_epi16(1);
    let nib = _mm256_set1_epi8(0x0f);
    let (xq, xd, xs) = x.row_starts::<NR>(i0);
    // The scale and offset terms in separate sums: one FMA chain each per block, not two
    // dependent FMAs on one (the latency of those bounded the 1-row pass).
    let mut acc = [_mm256_setzero_ps(); NR];
    let mut off = [_mm256_setzero_ps(); NR];
    for b in 0..nb {
        // Row `j`'s block `b`: its bytes `o..o + 4` are broadcast as one i32 (no closure: a
        // closure does not inherit the target features, and was not inlined).
        let mut xb = [std::ptr::null::<i8>(); NR];
        for j in 0..NR {
            // SAFETY: row `j < NR` holds `nb * 32` int8s and `b < nb`.
            xb[j] = unsafe { xq[j].add(b * 32) };
        }
        // SAFETY: super-block `b < nb` is readable (our contract).
        let sb = unsafe { grp.add(b * gb) };
        prefetch_ahead(sb, gb);
        // SAFETY: a super-block starts with the eight rows' f16 `d` (and, for Q4_1, `m`).
        let d = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(sb as *const __m128i) });
        let qs = ROWS * B::QS_AT;
        let mut sum = [_mm256_setzero_si256(); NR];
        match B::WEIGHTS {
            Weights::Nibbles => {
                for c in 0..4 {
                    // SAFETY: the 16 weight bytes of eight rows are four chunks of 32 bytes.
                    let q = unsafe { _mm256_loadu_si256(sb.add(qs + 32 * c) as *const __m256i) };
                    let (lo, hi) = (_mm256_and_si256(q, nib), _mm256_and_si256(_mm256_srli_epi16(q, 4), nib));
                    for j in 0..NR {
                        // Eight 16-bit sums of at most 2 x 15 x 127 each: within i16.
                        // SAFETY: `4 * c + 4 <= 16` and `16 + 4 * c + 4 <= 32`: inside the block.
                        let p = unsafe {
                            _mm256_add_epi16(
                                _mm256_maddubs_epi16(lo, bcast4(xb[j], 4 * c)),
                                _mm256_maddubs_epi16(hi, bcast4(xb[j], 16 + 4 * c)),
                            )
                        };
                        sum[j] = _mm256_add_epi16(sum[j], p);
                    }
                }
                for s in sum.iter_mut() {
                    *s = _mm256_madd_epi16(*s, ones);
                }
            }
            Weights::Int8 => {
                for c in 0..8 {
                    // SAFETY: the 32 weight bytes of eight rows are eight chunks of 32 bytes.
                    let q = unsafe { _mm256_loadu_si256(sb.add(qs + 32 * c) as *const __m256i) };
                    let qa = _mm256_sign_epi8(q, q);
                    for j in 0..NR {
                        // SAFETY: `4 * c + 4 <= 32`: inside the block.
                        let p = unsafe { _mm256_maddubs_epi16(qa, _mm256_sign_epi8(bcast4(xb[j], 4 * c), q)) };
                        sum[j] = _mm256_add_epi32(sum[j], _mm256_madd_epi16(p, ones));
                    }
                }
            }
        }
        // SAFETY: `sb` is super-block `b < nb`, and the rows of `x` hold `nb` scales and sums.
        unsafe { fold_block::<B, NR>(sb, d, b, &xd, &xs, &sum, &mut acc, &mut off) };
    }
    for j in 0..NR {
        // SAFETY: `res[j]` is eight f32s.
        unsafe { _mm256_storeu_ps(res[j].as_mut_ptr(), _mm256_add_ps(acc[j], off[j])) };
    }
}

/// Adds super-block `b`'s integer sums (`sum[j]`, one weight row per lane) into row `j`'s
/// sums: `acc[j] += sum * d * dx`, and for the types with an offset `off[j] += m * sx`. Shared
/// by the AVX2 and AVX-512 tiles (it inlines into either), so both round alike.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `sb` is a readable super-block of `B` whose eight
/// scales are `d`; `xd[j]` and `xs[j]` point at rows of at least `b + 1` scales and sums.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
#[allow(clippy::too_many_arguments)] // the tile's state, passed by reference to stay in registers
pub(super) unsafe fn fold_block<B: IntBlock, const NR: usize>(
    sb: *const u8,
    d: __m256,
    b: usize,
    xd: &[*const f32; NR],
    xs: &[*const f32; NR],
    sum: &[__m256i; NR],
    acc: &mut [__m256; NR],
    off: &mut [__m256; NR],
) {
    let m = match B::OFFSET {
        // SAFETY: Q4_1 super-blocks hold the eight `m` right after the eight `d`.
        Offset::Min => _mm256_cvtph_ps(unsafe { _mm_loadu_si128(sb.add(16) as *const __m128i) }),
        Offset::TimesScale(c) => _mm256_mul_ps(_mm256_set1_ps(c), d),
        Offset::None => _mm256_setzero_ps(),
    };
    for j in 0..NR {
        // SAFETY: rows of `x` hold more than `b` scales and sums (our contract).
        let (dx, sx) = unsafe { (*xd[j].add(b), *xs[j].add(b)) };
        let scale = _mm256_mul_ps(d, _mm256_set1_ps(dx));
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[j]), scale, acc[j]);
        if !matches!(B::OFFSET, Offset::None) {
            off[j] = _mm256_fmadd_ps(m, _mm256_set1_ps(sx), off[j]);
        }
    }
}

/// Hints the cache lines of the `len` bytes [`PREFETCH_AHEAD`] bytes after `at`: a hint never
/// faults, so they may lie past the weights.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) fn prefetch_ahead(at: *const u8, len: usize) {
    let ahead = at.wrapping_add(PREFETCH_AHEAD) as *const i8;
    for line in (0..len).step_by(64) {
        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line));
    }
}

/// Bytes `o..o + 4` at `x`, as one i32 in every lane.
///
/// # Safety
/// The CPU supports AVX2; the four bytes are readable.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn bcast4(x: *const i8, o: usize) -> __m256i {
    // SAFETY: the caller's contract.
    _mm256_set1_epi32(unsafe { std::ptr::read_unaligned(x.add(o) as *const i32) })
}
