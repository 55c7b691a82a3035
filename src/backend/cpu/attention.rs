//! Causal GQA attention over a key/value cache (keys grouped by 8 positions, values
//! position-major; `backend::key_index`): the pool driver and the tiled attention's portable
//! kernel.
//!
//! Scores, softmax and weighted sum per query row and head would read every key and value once
//! per row and head, so prefill throughput would fall with the prompt's length. Instead (flash
//! attention's scheme) a block of query lanes (rows times the heads sharing one KV head) walks
//! the keys a tile at a time, so that each key and value is read once per block, and keeps a
//! running max and sum per lane (an online softmax), so that nothing grows with the context
//! but the cache.
//!
//! Decode rows (one per sequence) take the same path: a lane's result depends only on its query
//! and the keys it sees, never on the block around it, so a token's logits are the same
//! whether it is prefilled with others, alone, or after a reused prefix (greedy outputs must
//! not change with the prefix cache).

use super::isa::Isa;
use super::pool::Pool;
use crate::backend::{grouped_keys_len, key_index, AttnSeq, Heads, KEY_GROUP};
use std::cell::RefCell;

/// Below this many multiply-adds attention runs on the calling thread alone.
const ATTN_PARALLEL_MIN_MACS: usize = 64 * 1024;
/// Chunks of tasks per thread (tasks are ordered costliest first, and claiming balances them).
const ATTN_CHUNKS_PER_THREAD: usize = 16;
/// Groups of row blocks get smaller only while they would make fewer tasks than this per
/// thread: enough for costliest-first claiming to even out a causal triangle.
const MIN_GROUP_TASKS_PER_THREAD: usize = 4;
/// Keys per tile: a tile's scores (`TILE_KEYS x BLOCK_LANES`, 6 KB) stay in L1 beside the
/// block's queries and outputs (`head_dim x BLOCK_LANES` each), and tiles are long enough to
/// pay for reloading the output accumulators once per tile.
pub(super) const TILE_KEYS: usize = 64;
/// Query lanes per block: three AVX2 vectors, the most whose accumulators fit the 16 registers
/// beside their operands. The demo model's group of 3 heads makes it 8 rows of 3 heads.
const BLOCK_LANES: usize = 24;
/// A sequence's blocks get fewer rows when they would number fewer than this per thread (a
/// few-row verify would otherwise leave threads idle).
const MIN_BLOCKS_PER_THREAD: usize = 2;
/// Blocks per task at most: a task's blocks take each tile of keys and values in turn while it
/// is in the core's cache, so that a long context is streamed from the shared cache once per
/// group of blocks rather than once per block of 8 rows. Fewer when the tasks would number
/// fewer than `MIN_GROUP_TASKS_PER_THREAD` per thread (for balance).
pub(super) const MAX_GROUP: usize = 8;

/// One block of query lanes for a tiled-attention kernel; lane-minor buffers of `w` lanes (the
/// lanes rounded up to whole vectors of 8).
pub(super) struct AttnBlock<'a> {
    /// `hd` rows of `w`: the block's queries times the score scale, zero in padding lanes.
    pub qt: &'a [f32],
    /// `w` lane positions; padding lanes have `i32::MAX` (they see every key).
    pub lane_pos: &'a [i32],
    /// The grouped keys from the KV head's first column on: element `d` of key `p` at
    /// `keys[(p / 8) * 8 * stride + d * 8 + p % 8]` (`backend::key_index`).
    pub keys: &'a [f32],
    /// The values from the KV head's first on: value `p` at `values[p * stride..][..hd]`.
    pub values: &'a [f32],
    pub stride: usize,
    pub hd: usize,
    /// Keys `0..n_keys` are read: the block's last position plus one.
    pub n_keys: usize,
    /// The block's first position: keys up to it are visible to every lane (no mask).
    pub min_pos: usize,
    /// Scratch: the tile's scores, `TILE_KEYS` rows of `w`.
    pub s: &'a mut [f32],
    /// Out: `hd` rows of `w`, each lane's attention output.
    pub ot: &'a mut [f32],
}

