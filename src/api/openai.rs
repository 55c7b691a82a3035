//! The OpenAI routes: `/v1/models`, `/v1/models/{id}`, `/v1/chat/completions`,
//! `/v1/completions`. A request is prepared (validated and tokenized, see `prepare`), submitted
//! to the decode thread, and answered whole or streamed; every generation ends in exactly one
//! metrics record, whatever way it ends.

use super::error::ApiError;
use super::generation::{Generation, Kind, Piece, WholeCalls};
use super::prepare::{self, Prepared};
use super::state::{ApiConfig, InFlightGuard, Llm};
use super::wire::{
    self, ChatChoice, ChatLogprobs, ChatMessageOut, Completion, FunctionOut, ModelCard, ModelList, TextChoice,
    TokenLogprob, ToolCallOut,
};
use crate::engine::draft::DraftError;
use crate::engine::{DraftMode, JobSpec, SubmitError};
use crate::http::{Request, Response};
use crate::metrics::Metrics;
use std::sync::Arc;
use std::time::Instant;

/// Tokens generated at most when a request names no `max_tokens`. The decode thread admits a
/// request only when its whole worst case fits the KV budget, so "up to the end of the context"
/// by default would let only a couple of requests run at once.
pub const DEFAULT_MAX_TOKENS: usize = 2048;

/// Seconds to suggest in `Retry-After` when the queue is full.
pub const QUEUE_FULL_RETRY_AFTER_SECS: u64 = 1;

fn card(llm: &Llm) -> ModelCard<'_> {
    ModelCard {
        id: &llm.model_id,
        object: "model",
        created: llm.created,
        owned_by: "mtplx-lite",
        context_length: llm.ctx,
        architecture: &llm.info.arch,
        chat_template: llm.template.origin(),
    }
}

/// `GET /v1/models`.
pub fn models(llm: &Llm) -> Response {
    Response::json(200, &ModelList { object: "list", data: vec![card(llm)] })
}

/// `GET /v1/models/{model_id}`.
pub fn model(llm: &Llm, id: &str) -> Result<Response, ApiError> {
    if id != llm.model_id {
        let msg = format!("the model '{}' does not exist; this server serves '{}'", truncate(id, 200), llm.model_id);
        return Err(ApiError::new(404, "invalid_request_error", msg).code("model_not_found"));
    }
    Ok(Response::json(200, &card(llm)))
}

fn truncate(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `POST /v1/chat/completions`.
pub async fn chat(
    llm: &Arc<Llm>,
    cfg: &ApiConfig,
    req: Request,
    metrics: &Arc<Metrics>,
    guard: InFlightGuard,
) -> Result<Response, ApiError> {
    let prepared = prepare::chat(llm, req.body, cfg.special_tokens_in_content).await?;
    start(llm, cfg, metrics, "/v1/chat/completions", prepared, guard).await
}

/// `POST /v1/completions`.
pub async fn completion(
    llm: &Arc<Llm>,
    cfg: &ApiConfig,
    req: Request,
    metrics: &Arc<Metrics>,
    guard: InFlightGuard,
) -> Result<Response, ApiError> {
    let prepared = prepare::completion(llm, req.body).await?;
    start(llm, cfg, metrics, "/v1/completions", prepared, guard).await
}

pub(super) fn request_id(kind: Kind) -> String {
    new_id(match kind {
        Kind::Chat => "chatcmpl-",
        Kind::Completion => "cmpl-",
    })
}

/// A fresh response id: `prefix`, the time and a counter (unique within the process).
pub(super) fn new_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{:x}{:06x}", super::state::unix_now(), n)
}

/// The completion length: what the request asks, within the context; by default what is left
/// of the context, at most [`DEFAULT_MAX_TOKENS`].
fn max_tokens(llm: &Llm, p: &Prepared) -> Result<usize, ApiError> {
    let (n, ctx) = (p.tokens.len(), llm.ctx);
    let prompt_param = if p.kind == Kind::Chat { "messages" } else { "prompt" };
    if n >= ctx {
        let msg = format!("this model's maximum context length is {ctx} tokens, but the prompt alone has {n}");
        return Err(ApiError::invalid(prompt_param, msg).code("context_length_exceeded"));
    }
    match p.params.max_tokens {
        Some(m) if n + m > ctx => Err(ApiError::invalid(
            "max_tokens",
            format!("this model's maximum context length is {ctx} tokens, but {} were requested ({n} in the prompt, {m} for the completion); ask for at most {} tokens", n + m, ctx - n),
        )
        .code("context_length_exceeded")),
        Some(m) => Ok(m),
        None => Ok((ctx - n).min(DEFAULT_MAX_TOKENS)),
    }
}

async fn start(
    llm: &Arc<Llm>,
    cfg: &ApiConfig,
    metrics: &Arc<Metrics>,
    route: &'static str,
    p: Prepared,
    guard: InFlightGuard,
) -> Result<Response, ApiError> {
    let id = request_id(p.kind);
    let gen = submit(llm, cfg, metrics, route, p, id)?;
    if gen.params.stream {
        let (tx, body) = async_channel::bounded(64);
        Ok(Response::sse_produced(body, Box::pin(super::stream::stream(gen, tx, guard, cfg.keep_alive()))))
    } else {
        whole(gen).await
    }
}

