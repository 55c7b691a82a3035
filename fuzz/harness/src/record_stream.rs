//! The per-request record writers: records built from arbitrary bytes (any text in their
//! strings, any finite numbers) go through the ring and a live subscription (`pump`, as the
//! stream route drives it), framed as SSE and as NDJSON, with keep-alives between them. The
//! output, read back with an SSE parser that follows the WHATWG event-stream rules and with an
//! NDJSON line splitter, gives exactly the records pushed, in order, with their ids; a replay
//! after `Last-Event-ID` gives exactly the records after it that the ring still holds.

use std::time::Duration;

use mtplx_lite::metrics::request_record::{sse_event, NDJSON_KEEP_ALIVE};
use mtplx_lite::metrics::{
    ndjson_line, FinishStatus, KvRecord, PrefixCommit, RequestLog, RequestRecord, StreamFormat, KEEP_ALIVE,
};

/// Records pushed at most per input.
const MAX_RECORDS: usize = 6;
/// Never reached: the stream here is driven by records only.
const NO_KEEP_ALIVE: Duration = Duration::from_secs(3600);

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let (&b, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        b
    }
    fn u64(&mut self) -> u64 {
        (0..8).fold(0, |acc, _| acc << 8 | u64::from(self.byte()))
    }
    /// Records hold measured values, never NaN or infinities (JSON has no spelling for them).
    fn f64(&mut self) -> f64 {
        Some(f64::from_bits(self.u64())).filter(|v| v.is_finite()).unwrap_or(0.0)
    }
    fn text(&mut self) -> String {
        let n = (self.byte() as usize % 48).min(self.0.len());
        let (s, rest) = self.0.split_at(n);
        self.0 = rest;
        String::from_utf8_lossy(s).into_owned()
    }
    fn record(&mut self) -> RequestRecord {
        const STATUS: [FinishStatus; 6] = [
            FinishStatus::Done,
            FinishStatus::Length,
            FinishStatus::Stop,
            FinishStatus::TimedOut,
            FinishStatus::Errored,
            FinishStatus::Interrupted,
        ];
        RequestRecord {
            seq: self.u64(),
            request_id: self.text(),
            timestamp: self.text(),
            route: self.text(),
            model: self.text(),
            status: STATUS[self.byte() as usize % STATUS.len()],
            prompt_tokens: self.u64(),
            completion_tokens: self.u64(),
            queue_s: self.f64(),
            prefill_chunks: self.u64(),
            ttft_s: (self.byte() & 1 == 1).then(|| self.f64()),
            ttlt_s: self.f64(),
            tok_s: self.f64(),
            decode_tok_s: self.f64(),
            prefill_tok_s: self.f64(),
            accept_rate: self.f64(),
            mtp_depth: self.byte().into(),
            drafted_tokens: self.u64(),
            accepted_tokens: self.u64(),
            verify_calls: self.u64(),
            accepted_by_depth: (0..self.byte() % 4).map(|_| self.u64()).collect(),
            drafter: self.text(),
            drafted_by_depth: (0..self.byte() % 4).map(|_| self.u64()).collect(),
            bonus_tokens: self.u64(),
            correction_tokens: self.u64(),
            draft_time_s: self.f64(),
            verify_time_s: self.f64(),
            rollback_time_s: self.f64(),
            question_chars: self.u64(),
            answer_chars: self.u64(),
            session_prompt_prefix_commit: PrefixCommit {
                cached_tokens: self.u64(),
                prefilled_tokens: self.u64(),
                disk_tokens: self.u64(),
                disk: Default::default(),
            },
            session_postcommit_snapshot: KvRecord {
                session_tokens: self.u64(),
                total_tokens: self.u64(),
                capacity_tokens: self.u64(),
                used_bytes: self.u64(),
                sequences: self.u64(),
            },
            error: (self.byte() & 1 == 1).then(|| self.text()),
        }
    }
}

/// Events of a complete event stream as (last event id, data), by the WHATWG rules: lines end
/// in CRLF, LF or CR; `:` starts a comment; one space after the field's colon is dropped; data
/// lines join with LF; an empty line dispatches an event if it has data.
fn parse_sse(stream: &[u8]) -> Vec<(String, String)> {
    let text = std::str::from_utf8(stream).expect("an event stream is UTF-8");
    assert!(text.is_empty() || text.ends_with("\n\n"), "stream ends mid-event: {text:?}");
    let (mut events, mut data, mut id) = (Vec::new(), None::<String>, String::new());
    for line in text.split("\r\n").flat_map(|l| l.split(['\n', '\r'])) {
        if line.is_empty() {
            if let Some(d) = data.take() {
                events.push((id.clone(), d));
            }
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => match &mut data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => data = Some(value.to_owned()),
            },
            "id" if !value.contains('\0') => id = value.to_owned(),
            _ => {}
        }
    }
    events
}

