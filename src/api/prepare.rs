//! From a request body to prompt tokens, off the I/O thread: parsing, validation, the chat
//! template and the tokenizer all cost time in proportion to the input, so they run on a small
//! pool of blocking threads while the I/O thread serves everyone else. A prompt that cannot fit
//! the context is refused by its size in bytes before any of that work.

use super::anthropic_request::{parse_count_tokens, parse_messages};
use super::error::ApiError;
use super::generation::Kind;
use super::openai_request::{parse_chat, parse_completion, GenParams};
use super::state::Llm;
use crate::engine::Constraint;
use crate::model::ChatMessage;
use smol::lock::Semaphore;
use std::sync::Arc;

/// Requests prepared at once; more wait their turn. Two keep one core free for decoding on the
/// 2-core machines this runs on, and bound the tokenizer's memory to two prompts' worth.
pub const PREPARE_CONCURRENCY: usize = 2;

static PERMITS: Semaphore = Semaphore::new(PREPARE_CONCURRENCY);

/// A request ready for the engine.
#[derive(Debug)]
pub struct Prepared {
    pub kind: Kind,
    pub tokens: Vec<u32>,
    pub params: GenParams,
    /// Characters of the question (the last user message, or the completion prompt).
    pub question_chars: Option<u64>,
    /// The request's grammar, compiled here, off the decode thread and the I/O threads.
    pub constraint: Option<Constraint>,
}

/// Compiles the grammar `params` asks for, or the 400 that says why it cannot be, naming the
/// request's field `param`.
fn compile(llm: &Llm, params: &GenParams, param: &str) -> Result<Option<Constraint>, ApiError> {
    let Some(g) = &params.format else { return Ok(None) };
    let vocab = llm
        .grammar_vocab()
        .map_err(|e| ApiError::new(500, "server_error", format!("structured output is unavailable: {e}")))?;
    // A grammar made from the tools is the tools' fault when it does not compile.
    let param = if params.tools.is_some() { "tools" } else { param };
    vocab.compile(g).map(Some).map_err(|e| ApiError::invalid(param, format!("'{param}': {e}")))
}

/// Parses, validates and tokenizes a chat request on the preparation pool.
pub async fn chat(llm: &Arc<Llm>, body: Vec<u8>, special_in_content: bool) -> Result<Prepared, ApiError> {
    let llm = llm.clone();
    on_pool(move || {
        let r = parse_chat(&body)?;
        let messages: Vec<ChatMessage> =
            r.messages.iter().map(|m| ChatMessage { role: m.role.clone(), content: m.content.clone() }).collect();
        render(&llm, &messages, None, r.params, special_in_content, "response_format")
    })
    .await
}

/// Parses, validates and tokenizes an Anthropic Messages request (`count` for
/// `/v1/messages/count_tokens`, which needs no generation settings) on the preparation pool:
/// the conversation goes through the same template and tokenizer as an OpenAI chat.
pub async fn messages(
    llm: &Arc<Llm>,
    body: Vec<u8>,
    special_in_content: bool,
    count: bool,
) -> Result<Prepared, ApiError> {
    let llm = llm.clone();
    on_pool(move || {
        let r = if count { parse_count_tokens(&body)? } else { parse_messages(&body)? };
        let messages: Vec<ChatMessage> =
            r.messages.iter().map(|m| ChatMessage { role: m.role.clone(), content: m.content.clone() }).collect();
        render(&llm, &messages, r.prefill.as_deref(), r.params, special_in_content, "output_config.format")
    })
    .await
}

/// A conversation already validated (a stored chat) through the chat template and the
/// tokenizer, on the preparation pool: the very path of `/v1/chat/completions`.
pub async fn conversation(
    llm: &Arc<Llm>,
    messages: Vec<ChatMessage>,
    params: GenParams,
    special_in_content: bool,
) -> Result<Prepared, ApiError> {
    let llm = llm.clone();
    on_pool(move || render(&llm, &messages, None, params, special_in_content, "response_format")).await
}

