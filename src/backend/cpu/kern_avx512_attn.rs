//! AVX-512 BF16 kernel of the tiled attention in `attention.rs` (blocks of a few lanes in
//! `kern_avx512_attn_few.rs`): the same walk as `kern_avx2_attn.rs` (lanes in the vector
//! dimension, outer products, an online softmax), with both products as `vdpbf16ps` over pairs
//! of bf16 values. One instruction does the work of two FMAs, so a long prompt's attention,
//! bound by its multiply-adds, takes about half the instructions.
//!
//! The queries and the softmax weights are rounded to bf16 (to nearest even), and the cache
//! holds the keys and values as bf16 pairs (`KvFormat::Bf16Pairs`); products are exact and sums
//! are f32. Pairs run along the head's dimensions for the scores (a query lane's `(q[2i],
//! q[2i + 1])` against a key's) and along the keys for the weighted sum (a lane's `(p[2j],
//! p[2j + 1])` against a value column's). The weights are rounded before they are summed, so
//! each lane's weights sum exactly to its normaliser.
//! Every function here requires AVX-512 F/VL/BW and BF16: the driver only calls them at
//! `Isa::Avx512` (F/VL/BW detected) when `Isa::bf16_attention` detected BF16.

use super::attention::{few_outputs, sees, AttnBlock, TileScratch, FEW_LANES, MAX_GROUP, TILE_KEYS};
use super::kern_avx2_attn::masked_max;
use super::kern_avx2_attn_few::few_lanes;
use super::kern_avx2_f32::exp_ps;
use super::kern_avx512_attn_few::tile_few;
use crate::backend::KvFormat;
use std::arch::x86_64::*;

/// `x`'s bits rounded to nearest even at bit 16: the bf16 in each lane's top half (its low half
/// is left over). Integer operations: `vcvtne2ps2bf16` took 43 % of the few-lane kernel's
/// samples in a `perf` profile of decoding at 4,000 positions.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512bf16")]
#[inline]
pub(super) fn rne(x: __m256) -> __m256i {
    let b = _mm256_castps_si256(x);
    let odd = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    _mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), odd)
}

/// `lo` and `hi` rounded to bf16 and interleaved: 32-bit lane `i` holds `(lo[i], hi[i])`, the
/// pair `vdpbf16ps` multiplies with another pair.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512bf16")]
#[inline]
pub(super) fn pair(lo: __m256, hi: __m256) -> __m256i {
    _mm256_blend_epi16::<0xaa>(_mm256_srli_epi32(rne(lo), 16), rne(hi))
}

/// `acc + a . b` over each 32-bit lane's bf16 pair.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512bf16")]
#[inline]
pub(super) fn dot(acc: __m256, a: __m256i, b: __m256i) -> __m256 {
    // SAFETY: `__m256bh` and `__m256i` are both 256 bits of plain data.
    let (a, b) = unsafe { (std::mem::transmute::<__m256i, __m256bh>(a), std::mem::transmute::<__m256i, __m256bh>(b)) };
    _mm256_dpbf16_ps(acc, a, b)
}

/// Scores of the tile's keys `k..k + KB` for all `NV * 8` lanes into `s[k..]` (lane-minor).
///
/// # Safety
/// AVX-512 BF16; `qb` holds `hd / 2` rows of `NV * 8` pairs, `kb` the tile's key pairs (pair
/// `i` of key `j` at `i * TILE_KEYS + j`), `s` rows `k..k + KB` of `NV * 8` lanes.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512bf16")]
#[inline]
unsafe fn scores<const NV: usize, const KB: usize>(qb: *const u32, kb: *const u32, k: usize, hd: usize, s: *mut f32) {
    let w = NV * 8;
    let mut acc = [[_mm256_setzero_ps(); NV]; KB];
    for i in 0..hd / 2 {
        // SAFETY: pair row `i < hd / 2` of `qb` and of `kb` (contract).
        unsafe {
            let q: [__m256i; NV] = std::array::from_fn(|v| _mm256_loadu_si256(qb.add(i * w + 8 * v) as *const __m256i));
            let kr = kb.add(i * TILE_KEYS + k);
            for (j, a) in acc.iter_mut().enumerate() {
                let kv = _mm256_set1_epi32(*kr.add(j) as i32);
                for v in 0..NV {
                    a[v] = dot(a[v], q[v], kv);
                }
            }
        }
    }
    for (j, a) in acc.iter().enumerate() {
        for (v, &x) in a.iter().enumerate() {
            // SAFETY: row `k + j` of `s`, `j < KB` (contract).
            unsafe { _mm256_storeu_ps(s.add((k + j) * w + 8 * v), x) };
        }
    }
}

