//! How an attention call becomes pool tasks of blocks (`attention.rs`), and how their results
//! are merged.
//!
//! Every lane (a query row and head) runs its online softmax over fixed segments of the keys
//! ([`SEGMENT_KEYS`] positions, counted from position 0) and merges them in order, the same
//! segments on every path, so a row's result does not depend on how its call was split:
//! - many rows (a prefill chunk): a task takes a group of row blocks of one KV head over every
//!   key they see, segment after segment, merging as it goes;
//! - one row block (a decode row) of the sequences that fill whole rounds of the threads: a task
//!   per sequence over all its KV heads (one call of the kernel, blocks head after head), which
//!   reads whole cache rows, in one setup;
//! - a few rows over a long context (decode steps, verification, a paced prompt chunk): a task
//!   per segment (and set of KV heads), so that both threads share even one row's keys, a task
//!   reads whole cache rows (every KV head's part of them) rather than a third of each, and no
//!   block is halved to make tasks (which read its keys twice). The segments' partial results
//!   are merged after the pool's job.

use super::attention::{
    attend_blocks, reads, AttnBlock, TileScratch, BLOCK_LANES, FEW_LANES, MAX_GROUP, TILE_BLOCK_LANES, TILE_KEYS,
};
use super::isa::Isa;
use super::pool::Pool;
use crate::backend::{AttnSeq, Heads, KvFormat};
use std::cell::RefCell;

/// Keys per segment of every lane's softmax (a multiple of `TILE_KEYS`): merging costs a
/// lane `head_dim` multiply-adds per segment, nothing beside the segment's own work, and a
/// context of a thousand positions still makes four tasks for two threads.
pub(super) const SEGMENT_KEYS: usize = 256;
/// Most query rows of a sequence whose keys are split by segment across tasks: the partial
/// results take `head_dim + 2` floats per row, head and segment.
const SPLIT_MAX_ROWS: usize = 16;
/// Below this many multiply-adds attention runs on the calling thread alone. Low: a decode
/// step's attention over a short context waits on its cold cache lines rather than on
/// arithmetic, and two threads wait on twice as many at once (3 sequences at 16 positions took
/// 0.21 against 0.35 ms a step with 64 Ki as the bound).
const ATTN_PARALLEL_MIN_MACS: usize = 4 * 1024;
/// Chunks of tasks per thread (tasks are ordered costliest first, and claiming balances them).
const ATTN_CHUNKS_PER_THREAD: usize = 16;
/// Groups of row blocks (and sets of KV heads) get smaller only while they would make fewer
/// tasks than this per thread: enough for costliest-first claiming to even out a causal
/// triangle.
const MIN_GROUP_TASKS_PER_THREAD: usize = 4;
/// A sequence's blocks get fewer rows when they would number fewer than this per thread (a
/// few-row call within one segment would otherwise leave threads idle).
const MIN_BLOCKS_PER_THREAD: usize = 2;

/// A worker's buffers for the blocks it runs (a few KB, reused).
#[derive(Default)]
struct Scratch {
    qt: Vec<f32>,
    pos: Vec<i32>,
    s: Vec<f32>,
    ot: Vec<f32>,
    m: Vec<f32>,
    l: Vec<f32>,
    /// The segments merged so far: outputs (lane-minor, like `ot`), maxes and sums.
    acc_o: Vec<f32>,
    acc_m: Vec<f32>,
    acc_l: Vec<f32>,
    tile: TileScratch,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
    /// The calling thread's buffer for split sequences' partial results.
    static PARTIALS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// A buffer that workers write in disjoint parts: each (query row, head) of an output by
/// exactly one worker, each (segment, row, head) of the partial results by exactly one.
struct SyncPtr(*mut f32);
// SAFETY: workers write disjoint slices of a buffer that outlives the pool job.
unsafe impl Sync for SyncPtr {}

/// Causal GQA attention of one sequence; see [`crate::backend::Backend::attention`] for the
/// contract.
pub(crate) fn attention(pool: &Pool, isa: Isa, seq: AttnSeq<'_>, heads: Heads, scale: f32) {
    attention_batch(pool, isa, &mut [seq], heads, scale);
}

/// How a sequence's attention splits into tasks.
#[derive(Clone, Copy)]
enum Plan {
    /// Tasks of (a group of `group` row blocks, a set of `units` units), over all their keys.
    Whole { group: usize, units: usize },
    /// Tasks of (segment, a set of `units` units) over all row blocks; partial results at
    /// `partials` in the partials buffer.
    Split { units: usize, partials: usize },
}

/// One sequence of a batched attention call, checked.
struct Part<'a> {
    q: &'a [f32],
    keys: &'a [u16],
    values: &'a [u16],
    format: KvFormat,
    start_pos: usize,
    n_q: usize,
    out: SyncPtr,
    /// Tasks of the sequences before this one.
    first_task: usize,
    /// Query rows per block.
    rows: usize,
    plan: Plan,
}

