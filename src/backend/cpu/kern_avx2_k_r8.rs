//! AVX2 + FMA + F16C kernels over the row-interleaved Q4_K and Q6_K layouts (`repack_k.rs`):
//! eight weight rows per pass, one per 32-bit lane, against up to four activation rows.
//!
//! Q4_K, per super-block (block `b` of eight rows) and activation row: 64 broadcasts of four
//! activation bytes, 64 `maddubs` summed in 16 bits per sub-block (8 x 2 x 15 x 127 fits),
//! 8 `madd` for the sub-block scales and 4 for the mins; the row-major kernel spends the same
//! 64 `maddubs` on eight rows but 64 `madd` and a reduction. The scales and mins of all eight
//! rows are unpacked with one set of 32-bit masks and shifts, once per tile. Q6_K: the same
//! 64 `maddubs`, but its 6-bit values allow only two of them per 16-bit sum (2 x 2 x 63 x 127),
//! so 32 `madd`; its -32 is 8 `madd` of the scales with the activations' per-16 sums.
//!
//! The float work per lane is `q4k_block`'s or `q6k_block`'s, operation for operation
//! (multiplies and adds, no FMA), on the same exact integers, accumulated block by block from
//! zero: each weight row's result is bit-equal to the row-major kernels', whatever the level or
//! the batch.

use super::block_k::QK_K;
use super::kernel_io::{KKind, OutRows};
use super::quantized_activations_k::{QuantRowsK, BSUM_LEN};
use super::repack::ROWS;
use super::repack_k::{Q4K_GROUP_BLOCK, Q6K_GROUP_BLOCK};
use std::arch::x86_64::*;
use std::ops::Range;

/// Activation rows per pass over a group's weights.
const TILE: usize = 4;

/// Matmul rows `rows` (whole groups) of an interleaved Q4_K or Q6_K weight against activation
/// rows `acts`.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `out` has room for `acts.end` rows of at least
/// `rows.end` values and no other thread writes these entries. (The shapes are checked here.)
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn matmul_k_r8(
    kind: KKind,
    w: &[u8],
    rows: Range<usize>,
    x: &QuantRowsK,
    acts: Range<usize>,
    out: &OutRows<'_>,
) {
    let nb = x.cols() / QK_K;
    let group_bytes = nb * if kind == KKind::Q4K { Q4K_GROUP_BLOCK } else { Q6K_GROUP_BLOCK };
    assert!(
        rows.start.is_multiple_of(ROWS) && rows.end.is_multiple_of(ROWS) && rows.end / ROWS * group_bytes <= w.len(),
        "matmul_k_r8: rows {rows:?} are not whole groups of the weight"
    );
    assert!(acts.end <= x.rows(), "matmul_k_r8: activation rows {acts:?} of {}", x.rows());
    for g in rows.start / ROWS..rows.end / ROWS {
        let grp = &w[g * group_bytes..(g + 1) * group_bytes];
        let mut i = acts.start;
        while i < acts.end {
            let n = (acts.end - i).min(TILE);
            let mut res = [[0f32; ROWS]; TILE];
            // SAFETY: our target features; `grp` is `nb` whole super-blocks and rows
            // `i..i + n` are rows of `x` with `nb` blocks each (both checked above).
            unsafe {
                match (kind, n) {
                    (KKind::Q4K, 4) => tile_q4k::<4>(grp, nb, x, i, &mut res),
                    (KKind::Q4K, 3) => tile_q4k::<3>(grp, nb, x, i, &mut res),
                    (KKind::Q4K, 2) => tile_q4k::<2>(grp, nb, x, i, &mut res),
                    (KKind::Q4K, _) => tile_q4k::<1>(grp, nb, x, i, &mut res),
                    (KKind::Q6K, 4) => tile_q6k::<4>(grp, nb, x, i, &mut res),
                    (KKind::Q6K, 3) => tile_q6k::<3>(grp, nb, x, i, &mut res),
                    (KKind::Q6K, 2) => tile_q6k::<2>(grp, nb, x, i, &mut res),
                    (KKind::Q6K, _) => tile_q6k::<1>(grp, nb, x, i, &mut res),
                }
            }
            for (j, vals) in res.iter().enumerate().take(n) {
                for (r, &v) in vals.iter().enumerate() {
                    // SAFETY: entries (i + j, g * ROWS + r) lie in this caller's rows and acts.
                    unsafe { out.write(i + j, g * ROWS + r, v) };
                }
            }
            i += n;
        }
    }
}

