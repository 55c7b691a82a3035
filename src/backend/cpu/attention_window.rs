//! Sliding-window attention (Gemma 3's local layers) on the causal kernels.
//!
//! The kernels mask only keys after a row's position. A row whose window reaches back to key 0
//! is plain causal attention and runs with the others; a row whose window starts later runs
//! alone over a copy of exactly its window's keys and values, re-based to position 0, where
//! causal attention sees all of them and nothing else. So a row's result depends only on its
//! query and its window's keys: the same whether it is prefilled, decoded, verified or comes
//! after a reused prefix. The copy costs a window's keys and values per such row and layer,
//! beside a kernel pass that reads them anyway.

use super::attention_tasks;
use super::isa::Isa;
use super::pool::Pool;
use crate::backend::{AttnSeq, Heads, KvBuf, KvFormat, KEY_GROUP, TILE_KEY_GROUP};

/// Shifted copies of caches' keys and values, kept between calls (see [`attention_batch`]).
pub(crate) type WindowScratch = Vec<KvBuf>;

/// One sequence's rows whose windows are cut: the first row's position and each row's query and
/// output, over the sequence's cache.
struct Cut<'a> {
    keys: &'a [u16],
    values: &'a [u16],
    window: usize,
    first_pos: usize,
    rows: Vec<(&'a [f32], &'a mut [f32])>,
}

/// [`attention_tasks::attention_batch`] for sequences that may have a window. The rows their
/// windows do not cut run as they are. A cut row at position `p` sees positions `p + 1 - window
/// ..= p`, re-based to `0..window`: read in place from the group holding its first position
/// where that position starts a group, else from a copy of the cache shifted so that it does.
/// Consecutive rows' first positions step by one, so one shifted copy per offset within a group
/// serves every row of a prompt chunk (at most 7 + 1 copies for keys in groups of 8 and values
/// in pairs), and all cut rows then run in one call.
pub(crate) fn attention_batch(
    pool: &Pool,
    isa: Isa,
    seqs: &mut [AttnSeq<'_>],
    heads: Heads,
    scale: f32,
    scratch: &mut WindowScratch,
) {
    let qd = heads.q_dim();
    let format = seqs[0].format;
    let mut whole = Vec::with_capacity(seqs.len());
    let mut cuts = Vec::new();
    for s in seqs.iter_mut() {
        let s = s.reborrow();
        let Some(window) = s.window.filter(|&w| s.start_pos + s.n_q > w) else {
            whole.push(AttnSeq { window: None, ..s });
            continue;
        };
        assert!(window > 0, "attention: a window of 0 keys");
        assert!(s.format == format, "attention: one call's caches share a format");
        // Rows at positions below `window` see every key from 0.
        let inside = window.saturating_sub(s.start_pos);
        let (q_in, q_cut) = s.q.split_at(inside * qd);
        let (out_in, out_cut) = s.out.split_at_mut(inside * qd);
        if inside > 0 {
            whole.push(AttnSeq { q: q_in, out: out_in, n_q: inside, window: None, ..s });
        }
        let rows = q_cut.chunks_exact(qd).zip(out_cut.chunks_exact_mut(qd)).collect();
        cuts.push(Cut { keys: s.keys, values: s.values, window, first_pos: s.start_pos + inside, rows });
    }
    if !whole.is_empty() {
        attention_tasks::attention_batch(pool, isa, &mut whole, heads, scale);
    }
    drop(whole);
    let (kg, vg) = groupings(format, heads.kv_dim());
    // The shifted copies, for each cut its keys' and its values' (offset, scratch slot, first
    // position copied).
    let mut slots: Vec<[Vec<(usize, usize, usize)>; 2]> = Vec::with_capacity(cuts.len());
    let mut used = 0;
    for c in &cuts {
        let (lo, hi) = (c.first_pos + 1 - c.window, c.first_pos + c.rows.len() - c.window);
        let last = c.first_pos + c.rows.len() - 1;
        let mut of = |src: &[u16], g: Grouping| {
            let mut v = Vec::new();
            for off in 1..g.group {
                // The smallest first position at this offset; the copy runs through the last row.
                let base = lo + (off + g.group - lo % g.group) % g.group;
                if base > hi {
                    continue;
                }
                if scratch.len() <= used {
                    scratch.push(KvBuf::new());
                }
                copy_grouped(src, &mut scratch[used], base, last + 1 - base, g);
                v.push((off, used, base));
                used += 1;
            }
            v
        };
        slots.push([of(c.keys, kg), of(c.values, vg)]);
    }
    let scratch = &*scratch;
    let mut rows = Vec::new();
    for (c, [key_slots, value_slots]) in cuts.into_iter().zip(&slots) {
        for (i, (q, out)) in c.rows.into_iter().enumerate() {
            let first = c.first_pos + i + 1 - c.window;
            let keys = place(c.keys, scratch, kg, key_slots, first);
            let values = place(c.values, scratch, vg, value_slots, first);
            rows.push(AttnSeq { q, keys, values, format, start_pos: c.window - 1, n_q: 1, out, window: None });
        }
    }
    attention_tasks::attention_batch(pool, isa, &mut rows, heads, scale);
}

/// Where a row whose window starts at `first` reads its keys or values from (as positions
/// `0..`): `src` itself where `first` starts a group, else the shifted copy of `copies` (offset,
/// slot in `scratch`, first position copied) for its offset.
fn place<'s>(
    src: &'s [u16],
    scratch: &'s [KvBuf],
    g: Grouping,
    copies: &[(usize, usize, usize)],
    first: usize,
) -> &'s [u16] {
    match copies.iter().find(|(off, _, _)| *off == first % g.group) {
        None => view(src, first, g),
        Some(&(_, slot, base)) => view(&scratch[slot], first - base, g),
    }
}

