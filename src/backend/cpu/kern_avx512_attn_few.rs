//! The bf16 attention kernel (`kern_avx512_attn.rs`) for blocks of a few lanes, as a decode
//! row makes: the tile's keys (scores) or value columns (weighted sum) go in the vector
//! dimension, loaded as bf16 pairs straight from the cache (`KvFormat::Bf16Pairs`) once for all
//! the block's lanes (a lane-major block's copied tile would be stored for 3 lanes, then read
//! back: a 4,000-position decode step took 1.3-1.4x as long). Every lane,
//! key and column gets the lane-major kernel's operations on the same bf16 pairs in the same
//! order (`vdpbf16ps` multiplies pairs exactly, whichever operand is broadcast; the weights
//! are rounded by the same operations and summed in the same two chains), so a row's result
//! is the same bits whichever kernel its block takes: what prefix reuse and speculative
//! verification rely on.
//!
//! Each pass hints the cache lines of the next tile's keys and value rows of the block's head:
//! on Intel Sapphire Rapids a whole decode pass at 4,000 cached positions took 0.95-0.97x as long
//! with one sequence and 0.87-0.92x with four (`bench --rows 1,4 --context 4000`, alternated),
//! and the same at 160 positions within the noise; AMD Zen 4 had shown no change from such hints.
//! The keys' hints go one line at a time through the scores' loop (all of a group's at its
//! start stalled on the line fill buffers): 0.91-0.97x again with one sequence and 0.88-0.91x
//! with four (`MTPLX_ATTENTION=bf16`, same machine).

use super::attention::{AttnBlock, TILE_KEYS};
use super::kern_avx2_attn_few::masked_lane_max;
use super::kern_avx2_f32::exp_ps;
use super::kern_avx512_attn::{dot, rne};
use std::arch::x86_64::*;

/// Keys `k0..` (one tile, or to `b.n_keys`) into lanes `0..used` of a few-lane block: their
/// running max `ms` and sum `ls`, and their outputs `ol` (lane `i`'s `hd` values at `i * hd`).
///
/// # Safety
/// AVX-512 F/VL/BW and BF16; `b.check(8)` passed for a cache in bf16 pairs, `k0 < b.n_keys`
/// and `k0` starts a group of keys, `1 <= used <= 4`; `qb` holds the block's `hd / 2` rows of 8
/// query pairs; `ol` holds `used * hd` values; `hd` is a multiple of 8.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512bf16")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn tile_few(
    b: &AttnBlock<'_>,
    k0: usize,
    used: usize,
    ms: &mut [f32; 8],
    ls: &mut [f32; 8],
    ol: &mut [f32],
    qb: *const u32,
) {
    // SAFETY: our contract. A fixed lane count keeps the accumulators in registers: `U` lanes
    // times `G` groups of 8 keys (scores) or 8 columns (weighted sum), at most 24 of the 32
    // vector registers for 3 lanes. A whole tile (8 groups, a 64-wide head) in one pass reads a
    // value row's columns together instead of in two passes over the tile: a 4,096-position
    // decode step's attention took 1.05-1.1x as long with 4 (docs/performance.md).
    unsafe {
        match used {
            1 => tile_lanes::<1, 8>(b, k0, ms, ls, ol, qb),
            2 => tile_lanes::<2, 8>(b, k0, ms, ls, ol, qb),
            3 => tile_lanes::<3, 8>(b, k0, ms, ls, ol, qb),
            _ => tile_lanes::<4, 4>(b, k0, ms, ls, ol, qb),
        }
    }
}

