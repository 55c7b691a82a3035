//! 512-bit forms of the f32 attention kernel's steps (`kern_avx2_attn.rs`): its two products for
//! blocks of 16 or 24 lanes (the first 16 lanes in one 512-bit register, the rest in a 256-bit
//! one), and for two blocks of 24 lanes at once the products and the softmax between them in
//! three 512-bit registers (`*_pair`).
//!
//! Where the cores run a 512-bit FMA at the 256-bit rate (Intel Sapphire Rapids) this doubles
//! the products per cycle of a prompt's attention, which the f32 kernel spends most of its time
//! on; where they run it as two halves (AMD Zen 4) it halves the instructions (not measured
//! there). Every lane gets the 256-bit kernel's operations in the same order (one FMA per key or
//! column, into its own accumulator; `exp512` is `exp_ps`), so the results are the same bits.

use super::kern_avx2_f32::EXP2_POLY;
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
    let a0 = join(alpha[0], alpha[1.min(NV - 1)]);
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

/// Lanes of the blocks [`scores_pair`] and [`weighted_pair`] take two at a time.
pub(super) const PAIR_BLOCK: usize = 24;
/// The pair's lanes: three 512-bit registers, where one block alone takes a 512-bit and a
/// 256-bit one (each an FMA slot on these cores: 16 lanes per slot instead of 12).
pub(super) const PAIR_LANES: usize = 2 * PAIR_BLOCK;

/// `lo` in the low half, `hi` in the high half.
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
pub(super) fn join(lo: __m256, hi: __m256) -> __m512 {
    _mm512_castpd_ps(_mm512_insertf64x4::<1>(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi)))
}

/// The low and the high half.
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
fn halves(x: __m512) -> (__m256, __m256) {
    let x = _mm512_castps_pd(x);
    (_mm256_castpd_ps(_mm512_castpd512_pd256(x)), _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(x)))
}

/// A pair's lanes (block `a`'s 24, then block `b`'s) in three 512-bit vectors, from vectors of 8
/// lanes: the first three of `a` and of `b`.
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
pub(super) fn join_pair(a: &[__m256], b: &[__m256]) -> [__m512; 3] {
    [join(a[0], a[1]), join(a[2], b[0]), join(b[1], b[2])]
}

/// [`join_pair`] undone: the pair's lanes into the first three vectors of `a` and of `b`.
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
pub(super) fn split_pair(x: &[__m512; 3], a: &mut [__m256], b: &mut [__m256]) {
    let ((a0, a1), (a2, b0), (b1, b2)) = (halves(x[0]), halves(x[1]), halves(x[2]));
    (a[0], a[1], a[2], b[0], b[1], b[2]) = (a0, a1, a2, b0, b1, b2);
}

/// A pair's lanes from rows of [`PAIR_BLOCK`] at `a` and at `b`.
///
/// # Safety
/// AVX-512 F; `a` and `b` hold `PAIR_BLOCK` values each.
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
pub(super) unsafe fn load_pair(a: *const f32, b: *const f32) -> [__m512; 3] {
    // SAFETY: 16 + 8 values from `a` and 8 + 16 from `b` (contract).
    unsafe { [_mm512_loadu_ps(a), join(_mm256_loadu_ps(a.add(16)), _mm256_loadu_ps(b)), _mm512_loadu_ps(b.add(8))] }
}

/// [`load_pair`] undone: the pair's lanes into rows of [`PAIR_BLOCK`] at `a` and at `b`.
///
/// # Safety
/// AVX-512 F; `a` and `b` have room for `PAIR_BLOCK` values each.
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
unsafe fn store_pair(x: &[__m512; 3], a: *mut f32, b: *mut f32) {
    let (mid_a, mid_b) = halves(x[1]);
    // SAFETY: as for `load_pair` (contract).
    unsafe {
        _mm512_storeu_ps(a, x[0]);
        _mm256_storeu_ps(a.add(16), mid_a);
        _mm256_storeu_ps(b, mid_b);
        _mm512_storeu_ps(b.add(8), x[2]);
    }
}

