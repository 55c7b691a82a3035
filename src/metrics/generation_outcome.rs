//! What a finished generation tells the metrics, and the one call that records it.
//!
//! TTFT and TTLT are both measured from the same `Instant`, taken once when the generation
//! starts ([`GenerationClock::start`]); the first token and the end are instants on that clock,
//! so TTFT <= TTLT always holds, and TTLT is recorded for every terminal state. Decode speed is
//! the one figure taken from the decode thread's clock instead ([`DecodeSpan`]).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::request_log::Entry;
use super::request_record::{rfc3339, DiskLookup, FinishStatus, KvRecord, PrefixCommit, RequestRecord};
use super::series::Metrics;

/// One clock per generation. Call [`token`](Self::token) each time tokens reach the client.
#[derive(Clone, Copy, Debug)]
pub struct GenerationClock {
    start: Instant,
    admitted: Option<Instant>,
    first_token: Option<Instant>,
    last_token: Option<Instant>,
    end: Option<Instant>,
}

impl GenerationClock {
    /// Start the clock now (when the handler accepts the generation).
    pub fn start() -> GenerationClock {
        Self::start_at(Instant::now())
    }

    pub fn start_at(start: Instant) -> GenerationClock {
        GenerationClock { start, admitted: None, first_token: None, last_token: None, end: None }
    }

    /// The instant the clock started.
    pub fn start_instant(&self) -> Instant {
        self.start
    }

    /// The decode thread picked the job up (the end of `queue_s`).
    pub fn admitted_at(&mut self, at: Instant) {
        self.admitted.get_or_insert(at.max(self.start));
    }

    /// Tokens reached the client now: the first call fixes TTFT, each later call observes
    /// `llm_inter_token_latency_seconds` (one observation per delivery, so a speculative burst
    /// of several tokens counts once).
    pub fn token(&mut self, metrics: &Metrics) {
        self.token_at(Instant::now(), metrics)
    }

    pub fn token_at(&mut self, at: Instant, metrics: &Metrics) {
        let at = at.max(self.last_token.unwrap_or(self.start));
        if let Some(prev) = self.last_token {
            metrics.llm_inter_token_latency_seconds.observe_duration(at - prev);
        } else {
            self.first_token = Some(at);
        }
        self.last_token = Some(at);
    }

    /// The generation reached its terminal state now.
    pub fn finish(&mut self) {
        self.finish_at(Instant::now())
    }

    pub fn finish_at(&mut self, at: Instant) {
        let floor = self.last_token.unwrap_or(self.start);
        self.end.get_or_insert(at.max(floor));
    }

    pub fn ttft(&self) -> Option<Duration> {
        self.first_token.map(|t| t - self.start)
    }

    /// Time to the terminal state (now, if `finish` was not called).
    pub fn ttlt(&self) -> Duration {
        self.end.unwrap_or_else(|| Instant::now().max(self.last_token.unwrap_or(self.start))) - self.start
    }

    pub fn queue(&self) -> Duration {
        self.admitted.map_or(Duration::ZERO, |a| a - self.start)
    }
}

/// Speculative-decoding counts of one generation (all zero without a draft head).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecStats {
    /// Draft tokens proposed per round (the MTP depth).
    pub mtp_depth: u32,
    pub drafted_tokens: u64,
    pub accepted_tokens: u64,
    /// Target-model verification passes (one per draft round).
    pub verify_calls: u64,
    /// Accepted tokens per draft position.
    pub accepted_by_depth: Vec<u64>,
    /// The drafter (`ngram`), or empty for plain decoding.
    pub drafter: String,
    /// Verified draft tokens per draft position.
    pub drafted_by_depth: Vec<u64>,
    /// Tokens sampled after a fully accepted draft.
    pub bonus_tokens: u64,
    /// Tokens drawn after a rejected draft token.
    pub correction_tokens: u64,
    pub draft_time: Duration,
    pub verify_time: Duration,
    pub rollback_time: Duration,
}