/// [`tile_few`] for `U` lanes, `G` groups of keys or columns at a time.
///
/// # Safety
/// As [`tile_few`], with `used == U`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512bf16")]
unsafe fn tile_lanes<const U: usize, const G: usize>(
    b: &AttnBlock<'_>,
    k0: usize,
    ms: &mut [f32; 8],
    ls: &mut [f32; 8],
    ol: &mut [f32],
    qb: *const u32,
) {
    let (hd, stride) = (b.hd, b.stride);
    let kt = TILE_KEYS.min(b.n_keys - k0);
    let keys = b.keys[b.format.key_at(k0, 0, stride)..].as_ptr();
    let values = b.values[b.format.value_at(k0, 0, stride)..].as_ptr();
    let mut sc = [[0f32; TILE_KEYS]; U];
    let groups = kt.div_ceil(8);
    for g0 in (0..groups).step_by(G) {
        // SAFETY: groups `g0..groups` of the tile are in the cache (`check`), whole; `qb` as
        // our contract says.
        unsafe { scores::<U, G>(qb, keys.add(g0 * 8 * stride), stride, hd, (groups - g0).min(G), &mut sc, g0 * 8) };
    }
    let mut alpha = [0f32; U];
    let mut r = [[0u16; TILE_KEYS]; U];
    for lane in 0..U {
        let sc = &mut sc[lane];
        let pos = if k0 + kt - 1 > b.min_pos { b.lane_pos[lane] } else { i32::MAX };
        // SAFETY: the kernel's features include AVX2 and FMA; `kt <= TILE_KEYS`.
        let (mt, al) = unsafe { masked_lane_max(sc, kt, k0, pos, ms[lane]) };
        alpha[lane] = al;
        ms[lane] = mt;
        for k in (0..kt).step_by(8) {
            // SAFETY: `k + 8 <= TILE_KEYS`, in `sc` and in `r`.
            unsafe {
                let e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(sc.as_ptr().add(k)), _mm256_set1_ps(mt)));
                _mm_storeu_si128(
                    r[lane].as_mut_ptr().add(k) as *mut __m128i,
                    _mm256_cvtepi32_epi16(_mm256_srli_epi32(rne(e), 16)),
                );
            }
        }
        r[lane][kt..].fill(0);
    }
    // Each lane's rounded weights summed in two chains, the even keys' and the odd keys', in
    // key order as the lane-major kernel sums them: the lanes' chains side by side, so that
    // they wait on one another's adds no longer than on their own.
    let f = |h: u16| f32::from_bits((h as u32) << 16);
    let (mut even, mut odd) = ([0f32; U], [0f32; U]);
    for j in 0..kt.div_ceil(2) {
        for l in 0..U {
            even[l] += f(r[l][2 * j]);
            odd[l] += f(r[l][2 * j + 1]);
        }
    }
    let mut pairs = [[0u32; TILE_KEYS / 2]; U];
    for l in 0..U {
        ls[l] = ls[l].mul_add(alpha[l], even[l] + odd[l]);
        for (j, p) in pairs[l].iter_mut().enumerate() {
            *p = r[l][2 * j] as u32 | (r[l][2 * j + 1] as u32) << 16;
        }
    }
    for c0 in (0..hd).step_by(8 * G) {
        // SAFETY: value rows below `kt` hold `hd` columns from the head's first (`check`);
        // `ol` holds `U` rows of `hd`.
        unsafe { weighted::<U, G>(&pairs, kt, values.add(2 * c0), stride, hd, c0, &alpha, ol) };
    }
}

/// Scores of `n <= G` groups of 8 keys (from `keys`, the first at key `at` of the tile) for `U`
/// lanes into `sc[lane][at..at + n * 8]`: each pair of the head's dimensions is loaded once for
/// all the lanes.
///
/// # Safety
/// The kernel's features; `keys` holds `n` whole groups in bf16 pairs with `stride`,
/// `qb` `hd / 2` rows of 8 query pairs; `at + n * 8 <= TILE_KEYS`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512bf16")]
#[inline]
#[allow(clippy::needless_range_loop)]
unsafe fn scores<const U: usize, const G: usize>(
    qb: *const u32,
    keys: *const u16,
    stride: usize,
    hd: usize,
    n: usize,
    sc: &mut [[f32; TILE_KEYS]; U],
    at: usize,
) {
    let mut acc = [[_mm256_setzero_ps(); G]; U];
    for i in 0..hd / 2 {
        if i % 2 == 0 {
            // The cache line of pairs `i` and `i + 1` of the same groups in the next tile,
            // spread over the loop (as the f16 kernel's; a hint never faults).
            for g in 0..n {
                _mm_prefetch::<_MM_HINT_T0>(keys.wrapping_add((TILE_KEYS + g * 8) * stride + 16 * i) as *const i8);
            }
        }
        // SAFETY: pair `i < hd / 2` of each lane's queries; elements `2i` and `2i + 1 < hd` of
        // groups `g < n` (contract).
        unsafe {
            let q: [__m256i; U] = std::array::from_fn(|l| _mm256_set1_epi32(*qb.add(8 * i + l) as i32));
            // A fixed count of groups with a test inside (a variable bound put the accumulators
            // on the stack: a 4,000-position decode step took about 5 % longer, one alternated run).
            for g in 0..G {
                if g < n {
                    // Pair `i` of the group's 8 keys: 16 values side by side.
                    let kp = _mm256_loadu_si256(keys.add(g * 8 * stride + 16 * i) as *const __m256i);
                    for (a, &ql) in acc.iter_mut().zip(&q) {
                        a[g] = dot(a[g], kp, ql);
                    }
                }
            }
        }
    }
    for (row, a) in sc.iter_mut().zip(&acc) {
        for (g, x) in a.iter().enumerate().take(n) {
            // SAFETY: `at + 8g + 8 <= TILE_KEYS` (contract).
            unsafe { _mm256_storeu_ps(row.as_mut_ptr().add(at + 8 * g), *x) };
        }
    }
}

