//! The engine's public face: queueing, admission against the KV budget, cancellation, stats and
//! shutdown, on the toy model.

use super::*;
use crate::engine::detok::tests::ByteDecoder;
use crate::engine::job::{Event, FinishReason, SamplingParams};
use crate::engine::step_budget::{DEFAULT_MAX_BATCH_TOKENS, DEFAULT_PREFILL_CHUNK};
use crate::engine::toy_model::*;

fn engine(model: &Arc<ToyModel>, queue_depth: usize, ctx: usize, kv_cache_bytes: usize) -> Engine {
    let cfg = EngineConfig {
        queue_depth,
        ctx,
        kv_cache_bytes,
        budget: StepBudget::default(),
        draft: DraftConfig::default(),
        prior: Default::default(),
        disk: None,
    };
    Engine::start(model.clone(), Arc::new(ByteDecoder), cfg)
}

fn greedy(prompt: Vec<u32>, max_tokens: usize) -> (Job, async_channel::Receiver<Event>) {
    Job::new(prompt, SamplingParams::greedy(), max_tokens)
}

fn token_id(ev: Event) -> u32 {
    match ev {
        Event::Token { id, .. } => id,
        other => panic!("expected a token, got {other:?}"),
    }
}

#[test]
fn batched_sequences_match_their_solo_runs_with_mid_way_joins() {
    let model = Arc::new(ToyModel::new(Gate::closed()));
    let e = engine(&model, 8, 1024, 1 << 24);
    let _open = OpenOnDrop(model.clone());
    let (a, rx_a) = greedy(vec![1, 2, 3], 24);
    e.submit(a).unwrap();
    model.gate.allow(3);
    let first: Vec<u32> = (0..3).map(|_| token_id(next_event(&rx_a))).collect();
    let long: Vec<u32> = (0..600).map(|i| (i * 7 % TOY_VOCAB) as u32).collect();
    let (b, rx_b) = greedy(vec![7; 5], 20);
    let (c, rx_c) = greedy(long.clone(), 10);
    e.submit(b).unwrap();
    e.submit(c).unwrap();
    model.gate.open();
    let (oa, ob, oc) = (collect(&rx_a), collect(&rx_b), collect(&rx_c));
    let a_all: Vec<u32> = first.iter().copied().chain(oa.tokens.iter().copied()).collect();
    assert_eq!(a_all, greedy_alone(&[1, 2, 3], 24, &[]));
    assert_eq!(ob.tokens, greedy_alone(&[7; 5], 20, &[]));
    assert_eq!(oc.tokens, greedy_alone(&long, 10, &[]));
    for o in [&oa, &ob, &oc] {
        assert_eq!(o.finish, FinishReason::Length);
        assert!(o.stats.max_batch >= 2, "{:?}", o.stats);
    }
    assert_eq!(oc.stats.prefilled_tokens, 600);
    assert_eq!(ob.text, ByteDecoder.decode(&ob.tokens));
    let log = model.log.lock().unwrap();
    // B and C joined while A was decoding; C's prompt came in chunks beside the decodes.
    assert!(log.iter().any(|p| p.len() == 3 && p[0] == 1 && p.iter().sum::<usize>() > 3), "{log:?}");
    // A pass with a decode in it feeds at most the step budget; one without, a chunk.
    for pass in log.iter() {
        let bound = if pass.contains(&1) { DEFAULT_MAX_BATCH_TOKENS } else { DEFAULT_PREFILL_CHUNK };
        assert!(pass.iter().sum::<usize>() <= bound, "{pass:?} in {log:?}");
    }
    assert_eq!(e.running(), 0);
    assert_eq!(e.kv_snapshot().active, 0);
}

