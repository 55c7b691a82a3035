//! Speculative decoding through the real scheduler on toy models: greedy output token for token
//! the plain output at every depth, mixed with plain sequences in one batch; sampled output
//! distributed as plain sampling, with and without a grammar; the cache after rejections as good
//! as a fresh prefill; and the sampler's verification rule against its definition.

use super::draft::{Depth, DraftConfig, DraftMode, DraftRequest};
use super::job::{Event, FinishReason, Job, JobSpec, SamplingParams};
use super::sampler::Sampler;
use super::toy_model::*;
use super::{Engine, EngineConfig, StepBudget};
use crate::engine::detok::tests::ByteDecoder;
use std::sync::Arc;

const PERIOD: usize = 5;

fn echo_model() -> Arc<ToyModel> {
    Arc::new(ToyModel::new(Gate::open_gate()).echoing(PERIOD))
}

fn engine(model: &Arc<ToyModel>, draft: DraftConfig) -> Engine {
    let cfg = EngineConfig {
        queue_depth: 64,
        ctx: 1024,
        kv_cache_bytes: 1 << 26,
        budget: StepBudget::default(),
        draft,
        prior: Default::default(),
        disk: None,
    };
    Engine::start(model.clone(), Arc::new(ByteDecoder), cfg)
}

fn job(
    prompt: Vec<u32>,
    params: SamplingParams,
    n: usize,
    draft: DraftRequest,
) -> (Job, async_channel::Receiver<Event>) {
    JobSpec { draft, ..JobSpec::new(prompt, params, n) }.build()
}

fn prompt(i: u32) -> Vec<u32> {
    (0..12).map(|j| (j * 7 + i * 13) % 50 + 1).collect()
}

#[test]
fn greedy_output_is_the_plain_output_at_every_depth() {
    let model = echo_model();
    let plain: Vec<Vec<u32>> = (0..3).map(|i| greedy_on(&model, &prompt(i), 60, &[])).collect();
    for depth in 1..=4 {
        let e = engine(&model, DraftConfig { mode: DraftMode::Ngram, depth: Depth::Fixed(depth) });
        let mut drafted = 0;
        let mut corrected = 0;
        for (i, want) in plain.iter().enumerate() {
            let (j, rx) = job(prompt(i as u32), SamplingParams::greedy(), 60, DraftRequest::default());
            e.submit(j).unwrap();
            let o = collect(&rx);
            assert_eq!(&o.tokens, want, "depth {depth}, prompt {i}");
            assert_eq!(o.finish, FinishReason::Length);
            let sp = &o.stats.spec;
            assert_eq!(sp.drafter, "ngram");
            assert!(sp.accepted <= sp.drafted && sp.drafted <= sp.verify_calls * depth, "{sp:?}");
            assert!(sp.accepted + sp.correction + sp.bonus <= 60, "{sp:?}");
            assert_eq!(sp.drafted_by_depth.iter().sum::<u64>() as usize, sp.accepted + sp.correction);
            drafted += sp.drafted;
            corrected += sp.correction;
        }
        assert!(drafted > 30, "depth {depth}: the echoing model should give n-gram drafts ({drafted})");
        assert!(corrected > 0, "depth {depth}: some drafts should have been rejected");
    }
}

#[test]
fn drafting_and_plain_sequences_share_steps_and_each_gets_its_plain_output() {
    // The model waits until all four are submitted: on a busy machine the first could otherwise
    // finish alone before the next arrives.
    let model = Arc::new(ToyModel::new(Gate::closed()).echoing(PERIOD));
    let open = OpenOnDrop(model.clone());
    let e = engine(&model, DraftConfig { mode: DraftMode::Ngram, depth: Depth::Auto });
    let modes = [None, Some(DraftMode::None), Some(DraftMode::Ngram), Some(DraftMode::None)];
    let rxs: Vec<_> = (0..4)
        .map(|i| {
            let req = DraftRequest { mode: modes[i], max_depth: (i == 2).then_some(3) };
            let (j, rx) = job(prompt(i as u32), SamplingParams::greedy(), 50, req);
            e.submit(j).unwrap();
            rx
        })
        .collect();
    drop(open);
    for (i, rx) in rxs.iter().enumerate() {
        let o = collect(rx);
        assert_eq!(o.tokens, greedy_on(&model, &prompt(i as u32), 50, &[]), "sequence {i}");
        let sp = &o.stats.spec;
        if modes[i] == Some(DraftMode::None) {
            assert_eq!((sp.drafter, sp.drafted), ("", 0));
        } else {
            assert!(sp.drafted > 0, "sequence {i}: {sp:?}");
        }
        if i == 2 {
            assert!(sp.drafted_by_depth.len() <= 3, "the request capped its depth at 3: {sp:?}");
        }
        assert!(o.stats.max_batch >= 2);
    }
}