/// [`scores`] for two blocks of [`PAIR_BLOCK`] lanes over the same keys: the scores of keys
/// `k..k + KB` into rows of `sp` of [`PAIR_LANES`] lanes (block `qa`'s lanes first), each lane
/// with the very operations [`scores`] gives it.
///
/// # Safety
/// AVX-512 F, AVX2 and FMA; `qa` and `qb` hold `hd` rows of `PAIR_BLOCK` lanes, `sp` rows
/// `k..k + KB` of `PAIR_LANES`, and `keys` the grouped keys `k..k + KB` (as for [`scores`]).
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn scores_pair<const KB: usize>(
    qa: *const f32,
    qb: *const f32,
    keys: *const f32,
    k: usize,
    stride: usize,
    hd: usize,
    sp: *mut f32,
) {
    let mut acc = [[_mm512_setzero_ps(); 3]; KB];
    let kp: [*const f32; KB] = std::array::from_fn(|j| keys.wrapping_add(key_index(k + j, 0, stride)));
    for d in 0..hd {
        // SAFETY: `d < hd`: row `d` of both blocks' queries and element `d` of each key
        // (caller's contract).
        unsafe {
            let q = load_pair(qa.add(d * PAIR_BLOCK), qb.add(d * PAIR_BLOCK));
            for j in 0..KB {
                let kv = _mm512_set1_ps(*kp[j].add(d * KEY_GROUP));
                for v in 0..3 {
                    acc[j][v] = _mm512_fmadd_ps(q[v], kv, acc[j][v]);
                }
            }
        }
    }
    for (j, a) in acc.iter().enumerate() {
        for (v, &x) in a.iter().enumerate() {
            // SAFETY: row `k + j` of `sp`, `j < KB` (caller's contract).
            unsafe { _mm512_storeu_ps(sp.add((k + j) * PAIR_LANES + 16 * v), x) };
        }
    }
}

/// [`weighted`] for two blocks of [`PAIR_BLOCK`] lanes over the same values: the weights of
/// both in rows of `sp` of [`PAIR_LANES`] lanes (block `a`'s first), the outputs in each
/// block's own `ot` (columns `c..c + CB`), the factors of the outputs so far in `alpha` (the
/// pair's lanes), each lane with the very operations [`weighted`] gives it.
///
/// # Safety
/// AVX-512 F, AVX2 and FMA; `sp` holds `kt` rows of `PAIR_LANES`, `ota` and `otb` rows
/// `0..CB` of `PAIR_BLOCK` lanes, and value rows `0..kt` (columns `0..CB` at `stride` apart)
/// are in `values`.
#[target_feature(enable = "avx512f,avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn weighted_pair<const CB: usize>(
    sp: *const f32,
    kt: usize,
    values: *const f32,
    stride: usize,
    alpha: &[__m512; 3],
    ota: *mut f32,
    otb: *mut f32,
) {
    let mut acc: [[__m512; 3]; CB] = std::array::from_fn(|c| {
        // SAFETY: rows `0..CB` of both outputs (caller's contract).
        let o = unsafe { load_pair(ota.add(c * PAIR_BLOCK), otb.add(c * PAIR_BLOCK)) };
        std::array::from_fn(|v| _mm512_mul_ps(o[v], alpha[v]))
    });
    for k in 0..kt {
        // SAFETY: `k < kt`: row `k` of `sp` and columns `0..CB` of value row `k` (contract).
        unsafe {
            let p: [__m512; 3] = std::array::from_fn(|v| _mm512_loadu_ps(sp.add(k * PAIR_LANES + 16 * v)));
            let vk = values.add(k * stride);
            for (c, a) in acc.iter_mut().enumerate() {
                let vc = _mm512_set1_ps(*vk.add(c));
                for v in 0..3 {
                    a[v] = _mm512_fmadd_ps(p[v], vc, a[v]);
                }
            }
        }
    }
    for (c, a) in acc.iter().enumerate() {
        // SAFETY: rows `0..CB` of both outputs (contract).
        unsafe { store_pair(a, ota.add(c * PAIR_BLOCK), otb.add(c * PAIR_BLOCK)) };
    }
}

/// [`exp_ps`](super::kern_avx2_f32::exp_ps) in 512 bits: the same operations in the same order,
/// so each lane gets the same bits.
#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
pub(super) fn exp512(x: __m512) -> __m512 {
    let x = _mm512_max_ps(_mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)), _mm512_set1_ps(-127.0));
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(x);
    let r = _mm512_sub_ps(x, n);
    let mut p = _mm512_set1_ps(EXP2_POLY[0]);
    for c in &EXP2_POLY[1..] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(*c));
    }
    let y = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0));
    let pow2n =
        _mm512_castsi512_ps(_mm512_slli_epi32::<23>(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127))));
    _mm512_mul_ps(y, pow2n)
}

