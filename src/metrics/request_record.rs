//! The per-request record (the JSON that `/v1/mtplx/metrics`, the stream and `mtplx_stats`
//! carry) and its wire framings: SSE events, keep-alive comments, NDJSON lines.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// How a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishStatus {
    /// The model ended its answer (end-of-sequence token).
    Done,
    /// `max_tokens` or the context was reached.
    Length,
    /// A stop sequence matched.
    Stop,
    TimedOut,
    Errored,
    /// The client went away before the end.
    Interrupted,
}

impl FinishStatus {
    /// Whether the answer was delivered whole (counted in `llm_answer_length_chars`).
    pub fn is_success(self) -> bool {
        matches!(self, FinishStatus::Done | FinishStatus::Length | FinishStatus::Stop)
    }
}

/// Prefix-cache outcome for the prompt: tokens reused from the cache and tokens prefilled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefixCommit {
    pub cached_tokens: u64,
    pub prefilled_tokens: u64,
    /// Of `cached_tokens`, those loaded from the prompt cache's disk tier.
    #[serde(default)]
    pub disk_tokens: u64,
    /// What the disk tier's lookup found.
    #[serde(default)]
    pub disk: DiskLookup,
}

/// What the prompt cache's disk tier found for a prompt: a hit, or why it supplied nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiskLookup {
    /// No disk tier (`--prompt-cache-dir` not given, or turned off), or no lookup was made.
    #[default]
    Off,
    Hit,
    /// An idle cache in memory already held every block the prompt has.
    HeldInMemory,
    /// No whole block of 256 tokens before the prompt's last token.
    TooShort,
    NoEntry,
    /// The block needed was evicted to make room.
    Evicted,
    /// The block needed failed its checks and was deleted.
    Corrupt,
}

impl DiskLookup {
    /// Every outcome, in the order of `mtplx_prompt_cache_disk_lookups_total`'s counters.
    pub const ALL: [DiskLookup; 7] = [
        DiskLookup::Off,
        DiskLookup::Hit,
        DiskLookup::HeldInMemory,
        DiskLookup::TooShort,
        DiskLookup::NoEntry,
        DiskLookup::Evicted,
        DiskLookup::Corrupt,
    ];

    /// The engine's label (`engine::prompt_disk::Lookup::label`), `Off` for any other.
    pub fn from_label(label: &str) -> DiskLookup {
        DiskLookup::ALL.into_iter().find(|d| d.label() == label).unwrap_or_default()
    }

    pub fn label(self) -> &'static str {
        match self {
            DiskLookup::Off => "off",
            DiskLookup::Hit => "hit",
            DiskLookup::HeldInMemory => "held_in_memory",
            DiskLookup::TooShort => "too_short",
            DiskLookup::NoEntry => "no_entry",
            DiskLookup::Evicted => "evicted",
            DiskLookup::Corrupt => "corrupt",
        }
    }
}

/// KV-cache state right after the request committed its tokens, as the record shows it
/// (`session_postcommit_snapshot`), in tokens; the engine's own view in bytes is
/// `engine::KvSnapshot`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvRecord {
    /// Tokens this session holds in its cache.
    pub session_tokens: u64,
    /// Tokens held by every cache together.
    pub total_tokens: u64,
    /// Token capacity of the KV budget.
    pub capacity_tokens: u64,
    /// Bytes in use by every cache together.
    pub used_bytes: u64,
    /// Sequences holding a cache.
    pub sequences: u64,
}

/// One finished request, as served in JSON. Every number is a number (never null) except
/// `ttft_s`, which is null when no token was produced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Position in the stream (`id:` of the SSE event); strictly increasing per process.
    pub seq: u64,
    pub request_id: String,
    /// When the generation ended, RFC 3339 UTC with microseconds.
    pub timestamp: String,
    pub route: String,
    pub model: String,
    pub status: FinishStatus,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Time spent waiting for the decode thread.
    pub queue_s: f64,
    /// Scheduler steps that fed part of the prompt (a long prompt is prefilled in chunks).
    #[serde(default)]
    pub prefill_chunks: u64,
    /// Start of the generation to the first token reaching the client.
    pub ttft_s: Option<f64>,
    /// Start of the generation to its terminal state, on the same clock as `ttft_s`.
    pub ttlt_s: f64,
    /// completion_tokens / ttlt_s: end-to-end throughput.
    pub tok_s: f64,
    /// Tokens after the first / (ttlt_s - ttft_s): decode speed alone.
    pub decode_tok_s: f64,
    /// Newly prefilled prompt tokens / prefill time.
    pub prefill_tok_s: f64,
    /// accepted_tokens / drafted_tokens; 0.0 when nothing was drafted (see drafted_tokens).
    pub accept_rate: f64,
    pub mtp_depth: u32,
    pub drafted_tokens: u64,
    pub accepted_tokens: u64,
    pub verify_calls: u64,
    /// Accepted draft tokens per draft position (index 0 = first drafted token).
    pub accepted_by_depth: Vec<u64>,
    /// The drafter used (`ngram`), or empty when the request decoded plainly.
    #[serde(default)]
    pub drafter: String,
    /// Verified draft tokens per draft position.
    #[serde(default)]
    pub drafted_by_depth: Vec<u64>,
    /// Tokens sampled from the last row of a fully accepted draft.
    #[serde(default)]
    pub bonus_tokens: u64,
    /// Tokens drawn from the residual distribution after a rejected draft token.
    #[serde(default)]
    pub correction_tokens: u64,
    /// Time spent drafting.
    #[serde(default)]
    pub draft_time_s: f64,
    /// Time of the forward passes that verified this request's drafts.
    #[serde(default)]
    pub verify_time_s: f64,
    /// Time spent dropping the cache positions of rejected draft tokens.
    #[serde(default)]
    pub rollback_time_s: f64,
    pub question_chars: u64,
    pub answer_chars: u64,
    pub session_prompt_prefix_commit: PrefixCommit,
    pub session_postcommit_snapshot: KvRecord,
    /// What went wrong, for `errored` and `timed_out`.
    #[serde(default)]
    pub error: Option<String>,
}

