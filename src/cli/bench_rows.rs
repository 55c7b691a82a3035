//! `mtplx-lite bench --rows 1,2,3,4,5,8`: the cost of a forward pass over k rows against a pass
//! over 1 row, for one sequence feeding k tokens (speculative verification, prefill) and for k
//! sequences feeding one token each (continuous batching). Speculative decoding and its `tune`
//! command read the same ratios.
//!
//! Every pass starts from the same context length, so that attention costs the same in every
//! repetition: each sequence is prefilled once, and rolled back to that length after each pass.
//! The k values are measured in turns within each repetition, so that a machine that slows down
//! during the run (frequency, a neighbour) shifts every k alike rather than the last ones only.

use mtplx_lite::model::{KvCache, LogitsWanted, Model, SeqBatch};
use std::time::Instant;

/// Positions in every sequence's cache before a measured pass, unless told: a short chat turn.
pub const DEFAULT_CONTEXT: usize = 64;

/// Median seconds of one pass, per k, for both shapes.
pub struct RowCosts {
    pub rows: Vec<usize>,
    /// One sequence, k tokens, logits for all of them (the verification pass).
    pub one_seq: Vec<f64>,
    /// k sequences, one token each.
    pub k_seqs: Vec<f64>,
}

fn prefilled(model: &dyn Model, context: usize, capacity: usize, salt: usize) -> KvCache {
    let vocab = model.info().vocab_size.max(1);
    let toks: Vec<u32> = (0..context).map(|i| ((i * 7919 + 13 + salt * 101) % vocab) as u32).collect();
    let mut cache = model.new_cache(capacity);
    model.forward(&mut [SeqBatch { tokens: &toks, cache: &mut cache, logits: LogitsWanted::Last }]).expect("prefill");
    cache
}

fn timed(f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Measures `reps` passes of each shape for each k in `rows`, each after `context` positions.
pub fn measure(model: &dyn Model, rows: &[usize], reps: usize, context: usize) -> RowCosts {
    let context = context.max(1);
    let kmax = rows.iter().copied().max().unwrap_or(1);
    let vocab = model.info().vocab_size.max(1);
    let tokens: Vec<u32> = (0..kmax).map(|i| ((i * 613 + 7) % vocab) as u32).collect();
    let mut one = prefilled(model, context, context + kmax, 0);
    let mut many: Vec<KvCache> = (0..kmax).map(|s| prefilled(model, context, context + 1, s + 1)).collect();
    let mut t_one = vec![Vec::with_capacity(reps); rows.len()];
    let mut t_many = vec![Vec::with_capacity(reps); rows.len()];
    for rep in 0..reps + 1 {
        for (j, &k) in rows.iter().enumerate() {
            let a = timed(|| {
                let mut b = [SeqBatch { tokens: &tokens[..k], cache: &mut one, logits: LogitsWanted::All }];
                model.forward(&mut b).expect("k-row pass");
            });
            one.truncate(context);
            let b = timed(|| {
                let mut batch: Vec<SeqBatch<'_>> = many[..k]
                    .iter_mut()
                    .zip(&tokens)
                    .map(|(cache, t)| SeqBatch { tokens: std::slice::from_ref(t), cache, logits: LogitsWanted::Last })
                    .collect();
                model.forward(&mut batch).expect("k-sequence pass");
            });
            many[..k].iter_mut().for_each(|c| c.truncate(context));
            // The first round warms caches and the pool: not counted.
            if rep > 0 {
                t_one[j].push(a);
                t_many[j].push(b);
            }
        }
    }
    RowCosts {
        rows: rows.to_vec(),
        one_seq: t_one.into_iter().map(median).collect(),
        k_seqs: t_many.into_iter().map(median).collect(),
    }
}

/// The table `bench --rows` prints: milliseconds per pass and the ratio to the 1-row pass.
pub fn table(name: &str, threads: usize, c: &RowCosts) -> String {
    let base = |v: &[f64]| c.rows.iter().position(|&k| k == 1).map_or(v[0], |j| v[j]);
    let (b1, bk) = (base(&c.one_seq), base(&c.k_seqs));
    let mut s = String::from(
        "| model | threads | rows | 1 seq x k tokens: ms | ratio | k seqs x 1 token: ms | ratio | k seqs: aggregate vs 1 |\n",
    );
    s.push_str("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (j, &k) in c.rows.iter().enumerate() {
        let (a, b) = (c.one_seq[j], c.k_seqs[j]);
        s.push_str(&format!(
            "| {name} | {threads} | {k} | {:.3} | {:.2}x | {:.3} | {:.2}x | {:.2}x |\n",
            a * 1e3,
            a / b1,
            b * 1e3,
            b / bk,
            k as f64 * bk / b
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_are_against_the_one_row_pass_and_aggregate_counts_every_sequence() {
        let c = RowCosts { rows: vec![1, 4], one_seq: vec![0.010, 0.015], k_seqs: vec![0.010, 0.020] };
        let t = table("m", 2, &c);
        let line = t.lines().find(|l| l.contains("| 4 |")).expect("a row for k = 4");
        assert!(line.contains("| 1.50x |") && line.contains("| 2.00x | 2.00x |"), "{line}");
    }

    #[test]
    fn the_median_ignores_one_slow_outlier() {
        assert_eq!(median(vec![1.0, 9.0, 2.0]), 2.0);
    }
}
