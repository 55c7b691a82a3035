//! The tiled attention's kernel for blocks of a few lanes (`kern_avx2_attn.rs`), as a decode
//! row makes: one query row times the heads that share a KV head (3 in the demo model), in a
//! vector of 8 lanes. The lane-major products would spend an FMA per key and value element on
//! all 8 lanes; here each used lane puts keys (scores) or value columns (weighted sum) in the
//! vector dimension instead. Every lane, key and column gets the lane-major kernel's
//! operations in the same order (a chain of FMAs from zero over the head's dimensions; a
//! multiply by the rescale, then an FMA per key), so a row's result is the same bits whichever
//! kernel its block takes.

use super::attention::{AttnBlock, FEW_LANES, TILE_KEYS};
use super::float16::f16_to_f32;
use super::kern_avx2_f32::exp_ps;
use crate::backend::KEY_GROUP;
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

/// [`weighted`] for one lane, with the value columns in the vector dimension: `o[c] = o[c] *
/// alpha + sum over the tile's keys of p[k][lane] * v[k][c]`. Each column gets the operations
/// `weighted` gives it, in the same order (a multiply, then one FMA per key), so a lane's
/// result is the same bits either way; a block with only a few lanes used (a decode row) then
/// costs one FMA per key and 8 columns instead of one per key and column.
///
/// # Safety
/// AVX2 and FMA; `p` holds `kt` rows of `w` lanes and `lane < w`; `o` holds `hd` values; value
/// rows `0..kt` (`hd` columns at `stride` apart) are in `values`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn weighted_lane(
    p: *const f32,
    w: usize,
    lane: usize,
    kt: usize,
    values: *const u16,
    stride: usize,
    hd: usize,
    alpha: f32,
    o: *mut f32,
) {
    let mut c = 0;
    while c + 64 <= hd {
        // SAFETY: columns `c..c + 64 <= hd` of `o` and of value rows below `kt` (contract).
        unsafe { weighted_cols::<8>(p, w, lane, kt, values.add(c), stride, alpha, o.add(c)) };
        c += 64;
    }
    while c + 8 <= hd {
        // SAFETY: columns `c..c + 8 <= hd`, as above.
        unsafe { weighted_cols::<1>(p, w, lane, kt, values.add(c), stride, alpha, o.add(c)) };
        c += 8;
    }
    while c < hd {
        // SAFETY: column `c < hd`, as above, and row `k < kt` of `p` at `lane < w`.
        unsafe {
            let mut x = *o.add(c) * alpha;
            for k in 0..kt {
                x = (*p.add(k * w + lane)).mul_add(f16_to_f32(*values.add(k * stride + c)), x);
            }
            *o.add(c) = x;
        }
        c += 1;
    }
}

/// [`weighted_lane`] for columns `0..NC * 8` of `o` and `values`; the same contract.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn weighted_cols<const NC: usize>(
    p: *const f32,
    w: usize,
    lane: usize,
    kt: usize,
    values: *const u16,
    stride: usize,
    alpha: f32,
    o: *mut f32,
) {
    let al = _mm256_set1_ps(alpha);
    let mut acc = [_mm256_setzero_ps(); NC];
    for (j, a) in acc.iter_mut().enumerate() {
        // SAFETY: columns `8j..8j + 8 <= NC * 8` of `o` (contract).
        *a = unsafe { _mm256_mul_ps(_mm256_loadu_ps(o.add(8 * j)), al) };
    }
    for k in 0..kt {
        // SAFETY: row `k < kt` of `p` and of `values` (contract).
        unsafe {
            let pk = _mm256_broadcast_ss(&*p.add(k * w + lane));
            let vk = values.add(k * stride);
            for (j, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(pk, _mm256_cvtph_ps(_mm_loadu_si128(vk.add(8 * j) as *const __m128i)), *a);
            }
        }
    }
    for (j, a) in acc.iter().enumerate() {
        // SAFETY: as above.
        unsafe { _mm256_storeu_ps(o.add(8 * j), *a) };
    }
}

