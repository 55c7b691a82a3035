//! One generation as the API drives it: engine events in, OpenAI pieces out (text held back for
//! stop sequences, logprobs in OpenAI's shapes), and exactly one metrics record at the end —
//! also when the client leaves early (then from `Drop`, as `interrupted`) or the request runs
//! past its deadline (`--request-timeout`, as `timed_out`).

use super::error::ApiError;
use super::openai_request::GenParams;
use super::record;
use super::state::{unix_now, Llm};
use super::stop::StopMatcher;
use super::tool_calls::{CallParser, Found};
use super::tools::ToolSpec;
use super::wire::{
    self, ChatChunkChoice, ChatDelta, ChatLogprobs, Chunk, FunctionDelta, TextChoice, TokenLogprob, ToolCallDelta,
    Usage,
};
use crate::engine::{Event, FinishReason, GenStats};
use crate::metrics::{FinishStatus, GenerationClock, Metrics};
use serde_json::value::RawValue;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Chat,
    Completion,
}

/// How a generation ended, as the client sees it.
pub struct End {
    /// OpenAI's `finish_reason`: `stop`, `length` or `error`.
    pub finish_reason: &'static str,
    /// Why the answer is incomplete, when it failed or the server cut it short.
    pub error: Option<ApiError>,
    /// The metrics record (`mtplx_stats`).
    pub stats: Box<RawValue>,
    /// The request's deadline ended it (`error` says so): a non-streamed answer with text
    /// reports `length`, as for any answer a server bound cut short.
    pub timed_out: bool,
}

/// A non-streamed answer's tool calls, put together from their pieces.
#[derive(Default)]
pub struct WholeCalls {
    /// Each call's id, name and arguments' JSON.
    pub calls: Vec<(String, String, String)>,
}

impl WholeCalls {
    /// Takes one `Piece::ToolCall`'s parts: a name starts a call, arguments extend the last.
    pub fn add(&mut self, id: String, name: Option<String>, arguments: String) {
        match (name, self.calls.last_mut()) {
            (Some(name), _) => self.calls.push((id, name, arguments)),
            (None, Some(last)) => last.2.push_str(&arguments),
            (None, None) => {}
        }
    }
}