/// The decode thread's own account of a generation: the tokens it sampled (the end-of-sequence
/// token that ended the answer included) and the time from the first of them to the last. Only
/// this clock measures decoding: the API takes tokens when it gets to them, so after any stall
/// (a slow client, a busy I/O thread) it sees a backlog arrive in one burst.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecodeSpan {
    pub tokens: u64,
    pub time: Duration,
}

/// Shortest decode time a rate is computed from: 1 µs, the resolution at which the metrics keep
/// time. Below it no time was measured (two tokens of one step), and a rate would be a division
/// by almost nothing.
pub const MIN_DECODE_TIME: Duration = Duration::from_micros(1);

impl DecodeSpan {
    /// Tokens after the first over the time from the first to the last, when there is one to
    /// speak of: at least two tokens, at least [`MIN_DECODE_TIME`] apart.
    pub fn tokens_per_second(&self) -> Option<f64> {
        (self.tokens >= 2 && self.time >= MIN_DECODE_TIME).then(|| (self.tokens - 1) as f64 / self.time.as_secs_f64())
    }
}

/// Everything known when a generation ends; hand it to [`Metrics::record_generation`].
#[derive(Clone, Debug)]
pub struct GenerationOutcome {
    pub request_id: String,
    /// The route template (`/v1/chat/completions`).
    pub route: String,
    pub model: String,
    pub status: FinishStatus,
    pub clock: GenerationClock,
    pub prompt_tokens: u64,
    /// The answer's token count, as `usage` and the record report it.
    pub completion_tokens: u64,
    /// Tokens the API took from the decode thread for the client's answer
    /// (`llm_generation_tokens_delivered_total`). Fewer than were decoded when the client left
    /// early (tokens still queued for it are lost) or a stop sequence ended the answer.
    pub delivered_tokens: u64,
    /// The decode thread's count and timing, when it reported the end of the generation (not
    /// when the client left first). `llm_generation_tokens_total` counts its tokens
    /// (`completion_tokens` without it), and `llm_decode_tokens_per_second` is observed only
    /// from it.
    pub decode: Option<DecodeSpan>,
    /// Characters of the last user message (`None`: no user message, nothing observed).
    pub question_chars: Option<u64>,
    /// Characters of the generated text.
    pub answer_chars: u64,
    /// Observe the question and answer lengths here; the chat routes observe them themselves,
    /// when a message is accepted and when an answer is persisted.
    pub observe_lengths: bool,
    /// Time the engine spent prefilling (`None`: taken as TTFT minus queueing).
    pub prefill: Option<Duration>,
    /// Scheduler steps that fed part of the prompt.
    pub prefill_chunks: u64,
    pub spec: SpecStats,
    pub prefix: PrefixCommit,
    pub snapshot: KvRecord,
    pub error: Option<String>,
}

impl GenerationOutcome {
    /// An outcome with zero counts, for the caller to fill in.
    pub fn new(
        request_id: impl Into<String>,
        route: &str,
        model: &str,
        status: FinishStatus,
        clock: GenerationClock,
    ) -> Self {
        GenerationOutcome {
            request_id: request_id.into(),
            route: route.into(),
            model: model.into(),
            status,
            clock,
            prompt_tokens: 0,
            completion_tokens: 0,
            delivered_tokens: 0,
            decode: None,
            question_chars: None,
            answer_chars: 0,
            observe_lengths: true,
            prefill: None,
            prefill_chunks: 0,
            spec: SpecStats::default(),
            prefix: PrefixCommit::default(),
            snapshot: KvRecord::default(),
            error: None,
        }
    }
}

fn per_second(n: u64, d: f64) -> f64 {
    if n == 0 || d <= 0.0 || !d.is_finite() {
        0.0
    } else {
        n as f64 / d
    }
}

