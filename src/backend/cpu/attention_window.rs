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

/// [`attention_tasks::attention_batch`] for sequences that may have a window: the rows their
/// windows do not cut run together, the others one at a time over a copy of their window.
pub(crate) fn attention_batch(pool: &Pool, isa: Isa, seqs: &mut [AttnSeq<'_>], heads: Heads, scale: f32) {
    if seqs.iter().all(|s| s.window.is_none()) {
        return attention_tasks::attention_batch(pool, isa, seqs, heads, scale);
    }
    let qd = heads.q_dim();
    let mut whole = Vec::with_capacity(seqs.len());
    let mut cut = Vec::new();
    for s in seqs.iter_mut() {
        let s = s.reborrow();
        let Some(window) = s.window.filter(|&w| s.start_pos + s.n_q > w) else {
            whole.push(AttnSeq { window: None, ..s });
            continue;
        };
        assert!(window > 0, "attention: a window of 0 keys");
        // Rows at positions below `window` see every key from 0.
        let inside = window.saturating_sub(s.start_pos);
        let (q_in, q_cut) = s.q.split_at(inside * qd);
        let (out_in, out_cut) = s.out.split_at_mut(inside * qd);
        if inside > 0 {
            whole.push(AttnSeq { q: q_in, out: out_in, n_q: inside, window: None, ..s });
        }
        for (i, (q, out)) in q_cut.chunks_exact(qd).zip(out_cut.chunks_exact_mut(qd)).enumerate() {
            let start_pos = s.start_pos + inside + i;
            cut.push(AttnSeq { q, out, start_pos, n_q: 1, window: Some(window), ..s });
        }
    }
    if !whole.is_empty() {
        attention_tasks::attention_batch(pool, isa, &mut whole, heads, scale);
    }
    let (mut keys, mut values) = (KvBuf::new(), KvBuf::new());
    for row in cut {
        let window = row.window.unwrap_or(0);
        let first = row.start_pos + 1 - window;
        copy_window(&row, first, window, heads.kv_dim(), &mut keys, &mut values);
        let seq = AttnSeq { keys: &keys, values: &values, start_pos: window - 1, window: None, ..row };
        attention_tasks::attention(pool, isa, seq, heads, scale);
    }
}

/// Positions `first..first + n` of `seq`'s keys and values into `keys` and `values` as positions
/// `0..n` of the same format.
fn copy_window(seq: &AttnSeq<'_>, first: usize, n: usize, kv_dim: usize, keys: &mut KvBuf, values: &mut KvBuf) {
    let f: KvFormat = seq.format;
    keys.resize(0);
    keys.resize(f.keys_len(n, kv_dim));
    values.resize(0);
    values.resize(f.values_len(n, kv_dim));
    let (kg, vg) = groupings(f, kv_dim);
    copy_grouped(seq.keys, keys, first, n, kg);
    copy_grouped(seq.values, values, first, n, vg);
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

/// Positions `first..first + n` of `src` to positions `0..n` of `dst`, both laid out as `g`
/// says: each of `dst`'s runs is the tail of one of `src`'s runs and the head of the next, two
/// slice copies rather than one index computation per element. Positions past the end of `src`
/// (a last group's padding) stay zero.
fn copy_grouped(src: &[u16], dst: &mut [u16], first: usize, n: usize, g: Grouping) {
    let (run, off) = (g.group * g.width, first % g.group);
    let stride = g.chunks * run;
    let (tail, head) = ((g.group - off) * g.width, off * g.width);
    for d in 0..n.div_ceil(g.group) {
        let s = (first / g.group + d) * stride;
        for c in 0..g.chunks {
            let to = &mut dst[d * stride + c * run..][..run];
            let from = s + c * run;
            if let Some(x) = src.get(from + head..from + run) {
                to[..tail].copy_from_slice(x);
            }
            if let Some(x) = src.get(from + stride..from + stride + head) {
                to[tail..].copy_from_slice(x);
            }
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
    fn a_window_copied_by_runs_equals_one_copied_element_by_element() {
        let kv_dim = 64;
        let len = 150;
        for f in [KvFormat::F16, KvFormat::Bf16Pairs, KvFormat::Bf16Tiles] {
            let rows: Vec<f32> = noise(len * kv_dim, 9).iter().map(|v| v + 1.0).collect();
            let (keys, values) = (stored_keys(&rows, kv_dim, f), stored_values(&rows, kv_dim, f));
            for (first, n) in [(0, 150), (1, 40), (7, 100), (8, 64), (33, 117), (101, 49)] {
                let mut q = [0f32; 1];
                let seq = AttnSeq {
                    q: &[],
                    keys: &keys,
                    values: &values,
                    format: f,
                    start_pos: 0,
                    n_q: 0,
                    out: &mut q,
                    window: None,
                };
                let (mut k, mut v) = (KvBuf::new(), KvBuf::new());
                copy_window(&seq, first, n, kv_dim, &mut k, &mut v);
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
