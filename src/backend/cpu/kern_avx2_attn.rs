//! AVX2 + FMA kernel (x86-64) of the tiled attention in `attention.rs`: one block of query
//! lanes against every key it sees, a tile of keys at a time, with an online softmax.
//!
//! The lanes (query rows times the heads sharing one KV head) are the vector dimension
//! everywhere: the block's queries, scores and outputs are stored lane-minor, so both products
//! are outer products. Each key or value element is broadcast once and feeds one FMA per lane
//! vector; the running max, sum and rescale work lane-wise, with no horizontal sums at all.
//! Every function here requires AVX2 and FMA: the driver only calls them at `Isa::Avx2` or
//! `Isa::Avx512`, which `Isa::available` grants after `is_x86_feature_detected!` said yes.

use super::attention::{few_outputs, sees, AttnBlock, TileScratch, FEW_LANES, MAX_GROUP, TILE_KEYS};
use super::kern_avx2_attn_few::{few_lanes, tile_few};
use super::kern_avx2_f32::{exp_ps, f16s_to_f32};
use super::kern_avx512_attn_f32::{
    join_pair, load_pair, scores_pair, softmax_pair, split_pair, weighted_pair, PAIR_BLOCK, PAIR_LANES,
};
use crate::backend::{key_index, KEY_GROUP};
use std::arch::x86_64::*;

/// Scores of the tile's keys `k..k + KB` for all `NV * 8` lanes into `s[k..]` (lane-minor):
/// `KB x NV` accumulators, each key element broadcast once for the `NV` lane vectors.
///
/// # Safety
/// AVX2 and FMA; `qt` holds `hd` rows of `NV * 8` lanes, `s` rows `k..k + KB` of as many lanes,
/// and `keys` holds grouped keys `k..k + KB` (element `d` of key `i` at
/// `(i / 8) * 8 * stride + d * 8 + i % 8`, `d < hd`).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn scores<const NV: usize, const KB: usize>(
    qt: *const f32,
    keys: *const f32,
    k: usize,
    stride: usize,
    hd: usize,
    s: *mut f32,
) {
    let w = NV * 8;
    let mut acc = [[_mm256_setzero_ps(); NV]; KB];
    let kp: [*const f32; KB] = std::array::from_fn(|j| keys.wrapping_add(key_index(k + j, 0, stride)));
    for d in 0..hd {
        // SAFETY: `d < hd`: row `d` of `qt` and element `d` of each key (caller's contract).
        unsafe {
            let q: [__m256; NV] = std::array::from_fn(|v| _mm256_loadu_ps(qt.add(d * w + 8 * v)));
            for j in 0..KB {
                let kv = _mm256_broadcast_ss(&*kp[j].add(d * KEY_GROUP));
                for v in 0..NV {
                    acc[j][v] = _mm256_fmadd_ps(q[v], kv, acc[j][v]);
                }
            }
        }
    }
    for (j, a) in acc.iter().enumerate() {
        for (v, &x) in a.iter().enumerate() {
            // SAFETY: row `k + j` of `s`, `j < KB` (caller's contract).
            unsafe { _mm256_storeu_ps(s.add((k + j) * w + 8 * v), x) };
        }
    }
}

