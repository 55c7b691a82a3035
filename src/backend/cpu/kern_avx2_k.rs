//! AVX2 + FMA + F16C integer-dot kernels (x86-64) for Q4_K and Q6_K weight rows against
//! [`QuantRowsK`] activations, in the manner of llama.cpp's `vec_dot_q*_K_q8_K`: unsigned
//! weights times signed int8 activations with `maddubs`, sub-block scales applied as 16-bit
//! factors with `madd`, the value-independent terms (Q4_K's mins, Q6_K's -32) from the
//! activations' per-16 sums.
//!
//! A weight block is unpacked (nibbles, 2-bit planes, scales) once per tile of up to four
//! activation rows and then dotted with each; every row of the tile runs the same operations,
//! so a row's result does not depend on its batch. Per block and row, the integer lanes are
//! reduced to the exact integers `kern_scalar_k` computes and scaled by the same function, so
//! the results equal the portable ones bit for bit. The reduction costs little next to the 8
//! `maddubs` per row that precede it: once per 256 values, for all rows of the tile at once.
//!
//! Every function here requires those CPU features: `matmul.rs` only calls them at a level
//! that detected them (the AVX-512 level too: it has no K-quant kernels of its own).

use super::block::Block;
use super::block_k::{scales_mins_k4, BlockQ4K, BlockQ6K, QK_K};
use super::float16::f16_at;
use super::kern_scalar_k::{q4k_block, q6k_block};
use super::kernel_io::{KKind, OutRows};
use super::quantized_activations_k::{QuantRowsK, BSUM_LEN};
use std::arch::x86_64::*;
use std::ops::Range;

/// Activation rows per pass over a weight row.
const TILE: usize = 4;
/// Partial sums per 256-value block of activations.
const BSUMS: usize = QK_K / BSUM_LEN;

/// Matmul rows `rows` of a Q4_K or Q6_K weight (`row_bytes` bytes per row) against the
/// activation rows `acts` of `x`.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `out` has room for `acts.end` rows of at least
/// `rows.end` values and no other thread writes these entries. (The slices are bounds-checked
/// here: `w` must hold `rows`, and `x` the rows `acts` with `row_bytes` worth of columns.)
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_k(
    kind: KKind,
    w: &[u8],
    row_bytes: usize,
    rows: Range<usize>,
    x: &QuantRowsK,
    acts: Range<usize>,
    out: &OutRows<'_>,
) {
    let bb = match kind {
        KKind::Q4K => BlockQ4K::BYTES,
        KKind::Q6K => BlockQ6K::BYTES,
    };
    let nb = x.cols() / QK_K;
    assert!(nb * bb == row_bytes && rows.end * row_bytes <= w.len() && acts.end <= x.rows(), "matmul_k: shapes");
    for r in rows {
        let wr = &w[r * row_bytes..(r + 1) * row_bytes];
        let mut i = acts.start;
        while i < acts.end {
            let n = (acts.end - i).min(TILE);
            let mut res = [0f32; TILE];
            // SAFETY: our target features; `wr` is `nb` whole blocks and rows `i..i + n` are
            // rows of `x` with `nb` blocks each (both asserted above).
            unsafe {
                match n {
                    4 => tile::<4>(kind, wr, nb, x, i, &mut res),
                    3 => tile::<3>(kind, wr, nb, x, i, &mut res),
                    2 => tile::<2>(kind, wr, nb, x, i, &mut res),
                    _ => tile::<1>(kind, wr, nb, x, i, &mut res),
                }
            }
            for (j, &v) in res.iter().enumerate().take(n) {
                // SAFETY: entry (i + j, r) is in this caller's rows and acts (its contract).
                unsafe { out.write(i + j, r, v) };
            }
            i += n;
        }
    }
}

/// Dots of weight row `wr` (`nb` blocks of `kind`) with activation rows `i0..i0 + NR`, into
/// `res[..NR]`.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `wr` holds `nb` blocks, and rows `i0..i0 + NR` of `x`
/// exist with `nb` blocks each.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn tile<const NR: usize>(kind: KKind, wr: &[u8], nb: usize, x: &QuantRowsK, i0: usize, res: &mut [f32; TILE]) {
    // Plain loops, not `array::from_fn`: a closure lacks the target features and is not inlined.
    let (mut xq, mut xd, mut xb) = ([std::ptr::null(); NR], [std::ptr::null(); NR], [std::ptr::null(); NR]);
    for j in 0..NR {
        xq[j] = x.qs(i0 + j).as_ptr();
        xd[j] = x.d(i0 + j).as_ptr();
        xb[j] = x.bsums(i0 + j).as_ptr();
    }
    // SAFETY: the caller's contract, which the pointers above inherit.
    let v = unsafe {
        match kind {
            KKind::Q4K => tile_q4k::<NR>(wr, nb, xq, xd, xb),
            KKind::Q6K => tile_q6k::<NR>(wr, nb, xq, xd, xb),
        }
    };
    res[..NR].copy_from_slice(&v);
}