#[test]
fn the_cache_after_rejections_gives_the_logits_of_a_fresh_prefill() {
    let model = echo_model();
    let e = engine(&model, DraftConfig { mode: DraftMode::Ngram, depth: Depth::Fixed(4) });
    let ask = |e: &Engine, p: Vec<u32>| {
        let mut spec = JobSpec::new(p, SamplingParams::greedy(), 40);
        spec.logprobs = Some(5);
        let (j, rx) = spec.build();
        e.submit(j).unwrap();
        collect(&rx)
    };
    let first = ask(&e, prompt(1));
    assert!(first.stats.spec.correction > 0, "{:?}", first.stats.spec);
    assert!(first.stats.spec.rollback_time > std::time::Duration::ZERO, "rejections were rolled back untimed");
    // The next turn reuses the cache that verification rolled back; it must hold exactly the
    // prompt and every answer token but the last.
    let mut turn = prompt(1);
    turn.extend(&first.tokens);
    turn.extend([3, 4]);
    let reused = ask(&e, turn.clone());
    assert_eq!(reused.stats.cached_tokens, prompt(1).len() + first.tokens.len() - 1);
    let plain = engine(&echo_model(), DraftConfig { mode: DraftMode::None, depth: Depth::Auto });
    let fresh = ask(&plain, turn);
    assert_eq!(fresh.stats.cached_tokens, 0);
    assert_eq!(reused.tokens, fresh.tokens);
    assert_eq!(reused.logprobs, fresh.logprobs);
    assert_eq!(reused.tops, fresh.tops);
}

#[test]
fn a_sequence_cancelled_between_verify_passes_ends_cancelled_and_frees_its_cache() {
    let model = Arc::new(ToyModel::new(Gate::closed()).echoing(PERIOD));
    let _open = OpenOnDrop(model.clone());
    let e = engine(&model, DraftConfig { mode: DraftMode::Ngram, depth: Depth::Fixed(4) });
    let o = cancel_after(&model, &e, job(prompt(2), SamplingParams::greedy(), 500, DraftRequest::default()), 12);
    assert_eq!(o.finish, FinishReason::Cancelled);
    let sp = &o.stats.spec;
    assert!(sp.verify_calls > 0 && sp.drafted > 0 && sp.accepted > 0, "{sp:?}");
    assert!(!o.tokens.is_empty() && o.tokens.len() < 13 * 5, "{} tokens", o.tokens.len());
    assert_eq!((o.stats.kv_after.sequences, o.stats.kv_after.bytes), (0, 0));
    assert_eq!(e.running(), 0);
}

#[test]
fn a_seeded_sampled_request_decodes_plainly_unless_it_asks_for_a_drafter() {
    let model = echo_model();
    let e = engine(&model, DraftConfig { mode: DraftMode::Ngram, depth: Depth::Auto });
    let sampled = SamplingParams { temperature: 0.8, seed: Some(3), ..Default::default() };
    let run = |draft: DraftRequest| {
        let (j, rx) = job(prompt(4), sampled.clone(), 40, draft);
        e.submit(j).unwrap();
        collect(&rx)
    };
    let (a, b) = (run(DraftRequest::default()), run(DraftRequest::default()));
    assert_eq!(a.tokens, b.tokens, "the same seed gives the same text");
    assert_eq!((a.stats.spec.drafter, a.stats.spec.drafted), ("", 0));
    let asked = run(DraftRequest { mode: Some(DraftMode::Ngram), max_depth: None });
    assert!(asked.stats.spec.drafted > 0, "{:?}", asked.stats.spec);
}

#[test]
fn stop_tokens_and_lengths_end_a_speculating_sequence_exactly_where_plain_decoding_does() {
    let model = Arc::new(ToyModel::new(Gate::open_gate()).echoing(PERIOD));
    let want = greedy_on(&model, &prompt(2), 40, &[]);
    // Stop at the first token that appears for the second time: it is likely a drafted one.
    let stop = *want.iter().enumerate().find(|&(i, t)| want[..i].contains(t)).map(|(_, t)| t).unwrap();
    let e = engine(&model, DraftConfig { mode: DraftMode::Ngram, depth: Depth::Fixed(4) });
    let mut spec = JobSpec::new(prompt(2), SamplingParams::greedy(), 40);
    spec.stop_tokens = vec![stop];
    let (j, rx) = spec.build();
    e.submit(j).unwrap();
    let o = collect(&rx);
    assert_eq!(o.finish, FinishReason::Stop);
    assert_eq!(o.tokens, greedy_on(&model, &prompt(2), 40, &[stop]).split_last().unwrap().1.to_vec());
    for n in [1, 2, 7, 13] {
        let (j, rx) = job(prompt(3), SamplingParams::greedy(), n, DraftRequest::default());
        e.submit(j).unwrap();
        let o = collect(&rx);
        assert_eq!(o.tokens, greedy_on(&model, &prompt(3), n, &[]), "max_tokens {n}");
        assert_eq!(o.finish, FinishReason::Length);
    }
}