#[test]
fn prefix_reuse_gives_the_logits_of_a_full_prefill_and_counts_cached_tokens() {
    let model = Arc::new(ToyModel::new(Gate::open_gate()));
    let e = engine(&model, 8, 1024, 1 << 24);
    let _open = OpenOnDrop(model.clone());
    let prompt: Vec<u32> = (10..40).collect();
    let ask = |e: &Engine, p: Vec<u32>| {
        let (mut j, rx) = greedy(p, 6);
        j.logprobs = true;
        j.top_logprobs = 20;
        e.submit(j).unwrap();
        collect(&rx)
    };
    let first = ask(&e, prompt.clone());
    assert_eq!((first.stats.cached_tokens, first.stats.prefilled_tokens), (0, 30));
    // The next turn: the whole history so far, then new tokens. The cache holds the prompt
    // and the first 5 answer tokens (the 6th was sampled but never fed).
    let mut turn = prompt.clone();
    turn.extend(&first.tokens);
    turn.extend([5, 6]);
    let reused = ask(&e, turn.clone());
    assert_eq!(reused.stats.cached_tokens, 35);
    assert_eq!(reused.stats.prefilled_tokens, turn.len() - 35);
    assert_eq!(reused.stats.kv_after.sequences, 1, "the idle cache was taken over, not copied");
    let fresh_model = Arc::new(ToyModel::new(Gate::open_gate()));
    let fresh = ask(&engine(&fresh_model, 8, 1024, 1 << 24), turn.clone());
    assert_eq!(fresh.stats.cached_tokens, 0);
    assert_eq!(reused.tokens, fresh.tokens);
    assert_eq!(reused.logprobs, fresh.logprobs);
    assert_eq!(reused.tops, fresh.tops);
    assert_eq!(reused.tops[0].len(), 20);
    assert_eq!(reused.tokens, greedy_alone(&turn, 6, &[]));
    // The same prompt once more still prefills its last token.
    let again = ask(&e, turn.clone());
    assert_eq!(again.stats.cached_tokens, turn.len() - 1);
    assert_eq!(again.tokens, reused.tokens);
}

#[test]
fn cancel_flag_stops_within_one_step_and_frees_the_cache() {
    let model = Arc::new(ToyModel::new(Gate::closed()));
    let e = engine(&model, 8, 1024, 1 << 24);
    let _open = OpenOnDrop(model.clone());
    let (j, rx) = greedy(vec![4, 5, 6], 1000);
    let cancel = j.cancel.clone();
    e.submit(j).unwrap();
    model.gate.allow(2);
    token_id(next_event(&rx));
    token_id(next_event(&rx));
    cancel.store(true, Ordering::Relaxed);
    let passes = model.gate.passed();
    model.gate.allow(1); // the pass the thread may already be waiting in
    let o = collect(&rx);
    assert_eq!(o.finish, FinishReason::Cancelled);
    assert!(o.tokens.len() <= 1, "{} tokens after the cancel", o.tokens.len());
    assert!(model.gate.passed() <= passes + 1);
    assert_eq!((o.stats.kv_after.sequences, o.stats.kv_after.bytes), (0, 0));
    assert_eq!(e.kv_snapshot().sequences, 0);
    assert_eq!(e.running(), 0);
}

#[test]
fn dropped_receiver_cancels_and_frees_the_cache() {
    let model = Arc::new(ToyModel::new(Gate::closed()));
    let e = engine(&model, 8, 1024, 1 << 24);
    let _open = OpenOnDrop(model.clone());
    let (j, rx) = greedy(vec![4, 5, 6], 1000);
    e.submit(j).unwrap();
    model.gate.allow(2);
    token_id(next_event(&rx));
    wait_until("a cache exists", || e.kv_snapshot().bytes > 0);
    drop(rx);
    let passes = model.gate.passed();
    model.gate.allow(1);
    wait_until("the cache is freed", || e.kv_snapshot().sequences == 0 && e.running() == 0);
    assert_eq!(e.kv_snapshot().bytes, 0);
    assert!(model.gate.passed() <= passes + 1);
}

#[test]
fn a_full_queue_is_refused_at_once() {
    let model = Arc::new(ToyModel::new(Gate::closed()));
    let e = engine(&model, 2, 1024, 1 << 24);
    let _open = OpenOnDrop(model.clone());
    let (a, rx_a) = greedy(vec![1], 5);
    e.submit(a).unwrap();
    wait_until("A runs", || e.running() == 1);
    let (b, rx_b) = greedy(vec![2], 5);
    let (c, rx_c) = greedy(vec![3], 5);
    e.submit(b).unwrap();
    e.submit(c).unwrap();
    assert_eq!(e.waiting(), 2);
    let (d, rx_d) = greedy(vec![4], 5);
    assert_eq!(e.submit(d), Err(SubmitError::QueueFull { depth: 2 }));
    assert!(rx_d.is_closed());
    model.gate.open();
    e.shutdown();
    for rx in [&rx_a, &rx_b, &rx_c] {
        let o = collect(rx);
        assert!(matches!(o.finish, FinishReason::Length | FinishReason::Shutdown), "{:?}", o.finish);
    }
    let (f, _rx_f) = greedy(vec![5], 5);
    assert_eq!(e.submit(f), Err(SubmitError::ShuttingDown));
}

