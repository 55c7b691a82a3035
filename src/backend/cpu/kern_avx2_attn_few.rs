//! The tiled attention's kernel for blocks of a few lanes (`kern_avx2_attn.rs`), as a decode
//! row makes: one query row times the heads that share a KV head (3 in the demo model), in a
//! vector of 8 lanes. The lane-major products would spend an FMA per key and value element on
//! all 8 lanes; here each used lane puts keys (scores) or value columns (weighted sum) in the
//! vector dimension instead. Every lane, key and column gets the lane-major kernel's
//! operations in the same order (a chain of FMAs from zero over the head's dimensions; a
//! multiply by the rescale, then an FMA per key), so a row's result is the same bits whichever
//! kernel its block takes.
//!
//! Each key or value element is widened from f16 once for all the block's lanes (one lane at a
//! time widened it once per lane), and each pass hints the cache lines of the next tile, spread
//! over its loop: late in a long context a decode step waits on the cache's reads, and a
//! 4,000-position 1-row pass took 0.84-0.88x as long with both, four sequences' 0.76-0.78x
//! (docs/performance.md, "Decode at long contexts").

use super::attention::{AttnBlock, FEW_LANES, TILE_KEYS};
use super::float16::f16_to_f32;
use super::kern_avx2_f32::exp_ps;
use crate::backend::{key_index, KEY_GROUP};
use std::arch::x86_64::*;

/// The lanes block `b` uses (those with a position; padding lanes have `i32::MAX`), when it
/// has one vector of lanes and at most [`FEW_LANES`] of them are used; else 0.
pub(super) fn few_lanes<const NV: usize>(b: &AttnBlock<'_>) -> usize {
    let used = b.lane_pos.iter().take(NV * 8).take_while(|&&p| p != i32::MAX).count();
    if NV == 1 && used <= FEW_LANES {
        used
    } else {
        0
    }
}

/// Keys `k0..` (one tile, or to `b.n_keys`) into lanes `0..used` of a few-lane block over an
/// f16 cache: their running max `ms` and sum `ls`, and their outputs `ol` (lane `i`'s `hd`
/// values at `i * hd`). With `wide`, the same code compiled with AVX-512 VL for its 32
/// registers, which hold a whole tile's accumulators for 3 lanes.
///
/// # Safety
/// AVX2 and FMA, and with `wide` AVX-512 F and VL; `b.check(8)` passed for an f16 cache,
/// `k0 < b.n_keys` and `k0` starts a group of keys; `1 <= used <= FEW_LANES`; `ol` holds
/// `used * hd` values.
pub(super) unsafe fn tile_few(
    b: &AttnBlock<'_>,
    k0: usize,
    used: usize,
    ms: &mut [f32; 8],
    ls: &mut [f32; 8],
    ol: &mut [f32],
    wide: bool,
) {
    // SAFETY: our contract.
    unsafe {
        if wide {
            tile_few_512(b, k0, used, ms, ls, ol)
        } else {
            tile_few_256(b, k0, used, ms, ls, ol)
        }
    }
}

/// [`tile_few`] in 16 registers.
///
/// # Safety
/// As [`tile_few`].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_few_256(
    b: &AttnBlock<'_>,
    k0: usize,
    used: usize,
    ms: &mut [f32; 8],
    ls: &mut [f32; 8],
    ol: &mut [f32],
) {
    // SAFETY: our contract.
    unsafe { by_lanes::<false>(b, k0, used, ms, ls, ol) }
}

/// [`tile_few`] in 32 registers.
///
/// # Safety
/// As [`tile_few`], with AVX-512 F and VL.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
unsafe fn tile_few_512(
    b: &AttnBlock<'_>,
    k0: usize,
    used: usize,
    ms: &mut [f32; 8],
    ls: &mut [f32; 8],
    ol: &mut [f32],
) {
    // SAFETY: our contract.
    unsafe { by_lanes::<true>(b, k0, used, ms, ls, ol) }
}