/// `messages` through the chat template up to where the assistant's answer begins, then
/// `prefill` (the start of the answer, which the model continues) as plain text.
fn render(
    llm: &Llm,
    messages: &[ChatMessage],
    prefill: Option<&str>,
    params: GenParams,
    special_in_content: bool,
    format_param: &str,
) -> Result<Prepared, ApiError> {
    let content_bytes: usize = messages.iter().map(|m| m.content.len()).sum::<usize>() + prefill.map_or(0, str::len);
    refuse_oversized(llm, content_bytes, "messages")?;
    // The template's own text becomes control tokens; message contents stay plain text.
    let mut prompt = llm
        .template
        .render_prompt(&llm.tokenizer, messages, true, &Default::default())
        .map_err(|e| ApiError::invalid("messages", format!("the chat template refused the messages: {e}")))?;
    if let Some(p) = prefill {
        let at = prompt.text.len();
        prompt.text.push_str(p);
        prompt.literal.extend(llm.tokenizer.special_token_spans(p).into_iter().map(|r| r.start + at..r.end + at));
    }
    refuse_unspellable(llm, &prompt.text, "messages")?;
    let tokens = llm
        .tokenizer
        .encode_chat(&prompt, special_in_content)
        .map_err(|e| ApiError::invalid("messages", e.to_string()))?;
    let question_chars = messages.iter().rev().find(|m| m.role == "user").map(|m| m.content.chars().count() as u64);
    let constraint = compile(llm, &params, format_param)?;
    Ok(Prepared { kind: Kind::Chat, tokens, params, question_chars, constraint })
}

/// Parses, validates and tokenizes a completion request on the preparation pool. A raw prompt
/// keeps its special-token strings as control tokens: writing them is what the route is for.
pub async fn completion(llm: &Arc<Llm>, body: Vec<u8>) -> Result<Prepared, ApiError> {
    let llm = llm.clone();
    on_pool(move || {
        let r = parse_completion(&body)?;
        refuse_oversized(&llm, r.prompt.len(), "prompt")?;
        refuse_unspellable(&llm, &r.prompt, "prompt")?;
        let tokens = llm
            .tokenizer
            .encode(&r.prompt, llm.tokenizer.adds_bos())
            .map_err(|e| ApiError::invalid("prompt", e.to_string()))?;
        if tokens.is_empty() {
            return Err(ApiError::invalid("prompt", "'prompt' must not be empty"));
        }
        let question_chars = Some(r.prompt.chars().count() as u64);
        let constraint = compile(&llm, &r.params, "response_format")?;
        Ok(Prepared { kind: Kind::Completion, tokens, params: r.params, question_chars, constraint })
    })
    .await
}

async fn on_pool<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let _permit = PERMITS.acquire().await;
    smol::unblock(work).await
}

/// Every token stands for a bounded number of bytes of text (the tokenizer knows the bound), so
/// a text needs at least so many tokens whatever the tokenizer makes of it: one that needs more
/// than the context holds cannot fit, and is refused before any templating or tokenizing.
fn refuse_oversized(llm: &Llm, text_bytes: usize, param: &str) -> Result<(), ApiError> {
    check_least(llm, text_bytes, llm.tokenizer.min_token_count(text_bytes), param)
}

/// Finer than [`refuse_oversized`]: a text needs at least the fewest vocabulary entries that
/// spell it. Taken on the text to be encoded, after templating, since a template may drop text
/// (the reasoning of earlier turns). The tokenizer's memory grows with the tokens it makes (some
/// 300 bytes per token), and a text of short tokens only, such as a run of digits, makes a token
/// per byte: refused here, it is never encoded.
fn refuse_unspellable(llm: &Llm, text: &str, param: &str) -> Result<(), ApiError> {
    // A text of no more bytes than the context holds tokens cannot need more tokens than that.
    if text.len() <= llm.ctx {
        return Ok(());
    }
    check_least(llm, text.len(), llm.tokenizer.min_tokens_within(text), param)
}

fn check_least(llm: &Llm, text_bytes: usize, least: usize, param: &str) -> Result<(), ApiError> {
    if least > llm.ctx {
        return Err(ApiError::invalid(
            param,
            format!("the prompt has {text_bytes} bytes of text, at least {least} tokens; this model's maximum context length is {} tokens", llm.ctx),
        )
        .code("context_length_exceeded"));
    }
    Ok(())
}
