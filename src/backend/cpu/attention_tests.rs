//! Attention on every path (one row, tiled) and kernel against a plain f64 reference.

use super::super::float16::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
use super::super::test_inputs::{isas_under_test, noise};
use super::*;
use crate::backend::{stored_keys, stored_values, KvBuf};

/// Largest difference allowed from the f64 reference: outputs are weighted means of values in
/// [-1, 1], off by a few f32 ulps of the weights (measured: at most 3.5e-7 up to 4,191 keys).
const MAX_ERR: f32 = 2e-6;

/// Largest difference allowed from the f64 reference for the bf16 and tile kernels, given the queries,
/// keys and values it multiplies (rounded to bf16): each weight is rounded to bf16 (a relative
/// error up to 2^-9) before the weighted mean of values in [-1, 1], whose normaliser sums the
/// rounded weights, so the mean moves by less than 2^-8 (measured: at most 1.4e-3, over the first keys).
const BF16_MAX_ERR: f32 = 1.0 / 256.0;

/// Each level with each cache format its kernels read for heads of `hd`: f16 everywhere, bf16
/// pairs and tiles wherever the CPU can multiply them, whichever format the model uses there
/// ([`kv_format`]), so that every kernel is tested on every CPU that runs it.
fn kernels_under_test(hd: usize) -> Vec<(Isa, KvFormat)> {
    isas_under_test()
        .into_iter()
        .flat_map(|isa| {
            [KvFormat::F16, KvFormat::Bf16Pairs, KvFormat::Bf16Tiles]
                .into_iter()
                .filter(move |&f| reads(isa, f, hd))
                .map(move |f| (isa, f))
        })
        .collect()
}

/// The reference's rows and its bound for a cache in `format`: the f16 cache's (the f32
/// kernels) or the bf16 kernel's (over the bf16 cache it reads).
fn pick<'a, T>(format: KvFormat, exact: &'a T, rounded: impl FnOnce() -> &'a T) -> (&'a T, f32) {
    if format != KvFormat::F16 {
        (rounded(), BF16_MAX_ERR)
    } else {
        (exact, MAX_ERR)
    }
}

/// [`attention`] of one sequence into a new buffer, over a cache in `format`.
#[allow(clippy::too_many_arguments)]
fn run(
    pool: &Pool,
    isa: Isa,
    format: KvFormat,
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    heads: Heads,
    start_pos: usize,
    n_q: usize,
    scale: f32,
) -> Vec<f32> {
    let mut out = vec![f32::NAN; n_q * heads.q_dim()];
    let keys = &stored_keys(keys, heads.kv_dim(), format);
    let values = &stored_values(values, heads.kv_dim(), format);
    let seq = AttnSeq { q, keys, values, format, start_pos, n_q, out: &mut out, window: None };
    attention(pool, isa, seq, heads, scale);
    out
}

/// Attention written out plainly in f64, for query rows `rows` (row `t` at `start + t`):
/// `(row, its q_dim outputs)`, over the keys and values an f16 cache holds, or with `bf16`
/// over the queries, keys and values the bf16 kernel multiplies (a bf16 cache holds each value
/// rounded to f16, then to bf16).
#[allow(clippy::too_many_arguments)]
fn reference(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    hs: Heads,
    start: usize,
    rows: &[usize],
    scale: f32,
    bf16: bool,
) -> Vec<(usize, Vec<f64>)> {
    let (qd, kvd, hd) = (hs.q_dim(), hs.kv_dim(), hs.head_dim);
    let b = |x: f32| if bf16 { bf16_to_f32(f32_to_bf16(x)) } else { x };
    let half = |x: &[f32]| -> Vec<f32> { x.iter().map(|&x| b(f16_to_f32(f32_to_f16(x)))).collect() };
    let (k, v) = (&half(k), &half(v));
    // The kernels take the queries times the scale (a power of two here, which rounding keeps).
    let q = &q.iter().map(|&x| b(x)).collect::<Vec<f32>>();
    rows.iter()
        .map(|&t| {
            let mut out = vec![0f64; qd];
            for h in 0..hs.n_heads {
                let kvh = h * hs.n_kv_heads / hs.n_heads;
                let s: Vec<f64> = (0..=start + t)
                    .map(|p| {
                        (0..hd).map(|d| q[t * qd + h * hd + d] as f64 * k[p * kvd + kvh * hd + d] as f64).sum::<f64>()
                            * scale as f64
                    })
                    .collect();
                let m = s.iter().cloned().fold(f64::MIN, f64::max);
                let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for d in 0..hd {
                    out[h * hd + d] = e.iter().enumerate().map(|(p, w)| w / z * v[p * kvd + kvh * hd + d] as f64).sum();
                }
            }
            (t, out)
        })
        .collect()
}

