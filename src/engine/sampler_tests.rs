//! The sampler's unit tests: greedy, seeds, each cut (top-k, top-p, min-p) and penalty against its
//! definition, logprobs, and sampling frequencies against the distribution.

use super::*;

fn params(f: impl FnOnce(&mut SamplingParams)) -> SamplingParams {
    let mut p = SamplingParams { seed: Some(7), ..Default::default() };
    f(&mut p);
    p
}

fn probs_logits(p: &[f32]) -> Vec<f32> {
    p.iter().map(|x| x.ln()).collect()
}

#[test]
fn fast_exp_is_accurate_over_the_sampled_range() {
    let mut worst = 0.0f64;
    for i in 0..=870_000 {
        let x = -(i as f32) * 1e-4;
        let exact = (x as f64).exp();
        worst = worst.max(((fast_exp(x) as f64) - exact).abs() / exact);
    }
    assert!(worst < 1e-6, "relative error {worst}");
    assert_eq!(fast_exp(0.0), 1.0);
    assert_eq!(fast_exp(f32::NEG_INFINITY), 0.0);
    assert_eq!(fast_exp(-200.0), 0.0);
}

#[test]
fn greedy_is_argmax_and_prefers_lowest_id_on_ties() {
    let mut s = Sampler::new(&SamplingParams::greedy());
    assert_eq!(s.sample(&[0.1, 3.0, -2.0, 2.9], false, 0).id, 1);
    assert_eq!(s.sample(&[5.0, 1.0, 5.0], false, 0).id, 0);
    assert_eq!(s.sample(&[-1.0, -0.5, -9.0, -0.5], false, 0).id, 1);
}

#[test]
fn greedy_over_a_large_vocabulary_is_the_first_strict_maximum() {
    // The reference: a plain scan that keeps the first strict maximum.
    let scan = |l: &[f32]| (0..l.len()).fold(0, |b, i| if l[i] > l[b] { i } else { b }) as u32;
    let mut seed = 7u64;
    for len in [1, 15, 16, 17, 49_152, 49_153] {
        for case in 0..6 {
            let mut l: Vec<f32> = (0..len)
                .map(|_| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    // Few distinct values, so that the maximum is often tied.
                    ((seed >> 33) % 50) as f32 / 7.0 - 3.0
                })
                .collect();
            match case {
                1 => l[len / 2] = f32::NAN,
                2 => l[0] = f32::NAN,
                3 => l.iter_mut().for_each(|v| *v = f32::NEG_INFINITY),
                4 => l[len - 1] = 1e9,
                5 => l[0] = 1e9,
                _ => {}
            }
            assert_eq!(crate::backend::math::argmax(&l), scan(&l), "length {len}, case {case}");
        }
    }
}

#[test]
fn same_seed_same_tokens_and_other_seed_differs() {
    let logits: Vec<f32> = (0..200).map(|i| ((i * 37 % 101) as f32) / 25.0).collect();
    let run = |seed| {
        let mut s = Sampler::new(&params(|p| p.seed = Some(seed)));
        (0..64).map(|_| s.sample(&logits, false, 0).id).collect::<Vec<_>>()
    };
    assert_eq!(run(42), run(42));
    assert_ne!(run(42), run(43));
}

#[test]
fn top_k_keeps_exactly_the_k_largest() {
    let logits = [0.5, 4.0, -1.0, 3.0, 2.0, 3.5, 0.0];
    let mut s = Sampler::new(&params(|p| p.top_k = 3));
    assert_eq!(s.kept_after_cuts(&logits), vec![1, 3, 5]);
    for _ in 0..200 {
        assert!([1, 3, 5].contains(&s.sample(&logits, false, 0).id));
    }
}

#[test]
fn top_p_keeps_the_smallest_set_reaching_the_mass() {
    let logits = probs_logits(&[0.05, 0.4, 0.1, 0.3, 0.15]);
    // Sorted: 0.4 (1), 0.3 (3), 0.15 (4), 0.1 (2), 0.05 (0).
    let kept = |top_p| Sampler::new(&params(|p| p.top_p = top_p)).kept_after_cuts(&logits);
    assert_eq!(kept(0.35), vec![1]);
    assert_eq!(kept(0.5), vec![1, 3]);
    assert_eq!(kept(0.8), vec![1, 3, 4]);
    assert_eq!(kept(0.9), vec![1, 2, 3, 4]);
    assert_eq!(kept(0.0), vec![1]);
}

#[test]
fn top_p_over_a_flat_distribution_is_exact() {
    // 300 equal tokens, all in one band: the nucleus of 0.5 is exactly 150 of them.
    let logits = vec![0.0f32; 300];
    let mut s = Sampler::new(&params(|p| p.top_p = 0.5));
    assert_eq!(s.kept_after_cuts(&logits).len(), 150);
}

#[test]
fn cuts_on_a_large_vocabulary_match_a_full_sort() {
    let mut rng = Rng::new(3);
    let logits: Vec<f32> = (0..5000).map(|_| (rng.next_f64() * 12.0 - 6.0) as f32).collect();
    let mut order: Vec<u32> = (0..5000).collect();
    order.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
    let sorted = |mut v: Vec<u32>| {
        v.sort_unstable();
        v
    };
    let mut s = Sampler::new(&params(|p| p.top_k = 50));
    assert_eq!(s.kept_after_cuts(&logits), sorted(order[..50].to_vec()));
    // Top-p by a naive cumulative sum over the fully sorted probabilities.
    let total: f64 = logits.iter().map(|&l| (l as f64).exp()).sum();
    let mut acc = 0.0;
    let n = order
        .iter()
        .position(|&i| {
            acc += (logits[i as usize] as f64).exp() / total;
            acc >= 0.6
        })
        .unwrap()
        + 1;
    assert!(n > 64, "a nucleus of {n} tokens spans several bands");
    let mut s = Sampler::new(&params(|p| p.top_p = 0.6));
    assert_eq!(s.kept_after_cuts(&logits), sorted(order[..n].to_vec()));
}

