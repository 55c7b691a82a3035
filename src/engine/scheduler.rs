//! The decode loop: admit jobs between steps, run every active sequence in one batched forward
//! pass per step, sample, stream, and end sequences (stop, length, cancel, error).
//!
//! Each step feeds every decoding sequence its last token and, beside them, prompt tokens of
//! sequences still prefilling, as much as the [`StepBudget`] allows, so a long prompt costs the
//! others slightly slower steps instead of one long stall. A decoding sequence with a drafter
//! feeds its last token and a draft, gets a row of logits for each, keeps what verification
//! accepts and rolls its cache back past the rest (`speculate.rs`).

use super::detok::{StreamDecoder, TokenDecoder};
use super::draft::{drafter_for, Depth, DraftConfig, DraftMode, MtpSource, MAX_DRAFT_DEPTH};
use super::job::{Event, FinishReason, GenStats, Job, KvSnapshot, SpecCounts};
use super::kv_cache::{KvCacheManager, SeqId};
use super::prompt_disk::{DiskTier, Lookup};
use super::sampler::Sampler;
use super::sequence::{cancelled, emit, verify, Rows, Seq};
use super::spec_prior::SpecPrior;
use super::speculate::{CostModel, SpecState};
use super::step_budget::{StepBudget, Want};
use super::step_pacer::StepPacer;
use crate::model::mtp::ForwardOutput;
use crate::model::{LogitsWanted, Model, SeqBatch};
use crossbeam_channel::{Receiver, TryRecvError};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Most sequences decoding together; more wait in the queue.
pub const MAX_ACTIVE_SEQUENCES: usize = 64;

/// What the decode thread publishes for the other threads (gauges, tests).
#[derive(Default)]
pub(crate) struct Shared {
    pub running: AtomicUsize,
    /// 1 while a job taken off the queue waits for room, else 0.
    pub held: AtomicUsize,
    pub kv: Mutex<KvSnapshot>,
    /// The device's counters and fault after the latest step (`None` on the CPU).
    pub device: Mutex<Option<crate::backend::DeviceStats>>,
}

pub(crate) struct Scheduler {
    pub model: Arc<dyn Model>,
    pub decoder: Arc<dyn TokenDecoder>,
    pub caches: KvCacheManager,
    pub jobs: Receiver<Job>,
    pub stop: Receiver<()>,
    pub shared: Arc<Shared>,
    budget: StepBudget,
    draft: DraftConfig,
    /// The model's MTP head, when one is loaded.
    mtp: Option<MtpSource>,
    /// Forward-pass times by rows fed, which auto depth weighs drafts against.
    costs: CostModel,
    /// What `tune` measured: each new sequence's drafter starts from its acceptance.
    prior: SpecPrior,
    /// Prompt tokens per step beside decoding streams, by measured step time.
    pacer: StepPacer,
    active: Vec<Seq>,
    /// A job taken off the queue that waits for cache room.
    held: Option<Job>,
    /// The prompt cache's disk tier, when on.
    pub disk: Option<Arc<DiskTier>>,
}

impl Scheduler {
    pub fn new(
        model: Arc<dyn Model>,
        decoder: Arc<dyn TokenDecoder>,
        caches: KvCacheManager,
        (jobs, stop): (Receiver<Job>, Receiver<()>),
        shared: Arc<Shared>,
        budget: StepBudget,
        (draft, mtp, prior): (DraftConfig, Option<MtpSource>, SpecPrior),
    ) -> Scheduler {
        let (active, held, costs, pacer) =
            (Vec::new(), None, CostModel::from_prior(&prior), StepPacer::new(budget.max_step_ratio));
        let disk = None;
        Scheduler {
            model,
            decoder,
            caches,
            jobs,
            stop,
            shared,
            budget,
            draft,
            mtp,
            costs,
            prior,
            pacer,
            active,
            held,
            disk,
        }
    }