/// The largest difference between `out` and the reference's rows; a NaN counts as infinite
/// (`f32::max` would pass over it, and a lane the kernel never wrote comes out 0 / 0).
fn max_err(out: &[f32], want: &[(usize, Vec<f64>)]) -> f32 {
    let qd = want.first().map_or(0, |w| w.1.len());
    want.iter()
        .flat_map(|(t, w)| out[t * qd..(t + 1) * qd].iter().zip(w).map(|(a, b)| (*a as f64 - b).abs() as f32))
        .map(|d| if d.is_nan() { f32::INFINITY } else { d })
        .fold(0.0, f32::max)
}

#[test]
fn tiled_attention_matches_the_reference_at_every_row_count_isa_and_start() {
    // The demo model's head size and GQA group of 3.
    // From 600, a few rows' keys split by segment across tasks (1, 7), and many rows' merged
    // segment after segment in one task (64).
    for (n_q, n_heads, n_kv_heads) in [(1, 9, 3), (7, 9, 3), (64, 9, 3), (257, 6, 2), (4096, 3, 1)] {
        let hs = Heads { n_heads, n_kv_heads, head_dim: 64 };
        for start in [0, 95, 600].into_iter().filter(|&s| s < 600 || n_q <= 64) {
            let ctx = start + n_q;
            let seed = (n_q * 10 + start) as u64;
            let q: Vec<f32> = noise(n_q * hs.q_dim(), seed).iter().map(|v| v * 3.0).collect();
            let (k, v) = (noise(ctx * hs.kv_dim(), seed + 1), noise(ctx * hs.kv_dim(), seed + 2));
            // Every row of the small cases; of 4,096, a sample through every block position
            // and the last rows (the f64 reference of all of them would take long).
            let rows: Vec<usize> =
                if n_q <= 257 { (0..n_q).collect() } else { (0..n_q).step_by(97).chain(n_q - 9..n_q).collect() };
            let want = reference(&q, &k, &v, hs, start, &rows, 0.125, false);
            let want_bf16 = std::cell::OnceCell::new();
            for threads in [1, 2] {
                let pool = Pool::new(threads);
                for (isa, format) in kernels_under_test(64) {
                    let (want, bound) = pick(format, &want, || {
                        want_bf16.get_or_init(|| reference(&q, &k, &v, hs, start, &rows, 0.125, true))
                    });
                    let out = run(&pool, isa, format, &q, &k, &v, hs, start, n_q, 0.125);
                    let err = max_err(&out, want);
                    let what = format!("{} rows from {start}, {} {format:?} threads {threads}", n_q, isa.name());
                    assert!(err <= bound, "{what}: off by {err}");
                }
            }
        }
    }
}

#[test]
fn gqa_attention_matches_the_reference_at_odd_head_sizes_and_groups() {
    // Head sizes: 128, 72 (a partial column step), 20 (fewer columns than a step), 64; groups
    // of 3, 1, 8, 32 (more heads than a block's lanes), 4 and 2 (a row's block of 4 or 2 lanes);
    // a few rows after 1,100 positions are split by segment, and on one thread a call then holds
    // both units of the KV head of 32.
    let shapes = [(128, 6, 2), (72, 2, 2), (20, 8, 1), (64, 32, 1), (64, 8, 2), (64, 4, 2)];
    for (head_dim, n_heads, n_kv_heads) in shapes {
        let hs = Heads { n_heads, n_kv_heads, head_dim };
        for (n_q, start) in [(1, 9), (4, 9), (70, 9), (4, 1100)] {
            let ctx = start + n_q;
            let q: Vec<f32> = noise(n_q * hs.q_dim(), 1).iter().map(|v| v * 3.0).collect();
            let (k, v) = (noise(ctx * hs.kv_dim(), 2), noise(ctx * hs.kv_dim(), 3));
            let rows: Vec<usize> = (0..n_q).collect();
            let want = reference(&q, &k, &v, hs, start, &rows, 0.25, false);
            let want_bf16 = std::cell::OnceCell::new();
            for threads in [1, 2] {
                let pool = Pool::new(threads);
                for (isa, format) in kernels_under_test(head_dim) {
                    let (want, bound) = pick(format, &want, || {
                        want_bf16.get_or_init(|| reference(&q, &k, &v, hs, start, &rows, 0.25, true))
                    });
                    let err = max_err(&run(&pool, isa, format, &q, &k, &v, hs, start, n_q, 0.25), want);
                    let what = format!(
                        "{} {format:?} head_dim {head_dim} heads {n_heads}/{n_kv_heads} rows {n_q} threads {threads}",
                        isa.name()
                    );
                    assert!(err <= bound, "{what}: off by {err}");
                }
            }
        }
    }
}