/// A `shuffle_epi8` mask giving, in each 32-bit lane, bytes `j0` and `j1` of that lane as two
/// 16-bit values.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn lane_bytes(j0: u8, j1: u8) -> __m256i {
    let mut m = [0u8; 32];
    for (e, lane) in m.chunks_exact_mut(4).enumerate() {
        // `shuffle_epi8` indexes within each 128-bit half: lane `e` starts at byte 4 * (e % 4).
        let at = 4 * (e % 4) as u8;
        lane.copy_from_slice(&[at + j0, 0x80, at + j1, 0x80]);
    }
    // SAFETY: `m` is 32 bytes.
    unsafe { _mm256_loadu_si256(m.as_ptr() as *const __m256i) }
}

/// Dots of one Q4_K group (`nb` super-blocks) with activation rows `i0..i0 + NR`, into
/// `res[j]`, one weight row per entry.
///
/// # Safety
/// The CPU supports AVX2, FMA and F16C; `grp` holds `nb` super-blocks; rows `i0..i0 + NR` of
/// `x` exist with `nb` blocks each.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn tile_q4k<const NR: usize>(grp: &[u8], nb: usize, x: &QuantRowsK, i0: usize, res: &mut [[f32; ROWS]; TILE]) {
    let nib = _mm256_set1_epi8(0x0f);
    let (low6, low4, low2) =
        (_mm256_set1_epi32(0x3f3f_3f3f), _mm256_set1_epi32(0x0f0f_0f0f), _mm256_set1_epi32(0x0303_0303));
    // Scale `j % 4` of a lane's four, twice; mins `2p` and `2p + 1` of a lane's four.
    let sc_pick = [lane_bytes(0, 0), lane_bytes(1, 1), lane_bytes(2, 2), lane_bytes(3, 3)];
    let m_pick = [lane_bytes(0, 1), lane_bytes(2, 3)];
    let (mut xq, mut xd, mut xb) = ([std::ptr::null(); NR], [std::ptr::null(); NR], [std::ptr::null(); NR]);
    for j in 0..NR {
        xq[j] = x.qs(i0 + j).as_ptr();
        xd[j] = x.d(i0 + j).as_ptr();
        xb[j] = x.bsums(i0 + j).as_ptr();
    }
    let mut acc = [_mm256_setzero_ps(); NR];
    for b in 0..nb {
        // SAFETY: super-block `b < nb` is in `grp` (the caller's contract).
        let sb = unsafe { grp.as_ptr().add(b * Q4K_GROUP_BLOCK) };
        // SAFETY: the super-block starts with 16 bytes of `d`, 16 of `dmin`, 96 of scales.
        let (d, dmin, w0, w1, w2) = unsafe {
            (
                _mm256_cvtph_ps(_mm_loadu_si128(sb as *const __m128i)),
                _mm256_cvtph_ps(_mm_loadu_si128(sb.add(16) as *const __m128i)),
                _mm256_loadu_si256(sb.add(32) as *const __m256i),
                _mm256_loadu_si256(sb.add(64) as *const __m256i),
                _mm256_loadu_si256(sb.add(96) as *const __m256i),
            )
        };
        // `scales_mins_k4` on eight rows: per lane, scales 0..4 and 4..8, mins 0..4 and 4..8.
        let sc = [_mm256_and_si256(w0, low6), _mm256_or_si256(_mm256_and_si256(w2, low4), top2(w0, low2))];
        let mn = [
            _mm256_and_si256(w1, low6),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), low4), top2(w1, low2)),
        ];
        let mins = [
            _mm256_shuffle_epi8(mn[0], m_pick[0]),
            _mm256_shuffle_epi8(mn[0], m_pick[1]),
            _mm256_shuffle_epi8(mn[1], m_pick[0]),
            _mm256_shuffle_epi8(mn[1], m_pick[1]),
        ];
        let mut isum = [_mm256_setzero_si256(); NR];
        for cp in 0..4 {
            // Sub-blocks 2cp (low nibbles of weight bytes 32cp..32cp+32) and 2cp + 1 (high).
            let s_lo = _mm256_shuffle_epi8(sc[cp / 2], sc_pick[(2 * cp) % 4]);
            let s_hi = _mm256_shuffle_epi8(sc[cp / 2], sc_pick[(2 * cp + 1) % 4]);
            let (mut p_lo, mut p_hi) = ([_mm256_setzero_si256(); NR], [_mm256_setzero_si256(); NR]);
            for k in 0..8 {
                // SAFETY: chunk 8cp + k < 32 of the weight bytes at 128.. of the super-block.
                let q = unsafe { _mm256_loadu_si256(sb.add(128 + 32 * (8 * cp + k)) as *const __m256i) };
                let (lo, hi) = (_mm256_and_si256(q, nib), _mm256_and_si256(_mm256_srli_epi16(q, 4), nib));
                for j in 0..NR {
                    // SAFETY: values b * 256 + 64cp + 4k .. + 4 and 32 further are in the row.
                    let (a_lo, a_hi) = unsafe {
                        let a = xq[j].add(b * QK_K + 64 * cp + 4 * k);
                        (bcast4(a), bcast4(a.add(32)))
                    };
                    p_lo[j] = _mm256_add_epi16(p_lo[j], _mm256_maddubs_epi16(lo, a_lo));
                    p_hi[j] = _mm256_add_epi16(p_hi[j], _mm256_maddubs_epi16(hi, a_hi));
                }
            }
            for j in 0..NR {
                let s = _mm256_add_epi32(_mm256_madd_epi16(p_lo[j], s_lo), _mm256_madd_epi16(p_hi[j], s_hi));
                isum[j] = _mm256_add_epi32(isum[j], s);
            }
        }
        for j in 0..NR {
            // SAFETY: sums b * 16 .. + 16 and scale b are in the row.
            let (bs, dx) =
                unsafe { (_mm256_loadu_si256(xb[j].add(b * (QK_K / BSUM_LEN)) as *const __m256i), *xd[j].add(b)) };
            // The eight sums of 32 values, two per 32-bit element, each pair broadcast.
            let s32 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
            let pair = [
                _mm256_broadcastd_epi32(s32),
                _mm256_broadcastd_epi32(_mm_srli_si128(s32, 4)),
                _mm256_broadcastd_epi32(_mm_srli_si128(s32, 8)),
                _mm256_broadcastd_epi32(_mm_srli_si128(s32, 12)),
            ];
            let msum = _mm256_add_epi32(
                _mm256_add_epi32(_mm256_madd_epi16(mins[0], pair[0]), _mm256_madd_epi16(mins[1], pair[1])),
                _mm256_add_epi32(_mm256_madd_epi16(mins[2], pair[2]), _mm256_madd_epi16(mins[3], pair[3])),
            );
            // `q4k_block`, lane by lane: d * xd * isum - dmin * xd * msum.
            let xdv = _mm256_set1_ps(dx);
            let t = _mm256_mul_ps(_mm256_mul_ps(d, xdv), _mm256_cvtepi32_ps(isum[j]));
            let m = _mm256_mul_ps(_mm256_mul_ps(dmin, xdv), _mm256_cvtepi32_ps(msum));
            acc[j] = _mm256_add_ps(acc[j], _mm256_sub_ps(t, m));
        }
    }
    for j in 0..NR {
        // SAFETY: `res[j]` is eight f32s.
        unsafe { _mm256_storeu_ps(res[j].as_mut_ptr(), acc[j]) };
    }
}

