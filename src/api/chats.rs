//! The persisted-chat routes: `/v1/chats` and `/v1/chats/{chat_id}[/messages]`.
//!
//! A turn stores the user's message (committed before any answer starts), generates from the
//! whole conversation through the very path of `/v1/chat/completions` (chat template, tokenizer,
//! engine, prefix reuse), and stores the answer when generation ends, however it ends: a
//! `Drop` stores what was generated as `interrupted` when the client leaves mid-stream. A turn
//! refused before the engine takes it stores nothing: its user message is withdrawn.

use super::chats_request::{self as wire, ChatOut, DeletedOut, ListOut, MessageOut, TurnOut};
use super::client_geo::{locate, CountrySource};
use super::error::ApiError;
use super::generation::{End, Generation, Kind, Piece};
use super::openai::{request_id, submit};
use super::prepare;
use super::state::{ApiConfig, InFlightGuard, Llm};
use super::stream::KeepAlive;
use crate::http::{Request, Response};
use crate::metrics::Metrics;
use crate::model::ChatMessage;
use crate::store::{random_id, unix_now, Chat, Db, Message, StoreError, Turn};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The route template a turn's metrics record carries.
pub const MESSAGES_ROUTE: &str = "/v1/chats/{chat_id}/messages";
/// How long a stored question without an answer holds its chat (409 for the next message)
/// when no `--request-timeout` bounds generations: past it, a turn lost in a crash no longer
/// blocks the chat.
pub const ANSWER_LEASE_SECS: i64 = 600;

/// What the chat routes share: the database, where countries come from, and the chats this
/// process is answering right now.
pub struct Chats {
    pub db: Arc<Db>,
    pub country: CountrySource,
    answering: Mutex<HashSet<String>>,
}

impl Chats {
    pub fn new(db: Arc<Db>, country: CountrySource) -> Chats {
        Chats { db, country, answering: Mutex::new(HashSet::new()) }
    }
}

fn store_error(e: StoreError) -> ApiError {
    match e {
        StoreError::NotFound(_) => ApiError::new(404, "invalid_request_error", e.to_string()).code("chat_not_found"),
        StoreError::Busy { .. } => ApiError::new(409, "invalid_request_error", e.to_string()).code("chat_busy"),
        StoreError::Backend(_) => ApiError::new(500, "server_error", e.to_string()).code("database_error"),
        StoreError::Closed => ApiError::new(503, "server_error", e.to_string()).code("shutting_down"),
    }
}

fn query(req: &Request, name: &str) -> Option<String> {
    req.query_param(name).map(str::to_string)
}

/// `POST /v1/chats`.
pub async fn create(chats: &Chats, cfg: &ApiConfig, req: &Request, metrics: &Metrics) -> Result<Response, ApiError> {
    let c = wire::parse_create(&req.body, cfg.max_message_bytes)?;
    let (ip, country) = locate(req, &cfg.trusted_proxies, &chats.country);
    let chat = Chat {
        chat_id: random_id("chat_"),
        created_at: unix_now(),
        title: c.title,
        system: c.system,
        defaults: serde_json::to_string(&c.defaults).unwrap_or_else(|_| "{}".into()),
        client_ip: Some(ip.to_string()),
        country,
    };
    let stored = chat.clone();
    chats.db.call(true, move |s| s.create_chat(&stored)).await.map_err(store_error)?;
    metrics.mtplx_chats_total.inc();
    Ok(Response::json(200, &ChatOut::new(&chat, None)))
}

/// `GET /v1/chats`.
pub async fn list(chats: &Chats, req: &Request) -> Result<Response, ApiError> {
    let page = wire::page(|n| query(req, n))?;
    let (data, total) = chats.db.call(false, move |s| s.list_chats(page)).await.map_err(store_error)?;
    let has_more = page.offset() as u64 + (data.len() as u64) < total;
    let data = data.iter().map(|c| ChatOut::new(c, None)).collect();
    Ok(Response::json(200, &ListOut { object: "list", data, page: page.page, page_size: page.size, total, has_more }))
}

/// `GET /v1/chats/{chat_id}`, with its messages when `include_messages=true`.
pub async fn get(chats: &Chats, req: &Request, chat_id: &str) -> Result<Response, ApiError> {
    let with_messages = wire::flag(query(req, "include_messages"), "include_messages")?;
    let id = chat_id.to_string();
    let (chat, messages) = chats
        .db
        .call(false, move |s| {
            let chat = s.get_chat(&id)?.ok_or_else(|| StoreError::NotFound(id.clone()))?;
            let all = crate::store::Page { page: 1, size: u32::MAX };
            let messages = if with_messages { Some(s.list_messages(&id, all)?.0) } else { None };
            Ok((chat, messages))
        })
        .await
        .map_err(store_error)?;
    Ok(Response::json(200, &ChatOut::new(&chat, messages.as_deref())))
}