/// `ot[c][lanes] = ot[c][lanes] * alpha + sum over the tile's keys of p[k][lanes] * v[k][c]`
/// for columns `c..c + CB`, `CB x NV` accumulators.
///
/// # Safety
/// AVX2 and FMA; `p` holds `kt` rows of `NV * 8` lanes, `ot` rows `c..c + CB` of as many, and
/// value rows `0..kt` (columns `c..c + CB` at `stride` apart) are in `values`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn weighted<const NV: usize, const CB: usize>(
    p: *const f32,
    kt: usize,
    values: *const f32,
    stride: usize,
    alpha: &[__m256; NV],
    ot: *mut f32,
) {
    let w = NV * 8;
    let mut acc: [[__m256; NV]; CB] = std::array::from_fn(|c| {
        std::array::from_fn(|v| {
            // SAFETY: rows `0..CB` of `ot` (caller's contract).
            unsafe { _mm256_mul_ps(_mm256_loadu_ps(ot.add(c * w + 8 * v)), alpha[v]) }
        })
    });
    for k in 0..kt {
        // SAFETY: `k < kt`: row `k` of `p` and columns `0..CB` of value row `k` (contract).
        unsafe {
            let pk: [__m256; NV] = std::array::from_fn(|v| _mm256_loadu_ps(p.add(k * w + 8 * v)));
            let vk = values.add(k * stride);
            for (c, a) in acc.iter_mut().enumerate() {
                let vc = _mm256_broadcast_ss(&*vk.add(c));
                for v in 0..NV {
                    a[v] = _mm256_fmadd_ps(pk[v], vc, a[v]);
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

/// Keys (or value columns) per step of the 512-bit products: 8 of them times 2 registers for 24
/// lanes is 16 accumulators of the 32.
const WIDE_STEP: usize = 8;

/// A block's online softmax between tiles: the running max and sum of each lane.
#[derive(Clone, Copy)]
struct Run<const NV: usize> {
    m: [__m256; NV],
    l: [__m256; NV],
}

/// Several blocks' attention (see [`AttnBlock`]) with `NV` vectors of 8 lanes, `STEP` keys (or
/// value columns) per inner product step: 3 with three lane vectors (9 accumulators, 13
/// registers with the operands; with 4, all 16 registers, LLVM kept one accumulator on the
/// stack inside both loops and they ran at about half speed), 8 with one so that enough FMAs
/// are in flight.
///
/// The blocks run over the same keys from `k_begin` (one segment), each tile of keys going
/// through every block that sees it before the next is read, so that it is read from the
/// shared cache once per call rather than once per block (blocks of one KV head share it;
/// blocks of the other KV heads read the rest of the same cache lines). Each block's result is
/// what it would be alone (the same operations in the same order): its outputs unnormalised,
/// with each lane's max and sum (see [`AttnBlock`]).
///
/// With `WIDE`, blocks of 16 or 24 lanes take both products in 512-bit registers
/// (`kern_avx512_attn_f32.rs`, the same bits).
///
/// # Safety
/// The CPU supports AVX2 and FMA, and with `WIDE` AVX-512 F.
///
/// # Panics
/// When a buffer of a block is shorter than `check` wants, the blocks start at different
/// keys, or there are more than `MAX_GROUP` blocks.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn attend_blocks<const NV: usize, const STEP: usize, const WIDE: bool>(
    bs: &mut [AttnBlock<'_>],
    scratch: &mut TileScratch,
) {
    let w = NV * 8;
    assert!(bs.len() <= MAX_GROUP, "attention: {} blocks in a group", bs.len());
    let none = Run { m: [_mm256_set1_ps(f32::NEG_INFINITY); NV], l: [_mm256_setzero_ps(); NV] };
    let mut runs = [none; MAX_GROUP];
    let k_begin = bs.first().map_or(0, |b| b.k_begin);
    for b in bs.iter_mut() {
        b.check(w);
        assert_eq!(b.k_begin, k_begin, "attention: blocks of a group start at different keys");
        b.ot[..b.hd * w].fill(0.0);
    }
    // Blocks of a few lanes (a decode row: one row times the heads of a KV head) keep their
    // outputs lane by lane, `FEW_LANES * hd` values per block, zero to start like `ot`.
    let few: [usize; MAX_GROUP] = std::array::from_fn(|i| bs.get(i).map_or(0, |b| few_lanes::<NV>(b)));
    let hd = bs.first().map_or(0, |b| b.hd);
    let any_few = few.iter().any(|&u| u > 0);
    let TileScratch { ol, keys: kw, values: vw, pair_scores: sp, .. } = scratch;
    if any_few {
        ol.clear();
        ol.resize(bs.len() * FEW_LANES * hd, 0.0);
    }
    // The lane-major blocks read a tile's keys and values widened to f32, once for all the
    // blocks of one KV head (the same cache slices), through the keys the last of them sees.
    kw.resize(TILE_KEYS * hd, 0.0);
    vw.resize(TILE_KEYS * hd, 0.0);
    let sees = sees(bs);
    let n_keys = bs.iter().map(|b| b.n_keys).max().unwrap_or(0);
    // Two neighbouring lane-major blocks of 24 lanes over the same keys of a tile go through
    // the 512-bit kernels together (`tile_pair`).
    let pairs = WIDE && NV * 8 == PAIR_BLOCK;
    if pairs {
        sp.resize(TILE_KEYS * PAIR_LANES, 0.0);
    }
    let kt = |b: &AttnBlock<'_>, k0: usize| TILE_KEYS.min(b.n_keys.saturating_sub(k0));
    for k0 in (k_begin..n_keys).step_by(TILE_KEYS) {
        let mut widened = None;
        let mut i = 0;
        while i < bs.len() {
            let b = &bs[i];
            if k0 >= b.n_keys {
                i += 1;
                continue;
            }
            if few[i] == 0 && widened != Some(b.source()) {
                // SAFETY: F16C (caller); every block of this source was checked for the keys
                // and values through its `n_keys`, so through `sees[i]`; both buffers hold
                // `TILE_KEYS * hd`.
                unsafe { widen(b, k0, TILE_KEYS.min(sees[i] - k0), kw, vw) };
                widened = Some(b.source());
            }
            let pair = pairs
                && bs.get(i + 1).is_some_and(|n| few[i] == 0 && few[i + 1] == 0 && n.source() == b.source())
                && kt(b, k0) == kt(&bs[i + 1], k0);
            if pair {
                let (head, tail) = bs.split_at_mut(i + 1);
                let (ra, rb) = runs.split_at_mut(i + 1);
                // SAFETY: AVX-512 F (`WIDE`, caller), 24 lanes each (`pairs`); both blocks were
                // checked, see keys through `k0 + kt` and share the tile in `kw` and `vw`; `sp`
                // holds `TILE_KEYS` rows of the pair's lanes.
                unsafe {
                    tile_pair(&mut head[i], &mut tail[0], &mut ra[i], &mut rb[0], k0, kw.as_ptr(), vw.as_ptr(), sp)
                };
                i += 2;
                continue;
            }
            let lanes = (few[i] > 0).then(|| (&mut ol[i * FEW_LANES * hd..(i + 1) * FEW_LANES * hd], few[i]));
            // SAFETY: AVX2 and FMA, and with `WIDE` AVX-512 F (caller); `b` was checked and
            // `k0 < b.n_keys`; a lane-major block's tile is in `kw` and `vw`.
            unsafe { tile::<NV, STEP, WIDE>(&mut bs[i], &mut runs[i], k0, lanes, kw.as_ptr(), vw.as_ptr()) };
            i += 1;
        }
    }
    few_outputs(bs, &few, ol, w);
    for (b, run) in bs.iter_mut().zip(&runs) {
        for v in 0..NV {
            // SAFETY: `m` and `l` hold `w` lanes (checked).
            unsafe {
                _mm256_storeu_ps(b.m.as_mut_ptr().add(8 * v), run.m[v]);
                _mm256_storeu_ps(b.l.as_mut_ptr().add(8 * v), run.l[v]);
            }
        }
    }
}

/// The causal mask on one lane vector's scores of a tile (`kt` rows `w` apart from `s`: lanes
/// at positions `pos` do not see keys after them, which become `-inf`) and the new running max
/// from `m`, not below f32::MIN: a lane before the segment's keys (it sees none of them) gets
/// weights of 0, and its sum stays 0.
///
/// # Safety
/// AVX2; `s` holds `kt` rows `w` apart of 8 lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub(super) unsafe fn masked_max(
    s: *mut f32,
    w: usize,
    kt: usize,
    k0: usize,
    min_pos: usize,
    pos: __m256i,
    m: __m256,
) -> __m256 {
    let mut mt = m;
    for k in 0..kt {
        // SAFETY: row `k < kt` (contract).
        let sp = unsafe { s.add(k * w) };
        // SAFETY: as above.
        let mut x = unsafe { _mm256_loadu_ps(sp) };
        if k0 + k > min_pos {
            // The causal mask: lanes at positions before key `k0 + k` do not see it.
            let hidden = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((k0 + k) as i32), pos));
            x = _mm256_blendv_ps(x, _mm256_set1_ps(f32::NEG_INFINITY), hidden);
            // SAFETY: as above.
            unsafe { _mm256_storeu_ps(sp, x) };
        }
        mt = _mm256_max_ps(mt, x);
    }
    _mm256_max_ps(mt, _mm256_set1_ps(f32::MIN))
}

/// Keys `k0..k0 + kt` of block `b`'s cache widened into `kw` (grouped, `hd` apart: element `d`
/// of key `k` at `(k / 8) * 8 * hd + d * 8 + k % 8`) and their values into `vw` (`hd` apart).
///
/// # Safety
/// F16C; `k0` is a multiple of 8, `kt <= TILE_KEYS`; the cache holds keys `k0..k0 + kt` in
/// whole groups and their values (`check` passed for a block reaching them); `kw` and `vw` hold
/// `TILE_KEYS * hd` values.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn widen(b: &AttnBlock<'_>, k0: usize, kt: usize, kw: &mut [f32], vw: &mut [f32]) {
    let (hd, stride) = (b.hd, b.stride);
    debug_assert!(kw.len() >= TILE_KEYS * hd && vw.len() >= TILE_KEYS * hd && kt <= TILE_KEYS);
    for g in 0..kt.div_ceil(KEY_GROUP) {
        // SAFETY: group `g` of the tile holds `KEY_GROUP * hd` keys elements from its first
        // (contract), and `kw` room for them at `g * KEY_GROUP * hd`.
        unsafe {
            let src = b.keys.as_ptr().add(key_index(k0 + g * KEY_GROUP, 0, stride));
            f16s_to_f32(src, KEY_GROUP * hd, kw.as_mut_ptr().add(g * KEY_GROUP * hd));
        }
    }
    for k in 0..kt {
        // SAFETY: value row `k0 + k` has `hd` values from the head's first (contract).
        unsafe { f16s_to_f32(b.values.as_ptr().add((k0 + k) * stride), hd, vw.as_mut_ptr().add(k * hd)) };
    }
}

/// Keys `k0..` (one tile, or to `b.n_keys`) into block `b`'s softmax `run` and outputs: a
/// few-lane block (`lanes`) straight from the cache, a lane-major one from the tile widened
/// into `kw` and `vw` (see [`widen`]).
///
/// # Safety
/// AVX2 and FMA, and with `WIDE` AVX-512 F; `b.check(NV * 8)` passed; `k0 < b.n_keys`; unless
/// `lanes` is given, `kw` and `vw` hold the tile as [`widen`] leaves it.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile<const NV: usize, const STEP: usize, const WIDE: bool>(
    b: &mut AttnBlock<'_>,
    run: &mut Run<NV>,
    k0: usize,
    lanes: Option<(&mut [f32], usize)>,
    kw: *const f32,
    vw: *const f32,
) {
    let w = NV * 8;
    let hd = b.hd;
    let (qt, s, ot) = (b.qt.as_ptr(), b.s.as_mut_ptr(), b.ot.as_mut_ptr());
    let pos = lane_pos::<NV>(b);
    let kt = TILE_KEYS.min(b.n_keys - k0);
    // SAFETY (the pointer arithmetic below): keys and values `k0..k0 + kt` are below
    // `n_keys`, whose rows are in `keys` and `values` (checked); `s` holds `TILE_KEYS >= kt`
    // rows and `qt`, `ot` hold `hd` rows, of `w` lanes each (checked).
    // `k0` is a multiple of `TILE_KEYS`, so the tile starts a group of keys.
    if let Some((ol, used)) = lanes {
        // A few lanes straight from the cache (kern_avx2_attn_few.rs).
        let (mut ms, mut ls) = ([0f32; 8], [1f32; 8]);
        // SAFETY: both arrays hold eight f32s; our contract, and `ol` holds `FEW_LANES >= used`
        // rows of `hd`.
        unsafe {
            _mm256_storeu_ps(ms.as_mut_ptr(), run.m[0]);
            _mm256_storeu_ps(ls.as_mut_ptr(), run.l[0]);
            tile_few(b, k0, used, &mut ms, &mut ls, ol, WIDE);
            (run.m[0], run.l[0]) = (_mm256_loadu_ps(ms.as_ptr()), _mm256_loadu_ps(ls.as_ptr()));
        }
        return;
    }
    // The widened tile: keys and values `hd` apart.
    let (kp, vp, stride) = (kw, vw, hd);
    let wide = WIDE && NV >= 2;
    let mut k = 0;
    while wide && k + WIDE_STEP <= kt {
        // SAFETY: AVX-512 F (`WIDE`, caller); keys `k..k + WIDE_STEP` of the tile; see above.
        unsafe { super::kern_avx512_attn_f32::scores::<NV, WIDE_STEP>(qt, kp, k, stride, hd, s) };
        k += WIDE_STEP;
    }
    while k + STEP <= kt {
        // SAFETY: keys `k..k + step` of the tile; see above.
        unsafe { scores::<NV, STEP>(qt, kp, k, stride, hd, s) };
        k += STEP;
    }
    while k < kt {
        // SAFETY: key `k` of the tile; see above.
        unsafe { scores::<NV, 1>(qt, kp, k, stride, hd, s) };
        k += 1;
    }
    // SAFETY: rows `0..kt` of `s`; see above.
    let alpha = unsafe { softmax(s, kt, k0, b.min_pos, &pos, run) };
    let mut c = 0;
    while wide && c + WIDE_STEP <= hd {
        // SAFETY: AVX-512 F (`WIDE`, caller); columns `c..c + WIDE_STEP`; see above.
        unsafe {
            super::kern_avx512_attn_f32::weighted::<NV, WIDE_STEP>(s, kt, vp.add(c), stride, &alpha, ot.add(c * w))
        };
        c += WIDE_STEP;
    }
    while c + STEP <= hd {
        // SAFETY: columns `c..c + step` of the tile's values; see above.
        unsafe { weighted::<NV, STEP>(s, kt, vp.add(c), stride, &alpha, ot.add(c * w)) };
        c += STEP;
    }
    while c < hd {
        // SAFETY: column `c`; see above.
        unsafe { weighted::<NV, 1>(s, kt, vp.add(c), stride, &alpha, ot.add(c * w)) };
        c += 1;
    }
}

