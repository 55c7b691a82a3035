//! Causal GQA attention over a key/value cache (keys grouped by 8 positions, values
//! position-major; `backend::key_index`): the block of query lanes the kernels take, the
//! portable kernel and the dispatch to the SIMD one. `attention_tasks.rs` splits a call into
//! blocks and pool tasks.
//!
//! Scores, softmax and weighted sum per query row and head would read every key and value once
//! per row and head, so prefill throughput would fall with the prompt's length. Instead (flash
//! attention's scheme) a block of query lanes (rows times the heads sharing one KV head) walks
//! the keys a tile at a time, so that each key and value is read once per block, and keeps a
//! running max and sum per lane (an online softmax), so that nothing grows with the context
//! but the cache.
//!
//! A block runs over one segment of the keys (`SEGMENT_KEYS` in `attention_tasks.rs`) and
//! leaves its outputs unnormalised, with each lane's max and sum: the driver merges segments in
//! order. Decode rows take the same path: a lane's result depends only on its query and the
//! keys it sees, never on the block or task around it, so a token's logits are the same
//! whether it is prefilled with others, alone, or after a reused prefix (greedy outputs must
//! not change with the prefix cache).

use super::float16::f16_to_f32;
use super::isa::Isa;
use crate::backend::{key_index, KvBuf, KvFormat, KEY_GROUP, TILE_KEY_GROUP};

/// Keys per tile: a tile's scores (`TILE_KEYS x BLOCK_LANES`, 6 KB) stay in L1 beside the
/// block's queries and outputs (`head_dim x BLOCK_LANES` each), and tiles are long enough to
/// pay for reloading the output accumulators once per tile.
pub(super) const TILE_KEYS: usize = 64;
/// Query lanes per block: three AVX2 vectors, the most whose accumulators fit the 16 registers
/// beside their operands. The demo model's group of 3 heads makes it 8 rows of 3 heads.
pub(super) const BLOCK_LANES: usize = 24;
/// Query lanes per block over a cache in bf16 tiles: the 16 columns of one tile (a block of 24
/// takes two, the second half empty). The demo model's group of 3 heads makes it 5 rows.
pub(super) const TILE_BLOCK_LANES: usize = 16;
/// Blocks one kernel call takes at most: they take each tile of keys and values in turn while
/// it is in the core's cache, so that it is read from the shared cache once per call rather
/// than once per block.
pub(super) const MAX_GROUP: usize = 8;
/// Used lanes at most of a block that the SIMD kernel runs lane by lane (a decode row's heads
/// of one KV head): one FMA per key and 8 value columns instead of one per key and column.
pub(super) const FEW_LANES: usize = 4;

/// One block of query lanes for a tiled-attention kernel, over keys `k_begin..n_keys`;
/// lane-minor buffers of `w` lanes (the lanes rounded up to whole vectors of 8).
pub(super) struct AttnBlock<'a> {
    /// `hd` rows of `w`: the block's queries times the score scale, zero in padding lanes.
    pub qt: &'a [f32],
    /// `w` lane positions; padding lanes have `i32::MAX` (they see every key).
    pub lane_pos: &'a [i32],
    /// The grouped keys from the KV head's first column on: element `d` of key `p` at
    /// `keys[format.key_at(p, d, stride)]`.
    pub keys: &'a [u16],
    /// The values from the KV head's first column on: column `c` of value `p` at
    /// `values[format.value_at(p, c, stride)]`.
    pub values: &'a [u16],
    /// The cache's format: f16 for the f32 kernels, bf16 pairs for the bf16 ones, bf16 tiles
    /// for the AMX one.
    pub format: KvFormat,
    pub stride: usize,
    pub hd: usize,
    /// The first key read: a multiple of `TILE_KEYS`.
    pub k_begin: usize,
    /// Keys `k_begin..n_keys` are read: at most the block's last position plus one.
    pub n_keys: usize,
    /// The block's first position: keys up to it are visible to every lane (no mask).
    pub min_pos: usize,
    /// Scratch: the tile's scores, `TILE_KEYS` rows of `w`.
    pub s: &'a mut [f32],
    /// Out: `hd` rows of `w`, each lane's weighted sum of values, not yet divided by its sum.
    pub ot: &'a mut [f32],
    /// Out: `w` lanes' reference for their weights: the largest score (the AMX kernel's may
    /// stay up to its `LAZY_MAX` below it), `f32::MIN` for a lane that sees none of the keys.
    pub m: &'a mut [f32],
    /// Out: `w` lanes' sum of `e^(score - m)` (0 for a lane that sees none of the keys).
    pub l: &'a mut [f32],
}

