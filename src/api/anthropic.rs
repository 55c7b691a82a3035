//! The Anthropic Messages routes: `POST /v1/messages` and `POST /v1/messages/count_tokens`. A
//! request becomes the very internal request an OpenAI chat becomes (`prepare::messages`) and
//! runs through the same generation; only the wire format differs (`anthropic_wire`).

use super::anthropic_wire::{
    error_detail, ContentBlock, Delta, Message, MessageDeltaBody, MessageUsage, StreamEvent, TokenCount, PING,
};
use super::error::ApiError;
use super::generation::{End, Generation, Piece, WholeCalls};
use super::openai;
use super::prepare;
use super::state::{ApiConfig, InFlightGuard, Llm};
use super::stream::KeepAlive;
use crate::http::{Request, Response};
use crate::metrics::Metrics;
use serde_json::value::RawValue;
use std::sync::Arc;
use std::time::Duration;

/// The route a generation is recorded under.
const ROUTE: &str = "/v1/messages";

/// `POST /v1/messages`.
pub async fn messages(
    llm: &Arc<Llm>,
    cfg: &ApiConfig,
    req: Request,
    metrics: &Arc<Metrics>,
    guard: InFlightGuard,
) -> Result<Response, ApiError> {
    let p = prepare::messages(llm, req.body, cfg.special_tokens_in_content, false).await?;
    let gen = openai::submit(llm, cfg, metrics, ROUTE, p, openai::new_id("msg_"))?;
    if gen.params.stream {
        let (tx, body) = async_channel::bounded(64);
        Ok(Response::sse_produced(body, Box::pin(stream(gen, tx, guard, cfg.keep_alive()))))
    } else {
        whole(gen).await
    }
}

/// `POST /v1/messages/count_tokens`: the prompt's tokens, as `/v1/messages` would feed them.
pub async fn count_tokens(llm: &Arc<Llm>, cfg: &ApiConfig, req: Request) -> Result<Response, ApiError> {
    let p = prepare::messages(llm, req.body, cfg.special_tokens_in_content, true).await?;
    Ok(Response::json(200, &TokenCount { input_tokens: p.tokens.len() }))
}

/// Anthropic's `stop_reason` for an answer that ended without an error.
fn stop_reason(gen: &Generation, end: &End) -> &'static str {
    match end.finish_reason {
        // A request cut by the server's deadline was cut by a bound, as `max_tokens` cuts.
        _ if end.timed_out => "max_tokens",
        "length" => "max_tokens",
        "tool_calls" => "tool_use",
        _ if gen.stop_sequence().is_some() => "stop_sequence",
        _ => "end_turn",
    }
}

/// Anthropic counts the input in parts that add up to the prompt: computed, read from a cache,
/// written to one. Before the generation ends (a stream's `message_start`) nothing is known to
/// be cached yet; `message_delta` carries the final split.
fn usage(gen: &Generation) -> MessageUsage {
    MessageUsage {
        input_tokens: gen.prompt_tokens - gen.cached_tokens.min(gen.prompt_tokens),
        output_tokens: gen.completion_tokens,
        cache_read_input_tokens: gen.cached_tokens,
        cache_creation_input_tokens: 0,
    }
}

/// A tool call as Anthropic names it.
fn tool_use_id(id: &str) -> String {
    format!("toolu_{}", id.trim_start_matches("call_"))
}

/// A call's arguments as the JSON object they are (the parser made them from JSON).
fn input(arguments: &str) -> Box<RawValue> {
    RawValue::from_string(arguments.to_string()).unwrap_or_else(|_| RawValue::from_string("{}".into()).expect("JSON"))
}

/// A non-streamed answer: its text, then a `tool_use` block per call. A failure is its error's
/// status; an answer the deadline cut after some text is a 200 that says `max_tokens`, as on
/// the OpenAI routes.
async fn whole(mut gen: Generation) -> Result<Response, ApiError> {
    let mut text = String::new();
    let mut calls = WholeCalls::default();
    loop {
        match gen.next_piece().await {
            Piece::Delta { text: t, .. } => text.push_str(&t),
            Piece::ToolCall { id, name, arguments, .. } => calls.add(id, name, arguments),
            Piece::End(end) => {
                let calls = &calls.calls;
                if let Some(err) = &end.error {
                    if !end.timed_out || gen.completion_tokens == 0 {
                        return Err(err.clone());
                    }
                }
                let mut content = Vec::new();
                if !text.is_empty() || calls.is_empty() {
                    content.push(ContentBlock::Text { text: &text });
                }
                let uses: Vec<(String, Box<RawValue>)> =
                    calls.iter().map(|c| (tool_use_id(&c.0), input(&c.2))).collect();
                content.extend(calls.iter().zip(&uses).map(|((_, name, _), (id, input))| ContentBlock::ToolUse {
                    id,
                    name,
                    input,
                }));
                let message = Message {
                    id: &gen.id,
                    kind: "message",
                    role: "assistant",
                    model: gen.model_id(),
                    content,
                    stop_reason: Some(stop_reason(&gen, &end)),
                    stop_sequence: gen.stop_sequence(),
                    usage: usage(&gen),
                    mtplx_stats: Some(&end.stats),
                };
                return Ok(Response::json(200, &message));
            }
        }
    }
}