/// `ot[c][lanes] = ot[c][lanes] * alpha + sum over the tile's key pairs of p . v[c]` for
/// columns `c..c + CB`.
///
/// # Safety
/// AVX-512 BF16; `pb` holds `kp` rows of `NV * 8` weight pairs, `vb` `kp` rows (`vstride`
/// apart) of value pairs from column `c`, `ot` rows `c..c + CB` of `NV * 8` lanes.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512bf16")]
#[inline]
unsafe fn weighted<const NV: usize, const CB: usize>(
    pb: *const u32,
    kp: usize,
    vb: *const u32,
    vstride: usize,
    alpha: &[__m256; NV],
    ot: *mut f32,
) {
    let w = NV * 8;
    let mut acc: [[__m256; NV]; CB] = std::array::from_fn(|c| {
        std::array::from_fn(|v| {
            // SAFETY: rows `0..CB` of `ot` (contract).
            unsafe { _mm256_mul_ps(_mm256_loadu_ps(ot.add(c * w + 8 * v)), alpha[v]) }
        })
    });
    for k in 0..kp {
        // SAFETY: pair row `k < kp` of `pb` and columns `0..CB` of `vb`'s row `k` (contract).
        unsafe {
            let pk: [__m256i; NV] =
                std::array::from_fn(|v| _mm256_loadu_si256(pb.add(k * w + 8 * v) as *const __m256i));
            let vk = vb.add(k * vstride);
            for (c, a) in acc.iter_mut().enumerate() {
                // The cache's u16 buffer need not be 4-byte aligned.
                let vc = _mm256_set1_epi32(vk.add(c).read_unaligned() as i32);
                for v in 0..NV {
                    a[v] = dot(a[v], pk[v], vc);
                }
            }
        }
    }
    for (c, a) in acc.iter().enumerate() {
        for (v, &x) in a.iter().enumerate() {
            // SAFETY: rows `0..CB` of `ot` (contract).
            unsafe { _mm256_storeu_ps(ot.add(c * w + 8 * v), x) };
        }
    }
}