impl AttnBlock<'_> {
    /// The cache slices the block reads: blocks of one KV head share them, and a kernel converts
    /// a tile of them once for all those blocks.
    pub fn source(&self) -> (*const u16, *const u16) {
        (self.keys.as_ptr(), self.values.as_ptr())
    }

    /// What the kernels rely on for `w` lanes.
    pub fn check(&self, w: usize) {
        assert!(
            self.qt.len() >= self.hd * w
                && self.ot.len() >= self.hd * w
                && self.s.len() >= TILE_KEYS * w
                && self.lane_pos.len() >= w
                && self.m.len() >= w
                && self.l.len() >= w,
            "attention: block buffers too short for {w} lanes"
        );
        assert!(
            self.k_begin.is_multiple_of(TILE_KEYS) && self.k_begin < self.n_keys && self.n_keys <= i32::MAX as usize,
            "attention: block of keys {}..{}",
            self.k_begin,
            self.n_keys
        );
        let (f, last) = (self.format, self.n_keys - 1);
        let (need_keys, need) = if f == KvFormat::Bf16Tiles {
            // Tiles read whole groups: through the last group's last position.
            let end = (last / TILE_KEY_GROUP + 1) * TILE_KEY_GROUP - 1;
            (f.key_at(end, self.hd, self.stride), f.value_at(end, self.hd - 1, self.stride) + 1)
        } else {
            // The keys' last group, from its first position, through the head's `hd` elements;
            // the last value through the head's columns (in bf16, the whole last pair).
            let need = f.value_at(last | usize::from(f == KvFormat::Bf16Pairs), self.hd - 1, self.stride) + 1;
            (f.key_at(last / KEY_GROUP * KEY_GROUP, self.hd, self.stride), need)
        };
        assert!(
            self.keys.len() >= need_keys && self.values.len() >= need,
            "attention: the cache holds fewer than {} positions",
            self.n_keys
        );
    }
}