/// Pearson's chi-square of `counts` against probabilities `p` (cells with expected count under
/// 5 pooled), with its degrees of freedom.
fn chi_square(counts: &[u64], p: &[f64]) -> (f64, usize) {
    let n: u64 = counts.iter().sum();
    let (mut chi, mut cells, mut pool_c, mut pool_e) = (0.0, 0usize, 0.0, 0.0);
    for (&c, &pi) in counts.iter().zip(p) {
        let e = pi * n as f64;
        if e < 5.0 {
            pool_c += c as f64;
            pool_e += e;
            continue;
        }
        chi += (c as f64 - e).powi(2) / e;
        cells += 1;
    }
    if pool_e > 0.0 {
        chi += (pool_c - pool_e).powi(2) / pool_e.max(1e-9);
        cells += 1;
    }
    (chi, cells.saturating_sub(1))
}

/// The chi-square value a correct sampler exceeds with probability about 1e-4 (Wilson and
/// Hilferty's approximation), so a flaky failure is rare and a wrong rule still fails.
fn chi_bound(df: usize) -> f64 {
    let k = df as f64;
    let z = 3.72;
    k * (1.0 - 2.0 / (9.0 * k) + z * (2.0 / (9.0 * k)).sqrt()).powi(3)
}

/// The probabilities the sampler draws from for `logits` under `params` (no penalties): softmax
/// at the temperature, then the nucleus, computed here from the definition.
fn target(logits: &[f32], params: &SamplingParams) -> Vec<f64> {
    let w: Vec<f64> = logits.iter().map(|&l| ((l / params.temperature) as f64).exp()).collect();
    let total: f64 = w.iter().sum();
    let mut order: Vec<usize> = (0..w.len()).collect();
    order.sort_by(|&a, &b| w[b].total_cmp(&w[a]));
    let mut keep = vec![false; w.len()];
    let mut acc = 0.0;
    for &i in &order {
        keep[i] = true;
        acc += w[i] / total;
        if acc >= params.top_p as f64 {
            break;
        }
    }
    let kept: f64 = (0..w.len()).filter(|&i| keep[i]).map(|i| w[i]).sum();
    (0..w.len()).map(|i| if keep[i] { w[i] / kept } else { 0.0 }).collect()
}

#[test]
fn verification_draws_exactly_from_the_target_for_good_bad_and_point_mass_drafts() {
    let logits: Vec<f32> = (0..24).map(|i| ((i * 7 % 11) as f32) * 0.35 - (i as f32) * 0.05).collect();
    let n = 40_000;
    for params in [
        SamplingParams { temperature: 1.0, seed: Some(1), ..Default::default() },
        SamplingParams { temperature: 0.7, top_p: 0.9, seed: Some(2), ..Default::default() },
    ] {
        let p = target(&logits, &params);
        // A good draft distribution (close to p), a bad one (mass on unlikely tokens), and the
        // n-gram drafter's point mass on a likely and on an unlikely token.
        let good: Vec<(u32, f32)> =
            p.iter().enumerate().map(|(i, &x)| (i as u32, (0.8 * x + 0.2 / 24.0) as f32)).collect();
        let bad: Vec<(u32, f32)> = (0..24).map(|i| (i as u32, if i >= 18 { 1.0 / 6.0 } else { 0.0 })).collect();
        let likely = (0..24).max_by(|&a, &b| p[a].total_cmp(&p[b])).unwrap() as u32;
        for (name, q) in [("good", Some(good)), ("bad", Some(bad)), ("likely", None), ("unlikely", None)] {
            let mut draft_rng = super::sampler::Rng::new(99);
            let mut s = Sampler::new(&params);
            let mut counts = vec![0u64; 24];
            let mut accepted = 0;
            for _ in 0..n {
                let d = match (&q, name) {
                    (Some(q), _) => {
                        let mut u = draft_rng.next_f64() * q.iter().map(|e| e.1 as f64).sum::<f64>();
                        q.iter()
                            .find(|e| {
                                u -= e.1 as f64;
                                u < 0.0
                            })
                            .map_or(q[q.len() - 1].0, |e| e.0)
                    }
                    (None, "likely") => likely,
                    (None, _) => 23,
                };
                let (picked, ok) = s.verify(&logits, d, q.as_deref(), false, 0);
                counts[picked.id as usize] += 1;
                accepted += ok as usize;
            }
            let (chi, df) = chi_square(&counts, &p);
            assert!(chi < chi_bound(df), "{name} draft at {params:?}: chi-square {chi:.1} over {df} df");
            // Kept with probability sum_x min(p(x), q(x)): the overlap of the two distributions.
            let overlap: f64 = match (&q, name) {
                (Some(q), _) => {
                    let z: f64 = q.iter().map(|e| e.1 as f64).sum();
                    q.iter().map(|e| p[e.0 as usize].min(e.1 as f64 / z)).sum()
                }
                (None, "likely") => p[likely as usize],
                (None, _) => p[23],
            };
            let sd = (n as f64 * overlap * (1.0 - overlap)).sqrt().max(1.0);
            assert!(
                (accepted as f64 - n as f64 * overlap).abs() < 5.0 * sd,
                "{name}: {accepted} of {n} kept, {overlap:.3} expected"
            );
        }
    }
}