#[test]
fn max_tokens_and_a_full_context_end_with_length() {
    let model = Arc::new(ToyModel::new(Gate::open_gate()));
    let e = engine(&model, 8, 16, 1 << 24);
    let _open = OpenOnDrop(model.clone());
    let prompt: Vec<u32> = (100..110).collect();
    let run = |p: Vec<u32>, max| {
        let (j, rx) = greedy(p, max);
        e.submit(j).unwrap();
        collect(&rx)
    };
    let o = run(prompt.clone(), 3);
    assert_eq!((o.finish.clone(), o.tokens.clone()), (FinishReason::Length, greedy_alone(&prompt, 3, &[])));
    assert_eq!(o.stats.completion_tokens, 3);
    let o = run(prompt.clone(), 100);
    assert_eq!((o.finish.clone(), o.tokens.len()), (FinishReason::Length, 6));
    assert_eq!(o.tokens, greedy_alone(&prompt, 6, &[]));
    let o = run(vec![1; 16], 4);
    assert!(matches!(&o.finish, FinishReason::Error(m) if m.contains("16")), "{:?}", o.finish);
    let o = run(prompt.clone(), 0);
    assert_eq!((o.finish, o.tokens.len()), (FinishReason::Length, 0));
    let o = run(vec![1, 999], 4);
    assert!(matches!(&o.finish, FinishReason::Error(m) if m.contains("999")), "{:?}", o.finish);
}

#[test]
fn stop_tokens_end_with_stop_and_are_not_streamed() {
    let prompt: Vec<u32> = vec![42, 43];
    let reference = greedy_alone(&prompt, 8, &[]);
    let i = (1..8).find(|&i| !reference[..i].contains(&reference[i])).expect("a fresh token");
    let stop = reference[i];
    let plain = Arc::new(ToyModel::new(Gate::open_gate()));
    let with_eos = Arc::new(ToyModel::new(Gate::open_gate()).with_eos(stop));
    for (model, by_job) in [(plain, true), (with_eos, false)] {
        let e = engine(&model, 8, 1024, 1 << 24);
        let _open = OpenOnDrop(model.clone());
        let (mut j, rx) = greedy(prompt.clone(), 8);
        if by_job {
            j.stop_tokens = vec![stop];
        }
        e.submit(j).unwrap();
        let o = collect(&rx);
        assert_eq!(o.finish, FinishReason::Stop);
        assert_eq!(o.tokens, reference[..i]);
        assert_eq!(o.stats.completion_tokens, i + 1);
    }
}

#[test]
fn ignore_eos_generates_through_stop_tokens_to_the_length() {
    let prompt: Vec<u32> = vec![42, 43];
    let reference = greedy_alone(&prompt, 8, &[]);
    let i = (1..8).find(|&i| !reference[..i].contains(&reference[i])).expect("a fresh token");
    let model = Arc::new(ToyModel::new(Gate::open_gate()).with_eos(reference[i]));
    let e = engine(&model, 8, 1024, 1 << 24);
    let _open = OpenOnDrop(model.clone());
    let (mut j, rx) = greedy(prompt.clone(), 8);
    j.stop_tokens = vec![reference[i]];
    j.ignore_eos = true;
    e.submit(j).unwrap();
    let o = collect(&rx);
    assert_eq!(o.finish, FinishReason::Length);
    assert_eq!(o.tokens, reference, "the eos token is streamed like any other");
}