/// Positions `first..` of a buffer laid out as `g` says, as positions `0..`; `first` starts a
/// group.
fn view(src: &[u16], first: usize, g: Grouping) -> &[u16] {
    debug_assert!(first.is_multiple_of(g.group));
    &src[first / g.group * g.chunks * g.group * g.width..]
}

/// How a buffer of a format arranges positions: in groups of `group` positions, each group
/// `chunks` runs of `group * width` elements, position `p % group` of a run at `(p % group) *
/// width`. Every layout of `KvFormat::key_at` and `value_at` is one of these.
#[derive(Clone, Copy, Debug)]
struct Grouping {
    group: usize,
    width: usize,
    chunks: usize,
}

/// The groupings of a format's keys and values, for heads of `kv_dim` values.
fn groupings(f: KvFormat, kv_dim: usize) -> (Grouping, Grouping) {
    let position_major = Grouping { group: 1, width: kv_dim, chunks: 1 };
    match f {
        KvFormat::F16 => (Grouping { group: KEY_GROUP, width: 1, chunks: kv_dim }, position_major),
        KvFormat::Bf16Pairs => (
            Grouping { group: KEY_GROUP, width: 2, chunks: kv_dim / 2 },
            Grouping { group: 2, width: 1, chunks: kv_dim },
        ),
        KvFormat::Bf16Tiles => (position_major, Grouping { group: TILE_KEY_GROUP, width: 1, chunks: kv_dim }),
    }
}

/// Positions `first..first + n` of `src` to positions `0..n` of `dst` (grown to hold them), both
/// laid out as `g` says, unless `first` starts a group ([`view`] reads `src` itself then): each
/// run of `dst` is the tail of one run of `src` and the head of the next. Positions past the end
/// of `src` (a last group's padding) keep what `dst` held: attention reads them only as keys
/// after the row's own, which it masks.
fn copy_grouped(src: &[u16], dst: &mut KvBuf, first: usize, n: usize, g: Grouping) {
    let off = first % g.group;
    if off == 0 {
        return;
    }
    let (run, stride) = (g.group * g.width, g.chunks * g.group * g.width);
    let groups = n.div_ceil(g.group);
    dst.resize(groups * stride);
    let head = off * g.width;
    let s0 = first / g.group * stride;
    let src = &src[s0.min(src.len())..];
    match run {
        2 => copy_runs::<2, 4>(src, dst, stride, groups, head),
        8 => copy_runs::<8, 16>(src, dst, stride, groups, head),
        16 => copy_runs::<16, 32>(src, dst, stride, groups, head),
        32 => copy_runs::<32, 64>(src, dst, stride, groups, head),
        _ => unreachable!("a grouped layout's runs are 2, 8, 16 or 32 elements, not {run}"),
    }
}