#[test]
fn sampled_output_through_the_engine_is_distributed_as_plain_sampling() {
    // The second generated token is a verified one whenever the first let the drafter guess;
    // its distribution must not depend on drafting. Two samples, one of each, compared.
    let model = echo_model();
    let params = |seed| SamplingParams { temperature: 1.0, seed: Some(seed), ..Default::default() };
    let runs = 3000;
    // Cells: the prompt, and whether the second token echoes the one a period back (what the
    // drafts propose, so where a wrong acceptance rule would show).
    let mut hist = [vec![0u64; 100], vec![0u64; 100]];
    let mut drafted = 0;
    for (k, mode) in [DraftMode::None, DraftMode::Ngram].into_iter().enumerate() {
        let e = engine(&model, DraftConfig { mode, depth: Depth::Fixed(3) });
        for seed in 0..runs {
            // A prompt that already repeats, so drafting starts at once; fifty of them, the same
            // mix in both samples, since the toy's echo is a function of the whole context.
            let p: Vec<u32> =
                (0..10).map(|j| ((seed % 50) as u32 * 7 + [5, 9, 14, 2, 7][j % PERIOD]) % 290 + 1).collect();
            // Seeded sampling drafts only when the request asks for a drafter.
            let req = DraftRequest { mode: Some(mode), max_depth: None };
            let (j, rx) = job(p.clone(), params(seed * 2 + k as u64), 3, req);
            e.submit(j).unwrap();
            let o = collect(&rx);
            let echoed = o.tokens[1] == p[11 - PERIOD];
            hist[k][(seed % 50) as usize * 2 + echoed as usize] += 1;
            drafted += o.stats.spec.drafted;
        }
    }
    assert!(drafted > runs as usize / 4, "too few drafts were verified: {drafted}");
    // Two-sample chi-square over the cells either sample visits at least 10 times.
    let (mut chi, mut df) = (0.0, 0usize);
    for (&a, &b) in hist[0].iter().zip(&hist[1]) {
        let (a, b) = (a as f64, b as f64);
        if a + b >= 10.0 {
            chi += (a - b).powi(2) / (a + b);
            df += 1;
        }
    }
    assert!(chi < chi_bound(df.saturating_sub(1).max(1)), "chi-square {chi:.1} over {df} cells");
}