/// `DELETE /v1/chats/{chat_id}`.
pub async fn delete(chats: &Chats, chat_id: &str) -> Result<Response, ApiError> {
    let id = chat_id.to_string();
    let deleted = chats.db.call(true, move |s| s.delete_chat(&id)).await.map_err(store_error)?;
    if !deleted {
        return Err(store_error(StoreError::NotFound(chat_id.to_string())));
    }
    Ok(Response::json(200, &DeletedOut { chat_id, object: "chat.deleted", deleted: true }))
}

/// `GET /v1/chats/{chat_id}/messages`.
pub async fn messages(chats: &Chats, req: &Request, chat_id: &str) -> Result<Response, ApiError> {
    let page = wire::page(|n| query(req, n))?;
    let id = chat_id.to_string();
    let (data, total) = chats.db.call(false, move |s| s.list_messages(&id, page)).await.map_err(store_error)?;
    let has_more = page.offset() as u64 + (data.len() as u64) < total;
    let data = data.iter().map(MessageOut::from).collect();
    Ok(Response::json(200, &ListOut { object: "list", data, page: page.page, page_size: page.size, total, has_more }))
}

/// Holds a chat in this process's answering set until the turn's answer is stored.
struct Answering {
    chats: Arc<Chats>,
    chat_id: String,
}

impl Answering {
    fn take(chats: &Arc<Chats>, chat_id: &str) -> Result<Answering, ApiError> {
        let mut set = chats.answering.lock().unwrap_or_else(|e| e.into_inner());
        if !set.insert(chat_id.to_string()) {
            let e = StoreError::Busy { chat_id: chat_id.to_string(), lease_secs: ANSWER_LEASE_SECS };
            return Err(store_error(e));
        }
        Ok(Answering { chats: chats.clone(), chat_id: chat_id.to_string() })
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.chats.answering.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.chat_id);
    }
}

/// The answer of one turn while it is generated; stored exactly once, by [`Answer::store`] or,
/// if the turn is dropped first (the client left), by `Drop` as `interrupted`.
struct Answer {
    metrics: Arc<Metrics>,
    user: Message,
    text: String,
    prompt_tokens: usize,
    completion_tokens: usize,
    stored: bool,
    /// The turn's wait on the store so far (its question's round trip).
    db_wait: Duration,
    // Dropped last of the fields: the chat is free only once its answer is queued.
    answering: Answering,
}

impl Answer {
    fn message(&self, finish_reason: &str) -> Message {
        Message {
            message_id: random_id("msg_"),
            role: "assistant".into(),
            content: self.text.clone(),
            created_at: unix_now(),
            finish_reason: Some(finish_reason.into()),
            prompt_tokens: Some(self.prompt_tokens as i64),
            completion_tokens: Some(self.completion_tokens as i64),
            ..self.user.clone()
        }
    }

    /// Stores the answer and waits for its commit.
    async fn store(&mut self, finish_reason: &str) -> Result<Message, ApiError> {
        self.stored = true;
        let m = self.message(finish_reason);
        let stored = m.clone();
        let t0 = Instant::now();
        self.answering.chats.db.call(true, move |s| s.append_message(&stored)).await.map_err(store_error)?;
        self.metrics.record_chat_turn_db_wait(self.db_wait + t0.elapsed());
        self.metrics.record_chat_message(true, m.content.chars().count() as u64);
        Ok(m)
    }

    /// The turn was refused before the engine took it (a bad parameter, a conversation too long
    /// for the context, a full queue): nothing was generated and no record made, so no answer
    /// is stored; the user message is withdrawn, leaving the chat as it was for the client to
    /// send again, and the refusal is the turn's answer.
    async fn withdraw(mut self, refusal: ApiError) -> ApiError {
        self.stored = true;
        let id = self.user.message_id.clone();
        match self.answering.chats.db.call(true, move |s| s.withdraw_turn(&id)).await {
            Ok(_) => refusal,
            Err(e) => store_error(e),
        }
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        if self.stored {
            return;
        }
        let m = self.message("interrupted");
        self.metrics.record_chat_message(true, m.content.chars().count() as u64);
        let what = format!("storing the interrupted answer of chat {}", m.chat_id);
        self.answering.chats.db.write_detached(what, move |s| s.append_message(&m));
    }
}

/// How the answer ended, as the stored `finish_reason`.
fn finish_reason(end: &End) -> &'static str {
    match end.error.as_ref().and_then(|e| e.code) {
        Some("server_shutdown") => "interrupted",
        _ if end.timed_out => "length",
        _ => end.finish_reason,
    }
}

