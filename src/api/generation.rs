//! One generation as the API drives it: engine events in, OpenAI pieces out (text held back for
//! stop sequences, logprobs in OpenAI's shapes), and exactly one metrics record at the end —
//! also when the client leaves early (then from `Drop`, as `interrupted`).

use super::app::InFlightGuard;
use super::openai::{unix_now, Llm};
use super::openai_request::GenParams;
use super::stop::StopMatcher;
use crate::engine::{Event, FinishReason, GenStats};
use crate::metrics::{FinishStatus, GenerationClock, GenerationOutcome, KvRecord, Metrics, PrefixCommit};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A comment line sent while nothing else is (long prefills), so proxies keep the stream open.
pub const STREAM_KEEP_ALIVE: Duration = Duration::from_secs(15);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Chat,
    Completion,
}

/// How a generation ended, as the client sees it.
pub struct End {
    /// OpenAI's `finish_reason`: `stop`, `length` or `error`.
    pub finish_reason: &'static str,
    pub error: Option<String>,
    /// The metrics record (`mtplx_stats`).
    pub stats: Value,
}

pub enum Piece {
    Delta { text: String, logprobs: Vec<Value> },
    End(End),
}

pub struct Generation {
    llm: Arc<Llm>,
    metrics: Arc<Metrics>,
    pub kind: Kind,
    pub id: String,
    pub created: u64,
    route: &'static str,
    pub params: GenParams,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    question_chars: Option<u64>,
    answer_chars: u64,
    rx: async_channel::Receiver<Event>,
    cancel: Arc<AtomicBool>,
    clock: GenerationClock,
    stop: StopMatcher,
    /// A stop sequence matched: the engine is being cancelled, the answer is complete.
    stopped: bool,
    recorded: bool,
    /// Characters of text sent so far (completions' `text_offset`).
    offset: usize,
    queued: VecDeque<Piece>,
}