/// [`tile_lanes`] for `used` lanes, with as many groups at a time as keep `U * G` accumulators,
/// `U` broadcasts and an operand in the registers: 16, or 32 with `WIDE`. Inlined into the
/// callers above, so that it is compiled with their features.
///
/// # Safety
/// As [`tile_few`], with the caller's features (AVX-512 F and VL with `WIDE`).
#[inline(always)]
unsafe fn by_lanes<const WIDE: bool>(
    b: &AttnBlock<'_>,
    k0: usize,
    used: usize,
    ms: &mut [f32; 8],
    ls: &mut [f32; 8],
    ol: &mut [f32],
) {
    // SAFETY: our contract, with `used` lanes.
    unsafe {
        match (used, WIDE) {
            (1, _) => tile_lanes::<1, 8>(b, k0, ms, ls, ol),
            (2, false) => tile_lanes::<2, 4>(b, k0, ms, ls, ol),
            (2, true) => tile_lanes::<2, 8>(b, k0, ms, ls, ol),
            (3, false) => tile_lanes::<3, 4>(b, k0, ms, ls, ol),
            (3, true) => tile_lanes::<3, 8>(b, k0, ms, ls, ol),
            (_, false) => tile_lanes::<4, 2>(b, k0, ms, ls, ol),
            (_, true) => tile_lanes::<4, 4>(b, k0, ms, ls, ol),
        }
    }
}

/// [`tile_few`] for `U` lanes, `G` groups of keys (scores) or of 8 value columns (weighted sum)
/// at a time: each key or value element is widened once for all the lanes. Inlined, so that it
/// is compiled with its caller's registers.
///
/// # Safety
/// As [`tile_few`], with `used == U`, and the caller's features.
#[inline(always)]
unsafe fn tile_lanes<const U: usize, const G: usize>(
    b: &AttnBlock<'_>,
    k0: usize,
    ms: &mut [f32; 8],
    ls: &mut [f32; 8],
    ol: &mut [f32],
) {
    let (hd, stride) = (b.hd, b.stride);
    let kt = TILE_KEYS.min(b.n_keys - k0);
    assert!(U <= FEW_LANES && ol.len() >= U * hd);
    let keys = b.keys[key_index(k0, 0, stride)..].as_ptr();
    let values = b.values[k0 * stride..].as_ptr();
    let mut sc = [[0f32; TILE_KEYS]; U];
    // SAFETY: the tile's keys, in whole groups, and values are in the cache (`check`); `qt`
    // holds `hd` rows of 8 lanes (`check(8)`).
    unsafe { scores::<U, G>(b.qt.as_ptr(), keys, stride, hd, kt.div_ceil(KEY_GROUP), &mut sc) };
    let mut alpha = [0f32; U];
    for (lane, (row, al)) in sc.iter_mut().zip(&mut alpha).enumerate() {
        let pos = if k0 + kt - 1 > b.min_pos { b.lane_pos[lane] } else { i32::MAX };
        // SAFETY: the caller's features include AVX2 and FMA; `kt <= TILE_KEYS`.
        *al = unsafe { softmax_lane(row, kt, k0, pos, &mut ms[lane], &mut ls[lane]) };
    }
    // SAFETY: value rows below `kt` hold `hd` columns (`check`); `ol` holds `U` rows of `hd`.
    unsafe { weighted::<U, G>(&sc, kt, values, stride, hd, &alpha, ol.as_mut_ptr()) };
}