/// The SSE comment sent when nothing else was sent for [`KEEP_ALIVE_INTERVAL`].
pub const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";
/// What keeps an NDJSON stream alive: an empty line, which NDJSON readers skip.
pub const NDJSON_KEEP_ALIVE: &[u8] = b"\n";
/// Silence on the stream after which a keep-alive is sent (proxies drop idle streams at 30-60 s).
pub const KEEP_ALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(15);

/// `id: <seq>\ndata: <json>\n\n` (the JSON has no newlines, so one `data:` line suffices).
pub fn sse_event(seq: u64, record: &RequestRecord) -> Vec<u8> {
    sse_frame(seq, &serde_json::to_vec(record).unwrap_or_default())
}

/// SSE framing of already-serialized JSON.
pub fn sse_frame(seq: u64, json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len() + 32);
    out.extend_from_slice(b"id: ");
    super::prometheus::write_u64(&mut out, seq);
    out.extend_from_slice(b"\ndata: ");
    out.extend_from_slice(json);
    out.extend_from_slice(b"\n\n");
    out
}

/// `<json>\n`.
pub fn ndjson_line(record: &RequestRecord) -> Vec<u8> {
    let mut out = serde_json::to_vec(record).unwrap_or_default();
    out.push(b'\n');
    out
}

/// RFC 3339 UTC with microseconds, e.g. `2026-11-29T18:52:13.123456Z`.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, dd) = civil_from_days(days as i64);
    format!("{y:04}-{m:02}-{dd:02}T{:02}:{:02}:{:02}.{:06}Z", rem / 3600, rem % 3600 / 60, rem % 60, d.subsec_micros())
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
pub(crate) fn sample_record(seq: u64) -> RequestRecord {
    RequestRecord {
        seq,
        request_id: format!("req-{seq}"),
        timestamp: rfc3339(SystemTime::now()),
        route: "/v1/chat/completions".into(),
        model: "m".into(),
        status: FinishStatus::Done,
        prompt_tokens: 10,
        completion_tokens: 5,
        queue_s: 0.0,
        prefill_chunks: 0,
        ttft_s: Some(0.1),
        ttlt_s: 0.5,
        tok_s: 10.0,
        decode_tok_s: 10.0,
        prefill_tok_s: 100.0,
        accept_rate: 0.0,
        mtp_depth: 0,
        drafted_tokens: 0,
        accepted_tokens: 0,
        verify_calls: 0,
        accepted_by_depth: vec![],
        drafter: String::new(),
        drafted_by_depth: vec![],
        bonus_tokens: 0,
        correction_tokens: 0,
        draft_time_s: 0.0,
        verify_time_s: 0.0,
        rollback_time_s: 0.0,
        question_chars: 3,
        answer_chars: 7,
        session_prompt_prefix_commit: PrefixCommit::default(),
        session_postcommit_snapshot: KvRecord::default(),
        error: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rfc3339_known_instants() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
        // 2000-02-29 (leap day of a century leap year) 12:34:56.789012
        let t = UNIX_EPOCH + Duration::new(951_827_696, 789_012_000);
        assert_eq!(rfc3339(t), "2000-02-29T12:34:56.789012Z");
        let t = UNIX_EPOCH + Duration::from_secs(4_102_444_799); // last second of 2099
        assert_eq!(rfc3339(t), "2099-12-31T23:59:59.000000Z");
    }

    #[test]
    fn framings() {
        let r = sample_record(7);
        let ev = String::from_utf8(sse_event(7, &r)).unwrap();
        assert!(ev.starts_with("id: 7\ndata: {"));
        assert!(ev.ends_with("}\n\n"));
        assert_eq!(ev.matches('\n').count(), 3);
        let data = ev.lines().nth(1).unwrap().strip_prefix("data: ").unwrap();
        let back: RequestRecord = serde_json::from_str(data).unwrap();
        assert_eq!(back, r);
        let line = ndjson_line(&r);
        assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
        assert_eq!(serde_json::from_slice::<RequestRecord>(&line).unwrap(), r);
        let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["status"], "done");
        assert!(v["accept_rate"].is_f64());
    }
}