#[test]
fn a_small_budget_makes_jobs_wait_and_evicts_idle_caches() {
    let model = Arc::new(ToyModel::new(Gate::closed()));
    let per_position = model.new_cache(0).bytes_per_position();
    // Each job may need 30 positions; the budget holds 40: one job at a time.
    let budget = 40 * per_position;
    let e = engine(&model, 8, 64, budget);
    let _open = OpenOnDrop(model.clone());
    let (pa, pb) = (vec![1u32; 10], vec![2u32; 10]);
    let (a, rx_a) = greedy(pa.clone(), 20);
    let (b, rx_b) = greedy(pb.clone(), 20);
    e.submit(a).unwrap();
    e.submit(b).unwrap();
    wait_until("A runs while B waits for room", || e.running() == 1 && e.waiting() == 1);
    model.gate.open();
    let (oa, ob) = (collect(&rx_a), collect(&rx_b));
    assert_eq!(oa.tokens, greedy_alone(&pa, 20, &[]));
    assert_eq!(ob.tokens, greedy_alone(&pb, 20, &[]));
    assert_eq!(ob.stats.max_batch, 1);
    assert_eq!(ob.stats.kv_after.sequences, 1, "A's idle cache was evicted for B");
    assert!(ob.stats.kv_after.bytes <= budget);
    let rerun = |p: Vec<u32>| {
        let (j, rx) = greedy(p, 2);
        e.submit(j).unwrap();
        collect(&rx).stats.cached_tokens
    };
    assert_eq!(rerun(pa.clone()), 0);
    assert_eq!(rerun(pa), 9);
}

#[test]
fn a_failing_model_ends_its_sequences_with_an_error_and_the_engine_goes_on() {
    fn shared_across_threads<T: Send + Sync>() {}
    shared_across_threads::<Engine>();
    let model = Arc::new(ToyModel::new(Gate::open_gate()));
    let e = engine(&model, 8, 1024, 1 << 24);
    model.poison.store(true, Ordering::Relaxed);
    let (j, rx) = greedy(vec![3, 1, 4], 5);
    e.submit(j).unwrap();
    let o = collect(&rx);
    assert!(matches!(&o.finish, FinishReason::Error(m) if m.contains("panicked")), "{:?}", o.finish);
    assert_eq!(o.stats.kv_after.sequences, 0, "the failed sequence's cache is freed");
    model.poison.store(false, Ordering::Relaxed);
    let (j, rx) = greedy(vec![3, 1, 4], 5);
    e.submit(j).unwrap();
    let o = collect(&rx);
    assert_eq!((o.finish, o.tokens), (FinishReason::Length, greedy_alone(&[3, 1, 4], 5, &[])));
}

#[test]
fn config_defaults_come_from_the_model() {
    let model = ToyModel::new(Gate::open_gate());
    let per_position = model.new_cache(0).bytes_per_position();
    let cfg = EngineConfig::for_model(&model, 64, None, None);
    assert_eq!(
        cfg,
        EngineConfig {
            queue_depth: 64,
            ctx: 1024,
            kv_cache_bytes: DEFAULT_KV_CACHE_BYTES,
            budget: StepBudget::default(),
            draft: DraftConfig::default(),
            prior: Default::default(),
            disk: None,
        }
    );
    let cfg = EngineConfig::for_model(&model, 2, Some(100), Some(5000));
    assert_eq!(
        cfg,
        EngineConfig {
            queue_depth: 2,
            ctx: 100,
            kv_cache_bytes: 5000,
            budget: StepBudget::default(),
            draft: DraftConfig::default(),
            prior: Default::default(),
            disk: None,
        }
    );
    // A budget never defaults below one full context.
    let huge = EngineConfig::for_model(&model, 2, Some(DEFAULT_KV_CACHE_BYTES), None);
    assert_eq!(huge.kv_cache_bytes, DEFAULT_KV_CACHE_BYTES * per_position);
}

#[test]
fn seeded_sampling_repeats_itself() {
    let model = Arc::new(ToyModel::new(Gate::open_gate()));
    let e = engine(&model, 8, 1024, 1 << 24);
    let _open = OpenOnDrop(model.clone());
    let run = |seed| {
        let params = SamplingParams { temperature: 0.9, top_p: 0.95, seed: Some(seed), ..Default::default() };
        let (j, rx) = Job::new(vec![9, 8, 7], params, 24);
        e.submit(j).unwrap();
        collect(&rx).tokens
    };
    let first = run(11);
    assert_eq!(first.len(), 24);
    assert_eq!(run(11), first);
    assert_ne!(run(12), first);
}