/// [`tile`] for Q4_K; `xq`, `xd`, `xb` point at the rows' values, scales and per-16 sums.
///
/// # Safety
/// As [`tile`]: each row has `nb * 256` values, `nb` scales and `nb * 16` sums.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn tile_q4k<const NR: usize>(
    wr: &[u8],
    nb: usize,
    xq: [*const i8; NR],
    xd: [*const f32; NR],
    xb: [*const i16; NR],
) -> [f32; NR] {
    let nib = _mm256_set1_epi8(0x0f);
    let mut acc = [0f32; NR];
    for (b, blk) in wr.chunks_exact(BlockQ4K::BYTES).take(nb).enumerate() {
        let (sc, m) = scales_mins_k4(&blk[4..16]);
        // SAFETY: `m` is 8 bytes.
        let mins = _mm_cvtepu8_epi16(unsafe { _mm_loadl_epi64(m.as_ptr() as *const __m128i) });
        let mut isum = [_mm256_setzero_si256(); NR];
        for c in 0..4 {
            // SAFETY: bytes 16 + 32c .. 48 + 32c are inside the 144-byte block.
            let q = unsafe { _mm256_loadu_si256(blk.as_ptr().add(16 + 32 * c) as *const __m256i) };
            let (lo, hi) = (_mm256_and_si256(q, nib), _mm256_and_si256(_mm256_srli_epi16(q, 4), nib));
            let (sl, sh) = (_mm256_set1_epi16(sc[2 * c] as i16), _mm256_set1_epi16(sc[2 * c + 1] as i16));
            for j in 0..NR {
                // Sub-block 2c (low nibbles) against values 64c..64c+32, 2c + 1 (high) against
                // the next 32. Each 16-bit sum is two products of at most 15 * 127.
                // SAFETY: values b * 256 + 64c .. + 64 are in the row.
                let (alo, ahi) = unsafe {
                    let a = xq[j].add(b * QK_K + 64 * c);
                    (_mm256_loadu_si256(a as *const __m256i), _mm256_loadu_si256(a.add(32) as *const __m256i))
                };
                let p = _mm256_add_epi32(
                    _mm256_madd_epi16(_mm256_maddubs_epi16(lo, alo), sl),
                    _mm256_madd_epi16(_mm256_maddubs_epi16(hi, ahi), sh),
                );
                isum[j] = _mm256_add_epi32(isum[j], p);
            }
        }
        let mut msum = [_mm_setzero_si128(); NR];
        for j in 0..NR {
            // SAFETY: sums b * 16 .. + 16 are in the row.
            let bs = unsafe { _mm256_loadu_si256(xb[j].add(b * BSUMS) as *const __m256i) };
            // The sums of 32 values, sub-block by sub-block, then dotted with the mins.
            let pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
            msum[j] = _mm_madd_epi16(mins, pairs);
        }
        let (is, ms) = if NR == 1 {
            // One row: both sums in one vector, [isum, msum, ..] after two horizontal adds.
            let isum4 = _mm_add_epi32(_mm256_castsi256_si128(isum[0]), _mm256_extracti128_si256(isum[0], 1));
            let t = _mm_hadd_epi32(isum4, msum[0]);
            let t = lanes_by_row(_mm_hadd_epi32(t, t));
            ([t[0]; 4], [t[1]; 4])
        } else {
            (lanes_by_row(hsum_rows(&isum)), lanes_by_row(hsum_rows_128(&msum)))
        };
        let (d, dmin) = (f16_at(blk, 0), f16_at(blk, 2));
        for j in 0..NR {
            // SAFETY: scale b is in the row.
            let dx = unsafe { *xd[j].add(b) };
            acc[j] += q4k_block(d, dmin, dx, is[j], ms[j]);
        }
    }
    acc
}

