//! The OpenAI routes: `/v1/models`, `/v1/chat/completions`, `/v1/completions`. A request is
//! validated, turned into prompt tokens (through the model's chat template for chat), submitted
//! to the decode thread, and answered whole or streamed; every generation ends in exactly one
//! metrics record, whatever way it ends.

use super::app::{InFlightGuard, Route};
use super::error::ApiError;
use super::generation::{Generation, Kind, Piece};
use super::openai_request::{parse_chat, parse_completion, GenParams};
use crate::engine::{Engine, Job, SamplingParams, SubmitError};
use crate::http::{Request, Response};
use crate::metrics::Metrics;
use crate::model::{ChatMessage, ChatTemplate, ModelInfo, Tokenizer};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Tokens generated at most when a request names no `max_tokens`. The decode thread admits a
/// request only when its whole worst case fits the KV budget, so "up to the end of the context"
/// by default would let only a couple of requests run at once.
pub const DEFAULT_MAX_TOKENS: usize = 2048;

/// Seconds to suggest in `Retry-After` when the queue is full.
pub const QUEUE_FULL_RETRY_AFTER_SECS: u64 = 1;

/// The loaded model as the API sees it.
pub struct Llm {
    pub engine: Engine,
    pub tokenizer: Arc<Tokenizer>,
    pub template: ChatTemplate,
    pub info: ModelInfo,
    /// The id `/v1/models` lists and every answer names.
    pub model_id: String,
    /// Unix seconds when the model was loaded.
    pub created: u64,
    /// Context length of one sequence (prompt plus completion).
    pub ctx: usize,
}

pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

pub async fn handle(llm: &Arc<Llm>, route: Route, req: &Request, metrics: &Arc<Metrics>, guard: InFlightGuard) -> Result<Response, ApiError> {
    match route {
        Route::Models => Ok(models(llm)),
        Route::ChatCompletions => {
            let r = parse_chat(&req.body)?;
            let messages: Vec<ChatMessage> = r.messages.iter().map(|m| ChatMessage { role: m.role.clone(), content: m.content.clone() }).collect();
            let prompt = llm.template.render(&messages, true).map_err(|e| ApiError::invalid("messages", format!("the chat template refused the messages: {e}")))?;
            let tokens = llm.tokenizer.encode(&prompt, false).map_err(|e| ApiError::invalid("messages", e.to_string()))?;
            let question = r.messages.iter().rev().find(|m| m.role == "user").map(|m| m.content.chars().count() as u64);
            start(llm, metrics, Kind::Chat, "/v1/chat/completions", tokens, r.params, question, guard).await
        }
        Route::Completions => {
            let r = parse_completion(&req.body)?;
            let tokens = llm.tokenizer.encode(&r.prompt, llm.tokenizer.adds_bos()).map_err(|e| ApiError::invalid("prompt", e.to_string()))?;
            if tokens.is_empty() {
                return Err(ApiError::invalid("prompt", "'prompt' must not be empty"));
            }
            let question = Some(r.prompt.chars().count() as u64);
            start(llm, metrics, Kind::Completion, "/v1/completions", tokens, r.params, question, guard).await
        }
        _ => unreachable!("openai::handle is only routed the OpenAI routes"),
    }
}

fn models(llm: &Llm) -> Response {
    Response::json(
        200,
        &json!({"object": "list", "data": [{
            "id": llm.model_id, "object": "model", "created": llm.created, "owned_by": "mtplx-lite",
            "context_length": llm.ctx, "architecture": llm.info.arch,
        }]}),
    )
}

fn request_id(kind: Kind) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let prefix = match kind {
        Kind::Chat => "chatcmpl",
        Kind::Completion => "cmpl",
    };
    format!("{prefix}-{:x}{:06x}", unix_now(), n)
}

#[allow(clippy::too_many_arguments)]
async fn start(
    llm: &Arc<Llm>,
    metrics: &Arc<Metrics>,
    kind: Kind,
    route: &'static str,
    tokens: Vec<u32>,
    p: GenParams,
    question_chars: Option<u64>,
    guard: InFlightGuard,
) -> Result<Response, ApiError> {
    let n = tokens.len();
    let max_tokens = match p.max_tokens {
        Some(m) if n + m > llm.ctx => {
            return Err(ApiError::invalid(
                "max_tokens",
                format!("this model's maximum context length is {} tokens, but {} were requested ({n} in the prompt, {m} for the completion)", llm.ctx, n + m),
            )
            .code("context_length_exceeded"))
        }
        Some(m) => m,
        None if n >= llm.ctx => {
            let param = if kind == Kind::Chat { "messages" } else { "prompt" };
            return Err(ApiError::invalid(param, format!("this model's maximum context length is {} tokens, but the prompt alone has {n}", llm.ctx)).code("context_length_exceeded"));
        }
        None => (llm.ctx - n).min(DEFAULT_MAX_TOKENS),
    };
    let params = SamplingParams {
        temperature: p.temperature,
        top_k: p.top_k,
        top_p: p.top_p,
        min_p: p.min_p,
        presence_penalty: p.presence_penalty,
        frequency_penalty: p.frequency_penalty,
        seed: p.seed,
    };
    let submitted = Instant::now();
    let (mut job, rx) = Job::new(tokens, params, max_tokens);
    job.stop_tokens = llm.tokenizer.eos_tokens().to_vec();
    job.logprobs = p.logprobs.is_some();
    job.top_logprobs = p.logprobs.unwrap_or(0);
    job.submitted = submitted;
    let cancel = job.cancel.clone();
    match llm.engine.submit(job) {
        Ok(()) => {}
        Err(SubmitError::QueueFull { depth }) => {
            return Err(ApiError::new(503, "server_error", format!("the server is busy: {depth} requests are already waiting for the model; retry shortly"))
                .code("queue_full")
                .header("Retry-After", QUEUE_FULL_RETRY_AFTER_SECS.to_string()))
        }
        Err(SubmitError::ShuttingDown) => return Err(ApiError::new(503, "server_error", "the server is shutting down").code("shutting_down")),
    }
    let gen = Generation::new(llm.clone(), metrics.clone(), kind, request_id(kind), route, n, question_chars, p, rx, cancel, submitted);
    if gen.params.stream {
        let (tx, body) = async_channel::bounded(64);
        Ok(Response::sse_produced(body, Box::pin(super::generation::stream(gen, tx, guard))))
    } else {
        whole(gen).await
    }
}

/// A non-streamed answer: run the generation to its end, then answer once.
async fn whole(mut gen: Generation) -> Result<Response, ApiError> {
    let mut text = String::new();
    let mut logprobs: Vec<Value> = Vec::new();
    loop {
        match gen.next_piece().await {
            Piece::Delta { text: t, logprobs: lp } => {
                text.push_str(&t);
                logprobs.extend(lp);
            }
            Piece::End(end) => {
                if let Some(err) = &end.error {
                    if gen.completion_tokens == 0 {
                        return Err(ApiError::new(500, "server_error", format!("generation failed: {err}")).code("engine_error"));
                    }
                }
                return Ok(Response::json(200, &gen.whole_body(&text, logprobs, &end)));
            }
        }
    }
}
