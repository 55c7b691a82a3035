//! Anthropic's Messages wire format, as typed structs: the message, its content blocks, the
//! named stream events and the error shape. Handlers fill these; nothing else spells an
//! Anthropic body.

use super::error::ApiError;
use crate::http::Response;
use serde::Serialize;
use serde_json::value::RawValue;

/// A whole answer (`"type": "message"`); in `message_start` with no content yet.
#[derive(Serialize)]
pub struct Message<'a> {
    pub id: &'a str,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub role: &'static str,
    pub model: &'a str,
    pub content: Vec<ContentBlock<'a>>,
    pub stop_reason: Option<&'static str>,
    pub stop_sequence: Option<&'a str>,
    pub usage: MessageUsage,
    /// The generation's metrics record, as the OpenAI routes carry it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtplx_stats: Option<&'a RawValue>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock<'a> {
    Text {
        text: &'a str,
    },
    /// A tool call: `input` is the arguments object.
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: &'a RawValue,
    },
}

#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageUsage {
    /// Anthropic's meaning: the input tokens computed, not those read from the cache.
    pub input_tokens: usize,
    pub output_tokens: usize,
    pub cache_read_input_tokens: usize,
    /// Always 0: a prefix is cached as it is computed, with no separate write to bill.
    pub cache_creation_input_tokens: usize,
}

/// `POST /v1/messages/count_tokens`.
#[derive(Serialize)]
pub struct TokenCount {
    pub input_tokens: usize,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Delta<'a> {
    TextDelta {
        text: &'a str,
    },
    /// A piece of a tool call's `input`, as JSON text.
    InputJsonDelta {
        partial_json: &'a str,
    },
}

#[derive(Serialize)]
pub struct MessageDeltaBody<'a> {
    pub stop_reason: Option<&'static str>,
    pub stop_sequence: Option<&'a str>,
}

/// The events of a streamed answer, in their order: `message_start`, per block
/// `content_block_start`, `content_block_delta`s and `content_block_stop`, then
/// `message_delta` and `message_stop`; `ping` anywhere; `error` ends a failed stream.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent<'a> {
    MessageStart {
        message: Message<'a>,
    },
    ContentBlockStart {
        index: usize,
        content_block: ContentBlock<'a>,
    },
    ContentBlockDelta {
        index: usize,
        delta: Delta<'a>,
    },
    ContentBlockStop {
        index: usize,
    },
    MessageDelta {
        delta: MessageDeltaBody<'a>,
        usage: MessageUsage,
    },
    MessageStop {
        #[serde(skip_serializing_if = "Option::is_none")]
        mtplx_stats: Option<&'a RawValue>,
    },
    Error {
        error: ErrorDetail<'a>,
    },
}

impl StreamEvent<'_> {
    fn name(&self) -> &'static str {
        match self {
            StreamEvent::MessageStart { .. } => "message_start",
            StreamEvent::ContentBlockStart { .. } => "content_block_start",
            StreamEvent::ContentBlockDelta { .. } => "content_block_delta",
            StreamEvent::ContentBlockStop { .. } => "content_block_stop",
            StreamEvent::MessageDelta { .. } => "message_delta",
            StreamEvent::MessageStop { .. } => "message_stop",
            StreamEvent::Error { .. } => "error",
        }
    }

    /// The event on the wire: an `event:` line (Anthropic's SDK dispatches on it), then `data:`.
    pub fn sse(&self) -> Vec<u8> {
        let mut out = format!("event: {}\ndata: ", self.name()).into_bytes();
        // Serializing these structs cannot fail: no maps with non-string keys, no custom impls.
        let _ = serde_json::to_writer(&mut out, self);
        out.extend_from_slice(b"\n\n");
        out
    }
}

/// The `ping` event, sent at a stream's start and through long silences (a long prefill).
pub const PING: &[u8] = b"event: ping\ndata: {\"type\": \"ping\"}\n\n";

/// `{"type": "error", "error": {"type", "message"}}`.
#[derive(Serialize)]
pub struct ErrorBody<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub error: ErrorDetail<'a>,
}

#[derive(Serialize)]
pub struct ErrorDetail<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub message: &'a str,
}

/// Anthropic's error type for a status: the statuses stay those of the OpenAI routes.
fn error_kind(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}

/// `e`'s detail in Anthropic's shape.
pub fn error_detail(e: &ApiError) -> ErrorDetail<'_> {
    ErrorDetail { kind: error_kind(e.status), message: &e.message }
}

/// `e` as an Anthropic error response: the same status and headers, Anthropic's body.
pub fn error_response(e: ApiError) -> Response {
    let mut r = Response::json(e.status, &ErrorBody { kind: "error", error: error_detail(&e) });
    for (n, v) in e.headers {
        r.headers.push((n.to_string(), v));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_carry_their_name_on_an_event_line() {
        let e = StreamEvent::ContentBlockDelta { index: 0, delta: Delta::TextDelta { text: "hi" } };
        assert_eq!(
            String::from_utf8(e.sse()).unwrap(),
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n"
        );
        let stop = StreamEvent::MessageStop { mtplx_stats: None };
        assert_eq!(
            String::from_utf8(stop.sse()).unwrap(),
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
        );
    }

    #[test]
    fn errors_keep_their_status_in_anthropics_shape() {
        let e = ApiError::new(429, "rate_limit_error", "slow down").header("Retry-After", "3");
        let r = error_response(e);
        let crate::http::Body::Full(bytes) = &r.body else { panic!("an error is a full body") };
        let v: serde_json::Value = serde_json::from_slice(bytes).unwrap();
        assert_eq!(r.status, 429);
        assert_eq!(
            v,
            serde_json::json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}})
        );
        assert!(r.headers.iter().any(|(n, v)| n == "Retry-After" && v == "3"));
        for (status, kind) in [
            (400, "invalid_request_error"),
            (401, "authentication_error"),
            (404, "not_found_error"),
            (413, "request_too_large"),
            (500, "api_error"),
            (503, "overloaded_error"),
            (504, "api_error"),
        ] {
            assert_eq!(error_kind(status), kind);
        }
    }
}