    /// The decode thread's body; returns at shutdown, after ending every job it knows of.
    pub fn run(mut self) {
        self.publish();
        while self.intake() {
            self.publish();
            self.reap_cancelled();
            if !self.active.is_empty() {
                self.step();
            }
            self.retire();
            self.publish();
        }
        let reason = FinishReason::Shutdown;
        for s in self.active.iter_mut() {
            s.done = Some((reason.clone(), false));
        }
        self.retire();
        for job in self.held.take().into_iter().chain(self.jobs.try_iter()) {
            refuse(job, reason.clone(), self.caches.snapshot());
        }
        self.publish();
    }

    /// Admits waiting jobs while there is room; blocks only when nothing is active. Returns
    /// false at shutdown.
    fn intake(&mut self) -> bool {
        if !matches!(self.stop.try_recv(), Err(TryRecvError::Empty)) {
            return false;
        }
        if self.active.is_empty() && self.held.is_none() {
            // Idle: the moment to give back idle caches' unused room, which no stream waits on.
            if self.jobs.is_empty() && self.caches.trim_idle() {
                self.publish();
            }
            crossbeam_channel::select! {
                recv(self.jobs) -> j => match j {
                    Ok(j) => self.held = Some(j),
                    Err(_) => return false,
                },
                recv(self.stop) -> _ => return false,
            }
        }
        while self.active.len() < MAX_ACTIVE_SEQUENCES {
            let job = match self.held.take() {
                Some(j) => j,
                None => match self.jobs.try_recv() {
                    Ok(j) => j,
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return false,
                },
            };
            if let Some(job) = self.admit(job) {
                self.held = Some(job);
                break;
            }
        }
        true
    }

    /// Starts `job`, or ends it at once (cancelled, invalid, nothing to do), or hands it back
    /// when the caches have no room yet.
    fn admit(&mut self, job: Job) -> Option<Job> {
        if cancelled(&job) {
            refuse(job, FinishReason::Cancelled, self.caches.snapshot());
            return None;
        }
        let vocab = self.model.info().vocab_size;
        if let Some(&t) = job.prompt.iter().find(|&&t| t as usize >= vocab) {
            let msg = format!("prompt token id {t} is outside the vocabulary (size {vocab})");
            refuse(job, FinishReason::Error(msg), self.caches.snapshot());
            return None;
        }
        if job.max_tokens == 0 {
            refuse(job, FinishReason::Length, self.caches.snapshot());
            return None;
        }
        let model = &self.model;
        let admission = match self.caches.admit(&job.prompt, job.max_tokens, &|cap| model.new_cache(cap)) {
            Ok(Some(a)) => a,
            Ok(None) => return Some(job),
            Err(e) => {
                refuse(job, FinishReason::Error(e.to_string()), self.caches.snapshot());
                return None;
            }
        };
        let in_memory = admission.cached_tokens;
        let (cached, lookup) = match &self.disk {
            Some(d) => {
                let found = std::cell::Cell::new(Lookup::NoEntry);
                let len = self.caches.load_prefix(admission.id, &job.prompt, &|c, have| {
                    let (len, lookup) = d.load(&job.prompt, have, c);
                    found.set(lookup);
                    len
                });
                (len, Some(found.get()))
            }
            None => (in_memory, None),
        };
        let max_new = job.max_tokens.min(self.caches.ctx() - job.prompt.len());
        let cap = job.draft.max_depth.unwrap_or(MAX_DRAFT_DEPTH).clamp(1, MAX_DRAFT_DEPTH);
        let depth = match self.draft.depth {
            Depth::Fixed(n) => Depth::Fixed(n.min(cap)),
            Depth::Auto if job.draft.max_depth.is_some() => Depth::Fixed(cap),
            Depth::Auto => Depth::Auto,
        };
        // A seeded sampled request must give the same text every time, and which draws a verify
        // round consumes depends on the depth, which auto and the batch change with timing: it
        // decodes plainly unless it asked for a drafter itself.
        let p = &job.params;
        let reproducible = p.seed.is_some() && p.temperature > 0.0 && job.draft.mode.is_none();
        let mode = if reproducible { DraftMode::None } else { job.draft.mode.unwrap_or(self.draft.mode) };
        let spec = drafter_for(mode, self.mtp.as_ref()).map(|d| SpecState::new(d, depth).with_prior(&self.prior));
        self.active.push(Seq {
            sampler: Sampler::new(&job.params),
            detok: StreamDecoder::new(),
            id: admission.id,
            fed: cached,
            prefill_chunks: 0,
            pending: 0,
            history: job.prompt.clone(),
            feed: Vec::new(),
            spec,
            generated: 0,
            max_new,
            cached,
            from_disk: cached.saturating_sub(in_memory),
            disk_lookup: lookup,
            admitted: Instant::now(),
            first_token: None,
            last_token: None,
            max_batch: 0,
            done: None,
            masked: Vec::new(),
            job,
        });
        None
    }