/// Block `b`'s lane positions, `NV` vectors of them.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn lane_pos<const NV: usize>(b: &AttnBlock<'_>) -> [__m256i; NV] {
    assert!(b.lane_pos.len() >= NV * 8, "attention: {} lane positions", b.lane_pos.len());
    std::array::from_fn(|v| {
        // SAFETY: `lane_pos` holds `NV * 8` entries (asserted).
        unsafe { _mm256_loadu_si256(b.lane_pos.as_ptr().add(8 * v) as *const __m256i) }
    })
}

/// One block's online softmax over a tile's `kt` scores (lane-minor rows of `NV * 8` in `s`):
/// the causal mask, the running max and sum in `run`, the scores turned into weights; returns
/// each lane's factor for the outputs so far.
///
/// # Safety
/// AVX2 and FMA; `s` holds `kt` rows of `NV * 8` lanes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn softmax<const NV: usize>(
    s: *mut f32,
    kt: usize,
    k0: usize,
    min_pos: usize,
    pos: &[__m256i; NV],
    run: &mut Run<NV>,
) -> [__m256; NV] {
    let mut alpha = [_mm256_setzero_ps(); NV];
    for v in 0..NV {
        let m = run.m[v];
        // SAFETY: rows `0..kt` of lane vector `v` (contract).
        let mt = unsafe { masked_max(s.add(8 * v), NV * 8, kt, k0, min_pos, pos[v], m) };
        alpha[v] = exp_ps(_mm256_sub_ps(m, mt));
        let mut sum = _mm256_setzero_ps();
        for k in 0..kt {
            // SAFETY: row `k < kt` of lane vector `v` (contract).
            unsafe {
                let sp = s.add(k * NV * 8 + 8 * v);
                let e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(sp), mt));
                _mm256_storeu_ps(sp, e);
                sum = _mm256_add_ps(sum, e);
            }
        }
        run.l[v] = _mm256_fmadd_ps(run.l[v], alpha[v], sum);
        run.m[v] = mt;
    }
    alpha
}