/// Scores of `groups` groups of 8 keys for `U` lanes (queries `qt`, `hd` rows of 8 lanes) into
/// `sc[lane][..groups * 8]`: each lane's chain `acc = fma(q[d], k[d], acc)` over `d` from zero,
/// as the lane-major kernel computes it, `G` groups at a time, each group's element widened once
/// for all the lanes.
///
/// # Safety
/// AVX2 and FMA (the caller's); `keys` holds the `groups <= TILE_KEYS / 8` groups (element
/// `d < hd` of group `g` at `g * 8 * stride + d * 8`).
#[inline(always)]
unsafe fn scores<const U: usize, const G: usize>(
    qt: *const f32,
    keys: *const u16,
    stride: usize,
    hd: usize,
    groups: usize,
    sc: &mut [[f32; TILE_KEYS]; U],
) {
    for g0 in (0..groups).step_by(G) {
        let n = (groups - g0).min(G);
        // SAFETY: AVX (the caller's features).
        let mut acc = [[unsafe { _mm256_setzero_ps() }; G]; U];
        for d in 0..hd {
            if d % 4 == 0 {
                // The cache line of element `d` (4 of them a line) of the same groups in the next
                // tile, spread over the loop: hints for whole groups at once stalled on the
                // line fill buffers. A hint never faults.
                for g in 0..n {
                    let next = keys.wrapping_add((TILE_KEYS + (g0 + g) * KEY_GROUP) * stride + d * KEY_GROUP);
                    // SAFETY: SSE (the caller's features).
                    unsafe { _mm_prefetch::<_MM_HINT_T0>(next as *const i8) };
                }
            }
            // SAFETY: element `d < hd` of the lanes' queries and of groups `g0 + g < groups`
            // (contract).
            unsafe {
                let q: [__m256; U] = std::array::from_fn(|l| _mm256_broadcast_ss(&*qt.add(d * 8 + l)));
                // A fixed count of groups with a test inside keeps the accumulators in registers.
                for g in 0..G {
                    if g < n {
                        let k8 = keys.add((g0 + g) * KEY_GROUP * stride + d * KEY_GROUP);
                        let k = _mm256_cvtph_ps(_mm_loadu_si128(k8 as *const __m128i));
                        for (a, &ql) in acc.iter_mut().zip(&q) {
                            a[g] = _mm256_fmadd_ps(ql, k, a[g]);
                        }
                    }
                }
            }
        }
        for (row, a) in sc.iter_mut().zip(&acc) {
            for (g, x) in a.iter().enumerate().take(n) {
                // SAFETY: `(g0 + g) * 8 + 8 <= groups * 8 <= TILE_KEYS`.
                unsafe { _mm256_storeu_ps(row.as_mut_ptr().add((g0 + g) * KEY_GROUP), *x) };
            }
        }
    }
}

/// The `U` lanes' outputs `o[c] = o[c] * alpha + sum over keys k < kt of p[lane][k] * v[k][c]`,
/// each column a multiply and then one FMA per key in key order, as the lane-major kernel
/// computes it; `G` vectors of 8 columns at a time, each value element widened once for all the
/// lanes. Columns past the last whole 8 go one at a time.
///
/// # Safety
/// AVX2 and FMA (the caller's); value rows `0..kt` (`hd` columns at `stride` apart) are in
/// `values`; `o` holds `U` rows of `hd`.
#[inline(always)]
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
unsafe fn weighted<const U: usize, const G: usize>(
    p: &[[f32; TILE_KEYS]; U],
    kt: usize,
    values: *const u16,
    stride: usize,
    hd: usize,
    alpha: &[f32; U],
    o: *mut f32,
) {
    let cols = hd / 8;
    for c0 in (0..cols).step_by(G) {
        let n = (cols - c0).min(G);
        // SAFETY: AVX (the caller's features).
        let mut acc = [[unsafe { _mm256_setzero_ps() }; G]; U];
        for (l, a) in acc.iter_mut().enumerate() {
            for (c, x) in a.iter_mut().enumerate().take(n) {
                // SAFETY: columns `(c0 + c) * 8 + 8 <= hd` of row `l < U` (contract).
                *x = unsafe { _mm256_mul_ps(_mm256_loadu_ps(o.add(l * hd + (c0 + c) * 8)), _mm256_set1_ps(alpha[l])) };
            }
        }
        for k in 0..kt {
            // The same value row of the next tile, these columns.
            let next = values.wrapping_add((k + TILE_KEYS) * stride + c0 * 8) as *const i8;
            for line in (0..n * 16).step_by(64) {
                // SAFETY: SSE (the caller's features).
                unsafe { _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(line)) };
            }
            // SAFETY: row `k < kt` of the weights and of the values, columns as above.
            unsafe {
                let pk: [__m256; U] = std::array::from_fn(|l| _mm256_broadcast_ss(&p[l][k]));
                let vk = values.add(k * stride + c0 * 8);
                for c in 0..G {
                    if c < n {
                        let v = _mm256_cvtph_ps(_mm_loadu_si128(vk.add(8 * c) as *const __m128i));
                        for (a, &pl) in acc.iter_mut().zip(&pk) {
                            a[c] = _mm256_fmadd_ps(pl, v, a[c]);
                        }
                    }
                }
            }
        }
        for (l, a) in acc.iter().enumerate() {
            for (c, x) in a.iter().enumerate().take(n) {
                // SAFETY: as above.
                unsafe { _mm256_storeu_ps(o.add(l * hd + (c0 + c) * 8), *x) };
            }
        }
    }
    for c in cols * 8..hd {
        for (l, (row, &al)) in p.iter().zip(alpha).enumerate() {
            // SAFETY: column `c < hd` of row `l < U` and of value rows below `kt` (contract).
            unsafe {
                let mut x = *o.add(l * hd + c) * al;
                for (k, &pk) in row.iter().enumerate().take(kt) {
                    x = pk.mul_add(f16_to_f32(*values.add(k * stride + c)), x);
                }
                *o.add(l * hd + c) = x;
            }
        }
    }
}