/// Checks the completion length, queues the job for the decode thread and returns the
/// generation to drive, recorded under `route` with the id `id`.
pub(super) fn submit(
    llm: &Arc<Llm>,
    cfg: &ApiConfig,
    metrics: &Arc<Metrics>,
    route: &'static str,
    p: Prepared,
    id: String,
) -> Result<Generation, ApiError> {
    let max_tokens = max_tokens(llm, &p)?;
    if p.params.draft.mode == Some(DraftMode::Mtp) && !llm.engine.has_mtp() {
        return Err(ApiError::invalid("mtplx.draft", format!("'mtplx.draft': {}", DraftError::NoMtpHead)));
    }
    let submitted = Instant::now();
    let Prepared { kind, tokens, params, question_chars, constraint } = p;
    let n = tokens.len();
    let spec = JobSpec {
        stop_tokens: llm.tokenizer.eos_tokens().to_vec(),
        logprobs: params.logprobs,
        submitted,
        draft: params.draft,
        ignore_eos: params.ignore_eos,
        constraint,
        ..JobSpec::new(tokens, params.sampling.clone(), max_tokens)
    };
    let (job, rx) = spec.build();
    let cancel = job.cancel.clone();
    match llm.engine.submit(job) {
        Ok(()) => {}
        Err(SubmitError::QueueFull { depth }) => {
            return Err(ApiError::new(
                503,
                "server_error",
                format!("the server is busy: {depth} requests are already waiting for the model; retry shortly"),
            )
            .code("queue_full")
            .header("Retry-After", QUEUE_FULL_RETRY_AFTER_SECS.to_string()))
        }
        Err(SubmitError::ShuttingDown) => {
            return Err(ApiError::new(503, "server_error", "the server is shutting down").code("shutting_down"))
        }
    }
    Ok(Generation::new(
        llm.clone(),
        metrics.clone(),
        kind,
        id,
        route,
        n,
        question_chars,
        params,
        rx,
        cancel,
        submitted,
        cfg.request_timeout,
    ))
}

/// A non-streamed answer: run the generation to its end, then answer once. An end with an error
/// and no token is that error's status; with tokens, a 200 with what was generated (a request
/// that ran past `--request-timeout` then says `length`: its answer was cut by a server bound).
pub(super) async fn whole(mut gen: Generation) -> Result<Response, ApiError> {
    let mut text = String::new();
    let mut logprobs: Vec<TokenLogprob> = Vec::new();
    let mut calls = WholeCalls::default();
    loop {
        match gen.next_piece().await {
            Piece::Delta { text: t, logprobs: lp } => {
                text.push_str(&t);
                logprobs.extend(lp);
            }
            Piece::ToolCall { id, name, arguments, .. } => calls.add(id, name, arguments),
            Piece::End(end) => {
                let calls = &calls.calls;
                if let Some(err) = &end.error {
                    if gen.completion_tokens == 0 {
                        return Err(err.clone());
                    }
                }
                let finish_reason = if end.timed_out { "length" } else { end.finish_reason };
                let stats = end.stats.as_ref();
                let usage = gen.usage();
                let (id, model) = (gen.id.as_str(), gen.model_id());
                let with_logprobs = gen.params.logprobs.is_some();
                return Ok(match gen.kind {
                    Kind::Chat => {
                        let lp = with_logprobs
                            .then(|| ChatLogprobs { content: logprobs.iter().map(TokenLogprob::chat).collect() });
                        let choice = ChatChoice {
                            index: 0,
                            message: ChatMessageOut {
                                role: "assistant",
                                content: (calls.is_empty() || !text.is_empty()).then_some(&*text),
                                tool_calls: (!calls.is_empty()).then(|| {
                                    calls
                                        .iter()
                                        .map(|(id, name, arguments)| ToolCallOut {
                                            id,
                                            kind: "function",
                                            function: FunctionOut { name, arguments },
                                        })
                                        .collect()
                                }),
                            },
                            logprobs: lp,
                            finish_reason,
                        };
                        Response::json(
                            200,
                            &Completion {
                                id,
                                object: "chat.completion",
                                created: gen.created,
                                model,
                                choices: vec![choice],
                                usage,
                                mtplx_stats: stats,
                            },
                        )
                    }
                    Kind::Completion => {
                        let lp = with_logprobs.then(|| wire::completion_logprobs(&logprobs));
                        let choice =
                            TextChoice { index: 0, text: &text, logprobs: lp, finish_reason: Some(finish_reason) };
                        Response::json(
                            200,
                            &Completion {
                                id,
                                object: "text_completion",
                                created: gen.created,
                                model,
                                choices: vec![choice],
                                usage,
                                mtplx_stats: stats,
                            },
                        )
                    }
                });
            }
        }
    }
}