/// Scores of keys `0..kt` for lanes `0..used` into `sc` (lane `j`'s at `sc[j * TILE_KEYS..]`):
/// the keys are grouped (8 keys side by side per element), so each lane runs
/// `acc = fma(q[d], k[d], acc)` over `d` for 8 keys at once, straight from the cache. A group's
/// keys past `kt` get scores too (the cache holds whole groups); the softmax ignores them.
///
/// # Safety
/// AVX2 and FMA; `qt` holds `hd` rows of `w >= 8` lanes and `used <= FEW_LANES`; `keys` holds
/// the grouped keys `0..kt.div_ceil(8) * 8`, `kt <= TILE_KEYS` (element `d` of key `i` at
/// `(i / 8) * 8 * stride + d * 8 + i % 8`, `d < hd`).
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn scores_lanes(
    qt: *const f32,
    w: usize,
    used: usize,
    keys: *const u16,
    stride: usize,
    hd: usize,
    kt: usize,
    sc: &mut [[f32; TILE_KEYS]; FEW_LANES],
) {
    assert!(kt <= TILE_KEYS && used <= FEW_LANES && w >= 8);
    const FULL: usize = TILE_KEYS / KEY_GROUP;
    // The match below names every group count of a tile.
    const _: () = assert!(FULL == 8);
    for (lane, row) in sc.iter_mut().enumerate().take(used) {
        // SAFETY: our contract, for lane `lane < used`.
        unsafe {
            // A fixed count of accumulators, which stay in registers (with a variable count,
            // each went to the stack after every FMA), all of the tile's groups at once.
            let (q, row) = (qt.add(lane), &mut row[..]);
            match kt.div_ceil(KEY_GROUP) {
                1 => scores_groups::<1>(q, w, keys, stride, hd, row),
                2 => scores_groups::<2>(q, w, keys, stride, hd, row),
                3 => scores_groups::<3>(q, w, keys, stride, hd, row),
                4 => scores_groups::<4>(q, w, keys, stride, hd, row),
                5 => scores_groups::<5>(q, w, keys, stride, hd, row),
                6 => scores_groups::<6>(q, w, keys, stride, hd, row),
                7 => scores_groups::<7>(q, w, keys, stride, hd, row),
                _ => scores_groups::<FULL>(q, w, keys, stride, hd, row),
            }
        }
    }
}

/// Scores of the `NG * 8` keys of `NG` groups from `keys` for the lane at `qt` (its `hd`
/// query elements at `w` apart) into `row[..NG * 8]`: `acc = fma(q[d], k[d], acc)` over `d`
/// from zero, 8 keys per vector.
///
/// # Safety
/// AVX2 and FMA; `qt` holds `hd` values `w` apart; `keys` holds `NG` groups (`d < hd` of each
/// at `g * 8 * stride + d * 8`); `row` holds `NG * 8` values.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn scores_groups<const NG: usize>(
    qt: *const f32,
    w: usize,
    keys: *const u16,
    stride: usize,
    hd: usize,
    row: &mut [f32],
) {
    assert!(row.len() >= NG * KEY_GROUP);
    let mut acc = [_mm256_setzero_ps(); NG];
    for d in 0..hd {
        // SAFETY: element `d < hd` of the lane's query and of each group (contract).
        unsafe {
            let q = _mm256_broadcast_ss(&*qt.add(d * w));
            for (g, a) in acc.iter_mut().enumerate() {
                let k8 = keys.add(g * KEY_GROUP * stride + d * KEY_GROUP);
                *a = _mm256_fmadd_ps(q, _mm256_cvtph_ps(_mm_loadu_si128(k8 as *const __m128i)), *a);
            }
        }
    }
    for (g, a) in acc.iter().enumerate() {
        // SAFETY: `8 * g + 8 <= NG * 8 <= row.len()` (asserted).
        unsafe { _mm256_storeu_ps(row.as_mut_ptr().add(8 * g), *a) };
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
pub(super) unsafe fn softmax_lane(
    row: &mut [f32; TILE_KEYS],
    kt: usize,
    k0: usize,
    pos: i32,
    m: &mut f32,
    l: &mut f32,
) -> f32 {
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