/// The content blocks of a stream: a text block opens at the first text and closes before a
/// call; each call is a `tool_use` block of its own.
#[derive(Default)]
struct Blocks {
    /// The block being written: its index, and whether it is text (else a `tool_use`).
    open: Option<(usize, bool)>,
    next: usize,
}

impl Blocks {
    fn start(&mut self, block: ContentBlock<'_>, text: bool) -> (usize, Vec<u8>) {
        let mut b = self.close();
        let index = self.next;
        self.next += 1;
        self.open = Some((index, text));
        b.extend(StreamEvent::ContentBlockStart { index, content_block: block }.sse());
        (index, b)
    }

    fn text(&mut self, text: &str) -> Vec<u8> {
        let (index, mut b) = match self.open {
            Some((i, true)) => (i, Vec::new()),
            _ => self.start(ContentBlock::Text { text: "" }, true),
        };
        b.extend(StreamEvent::ContentBlockDelta { index, delta: Delta::TextDelta { text } }.sse());
        b
    }

    /// A piece of a call: a new `tool_use` block when it names the tool, then its input's JSON.
    fn call(&mut self, id: &str, name: Option<&str>, arguments: &str) -> Vec<u8> {
        let (index, mut b) = match (name, self.open) {
            (Some(name), _) => {
                let (empty, id) = (input("{}"), tool_use_id(id));
                self.start(ContentBlock::ToolUse { id: &id, name, input: &empty }, false)
            }
            (None, Some((i, false))) => (i, Vec::new()),
            (None, _) => return Vec::new(),
        };
        if !arguments.is_empty() {
            let delta = Delta::InputJsonDelta { partial_json: arguments };
            b.extend(StreamEvent::ContentBlockDelta { index, delta }.sse());
        }
        b
    }

    fn close(&mut self) -> Vec<u8> {
        self.open.take().map(|(index, _)| StreamEvent::ContentBlockStop { index }.sse()).unwrap_or_default()
    }
}

/// A streamed answer as Anthropic's named events: `message_start` and a `ping` at once, then
/// the content blocks (`content_block_start`, its deltas, `content_block_stop`), then
/// `message_delta` and `message_stop`; or an `error` event when the generation failed.
async fn stream(mut gen: Generation, out: async_channel::Sender<Vec<u8>>, guard: InFlightGuard, every: Duration) {
    let _guard = guard;
    let mut keep = KeepAlive::new(every).with_beat(PING);
    let now = keep.now();
    let start = Message {
        id: &gen.id,
        kind: "message",
        role: "assistant",
        model: gen.model_id(),
        content: Vec::new(),
        stop_reason: None,
        stop_sequence: None,
        usage: usage(&gen),
        mtplx_stats: None,
    };
    let mut bytes = StreamEvent::MessageStart { message: start }.sse();
    bytes.extend_from_slice(PING);
    if out.send(bytes).await.is_err() {
        return;
    }
    keep.sent_at(now);
    let mut blocks = Blocks::default();
    while let Some(piece) = keep.next(&mut gen, &out).await {
        let (bytes, done) = match piece {
            Piece::Delta { text, .. } => (blocks.text(&text), false),
            Piece::ToolCall { id, name, arguments, .. } => (blocks.call(&id, name.as_deref(), &arguments), false),
            Piece::End(end) => (end_events(&gen, &end, &mut blocks), true),
        };
        let now = keep.now();
        if out.send(bytes).await.is_err() || done {
            return;
        }
        keep.sent_at(now);
    }
}

fn end_events(gen: &Generation, end: &End, blocks: &mut Blocks) -> Vec<u8> {
    if let (Some(err), false) = (&end.error, end.timed_out && gen.completion_tokens > 0) {
        return StreamEvent::Error { error: error_detail(err) }.sse();
    }
    let mut b = blocks.close();
    let delta = MessageDeltaBody { stop_reason: Some(stop_reason(gen, end)), stop_sequence: gen.stop_sequence() };
    b.extend(StreamEvent::MessageDelta { delta, usage: usage(gen) }.sse());
    b.extend(StreamEvent::MessageStop { mtplx_stats: Some(&end.stats) }.sse());
    b
}
