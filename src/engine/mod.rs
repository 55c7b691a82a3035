//! The decode thread and everything it owns: job intake, scheduling with continuous batching,
//! sampling, streaming detokenization and the KV caches of all sequences. This file holds the
//! [`Engine`], the handle the API layer holds: it starts the decode thread, queues jobs without
//! ever blocking, exposes the gauges, and shuts the thread down.
//!
//! The API layer builds a [`Job`] (from a [`JobSpec`]), submits it with [`Engine::submit`], and
//! reads [`Event`]s until `Event::Done`.

#![forbid(unsafe_code)]

pub mod detok;
pub mod draft;
pub mod job;
pub mod kv_cache;
pub mod sampler;
pub mod scheduler;
#[cfg(test)]
mod scheduler_tests;
mod sequence;
pub mod speculate;
#[cfg(test)]
mod speculate_tests;
pub mod step_budget;
#[cfg(test)]
pub(crate) mod toy_model;

pub use detok::{StreamDecoder, TokenDecoder};
pub use draft::{Depth, DraftConfig, DraftMode, DraftRequest};
pub use job::{Event, FinishReason, GenStats, Job, JobSpec, KvSnapshot, SamplingParams, SpecCounts, MAX_TOP_LOGPROBS};
pub use step_budget::StepBudget;

use crate::model::mtp::MtpHead;
use crate::model::Model;
use crossbeam_channel::{Sender, TrySendError};
use draft::MtpSource;
use kv_cache::KvCacheManager;
use scheduler::{Scheduler, Shared};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// KV cache budget when none is given: this much, or one full context if that is larger.
pub const DEFAULT_KV_CACHE_BYTES: usize = 1 << 30;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// Jobs that may wait in the queue (at least 1); the decode thread may hold one more that
    /// waits for cache room, so `waiting()` can reach `queue_depth + 1`.
    pub queue_depth: usize,
    /// Context length: the most positions a sequence may have.
    pub ctx: usize,
    /// Budget for all KV caches together.
    pub kv_cache_bytes: usize,
    /// Tokens per scheduler step.
    pub budget: StepBudget,
    /// Speculative decoding: which drafter, how deep (`--draft`, `--depth`).
    pub draft: DraftConfig,
}

impl EngineConfig {
    /// Fills the defaults from the model: its own context length, and
    /// [`DEFAULT_KV_CACHE_BYTES`] (at least one full context) for the cache budget. The context
    /// is bounded by the budget: a smaller budget means a shorter context, never a request
    /// that is accepted and can never run.
    pub fn for_model(
        model: &dyn Model,
        queue_depth: usize,
        ctx: Option<usize>,
        kv_cache_bytes: Option<usize>,
    ) -> EngineConfig {
        let ctx = ctx.unwrap_or(model.info().context_length).max(1);
        let per_position = model.new_cache(0).bytes_per_position().max(1);
        let kv_cache_bytes = kv_cache_bytes.unwrap_or_else(|| DEFAULT_KV_CACHE_BYTES.max(ctx * per_position));
        // A sequence can never grow past what the whole budget holds, so that is its context.
        let ctx = ctx.min(kv_cache_bytes / per_position).max(1);
        EngineConfig { queue_depth, ctx, kv_cache_bytes, budget: StepBudget::default(), draft: DraftConfig::default() }
    }
}

/// Why a job was not queued. The job is dropped (its receiver sees the channel close).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubmitError {
    /// `depth` jobs already wait; answer 503 with Retry-After.
    QueueFull { depth: usize },
    /// The engine is stopping or its thread is gone.
    ShuttingDown,
}

impl std::fmt::Display for SubmitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SubmitError::QueueFull { depth } => {
                write!(f, "the job queue is full ({depth} jobs waiting)")
            }
            SubmitError::ShuttingDown => write!(f, "the engine is shutting down"),
        }
    }
}

impl std::error::Error for SubmitError {}

/// The handle the API layer holds (share it in an `Arc`); dropping it shuts the engine down.
pub struct Engine {
    jobs: Sender<Job>,
    stop: Sender<()>,
    shared: Arc<Shared>,
    stopping: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
    cfg: EngineConfig,
    has_mtp: bool,
}

impl Engine {
    /// Starts the decode thread, which owns `model` and every KV cache from now on.
    pub fn start(model: Arc<dyn Model>, decoder: Arc<dyn TokenDecoder>, cfg: EngineConfig) -> Engine {
        Engine::start_with_head(model, decoder, cfg, None)
    }

    /// [`Engine::start`] with the model's MTP head, which the `mtp` and `auto` drafters then use.
    pub fn start_with_head(
        model: Arc<dyn Model>,
        decoder: Arc<dyn TokenDecoder>,
        cfg: EngineConfig,
        head: Option<Arc<MtpHead>>,
    ) -> Engine {
        let mtp = head.map(|head| MtpSource { model: model.clone(), head, capacity: cfg.ctx });
        let has_mtp = mtp.is_some();
        // A zero-capacity channel would refuse every job the thread is not blocked waiting for.
        let (jobs, jobs_rx) = crossbeam_channel::bounded(cfg.queue_depth.max(1));
        let (stop, stop_rx) = crossbeam_channel::bounded(1);
        let shared = Arc::new(Shared::default());
        let per_position = model.new_cache(0).bytes_per_position();
        let caches = KvCacheManager::new(cfg.ctx, cfg.kv_cache_bytes, per_position);
        let sched =
            Scheduler::new(model, decoder, caches, (jobs_rx, stop_rx), shared.clone(), cfg.budget, (cfg.draft, mtp));
        let thread = std::thread::Builder::new()
            .name("mtplx-decode".into())
            .spawn(move || sched.run())
            .expect("spawning the decode thread");
        let stopping = AtomicBool::new(false);
        Engine { jobs, stop, shared, stopping, thread: Mutex::new(Some(thread)), cfg, has_mtp }
    }

    /// Queues a job; never blocks. The job's events arrive on its `reply` channel.
    pub fn submit(&self, job: Job) -> Result<(), SubmitError> {
        if self.stopping.load(Ordering::Acquire) {
            return Err(SubmitError::ShuttingDown);
        }
        self.jobs.try_send(job).map_err(|e| match e {
            TrySendError::Full(_) => SubmitError::QueueFull { depth: self.cfg.queue_depth },
            TrySendError::Disconnected(_) => SubmitError::ShuttingDown,
        })
    }

    /// Sequences being prefilled or decoded.
    pub fn running(&self) -> usize {
        self.shared.running.load(Ordering::Relaxed)
    }

    /// Jobs queued and not yet running.
    pub fn waiting(&self) -> usize {
        self.jobs.len() + self.shared.held.load(Ordering::Relaxed)
    }

    /// The KV cache manager's state after the decode thread's latest step.
    pub fn kv_snapshot(&self) -> KvSnapshot {
        *self.shared.kv.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// Whether an MTP head was loaded (the `mtp` drafter exists).
    pub fn has_mtp(&self) -> bool {
        self.has_mtp
    }

    /// Refuses new jobs, ends every queued and running one with
    /// `FinishReason::Error("the engine shut down")`, and waits for the decode thread (at most
    /// one forward pass). Idempotent.
    pub fn shutdown(&self) {
        self.stopping.store(true, Ordering::Release);
        let _ = self.stop.try_send(());
        let handle = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = handle {
            let _ = h.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
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
                draft: DraftConfig::default()
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
                draft: DraftConfig::default()
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
}