/// How a sequence's heads split into units (a KV head's chunk of the query heads that share
/// it, one block's lanes): `(heads per unit, units per KV head)`.
fn head_chunks(heads: Heads) -> (usize, usize) {
    let group = heads.n_heads / heads.n_kv_heads;
    let per = group.min(BLOCK_LANES);
    (per, group.div_ceil(per))
}

/// Units of a sequence's heads: each KV head's chunks of query heads.
fn units(heads: Heads) -> usize {
    heads.n_kv_heads * head_chunks(heads).1
}

/// The lanes of row block `i` and unit `u`: rows `r0..r0 + nr` times heads `h0..h0 + nh`, which
/// share KV head `kvh`.
struct Lanes {
    r0: usize,
    nr: usize,
    h0: usize,
    nh: usize,
    kvh: usize,
}

fn lanes(part: &Part<'_>, heads: Heads, u: usize, i: usize) -> Lanes {
    let gqa = heads.n_heads / heads.n_kv_heads;
    let (hpu, chunks) = head_chunks(heads);
    let (kvh, hc) = (u / chunks, u % chunks);
    let r0 = i * part.rows;
    Lanes { r0, nr: part.rows.min(part.n_q - r0), h0: kvh * gqa + hc * hpu, nh: hpu.min(gqa - hc * hpu), kvh }
}

/// Folds a segment's max `m` and sum `l` into a lane's running ones, and returns the factors
/// of the running output and the segment's: `out = out * a + segment * b`. Both plans merge
/// with this, in segment order, so a lane gets the same bits on either.
fn fold(acc_m: &mut f32, acc_l: &mut f32, m: f32, l: f32) -> (f32, f32) {
    let mt = acc_m.max(m);
    let (a, b) = ((*acc_m - mt).exp(), (m - mt).exp());
    *acc_l = *acc_l * a + l * b;
    *acc_m = mt;
    (a, b)
}