/// For each block of a kernel call, the keys the blocks of its source see at most (`n_keys`), so
/// that a tile converted once serves every block of that source.
pub(super) fn sees(bs: &[AttnBlock<'_>]) -> [usize; MAX_GROUP] {
    std::array::from_fn(|i| {
        bs.get(i).map_or(0, |b| bs.iter().filter(|o| o.source() == b.source()).map(|o| o.n_keys).max().unwrap_or(0))
    })
}

/// The few-lane blocks' outputs (`few[i]` lanes of block `i`, kept lane by lane in `ol`,
/// `FEW_LANES * hd` per block) into their lane-major `ot` of `w` lanes.
pub(super) fn few_outputs(bs: &mut [AttnBlock<'_>], few: &[usize; MAX_GROUP], ol: &[f32], w: usize) {
    for (i, b) in bs.iter_mut().enumerate() {
        let hd = b.hd;
        for lane in 0..few[i] {
            for c in 0..hd {
                b.ot[c * w + lane] = ol[(i * FEW_LANES + lane) * hd + c];
            }
        }
    }
}

/// The portable tiled kernel: what `kern_avx2_attn::attend_blocks` computes, in the same order
/// (keys and values widened to f32 exactly, f32 throughout; `f32::exp` instead of its
/// polynomial).
fn attend_block_scalar(b: &mut AttnBlock<'_>, w: usize) {
    b.check(w);
    let (hd, stride) = (b.hd, b.stride);
    let (m, l) = (&mut b.m[..w], &mut b.l[..w]);
    m.fill(f32::NEG_INFINITY);
    l.fill(0.0);
    let mut alpha = [0f32; BLOCK_LANES];
    let ot = &mut b.ot[..hd * w];
    ot.fill(0.0);
    for k0 in (b.k_begin..b.n_keys).step_by(TILE_KEYS) {
        let kt = TILE_KEYS.min(b.n_keys - k0);
        for k in 0..kt {
            let key = &b.keys[key_index(k0 + k, 0, stride)..];
            let row = &mut b.s[k * w..(k + 1) * w];
            row.fill(0.0);
            for (d, &kd) in key.iter().step_by(KEY_GROUP).take(hd).enumerate() {
                let kd = f16_to_f32(kd);
                for (x, &q) in row.iter_mut().zip(&b.qt[d * w..(d + 1) * w]) {
                    *x += q * kd;
                }
            }
            if k0 + k > b.min_pos {
                for (x, &p) in row.iter_mut().zip(b.lane_pos) {
                    if (k0 + k) as i32 > p {
                        *x = f32::NEG_INFINITY;
                    }
                }
            }
        }
        for i in 0..w {
            // Not below f32::MIN: a lane that sees none of the tile's keys gets weights of 0.
            let mt = (0..kt).fold(m[i], |a, k| a.max(b.s[k * w + i])).max(f32::MIN);
            alpha[i] = (m[i] - mt).exp();
            let mut sum = 0.0;
            for k in 0..kt {
                let e = (b.s[k * w + i] - mt).exp();
                b.s[k * w + i] = e;
                sum += e;
            }
            l[i] = l[i] * alpha[i] + sum;
            m[i] = mt;
        }
        for c in 0..hd {
            let o = &mut ot[c * w..(c + 1) * w];
            o.iter_mut().zip(&alpha).for_each(|(x, a)| *x *= a);
            for k in 0..kt {
                let v = f16_to_f32(b.values[(k0 + k) * stride + c]);
                o.iter_mut().zip(&b.s[k * w..(k + 1) * w]).for_each(|(x, p)| *x += p * v);
            }
        }
    }
}

/// Blocks of `w` lanes (8, 16 or 24), all over the same keys from `k_begin`, through the kernel
/// of `isa`.
pub(super) fn attend_blocks(isa: Isa, bs: &mut [AttnBlock<'_>], w: usize, scratch: &mut TileScratch) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a cache in bf16 tiles reaches attention only where `reads` allows it (checked by
        // the driver): `tile_kernels` detected AMX-BF16 with the OS's permission and AVX-512
        // BF16 (F, VL, BW: the level); bounds are checked inside.
        Isa::Avx512 if bs.first().is_some_and(|b| b.format == KvFormat::Bf16Tiles) => unsafe {
            super::kern_amx_attn::attend_blocks(bs, w, scratch)
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a cache in bf16 pairs reaches attention only where `reads` allows it
        // (checked by the driver): `bf16_kernels` detected AVX-512 BF16 (F, VL, BW: the level);
        // bounds are checked inside.
        Isa::Avx512 if bs.first().is_some_and(|b| b.format == KvFormat::Bf16Pairs) => unsafe {
            use super::kern_avx512_attn::attend_blocks;
            match w {
                8 => attend_blocks::<1, 16>(bs, scratch),
                16 => attend_blocks::<2, 8>(bs, scratch),
                _ => attend_blocks::<3, 8>(bs, scratch),
            }
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: both x86 SIMD levels imply AVX2 and FMA (detected); bounds are checked inside.
        Isa::Avx2 => unsafe {
            use super::kern_avx2_attn::attend_blocks;
            match w {
                8 => attend_blocks::<1, 8, false>(bs, scratch),
                16 => attend_blocks::<2, 4, false>(bs, scratch),
                _ => attend_blocks::<3, 3, false>(bs, scratch),
            }
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx512` detected AVX-512 F on top of AVX2 and FMA; bounds are checked
        // inside.
        Isa::Avx512 => unsafe {
            use super::kern_avx2_attn::attend_blocks;
            match w {
                8 => attend_blocks::<1, 8, true>(bs, scratch),
                16 => attend_blocks::<2, 4, true>(bs, scratch),
                _ => attend_blocks::<3, 3, true>(bs, scratch),
            }
        },
        _ => {
            let _ = scratch;
            bs.iter_mut().for_each(|b| attend_block_scalar(b, w));
        }
    }
}

/// The cache format the kernel of `isa` reads for heads of `hd`: bf16 tiles where attention
/// multiplies them (`Isa::tile_attention`) and can ([`reads`]), else bf16 pairs where it
/// multiplies those (`Isa::bf16_attention`) and can, else f16. Decided per head size, never per
/// block, so that a row's bits do not depend on the rows around it.
pub fn kv_format(isa: Isa, hd: usize) -> KvFormat {
    if isa.tile_attention() && reads(isa, KvFormat::Bf16Tiles, hd) {
        KvFormat::Bf16Tiles
    } else if isa.bf16_attention() && reads(isa, KvFormat::Bf16Pairs, hd) {
        KvFormat::Bf16Pairs
    } else {
        KvFormat::F16
    }
}

/// Heads of at most this many dimensions go through tiles (their queries and outputs stay in a
/// worker's scratch: 16 lanes of `hd` f32s each).
pub(super) const MAX_TILE_HD: usize = 256;

/// Whether the kernels of `isa` can read a cache in `format` for heads of `hd`: f16 at every
/// level; bf16 pairs with `Isa::bf16_kernels` (their pairs and vectors want whole groups of 8 of
/// the head's dimensions); bf16 tiles with `Isa::tile_kernels` (a tile row takes 32 of them).
pub fn reads(isa: Isa, format: KvFormat, hd: usize) -> bool {
    match format {
        KvFormat::F16 => true,
        KvFormat::Bf16Pairs => isa.bf16_kernels() && hd.is_multiple_of(8),
        KvFormat::Bf16Tiles => isa.tile_kernels() && hd.is_multiple_of(32) && hd <= MAX_TILE_HD,
    }
}

/// A worker's buffers for the SIMD kernel, kept between calls: every decode step runs a few
/// tasks per sequence and layer.
#[derive(Default)]
pub(super) struct TileScratch {
    /// The few-lane blocks' outputs, `FEW_LANES * hd` per block.
    pub ol: Vec<f32>,
    /// A tile's keys widened to f32 for the lane-major blocks, grouped with a stride of `hd`
    /// (each key element feeds an FMA per lane vector, so it is converted once per tile, not
    /// once per use).
    pub keys: Vec<f32>,
    /// A tile's values widened to f32, `hd` apart.
    pub values: Vec<f32>,
    /// A tile's scores of two blocks that the 512-bit f32 kernels take together, rows of both
    /// blocks' lanes.
    pub pair_scores: Vec<f32>,
    /// The bf16 kernel's buffers (`kern_avx512_attn.rs`): the blocks' query pairs, the tile's
    /// key pairs in the order the scores take them, a tile's weight pairs.
    pub qb: Vec<u32>,
    pub kb: Vec<u32>,
    pub pb: Vec<u32>,
    /// The AMX kernel's buffers (`kern_amx_attn.rs`), aligned as the cache is: tile rows are 64
    /// bytes, and a row that straddles two cache lines loads far slower.
    pub amx: KvBuf,
}
