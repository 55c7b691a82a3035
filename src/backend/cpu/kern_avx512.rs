//! AVX-512 kernels (F, BW, VL and VNNI; x86-64): two 32-value blocks per 512-bit register and
//! `vpdpbusd` for the unsigned-by-signed byte dots. CPUs with AVX-512 but without VNNI
//! (Skylake-X) take the AVX2 path instead: one kernel family less to keep correct.

use super::kern_avx2::{f16_load, hsum, nibbles};
use super::matmul::{OutRows, QKind};
use super::q8act::QuantRows;
use std::arch::x86_64::*;
use std::ops::Range;

/// As `kern_avx2::matmul_q`.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C; `w` holds every row in
/// `rows`; `out` has room for `acts.end` rows of at least `rows.end` values and no other thread
/// writes these entries.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn matmul_q(
    kind: QKind,
    w: &[u8],
    row_bytes: usize,
    rows: Range<usize>,
    x: &QuantRows,
    acts: Range<usize>,
    out: &OutRows,
) {
    match kind {
        QKind::Q4_0 => drive::<0>(w, row_bytes, rows, x, acts, out),
        QKind::Q4_1 => drive::<1>(w, row_bytes, rows, x, acts, out),
        QKind::Q8_0 => drive::<2>(w, row_bytes, rows, x, acts, out),
    }
}

tile_driver!("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c");

/// The 32 weight bytes of block `blk` as a 256-bit vector: nibbles expanded, or Q8_0's int8s.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn weights<const K: u8>(blk: *const u8) -> __m256i {
    match K {
        0 => nibbles(blk.add(2)),
        1 => nibbles(blk.add(4)),
        _ => _mm256_loadu_si256(blk.add(2) as *const __m256i),
    }
}

/// Two blocks' scales as 8-lane groups, `[d0 x8 | d1 x8]`, and their offsets per value in the
/// low two lanes (Q4_1: `m`; Q4_0: `-8 d`; Q8_0: none), from one f16 conversion.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn pair_scales<const K: u8>(blk0: *const u8, blk1: *const u8) -> (__m512, __m128) {
    let lo = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
    if K == 1 {
        // Q4_1 blocks start with (d, m): load both f16 pairs as [d0, m0, d1, m1].
        let (u0, u1) = (
            std::ptr::read_unaligned(blk0 as *const i32),
            std::ptr::read_unaligned(blk1 as *const i32),
        );
        let f = _mm_cvtph_ps(_mm_insert_epi32(_mm_cvtsi32_si128(u0), u1, 1));
        return (
            _mm512_permutexvar_ps(lo, _mm512_castps128_ps512(f)),
            _mm_shuffle_ps(f, f, 0b11_01_11_01),
        );
    }
    let (h0, h1) = (
        std::ptr::read_unaligned(blk0 as *const u16),
        std::ptr::read_unaligned(blk1 as *const u16),
    );
    let f = _mm_cvtph_ps(_mm_insert_epi16(_mm_cvtsi32_si128(h0 as i32), h1 as i32, 2));
    let m = if K == 0 {
        _mm_mul_ps(_mm_set1_ps(-8.0), _mm_shuffle_ps(f, f, 0b10_00_10_00))
    } else {
        _mm_setzero_ps()
    };
    (_mm512_permutexvar_ps(lo, _mm512_castps128_ps512(f)), m)
}

/// Blocks whose offsets (`m` per block) are gathered in a register before being dotted with
/// the activation sums in one go, instead of one FMA per block pair and activation row.
const OFFSET_SEGMENT: usize = 16;

/// Two blocks' 64 weight bytes in value order: nibbles expanded (Q4) or Q8_0's int8s.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn pair_weights<const K: u8>(blk0: *const u8, blk1: *const u8) -> __m512i {
    if K == 2 {
        return _mm512_inserti64x4(
            _mm512_castsi256_si512(weights::<K>(blk0)),
            weights::<K>(blk1),
            1,
        );
    }
    let off = if K == 0 { 2 } else { 4 };
    let q = _mm256_loadu2_m128i(
        blk1.add(off) as *const __m128i,
        blk0.add(off) as *const __m128i,
    );
    // [q0, q1, q0 >> 4, q1 >> 4] masked to nibbles, then reordered to [lo0, hi0, lo1, hi1].
    let z = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
    let z = _mm512_and_si512(z, _mm512_set1_epi8(0x0f));
    _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 4, 5, 2, 3, 6, 7), z)
}

