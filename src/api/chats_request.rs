//! The chat routes' bodies and queries, validated into plain structs, and their answers as
//! typed structs. Sampling fields follow `/v1/chat/completions` exactly (the same validation);
//! a chat stores them as its defaults and a message may override them for its turn.

use super::error::ApiError;
use super::openai_request::{chat_params, parse_object, GenParams};
use super::request_fields::type_name;
use super::wire::ErrorDetail;
use crate::store::{Chat, Message, MAX_PAGE_SIZE};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// Longest chat title, in bytes: a label, not a document.
pub const MAX_TITLE_BYTES: usize = 1024;
/// Entries per page when a request names no `page_size`.
pub const DEFAULT_PAGE_SIZE: u32 = 20;
/// Fields a chat keeps as its sampling defaults.
pub const SAMPLING_FIELDS: &[&str] = &[
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "stop",
];

/// `POST /v1/chats`, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateChat {
    pub title: Option<String>,
    pub system: Option<String>,
    /// The sampling fields given, as a JSON object.
    pub defaults: Map<String, Value>,
}

/// `POST /v1/chats/{chat_id}/messages`, validated (its sampling fields still to be laid over
/// the chat's defaults, see [`turn_params`]).
#[derive(Debug, Clone, PartialEq)]
pub struct PostMessage {
    pub content: String,
    pub overrides: Map<String, Value>,
}

fn too_large(param: &str, len: usize, max: usize) -> ApiError {
    let msg = format!("'{param}' has {len} bytes, over the limit of {max} bytes (--max-message-bytes)");
    let mut e = ApiError::new(413, "invalid_request_error", msg).code("message_too_large");
    e.param = Some(param.into());
    e
}

fn opt_string(m: &Map<String, Value>, name: &str) -> Result<Option<String>, ApiError> {
    match m.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(ApiError::invalid(name, format!("'{name}' must be a string, not {}", type_name(v)))),
    }
}

/// An empty body is an empty object: every field of a new chat is optional.
pub fn parse_create(body: &[u8], max_bytes: usize) -> Result<CreateChat, ApiError> {
    let mut m = if body.iter().all(u8::is_ascii_whitespace) { Map::new() } else { parse_object(body)? };
    let title = opt_string(&m, "title")?;
    if let Some(t) = &title {
        if t.len() > MAX_TITLE_BYTES {
            return Err(ApiError::invalid(
                "title",
                format!("'title' has {} bytes; at most {MAX_TITLE_BYTES} are allowed", t.len()),
            ));
        }
    }
    let system = opt_string(&m, "system")?;
    if let Some(s) = &system {
        if s.len() > max_bytes {
            return Err(too_large("system", s.len(), max_bytes));
        }
    }
    m.remove("title");
    m.remove("system");
    // Every other field is checked as /v1/chat/completions checks it (ranges, refused fields).
    chat_params(&m)?;
    let defaults = m.into_iter().filter(|(k, v)| SAMPLING_FIELDS.contains(&k.as_str()) && !v.is_null()).collect();
    Ok(CreateChat { title, system, defaults })
}

pub fn parse_post(body: &[u8], max_bytes: usize) -> Result<PostMessage, ApiError> {
    let mut m = parse_object(body)?;
    let content = match m.remove("content") {
        Some(Value::String(s)) => s,
        None | Some(Value::Null) => return Err(ApiError::invalid("content", "'content' is required")),
        Some(v) => {
            return Err(ApiError::invalid("content", format!("'content' must be a string, not {}", type_name(&v))))
        }
    };
    if content.is_empty() {
        return Err(ApiError::invalid("content", "'content' must not be empty"));
    }
    if content.len() > max_bytes {
        return Err(too_large("content", content.len(), max_bytes));
    }
    if m.contains_key("messages") {
        return Err(ApiError::invalid(
            "messages",
            "'messages' is not taken here: the chat holds the conversation; send one message as 'content'",
        ));
    }
    chat_params(&m)?;
    Ok(PostMessage { content, overrides: m })
}

/// A turn's settings: the message's fields laid over the chat's stored defaults.
pub fn turn_params(defaults: &str, overrides: &Map<String, Value>) -> Result<GenParams, ApiError> {
    let mut m: Map<String, Value> = serde_json::from_str(defaults).unwrap_or_default();
    for (k, v) in overrides {
        m.insert(k.clone(), v.clone());
    }
    chat_params(&m)
}

/// `page` and `page_size` of a list route.
pub fn page(query: impl Fn(&str) -> Option<String>) -> Result<crate::store::Page, ApiError> {
    let num = |name: &str, lo: u32, hi: u32, default: u32| -> Result<u32, ApiError> {
        match query(name) {
            None => Ok(default),
            Some(v) => v.parse::<u32>().ok().filter(|n| (lo..=hi).contains(n)).ok_or_else(|| {
                ApiError::invalid(name, format!("'{name}' must be an integer from {lo} to {hi}, got '{v}'"))
            }),
        }
    };
    Ok(crate::store::Page {
        page: num("page", 1, u32::MAX, 1)?,
        size: num("page_size", 1, MAX_PAGE_SIZE, DEFAULT_PAGE_SIZE)?,
    })
}

/// `include_messages=true|false`.
pub fn flag(query: Option<String>, name: &str) -> Result<bool, ApiError> {
    match query.as_deref() {
        None | Some("false") | Some("0") => Ok(false),
        Some("true") | Some("1") | Some("") => Ok(true),
        Some(v) => Err(ApiError::invalid(name, format!("'{name}' must be true or false, got '{v}'"))),
    }
}

