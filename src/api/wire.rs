//! The OpenAI wire format of every answer, as typed structs: models, completions, chat
//! completions, stream chunks, usage, logprobs and errors. Handlers fill these; nothing else
//! spells a response body.

use serde::Serialize;
use serde_json::value::RawValue;
use std::collections::BTreeMap;

/// `{"error": {...}}`, OpenAI's error shape.
#[derive(Serialize, Debug)]
pub struct ErrorBody<'a> {
    pub error: ErrorDetail<'a>,
}

#[derive(Serialize, Debug, Clone)]
pub struct ErrorDetail<'a> {
    pub message: &'a str,
    #[serde(rename = "type")]
    pub kind: &'a str,
    pub param: Option<&'a str>,
    pub code: Option<&'a str>,
}

/// `GET /v1/models`.
#[derive(Serialize)]
pub struct ModelList<'a> {
    pub object: &'static str,
    pub data: Vec<ModelCard<'a>>,
}

/// One model, as `GET /v1/models` lists it and `GET /v1/models/{id}` returns it.
#[derive(Serialize)]
pub struct ModelCard<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
    /// The context a request may really use: the model's, bounded by `--ctx` and the KV budget.
    pub context_length: usize,
    pub architecture: &'a str,
    /// `model` (the file's own chat template) or `built-in NAME` (the file carries none).
    pub chat_template: String,
}

#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    pub prompt_tokens_details: PromptTokensDetails,
}

/// OpenAI's breakdown of the prompt: the tokens a cached prefix supplied (not computed again).
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct PromptTokensDetails {
    pub cached_tokens: usize,
}

impl Usage {
    pub fn new(prompt_tokens: usize, completion_tokens: usize, cached_tokens: usize) -> Usage {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            prompt_tokens_details: PromptTokensDetails { cached_tokens },
        }
    }
}

/// A whole answer (`chat.completion` or `text_completion`).
#[derive(Serialize)]
pub struct Completion<'a, C> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub choices: Vec<C>,
    pub usage: Usage,
    /// The request's metrics record, as `/v1/mtplx/metrics` shows it.
    pub mtplx_stats: &'a RawValue,
}

/// One streamed event (`chat.completion.chunk` or `text_completion`).
#[derive(Serialize)]
pub struct Chunk<'a, C> {
    pub id: &'a str,
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub choices: Vec<C>,
    /// Only on the extra usage chunk (`stream_options.include_usage`), whose `choices` is empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Only on the last chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtplx_stats: Option<&'a RawValue>,
    /// Only on the last chunk of a stream that failed or was cut short.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail<'a>>,
}

#[derive(Serialize)]
pub struct ChatChoice<'a> {
    pub index: u32,
    pub message: ChatMessageOut<'a>,
    pub logprobs: Option<ChatLogprobs<'a>>,
    pub finish_reason: &'a str,
}

#[derive(Serialize)]
pub struct ChatMessageOut<'a> {
    pub role: &'static str,
    /// `null` when the answer is only tool calls.
    pub content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallOut<'a>>>,
}

/// A tool call of a whole answer.
#[derive(Serialize)]
pub struct ToolCallOut<'a> {
    pub id: &'a str,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionOut<'a>,
}

#[derive(Serialize)]
pub struct FunctionOut<'a> {
    pub name: &'a str,
    /// The arguments object as a JSON string, as OpenAI sends them.
    pub arguments: &'a str,
}

/// A piece of a streamed tool call: the first names it (`id`, `type`, `function.name`), the
/// next carry `function.arguments` in pieces.
#[derive(Serialize)]
pub struct ToolCallDelta<'a> {
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<&'a str>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    pub function: FunctionDelta<'a>,
}

#[derive(Serialize)]
pub struct FunctionDelta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<&'a str>,
    pub arguments: &'a str,
}

#[derive(Serialize)]
pub struct ChatChunkChoice<'a> {
    pub index: u32,
    pub delta: ChatDelta<'a>,
    pub logprobs: Option<ChatLogprobs<'a>>,
    pub finish_reason: Option<&'a str>,
}

#[derive(Serialize, Default)]
pub struct ChatDelta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta<'a>>>,
}

#[derive(Serialize)]
pub struct ChatLogprobs<'a> {
    pub content: Vec<ChatTokenLogprob<'a>>,
}

/// Chat's logprob entry: `token` is the token's text (a partial UTF-8 character shows as
/// U+FFFD), `bytes` its real bytes, so that the bytes of all tokens rebuild the text.
#[derive(Serialize)]
pub struct ChatTokenLogprob<'a> {
    pub token: String,
    pub logprob: f32,
    pub bytes: &'a [u8],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_logprobs: Option<Vec<ChatTokenLogprob<'a>>>,
}