/// Dots of one weight row (`nb` blocks at `w`) with activation rows `i0..i0 + NR`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
unsafe fn tile<const K: u8, const NR: usize>(
    w: *const u8,
    nb: usize,
    x: &QuantRows,
    i0: usize,
) -> [f32; NR] {
    let block_bytes = [18, 20, 34][K as usize];
    let zero = _mm512_setzero_si512();
    let mut acc = [_mm512_setzero_ps(); NR];
    let mut xq = [std::ptr::null::<i8>(); NR];
    let mut xd = [std::ptr::null::<f32>(); NR];
    let mut xs = [std::ptr::null::<f32>(); NR];
    let mut xs8 = [std::ptr::null::<f32>(); NR];
    for j in 0..NR {
        xq[j] = x.qs(i0 + j).as_ptr();
        xd[j] = x.d8(i0 + j).as_ptr();
        xs[j] = x.s(i0 + j).as_ptr();
        xs8[j] = x.s8(i0 + j).as_ptr();
    }
    let mut off = [_mm512_setzero_ps(); NR];
    let pairs_end = nb & !1;
    let mut b = 0;
    while b < pairs_end {
        // Up to 16 blocks: their offsets fill one register, lane by lane, and are then dotted
        // with the 16 activation sums at once.
        let seg_start = b;
        let seg_end = (b + OFFSET_SEGMENT).min(pairs_end);
        let mut mreg = _mm512_setzero_pd();
        while b < seg_end {
            let (blk0, blk1) = (w.add(b * block_bytes), w.add((b + 1) * block_bytes));
            let wv = pair_weights::<K>(blk0, blk1);
            // vpdpbusd wants unsigned weights: for Q8_0 move the weight's sign onto the activation.
            let (wu, neg) = if K == 2 {
                (_mm512_abs_epi8(wv), _mm512_movepi8_mask(wv))
            } else {
                (wv, 0)
            };
            let (dwv, m2) = pair_scales::<K>(blk0, blk1);
            if K != 2 {
                mreg =
                    _mm512_mask_broadcastsd_pd(mreg, 1 << ((b - seg_start) / 2), _mm_castps_pd(m2));
            }
            for j in 0..NR {
                let xv = _mm512_loadu_si512(xq[j].add(b * 32) as *const _);
                let xv = if K == 2 {
                    _mm512_mask_sub_epi8(xv, neg, zero, xv)
                } else {
                    xv
                };
                let p = _mm512_dpbusd_epi32(zero, wu, xv);
                let scale = _mm512_mul_ps(dwv, _mm512_loadu_ps(xd[j].add(b * 8)));
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scale, acc[j]);
            }
            b += 2;
        }
        if K != 2 {
            // Q4_1's `+ m` and Q4_0's `- 8 d`, times the blocks' activation sums.
            let mask: __mmask16 = ((1u32 << (seg_end - seg_start)) - 1) as __mmask16;
            let m = _mm512_castpd_ps(mreg);
            for j in 0..NR {
                off[j] =
                    _mm512_fmadd_ps(m, _mm512_maskz_loadu_ps(mask, xs[j].add(seg_start)), off[j]);
            }
        }
    }
    let mut res = [0f32; NR];
    for j in 0..NR {
        res[j] = _mm512_reduce_add_ps(_mm512_add_ps(acc[j], off[j]));
    }
    if b < nb {
        // An odd last block: 256-bit VNNI.
        let blk = w.add(b * block_bytes);
        let dw = f16_load(blk);
        let wv = weights::<K>(blk);
        let wu = if K == 2 { _mm256_sign_epi8(wv, wv) } else { wv };
        let mw = match K {
            0 => -8.0 * dw,
            1 => f16_load(blk.add(2)),
            _ => 0.0,
        };
        for j in 0..NR {
            let xv = _mm256_loadu_si256(xq[j].add(b * 32) as *const __m256i);
            let xv = if K == 2 { _mm256_sign_epi8(xv, wv) } else { xv };
            let p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), wu, xv);
            let scale = _mm256_mul_ps(_mm256_set1_ps(dw), _mm256_loadu_ps(xd[j].add(b * 8)));
            let mut v = _mm256_mul_ps(_mm256_cvtepi32_ps(p), scale);
            if K != 2 {
                v = _mm256_fmadd_ps(_mm256_set1_ps(mw), _mm256_loadu_ps(xs8[j].add(b * 8)), v);
            }
            res[j] += hsum(v);
        }
    }
    res
}