/// `POST /v1/chats/{chat_id}/messages`.
pub async fn post(
    chats: &Arc<Chats>,
    llm: &Arc<Llm>,
    cfg: &ApiConfig,
    req: Request,
    chat_id: &str,
    metrics: &Arc<Metrics>,
    guard: InFlightGuard,
) -> Result<Response, ApiError> {
    let p = wire::parse_post(&req.body, cfg.max_message_bytes)?;
    let answering = Answering::take(chats, chat_id)?;
    let id = request_id(Kind::Chat);
    let user = Message {
        message_id: random_id("msg_"),
        chat_id: chat_id.to_string(),
        role: "user".into(),
        content: p.content,
        created_at: unix_now(),
        finish_reason: None,
        prompt_tokens: None,
        completion_tokens: None,
        request_id: Some(id.clone()),
    };
    let lease = cfg.request_timeout.map_or(ANSWER_LEASE_SECS, |t| t.as_secs() as i64 + 1);
    let u = user.clone();
    let t0 = Instant::now();
    let Turn { chat, messages } = chats.db.call(true, move |s| s.begin_turn(&u, lease)).await.map_err(store_error)?;
    let db_wait = t0.elapsed();
    let mut answer = Answer {
        metrics: metrics.clone(),
        user,
        text: String::new(),
        prompt_tokens: 0,
        completion_tokens: 0,
        stored: false,
        db_wait,
        answering,
    };
    let params = match wire::turn_params(&chat.defaults, &p.overrides) {
        Ok(p) => p,
        Err(e) => return Err(answer.withdraw(e).await),
    };
    let system = chat.system.map(|s| ChatMessage { role: "system".into(), content: s });
    let conversation = system
        .into_iter()
        .chain(messages.into_iter().map(|m| ChatMessage { role: m.role, content: m.content }))
        .collect();
    let gen = match prepare::conversation(llm, conversation, params, cfg.special_tokens_in_content).await {
        Ok(prepared) => submit(llm, cfg, metrics, MESSAGES_ROUTE, prepared, id),
        Err(e) => Err(e),
    };
    let mut gen = match gen {
        Ok(g) => g,
        Err(e) => return Err(answer.withdraw(e).await),
    };
    // Accepted only now that its answer has begun: a withdrawn question is not counted.
    metrics.record_chat_message(false, answer.user.content.chars().count() as u64);
    gen.observe_lengths = false;
    answer.prompt_tokens = gen.prompt_tokens;
    if gen.params.stream {
        let (tx, body) = async_channel::bounded(64);
        Ok(Response::sse_produced(body, Box::pin(stream(gen, answer, tx, guard, cfg.keep_alive()))))
    } else {
        whole(gen, answer).await
    }
}

async fn whole(mut gen: Generation, mut answer: Answer) -> Result<Response, ApiError> {
    loop {
        match gen.next_piece().await {
            Piece::Delta { text, .. } => answer.text.push_str(&text),
            // The chat routes offer no tools, so no call is ever found.
            Piece::ToolCall { .. } => {}
            Piece::End(end) => {
                answer.completion_tokens = gen.completion_tokens;
                let stored = answer.store(finish_reason(&end)).await?;
                if let (Some(e), 0) = (&end.error, gen.completion_tokens) {
                    return Err(e.clone());
                }
                let out = TurnOut {
                    object: "chat.turn",
                    user_message: MessageOut::from(&answer.user),
                    assistant_message: MessageOut::from(&stored),
                    error: end.error.as_ref().map(ApiError::detail),
                };
                return Ok(Response::json(200, &out));
            }
        }
    }
}

/// Streams the answer as `chat.completion.chunk` events, with the keep-alive comments of every
/// stream (see [`KeepAlive`]); the last one is followed by the stored turn (`chat.turn`) and
/// `[DONE]`. The answer is committed before that end is sent.
async fn stream(
    mut gen: Generation,
    mut answer: Answer,
    out: async_channel::Sender<Vec<u8>>,
    guard: InFlightGuard,
    keep_alive: Duration,
) {
    let _guard = guard;
    let mut keep = KeepAlive::new(keep_alive);
    if out.send(gen.chunk(None, true, &[], None)).await.is_err() {
        return;
    }
    keep.sent();
    while let Some(piece) = keep.next(&mut gen, &out).await {
        match piece {
            Piece::Delta { text, logprobs } => {
                answer.text.push_str(&text);
                answer.completion_tokens = gen.completion_tokens;
                if out.send(gen.chunk(Some(&text), false, &logprobs, None)).await.is_err() {
                    return;
                }
                keep.sent();
            }
            Piece::ToolCall { .. } => {}
            Piece::End(end) => {
                answer.completion_tokens = gen.completion_tokens;
                let mut bytes = gen.chunk(None, false, &[], Some(&end));
                match answer.store(finish_reason(&end)).await {
                    Ok(stored) => {
                        let turn = TurnOut {
                            object: "chat.turn",
                            user_message: MessageOut::from(&answer.user),
                            assistant_message: MessageOut::from(&stored),
                            error: end.error.as_ref().map(ApiError::detail),
                        };
                        bytes.extend_from_slice(&super::wire::sse_event(&turn));
                    }
                    Err(e) => {
                        bytes.extend_from_slice(&super::wire::sse_event(&super::wire::ErrorBody { error: e.detail() }))
                    }
                }
                bytes.extend_from_slice(b"data: [DONE]\n\n");
                let _ = out.send(bytes).await;
                return;
            }
        }
    }
}