/// Keys `k0..` (one tile) into two lane-major blocks of 24 lanes that see as many of them, their
/// products in the 512-bit pair kernels (`kern_avx512_attn_f32.rs`): each lane gets what
/// [`tile`] gives it, bit for bit.
///
/// # Safety
/// AVX-512 F, AVX2 and FMA; `NV * 8 == PAIR_BLOCK`; both blocks passed `check(PAIR_BLOCK)`, have
/// `k0 < n_keys` and as many keys in this tile, and share the tile widened into `kw` and `vw`;
/// `sp` holds `TILE_KEYS * PAIR_LANES` values.
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_pair<const NV: usize>(
    a: &mut AttnBlock<'_>,
    b: &mut AttnBlock<'_>,
    ra: &mut Run<NV>,
    rb: &mut Run<NV>,
    k0: usize,
    kw: *const f32,
    vw: *const f32,
    sp: &mut [f32],
) {
    assert!(NV * 8 == PAIR_BLOCK && sp.len() >= TILE_KEYS * PAIR_LANES, "attention: a pair of {NV} lane vectors");
    let hd = a.hd;
    let kt = TILE_KEYS.min(a.n_keys - k0);
    let (qa, qb, s) = (a.qt.as_ptr(), b.qt.as_ptr(), sp.as_mut_ptr());
    // The calls below read keys and values `0..kt` of the widened tile, `hd` apart, both
    // blocks' queries and outputs (`hd` rows of 24 lanes, checked) and `kt` rows of 48 of `s`.
    let mut k = 0;
    while k + WIDE_STEP <= kt {
        // SAFETY: AVX-512 F (caller); keys `k..k + WIDE_STEP` of the tile; see above.
        unsafe { scores_pair::<WIDE_STEP>(qa, qb, kw, k, hd, hd, s) };
        k += WIDE_STEP;
    }
    while k < kt {
        // SAFETY: key `k` of the tile; see above.
        unsafe { scores_pair::<1>(qa, qb, kw, k, hd, hd, s) };
        k += 1;
    }
    // SAFETY: AVX-512 F (caller); both blocks' positions hold 24 lanes (checked); loaded as
    // f32 bits.
    let pos = unsafe { load_pair(a.lane_pos.as_ptr().cast(), b.lane_pos.as_ptr().cast()) };
    let pos = pos.map(|x| _mm512_castps_si512(x));
    let (mut m, mut l) = (join_pair(&ra.m, &rb.m), join_pair(&ra.l, &rb.l));
    // Below both blocks' first positions no lane needs the mask (a call's blocks are not always
    // in position order: a KV head split into units puts a unit's last rows before the next
    // unit's first).
    let min_pos = a.min_pos.min(b.min_pos);
    // SAFETY: AVX-512 F (caller); `kt` rows of 48 of `s`; see above.
    let alpha = unsafe { softmax_pair(s, kt, k0, min_pos, &pos, &mut m, &mut l) };
    split_pair(&m, &mut ra.m, &mut rb.m);
    split_pair(&l, &mut ra.l, &mut rb.l);
    let (oa, ob) = (a.ot.as_mut_ptr(), b.ot.as_mut_ptr());
    let mut c = 0;
    while c + WIDE_STEP <= hd {
        // SAFETY: columns `c..c + WIDE_STEP`; see above.
        unsafe {
            weighted_pair::<WIDE_STEP>(s, kt, vw.add(c), hd, &alpha, oa.add(c * PAIR_BLOCK), ob.add(c * PAIR_BLOCK))
        };
        c += WIDE_STEP;
    }
    while c < hd {
        // SAFETY: column `c`; see above.
        unsafe { weighted_pair::<1>(s, kt, vw.add(c), hd, &alpha, oa.add(c * PAIR_BLOCK), ob.add(c * PAIR_BLOCK)) };
        c += 1;
    }
}