/// The online softmax of a pair's tile of `kt` scores (rows of [`PAIR_LANES`] in `sp`), lanes at
/// positions `pos` with running maxes `m` and sums `l`: what `kern_avx2_attn`'s `softmax`
/// does to each 256-bit lane vector, in 512 bits (the causal mask, the new max, the weights,
/// the sums). Returns each lane's factor for the outputs so far. `min_pos` is the pair's
/// first position: keys up to it are visible to every lane.
///
/// # Safety
/// AVX-512 F, AVX2 and FMA; `sp` holds `kt` rows of `PAIR_LANES`.
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn softmax_pair(
    sp: *mut f32,
    kt: usize,
    k0: usize,
    min_pos: usize,
    pos: &[__m512i; 3],
    m: &mut [__m512; 3],
    l: &mut [__m512; 3],
) -> [__m512; 3] {
    let mut alpha = [_mm512_setzero_ps(); 3];
    for v in 0..3 {
        let mut mt = m[v];
        for k in 0..kt {
            // SAFETY: row `k < kt` (contract).
            let p = unsafe { sp.add(k * PAIR_LANES + 16 * v) };
            // SAFETY: as above.
            let mut x = unsafe { _mm512_loadu_ps(p) };
            if k0 + k > min_pos {
                // The causal mask: lanes at positions before key `k0 + k` do not see it.
                let hidden = _mm512_cmpgt_epi32_mask(_mm512_set1_epi32((k0 + k) as i32), pos[v]);
                x = _mm512_mask_mov_ps(x, hidden, _mm512_set1_ps(f32::NEG_INFINITY));
                // SAFETY: as above.
                unsafe { _mm512_storeu_ps(p, x) };
            }
            mt = _mm512_max_ps(mt, x);
        }
        let mt = _mm512_max_ps(mt, _mm512_set1_ps(f32::MIN));
        alpha[v] = exp512(_mm512_sub_ps(m[v], mt));
        let mut sum = _mm512_setzero_ps();
        for k in 0..kt {
            // SAFETY: row `k < kt` (contract).
            unsafe {
                let p = sp.add(k * PAIR_LANES + 16 * v);
                let e = exp512(_mm512_sub_ps(_mm512_loadu_ps(p), mt));
                _mm512_storeu_ps(p, e);
                sum = _mm512_add_ps(sum, e);
            }
        }
        l[v] = _mm512_fmadd_ps(l[v], alpha[v], sum);
        m[v] = mt;
    }
    alpha
}

#[cfg(test)]
mod tests {
    use super::super::isa::Isa;
    use super::super::kern_avx2_f32::exp_ps;
    use super::super::test_inputs::isas_under_test;
    use super::*;

    #[test]
    fn exp512_gives_exp_ps_bits() {
        // The AVX-512 level implies F and FMA; where the CI machine has it, `MTPLX_REQUIRE_ISA`
        // makes `isas_under_test` fail rather than let this pass unrun.
        if !isas_under_test().contains(&Isa::Avx512) {
            return;
        }
        let mut xs: Vec<f32> = (-2000..=200).map(|i| i as f32 * 0.0517).collect();
        xs.extend([f32::NEG_INFINITY, f32::MIN, -87.9, -88.8, 0.0, -0.0, 88.0, 1e-30, -1e-30]);
        xs.resize(xs.len().div_ceil(16) * 16, 0.5);
        for c in xs.chunks_exact(16) {
            let (mut wide, mut narrow) = ([0f32; 16], [0f32; 16]);
            // SAFETY: the AVX-512 level was detected (F, AVX2, FMA); 16 floats each.
            unsafe {
                _mm512_storeu_ps(wide.as_mut_ptr(), exp512(_mm512_loadu_ps(c.as_ptr())));
                for h in 0..2 {
                    _mm256_storeu_ps(narrow[8 * h..].as_mut_ptr(), exp_ps(_mm256_loadu_ps(c[8 * h..].as_ptr())));
                }
            }
            for i in 0..16 {
                assert_eq!(wide[i].to_bits(), narrow[i].to_bits(), "exp of {}", c[i]);
            }
        }
    }
}