pub enum Piece {
    Delta {
        text: String,
        logprobs: Vec<TokenLogprob>,
    },
    /// Part of a tool call the answer made (only when the request offered tools): its first
    /// piece has the name, each piece more of the arguments' JSON text.
    ToolCall {
        index: usize,
        id: String,
        name: Option<String>,
        arguments: String,
    },
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
    /// Prompt tokens a reused cache supplied, known once the generation ends.
    pub cached_tokens: usize,
    question_chars: Option<u64>,
    answer_chars: u64,
    rx: async_channel::Receiver<Event>,
    cancel: Arc<AtomicBool>,
    clock: GenerationClock,
    stop: StopMatcher,
    /// A stop sequence matched: the engine is being cancelled, the answer is complete.
    stopped: bool,
    recorded: bool,
    /// Characters of answer text so far (completions' `text_offset`).
    offset: usize,
    queued: VecDeque<Piece>,
    /// Fires at the request's deadline; never without one. One timer per generation, raced
    /// with the engine's channel: nothing is armed per token.
    deadline: async_io::Timer,
    /// The bound the deadline comes from (`--request-timeout`), for the message.
    timeout: Option<Duration>,
    /// Observe the question and answer lengths in the record; the chat routes observe them
    /// when they accept and persist messages instead.
    pub observe_lengths: bool,
    /// Finds the tool calls in the answer, when the request offered tools.
    calls: Option<CallParser>,
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
        timeout: Option<Duration>,
    ) -> Generation {
        let stop = StopMatcher::new(params.stop.clone());
        let params_offer_tools = params.tools.as_ref().is_some_and(ToolSpec::offered);
        // The deadline counts on the generation's clock; one too far to represent is none.
        let deadline =
            timeout.and_then(|t| submitted.checked_add(t)).map_or_else(async_io::Timer::never, async_io::Timer::at);
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
            cached_tokens: 0,
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
            deadline,
            timeout,
            observe_lengths: true,
            calls: params_offer_tools.then(CallParser::default),
        }
    }

    pub fn model_id(&self) -> &str {
        &self.llm.model_id
    }

    /// The request's stop sequence that ended the answer, if one did.
    pub fn stop_sequence(&self) -> Option<&str> {
        self.stop.matched()
    }

    /// The next piece to send. Cancel-safe: it only awaits the engine's channel and the
    /// deadline, and keeps what an event produced until it is taken.
    pub async fn next_piece(&mut self) -> Piece {
        loop {
            if let Some(p) = self.queued.pop_front() {
                return p;
            }
            match self.recv_event().await {
                Some(ev) => self.on_event(ev),
                None => self.time_out(),
            }
        }
    }

    /// The engine's next event, or `None` when the request's deadline passed first (then call
    /// [`Generation::time_out`]). An event already waiting wins over the deadline. Cancel-safe.
    pub async fn recv_event(&mut self) -> Option<Result<Event, async_channel::RecvError>> {
        let (rx, deadline) = (&self.rx, &mut self.deadline);
        smol::future::or(async { Some(rx.recv().await) }, async {
            deadline.await;
            None
        })
        .await
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
                let lp: Vec<TokenLogprob> =
                    logprob.map(|lp| self.logprob_entry(id, lp, &top_logprobs)).into_iter().collect();
                self.offset += text.chars().count();
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
                self.flush_calls();
                let end = self.finish(finish, Some(stats));
                self.queued.push_back(Piece::End(end));
            }
            Err(_) => {
                let end =
                    self.finish(FinishReason::Error("the engine stopped before the generation ended".into()), None);
                self.queued.push_back(Piece::End(end));
            }
        }
    }

    fn push_delta(&mut self, text: String, logprobs: Vec<TokenLogprob>) {
        let Some(calls) = self.calls.as_mut() else { return self.push_text(text, logprobs) };
        let found = calls.push(&text);
        self.push_found(found, logprobs);
    }

    /// Text and calls the tool-call parser found, in order; `logprobs` go with the first text.
    fn push_found(&mut self, found: Vec<Found>, mut logprobs: Vec<TokenLogprob>) {
        for f in found {
            match f {
                Found::Text(t) => self.push_text(t, std::mem::take(&mut logprobs)),
                Found::Call { name } => self.push_call(Some(name), String::new()),
                Found::Args(arguments) => self.push_call(None, arguments),
            }
        }
    }

    fn push_call(&mut self, name: Option<String>, arguments: String) {
        self.clock.token(&self.metrics);
        let index = self.calls.as_ref().map_or(1, CallParser::calls) - 1;
        let id = format!("call_{}_{index}", self.id.rsplit('-').next().unwrap_or_default());
        self.queued.push_back(Piece::ToolCall { index, id, name, arguments });
    }

    /// The answer ended: text the tool-call parser still held comes out.
    fn flush_calls(&mut self) {
        if let Some(found) = self.calls.as_mut().map(CallParser::finish) {
            self.push_found(found, Vec::new());
        }
    }

    fn push_text(&mut self, text: String, logprobs: Vec<TokenLogprob>) {
        if text.is_empty() && logprobs.is_empty() {
            return;
        }
        self.clock.token(&self.metrics);
        self.answer_chars += text.chars().count() as u64;
        self.queued.push_back(Piece::Delta { text, logprobs });
    }

    /// A token's logprob with its real bytes: a token that ends inside a UTF-8 character keeps
    /// its partial bytes, so that the bytes of all tokens rebuild the text.
    fn logprob_entry(&self, id: u32, logprob: f32, top: &[(u32, f32)]) -> TokenLogprob {
        let tok = &self.llm.tokenizer;
        let n = self.params.logprobs.unwrap_or(0);
        TokenLogprob {
            bytes: tok.token_bytes(id),
            logprob,
            offset: self.offset,
            top: top.iter().take(n).map(|&(t, l)| (tok.token_bytes(t), l)).collect(),
        }
    }

    /// The request ran past its deadline: stop the engine at its next step and end the answer
    /// now, with what was generated (text held back for a stop sequence included: none matched).
    pub fn time_out(&mut self) {
        if self.recorded {
            return;
        }
        self.cancel.store(true, Ordering::Relaxed);
        let end = if self.stopped {
            // A stop sequence had completed the answer; only the engine's report was awaited.
            self.finish(FinishReason::Cancelled, None)
        } else {
            let tail = self.stop.finish();
            self.push_delta(tail, Vec::new());
            self.flush_calls();
            let error = self.timeout_error();
            let stats = self.record(FinishStatus::TimedOut, None, Some(error.message.clone()));
            End { finish_reason: "error", error: Some(error), stats, timed_out: true }
        };
        self.queued.push_back(Piece::End(end));
        self.count_late_tokens();
    }

    /// What a request that ran past its deadline is told: the bound, and how far it got.
    fn timeout_error(&self) -> ApiError {
        let bound = self.timeout.map_or(0.0, |t| t.as_secs_f64());
        let progress = match self.completion_tokens {
            0 => "before its first token".to_string(),
            1 => "after 1 token".to_string(),
            n => format!("after {n} tokens"),
        };
        ApiError::new(504, "server_error", format!("the request ran past --request-timeout ({bound} s), {progress}"))
            .code("request_timeout")
    }

    /// Records the generation (once) and says how it ended.
    fn finish(&mut self, finish: FinishReason, stats: Option<GenStats>) -> End {
        let (finish_reason, status, error) = match (&finish, self.stopped) {
            (_, true) => ("stop", FinishStatus::Stop, None),
            (FinishReason::Stop, _) => ("stop", FinishStatus::Done, None),
            (FinishReason::Length, _) => ("length", FinishStatus::Length, None),
            (FinishReason::Cancelled, _) => ("stop", FinishStatus::Interrupted, None),
            (FinishReason::Shutdown, _) => {
                let e = ApiError::new(503, "server_error", "the server shut down before the answer was complete")
                    .code("server_shutdown");
                ("error", FinishStatus::Interrupted, Some(e))
            }
            (FinishReason::Error(e), _) => (
                "error",
                FinishStatus::Errored,
                Some(ApiError::new(500, "server_error", format!("generation failed: {e}")).code("engine_error")),
            ),
        };
        self.cached_tokens = stats.as_ref().map_or(0, |s| s.cached_tokens);
        let stats = self.record(status, stats, error.as_ref().map(|e| e.message.clone()));
        // An answer that called tools ends for the caller to run them.
        let called = self.calls.as_ref().is_some_and(|c| c.calls() > 0);
        let finish_reason = if called && finish_reason == "stop" { "tool_calls" } else { finish_reason };
        End { finish_reason, error, stats, timed_out: false }
    }

    fn record(&mut self, status: FinishStatus, stats: Option<GenStats>, error: Option<String>) -> Box<RawValue> {
        self.recorded = true;
        let ended = record::Ended {
            status,
            error,
            stopped: self.stopped,
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            question_chars: self.question_chars,
            answer_chars: self.answer_chars,
        };
        let mut o = record::outcome(&self.id, self.route, &self.llm.model_id, self.clock, ended, stats.as_ref());
        o.observe_lengths = self.observe_lengths;
        // `usage` reports what the record says: the engine's count includes the end-of-sequence
        // token the model sampled to end its answer, which sends no text.
        self.completion_tokens = o.completion_tokens as usize;
        let entry = self.metrics.record_generation(o);
        wire::raw_json(&entry.json)
    }

    /// After a cancel, the engine decodes on until its next step: count those tokens when it
    /// says how many there were, so that `llm_generation_tokens_total` stays exact.
    fn count_late_tokens(&self) {
        let (rx, metrics, counted) = (self.rx.clone(), self.metrics.clone(), self.completion_tokens as u64);
        smol::spawn(async move {
            while let Ok(ev) = rx.recv().await {
                if let Event::Done { stats, .. } = ev {
                    metrics.record_tokens_decoded_late((stats.completion_tokens as u64).saturating_sub(counted));
                    break;
                }
            }
        })
        .detach();
    }

    pub fn usage(&self) -> Usage {
        Usage::new(self.prompt_tokens, self.completion_tokens, self.cached_tokens)
    }

    fn object(&self) -> &'static str {
        match self.kind {
            Kind::Chat => "chat.completion.chunk",
            Kind::Completion => "text_completion",
        }
    }

    /// One streamed chunk (`chat.completion.chunk` or `text_completion`), as an SSE event.
    pub fn chunk(&self, delta_text: Option<&str>, role: bool, logprobs: &[TokenLogprob], end: Option<&End>) -> Vec<u8> {
        let finish_reason = end.map(|e| e.finish_reason);
        let with_logprobs = self.params.logprobs.is_some() && !logprobs.is_empty();
        let (id, model, created, object) = (self.id.as_str(), self.model_id(), self.created, self.object());
        let mtplx_stats = end.map(|e| &*e.stats);
        let error = end.and_then(|e| e.error.as_ref()).map(ApiError::detail);
        match self.kind {
            Kind::Chat => {
                let delta = ChatDelta { role: role.then_some("assistant"), content: delta_text, tool_calls: None };
                let lp =
                    with_logprobs.then(|| ChatLogprobs { content: logprobs.iter().map(TokenLogprob::chat).collect() });
                let choices = vec![ChatChunkChoice { index: 0, delta, logprobs: lp, finish_reason }];
                wire::sse_event(&Chunk { id, object, created, model, choices, usage: None, mtplx_stats, error })
            }
            Kind::Completion => {
                let lp = with_logprobs.then(|| wire::completion_logprobs(logprobs));
                let choices =
                    vec![TextChoice { index: 0, text: delta_text.unwrap_or(""), logprobs: lp, finish_reason }];
                wire::sse_event(&Chunk { id, object, created, model, choices, usage: None, mtplx_stats, error })
            }
        }
    }

    /// A streamed piece of a tool call: a chunk that names it (with its id and type) when it
    /// begins, then chunks of its arguments.
    pub fn tool_call_chunks(&self, index: usize, id: &str, name: Option<&str>, arguments: &str) -> Vec<u8> {
        let chunk = |call: ToolCallDelta<'_>| {
            let delta = ChatDelta { role: None, content: None, tool_calls: Some(vec![call]) };
            let choices = vec![ChatChunkChoice { index: 0, delta, logprobs: None, finish_reason: None }];
            let (id, model, created) = (self.id.as_str(), self.model_id(), self.created);
            let object = self.object();
            wire::sse_event(&Chunk { id, object, created, model, choices, usage: None, mtplx_stats: None, error: None })
        };
        if name.is_some() {
            let named = FunctionDelta { name, arguments };
            return chunk(ToolCallDelta { index, id: Some(id), kind: Some("function"), function: named });
        }
        chunk(ToolCallDelta { index, id: None, kind: None, function: FunctionDelta { name: None, arguments } })
    }

    /// The extra chunk of `stream_options.include_usage`: no choices, the usage.
    pub fn usage_chunk(&self) -> Vec<u8> {
        let choices: Vec<TextChoice<'_>> = Vec::new();
        wire::sse_event(&Chunk {
            id: &self.id,
            object: self.object(),
            created: self.created,
            model: self.model_id(),
            choices,
            usage: Some(self.usage()),
            mtplx_stats: None,
            error: None,
        })
    }
}

impl Drop for Generation {
    /// The client left before the end (its connection, and so this generation, was dropped):
    /// stop the engine at its next step and record the request as interrupted.
    fn drop(&mut self) {
        if !self.recorded {
            self.cancel.store(true, Ordering::Relaxed);
            self.record(FinishStatus::Interrupted, None, Some("the client disconnected".into()));
            self.count_late_tokens();
        }
    }
}

#[cfg(test)]
#[path = "generation_stream_tests.rs"]
mod tests;