/// A chat as the API answers it.
#[derive(Serialize)]
pub struct ChatOut<'a> {
    pub object: &'static str,
    pub chat_id: &'a str,
    pub created_at: i64,
    pub title: Option<&'a str>,
    pub system: Option<&'a str>,
    /// The chat's sampling defaults.
    pub defaults: Box<RawValue>,
    pub client_ip: Option<&'a str>,
    pub country: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<MessageOut<'a>>>,
}

impl<'a> ChatOut<'a> {
    pub fn new(c: &'a Chat, messages: Option<&'a [Message]>) -> ChatOut<'a> {
        let defaults = RawValue::from_string(c.defaults.clone())
            .unwrap_or_else(|_| RawValue::from_string("{}".into()).expect("{} is JSON"));
        ChatOut {
            object: "chat",
            chat_id: &c.chat_id,
            created_at: c.created_at,
            title: c.title.as_deref(),
            system: c.system.as_deref(),
            defaults,
            client_ip: c.client_ip.as_deref(),
            country: c.country.as_deref(),
            messages: messages.map(|m| m.iter().map(MessageOut::from).collect()),
        }
    }
}

#[derive(Serialize)]
pub struct MessageOut<'a> {
    pub object: &'static str,
    pub message_id: &'a str,
    pub chat_id: &'a str,
    pub role: &'a str,
    pub content: &'a str,
    pub created_at: i64,
    pub finish_reason: Option<&'a str>,
    pub prompt_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
    pub request_id: Option<&'a str>,
}

impl<'a> From<&'a Message> for MessageOut<'a> {
    fn from(m: &'a Message) -> MessageOut<'a> {
        MessageOut {
            object: "chat.message",
            message_id: &m.message_id,
            chat_id: &m.chat_id,
            role: &m.role,
            content: &m.content,
            created_at: m.created_at,
            finish_reason: m.finish_reason.as_deref(),
            prompt_tokens: m.prompt_tokens,
            completion_tokens: m.completion_tokens,
            request_id: m.request_id.as_deref(),
        }
    }
}

/// A page of chats or messages.
#[derive(Serialize)]
pub struct ListOut<T> {
    pub object: &'static str,
    pub data: Vec<T>,
    pub page: u32,
    pub page_size: u32,
    pub total: u64,
    pub has_more: bool,
}

/// A turn's end: the stored question and answer (and, for an answer cut short by a failure,
/// what failed).
#[derive(Serialize)]
pub struct TurnOut<'a> {
    pub object: &'static str,
    pub user_message: MessageOut<'a>,
    pub assistant_message: MessageOut<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail<'a>>,
}

#[derive(Serialize)]
pub struct DeletedOut<'a> {
    pub chat_id: &'a str,
    pub object: &'static str,
    pub deleted: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_keeps_sampling_fields_and_checks_them() {
        let c =
            parse_create(br#"{"title":"t","system":"s","temperature":0.3,"max_tokens":9,"user":"u"}"#, 100).unwrap();
        assert_eq!((c.title.as_deref(), c.system.as_deref()), (Some("t"), Some("s")));
        assert_eq!(serde_json::to_string(&c.defaults).unwrap(), r#"{"max_tokens":9,"temperature":0.3}"#);
        assert_eq!(parse_create(b"", 100).unwrap().defaults.len(), 0);
        let e = parse_create(br#"{"temperature":9}"#, 100).unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (400, Some("temperature")));
        let e = parse_create(br#"{"tools":[{"type":"function"}]}"#, 100).unwrap_err();
        assert_eq!(e.code, Some("unsupported_parameter"));
        let e = parse_create(br#"{"system":"0123456789"}"#, 5).unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (413, Some("system")));
        assert!(e.message.contains("limit of 5 bytes"), "{}", e.message);
    }

    #[test]
    fn post_needs_content_within_the_limit() {
        let p = parse_post(br#"{"content":"hi","stream":true,"temperature":0}"#, 10).unwrap();
        assert_eq!(p.content, "hi");
        let params = turn_params(r#"{"temperature":0.7,"max_tokens":5}"#, &p.overrides).unwrap();
        assert_eq!((params.sampling.temperature, params.max_tokens, params.stream), (0.0, Some(5), true));
        for (body, status, param) in [
            (&br#"{"content":"0123456789x"}"#[..], 413, "content"),
            (br#"{"content":""}"#, 400, "content"),
            (br#"{"content":5}"#, 400, "content"),
            (br#"{}"#, 400, "content"),
            (br#"{"content":"a","messages":[]}"#, 400, "messages"),
            (br#"{"content":"a","top_p":7}"#, 400, "top_p"),
        ] {
            let e = parse_post(body, 10).unwrap_err();
            assert_eq!((e.status, e.param.as_deref()), (status, Some(param)), "{}", String::from_utf8_lossy(body));
        }
        assert_eq!(parse_post(b"[", 10).unwrap_err().code, Some("invalid_json"));
    }

    #[test]
    fn pages_are_bounded() {
        let q = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        assert_eq!(page(q(&[])).unwrap(), crate::store::Page { page: 1, size: DEFAULT_PAGE_SIZE });
        assert_eq!(page(q(&[("page", "3"), ("page_size", "100")])).unwrap(), crate::store::Page { page: 3, size: 100 });
        assert_eq!(page(q(&[("page_size", "101")])).unwrap_err().param.as_deref(), Some("page_size"));
        assert_eq!(page(q(&[("page", "0")])).unwrap_err().param.as_deref(), Some("page"));
        assert!(flag(Some("yes".into()), "include_messages").is_err());
        assert!(flag(Some("true".into()), "include_messages").unwrap());
    }
}
