//! A generation's end as a metrics record: what the API saw (tokens sent, characters, how it
//! ended) joined with what the engine measured (queue, prefill, prefix cache, KV state).

use crate::engine::prompt_disk::Lookup;
use crate::engine::GenStats;
use crate::metrics::request_record::DiskLookup;
use crate::metrics::{DecodeSpan, FinishStatus, GenerationClock, GenerationOutcome, KvRecord, PrefixCommit, SpecStats};

/// What the API layer knows of a generation when it ends.
pub struct Ended {
    pub status: FinishStatus,
    pub error: Option<String>,
    /// A stop sequence ended it: the engine's count runs past what was delivered.
    pub stopped: bool,
    pub prompt_tokens: usize,
    /// Tokens received from the engine.
    pub completion_tokens: usize,
    pub question_chars: Option<u64>,
    pub answer_chars: u64,
}

/// The record of one generation. `stats` is `None` when the engine never reported its end (the
/// client left first, or the engine went away).
pub fn outcome(
    id: &str,
    route: &str,
    model: &str,
    clock: GenerationClock,
    e: Ended,
    stats: Option<&GenStats>,
) -> GenerationOutcome {
    let mut o = GenerationOutcome::new(id.to_string(), route, model, e.status, clock);
    o.prompt_tokens = e.prompt_tokens as u64;
    o.completion_tokens = e.completion_tokens as u64;
    o.delivered_tokens = e.completion_tokens as u64;
    o.question_chars = e.question_chars;
    o.answer_chars = e.answer_chars;
    o.error = e.error;
    if let Some(s) = stats {
        o.clock.admitted_at(clock.start_instant() + s.queue_time);
        o.prefill = Some(s.prefill_time);
        o.prefill_chunks = s.prefill_chunks as u64;
        let sp = &s.spec;
        o.spec = SpecStats {
            mtp_depth: sp.drafted.checked_div(sp.verify_calls).unwrap_or(0) as u32,
            drafted_tokens: sp.drafted as u64,
            accepted_tokens: sp.accepted as u64,
            verify_calls: sp.verify_calls as u64,
            accepted_by_depth: sp.accepted_by_depth.clone(),
            drafter: sp.drafter.to_string(),
            drafted_by_depth: sp.drafted_by_depth.clone(),
            bonus_tokens: sp.bonus as u64,
            correction_tokens: sp.correction as u64,
            draft_time: sp.draft_time,
            verify_time: sp.verify_time,
            rollback_time: sp.rollback_time,
        };
        o.decode = Some(DecodeSpan { tokens: s.completion_tokens as u64, time: s.decode_time });
        o.completion_tokens = o.completion_tokens.max(if e.stopped { 0 } else { s.completion_tokens as u64 });
        o.prefix = PrefixCommit {
            cached_tokens: s.cached_tokens as u64,
            prefilled_tokens: s.prefilled_tokens as u64,
            disk_tokens: s.disk_tokens as u64,
            disk: DiskLookup::from_label(s.disk_lookup.map_or("off", Lookup::label)),
        };
        let kv = s.kv_after;
        o.snapshot = KvRecord {
            session_tokens: (s.prompt_tokens + s.completion_tokens) as u64,
            total_tokens: kv.positions() as u64,
            capacity_tokens: kv.capacity_positions() as u64,
            used_bytes: kv.bytes as u64,
            sequences: kv.sequences as u64,
        };
    }
    o
}
