//! AVX-512 VNNI kernels over the row-interleaved layout (`repack.rs`), with `vpdpbusd` for the
//! byte dots.
//!
//! Two tiles. [`tile_pair`] takes two neighbouring groups of eight weight rows at once, one per
//! half of a 512-bit register (sixteen rows, one per 32-bit lane): each activation broadcast
//! and each `vpdpbusd` then serves twice the weights of a 256-bit one, which doubles what a
//! multi-row pass can compute on CPUs that run 512-bit `vpdpbusd` at the 256-bit rate (Intel
//! Sapphire Rapids: 0.19 ns per 512-bit instruction against 0.17 ns per 256-bit one, twenty
//! independent chains). [`tile`] takes one group in
//! a 256-bit register, for a range with an odd number of groups; it is the AVX2 kernel's
//! registers with `vpdpbusd` in place of `maddubs`, seven 16-bit adds and a `madd`.
//!
//! Per super-block and activation row, Q4_0/Q4_1 cost eight broadcasts and eight `vpdpbusd`
//! for 8 (or 16) x 32 weights; Q8_0 keeps the sign trick (a masked negate where AVX2 has
//! `sign`) with one `vpdpbusd` per chunk. Every lane's sums are the same integers as AVX2's,
//! and its float steps are AVX2's own ([`fold_block`], and the same operations in the wider
//! registers), so the levels give the same results bit for bit.

use super::block::{IntBlock, Offset, Weights};
use super::block_q::{BlockQ4_0, BlockQ4_1, BlockQ8_0};
use super::kern_avx2_r8::{bcast4, fold_block, prefetch_ahead, PREFETCH_AHEAD};
use super::kernel_io::{OutRows, QKind};
use super::quantized_activations::QuantRows;
use super::repack::{group_block_bytes, ROWS};
use std::arch::x86_64::*;
use std::ops::Range;

/// Activation rows per pass over a group's weights (the driver's tile): 8 rows' accumulators,
/// sums and scale terms (24 registers) fit AVX-512's 32 vector registers, so a 5-8 row pass
/// unpacks each super-block's weights once, not twice.
const TILE: usize = 8;

/// Matmul rows `rows` (whole groups) of an interleaved weight against activation rows `acts`:
/// two groups at a time while two remain (one at a time for a single row where
/// [`super::isa::one_row_pairs`] says so), in tiles of up to [`TILE`] activation rows.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C; `w` is the interleaved copy of
/// a matrix of `kind` with `x.cols()` columns and at least `rows.end` rows; `rows` starts and ends
/// on a group boundary; `out` has room for `acts.end` rows of at least `rows.end` values, and no
/// other thread writes these entries.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn matmul_r8(
    kind: QKind,
    w: &[u8],
    rows: Range<usize>,
    x: &QuantRows,
    acts: Range<usize>,
    out: &OutRows<'_>,
) {
    // SAFETY: the target features are ours, the rest is this function's own contract.
    unsafe {
        match kind {
            QKind::Q4_0 => drive::<BlockQ4_0>(w, rows, x, acts, out),
            QKind::Q4_1 => drive::<BlockQ4_1>(w, rows, x, acts, out),
            QKind::Q8_0 => drive::<BlockQ8_0>(w, rows, x, acts, out),
        }
    }
}