/// Queries ten times the other tests' give scores spread by about 10, so a lane's largest score
/// keeps rising well past its first keys, by more than the AMX kernel's `LAZY_MAX` at times
/// (it then rescales the outputs it has so far: with that rescaling left out, this test fails).
/// Scores up to about 40 carry f32 rounding of about 40 x 2^-24 per term, which moves the f32
/// kernels' weights by more than [`MAX_ERR`] allows (measured 2.9e-6): they get 1e-5 here.
#[test]
fn attention_follows_scores_that_rise_far_above_the_earlier_ones() {
    let hs = Heads { n_heads: 6, n_kv_heads: 2, head_dim: 64 };
    for (n_q, start) in [(1, 300), (7, 300), (70, 0)] {
        let ctx = start + n_q;
        let q: Vec<f32> = noise(n_q * hs.q_dim(), 5).iter().map(|v| v * 30.0).collect();
        let (k, v) = (noise(ctx * hs.kv_dim(), 6), noise(ctx * hs.kv_dim(), 7));
        let rows: Vec<usize> = (0..n_q).collect();
        let want = reference(&q, &k, &v, hs, start, &rows, 0.125, false);
        let want_bf16 = std::cell::OnceCell::new();
        let pool = Pool::new(2);
        for (isa, format) in kernels_under_test(hs.head_dim) {
            let (want, bound) =
                pick(format, &want, || want_bf16.get_or_init(|| reference(&q, &k, &v, hs, start, &rows, 0.125, true)));
            let bound = if format == KvFormat::F16 { 1e-5 } else { bound };
            let err = max_err(&run(&pool, isa, format, &q, &k, &v, hs, start, n_q, 0.125), want);
            assert!(err <= bound, "{} {format:?} {n_q} rows from {start}: off by {err}", isa.name());
        }
    }
}

#[test]
fn a_rows_output_does_not_depend_on_the_rows_around_it() {
    // What a reused prefix relies on: the last prompt row alone (after a cached prefix) gives
    // the bits it gave inside the whole prompt's call, so greedy outputs do not change.
    // A single row takes the few-lane kernels (its block has 1-4 lanes: groups of 3, 1, 4 and
    // 2 heads); head sizes 20 and 72 take their partial column steps. From 600, the 21 rows run
    // in tasks over all their keys, segment after segment, and the parts of 1 to 12 rows in a
    // task per segment, merged after: the same bits either way.
    let shapes = [(9, 3, 64), (6, 2, 20), (2, 2, 72), (8, 2, 64), (4, 2, 64)];
    for ((n_heads, n_kv_heads, head_dim), start) in shapes.into_iter().flat_map(|h| [(h, 70), (h, 600)]) {
        let hs = Heads { n_heads, n_kv_heads, head_dim };
        let n_q = 21;
        let ctx = start + n_q;
        let q = noise(n_q * hs.q_dim(), 7);
        let (k, v) = (noise(ctx * hs.kv_dim(), 8), noise(ctx * hs.kv_dim(), 9));
        let qd = hs.q_dim();
        for (isa, format) in kernels_under_test(head_dim) {
            let pool = Pool::new(2);
            let all = run(&pool, isa, format, &q, &k, &v, hs, start, n_q, 0.125);
            for (t, n) in [(0, 1), (20, 1), (5, 3), (9, 12)] {
                let part = run(&pool, isa, format, &q[t * qd..(t + n) * qd], &k, &v, hs, start + t, n, 0.125);
                let what = format!("{} {format:?} {hs:?} rows {t}..{}", isa.name(), t + n);
                assert_eq!(part, &all[t * qd..(t + n) * qd], "{what}");
            }
        }
    }
}

#[test]
fn attention_is_causal() {
    let hs = Heads { n_heads: 2, n_kv_heads: 1, head_dim: 8 };
    let (q, k, mut v) = (noise(3 * 16, 4), noise(5 * 8, 5), noise(5 * 8, 6));
    let pool = Pool::new(1);
    for (isa, format) in kernels_under_test(hs.head_dim) {
        let a = run(&pool, isa, format, &q, &k, &v, hs, 2, 3, 0.3);
        let saved = v.clone();
        v[4 * 8..].fill(100.0); // position 4 is only visible to the last query row
        let b = run(&pool, isa, format, &q, &k, &v, hs, 2, 3, 0.3);
        v = saved;
        assert_eq!(&a[..32], &b[..32], "{} {format:?}", isa.name());
        assert_ne!(&a[32..], &b[32..], "{} {format:?}", isa.name());
    }
}