#[test]
fn top_p_applies_after_top_k_renormalises() {
    let logits = probs_logits(&[0.5, 0.2, 0.2, 0.1]);
    // Top-k 2 leaves {0: 0.5, 1 or 2: 0.2}; tie broken by id, so {0, 1}: 0.714 / 0.286.
    let mut s = Sampler::new(&params(|p| {
        p.top_k = 2;
        p.top_p = 0.7;
    }));
    assert_eq!(s.kept_after_cuts(&logits), vec![0]);
    let mut s = Sampler::new(&params(|p| {
        p.top_k = 2;
        p.top_p = 0.75;
    }));
    assert_eq!(s.kept_after_cuts(&logits), vec![0, 1]);
}

#[test]
fn min_p_keeps_tokens_above_the_scaled_maximum() {
    let logits = probs_logits(&[0.5, 0.2, 0.06, 0.24]);
    let kept = |m| Sampler::new(&params(|p| p.min_p = m)).kept_after_cuts(&logits);
    assert_eq!(kept(0.45), vec![0, 3]);
    assert_eq!(kept(0.3), vec![0, 1, 3]);
    assert_eq!(kept(0.1), vec![0, 1, 2, 3]);
    assert_eq!(kept(1.0), vec![0]);
}

#[test]
fn temperature_sharpens_before_the_cuts() {
    // Probabilities 0.6/0.4 at T=1; at T=0.5 they become 0.6923/0.3077, so min-p 0.5 drops
    // token 1 only at the lower temperature.
    let logits = probs_logits(&[0.6, 0.4]);
    let mut s = Sampler::new(&params(|p| p.min_p = 0.5));
    assert_eq!(s.kept_after_cuts(&logits), vec![0, 1]);
    let mut s = Sampler::new(&params(|p| {
        p.min_p = 0.5;
        p.temperature = 0.5;
    }));
    assert_eq!(s.kept_after_cuts(&logits), vec![0]);
}

#[test]
fn penalties_shift_logits_of_generated_tokens() {
    // Token 0 leads by 1.0. Presence 0.6 alone is not enough after one generation of 0;
    // presence 0.6 + frequency 0.5 is (1.1 > 1.0). Greedy shows which logit is larger.
    let logits = [2.0, 1.0, 0.0];
    let mut s = Sampler::new(&params(|p| {
        p.temperature = 0.0;
        p.presence_penalty = 0.6;
    }));
    assert_eq!(s.sample(&logits, false, 0).id, 0);
    assert_eq!(s.sample(&logits, false, 0).id, 0);
    let mut s = Sampler::new(&params(|p| {
        p.temperature = 0.0;
        p.presence_penalty = 0.6;
        p.frequency_penalty = 0.5;
    }));
    assert_eq!(s.sample(&logits, false, 0).id, 0);
    assert_eq!(s.sample(&logits, false, 0).id, 1);
    // Counts now 0:1, 1:1 -> 0: 2.0-1.1=0.9, 1: 1.0-1.1=-0.1, 2: 0.0 -> 0 again.
    assert_eq!(s.sample(&logits, false, 0).id, 0);
    // A negative penalty encourages repetition: once generated, token 0 beats a larger logit.
    let mut s = Sampler::new(&params(|p| {
        p.temperature = 0.0;
        p.frequency_penalty = -3.0;
    }));
    let logits = [1.0, 0.0];
    assert_eq!(s.sample(&logits, false, 0).id, 0);
    assert_eq!(s.sample(&[0.0, 2.0], false, 0).id, 0);
}

#[test]
fn logprobs_are_raw_log_softmax_and_top_lists_are_sorted() {
    let logits = [1.0f32, 3.0, 2.0, 0.5];
    let lse = (logits.iter().map(|l| (*l as f64).exp()).sum::<f64>()).ln() as f32;
    let mut s = Sampler::new(&params(|p| {
        p.temperature = 0.0;
        p.presence_penalty = 5.0;
    }));
    let a = s.sample(&logits, true, 2);
    assert_eq!(a.id, 1);
    assert!((a.logprob - (3.0 - lse)).abs() < 1e-5);
    assert_eq!(a.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 2]);
    assert!((a.top[1].1 - (2.0 - lse)).abs() < 1e-5);
    // The penalty moved the choice to token 2, but its logprob is still the raw one.
    let b = s.sample(&logits, true, 30);
    assert_eq!(b.id, 2);
    assert!((b.logprob - (2.0 - lse)).abs() < 1e-5);
    assert_eq!(b.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 2, 0, 3]);
}

#[test]
fn sampling_frequencies_follow_the_distribution() {
    let logits = probs_logits(&[0.7, 0.2, 0.1]);
    let mut s = Sampler::new(&params(|_| {}));
    let mut n = [0usize; 3];
    for _ in 0..20_000 {
        n[s.sample(&logits, false, 0).id as usize] += 1;
    }
    let f: Vec<f64> = n.iter().map(|&c| c as f64 / 20_000.0).collect();
    assert!((f[0] - 0.7).abs() < 0.02 && (f[1] - 0.2).abs() < 0.02 && (f[2] - 0.1).abs() < 0.02, "{f:?}");
}