impl Generation {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        llm: Arc<Llm>,
        metrics: Arc<Metrics>,
        kind: Kind,
        id: String,
        route: &'static str,
        prompt_tokens: usize,
        question_chars: Option<u64>,
        params: GenParams,
        rx: async_channel::Receiver<Event>,
        cancel: Arc<AtomicBool>,
        submitted: Instant,
    ) -> Generation {
        let stop = StopMatcher::new(params.stop.clone());
        Generation {
            llm,
            metrics,
            kind,
            id,
            created: unix_now(),
            route,
            params,
            prompt_tokens,
            completion_tokens: 0,
            question_chars,
            answer_chars: 0,
            rx,
            cancel,
            clock: GenerationClock::start_at(submitted),
            stop,
            stopped: false,
            recorded: false,
            offset: 0,
            queued: VecDeque::new(),
        }
    }

    pub fn model_id(&self) -> &str {
        &self.llm.model_id
    }

    /// The next piece to send. Cancel-safe: it only awaits the engine's channel, and keeps
    /// what an event produced until it is taken.
    pub async fn next_piece(&mut self) -> Piece {
        loop {
            if let Some(p) = self.queued.pop_front() {
                return p;
            }
            let ev = self.rx.recv().await;
            self.on_event(ev);
        }
    }

    pub async fn recv_event(&self) -> Result<Event, async_channel::RecvError> {
        self.rx.recv().await
    }

    pub fn take_queued(&mut self) -> Option<Piece> {
        self.queued.pop_front()
    }

    pub fn on_event(&mut self, ev: Result<Event, async_channel::RecvError>) {
        match ev {
            Ok(Event::Token { id, text, logprob, top_logprobs }) => {
                if self.stopped {
                    return;
                }
                self.completion_tokens += 1;
                let lp: Vec<Value> = logprob.map(|lp| self.logprob_entry(id, lp, &top_logprobs)).into_iter().collect();
                let released = self.stop.push(&text);
                if released.stopped {
                    self.stopped = true;
                    self.cancel.store(true, Ordering::Relaxed);
                }
                self.push_delta(released.text, lp);
            }
            Ok(Event::Done { finish, text, stats }) => {
                // What the detokenizer still held at the end is the start of a character that
                // the generation stopped before completing (shown as U+FFFD): never send it.
                let text = text.trim_end_matches('\u{FFFD}');
                if !self.stopped {
                    let released = self.stop.push(text);
                    self.stopped |= released.stopped;
                    let mut tail = released.text;
                    if !released.stopped {
                        tail.push_str(&self.stop.finish());
                    }
                    self.push_delta(tail, Vec::new());
                }
                let end = self.finish(finish, Some(stats));
                self.queued.push_back(Piece::End(end));
            }
            Err(_) => {
                let end = self.finish(FinishReason::Error("the engine stopped before the generation ended".into()), None);
                self.queued.push_back(Piece::End(end));
            }
        }
    }

    fn push_delta(&mut self, text: String, logprobs: Vec<Value>) {
        if text.is_empty() && logprobs.is_empty() {
            return;
        }
        self.clock.token(&self.metrics);
        self.answer_chars += text.chars().count() as u64;
        self.queued.push_back(Piece::Delta { text, logprobs });
    }

    fn token_text(&self, id: u32) -> String {
        self.llm.tokenizer.decode(&[id])
    }

    fn logprob_entry(&mut self, id: u32, lp: f32, top: &[(u32, f32)]) -> Value {
        let tok = self.token_text(id);
        let entry = match self.kind {
            Kind::Chat => json!({
                "token": tok, "logprob": lp, "bytes": tok.as_bytes(),
                "top_logprobs": top.iter().take(self.params.logprobs.unwrap_or(0)).map(|&(t, l)| {
                    let s = self.token_text(t);
                    json!({"token": s, "logprob": l, "bytes": s.as_bytes()})
                }).collect::<Vec<_>>(),
            }),
            Kind::Completion => {
                let mut alts = serde_json::Map::new();
                for &(t, l) in top.iter().take(self.params.logprobs.unwrap_or(0)) {
                    alts.insert(self.token_text(t), json!(l));
                }
                json!({"token": tok, "logprob": lp, "top": alts, "offset": self.offset})
            }
        };
        self.offset += tok.chars().count();
        entry
    }

    /// Records the generation (once) and says how it ended.
    fn finish(&mut self, finish: FinishReason, stats: Option<GenStats>) -> End {
        let (finish_reason, status, error) = match (&finish, self.stopped) {
            (_, true) => ("stop", FinishStatus::Stop, None),
            (FinishReason::Stop, _) => ("stop", FinishStatus::Done, None),
            (FinishReason::Length, _) => ("length", FinishStatus::Length, None),
            (FinishReason::Cancelled, _) => ("stop", FinishStatus::Interrupted, None),
            (FinishReason::Error(e), _) => ("error", FinishStatus::Errored, Some(e.clone())),
        };
        let stats = self.record(status, stats, error.clone());
        End { finish_reason, error, stats }
    }

    fn record(&mut self, status: FinishStatus, stats: Option<GenStats>, error: Option<String>) -> Value {
        self.recorded = true;
        let mut o = GenerationOutcome::new(self.id.clone(), self.route, &self.llm.model_id, status, self.clock);
        o.prompt_tokens = self.prompt_tokens as u64;
        o.completion_tokens = self.completion_tokens as u64;
        o.delivered_tokens = self.completion_tokens as u64;
        o.question_chars = self.question_chars;
        o.answer_chars = self.answer_chars;
        o.error = error;
        if let Some(s) = stats {
            o.clock.admitted_at(self.clock_start() + s.queue_time);
            o.prefill = Some(s.prefill_time);
            o.decode = Some(crate::metrics::DecodeSpan { tokens: s.completion_tokens as u64, time: s.decode_time });
            o.completion_tokens = o.completion_tokens.max(if self.stopped { 0 } else { s.completion_tokens as u64 });
            o.prefix = PrefixCommit { cached_tokens: s.cached_tokens as u64, prefilled_tokens: s.prefilled_tokens as u64 };
            let kv = s.kv_after;
            let per_pos = self.llm.info.n_layers * 2 * self.llm.info.n_kv_heads * self.llm.info.head_dim * 4;
            o.snapshot = KvRecord {
                session_tokens: (s.prompt_tokens + s.completion_tokens) as u64,
                total_tokens: (kv.bytes / per_pos.max(1)) as u64,
                capacity_tokens: (kv.budget_bytes / per_pos.max(1)) as u64,
                used_bytes: kv.bytes as u64,
                sequences: kv.sequences as u64,
            };
        }
        // `usage` reports what the record says: the engine's count includes the end-of-sequence
        // token the model sampled to end its answer, which sends no text.
        self.completion_tokens = o.completion_tokens as usize;
        let entry = self.metrics.record_generation(o);
        serde_json::from_slice(&entry.json).unwrap_or(Value::Null)
    }

    fn clock_start(&self) -> Instant {
        self.clock.start_instant()
    }

    /// The body of a non-streamed answer.
    pub fn whole_body(&self, text: &str, logprobs: Vec<Value>, end: &End) -> Value {
        let usage = self.usage();
        match self.kind {
            Kind::Chat => json!({
                "id": self.id, "object": "chat.completion", "created": self.created, "model": self.model_id(),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                    "logprobs": self.params.logprobs.map(|_| json!({"content": logprobs})), "finish_reason": end.finish_reason}],
                "usage": usage, "mtplx_stats": end.stats,
            }),
            Kind::Completion => json!({
                "id": self.id, "object": "text_completion", "created": self.created, "model": self.model_id(),
                "choices": [{"index": 0, "text": text, "logprobs": self.params.logprobs.map(|_| completion_logprobs(&logprobs)),
                    "finish_reason": end.finish_reason}],
                "usage": usage, "mtplx_stats": end.stats,
            }),
        }
    }

    pub fn usage(&self) -> Value {
        json!({"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
               "total_tokens": self.prompt_tokens + self.completion_tokens})
    }

    /// One streamed chunk (`chat.completion.chunk` or `text_completion`).
    pub fn chunk(&self, delta_text: Option<&str>, role: bool, logprobs: Vec<Value>, end: Option<&End>) -> Value {
        let finish = end.map(|e| e.finish_reason);
        let mut v = match self.kind {
            Kind::Chat => {
                let mut delta = serde_json::Map::new();
                if role {
                    delta.insert("role".into(), json!("assistant"));
                }
                if let Some(t) = delta_text {
                    delta.insert("content".into(), json!(t));
                }
                let lp = (self.params.logprobs.is_some() && !logprobs.is_empty()).then(|| json!({"content": logprobs}));
                json!({"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model_id(),
                       "choices": [{"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish}]})
            }
            Kind::Completion => {
                let lp = (self.params.logprobs.is_some() && !logprobs.is_empty()).then(|| completion_logprobs(&logprobs));
                json!({"id": self.id, "object": "text_completion", "created": self.created, "model": self.model_id(),
                       "choices": [{"index": 0, "text": delta_text.unwrap_or(""), "logprobs": lp, "finish_reason": finish}]})
            }
        };
        if let Some(e) = end {
            v["mtplx_stats"] = e.stats.clone();
            if let Some(err) = &e.error {
                v["error"] = json!({"message": err, "type": "server_error", "param": null, "code": "engine_error"});
            }
        }
        v
    }
}

fn completion_logprobs(entries: &[Value]) -> Value {
    json!({
        "tokens": entries.iter().map(|e| e["token"].clone()).collect::<Vec<_>>(),
        "token_logprobs": entries.iter().map(|e| e["logprob"].clone()).collect::<Vec<_>>(),
        "top_logprobs": entries.iter().map(|e| e["top"].clone()).collect::<Vec<_>>(),
        "text_offset": entries.iter().map(|e| e["offset"].clone()).collect::<Vec<_>>(),
    })
}

impl Drop for Generation {
    /// The client left before the end (its connection, and so this generation, was dropped):
    /// stop the engine at its next step and record the request as interrupted.
    fn drop(&mut self) {
        if !self.recorded {
            self.cancel.store(true, Ordering::Relaxed);
            self.record(FinishStatus::Interrupted, None, Some("the client disconnected".into()));
        }
    }
}

fn sse(v: &Value) -> Vec<u8> {
    let mut out = b"data: ".to_vec();
    serde_json::to_writer(&mut out, v).unwrap_or_default();
    out.extend_from_slice(b"\n\n");
    out
}

enum Step {
    Event(Result<Event, async_channel::RecvError>),
    Idle,
    ClientGone,
}

/// Drives a streamed answer into `out` (one SSE event per chunk). Returns when the answer is
/// complete or the client is gone; `guard` keeps the request counted in flight until then.
pub async fn stream(gen: Generation, out: async_channel::Sender<Vec<u8>>, guard: InFlightGuard) {
    stream_every(gen, out, guard, STREAM_KEEP_ALIVE).await
}

/// [`stream`] with a `: keep-alive` comment after every `keep_alive` without output.
async fn stream_every(mut gen: Generation, out: async_channel::Sender<Vec<u8>>, guard: InFlightGuard, keep_alive: Duration) {
    let _guard = guard;
    // One keep-alive timer for the whole stream, moved only when it fires: a timer made per
    // token registers with the reactor (a wake-up of its thread) per token.
    let mut idle = async_io::Timer::after(keep_alive);
    let mut last_sent = Instant::now();
    if gen.kind == Kind::Chat && out.send(sse(&gen.chunk(None, true, Vec::new(), None))).await.is_err() {
        return;
    }
    loop {
        while let Some(piece) = gen.take_queued() {
            let (bytes, done) = match piece {
                Piece::Delta { text, logprobs } => (sse(&gen.chunk(Some(&text), false, logprobs, None)), false),
                Piece::End(end) => {
                    let mut b = sse(&gen.chunk(None, false, Vec::new(), Some(&end)));
                    if gen.params.include_usage {
                        let usage = json!({"id": gen.id, "object": if gen.kind == Kind::Chat { "chat.completion.chunk" } else { "text_completion" },
                            "created": gen.created, "model": gen.model_id(), "choices": [], "usage": gen.usage()});
                        b.extend_from_slice(&sse(&usage));
                    }
                    b.extend_from_slice(b"data: [DONE]\n\n");
                    (b, true)
                }
            };
            if out.send(bytes).await.is_err() || done {
                return;
            }
            last_sent = Instant::now();
        }
        let step = smol::future::or(
            smol::future::or(async { Step::Event(gen.recv_event().await) }, async {
                out.closed().await;
                Step::ClientGone
            }),
            async {
                (&mut idle).await;
                Step::Idle
            },
        )
        .await;
        match step {
            Step::Event(ev) => gen.on_event(ev),
            Step::Idle => {
                if last_sent.elapsed() >= keep_alive {
                    if out.send(b": keep-alive\n\n".to_vec()).await.is_err() {
                        return;
                    }
                    last_sent = Instant::now();
                }
                idle.set_at(last_sent + keep_alive);
            }
            Step::ClientGone => return,
        }
    }
}

#[cfg(test)]
#[path = "generation_stream_tests.rs"]
mod tests;