impl AttnBlock<'_> {
    /// What the kernels rely on for `w` lanes.
    pub fn check(&self, w: usize) {
        assert!(
            self.qt.len() >= self.hd * w
                && self.ot.len() >= self.hd * w
                && self.s.len() >= TILE_KEYS * w
                && self.lane_pos.len() >= w,
            "attention: block buffers too short for {w} lanes"
        );
        assert!(
            self.min_pos < self.n_keys && self.n_keys <= i32::MAX as usize,
            "attention: block of {} keys",
            self.n_keys
        );
        let need = (self.n_keys - 1) * self.stride + self.hd;
        // The keys' last group, from its first position, through the head's `hd` elements.
        let last_group = (self.n_keys - 1) / KEY_GROUP * KEY_GROUP;
        let need_keys = key_index(last_group, self.hd, self.stride);
        assert!(
            self.keys.len() >= need_keys && self.values.len() >= need,
            "attention: the cache holds fewer than {} positions",
            self.n_keys
        );
    }
}

/// The portable tiled kernel: what `kern_avx2_attn::attend_blocks` computes, in the same order
/// (f32 throughout; `f32::exp` instead of its polynomial).
fn attend_block_scalar(b: &mut AttnBlock<'_>, w: usize) {
    b.check(w);
    let (hd, stride) = (b.hd, b.stride);
    let (mut m, mut l, mut alpha) = ([f32::NEG_INFINITY; BLOCK_LANES], [0f32; BLOCK_LANES], [0f32; BLOCK_LANES]);
    let ot = &mut b.ot[..hd * w];
    ot.fill(0.0);
    for k0 in (0..b.n_keys).step_by(TILE_KEYS) {
        let kt = TILE_KEYS.min(b.n_keys - k0);
        for k in 0..kt {
            let key = &b.keys[key_index(k0 + k, 0, stride)..];
            let row = &mut b.s[k * w..(k + 1) * w];
            row.fill(0.0);
            for (d, &kd) in key.iter().step_by(KEY_GROUP).take(hd).enumerate() {
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
            let mt = (0..kt).fold(m[i], |a, k| a.max(b.s[k * w + i]));
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
                let v = b.values[(k0 + k) * stride + c];
                o.iter_mut().zip(&b.s[k * w..(k + 1) * w]).for_each(|(x, p)| *x += p * v);
            }
        }
    }
    for o in ot.chunks_exact_mut(w) {
        o.iter_mut().zip(&l).for_each(|(x, l)| *x /= l);
    }
}

/// Blocks of `w` lanes (8, 16 or 24) through the kernel of `isa`.
fn attend_blocks(isa: Isa, bs: &mut [AttnBlock<'_>], w: usize, few: &mut FewScratch) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: both x86 SIMD levels imply AVX2 and FMA (detected); bounds are checked inside.
        Isa::Avx2 | Isa::Avx512 => unsafe {
            use super::kern_avx2_attn::attend_blocks;
            match w {
                8 => attend_blocks::<1, 8>(bs, few),
                16 => attend_blocks::<2, 4>(bs, few),
                _ => attend_blocks::<3, 3>(bs, few),
            }
        },
        _ => {
            let _ = few;
            bs.iter_mut().for_each(|b| attend_block_scalar(b, w));
        }
    }
}

/// A worker's buffers for the SIMD kernel's few-lane blocks, kept between calls: every decode
/// step runs a few such tasks per sequence and layer.
#[derive(Default)]
pub(super) struct FewScratch {
    /// The few-lane blocks' outputs, `FEW_LANES * hd` per block.
    pub ol: Vec<f32>,
}