#[test]
fn batched_attention_equals_one_call_per_sequence() {
    let hs = Heads { n_heads: 4, n_kv_heads: 2, head_dim: 16 };
    let (qd, kvd) = (hs.q_dim(), hs.kv_dim());
    // (cached positions, new query rows): decode rows, a prefill chunk, a long context.
    let shapes = [(0, 1), (7, 3), (300, 1), (40, 1), (100, 20)];
    let seqs: Vec<_> = shapes
        .iter()
        .enumerate()
        .map(|(i, &(start, n))| {
            let ctx = start + n;
            let s = 10 * i as u64;
            (start, n, noise(n * qd, s + 1), noise(ctx * kvd, s + 2), noise(ctx * kvd, s + 3))
        })
        .collect();
    for (isa, format) in kernels_under_test(hs.head_dim) {
        // Two threads, so that the batched call splits tasks across sequences.
        let pool = Pool::new(2);
        let alone: Vec<Vec<f32>> =
            seqs.iter().map(|(start, n, q, k, v)| run(&pool, isa, format, q, k, v, hs, *start, *n, 0.25)).collect();
        let mut outs: Vec<Vec<f32>> = seqs.iter().map(|s| vec![f32::NAN; s.1 * qd]).collect();
        let keys: Vec<KvBuf> = seqs.iter().map(|s| stored_keys(&s.3, kvd, format)).collect();
        let values: Vec<KvBuf> = seqs.iter().map(|s| stored_values(&s.4, kvd, format)).collect();
        let mut batch: Vec<AttnSeq<'_>> = seqs
            .iter()
            .zip(keys.iter().zip(&values))
            .zip(outs.iter_mut())
            .map(|(((start, n, q, _, _), (k, v)), out)| AttnSeq {
                q,
                keys: k,
                values: v,
                format,
                start_pos: *start,
                n_q: *n,
                out,
                window: None,
            })
            .collect();
        attention_batch(&pool, isa, &mut batch, hs, 0.25);
        drop(batch);
        assert_eq!(outs, alone, "{isa:?} {format:?}");
    }
}

#[test]
fn an_f16_cache_is_read_at_every_level() {
    // A cache made before the backend was known, or for another backend, still works where the
    // kernel of choice reads bf16 pairs: the f32 kernels take it, to the f16 reference's bound.
    let hs = Heads { n_heads: 9, n_kv_heads: 3, head_dim: 64 };
    for (start, n_q) in [(0, 1), (300, 1), (5, 40)] {
        let ctx = start + n_q;
        let q: Vec<f32> = noise(n_q * hs.q_dim(), 11).iter().map(|v| v * 3.0).collect();
        let (k, v) = (noise(ctx * hs.kv_dim(), 12), noise(ctx * hs.kv_dim(), 13));
        let rows: Vec<usize> = (0..n_q).collect();
        let want = reference(&q, &k, &v, hs, start, &rows, 0.125, false);
        let pool = Pool::new(2);
        let (keys, values) =
            (stored_keys(&k, hs.kv_dim(), KvFormat::F16), stored_values(&v, hs.kv_dim(), KvFormat::F16));
        for isa in isas_under_test() {
            let mut out = vec![f32::NAN; n_q * hs.q_dim()];
            let seq = AttnSeq {
                q: &q,
                keys: &keys,
                values: &values,
                format: KvFormat::F16,
                start_pos: start,
                n_q,
                out: &mut out,
                window: None,
            };
            attention(&pool, isa, seq, hs, 0.125);
            let err = max_err(&out, &want);
            assert!(err <= MAX_ERR, "{} from {start}, {n_q} rows: off by {err}", isa.name());
        }
    }
}

/// One row's attention over 5 positions cached in `format`, at the scalar level.
fn attend_at_scalar(format: KvFormat) {
    let hs = Heads { n_heads: 3, n_kv_heads: 1, head_dim: 64 };
    let (k, v) = (noise(5 * hs.kv_dim(), 1), noise(5 * hs.kv_dim(), 2));
    let (keys, values) = (stored_keys(&k, hs.kv_dim(), format), stored_values(&v, hs.kv_dim(), format));
    let (q, mut out) = (noise(hs.q_dim(), 3), vec![0f32; hs.q_dim()]);
    let seq =
        AttnSeq { q: &q, keys: &keys, values: &values, format, start_pos: 4, n_q: 1, out: &mut out, window: None };
    attention(&Pool::new(1), Isa::Scalar, seq, hs, 0.125);
}

#[test]
#[should_panic(expected = "attention: a cache in Bf16Pairs at scalar")]
fn a_bf16_cache_is_refused_where_no_kernel_reads_it() {
    attend_at_scalar(KvFormat::Bf16Pairs);
}

#[test]
#[should_panic(expected = "attention: a cache in Bf16Tiles at scalar")]
fn a_tiles_cache_is_refused_where_no_kernel_reads_it() {
    attend_at_scalar(KvFormat::Bf16Tiles);
}