/// [`tile`] for Q6_K; the same contract as [`tile_q4k`].
///
/// # Safety
/// As [`tile_q4k`].
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn tile_q6k<const NR: usize>(
    wr: &[u8],
    nb: usize,
    xq: [*const i8; NR],
    xd: [*const f32; NR],
    xb: [*const i16; NR],
) -> [f32; NR] {
    let m4 = _mm256_set1_epi8(0x0f);
    let m30 = _mm256_set1_epi8(0x30);
    let mut acc = [0f32; NR];
    for (b, blk) in wr.chunks_exact(BlockQ6K::BYTES).take(nb).enumerate() {
        let p = blk.as_ptr();
        // SAFETY: the 16 scales are bytes 192..208 of the 210-byte block.
        let sc8 = unsafe { _mm_loadu_si128(p.add(192) as *const __m128i) };
        let mut isum = [_mm256_setzero_si256(); NR];
        for h in 0..2 {
            // SAFETY: ql is bytes 0..128 and qh 128..192: each load is inside the block.
            let (ql0, ql1, qh) = unsafe {
                (
                    _mm256_loadu_si256(p.add(64 * h) as *const __m256i),
                    _mm256_loadu_si256(p.add(64 * h + 32) as *const __m256i),
                    _mm256_loadu_si256(p.add(128 + 32 * h) as *const __m256i),
                )
            };
            // Values 32t..32t+32 of the half, unsigned 0..64: the low 4 bits from a nibble of
            // ql, the top 2 from bits 2t..2t+2 of qh moved to bits 4..6 (16-bit shifts move bits
            // across bytes, but only into bits the masks drop).
            let q = [
                _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)),
                _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30)),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                    _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30),
                ),
            ];
            for (t, &qt) in q.iter().enumerate() {
                // Sub-blocks k = 8h + 2t (low lane) and k + 1 (high lane): their scales as 16-bit
                // factors, eight copies each.
                let k = (8 * h + 2 * t) as i64;
                let pick = _mm_set_epi64x((k + 1) * 0x0101_0101_0101_0101, k * 0x0101_0101_0101_0101);
                let s = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, pick));
                for j in 0..NR {
                    // Each 16-bit sum is two products of at most 63 * 127.
                    // SAFETY: values b * 256 + 128h + 32t .. + 32 are in the row.
                    let a = unsafe { _mm256_loadu_si256(xq[j].add(b * QK_K + 128 * h + 32 * t) as *const __m256i) };
                    isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(_mm256_maddubs_epi16(qt, a), s));
                }
            }
        }
        let sc16 = _mm256_cvtepi8_epi16(sc8);
        for (j, v) in isum.iter_mut().enumerate() {
            // SAFETY: sums b * 16 .. + 16 are in the row.
            let bs = unsafe { _mm256_loadu_si256(xb[j].add(b * BSUMS) as *const __m256i) };
            // The -32 of every value: 32 * sum_k sc_k * bsum_k, taken off in the integer lanes.
            *v = _mm256_sub_epi32(*v, _mm256_slli_epi32(_mm256_madd_epi16(sc16, bs), 5));
        }
        let is = lanes_by_row(hsum_rows(&isum));
        let d = f16_at(blk, 208);
        for j in 0..NR {
            // SAFETY: scale b is in the row.
            let dx = unsafe { *xd[j].add(b) };
            acc[j] += q6k_block(d, dx, is[j]);
        }
    }
    acc
}

// The per-row sums of a tile of several rows are reduced together, row `j` into lane `j`: three
// horizontal adds for up to four rows (1-row tiles, where that would be mostly zeros, take the
// shorter single-row sequence). The sums are exact (far inside i32), so how they are grouped
// does not change them. Measured, kernels_bench, 576x1536: n=4 Q4_K 124 -> 113 us, Q6_K 123 ->
// 104 us.

/// The sum of the eight i32 lanes of each `v[j]`, in lane `j` (the lanes from `NR` on: any).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn hsum_rows<const NR: usize>(v: &[__m256i; NR]) -> __m128i {
    if NR == 1 {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v[0]), _mm256_extracti128_si256(v[0], 1));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
        return _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    }
    let mut r = [_mm256_setzero_si256(); 4];
    r[..NR].copy_from_slice(v);
    let h = _mm256_hadd_epi32(_mm256_hadd_epi32(r[0], r[1]), _mm256_hadd_epi32(r[2], r[3]));
    _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1))
}

/// As [`hsum_rows`], for four i32 lanes per row.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn hsum_rows_128<const NR: usize>(v: &[__m128i; NR]) -> __m128i {
    let mut r = [_mm_setzero_si128(); 4];
    r[..NR].copy_from_slice(v);
    _mm_hadd_epi32(_mm_hadd_epi32(r[0], r[1]), _mm_hadd_epi32(r[2], r[3]))
}

/// The four lanes of `v` as integers.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn lanes_by_row(v: __m128i) -> [i32; 4] {
    let mut out = [0i32; 4];
    // SAFETY: `out` is four i32s, 16 bytes.
    unsafe { _mm_storeu_si128(out.as_mut_ptr() as *mut __m128i, v) };
    out
}