/// Several blocks' attention (see [`AttnBlock`] and `kern_avx2_attn::attend_blocks`)
/// with bf16 products, `NV` vectors of 8 lanes, `STEP` keys or value columns per inner step (32
/// registers: `STEP x NV` accumulators beside their operands).
///
/// # Safety
/// The CPU has AVX-512 F/VL/BW and BF16.
///
/// # Panics
/// As `kern_avx2_attn::attend_blocks`, and when `hd` is not a multiple of 8.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512bf16")]
pub unsafe fn attend_blocks<const NV: usize, const STEP: usize>(bs: &mut [AttnBlock<'_>], scratch: &mut TileScratch) {
    let w = NV * 8;
    assert!(bs.len() <= MAX_GROUP, "attention: {} blocks in a group", bs.len());
    let hd = bs.first().map_or(0, |b| b.hd);
    assert!(hd.is_multiple_of(8), "attention: head dimension {hd} is not a multiple of 8");
    let k_begin = bs.first().map_or(0, |b| b.k_begin);
    let TileScratch { ol, qb, kb, pb, .. } = scratch;
    // Blocks of a few lanes (a decode row: one row times the heads of a KV head) keep their
    // outputs lane by lane, `FEW_LANES * hd` values per block, zero to start like `ot`.
    let few: [usize; MAX_GROUP] = std::array::from_fn(|i| bs.get(i).map_or(0, |b| few_lanes::<NV>(b)));
    if few.iter().any(|&u| u > 0) {
        ol.clear();
        ol.resize(bs.len() * FEW_LANES * hd, 0.0);
    }
    qb.resize(bs.len() * hd / 2 * w, 0);
    kb.resize(TILE_KEYS / 2 * hd, 0);
    pb.resize(TILE_KEYS / 2 * w, 0);
    for (i, b) in bs.iter_mut().enumerate() {
        b.check(w);
        assert_eq!(b.format, KvFormat::Bf16Pairs, "attention: the bf16 kernel reads bf16 pairs");
        assert_eq!(b.k_begin, k_begin, "attention: blocks of a group start at different keys");
        assert_eq!(b.hd, hd, "attention: blocks of a group with different head dimensions");
        b.ot[..hd * w].fill(0.0);
        let q = &mut qb[i * hd / 2 * w..(i + 1) * hd / 2 * w];
        for d in 0..hd / 2 {
            for v in 0..NV {
                // SAFETY: rows `2d` and `2d + 1 < hd` of `qt` hold `w` lanes (checked); row `d`
                // of `q` as many pairs.
                unsafe {
                    let lo = _mm256_loadu_ps(b.qt.as_ptr().add(2 * d * w + 8 * v));
                    let hi = _mm256_loadu_ps(b.qt.as_ptr().add((2 * d + 1) * w + 8 * v));
                    _mm256_storeu_si256(q.as_mut_ptr().add(d * w + 8 * v) as *mut __m256i, pair(lo, hi));
                }
            }
        }
    }
    let none = (_mm256_set1_ps(f32::NEG_INFINITY), _mm256_setzero_ps());
    let mut runs = [[none; NV]; MAX_GROUP];
    let sees = sees(bs);
    let n_keys = bs.iter().map(|b| b.n_keys).max().unwrap_or(0);
    for k0 in (k_begin..n_keys).step_by(TILE_KEYS) {
        let mut copied = None;
        for (i, (b, run)) in bs.iter_mut().zip(&mut runs).enumerate() {
            if k0 >= b.n_keys {
                continue;
            }
            let q = &qb[i * hd / 2 * w..(i + 1) * hd / 2 * w];
            if few[i] == 0 && copied != Some(b.source()) {
                // SAFETY: every block of this source was checked through its `n_keys`, so
                // through `sees[i]`; `kb` was sized above.
                unsafe { copy_keys(b, k0, TILE_KEYS.min(sees[i] - k0), kb) };
                copied = Some(b.source());
            }
            if few[i] > 0 {
                let (mut ms, mut ls) = ([0f32; 8], [0f32; 8]);
                let o = &mut ol[i * FEW_LANES * hd..(i + 1) * FEW_LANES * hd];
                // SAFETY: a few-lane block has one vector of lanes (`NV == 1`, `few_lanes`);
                // `b` was checked and `k0 < b.n_keys`, `o` holds `FEW_LANES >= few[i]` rows of
                // `hd`; both arrays hold eight f32s.
                unsafe {
                    _mm256_storeu_ps(ms.as_mut_ptr(), run[0].0);
                    _mm256_storeu_ps(ls.as_mut_ptr(), run[0].1);
                    tile_few(b, k0, few[i], &mut ms, &mut ls, o, q.as_ptr());
                    run[0] = (_mm256_loadu_ps(ms.as_ptr()), _mm256_loadu_ps(ls.as_ptr()));
                }
                continue;
            }
            // SAFETY: `b` was checked and `k0 < b.n_keys`; the tile's keys are in `kb`.
            unsafe { tile::<NV, STEP>(b, run, k0, q.as_ptr(), kb.as_ptr(), pb.as_mut_ptr()) };
        }
    }
    few_outputs(bs, &few, ol, w);
    for (b, run) in bs.iter_mut().zip(&runs) {
        for (v, &(m, l)) in run.iter().enumerate() {
            // SAFETY: `m` and `l` hold `w` lanes (checked).
            unsafe {
                _mm256_storeu_ps(b.m.as_mut_ptr().add(8 * v), m);
                _mm256_storeu_ps(b.l.as_mut_ptr().add(8 * v), l);
            }
        }
    }
}

/// Keys `k0..k0 + kt` of block `b`'s cache (bf16 pairs) into `kb`, pair `i` of key `j` at `i *
/// TILE_KEYS + j`: the order in which the scores take them, key by key within a pair row.
///
/// # Safety
/// The kernel's features; `k0` a multiple of 8 and `kt <= TILE_KEYS`; the cache holds keys
/// `k0..k0 + kt` in whole groups; `kb` holds `TILE_KEYS / 2 * hd`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512bf16")]
unsafe fn copy_keys(b: &AttnBlock<'_>, k0: usize, kt: usize, kb: &mut [u32]) {
    let (hd, stride) = (b.hd, b.stride);
    for g in 0..kt.div_ceil(8) {
        let group = b.keys[b.format.key_at(k0 + 8 * g, 0, stride)..].as_ptr();
        for i in 0..hd / 2 {
            // SAFETY: group `g` holds pair `i < hd / 2` of its 8 keys as 16 values from `16i`;
            // row `i` of `kb` holds `TILE_KEYS >= 8g + 8` pairs.
            unsafe {
                let p = _mm256_loadu_si256(group.add(16 * i) as *const __m256i);
                _mm256_storeu_si256(kb.as_mut_ptr().add(i * TILE_KEYS + 8 * g) as *mut __m256i, p);
            }
        }
    }
}

/// Keys `k0..` (one tile, or to `b.n_keys`) into block `b`'s softmax `run` and outputs.
///
/// # Safety
/// The kernel's features; `b.check(NV * 8)` passed and `k0 < b.n_keys`; `qb` holds the block's
/// query pairs, `kb` the tile's keys as [`copy_keys`] leaves them, `pb` room for `TILE_KEYS / 2`
/// rows of `NV * 8` pairs.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512bf16")]
unsafe fn tile<const NV: usize, const STEP: usize>(
    b: &mut AttnBlock<'_>,
    run: &mut [(__m256, __m256); NV],
    k0: usize,
    qb: *const u32,
    kb: *const u32,
    pb: *mut u32,
) {
    let w = NV * 8;
    let hd = b.hd;
    let (s, ot) = (b.s.as_mut_ptr(), b.ot.as_mut_ptr());
    let pos: [__m256i; NV] = std::array::from_fn(|v| {
        // SAFETY: `lane_pos` holds `w` entries (checked).
        unsafe { _mm256_loadu_si256(b.lane_pos.as_ptr().add(8 * v) as *const __m256i) }
    });
    let kt = TILE_KEYS.min(b.n_keys - k0);
    // SAFETY (the pointer arithmetic below): `s` holds `TILE_KEYS >= kt` rows and `ot` `hd`
    // rows of `w` lanes (checked); `pb` `TILE_KEYS / 2` rows of `w` pairs (contract).
    let mut k = 0;
    while k + STEP <= kt {
        // SAFETY: keys `k..k + STEP` of the tile.
        unsafe { scores::<NV, STEP>(qb, kb, k, hd, s) };
        k += STEP;
    }
    while k < kt {
        // SAFETY: key `k` of the tile.
        unsafe { scores::<NV, 1>(qb, kb, k, hd, s) };
        k += 1;
    }
    let mut alpha = [_mm256_setzero_ps(); NV];
    for (v, (m, l)) in run.iter_mut().enumerate() {
        // SAFETY: rows `0..kt` of `s`.
        let mt = unsafe { masked_max(s.add(8 * v), w, kt, k0, b.min_pos, pos[v], *m) };
        alpha[v] = exp_ps(_mm256_sub_ps(*m, mt));
        let e = |k: usize| {
            // SAFETY: row `k < kt` of `s`.
            exp_ps(_mm256_sub_ps(unsafe { _mm256_loadu_ps(s.add(k * w + 8 * v)) }, mt))
        };
        // The weights as rounded, summed in two chains (the even and the odd keys).
        let (mut even, mut odd) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        for j in 0..kt.div_ceil(2) {
            let hi = if 2 * j + 1 < kt { e(2 * j + 1) } else { _mm256_setzero_ps() };
            let p = pair(e(2 * j), hi);
            even = _mm256_add_ps(even, _mm256_castsi256_ps(_mm256_slli_epi32(p, 16)));
            odd = _mm256_add_ps(odd, _mm256_castsi256_ps(_mm256_and_si256(p, _mm256_set1_epi32(-65536))));
            // SAFETY: row `j < TILE_KEYS / 2` of `pb`.
            unsafe { _mm256_storeu_si256(pb.add(j * w + 8 * v) as *mut __m256i, p) };
        }
        let sum = _mm256_add_ps(even, odd);
        *l = _mm256_fmadd_ps(*l, alpha[v], sum);
        *m = mt;
    }
    let kp = kt.div_ceil(2);
    // The tile's value pairs, straight from the cache: pair row `j` (keys `k0 + 2j` and the
    // next) holds `stride` pairs, the head's `hd` first. When `kt` is odd the last row's second
    // half is a later position or zero, and its weight is 0.
    let (stride, at) = (b.stride, b.format.value_at(k0, 0, b.stride));
    let vb = b.values[at..].as_ptr() as *const u32;
    let mut c = 0;
    while c + STEP <= hd {
        // SAFETY: columns `c..c + STEP` of the tile's values (`check`: whole pairs through
        // `n_keys`) and of `ot`.
        unsafe { weighted::<NV, STEP>(pb, kp, vb.add(c), stride, &alpha, ot.add(c * w)) };
        c += STEP;
    }
    while c < hd {
        // SAFETY: column `c`.
        unsafe { weighted::<NV, 1>(pb, kp, vb.add(c), stride, &alpha, ot.add(c * w)) };
        c += 1;
    }
}