impl Metrics {
    /// Record a finished generation (any terminal state): update every `llm_*` series and push
    /// its record to the ring and the live stream. Returns the record (for `mtplx_stats`).
    pub fn record_generation(&self, mut o: GenerationOutcome) -> Arc<Entry> {
        o.clock.finish();
        let ttlt = o.clock.ttlt();
        let ttft = o.clock.ttft();
        let queue = o.clock.queue();
        self.llm_time_to_last_token_seconds.observe_duration(ttlt);
        if let Some(t) = ttft {
            self.llm_time_to_first_token_seconds.observe_duration(t);
        }
        if let Some(q) = o.question_chars.filter(|_| o.observe_lengths) {
            self.llm_question_length_chars.observe_scaled(q);
        }
        if o.status.is_success() && o.observe_lengths {
            self.llm_answer_length_chars.observe_scaled(o.answer_chars);
        }
        self.llm_prompt_tokens_total.add(o.prompt_tokens);
        self.llm_generation_tokens_total.add(o.decode.map_or(o.completion_tokens, |d| d.tokens));
        self.llm_generation_tokens_delivered_total.add(o.delivered_tokens);
        let s = &o.spec;
        self.llm_spec_decode_num_drafts_total.add(s.verify_calls);
        self.llm_spec_decode_num_draft_tokens_total.add(s.drafted_tokens);
        self.llm_spec_decode_num_accepted_tokens_total.add(s.accepted_tokens);
        for (pos, n) in s.accepted_by_depth.iter().enumerate() {
            self.llm_spec_decode_num_accepted_tokens_per_pos_total.add(pos, *n);
        }

        let ttlt_s = ttlt.as_secs_f64();
        let ttft_s = ttft.map(|d| d.as_secs_f64());
        let decode_s = ttft_s.map_or(0.0, |f| ttlt_s - f);
        let decode_tok_s = per_second(o.completion_tokens.saturating_sub(1), decode_s);
        if let Some(rate) = o.decode.and_then(|d| d.tokens_per_second()) {
            self.llm_decode_tokens_per_second.observe(rate);
        }
        let prefill_s = o
            .prefill
            .map(|d| d.as_secs_f64())
            .or_else(|| ttft.map(|t| t.saturating_sub(queue).as_secs_f64()))
            .unwrap_or(0.0);
        let prefilled = if o.prefix == PrefixCommit::default() { o.prompt_tokens } else { o.prefix.prefilled_tokens };
        let tiers = [o.prefix.cached_tokens.saturating_sub(o.prefix.disk_tokens), o.prefix.disk_tokens, prefilled];
        for (c, n) in self.mtplx_prompt_cache_tokens_total.iter().zip(tiers) {
            c.add(n);
        }
        let lookup = DiskLookup::ALL.iter().position(|d| *d == o.prefix.disk).unwrap_or(0);
        self.mtplx_prompt_cache_disk_lookups_total[lookup].inc();
        let accept_rate = if s.drafted_tokens == 0 { 0.0 } else { s.accepted_tokens as f64 / s.drafted_tokens as f64 };

        let record = RequestRecord {
            seq: 0,
            request_id: o.request_id,
            timestamp: rfc3339(SystemTime::now()),
            route: o.route,
            model: o.model,
            status: o.status,
            prompt_tokens: o.prompt_tokens,
            completion_tokens: o.completion_tokens,
            queue_s: queue.as_secs_f64(),
            prefill_chunks: o.prefill_chunks,
            ttft_s,
            ttlt_s,
            tok_s: per_second(o.completion_tokens, ttlt_s),
            decode_tok_s,
            prefill_tok_s: per_second(prefilled, prefill_s),
            accept_rate,
            mtp_depth: s.mtp_depth,
            drafted_tokens: s.drafted_tokens,
            accepted_tokens: s.accepted_tokens,
            verify_calls: s.verify_calls,
            accepted_by_depth: o.spec.accepted_by_depth,
            drafter: o.spec.drafter,
            drafted_by_depth: o.spec.drafted_by_depth,
            bonus_tokens: o.spec.bonus_tokens,
            correction_tokens: o.spec.correction_tokens,
            draft_time_s: o.spec.draft_time.as_secs_f64(),
            verify_time_s: o.spec.verify_time.as_secs_f64(),
            rollback_time_s: o.spec.rollback_time.as_secs_f64(),
            question_chars: o.question_chars.unwrap_or(0),
            answer_chars: o.answer_chars,
            session_prompt_prefix_commit: o.prefix,
            session_postcommit_snapshot: o.snapshot,
            error: o.error,
        };
        self.requests.push(record)
    }