fn parse_ndjson(stream: &[u8]) -> Vec<RequestRecord> {
    assert!(stream.is_empty() || stream.ends_with(b"\n"), "stream ends mid-line");
    stream
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("an NDJSON line is one record"))
        .collect()
}

/// Everything a subscription writes for the records pushed after it subscribed.
fn pumped(log: &RequestLog, format: StreamFormat, records: &[RequestRecord]) -> Vec<Vec<u8>> {
    let sub = log.subscribe(None);
    for r in records {
        log.push(r.clone());
    }
    log.close_subscribers();
    let (tx, rx) = async_channel::unbounded();
    smol::block_on(sub.pump_every(format, tx, NO_KEEP_ALIVE, std::time::Duration::ZERO));
    std::iter::from_fn(|| rx.try_recv().ok()).collect()
}

/// The frames as one stream, with a keep-alive after the frames that `after` picks (bit i % 8).
fn joined(frames: &[Vec<u8>], keep_alive: &[u8], after: u8) -> Vec<u8> {
    let mut stream = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        stream.extend_from_slice(f);
        if after >> (i % 8) & 1 == 1 {
            stream.extend_from_slice(keep_alive);
        }
    }
    stream
}

fn check_sse(frames: &[Vec<u8>], keep_alive_after: u8, want: &[RequestRecord]) {
    let stream = joined(frames, KEEP_ALIVE, keep_alive_after);
    let events = parse_sse(&stream);
    assert_eq!(events.len(), want.len(), "{:?}", String::from_utf8_lossy(&stream));
    for ((id, data), r) in events.iter().zip(want) {
        assert_eq!(id, &r.seq.to_string());
        let back: RequestRecord = serde_json::from_str(data).expect("event data is a record");
        assert_eq!(&back, r);
    }
}

fn check_ndjson(frames: &[Vec<u8>], keep_alive_after: u8, want: &[RequestRecord]) {
    let stream = joined(frames, NDJSON_KEEP_ALIVE, keep_alive_after);
    assert_eq!(parse_ndjson(&stream), want);
}

/// One input through the target: panics when an invariant breaks.
pub fn run(data: &[u8]) {
    let mut input = Input(data);
    let capacity = input.byte() as usize % 5;
    let keep_alive_after = input.byte();
    let replay_from = u64::from(input.byte() % 10);
    let n = input.byte() as usize % (MAX_RECORDS + 1);
    let records: Vec<RequestRecord> = (0..n).map(|_| input.record()).collect();

    // The framings alone, with the record's own seq as the event id.
    for r in &records {
        check_sse(&[sse_event(r.seq, r)], keep_alive_after, std::slice::from_ref(r));
        check_ndjson(&[ndjson_line(r)], keep_alive_after, std::slice::from_ref(r));
    }

    // Through the log: it numbers the records 1, 2, ... and its subscribers frame them.
    let log = RequestLog::new(capacity);
    let sse = pumped(&log, StreamFormat::Sse, &records);
    let numbered: Vec<RequestRecord> =
        records.iter().zip(1..).map(|(r, seq)| RequestRecord { seq, ..r.clone() }).collect();
    check_sse(&sse, keep_alive_after, &numbered);
    let log = RequestLog::new(capacity);
    let nd = pumped(&log, StreamFormat::Ndjson, &records);
    check_ndjson(&nd, keep_alive_after, &numbered);

    // A reconnecting client: the records after its last id that the ring still holds; an id
    // from the future (an earlier run of the server) replays the whole ring.
    let kept = &numbered[numbered.len() - capacity.min(numbered.len())..];
    let from = if replay_from > n as u64 { 0 } else { replay_from };
    let want: Vec<u64> = kept.iter().map(|r| r.seq).filter(|&s| s > from).collect();
    let sub = log.subscribe(Some(replay_from));
    let got: Vec<u64> = std::iter::from_fn(|| sub.try_recv()).map(|e| e.seq).collect();
    assert_eq!(got, want, "replay after {replay_from} with {n} records, ring of {capacity}");
}