/// A `shuffle_epi8` mask giving, in each 32-bit lane, bytes `j0` and `j1` of that lane as the
/// high bytes of two 16-bit values (an arithmetic shift by 8 then sign-extends them).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn lane_bytes_high(j0: u8, j1: u8) -> __m256i {
    let mut m = [0u8; 32];
    for (e, lane) in m.chunks_exact_mut(4).enumerate() {
        let at = 4 * (e % 4) as u8;
        lane.copy_from_slice(&[0x80, at + j0, 0x80, at + j1]);
    }
    // SAFETY: `m` is 32 bytes.
    unsafe { _mm256_loadu_si256(m.as_ptr() as *const __m256i) }
}

/// [`tile_q4k`] for Q6_K; the same contract.
///
/// # Safety
/// As [`tile_q4k`].
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn tile_q6k<const NR: usize>(grp: &[u8], nb: usize, x: &QuantRowsK, i0: usize, res: &mut [[f32; ROWS]; TILE]) {
    let (m4, m30) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(0x30));
    // Scale `j` of a lane's four, twice; scales `2p` and `2p + 1`; all sign-extended.
    let sc_pick = [lane_bytes_high(0, 0), lane_bytes_high(1, 1), lane_bytes_high(2, 2), lane_bytes_high(3, 3)];
    let pair_pick = [lane_bytes_high(0, 1), lane_bytes_high(2, 3)];
    let (mut xq, mut xd, mut xb) = ([std::ptr::null(); NR], [std::ptr::null(); NR], [std::ptr::null(); NR]);
    for j in 0..NR {
        xq[j] = x.qs(i0 + j).as_ptr();
        xd[j] = x.d(i0 + j).as_ptr();
        xb[j] = x.bsums(i0 + j).as_ptr();
    }
    let mut acc = [_mm256_setzero_ps(); NR];
    for b in 0..nb {
        // SAFETY: super-block `b < nb` is in `grp` (the caller's contract).
        let sb = unsafe { grp.as_ptr().add(b * Q6K_GROUP_BLOCK) };
        // SAFETY: the super-block starts with 16 bytes of `d`, then 128 of scales.
        let d = _mm256_cvtph_ps(unsafe { _mm_loadu_si128(sb as *const __m128i) });
        let mut words = [_mm256_setzero_si256(); 4];
        for (p, w) in words.iter_mut().enumerate() {
            // SAFETY: scale word `p < 4` of the eight rows is bytes 16 + 32p .. + 32.
            *w = unsafe { _mm256_loadu_si256(sb.add(16 + 32 * p) as *const __m256i) };
        }
        let mut scale = [_mm256_setzero_si256(); 16];
        for (k, s) in scale.iter_mut().enumerate() {
            *s = _mm256_srai_epi16(_mm256_shuffle_epi8(words[k / 4], sc_pick[k % 4]), 8);
        }
        let mut pairs = [_mm256_setzero_si256(); 8];
        for (e, s) in pairs.iter_mut().enumerate() {
            *s = _mm256_srai_epi16(_mm256_shuffle_epi8(words[e / 2], pair_pick[e % 2]), 8);
        }
        let mut isum = [_mm256_setzero_si256(); NR];
        for h in 0..2 {
            // Two chunks (8 values of each of the four 32-value runs t) per 16-bit sum.
            for kk in 0..4 {
                let mut p = [[_mm256_setzero_si256(); 4]; NR];
                for k in 2 * kk..2 * kk + 2 {
                    // SAFETY: ql chunks 16h + k and 16h + 8 + k (< 32) at 144.., qh chunk 8h + k
                    // (< 16) at 1168..: inside the 1680-byte super-block.
                    let (ql_a, ql_b, qh) = unsafe {
                        (
                            _mm256_loadu_si256(sb.add(144 + 32 * (16 * h + k)) as *const __m256i),
                            _mm256_loadu_si256(sb.add(144 + 32 * (16 * h + 8 + k)) as *const __m256i),
                            _mm256_loadu_si256(sb.add(1168 + 32 * (8 * h + k)) as *const __m256i),
                        )
                    };
                    // As the row-major kernel: the low 4 bits from a nibble of ql, the top 2
                    // from bits 2t..2t+2 of qh moved to bits 4..6.
                    let q = [
                        _mm256_or_si256(_mm256_and_si256(ql_a, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)),
                        _mm256_or_si256(_mm256_and_si256(ql_b, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql_a, 4), m4), _mm256_and_si256(qh, m30)),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16(ql_b, 4), m4),
                            _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30),
                        ),
                    ];
                    for j in 0..NR {
                        for (t, &qt) in q.iter().enumerate() {
                            // SAFETY: values b * 256 + 128h + 32t + 4k .. + 4 are in the row.
                            let a = unsafe { bcast4(xq[j].add(b * QK_K + 128 * h + 32 * t + 4 * k)) };
                            p[j][t] = _mm256_add_epi16(p[j][t], _mm256_maddubs_epi16(qt, a));
                        }
                    }
                }
                for j in 0..NR {
                    for t in 0..4 {
                        // Values 4k.. of run t are in sub-block 8h + 2t, or 8h + 2t + 1 from k = 4.
                        let s = _mm256_madd_epi16(p[j][t], scale[8 * h + 2 * t + kk / 2]);
                        isum[j] = _mm256_add_epi32(isum[j], s);
                    }
                }
            }
        }
        for j in 0..NR {
            // SAFETY: sums b * 16 .. + 16 and scale b are in the row.
            let (bs, dx) =
                unsafe { (_mm256_loadu_si256(xb[j].add(b * (QK_K / BSUM_LEN)) as *const __m256i), *xd[j].add(b)) };
            // The -32 of every value: 32 * sum_k sc_k * bsum_k, each pair of sums broadcast.
            let mut off = _mm256_setzero_si256();
            for (e, &sp) in pairs.iter().enumerate() {
                let bp = _mm256_permutevar8x32_epi32(bs, _mm256_set1_epi32(e as i32));
                off = _mm256_add_epi32(off, _mm256_madd_epi16(sp, bp));
            }
            let total = _mm256_sub_epi32(isum[j], _mm256_slli_epi32(off, 5));
            // `q6k_block`, lane by lane: d * xd * isum.
            let t = _mm256_mul_ps(_mm256_mul_ps(d, _mm256_set1_ps(dx)), _mm256_cvtepi32_ps(total));
            acc[j] = _mm256_add_ps(acc[j], t);
        }
    }
    for j in 0..NR {
        // SAFETY: `res[j]` is eight f32s.
        unsafe { _mm256_storeu_ps(res[j].as_mut_ptr(), acc[j]) };
    }
}

/// The top 2 bits of each byte of `v`, moved to bits 4..6 (`low2` is 0x03 per byte).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn top2(v: __m256i, low2: __m256i) -> __m256i {
    _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(v, 6), low2), 4)
}

/// Bytes `0..4` at `a`, as one i32 in every lane.
///
/// # Safety
/// The CPU supports AVX2; the four bytes are readable.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn bcast4(a: *const i8) -> __m256i {
    // SAFETY: the caller's contract.
    _mm256_set1_epi32(unsafe { std::ptr::read_unaligned(a as *const i32) })
}