/// A worker's buffers for the block it runs (a few KB, reused).
#[derive(Default)]
struct Scratch {
    qt: Vec<f32>,
    pos: Vec<i32>,
    s: Vec<f32>,
    ot: Vec<f32>,
    few: FewScratch,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Where attention workers write: each (query row, head) slice by exactly one worker.
struct OutPtr(*mut f32);
// SAFETY: workers write disjoint `head_dim` slices of a buffer that outlives the pool job.
unsafe impl Sync for OutPtr {}

/// Causal GQA attention of one sequence; see [`crate::backend::Backend::attention`] for the
/// contract.
pub(crate) fn attention(pool: &Pool, isa: Isa, seq: AttnSeq<'_>, heads: Heads, scale: f32) {
    attention_batch(pool, isa, &mut [seq], heads, scale);
}

/// One sequence of a batched attention call, checked, with its output as a raw pointer.
struct Part<'a> {
    q: &'a [f32],
    keys: &'a [f32],
    values: &'a [f32],
    start_pos: usize,
    n_q: usize,
    out: OutPtr,
    /// Tasks of the sequences before this one.
    first_task: usize,
    /// Query rows per block.
    rows: usize,
    /// Blocks per task.
    group: usize,
}

/// How a tiled sequence's heads split: `(heads per block, head chunks per KV head)`.
fn head_chunks(heads: Heads) -> (usize, usize) {
    let group = heads.n_heads / heads.n_kv_heads;
    let per = group.min(BLOCK_LANES);
    (per, group.div_ceil(per))
}

