//! The non-matmul operations of a forward pass: RMSNorm, RoPE (both layouts), SwiGLU, softmax
//! and causal GQA attention over a position-major key/value cache.

use super::isa::Isa;
use super::matmul::dot_f32;
use super::pool::Pool;
use crate::backend::{AttnSeq, Heads, Rope, RopeLayout};
use std::cell::RefCell;

/// Below this many multiply-adds attention runs on the calling thread alone.
const ATTN_PARALLEL_MIN_MACS: usize = 64 * 1024;
/// Chunks of (query row, head) tasks per thread.
const ATTN_CHUNKS_PER_THREAD: usize = 16;

/// Each row of `x` (rows of `weight.len()` values) times `weight / rms(row)`, as ggml's
/// `rms_norm` followed by `mul` (sum of squares in f64, like ggml).
pub fn rms_norm(x: &mut [f32], weight: &[f32], eps: f32) {
    let d = weight.len();
    assert!(
        d > 0 && x.len().is_multiple_of(d),
        "rms_norm: {} values are not rows of {d}",
        x.len()
    );
    for row in x.chunks_exact_mut(d) {
        let sum: f64 = row.iter().map(|&v| (v as f64) * (v as f64)).sum();
        let mean = (sum / d as f64) as f32;
        let scale = 1.0 / (mean + eps).sqrt();
        for (v, &w) in row.iter_mut().zip(weight) {
            *v = (*v * scale) * w;
        }
    }
}

/// Rotary position embedding of every head of every row of `x`; row `i` is at `positions[i]`.
/// Angles are computed in f64 (position times inverse frequency), then rounded once.
pub fn rope(x: &mut [f32], n_heads: usize, head_dim: usize, positions: &[usize], rope: Rope) {
    let row = n_heads * head_dim;
    assert_eq!(
        x.len(),
        positions.len() * row,
        "rope: {} values for {} rows of {row}",
        x.len(),
        positions.len()
    );
    assert!(
        rope.dims <= head_dim && rope.dims.is_multiple_of(2),
        "rope: {} rotated dims in heads of {head_dim}",
        rope.dims
    );
    let half = rope.dims / 2;
    let inv_freq: Vec<f64> = (0..half)
        .map(|i| (rope.theta as f64).powf(-2.0 * i as f64 / rope.dims as f64))
        .collect();
    let mut cs = vec![(0f32, 0f32); half];
    for (xr, &pos) in x.chunks_exact_mut(row).zip(positions) {
        for (c, &f) in cs.iter_mut().zip(&inv_freq) {
            let (s, co) = (pos as f64 * f).sin_cos();
            *c = (co as f32, s as f32);
        }
        for h in xr.chunks_exact_mut(head_dim) {
            for (i, &(c, s)) in cs.iter().enumerate() {
                let (a, b) = match rope.layout {
                    RopeLayout::Interleaved => (2 * i, 2 * i + 1),
                    RopeLayout::NeoX => (i, i + half),
                };
                let (x0, x1) = (h[a], h[b]);
                h[a] = x0 * c - x1 * s;
                h[b] = x0 * s + x1 * c;
            }
        }
    }
}

/// `x / (1 + e^-x)`.
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// `gate[k] = silu(gate[k]) * up[k]`.
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "swiglu: gate and up differ in length");
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = silu(*g) * u;
    }
}

/// In-place softmax of `x` (max-subtracted, so large logits do not overflow).
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    if max == f32::NEG_INFINITY {
        return;
    }
    let mut sum = 0f32;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    x.iter_mut().for_each(|v| *v *= inv);
}

thread_local! {
    /// Per-thread attention scores of one (query row, head).
    static SCORES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Where attention workers write: each (query row, head) slice by exactly one worker.
struct OutPtr(*mut f32);
// SAFETY: workers write disjoint `head_dim` slices of a buffer that outlives the pool job.
unsafe impl Sync for OutPtr {}

/// `out[p] = scale * dot(q, keys[p * stride..][..q.len()])`.
fn attn_scores(isa: Isa, q: &[f32], keys: &[f32], stride: usize, scale: f32, out: &mut [f32]) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: both x86 SIMD levels imply AVX2 and FMA (detected); bounds are checked inside.
        Isa::Avx2 | Isa::Avx512 => unsafe {
            super::kern_avx2_f32::attn_scores(q, keys, stride, scale, out)
        },
        _ => {
            for (p, o) in out.iter_mut().enumerate() {
                *o = dot_f32(isa, q, &keys[p * stride..p * stride + q.len()]) * scale;
            }
        }
    }
}

