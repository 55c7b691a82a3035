//! 512-bit forms of the f32 attention kernel's two products (`kern_avx2_attn.rs`), for blocks of
//! 16 or 24 lanes: the first 16 lanes in one 512-bit register, the rest in a 256-bit one.
//!
//! Where the cores run a 512-bit FMA at the 256-bit rate (Intel Sapphire Rapids) this doubles
//! the products per cycle of a prompt's attention, which the f32 kernel spends most of its time
//! on; where they run it as two halves (AMD Zen 4) it halves the instructions (not measured
//! there). Every lane gets
//! the 256-bit kernel's operations in the same order (one FMA per key or column, into its own
//! accumulator), so the results are the same bits.

use crate::backend::{key_index, KEY_GROUP};
use std::arch::x86_64::*;

/// [`kern_avx2_attn`](super::kern_avx2_attn)'s `scores` for `NV` (2 or 3) vectors of 8 lanes:
/// the scores of the tile's keys `k..k + KB` into `s[k..]` (lane-minor).
///
/// # Safety
/// AVX-512 F, AVX2 and FMA; `qt` holds `hd` rows of `NV * 8` lanes, `s` rows `k..k + KB` of as
/// many lanes, and `keys` holds grouped keys `k..k + KB` (element `d` of key `i` at
/// `(i / 8) * 8 * stride + d * 8 + i % 8`, `d < hd`).
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn scores<const NV: usize, const KB: usize>(
    qt: *const f32,
    keys: *const f32,
    k: usize,
    stride: usize,
    hd: usize,
    s: *mut f32,
) {
    debug_assert!(NV == 2 || NV == 3, "512-bit attention products for {NV} lane vectors");
    let w = NV * 8;
    let (mut lo, mut hi) = ([_mm512_setzero_ps(); KB], [_mm256_setzero_ps(); KB]);
    let kp: [*const f32; KB] = std::array::from_fn(|j| keys.wrapping_add(key_index(k + j, 0, stride)));
    for d in 0..hd {
        // SAFETY: `d < hd`: row `d` of `qt` and element `d` of each key (caller's contract).
        unsafe {
            let q0 = _mm512_loadu_ps(qt.add(d * w));
            let q1 = if NV == 3 { _mm256_loadu_ps(qt.add(d * w + 16)) } else { _mm256_setzero_ps() };
            for j in 0..KB {
                let kv = *kp[j].add(d * KEY_GROUP);
                lo[j] = _mm512_fmadd_ps(q0, _mm512_set1_ps(kv), lo[j]);
                if NV == 3 {
                    hi[j] = _mm256_fmadd_ps(q1, _mm256_set1_ps(kv), hi[j]);
                }
            }
        }
    }
    for j in 0..KB {
        // SAFETY: row `k + j` of `s`, `j < KB` (caller's contract).
        unsafe {
            _mm512_storeu_ps(s.add((k + j) * w), lo[j]);
            if NV == 3 {
                _mm256_storeu_ps(s.add((k + j) * w + 16), hi[j]);
            }
        }
    }
}

/// [`kern_avx2_attn`](super::kern_avx2_attn)'s `weighted` for `NV` (2 or 3) vectors of 8
/// lanes: `ot[c][lanes] = ot[c][lanes] * alpha + sum over the tile's keys of p[k][lanes] *
/// v[k][c]` for columns `c..c + CB`.
///
/// # Safety
/// AVX-512 F, AVX2 and FMA; `p` holds `kt` rows of `NV * 8` lanes, `ot` rows `c..c + CB` of as
/// many, and value rows `0..kt` (columns `c..c + CB` at `stride` apart) are in `values`.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn weighted<const NV: usize, const CB: usize>(
    p: *const f32,
    kt: usize,
    values: *const f32,
    stride: usize,
    alpha: &[__m256; NV],
    ot: *mut f32,
) {
    debug_assert!(NV == 2 || NV == 3, "512-bit attention products for {NV} lane vectors");
    let w = NV * 8;
    let a0 = _mm512_castpd_ps(_mm512_insertf64x4::<1>(
        _mm512_castpd256_pd512(_mm256_castps_pd(alpha[0])),
        _mm256_castps_pd(alpha[1.min(NV - 1)]),
    ));
    let a1 = if NV == 3 { alpha[NV - 1] } else { _mm256_setzero_ps() };
    let (mut lo, mut hi) = ([_mm512_setzero_ps(); CB], [_mm256_setzero_ps(); CB]);
    for c in 0..CB {
        // SAFETY: rows `0..CB` of `ot` (caller's contract).
        unsafe {
            lo[c] = _mm512_mul_ps(_mm512_loadu_ps(ot.add(c * w)), a0);
            if NV == 3 {
                hi[c] = _mm256_mul_ps(_mm256_loadu_ps(ot.add(c * w + 16)), a1);
            }
        }
    }
    for k in 0..kt {
        // SAFETY: `k < kt`: row `k` of `p` and columns `0..CB` of value row `k` (contract).
        unsafe {
            let p0 = _mm512_loadu_ps(p.add(k * w));
            let p1 = if NV == 3 { _mm256_loadu_ps(p.add(k * w + 16)) } else { _mm256_setzero_ps() };
            let vk = values.add(k * stride);
            for c in 0..CB {
                let vc = *vk.add(c);
                lo[c] = _mm512_fmadd_ps(p0, _mm512_set1_ps(vc), lo[c]);
                if NV == 3 {
                    hi[c] = _mm256_fmadd_ps(p1, _mm256_set1_ps(vc), hi[c]);
                }
            }
        }
    }
    for c in 0..CB {
        // SAFETY: rows `0..CB` of `ot` (contract).
        unsafe {
            _mm512_storeu_ps(ot.add(c * w), lo[c]);
            if NV == 3 {
                _mm256_storeu_ps(ot.add(c * w + 16), hi[c]);
            }
        }
    }
}