/// [`attention`] for several sequences in one pool dispatch (a batched decode step would
/// otherwise pay a dispatch, and an uneven split of a few heads, per sequence and layer).
pub(crate) fn attention_batch(pool: &Pool, isa: Isa, seqs: &mut [AttnSeq<'_>], heads: Heads, scale: f32) {
    let (qd, kvd, hd) = (heads.q_dim(), heads.kv_dim(), heads.head_dim);
    assert!(heads.n_kv_heads > 0 && heads.n_heads.is_multiple_of(heads.n_kv_heads), "attention: {heads:?}");
    let (hpb, chunks_per_kv) = head_chunks(heads);
    let (mut tasks, mut macs) = (0, 0);
    let mut parts = Vec::with_capacity(seqs.len());
    for s in seqs.iter_mut() {
        let (n_q, ctx) = (s.n_q, s.start_pos + s.n_q);
        assert_eq!(s.q.len(), n_q * qd, "attention: q has {} values, want {n_q} x {qd}", s.q.len());
        assert_eq!(s.out.len(), n_q * qd, "attention: out has {} values, want {n_q} x {qd}", s.out.len());
        assert!(
            s.keys.len() >= grouped_keys_len(ctx, kvd) && s.values.len() >= ctx * kvd,
            "attention: the cache holds fewer than {ctx} positions"
        );
        let per_block = heads.n_kv_heads * chunks_per_kv;
        let mut rows = (BLOCK_LANES / hpb).min(n_q.max(1));
        while rows > 1 && per_block * n_q.div_ceil(rows) < MIN_BLOCKS_PER_THREAD * pool.threads() {
            rows = rows.div_ceil(2);
        }
        let blocks = n_q.div_ceil(rows);
        let mut group = MAX_GROUP;
        while group > 1 && per_block * blocks.div_ceil(group) < MIN_GROUP_TASKS_PER_THREAD * pool.threads() {
            group /= 2;
        }
        parts.push(Part {
            q: s.q,
            keys: s.keys,
            values: s.values,
            start_pos: s.start_pos,
            n_q,
            out: OutPtr(s.out.as_mut_ptr()),
            first_task: tasks,
            rows,
            group,
        });
        tasks += blocks.div_ceil(group) * per_block;
        // Keys seen by all rows: n_q * start_pos + n_q * (n_q + 1) / 2.
        macs += (n_q * s.start_pos + n_q * (n_q + 1) / 2) * heads.n_heads * hd * 2;
    }
    let parts = &parts;
    let task = move |t: usize| {
        let part = &parts[parts.partition_point(|p| p.first_task <= t) - 1];
        tiled(isa, part, heads, scale, t - part.first_task);
    };
    if macs < ATTN_PARALLEL_MIN_MACS || pool.threads() == 1 {
        (0..tasks).for_each(task);
    } else {
        let chunks = tasks.min(ATTN_CHUNKS_PER_THREAD * pool.threads());
        pool.run(chunks, &|c| super::pool::chunk(tasks, c, chunks).for_each(task));
    }
}

/// Task `t` of a tiled sequence: one (group of row blocks, KV head, head chunk), the last
/// rows' groups (which see the most keys) first, so that the cheap ones fill in at the end.
fn tiled(isa: Isa, part: &Part<'_>, heads: Heads, scale: f32, t: usize) {
    let (qd, kvd, hd) = (heads.q_dim(), heads.kv_dim(), heads.head_dim);
    let gqa = heads.n_heads / heads.n_kv_heads;
    let (hpb, chunks_per_kv) = head_chunks(heads);
    let per_block = heads.n_kv_heads * chunks_per_kv;
    let blocks = part.n_q.div_ceil(part.rows);
    let first = (blocks.div_ceil(part.group) - 1 - t / per_block) * part.group;
    let nb = part.group.min(blocks - first);
    let (kvh, hc) = (t % per_block / chunks_per_kv, t % per_block % chunks_per_kv);
    let h0 = kvh * gqa + hc * hpb;
    let nh = hpb.min(gqa - hc * hpb);
    // Only the sequence's last block has fewer rows, and it is first in its group when alone.
    let w = (part.rows.min(part.n_q - first * part.rows) * nh).div_ceil(8) * 8;
    SCRATCH.with_borrow_mut(|sc| {
        sc.qt.clear();
        sc.qt.resize(nb * hd * w, 0.0);
        sc.pos.clear();
        sc.pos.resize(nb * w, i32::MAX);
        sc.s.resize(nb * TILE_KEYS * w, 0.0);
        sc.ot.resize(nb * hd * w, 0.0);
        let mut bs = Vec::with_capacity(nb);
        let bufs = sc.qt.chunks_exact_mut(hd * w).zip(sc.pos.chunks_exact_mut(w));
        let bufs = bufs.zip(sc.s.chunks_exact_mut(TILE_KEYS * w).zip(sc.ot.chunks_exact_mut(hd * w)));
        for (i, ((qt, pos), (s, ot))) in bufs.take(nb).enumerate() {
            let r0 = (first + i) * part.rows;
            let nr = part.rows.min(part.n_q - r0);
            for lane in 0..nr * nh {
                let (r, h) = (r0 + lane / nh, h0 + lane % nh);
                pos[lane] = (part.start_pos + r) as i32;
                for (d, &x) in part.q[r * qd + h * hd..][..hd].iter().enumerate() {
                    qt[d * w + lane] = x * scale;
                }
            }
            bs.push(AttnBlock {
                qt,
                lane_pos: pos,
                keys: &part.keys[key_index(0, kvh * hd, kvd)..],
                values: &part.values[kvh * hd..],
                stride: kvd,
                hd,
                n_keys: part.start_pos + r0 + nr,
                min_pos: part.start_pos + r0,
                s,
                ot,
            });
        }
        attend_blocks(isa, &mut bs, w, &mut sc.few);
        for (i, b) in bs.iter().enumerate() {
            let r0 = (first + i) * part.rows;
            for lane in 0..part.rows.min(part.n_q - r0) * nh {
                let (r, h) = (r0 + lane / nh, h0 + lane % nh);
                // SAFETY: this task alone writes out[r * qd + h * hd ..][..hd] (its rows and
                // heads), inside the sequence's `out` (its length was checked by the caller).
                let o = unsafe { std::slice::from_raw_parts_mut(part.out.0.add(r * qd + h * hd), hd) };
                for (c, x) in o.iter_mut().enumerate() {
                    *x = b.ot[c * w + lane];
                }
            }
        }
    });
}

#[cfg(test)]
#[path = "attention_tests.rs"]
mod tests;
