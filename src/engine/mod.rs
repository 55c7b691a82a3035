//! The decode thread and everything it owns: job intake, scheduling with continuous batching,
//! sampling, streaming detokenization and the KV caches of all sequences. This file holds the
//! [`Engine`], the handle the API layer holds: it starts the decode thread, queues jobs without
//! ever blocking, exposes the gauges, and shuts the thread down.
//!
//! The API layer builds a [`Job`] (from a [`JobSpec`]), submits it with [`Engine::submit`], and
//! reads [`Event`]s until `Event::Done`.

#![forbid(unsafe_code)]

pub mod constraint;
pub mod detok;
pub mod draft;
#[cfg(test)]
mod engine_tests;
pub mod job;
pub mod kv_cache;
pub mod prompt_block;
pub mod prompt_disk;
pub mod sampler;
pub mod scheduler;
#[cfg(test)]
mod scheduler_tests;
mod sequence;
pub mod spec_prior;
pub mod speculate;
#[cfg(test)]
mod speculate_tests;
pub mod step_budget;
pub mod step_pacer;
#[cfg(test)]
pub(crate) mod toy_model;

pub use constraint::{Constraint, ConstraintError, Grammar, GrammarVocab};
pub use detok::{StreamDecoder, TokenDecoder};
pub use draft::{Depth, DraftConfig, DraftMode, DraftRequest};
pub use job::{Event, FinishReason, GenStats, Job, JobSpec, KvSnapshot, SamplingParams, SpecCounts, MAX_TOP_LOGPROBS};
pub use prompt_disk::DiskConfig;
pub use spec_prior::SpecPrior;
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

#[derive(Clone, Debug, PartialEq)]
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
    /// Where `--depth auto` starts: a `tune` profile's measurements, or empty (built-in guesses).
    pub prior: SpecPrior,
    /// The prompt cache's disk tier (`--prompt-cache-dir`); `None` is off.
    pub disk: Option<DiskConfig>,
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
        let footprint = model.new_cache(0).footprint();
        let kv_cache_bytes = kv_cache_bytes.unwrap_or_else(|| DEFAULT_KV_CACHE_BYTES.max(footprint.bytes(ctx)));
        // A sequence can never grow past what the whole budget holds, so that is its context.
        let ctx = ctx.min(footprint.positions_within(kv_cache_bytes)).max(1);
        EngineConfig {
            queue_depth,
            ctx,
            kv_cache_bytes,
            budget: StepBudget::default(),
            draft: DraftConfig::default(),
            prior: SpecPrior::default(),
            disk: None,
        }
    }
}

/// The disk tier for `model`, or `None` (with a log line saying why) where it cannot run: on a
/// device backend, whose caches live on the device, or where its directory cannot be opened.
fn open_disk_tier(cfg: DiskConfig, model: &dyn Model) -> Option<prompt_disk::DiskTier> {
    if model.device_stats().is_some() {
        eprintln!("mtplx-lite: prompt cache: the disk tier is off on the GPU backend (its caches live on the device)");
        return None;
    }
    let dir = cfg.dir.clone();
    prompt_disk::DiskTier::open(cfg)
        .map_err(|e| {
            eprintln!("mtplx-lite: prompt cache: {}: {e}; the disk tier is off, serving goes on", dir.display())
        })
        .ok()
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
    /// The prompt cache's disk tier, shared with the decode thread.
    disk: Option<Arc<prompt_disk::DiskTier>>,
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
        // Health reads the device's state before the first step too.
        *shared.device.lock().unwrap_or_else(|e| e.into_inner()) = model.device_stats();
        let caches = KvCacheManager::new(cfg.ctx, cfg.kv_cache_bytes, model.new_cache(0).footprint());
        let mut sched = Scheduler::new(
            model,
            decoder,
            caches,
            (jobs_rx, stop_rx),
            shared.clone(),
            cfg.budget,
            (cfg.draft, mtp, cfg.prior.clone()),
        );
        let disk = cfg.disk.clone().and_then(|d| open_disk_tier(d, &*sched.model)).map(Arc::new);
        sched.disk = disk.clone();
        let thread = std::thread::Builder::new()
            .name("mtplx-decode".into())
            .spawn(move || sched.run())
            .expect("spawning the decode thread");
        let stopping = AtomicBool::new(false);
        Engine { jobs, stop, shared, stopping, thread: Mutex::new(Some(thread)), cfg, has_mtp, disk }
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

    /// The device's counters and fault after the decode thread's latest step; `None` on the
    /// CPU.
    pub fn device_stats(&self) -> Option<crate::backend::DeviceStats> {
        self.shared.device.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The prompt cache's disk tier, when on.
    pub fn disk_tier(&self) -> Option<&prompt_disk::DiskTier> {
        self.disk.as_deref()
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