    /// A set cancel flag or a dropped receiver ends the sequence before the next forward pass.
    fn reap_cancelled(&mut self) {
        for s in self.active.iter_mut().filter(|s| s.done.is_none() && cancelled(&s.job)) {
            s.done = Some((FinishReason::Cancelled, false));
        }
    }

    /// Which sequences take part in this step and how many tokens each feeds, and how many prompt
    /// tokens went beyond the pacer's allowance (`StepBudget::plan_paced`).
    fn plan(&self) -> (Vec<(usize, usize)>, usize) {
        let live: Vec<usize> = (0..self.active.len()).filter(|&i| self.active[i].done.is_none()).collect();
        let wants: Vec<Want> = live
            .iter()
            .map(|&i| &self.active[i])
            .map(|s| Want { prompt_left: s.job.prompt.len() - s.fed, prompt_fed: s.fed })
            .collect();
        let (plan, on_top) = self.budget.plan(&wants, |cap| self.pacer.allowance(cap));
        (plan.into_iter().map(|(w, n)| (live[w], n)).collect(), on_top)
    }

    /// One batched forward pass, then sampling for every sequence that got its logits.
    fn step(&mut self) {
        let (mut plan, on_top) = self.plan();
        if plan.is_empty() {
            return;
        }
        self.draft_step(&mut plan);
        let ids: Vec<SeqId> = plan.iter().map(|&(i, _)| self.active[i].id).collect();
        let before: Vec<usize> = ids.iter().map(|&id| self.caches.tokens(id).len()).collect();
        for (&(_, n), &id) in plan.iter().zip(&ids) {
            self.caches.prepare(id, n);
        }
        let active = &self.active;
        let prefilling: Vec<bool> = plan.iter().map(|&(i, _)| active[i].fed < active[i].job.prompt.len()).collect();
        let verifying: Vec<bool> = plan
            .iter()
            .map(|&(i, _)| active[i].fed == active[i].job.prompt.len() && active[i].feed.len() > 1)
            .collect();
        let tokens: Vec<&[u32]> = plan
            .iter()
            .map(|&(i, n)| {
                let s = &active[i];
                match s.job.prompt.len() - s.fed {
                    0 => &s.feed[..],
                    _ => &s.job.prompt[s.fed..s.fed + n],
                }
            })
            .collect();
        let mut batch: Vec<SeqBatch<'_>> = self
            .caches
            .caches_mut(&ids)
            .into_iter()
            .zip(&tokens)
            .zip(&verifying)
            .map(|((cache, t), &all)| {
                let logits = if all { LogitsWanted::All } else { LogitsWanted::Last };
                SeqBatch { tokens: t, cache, logits }
            })
            .collect();
        let hidden_wanted =
            plan.iter().any(|&(i, _)| active[i].spec.as_ref().is_some_and(|p| p.drafter.needs_hidden()));
        // Only ids come back from a step whose every sequence reads nothing but the argmax.
        let argmax = plan.iter().all(|&(i, _)| active[i].reads_only_argmax());
        let model = &self.model;
        let started = Instant::now();
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| model.step(&mut batch, hidden_wanted, argmax)));
        let took = started.elapsed();
        drop(batch);
        let answered = |o: &ForwardOutput| if argmax { o.tokens.len() } else { o.logits.len() };
        let (logits, best, mut hidden) = match result {
            Ok(Ok(o)) if answered(&o) == plan.len() => (o.logits, o.tokens, o.hidden),
            failed => {
                let msg = match failed {
                    Ok(Err(e)) => format!("the model failed: {e}"),
                    Ok(Ok(o)) => {
                        format!("the model returned {} rows for {} sequences", answered(&o), plan.len())
                    }
                    Err(_) => "the model panicked during a forward pass".to_string(),
                };
                for &(i, _) in &plan {
                    self.active[i].done = Some((FinishReason::Error(msg.clone()), false));
                }
                return;
            }
        };
        for (&id, t) in ids.iter().zip(&tokens) {
            self.caches.record(id, t);
        }
        let rows: usize = plan.iter().map(|&(_, n)| n).sum();
        let prompt_rows: usize = plan.iter().zip(&prefilling).filter(|(_, &p)| p).map(|(&(_, n), _)| n).sum();
        self.costs.observe(rows, took);
        if on_top == 0 {
            // A short prompt's tokens are far cheaper than a long one's late in its prefill:
            // learning from them would let the next steps feed the long one too many.
            self.pacer.observe(prompt_rows, rows - prompt_rows, took);
        }
        hidden.resize_with(plan.len(), Vec::new);
        for (k, &(i, n)) in plan.iter().enumerate() {
            let rows = if argmax { Rows::Tokens(&best[k]) } else { Rows::Logits(&logits[k]) };
            let kept = self.absorb(i, n, rows, (plan.len(), verifying[k]), took);
            // The cache keeps the positions of every emitted token but the last, as in plain
            // decoding: the last is fed at the next step.
            let started = Instant::now();
            self.caches.truncate(ids[k], before[k] + kept);
            if let (Some(spec), true) = (self.active[i].spec.as_mut(), kept < n) {
                spec.stats.rollback_time += started.elapsed();
            }
            let s = &mut self.active[i];
            if let (Some(spec), false) = (s.spec.as_mut(), hidden[k].is_empty()) {
                let width = hidden[k].len() / n.max(1);
                let started = Instant::now();
                spec.drafter.observe(before[k], &hidden[k][..kept * width], &s.history);
                spec.stats.draft_time += started.elapsed();
            }
        }
    }

    /// Takes one sequence's logits from a step of `width` sequences: prefill progress, or the
    /// next token, or a verified draft. Returns how many of the `n` rows it fed the cache keeps.
    fn absorb(
        &mut self,
        i: usize,
        n: usize,
        rows: Rows<'_>,
        (width, verifying): (usize, bool),
        took: Duration,
    ) -> usize {
        let s = &mut self.active[i];
        s.max_batch = s.max_batch.max(width);
        if s.fed < s.job.prompt.len() {
            s.fed += n;
            s.prefill_chunks += 1;
            if s.fed < s.job.prompt.len() {
                return n;
            }
        }
        let info = self.model.info();
        let vocab = info.vocab_size;
        let short = match rows {
            Rows::Logits(row) => {
                (row.len() < vocab).then(|| format!("{} logits for a vocabulary of {vocab}", row.len()))
            }
            Rows::Tokens(ids) => ids.is_empty().then(|| "no token".to_string()),
        };
        if let Some(what) = short {
            s.done = Some((FinishReason::Error(format!("the model returned {what}")), false));
            return n;
        }
        if !verifying {
            emit(s, rows, vocab, &info.eos_tokens, &*self.decoder);
            return n;
        }
        verify(s, rows, vocab, &info.eos_tokens, &*self.decoder, took)
    }

    /// Chooses each decoding sequence's draft for this step and widens its share of the plan:
    /// the depth is weighed against the rows the step already feeds, within the step budget.
    fn draft_step(&mut self, plan: &mut [(usize, usize)]) {
        let mut rows: usize = plan.iter().map(|&(_, n)| n).sum();
        let decoding = plan.iter().filter(|&&(i, _)| self.active[i].fed == self.active[i].job.prompt.len()).count();
        let max_rows = if plan.len() > 1 { self.budget.max_batch_tokens.max(1) } else { usize::MAX };
        for (i, n) in plan.iter_mut() {
            let s = &mut self.active[*i];
            if s.fed < s.job.prompt.len() {
                continue;
            }
            s.feed.clear();
            s.feed.push(s.pending);
            let Some(spec) = s.spec.as_mut() else { continue };
            // Drafts past the last token the sequence may emit would be verified for nothing.
            let cap = (s.max_new - s.generated).saturating_sub(1).min(max_rows.saturating_sub(rows));
            spec.pick(&s.history);
            let depth = spec.choose_depth(cap, rows - 1, decoding - 1, &self.costs);
            let started = Instant::now();
            spec.drafter.draft(&s.history, depth, &mut spec.draft);
            if let Some(c) = s.job.constraint.as_mut() {
                // A draft token the grammar forbids would be rejected by verification anyway.
                // Cutting there is exact because every draft is verified as a point mass.
                spec.draft.truncate(c.allowed_prefix(&spec.draft));
            }
            spec.drafted(started.elapsed(), spec.draft.len());
            s.feed.extend_from_slice(&spec.draft);
            rows += spec.draft.len();
            *n = s.feed.len();
        }
    }

    /// Removes ended sequences: frees or keeps their cache, then sends their final event.
    fn retire(&mut self) {
        let mut i = 0;
        while i < self.active.len() {
            if self.active[i].done.is_none() {
                i += 1;
                continue;
            }
            let mut s = self.active.remove(i);
            let (finish, keep) = s.done.take().expect("checked above");
            if let Some(d) = self.disk.as_ref().filter(|_| keep) {
                let (tokens, cache) = self.caches.cache(s.id);
                d.store(tokens, cache);
            }
            self.caches.finish(s.id, keep);
            self.publish();
            let now = Instant::now();
            let job = &s.job;
            let stats = GenStats {
                prompt_tokens: job.prompt.len(),
                cached_tokens: s.cached,
                disk_tokens: s.from_disk,
                disk_lookup: s.disk_lookup,
                prefilled_tokens: s.fed - s.cached,
                prefill_chunks: s.prefill_chunks,
                completion_tokens: s.generated,
                queue_time: s.admitted - job.submitted,
                prefill_time: s.first_token.unwrap_or(now) - s.admitted,
                decode_time: s.last_token.zip(s.first_token).map(|(l, f)| l - f).unwrap_or_default(),
                ttft: s.first_token.map(|f| f - job.submitted),
                total_time: now - job.submitted,
                max_batch: s.max_batch,
                kv_after: self.caches.snapshot(),
                spec: Box::new(
                    s.spec.take().map(|p| SpecCounts { drafter: p.drafter.name(), ..p.stats }).unwrap_or_default(),
                ),
            };
            let text = s.detok.flush(&*self.decoder);
            let _ = job.reply.try_send(Event::Done { finish, text, stats });
        }
    }

    fn publish(&self) {
        self.shared.running.store(self.active.len(), Ordering::Relaxed);
        self.shared.held.store(self.held.is_some() as usize, Ordering::Relaxed);
        *self.shared.kv.lock().unwrap_or_else(|e| e.into_inner()) = self.caches.snapshot();
        *self.shared.device.lock().unwrap_or_else(|e| e.into_inner()) = self.model.device_stats();
    }
}

/// Ends a job that never became a sequence.
fn refuse(job: Job, finish: FinishReason, kv_after: KvSnapshot) {
    let waited = job.submitted.elapsed();
    let stats = GenStats {
        prompt_tokens: job.prompt.len(),
        queue_time: waited,
        total_time: waited,
        kv_after,
        ..Default::default()
    };
    let _ = job.reply.try_send(Event::Done { finish, text: String::new(), stats });
}