/// One lane's causal mask on a tile's scores `row` (keys `0..kt` from key `k0`; past `pos` they
/// become `-inf`), its new running max from `m` and the rescale of what came before,
/// `e^(m - max)`, as the lane-major kernels compute them (`masked_max`, `exp_ps`).
///
/// # Safety
/// AVX2 and FMA; `kt <= TILE_KEYS`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn masked_lane_max(row: &mut [f32; TILE_KEYS], kt: usize, k0: usize, pos: i32, m: f32) -> (f32, f32) {
    // Keys past `pos` (from `seen` on) are masked.
    let seen = (pos as i64 - k0 as i64 + 1).clamp(0, kt as i64) as usize;
    row[seen..kt].fill(f32::NEG_INFINITY);
    // The max is exact in any order: eight running maxima (one dependent chain of 64 took
    // about as long as the tile's scores), then the tail. Not below f32::MIN, as the
    // lane-major kernel: a lane that sees no key gets weights of 0.
    let full = kt / 8 * 8;
    let mut v = _mm256_set1_ps(f32::NEG_INFINITY);
    for k in (0..full).step_by(8) {
        // SAFETY: `k + 8 <= kt <= TILE_KEYS`.
        v = _mm256_max_ps(v, unsafe { _mm256_loadu_ps(row.as_ptr().add(k)) });
    }
    let mut eight = [0f32; 8];
    // SAFETY: `eight` holds eight f32s.
    unsafe { _mm256_storeu_ps(eight.as_mut_ptr(), v) };
    let mt = eight.iter().chain(&row[full..kt]).fold(m, |a, &x| a.max(x)).max(f32::MIN);
    (mt, _mm256_cvtss_f32(exp_ps(_mm256_set1_ps(m - mt))))
}

/// The online softmax of one tile for lane `lane` of a few-lane block, on its scores `row`
/// (keys `0..kt`), which become `e^(score - max)`: the causal mask for a lane at position
/// `pos` (keys past it are `-inf`, from key `k0` on), the running max `m` and sum `l`, and the
/// rescale of what came before, returned. Each value gets the lane-major kernel's operations:
/// the max is exact in any order, `exp` is the same vector function, and the sum adds the keys
/// one at a time from zero, in order.
///
/// # Safety
/// AVX2 and FMA; `kt <= TILE_KEYS`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn softmax_lane(row: &mut [f32; TILE_KEYS], kt: usize, k0: usize, pos: i32, m: &mut f32, l: &mut f32) -> f32 {
    // SAFETY: AVX2 and FMA (contract).
    let (mt, alpha) = unsafe { masked_lane_max(row, kt, k0, pos, *m) };
    let t = _mm256_set1_ps(mt);
    let mut k = 0;
    while k < kt {
        let mut v = [0f32; 8];
        let n = (kt - k).min(8);
        v[..n].copy_from_slice(&row[k..k + n]);
        // SAFETY: `v` holds eight f32s.
        unsafe { _mm256_storeu_ps(v.as_mut_ptr(), exp_ps(_mm256_sub_ps(_mm256_loadu_ps(v.as_ptr()), t))) };
        row[k..k + n].copy_from_slice(&v[..n]);
        k += 8;
    }
    let sum = row[..kt].iter().fold(0f32, |s, &e| s + e);
    *l = l.mul_add(alpha, sum);
    *m = mt;
    alpha
}