#[derive(Serialize)]
pub struct TextChoice<'a> {
    pub index: u32,
    pub text: &'a str,
    pub logprobs: Option<CompletionLogprobs>,
    pub finish_reason: Option<&'a str>,
}

/// Legacy completions' logprobs: parallel arrays, alternatives keyed by token string. A token
/// that is not whole UTF-8 is spelled `bytes:\xNN...`, as OpenAI does, so that distinct tokens
/// stay distinct keys.
#[derive(Serialize, Default)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<f32>,
    pub top_logprobs: Vec<BTreeMap<String, f32>>,
    pub text_offset: Vec<usize>,
}

/// One token's logprob as the engine reported it, before it takes either route's shape.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub bytes: Vec<u8>,
    pub logprob: f32,
    /// Characters of answer text before this token (legacy completions' `text_offset`).
    pub offset: usize,
    /// The most likely alternatives, most likely first: (bytes, logprob).
    pub top: Vec<(Vec<u8>, f32)>,
}

impl TokenLogprob {
    pub fn chat(&self) -> ChatTokenLogprob<'_> {
        let top = self.top.iter().map(|(b, l)| ChatTokenLogprob {
            token: lossy(b),
            logprob: *l,
            bytes: b,
            top_logprobs: None,
        });
        ChatTokenLogprob {
            token: lossy(&self.bytes),
            logprob: self.logprob,
            bytes: &self.bytes,
            top_logprobs: Some(top.collect()),
        }
    }
}

/// The legacy completions shape of a run of tokens.
pub fn completion_logprobs(entries: &[TokenLogprob]) -> CompletionLogprobs {
    let mut out = CompletionLogprobs::default();
    for e in entries {
        out.tokens.push(legacy_token(&e.bytes));
        out.token_logprobs.push(e.logprob);
        out.top_logprobs.push(e.top.iter().map(|(b, l)| (legacy_token(b), *l)).collect());
        out.text_offset.push(e.offset);
    }
    out
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A token's text, or `bytes:\xNN...` when its bytes are not whole UTF-8.
pub fn legacy_token(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_string(),
        Err(_) => bytes.iter().fold(String::from("bytes:"), |mut s, b| {
            s.push_str(&format!("\\x{b:02x}"));
            s
        }),
    }
}

/// A record's JSON bytes as a value to embed without parsing it again.
pub fn raw_json(bytes: &[u8]) -> Box<RawValue> {
    let s = String::from_utf8_lossy(bytes).into_owned();
    RawValue::from_string(s).unwrap_or_else(|_| RawValue::from_string("null".into()).expect("null is JSON"))
}

/// One SSE event carrying `v` as its data.
pub fn sse_event<T: Serialize>(v: &T) -> Vec<u8> {
    let mut out = b"data: ".to_vec();
    // Serializing these structs cannot fail: no maps with non-string keys, no custom impls.
    let _ = serde_json::to_writer(&mut out, v);
    out.extend_from_slice(b"\n\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_utf8_tokens_get_distinct_legacy_keys() {
        // "é" is C3 A9: two tokens of one byte each must not collide as two U+FFFD keys.
        let a = legacy_token(&[0xC3]);
        let b = legacy_token(&[0xA9]);
        assert_eq!(a, "bytes:\\xc3");
        assert_ne!(a, b);
        assert_eq!(legacy_token("日本".as_bytes()), "日本");
    }

    #[test]
    fn chat_logprob_keeps_real_bytes() {
        let t = TokenLogprob {
            bytes: vec![0xF0, 0x9F],
            logprob: -0.5,
            offset: 0,
            top: vec![(vec![0xF0, 0x9F], -0.5), (vec![b'a'], -1.0)],
        };
        let v = serde_json::to_value(t.chat()).unwrap();
        assert_eq!(v["bytes"], serde_json::json!([0xF0, 0x9F]));
        assert_eq!(v["top_logprobs"][1]["token"], "a");
        assert_eq!(v["top_logprobs"][0]["bytes"], serde_json::json!([0xF0, 0x9F]));
        assert!(v["top_logprobs"][0].get("top_logprobs").is_none());
    }

    #[test]
    fn error_body_has_openai_shape() {
        let e = ErrorBody {
            error: ErrorDetail { message: "m", kind: "invalid_request_error", param: Some("p"), code: None },
        };
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"error":{"message":"m","type":"invalid_request_error","param":"p","code":null}}"#
        );
    }
}