/// [`matmul_r8`] for the block type `B`; the same contract.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn drive<B: IntBlock>(w: &[u8], rows: Range<usize>, x: &QuantRows, acts: Range<usize>, out: &OutRows<'_>) {
    let nb = x.cols() / B::LEN;
    let group_bytes = nb * group_block_bytes::<B>();
    debug_assert!(rows.start.is_multiple_of(ROWS) && rows.end.is_multiple_of(ROWS));
    let (mut g, end) = (rows.start / ROWS, rows.end / ROWS);
    // A pass of one tile of rows (decode, verification) reads each weight once; a prompt's
    // passes read a pair's weights again for every tile of rows, and the hints below, tried on
    // them, made pp512 2-4 % slower.
    let few = acts.len() <= TILE;
    let pairs = acts.len() > 1 || super::isa::one_row_pairs();
    while g < end {
        let span = if g + 2 <= end && pairs { 2 } else { 1 };
        let grp = w[g * group_bytes..(g + span) * group_bytes].as_ptr();
        let mut i = acts.start;
        while i < acts.end {
            let n = (acts.end - i).min(TILE);
            let mut res = [[0f32; 2 * ROWS]; TILE];
            // SAFETY: `grp` is `span` whole groups of `nb` super-blocks of `B` (sliced above),
            // and rows `i..i + n` are rows of `x` (within `acts`).
            unsafe {
                if span == 2 {
                    match n {
                        8 => tile_pair::<B, 8>(grp, group_bytes, nb, x, i, few, &mut res),
                        7 => tile_pair::<B, 7>(grp, group_bytes, nb, x, i, few, &mut res),
                        6 => tile_pair::<B, 6>(grp, group_bytes, nb, x, i, few, &mut res),
                        5 => tile_pair::<B, 5>(grp, group_bytes, nb, x, i, few, &mut res),
                        4 => tile_pair::<B, 4>(grp, group_bytes, nb, x, i, few, &mut res),
                        3 => tile_pair::<B, 3>(grp, group_bytes, nb, x, i, few, &mut res),
                        2 => tile_pair::<B, 2>(grp, group_bytes, nb, x, i, few, &mut res),
                        _ => tile_pair::<B, 1>(grp, group_bytes, nb, x, i, few, &mut res),
                    }
                } else {
                    let mut one = [[0f32; ROWS]; TILE];
                    match n {
                        8 => tile::<B, 8>(grp, nb, x, i, &mut one),
                        7 => tile::<B, 7>(grp, nb, x, i, &mut one),
                        6 => tile::<B, 6>(grp, nb, x, i, &mut one),
                        5 => tile::<B, 5>(grp, nb, x, i, &mut one),
                        4 => tile::<B, 4>(grp, nb, x, i, &mut one),
                        3 => tile::<B, 3>(grp, nb, x, i, &mut one),
                        2 => tile::<B, 2>(grp, nb, x, i, &mut one),
                        _ => tile::<B, 1>(grp, nb, x, i, &mut one),
                    }
                    for (r, o) in res.iter_mut().zip(one) {
                        r[..ROWS].copy_from_slice(&o);
                    }
                }
            }
            for (j, vals) in res.iter().enumerate().take(n) {
                for (r, &v) in vals[..span * ROWS].iter().enumerate() {
                    // SAFETY: entries (i + j, g * ROWS + r) lie in this caller's rows and acts.
                    unsafe { out.write(i + j, g * ROWS + r, v) };
                }
            }
            i += n;
        }
        g += span;
    }
}