/// [`attention`] for several sequences in one pool dispatch (a batched decode step would
/// otherwise pay a dispatch, and an uneven split of a few heads, per sequence and layer).
pub(crate) fn attention_batch(pool: &Pool, isa: Isa, seqs: &mut [AttnSeq<'_>], heads: Heads, scale: f32) {
    let (qd, kvd, hd) = (heads.q_dim(), heads.kv_dim(), heads.head_dim);
    assert!(heads.n_kv_heads > 0 && heads.n_heads.is_multiple_of(heads.n_kv_heads), "attention: {heads:?}");
    let (hpu, units) = (head_chunks(heads).0, units(heads));
    let min_tasks = MIN_GROUP_TASKS_PER_THREAD * pool.threads();
    let (mut tasks, mut macs, mut partials) = (0, 0, 0);
    let mut parts = Vec::with_capacity(seqs.len());
    // Sequences of one row block that fill whole rounds of the threads (a decode step's) get a
    // task each over all their KV heads, which reads their cache rows whole: a task per KV head
    // read a head's pair of lines in every six, and 4 sequences took 1.1-1.2x as long (100 and
    // 200 positions, docs/performance.md). The rest (the third of three on two threads) get a
    // task per KV head, to even out the rounds.
    let whole_rows_seqs = seqs.len() / pool.threads() * pool.threads();
    for (i, s) in seqs.iter_mut().enumerate() {
        let (n_q, ctx) = (s.n_q, s.start_pos + s.n_q);
        assert_eq!(s.q.len(), n_q * qd, "attention: q has {} values, want {n_q} x {qd}", s.q.len());
        assert_eq!(s.out.len(), n_q * qd, "attention: out has {} values, want {n_q} x {qd}", s.out.len());
        assert!(
            s.keys.len() >= s.format.keys_len(ctx, kvd) && s.values.len() >= s.format.values_len(ctx, kvd),
            "attention: the cache holds fewer than {ctx} positions"
        );
        assert!(reads(isa, s.format, hd), "attention: a cache in {:?} at {} (heads of {hd})", s.format, isa.name());
        let first_task = tasks;
        let block = if s.format == KvFormat::Bf16Tiles { TILE_BLOCK_LANES } else { BLOCK_LANES };
        let mut rows = (block / hpu).clamp(1, n_q.max(1));
        let segs = ctx.div_ceil(SEGMENT_KEYS);
        let plan = if n_q <= SPLIT_MAX_ROWS && segs >= 2 && n_q.div_ceil(rows) <= MAX_GROUP {
            if hpu <= FEW_LANES && n_q * hpu <= 8 && n_q * units <= MAX_GROUP {
                // Lanes of one vector: a block per row runs lane by lane, at fewer FMAs.
                rows = 1;
            }
            let mut per = units.min(MAX_GROUP / n_q.div_ceil(rows));
            while per > 1 && segs * units.div_ceil(per) < min_tasks {
                per = per.div_ceil(2);
            }
            let plan = Plan::Split { units: per, partials };
            partials += segs * n_q * heads.n_heads * (hd + 2);
            tasks += segs * units.div_ceil(per);
            plan
        } else {
            while rows > 1 && units * n_q.div_ceil(rows) < MIN_BLOCKS_PER_THREAD * pool.threads() {
                rows = rows.div_ceil(2);
            }
            let blocks = n_q.div_ceil(rows);
            let mut group = MAX_GROUP;
            while group > 1 && units * blocks.div_ceil(group) < min_tasks {
                group /= 2;
            }
            let per = if blocks == 1 && i < whole_rows_seqs { units.min(MAX_GROUP) } else { 1 };
            tasks += blocks.div_ceil(group) * units.div_ceil(per);
            Plan::Whole { group, units: per }
        };
        parts.push(Part {
            q: s.q,
            keys: s.keys,
            values: s.values,
            format: s.format,
            start_pos: s.start_pos,
            n_q,
            out: SyncPtr(s.out.as_mut_ptr()),
            first_task,
            rows,
            plan,
        });
        // Keys seen by all rows: n_q * start_pos + n_q * (n_q + 1) / 2.
        macs += (n_q * s.start_pos + n_q * (n_q + 1) / 2) * heads.n_heads * hd * 2;
    }
    PARTIALS.with_borrow_mut(|buf| {
        buf.resize(buf.len().max(partials), 0.0);
        let pp = SyncPtr(buf.as_mut_ptr());
        let (parts, pp) = (&parts, &pp);
        let task = move |t: usize| {
            let part = &parts[parts.partition_point(|p| p.first_task <= t) - 1];
            let t = t - part.first_task;
            match part.plan {
                Plan::Whole { group, units } => whole_task(isa, part, heads, scale, group, units, t),
                Plan::Split { units, partials } => split_task(isa, part, heads, scale, units, pp, partials, t),
            }
        };
        if macs < ATTN_PARALLEL_MIN_MACS || pool.threads() == 1 {
            (0..tasks).for_each(task);
        } else {
            let chunks = tasks.min(ATTN_CHUNKS_PER_THREAD * pool.threads());
            pool.run(chunks, &|c| super::pool::chunk(tasks, c, chunks).for_each(task));
        }
        for (part, seq) in parts.iter().zip(seqs.iter_mut()) {
            if let Plan::Split { partials, .. } = part.plan {
                merge_split(part, heads, &buf[partials..], seq.out);
            }
        }
    });
}

/// Sets up the queries of blocks `which` (unit, row block) in the scratch, block `j`'s at
/// `qt[j * hd * w..]` and `pos[j * w..]`, and returns their lane count `w` (the most any of
/// them has, in whole vectors; the others get padding lanes).
fn setup(part: &Part<'_>, heads: Heads, scale: f32, which: &[(usize, usize)], sc: &mut Scratch) -> usize {
    let (qd, hd, nb) = (heads.q_dim(), heads.head_dim, which.len());
    let width = |&(u, i): &(usize, usize)| {
        let ln = lanes(part, heads, u, i);
        (ln.nr * ln.nh).div_ceil(8) * 8
    };
    let w = which.iter().map(width).max().unwrap_or(8);
    sc.qt.clear();
    sc.qt.resize(nb * hd * w, 0.0);
    sc.pos.clear();
    sc.pos.resize(nb * w, i32::MAX);
    sc.s.resize(nb * TILE_KEYS * w, 0.0);
    for v in [&mut sc.ot, &mut sc.acc_o] {
        v.resize(nb * hd * w, 0.0);
    }
    for v in [&mut sc.m, &mut sc.l, &mut sc.acc_m, &mut sc.acc_l] {
        v.resize(nb * w, 0.0);
    }
    for (j, &(u, i)) in which.iter().enumerate() {
        let ln = lanes(part, heads, u, i);
        let (qt, pos) = (&mut sc.qt[j * hd * w..][..hd * w], &mut sc.pos[j * w..][..w]);
        for lane in 0..ln.nr * ln.nh {
            let (r, h) = (ln.r0 + lane / ln.nh, ln.h0 + lane % ln.nh);
            pos[lane] = (part.start_pos + r) as i32;
            for (d, &x) in part.q[r * qd + h * hd..][..hd].iter().enumerate() {
                qt[d * w + lane] = x * scale;
            }
        }
    }
    w
}

/// Segment `seg` of the keys for blocks `which` (set up by [`setup`] with `w` lanes): each
/// block's unnormalised outputs, maxes and sums in the scratch's `ot`, `m` and `l`. Returns
/// which blocks see any of the segment's keys (the others are left as they were).
fn segment(
    isa: Isa,
    part: &Part<'_>,
    heads: Heads,
    which: &[(usize, usize)],
    w: usize,
    seg: usize,
    sc: &mut Scratch,
) -> [bool; MAX_GROUP] {
    let (kvd, hd) = (heads.kv_dim(), heads.head_dim);
    let k_begin = seg * SEGMENT_KEYS;
    let mut active = [false; MAX_GROUP];
    let Scratch { qt, pos, s, ot, m, l, tile, .. } = sc;
    let bufs = qt.chunks_exact(hd * w).zip(pos.chunks_exact(w));
    let bufs = bufs.zip(s.chunks_exact_mut(TILE_KEYS * w).zip(ot.chunks_exact_mut(hd * w)));
    let bufs = bufs.zip(m.chunks_exact_mut(w).zip(l.chunks_exact_mut(w)));
    let mut bs = Vec::with_capacity(which.len());
    for (j, ((((qt, pos), (s, ot)), (m, l)), &(u, i))) in bufs.zip(which).enumerate() {
        let ln = lanes(part, heads, u, i);
        let end = part.start_pos + ln.r0 + ln.nr;
        if end <= k_begin {
            continue;
        }
        active[j] = true;
        bs.push(AttnBlock {
            qt,
            lane_pos: pos,
            keys: &part.keys[part.format.key_at(0, ln.kvh * hd, kvd)..],
            values: &part.values[part.format.value_at(0, ln.kvh * hd, kvd)..],
            format: part.format,
            stride: kvd,
            hd,
            k_begin,
            n_keys: end.min(k_begin + SEGMENT_KEYS),
            min_pos: part.start_pos + ln.r0,
            s,
            ot,
            m,
            l,
        });
    }
    attend_blocks(isa, &mut bs, w, tile);
    active
}

/// Task `t` of a sequence planned whole: one (group of row blocks, set of `per` units) over
/// every key its blocks see, segment after segment, the last rows' groups (which see the most
/// keys) first, so that the cheap ones fill in at the end.
#[allow(clippy::too_many_arguments)]
fn whole_task(isa: Isa, part: &Part<'_>, heads: Heads, scale: f32, group: usize, per: usize, t: usize) {
    let (qd, hd) = (heads.q_dim(), heads.head_dim);
    let units = units(heads);
    let sets = units.div_ceil(per);
    let blocks = part.n_q.div_ceil(part.rows);
    let first = (blocks.div_ceil(group) - 1 - t / sets) * group;
    let set = t % sets;
    let which: Vec<(usize, usize)> = (set * per..units.min((set + 1) * per))
        .flat_map(|u| (first..blocks.min(first + group)).map(move |i| (u, i)))
        .collect();
    // Keys seen by the group's last row.
    let last = lanes(part, heads, set * per, blocks.min(first + group) - 1);
    let n_keys = part.start_pos + last.r0 + last.nr;
    SCRATCH.with_borrow_mut(|sc| {
        let w = setup(part, heads, scale, &which, sc);
        for seg in 0..n_keys.div_ceil(SEGMENT_KEYS) {
            let active = segment(isa, part, heads, &which, w, seg, sc);
            let Scratch { ot, m, l, acc_o, acc_m, acc_l, .. } = &mut *sc;
            if seg == 0 {
                // Every block sees key 0: the first segment is the running state as it stands
                // (what folding it into an empty one would give, bit for bit).
                std::mem::swap(ot, acc_o);
                std::mem::swap(m, acc_m);
                std::mem::swap(l, acc_l);
                continue;
            }
            for j in (0..which.len()).filter(|&j| active[j]) {
                let (o, ao) = (&ot[j * hd * w..][..hd * w], &mut acc_o[j * hd * w..][..hd * w]);
                let (mut a, mut b) = ([0f32; BLOCK_LANES], [0f32; BLOCK_LANES]);
                for lane in 0..w {
                    let at = j * w + lane;
                    (a[lane], b[lane]) = fold(&mut acc_m[at], &mut acc_l[at], m[at], l[at]);
                }
                // Column by column, the lanes side by side (contiguous, so in vectors): lane
                // by lane, a stride of `w` apart, this merge took 5 % of an 8,192-token prefill.
                // The same product and sum per value as `merge_split`'s, so the same bits.
                for (ao, o) in ao.chunks_exact_mut(w).zip(o.chunks_exact(w)) {
                    for (((x, &y), &a), &b) in ao.iter_mut().zip(o).zip(&a[..w]).zip(&b[..w]) {
                        *x = *x * a + y * b;
                    }
                }
            }
        }
        for (j, &(u, i)) in which.iter().enumerate() {
            let ln = lanes(part, heads, u, i);
            for lane in 0..ln.nr * ln.nh {
                let (r, h) = (ln.r0 + lane / ln.nh, ln.h0 + lane % ln.nh);
                // SAFETY: this task alone writes out[r * qd + h * hd ..][..hd] (its rows and
                // heads), inside the sequence's `out` (its length was checked by the caller).
                let o = unsafe { std::slice::from_raw_parts_mut(part.out.0.add(r * qd + h * hd), hd) };
                let l = sc.acc_l[j * w + lane];
                for (c, x) in o.iter_mut().enumerate() {
                    *x = sc.acc_o[j * hd * w + c * w + lane] / l;
                }
            }
        }
    });
}

/// Task `t` of a sequence planned split: one segment for a set of `per` units, every row
/// block; each lane's max, sum and unnormalised output go to its place in the partials
/// (`head_dim + 2` floats per segment, row and head, from `at`).
#[allow(clippy::too_many_arguments)]
fn split_task(isa: Isa, part: &Part<'_>, heads: Heads, scale: f32, per: usize, pp: &SyncPtr, at: usize, t: usize) {
    let hd = heads.head_dim;
    let units = units(heads);
    let sets = units.div_ceil(per);
    let (seg, set) = (t / sets, t % sets);
    let blocks = part.n_q.div_ceil(part.rows);
    let which: Vec<(usize, usize)> =
        (set * per..units.min((set + 1) * per)).flat_map(|u| (0..blocks).map(move |i| (u, i))).collect();
    SCRATCH.with_borrow_mut(|sc| {
        let w = setup(part, heads, scale, &which, sc);
        let active = segment(isa, part, heads, &which, w, seg, sc);
        for (j, &(u, i)) in which.iter().enumerate().filter(|&(j, _)| active[j]) {
            let ln = lanes(part, heads, u, i);
            for lane in 0..ln.nr * ln.nh {
                let (r, h) = (ln.r0 + lane / ln.nh, ln.h0 + lane % ln.nh);
                let off = at + ((seg * part.n_q + r) * heads.n_heads + h) * (hd + 2);
                // SAFETY: this task alone writes the partials of (its segment, row r, head h),
                // inside the buffer, which the caller sized for every segment, row and head.
                let p = unsafe { std::slice::from_raw_parts_mut(pp.0.add(off), hd + 2) };
                (p[0], p[1]) = (sc.m[j * w + lane], sc.l[j * w + lane]);
                for (c, x) in p[2..].iter_mut().enumerate() {
                    *x = sc.ot[j * hd * w + c * w + lane];
                }
            }
        }
    });
}

/// A split sequence's result: each row's and head's segments (those its position sees)
/// merged in order, divided by the sum.
fn merge_split(part: &Part<'_>, heads: Heads, partials: &[f32], out: &mut [f32]) {
    let (qd, hd) = (heads.q_dim(), heads.head_dim);
    for r in 0..part.n_q {
        let segs = (part.start_pos + r) / SEGMENT_KEYS + 1;
        for h in 0..heads.n_heads {
            let at = |seg: usize| &partials[((seg * part.n_q + r) * heads.n_heads + h) * (hd + 2)..][..hd + 2];
            let o = &mut out[r * qd + h * hd..][..hd];
            let (mut m, mut l) = (at(0)[0], at(0)[1]);
            o.copy_from_slice(&at(0)[2..]);
            for seg in 1..segs {
                let p = at(seg);
                let (a, b) = fold(&mut m, &mut l, p[0], p[1]);
                o.iter_mut().zip(&p[2..]).for_each(|(x, y)| *x = *x * a + y * b);
            }
            o.iter_mut().for_each(|x| *x /= l);
        }
    }
}

#[cfg(test)]
#[path = "attention_tests.rs"]
mod tests;