#[test]
fn under_a_grammar_sampled_output_is_distributed_as_plain_sampling() {
    use super::constraint::{Grammar, GrammarVocab};
    // The toy's ids below 256 spell their byte; the rest are control tokens, the last the end.
    let eos = TOY_VOCAB as u32 - 1;
    let tokens: Vec<Vec<u8>> =
        (0..TOY_VOCAB).map(|i| if i < 256 { vec![i as u8] } else { format!("\u{ff}<toy{i}>").into_bytes() }).collect();
    let vocab = GrammarVocab::from_bytes(&tokens, &[eos]).unwrap();
    let grammar = Grammar::Lark("start: /[a-h]{4}/".into());
    let model = echo_model();
    let params = |seed| SamplingParams { temperature: 1.0, seed: Some(seed), ..Default::default() };
    let (runs, prompts) = (4000u64, 4u64);
    let letter = |i: u64| b'a' as u32 + (i % 8) as u32;
    // Cells: the prompt, and the letter at generated position 1, then at position 2 (both come
    // from verify rows whenever a draft was made).
    let mut hist = [[vec![0u64; 32], vec![0u64; 32]], [vec![0u64; 32], vec![0u64; 32]]];
    let mut drafted = 0;
    for (k, mode) in [DraftMode::None, DraftMode::Ngram].into_iter().enumerate() {
        let e = engine(&model, DraftConfig { mode, depth: Depth::Fixed(3) });
        for seed in 0..runs {
            // The prompt repeats with the toy's period and holds a byte the grammar forbids, so
            // the model puts most of its mass on that byte every fifth position and the n-gram
            // drafts propose it: the mask must take that mass away and the cut must be exact.
            let v = seed % prompts;
            let unit = [letter(v), letter(v + 3), 200 + v as u32, letter(v + 5), letter(v + 1)];
            let p: Vec<u32> = unit.iter().chain(&unit).copied().collect();
            let spec = JobSpec {
                draft: DraftRequest { mode: Some(mode), max_depth: None },
                constraint: Some(vocab.compile(&grammar).unwrap()),
                ..JobSpec::new(p, params(seed * 2 + k as u64), 6)
            };
            let (j, rx) = spec.build();
            e.submit(j).unwrap();
            let o = collect(&rx);
            assert_eq!(o.tokens.len(), 4, "the grammar ends the answer at four letters: {:?}", o.tokens);
            assert!(o.tokens.iter().all(|t| (b'a' as u32..=b'h' as u32).contains(t)), "{:?}", o.tokens);
            assert_eq!(o.finish, FinishReason::Stop);
            for (pos, h) in hist[k].iter_mut().enumerate() {
                h[(v * 8) as usize + (o.tokens[pos + 1] - b'a' as u32) as usize] += 1;
            }
            drafted += o.stats.spec.drafted;
        }
    }
    assert!(drafted > runs as usize / 4, "too few drafts were verified: {drafted}");
    let [plain, drafting] = &hist;
    for (pos, (plain, drafting)) in plain.iter().zip(drafting).enumerate() {
        let (mut chi, mut df) = (0.0, 0usize);
        for (&a, &b) in plain.iter().zip(drafting) {
            let (a, b) = (a as f64, b as f64);
            if a + b >= 10.0 {
                chi += (a - b).powi(2) / (a + b);
                df += 1;
            }
        }
        assert!(
            chi < chi_bound(df.saturating_sub(1).max(1)),
            "position {}: chi-square {chi:.1} over {df} cells",
            pos + 1
        );
    }
}

#[test]
fn verification_under_a_mask_draws_from_the_masked_target_whatever_the_draft() {
    // A mask as a grammar leaves it: the upper half of the vocabulary forbidden. Drafts that put
    // their mass there (an unmasked head, a point mass on a forbidden id) must be rejected by the
    // rule itself, and what comes out is the masked target.
    let mut logits: Vec<f32> = (0..24).map(|i| ((i * 5 % 7) as f32) * 0.4).collect();
    logits[12..].fill(f32::NEG_INFINITY);
    let params = SamplingParams { temperature: 1.0, seed: Some(3), ..Default::default() };
    let p = target(&logits, &params);
    // Half its mass forbidden, half on two allowed ids, more than the target gives them.
    let head: Vec<(u32, f32)> = (0..24)
        .map(|i| {
            (
                i as u32,
                if i >= 12 {
                    0.5 / 12.0
                } else if i < 2 {
                    0.25
                } else {
                    0.0
                },
            )
        })
        .collect();
    let n = 40_000;
    for (name, q) in [("unmasked head", Some(head)), ("forbidden point mass", None)] {
        let mut draft_rng = super::sampler::Rng::new(7);
        let mut s = Sampler::new(&params);
        let mut counts = [0u64; 24];
        for _ in 0..n {
            let d = match &q {
                Some(q) => {
                    let mut u = draft_rng.next_f64() * q.iter().map(|e| e.1 as f64).sum::<f64>();
                    q.iter()
                        .find(|e| {
                            u -= e.1 as f64;
                            u < 0.0
                        })
                        .map_or(23, |e| e.0)
                }
                None => 20,
            };
            let (picked, ok) = s.verify(&logits, d, q.as_deref(), false, 0);
            assert!(!(ok && d >= 12), "{name}: forbidden draft {d} kept");
            counts[picked.id as usize] += 1;
        }
        assert!(counts[12..].iter().all(|&c| c == 0), "{name}: a forbidden id came out");
        let (chi, df) = chi_square(&counts[..12], &p[..12]);
        assert!(chi < chi_bound(df), "{name}: chi-square {chi:.1} over {df} df");
    }
}