/// Dots of two neighbouring groups (`nb` super-blocks at `grp`, the second group
/// `group_bytes` after the first) with activation rows `i0..i0 + NR`, written to `res[j]`: the
/// first group's eight rows, then the second's; `few` when the pass has no other rows.
///
/// # Safety
/// The CPU supports the features enabled here; `grp` points at two groups of `nb` readable
/// super-blocks of `B`, `group_bytes` apart; rows `i0..i0 + NR` are rows of `x` with `nb`
/// blocks each.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn tile_pair<B: IntBlock, const NR: usize>(
    grp: *const u8,
    group_bytes: usize,
    nb: usize,
    x: &QuantRows,
    i0: usize,
    few: bool,
    res: &mut [[f32; 2 * ROWS]; TILE],
) {
    let gb = group_block_bytes::<B>();
    let nib = _mm512_set1_epi8(0x0f);
    let (xq, xd, xs) = x.row_starts::<NR>(i0);
    let mut acc = [_mm512_setzero_ps(); NR];
    let mut off = [_mm512_setzero_ps(); NR];
    for b in 0..nb {
        let mut xb = [std::ptr::null::<i8>(); NR];
        for j in 0..NR {
            // SAFETY: row `j < NR` holds `nb * 32` int8s and `b < nb`.
            xb[j] = unsafe { xq[j].add(b * 32) };
        }
        // SAFETY: super-block `b < nb` of both groups is readable (our contract).
        let (s0, s1) = unsafe { (grp.add(b * gb), grp.add(group_bytes + b * gb)) };
        // In passes of few rows, each group's stream of hints goes on in the next pairs' same
        // group, skipping every partner group on the way (the other stream reads those).
        let skip = if few { (b * gb + PREFETCH_AHEAD) / group_bytes * group_bytes } else { 0 };
        prefetch_ahead(s0.wrapping_add(skip), gb);
        prefetch_ahead(s1.wrapping_add(skip), gb);
        // SAFETY: a super-block starts with the eight rows' f16 `d` (and, for Q4_1, `m`).
        let d = _mm512_cvtph_ps(unsafe { join16(s0, s1, 0) });
        let qs = ROWS * B::QS_AT;
        let mut sum = [_mm512_setzero_si512(); NR];
        match B::WEIGHTS {
            Weights::Nibbles => {
                for c in 0..4 {
                    // SAFETY: the 16 weight bytes of eight rows are four chunks of 32 bytes.
                    let q = unsafe { join32(s0, s1, qs + 32 * c) };
                    let (lo, hi) = (_mm512_and_si512(q, nib), _mm512_and_si512(_mm512_srli_epi16(q, 4), nib));
                    for j in 0..NR {
                        // SAFETY: `4 * c + 4 <= 16` and `16 + 4 * c + 4 <= 32`: inside the block.
                        let (xl, xh) = unsafe { (bcast4z(xb[j], 4 * c), bcast4z(xb[j], 16 + 4 * c)) };
                        sum[j] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(sum[j], lo, xl), hi, xh);
                    }
                }
            }
            Weights::Int8 => {
                for c in 0..8 {
                    // SAFETY: the 32 weight bytes of eight rows are eight chunks of 32 bytes.
                    let q = unsafe { join32(s0, s1, qs + 32 * c) };
                    // |q| as unsigned bytes (-128 gives 128), and x negated where q is negative:
                    // what `sign` does in 256 bits (x where q is 0 meets a 0 weight).
                    let (qa, neg) = (_mm512_abs_epi8(q), _mm512_movepi8_mask(q));
                    for j in 0..NR {
                        // SAFETY: `4 * c + 4 <= 32`: inside the block.
                        let xv = unsafe { bcast4z(xb[j], 4 * c) };
                        let xn = _mm512_mask_sub_epi8(xv, neg, _mm512_setzero_si512(), xv);
                        sum[j] = _mm512_dpbusd_epi32(sum[j], qa, xn);
                    }
                }
            }
        }
        // The fold of [`fold_block`], lane for lane.
        let m = match B::OFFSET {
            // SAFETY: Q4_1 super-blocks hold the eight `m` right after the eight `d`.
            Offset::Min => _mm512_cvtph_ps(unsafe { join16(s0, s1, 16) }),
            Offset::TimesScale(c) => _mm512_mul_ps(_mm512_set1_ps(c), d),
            Offset::None => _mm512_setzero_ps(),
        };
        for j in 0..NR {
            // SAFETY: rows of `x` hold `nb > b` scales and sums.
            let (dx, sx) = unsafe { (*xd[j].add(b), *xs[j].add(b)) };
            let scale = _mm512_mul_ps(d, _mm512_set1_ps(dx));
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[j]), scale, acc[j]);
            if !matches!(B::OFFSET, Offset::None) {
                off[j] = _mm512_fmadd_ps(m, _mm512_set1_ps(sx), off[j]);
            }
        }
    }
    for j in 0..NR {
        // SAFETY: `res[j]` is sixteen f32s.
        unsafe { _mm512_storeu_ps(res[j].as_mut_ptr(), _mm512_add_ps(acc[j], off[j])) };
    }
}

/// The 16 bytes at `at` of `a` and of `b`, side by side.
///
/// # Safety
/// The CPU supports AVX2; both ranges are readable.
#[target_feature(enable = "avx512f,avx2")]
#[inline]
unsafe fn join16(a: *const u8, b: *const u8, at: usize) -> __m256i {
    // SAFETY: the caller's contract.
    unsafe {
        _mm256_inserti128_si256::<1>(
            _mm256_castsi128_si256(_mm_loadu_si128(a.add(at) as *const __m128i)),
            _mm_loadu_si128(b.add(at) as *const __m128i),
        )
    }
}

/// The 32 bytes at `at` of `a` and of `b`, side by side.
///
/// # Safety
/// The CPU supports AVX-512 F; both ranges are readable.
#[target_feature(enable = "avx512f,avx2")]
#[inline]
unsafe fn join32(a: *const u8, b: *const u8, at: usize) -> __m512i {
    // SAFETY: the caller's contract.
    unsafe {
        _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(_mm256_loadu_si256(a.add(at) as *const __m256i)),
            _mm256_loadu_si256(b.add(at) as *const __m256i),
        )
    }
}

/// Bytes `o..o + 4` at `x`, as one i32 in every lane of a 512-bit register.
///
/// # Safety
/// The CPU supports AVX-512 F; the four bytes are readable.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn bcast4z(x: *const i8, o: usize) -> __m512i {
    // SAFETY: the caller's contract.
    _mm512_set1_epi32(unsafe { std::ptr::read_unaligned(x.add(o) as *const i32) })
}

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
    let (xq, xd, xs) = x.row_starts::<NR>(i0);
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
