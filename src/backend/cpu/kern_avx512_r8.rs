//! AVX-512 VNNI kernels over the row-interleaved layout (`repack.rs`): the AVX2 kernel's
//! registers (eight weight rows, one per 32-bit lane of a 256-bit register), with `vpdpbusd`
//! for the byte dots.
//!
//! Per super-block and activation row, Q4_0/Q4_1 cost eight broadcasts and eight `vpdpbusd`
//! for 8 x 32 weights, where AVX2 needs eight `maddubs`, seven 16-bit adds and a `madd`; Q8_0
//! keeps the sign trick with one `vpdpbusd` per chunk in place of a `maddubs` and a `madd`.
//! The sums are the same integers as AVX2's, and the float steps are AVX2's own
//! ([`fold_block`]), so the two levels give the same results bit for bit. 256-bit registers,
//! not 512: the layout's chunk of eight rows is 32 bytes, and on CPUs that split 512-bit
//! operations in two (AMD Zen 4) the wider registers would only add shuffles.

use super::block::{IntBlock, Weights};
use super::kern_avx2_r8::{bcast4, fold_block, prefetch_ahead};
use super::quantized_activations::QuantRows;
use super::repack::{group_block_bytes, ROWS};
use std::arch::x86_64::*;

/// Activation rows per pass over a group's weights (the driver's tile): 8 rows' accumulators,
/// sums and scale terms (24 registers) fit AVX-512's 32 vector registers, so a 5-8 row pass
/// unpacks each super-block's weights once, not twice.
const TILE: usize = 8;

r8_driver!("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c", 8, [8 7 6 5 4 3 2]);

/// Dots of one group (`nb` super-blocks at `grp`) with activation rows `i0..i0 + NR`, written
/// to `res[j]`, one weight row per entry.
///
/// # Safety
/// The CPU supports the features enabled here; `grp` points at `nb` readable super-blocks of
/// `B`; rows `i0..i0 + NR` are rows of `x` with `nb` blocks each.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn tile<B: IntBlock, const NR: usize>(
    grp: *const u8,
    nb: usize,
    x: &QuantRows,
    i0: usize,
    res: &mut [[f32; ROWS]; TILE],
) {
    let gb = group_block_bytes::<B>();
    let nib = _mm256_set1_epi8(0x0f);
    let (mut xq, mut xd, mut xs) =
        ([std::ptr::null::<i8>(); NR], [std::ptr::null::<f32>(); NR], [std::ptr::null(); NR]);
    for j in 0..NR {
        xq[j] = x.qs(i0 + j).as_ptr();
        xd[j] = x.d(i0 + j).as_ptr();
        xs[j] = x.s(i0 + j).as_ptr();
    }
    let mut acc = [_mm256_setzero_ps(); NR];
    let mut off = [_mm256_setzero_ps(); NR];
    for b in 0..nb {
        let mut xb = [std::ptr::null::<i8>(); NR];
        for j in 0..NR {
            // SAFETY: row `j < NR` holds `nb * 32` int8s and `b < nb`.
            xb[j] = unsafe { xq[j].add(b * 32) };
        }
        // SAFETY: super-block `b < nb` is readable (our contract).
        let sb = unsafe { grp.add(b * gb) };
        prefetch_ahead(sb, gb);
        // SAFETY: a super-block starts with the eight rows' f16 `d`.
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
                        // SAFETY: `4 * c + 4 <= 16` and `16 + 4 * c + 4 <= 32`: inside the block.
                        sum[j] = unsafe {
                            _mm256_dpbusd_epi32(
                                _mm256_dpbusd_epi32(sum[j], lo, bcast4(xb[j], 4 * c)),
                                hi,
                                bcast4(xb[j], 16 + 4 * c),
                            )
                        };
                    }
                }
            }
            Weights::Int8 => {
                for c in 0..8 {
                    // SAFETY: the 32 weight bytes of eight rows are eight chunks of 32 bytes.
                    let q = unsafe { _mm256_loadu_si256(sb.add(qs + 32 * c) as *const __m256i) };
                    // |q| as unsigned bytes (-128 gives 128), the sign moved onto x.
                    let qa = _mm256_sign_epi8(q, q);
                    for j in 0..NR {
                        // SAFETY: `4 * c + 4 <= 32`: inside the block.
                        sum[j] = unsafe { _mm256_dpbusd_epi32(sum[j], qa, _mm256_sign_epi8(bcast4(xb[j], 4 * c), q)) };
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