/// Columns `c0..c0 + 8 * G` (or to `hd`) of `U` lanes' outputs: `o[c] = o[c] * alpha + sum over
/// key pairs j of pairs[lane][j] . (v[2j][c], v[2j + 1][c])`, each value pair loaded once for
/// all the lanes.
///
/// # Safety
/// The kernel's features; `values` holds the pairs of value rows `0..kt` (whole pairs, `2 *
/// stride` apart) from column `c0`, with `hd - c0` columns, a multiple of 8; `ol` holds `U` rows
/// of `hd`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512bf16")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn weighted<const U: usize, const G: usize>(
    pairs: &[[u32; TILE_KEYS / 2]; U],
    kt: usize,
    values: *const u16,
    stride: usize,
    hd: usize,
    c0: usize,
    alpha: &[f32; U],
    ol: &mut [f32],
) {
    let nc = ((hd - c0) / 8).min(G);
    // Plain loops and a fixed count of columns: with `array::from_fn` and `0..nc` the compiled
    // loop kept the accumulators on the stack, a load and a store around every `vdpbf16ps`.
    let mut acc = [[_mm256_setzero_ps(); G]; U];
    for (l, a) in acc.iter_mut().enumerate() {
        for (c, x) in a.iter_mut().enumerate().take(nc) {
            // SAFETY: columns `c0 + 8c + 8 <= hd` of row `l`.
            *x =
                unsafe { _mm256_mul_ps(_mm256_loadu_ps(ol[l * hd + c0 + 8 * c..].as_ptr()), _mm256_set1_ps(alpha[l])) };
        }
    }
    // A plain range: the closure of a `map` over it was compiled as a call per pair.
    for j in 0..kt.div_ceil(2) {
        // The same pair of value rows of the next tile, these columns.
        let next = values.wrapping_add(2 * (j + TILE_KEYS / 2) * stride) as *const i8;
        for line in (0..nc * 32).step_by(64) {
            _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(line));
        }
        let mut p = [_mm256_setzero_si256(); U];
        for (x, pl) in p.iter_mut().zip(pairs) {
            *x = _mm256_set1_epi32(pl[j] as i32);
        }
        for c in 0..G {
            if c < nc {
                // SAFETY: pair `j` of rows, columns `8c..8c + 8` (contract). When `kt` is odd
                // its second row is a later position or zero, times a weight of 0.
                let vp = unsafe { _mm256_loadu_si256(values.add(2 * j * stride + 16 * c) as *const __m256i) };
                for (a, &pl) in acc.iter_mut().zip(&p) {
                    a[c] = dot(a[c], vp, pl);
                }
            }
        }
    }
    for (l, a) in acc.iter().enumerate() {
        for (c, x) in a.iter().enumerate().take(nc) {
            // SAFETY: as above.
            unsafe { _mm256_storeu_ps(ol[l * hd + c0 + 8 * c..].as_mut_ptr(), *x) };
        }
    }
}