/// `o += sum over p of w[p] * values[p * stride..][..o.len()]`.
fn attn_weighted_sum(isa: Isa, w: &[f32], values: &[f32], stride: usize, o: &mut [f32]) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: both x86 SIMD levels imply AVX2 and FMA (detected); bounds are checked inside.
        Isa::Avx2 | Isa::Avx512 => unsafe {
            super::kern_avx2_f32::attn_weighted_sum(w, values, stride, o)
        },
        _ => {
            for (p, &wp) in w.iter().enumerate() {
                let v = &values[p * stride..p * stride + o.len()];
                for (a, &b) in o.iter_mut().zip(v) {
                    *a += wp * b;
                }
            }
        }
    }
}

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
    out: OutPtr,
    /// Tasks (query row, head) of the sequences before this one.
    first_task: usize,
}

/// [`attention`] for several sequences in one pool dispatch (a batched decode step would
/// otherwise pay a dispatch, and an uneven split of a few heads, per sequence and layer).
pub(crate) fn attention_batch(
    pool: &Pool,
    isa: Isa,
    seqs: &mut [AttnSeq<'_>],
    heads: Heads,
    scale: f32,
) {
    let (qd, kvd, hd) = (heads.q_dim(), heads.kv_dim(), heads.head_dim);
    assert!(
        heads.n_kv_heads > 0 && heads.n_heads.is_multiple_of(heads.n_kv_heads),
        "attention: {heads:?}"
    );
    let (mut tasks, mut macs) = (0, 0);
    let mut parts = Vec::with_capacity(seqs.len());
    for s in seqs.iter_mut() {
        let (n_q, ctx) = (s.n_q, s.start_pos + s.n_q);
        assert_eq!(
            s.q.len(),
            n_q * qd,
            "attention: q has {} values, want {n_q} x {qd}",
            s.q.len()
        );
        assert_eq!(
            s.out.len(),
            n_q * qd,
            "attention: out has {} values, want {n_q} x {qd}",
            s.out.len()
        );
        assert!(
            s.keys.len() >= ctx * kvd && s.values.len() >= ctx * kvd,
            "attention: the cache holds fewer than {ctx} positions"
        );
        parts.push(Part {
            q: s.q,
            keys: s.keys,
            values: s.values,
            start_pos: s.start_pos,
            out: OutPtr(s.out.as_mut_ptr()),
            first_task: tasks,
        });
        tasks += n_q * heads.n_heads;
        macs += n_q * heads.n_heads * ctx * hd * 2;
    }
    let group = heads.n_heads / heads.n_kv_heads;
    let parts = &parts;
    let task = move |t: usize| {
        let part = &parts[parts.partition_point(|p| p.first_task <= t) - 1];
        let t = t - part.first_task;
        let (row, h) = (t / heads.n_heads, t % heads.n_heads);
        let kvh = h / group;
        let seen = part.start_pos + row + 1;
        let qh = &part.q[row * qd + h * hd..row * qd + (h + 1) * hd];
        // SAFETY: task t alone writes out[row * qd + h * hd ..][..hd] of its sequence, inside
        // that sequence's `out` (its length was checked above).
        let o = unsafe { std::slice::from_raw_parts_mut(part.out.0.add(row * qd + h * hd), hd) };
        let (k, v) = (&part.keys[kvh * hd..], &part.values[kvh * hd..]);
        SCORES.with_borrow_mut(|sc| {
            sc.resize(seen, 0.0);
            attn_scores(isa, qh, k, kvd, scale, sc);
            softmax(sc);
            o.fill(0.0);
            attn_weighted_sum(isa, sc, v, kvd, o);
        });
    };
    if macs < ATTN_PARALLEL_MIN_MACS || pool.threads() == 1 {
        (0..tasks).for_each(task);
    } else {
        // Small chunks: later rows see more positions, and claiming balances the load.
        let chunks = tasks.min(ATTN_CHUNKS_PER_THREAD * pool.threads());
        pool.run(chunks, &|c| {
            super::pool::chunk(tasks, c, chunks).for_each(task)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_inputs::{isas_under_test, noise};
    use super::*;

    /// [`attention`] with the sequence's parts as arguments.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        pool: &Pool,
        isa: Isa,
        q: &[f32],
        keys: &[f32],
        values: &[f32],
        heads: Heads,
        start_pos: usize,
        n_q: usize,
        scale: f32,
        out: &mut [f32],
    ) {
        let seq = AttnSeq {
            q,
            keys,
            values,
            start_pos,
            n_q,
            out,
        };
        super::attention(pool, isa, seq, heads, scale);
    }

    fn near(a: f32, b: f32, tol: f32) -> bool {
        (a - b).abs() <= tol * b.abs().max(1.0)
    }

    #[test]
    fn rms_norm_scales_rows_to_unit_rms_times_weight() {
        let mut x = vec![3.0, 4.0, 0.0, 0.0];
        rms_norm(&mut x, &[1.0, 2.0], 1e-5);
        let rms = (12.5f32 + 1e-5).sqrt();
        assert!(near(x[0], 3.0 / rms, 1e-6) && near(x[1], 8.0 / rms, 1e-6));
        assert_eq!(&x[2..], &[0.0, 0.0], "eps keeps a zero row finite");
    }

    fn rope_cfg(layout: RopeLayout, theta: f32, dims: usize) -> Rope {
        Rope {
            layout,
            theta,
            dims,
        }
    }

    #[test]
    fn rope_rotates_pairs_by_position_times_frequency() {
        // head_dim 4, theta 100: inverse frequencies 1 and 100^-1/2 = 0.1; position 2.
        let mut x = vec![1.0, 0.0, 1.0, 0.0];
        rope(
            &mut x,
            1,
            4,
            &[2],
            rope_cfg(RopeLayout::Interleaved, 100.0, 4),
        );
        let want = [2f32.cos(), 2f32.sin(), 0.2f32.cos(), 0.2f32.sin()];
        assert!(
            x.iter().zip(&want).all(|(a, b)| near(*a, *b, 1e-6)),
            "{x:?}"
        );
        // NeoX pairs element i with i + 2.
        let mut y = vec![1.0, 1.0, 0.0, 0.0];
        rope(&mut y, 1, 4, &[2], rope_cfg(RopeLayout::NeoX, 100.0, 4));
        let want = [2f32.cos(), 0.2f32.cos(), 2f32.sin(), 0.2f32.sin()];
        assert!(
            y.iter().zip(&want).all(|(a, b)| near(*a, *b, 1e-6)),
            "{y:?}"
        );
    }

    #[test]
    fn rope_scores_depend_only_on_the_relative_position() {
        for layout in [RopeLayout::Interleaved, RopeLayout::NeoX] {
            let (q0, k0) = (noise(64, 1), noise(64, 2));
            let score = |m: usize, n: usize| {
                let (mut q, mut k) = (q0.clone(), k0.clone());
                rope(&mut q, 1, 64, &[m], rope_cfg(layout, 10000.0, 64));
                rope(&mut k, 1, 64, &[n], rope_cfg(layout, 10000.0, 64));
                q.iter().zip(&k).map(|(a, b)| a * b).sum::<f32>()
            };
            assert!(near(score(7, 3), score(104, 100), 1e-4), "{layout:?}");
            assert!(
                !near(score(7, 3), score(3, 7), 1e-4),
                "{layout:?}: rotation direction matters"
            );
        }
    }

    #[test]
    fn softmax_and_swiglu() {
        let mut x = vec![1000.0, 1000.0, f32::NEG_INFINITY];
        softmax(&mut x);
        assert_eq!(x, vec![0.5, 0.5, 0.0]);
        let mut g = vec![0.0, 20.0, -20.0];
        swiglu(&mut g, &[5.0, 2.0, 2.0]);
        assert_eq!(g[0], 0.0);
        assert!(near(g[1], 40.0, 1e-6) && g[2].abs() < 1e-6);
    }

    /// Attention written out naively in f64.
    fn naive(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        hs: Heads,
        start: usize,
        n_q: usize,
        scale: f32,
    ) -> Vec<f32> {
        let (qd, kvd, hd) = (hs.q_dim(), hs.kv_dim(), hs.head_dim);
        let mut out = vec![0f32; n_q * qd];
        for t in 0..n_q {
            for h in 0..hs.n_heads {
                let kvh = h * hs.n_kv_heads / hs.n_heads;
                let s: Vec<f64> = (0..=start + t)
                    .map(|p| {
                        (0..hd)
                            .map(|d| {
                                q[t * qd + h * hd + d] as f64 * k[p * kvd + kvh * hd + d] as f64
                            })
                            .sum::<f64>()
                            * scale as f64
                    })
                    .collect();
                let m = s.iter().cloned().fold(f64::MIN, f64::max);
                let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
                for d in 0..hd {
                    let o: f64 = s
                        .iter()
                        .enumerate()
                        .map(|(p, x)| (x - m).exp() / z * v[p * kvd + kvh * hd + d] as f64)
                        .sum();
                    out[t * qd + h * hd + d] = o as f32;
                }
            }
        }
        out
    }

    #[test]
    fn gqa_attention_matches_a_naive_reference_on_every_isa_and_thread_count() {
        // Head sizes: 64 and 128 (register accumulators), 72 (64 + 8), 20 (a scalar tail).
        for head_dim in [64, 128, 72, 20] {
            let hs = Heads {
                n_heads: 6,
                n_kv_heads: 2,
                head_dim,
            };
            let (start, n_q) = (9, 4);
            let ctx = start + n_q;
            let q: Vec<f32> = noise(n_q * hs.q_dim(), 1).iter().map(|v| v * 3.0).collect();
            let k = noise(ctx * hs.kv_dim(), 2);
            let v = noise(ctx * hs.kv_dim(), 3);
            let want = naive(&q, &k, &v, hs, start, n_q, 0.25);
            for threads in [1, 2] {
                let pool = Pool::new(threads);
                for isa in isas_under_test() {
                    let mut out = vec![f32::NAN; n_q * hs.q_dim()];
                    attention(&pool, isa, &q, &k, &v, hs, start, n_q, 0.25, &mut out);
                    for (a, b) in out.iter().zip(&want) {
                        let what = format!("{} head_dim {head_dim} threads {threads}", isa.name());
                        assert!(near(*a, *b, 1e-5), "{what}: {a} vs {b}");
                    }
                }
            }
        }
    }

    #[test]
    fn attention_is_causal() {
        let hs = Heads {
            n_heads: 2,
            n_kv_heads: 1,
            head_dim: 8,
        };
        let (q, k, mut v) = (noise(3 * 16, 4), noise(5 * 8, 5), noise(5 * 8, 6));
        let pool = Pool::new(1);
        let mut a = vec![0f32; 3 * 16];
        attention(&pool, Isa::Scalar, &q, &k, &v, hs, 2, 3, 0.3, &mut a);
        v[4 * 8..].fill(100.0); // position 4 is only visible to the last query row
        let mut b = vec![0f32; 3 * 16];
        attention(&pool, Isa::Scalar, &q, &k, &v, hs, 2, 3, 0.3, &mut b);
        assert_eq!(&a[..32], &b[..32]);
        assert_ne!(&a[32..], &b[32..]);
    }

    #[test]
    fn batched_attention_equals_one_call_per_sequence() {
        let hs = Heads {
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: 16,
        };
        let (qd, kvd) = (hs.q_dim(), hs.kv_dim());
        // (cached positions, new query rows): decode rows, a prefill chunk, a long context.
        let shapes = [(0, 1), (7, 3), (300, 1), (40, 1)];
        let seqs: Vec<_> = shapes
            .iter()
            .enumerate()
            .map(|(i, &(start, n))| {
                let ctx = start + n;
                let s = 10 * i as u64;
                (
                    start,
                    n,
                    noise(n * qd, s + 1),
                    noise(ctx * kvd, s + 2),
                    noise(ctx * kvd, s + 3),
                )
            })
            .collect();
        for isa in [Isa::Scalar, Isa::detect()] {
            // Two threads, so that the batched call splits tasks across sequences.
            let pool = Pool::new(2);
            let mut alone: Vec<Vec<f32>> = Vec::new();
            for (start, n, q, k, v) in &seqs {
                let mut o = vec![0f32; n * qd];
                attention(&pool, isa, q, k, v, hs, *start, *n, 0.25, &mut o);
                alone.push(o);
            }
            let mut outs: Vec<Vec<f32>> = seqs.iter().map(|s| vec![f32::NAN; s.1 * qd]).collect();
            let mut batch: Vec<AttnSeq<'_>> = seqs
                .iter()
                .zip(outs.iter_mut())
                .map(|((start, n, q, k, v), out)| AttnSeq {
                    q,
                    keys: k,
                    values: v,
                    start_pos: *start,
                    n_q: *n,
                    out,
                })
                .collect();
            attention_batch(&pool, isa, &mut batch, hs, 0.25);
            drop(batch);
            assert_eq!(outs, alone, "{isa:?}");
        }
    }
}