    /// Tokens the decode thread sampled for a generation after its record was made (the client
    /// left first; the decode thread reports its count once it sees the cancellation): they
    /// join `llm_generation_tokens_total`, the decoded tokens, and nothing else.
    pub fn record_tokens_decoded_late(&self, n: u64) {
        self.llm_generation_tokens_total.add(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::series::BuildInfo;

    #[test]
    fn one_clock_gives_ttft_below_ttlt_and_counts_everything() {
        let m = Metrics::new(8, BuildInfo::current("cpu", "m"));
        let t0 = Instant::now();
        let mut clock = GenerationClock::start_at(t0);
        clock.admitted_at(t0 + Duration::from_millis(5));
        clock.token_at(t0 + Duration::from_millis(50), &m);
        clock.token_at(t0 + Duration::from_millis(70), &m);
        clock.token_at(t0 + Duration::from_millis(90), &m);
        clock.finish_at(t0 + Duration::from_millis(150));
        let mut o = GenerationOutcome::new("r1", "/v1/chat/completions", "m", FinishStatus::Done, clock);
        o.prompt_tokens = 20;
        o.completion_tokens = 11;
        o.delivered_tokens = 10;
        // The decode thread sampled 11 tokens over 80 ms: 10 intervals, 125 tok/s.
        o.decode = Some(DecodeSpan { tokens: 11, time: Duration::from_millis(80) });
        o.question_chars = Some(12);
        o.answer_chars = 40;
        o.spec = SpecStats {
            mtp_depth: 2,
            drafted_tokens: 8,
            accepted_tokens: 6,
            verify_calls: 4,
            accepted_by_depth: vec![4, 2],
            ..Default::default()
        };
        let e = m.record_generation(o);
        let r = &e.record;
        assert_eq!(r.seq, 1);
        assert!((r.ttft_s.unwrap() - 0.05).abs() < 1e-9);
        assert!((r.ttlt_s - 0.15).abs() < 1e-9);
        assert!((r.queue_s - 0.005).abs() < 1e-9);
        assert!((r.tok_s - 11.0 / 0.15).abs() < 1e-6);
        assert!((r.decode_tok_s - 10.0 / 0.1).abs() < 1e-6);
        assert!((r.prefill_tok_s - 20.0 / 0.045).abs() < 1e-6);
        assert_eq!(r.accept_rate, 0.75);
        assert_eq!(m.llm_time_to_first_token_seconds.count(), 1);
        assert_eq!(m.llm_time_to_last_token_seconds.count(), 1);
        assert_eq!(m.llm_inter_token_latency_seconds.count(), 2);
        assert_eq!(m.llm_decode_tokens_per_second.count(), 1);
        assert_eq!(m.llm_decode_tokens_per_second.read(&mut [0; 32]).1, 125.0);
        assert_eq!(m.llm_answer_length_chars.count(), 1);
        assert_eq!(m.llm_generation_tokens_total.get(), 11);
        assert_eq!(m.llm_generation_tokens_delivered_total.get(), 10);
        assert_eq!(m.llm_spec_decode_num_accepted_tokens_per_pos_total.get(1), 2);
        assert_eq!(m.llm_spec_decode_num_drafts_total.get(), 4);
    }

    /// An outcome whose API clock saw `n` tokens, 43 µs apart after a 1 ms TTFT.
    fn burst(status: FinishStatus, n: u64) -> GenerationOutcome {
        let m = Metrics::new(1, BuildInfo::default());
        let t0 = Instant::now();
        let mut clock = GenerationClock::start_at(t0);
        for k in 0..n {
            clock.token_at(t0 + Duration::from_micros(1000 + 43 * k), &m);
        }
        clock.finish_at(t0 + Duration::from_micros(1000 + 43 * n));
        let mut o = GenerationOutcome::new("r", "/v1/completions", "m", status, clock);
        o.completion_tokens = n;
        o.delivered_tokens = n;
        o
    }

    #[test]
    fn decode_rate_comes_only_from_the_decode_threads_measurable_spans() {
        let m = Metrics::new(8, BuildInfo::default());
        // A client that left: the API took two queued tokens in one burst. Not a decode speed
        // (it read 23,256 tok/s before), and the decode thread reported nothing.
        m.record_generation(burst(FinishStatus::Interrupted, 2));
        assert_eq!(m.llm_decode_tokens_per_second.count(), 0);
        let with = |tokens, time| {
            let mut o = burst(FinishStatus::Done, 2);
            o.decode = Some(DecodeSpan { tokens, time });
            o
        };
        // One token: no interval. Two tokens with no measurable time between them.
        m.record_generation(with(1, Duration::from_millis(5)));
        m.record_generation(with(2, Duration::ZERO));
        m.record_generation(with(3, MIN_DECODE_TIME / 2));
        assert_eq!(m.llm_decode_tokens_per_second.count(), 0);
        // The API saw a burst, the decode thread took 20 ms per token: the rate is 50 tok/s.
        m.record_generation(with(2, Duration::from_millis(20)));
        assert_eq!(m.llm_decode_tokens_per_second.count(), 1);
        assert_eq!(m.llm_decode_tokens_per_second.read(&mut [0; 32]).1, 50.0);
        assert_eq!(DecodeSpan { tokens: 2, time: MIN_DECODE_TIME }.tokens_per_second(), Some(1e6));
    }

    #[test]
    fn decoded_and_delivered_tokens_are_counted_apart() {
        let m = Metrics::new(8, BuildInfo::default());
        // A finished answer: 6 tokens delivered, 7 decoded (the end-of-sequence token).
        let mut o = burst(FinishStatus::Done, 6);
        o.decode = Some(DecodeSpan { tokens: 7, time: Duration::from_millis(60) });
        m.record_generation(o);
        assert_eq!(m.llm_generation_tokens_total.get(), 7);
        assert_eq!(m.llm_generation_tokens_delivered_total.get(), 6);
        // A slow reader cut off: 1,526 delivered when its record was made; the decode thread,
        // which had run ahead, reports its 2,230 once it notices.
        m.record_generation(burst(FinishStatus::Interrupted, 1526));
        m.record_tokens_decoded_late(2230 - 1526);
        assert_eq!(m.llm_generation_tokens_total.get(), 7 + 2230);
        assert_eq!(m.llm_generation_tokens_delivered_total.get(), 6 + 1526);
    }

    #[test]
    fn interrupted_before_first_token_still_records_ttlt() {
        let m = Metrics::new(8, BuildInfo::default());
        let o =
            GenerationOutcome::new("r2", "/v1/completions", "m", FinishStatus::Interrupted, GenerationClock::start());
        let e = m.record_generation(o);
        assert_eq!(e.record.ttft_s, None);
        assert_eq!(e.record.accept_rate, 0.0);
        assert_eq!(e.record.tok_s, 0.0);
        assert_eq!(m.llm_time_to_last_token_seconds.count(), 1);
        assert_eq!(m.llm_time_to_first_token_seconds.count(), 0);
        assert_eq!(m.llm_answer_length_chars.count(), 0, "an interrupted answer is not persisted");
        let v: serde_json::Value = serde_json::from_slice(&e.json).unwrap();
        assert_eq!(v["status"], "interrupted");
        assert!(v["ttft_s"].is_null());
    }

    #[test]
    fn metrics_is_shareable_across_threads() {
        fn assert_sync<T: Send + Sync>() {}
        assert_sync::<Metrics>();
    }

    #[test]
    fn clock_never_runs_backwards() {
        let m = Metrics::new(1, BuildInfo::default());
        let t0 = Instant::now();
        let mut c = GenerationClock::start_at(t0 + Duration::from_millis(10));
        c.token_at(t0, &m);
        c.finish_at(t0);
        assert_eq!(c.ttft(), Some(Duration::ZERO));
        assert_eq!(c.ttlt(), Duration::ZERO);
    }
}