/// [`copy_grouped`]'s runs of `R` elements (`R2 = 2 R`): each through an array of a run and the
/// next group's run, so that every copy has a length known at compile time (a call to `memmove`
/// per run of 4 to 64 bytes took longer than the bytes: perf showed it at 22% of a 1,024-token
/// prefill).
fn copy_runs<const R: usize, const R2: usize>(src: &[u16], dst: &mut [u16], stride: usize, groups: usize, head: usize) {
    let mut pair = [0u16; R2];
    for d in 0..groups {
        let Some(this) = src.get(d * stride..(d + 1) * stride) else { break };
        let next = src.get((d + 1) * stride..(d + 2) * stride);
        let to = &mut dst[d * stride..(d + 1) * stride];
        for (c, to) in to.chunks_exact_mut(R).enumerate() {
            pair[..R].copy_from_slice(&this[c * R..(c + 1) * R]);
            if let Some(next) = next {
                pair[R..].copy_from_slice(&next[c * R..(c + 1) * R]);
            }
            to.copy_from_slice(&pair[head..head + R]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{stored_keys, stored_values, Backend, CpuBackend};

    fn noise(n: usize, seed: u32) -> Vec<f32> {
        (0..n).map(|i| ((i as u32).wrapping_mul(2_654_435_761) ^ seed) as f32 / u32::MAX as f32 - 0.5).collect()
    }

    #[test]
    fn a_window_read_in_place_or_from_a_shifted_copy_equals_one_copied_element_by_element() {
        let kv_dim = 64;
        let len = 150;
        for f in [KvFormat::F16, KvFormat::Bf16Pairs, KvFormat::Bf16Tiles] {
            let rows: Vec<f32> = noise(len * kv_dim, 9).iter().map(|v| v + 1.0).collect();
            let (keys, values) = (stored_keys(&rows, kv_dim, f), stored_values(&rows, kv_dim, f));
            for (first, n) in [(0, 150), (1, 40), (7, 100), (8, 64), (33, 117), (101, 49)] {
                let (kg, vg) = groupings(f, kv_dim);
                let mut copies = vec![KvBuf::new(), KvBuf::new()];
                let mut shifted = |src: &[u16], g: Grouping, slot: usize| {
                    let off = first % g.group;
                    copy_grouped(src, &mut copies[slot], first, n, g);
                    if off == 0 {
                        vec![]
                    } else {
                        vec![(off, slot, first)]
                    }
                };
                let (ks, vs) = (shifted(&keys, kg, 0), shifted(&values, vg, 1));
                let (k, v) = (place(&keys, &copies, kg, &ks, first), place(&values, &copies, vg, &vs, first));
                for p in 0..n {
                    for e in 0..kv_dim {
                        let (src_k, src_v) = (f.key_at(first + p, e, kv_dim), f.value_at(first + p, e, kv_dim));
                        assert_eq!(k[f.key_at(p, e, kv_dim)], keys[src_k], "{f:?} {first}+{p} key {e}");
                        assert_eq!(v[f.value_at(p, e, kv_dim)], values[src_v], "{f:?} {first}+{p} value {e}");
                    }
                }
            }
        }
    }

    /// A window's rows against attention over exactly the window's keys, computed as a causal
    /// row over a cache that holds only them (the definition), at every level and format.
    #[test]
    fn a_windowed_row_sees_exactly_its_window() {
        let heads = Heads { n_heads: 2, n_kv_heads: 1, head_dim: 32 };
        let (qd, kvd, n, window) = (heads.q_dim(), heads.kv_dim(), 90, 40);
        let (k, v, q) = (noise(n * kvd, 1), noise(n * kvd, 2), noise(n * qd, 3));
        for isa in Isa::available() {
            let be = CpuBackend::with_isa(2, isa);
            let format = be.kv_format(heads.head_dim);
            let (keys, values) = (stored_keys(&k, kvd, format), stored_values(&v, kvd, format));
            // All 90 rows as one prefill over a window of 40.
            let mut out = vec![0f32; n * qd];
            let seq = AttnSeq {
                q: &q,
                keys: &keys,
                values: &values,
                format,
                start_pos: 0,
                n_q: n,
                out: &mut out,
                window: Some(window),
            };
            be.attention(seq, heads, 0.3);
            for p in [0usize, 39, 40, 41, 89] {
                let first = (p + 1).saturating_sub(window);
                let (wk, wv) = (&k[first * kvd..(p + 1) * kvd], &v[first * kvd..(p + 1) * kvd]);
                let (keys, values) = (stored_keys(wk, kvd, format), stored_values(wv, kvd, format));
                let mut want = vec![0f32; qd];
                let row = &q[p * qd..(p + 1) * qd];
                let start_pos = p - first;
                let seq = AttnSeq {
                    q: row,
                    keys: &keys,
                    values: &values,
                    format,
                    start_pos,
                    n_q: 1,
                    out: &mut want,
                    window: None,
                };
                be.attention(seq, heads, 0.3);
                assert_eq!(&out[p * qd..(p + 1) * qd], &want[..], "{} row {p}", isa.name());
            }
            // Without the window, the last row differs (it sees 50 more keys).
            let mut causal = vec![0f32; n * qd];
            let seq = AttnSeq {
                q: &q,
                keys: &keys,
                values: &values,
                format,
                start_pos: 0,
                n_q: n,
                out: &mut causal,
                window: None,
            };
            be.attention(seq, heads, 0.3);
            assert_eq!(causal[..40 * qd], out[..40 * qd]);
            assert_ne!(causal[89 * qd..], out[89 * qd..]);
        }
    }
}
