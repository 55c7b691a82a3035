//! The Anthropic Messages routes: `POST /v1/messages` and `POST /v1/messages/count_tokens`. A
//! request becomes the very internal request an OpenAI chat becomes (`prepare::messages`) and
//! runs through the same generation; only the wire format differs (`anthropic_wire`).

use super::anthropic_wire::{
    error_detail, ContentBlock, Delta, Message, MessageDeltaBody, MessageUsage, StreamEvent, TokenCount, PING,
};
use super::error::ApiError;
use super::generation::{End, Generation, Piece};
use super::openai;
use super::prepare;
use super::state::{ApiConfig, InFlightGuard, Llm};
use super::stream::KeepAlive;
use crate::http::{Request, Response};
use crate::metrics::Metrics;
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
        _ if gen.stop_sequence().is_some() => "stop_sequence",
        _ => "end_turn",
    }
}

fn usage(gen: &Generation) -> MessageUsage {
    MessageUsage { input_tokens: gen.prompt_tokens, output_tokens: gen.completion_tokens }
}

/// A non-streamed answer. A failure is its error's status; an answer the deadline cut after
/// some text is a 200 that says `max_tokens`, as on the OpenAI routes.
async fn whole(mut gen: Generation) -> Result<Response, ApiError> {
    let mut text = String::new();
    loop {
        match gen.next_piece().await {
            Piece::Delta { text: t, .. } => text.push_str(&t),
            // Tools are refused on this route for now, so no call is ever found.
            Piece::ToolCall { .. } => {}
            Piece::End(end) => {
                if let Some(err) = &end.error {
                    if !end.timed_out || gen.completion_tokens == 0 {
                        return Err(err.clone());
                    }
                }
                let message = Message {
                    id: &gen.id,
                    kind: "message",
                    role: "assistant",
                    model: gen.model_id(),
                    content: vec![ContentBlock::Text { text: &text }],
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

/// A streamed answer as Anthropic's named events: `message_start`, the text block's start and
/// a `ping` at once, a `content_block_delta` per piece of text, then the block's stop,
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
    bytes.extend(StreamEvent::ContentBlockStart { index: 0, content_block: ContentBlock::Text { text: "" } }.sse());
    bytes.extend_from_slice(PING);
    if out.send(bytes).await.is_err() {
        return;
    }
    keep.sent_at(now);
    while let Some(piece) = keep.next(&mut gen, &out).await {
        let (bytes, done) = match piece {
            Piece::Delta { text, .. } => {
                (StreamEvent::ContentBlockDelta { index: 0, delta: Delta::TextDelta { text: &text } }.sse(), false)
            }
            Piece::ToolCall { .. } => continue,
            Piece::End(end) => (end_events(&gen, &end), true),
        };
        let now = keep.now();
        if out.send(bytes).await.is_err() || done {
            return;
        }
        keep.sent_at(now);
    }
}

fn end_events(gen: &Generation, end: &End) -> Vec<u8> {
    if let (Some(err), false) = (&end.error, end.timed_out && gen.completion_tokens > 0) {
        return StreamEvent::Error { error: error_detail(err) }.sse();
    }
    let mut b = StreamEvent::ContentBlockStop { index: 0 }.sse();
    let delta = MessageDeltaBody { stop_reason: Some(stop_reason(gen, end)), stop_sequence: gen.stop_sequence() };
    b.extend(StreamEvent::MessageDelta { delta, usage: usage(gen) }.sse());
    b.extend(StreamEvent::MessageStop { mtplx_stats: Some(&end.stats) }.sse());
    b
}
