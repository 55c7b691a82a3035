//! Validation of OpenAI request bodies into plain structs. Every refusal names the field in
//! `param` and, for numbers, the allowed range in the message.

use super::error::ApiError;
use super::openai_agent_fields::{answer_rule, take_tools, weave_tool_turns};
use super::refused_fields::refuse_unsupported;
use super::request_fields::{boolean, field, type_name, ChatMessage};
use super::tools::ToolSpec;
use crate::engine::draft::MAX_DRAFT_DEPTH;
use crate::engine::{DraftMode, DraftRequest, Grammar, SamplingParams};
use serde_json::{Map, Value};

/// OpenAI accepts at most 4 stop sequences.
pub const MAX_STOP_SEQUENCES: usize = 4;
/// OpenAI's bound on `top_logprobs` for chat (the engine's own bound).
pub use crate::engine::MAX_TOP_LOGPROBS;
/// OpenAI's bound on the integer `logprobs` of legacy completions.
pub const MAX_COMPLETION_LOGPROBS: usize = 5;
/// Longest stop sequence accepted, in bytes; longer ones are almost surely mistakes.
pub const MAX_STOP_BYTES: usize = 256;

/// Sampling and length settings shared by both generation routes.
#[derive(Debug, Clone, PartialEq)]
pub struct GenParams {
    pub max_tokens: Option<usize>,
    /// Exactly what the decode thread's sampler gets.
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    /// Alternatives to report per token (`None`: no logprobs at all).
    pub logprobs: Option<usize>,
    pub stream: bool,
    pub include_usage: bool,
    /// `"mtplx": {"draft": "none"|"ngram"|"auto", "depth": 1..8}`: this request's drafting.
    pub draft: DraftRequest,
    /// Go on past the model's end-of-text tokens until `max_tokens` (vLLM's and llama-server's
    /// `ignore_eos`): benchmarks want generations of a set length whatever the model says.
    pub ignore_eos: bool,
    /// The grammar the answer must follow (`response_format`, or the tools' calls), compiled
    /// when the request is prepared.
    pub format: Option<Grammar>,
    /// The tools offered, whose calls are looked for in the answer.
    pub tools: Option<ToolSpec>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    pub model: Option<String>,
    pub messages: Vec<ChatMessage>,
    pub params: GenParams,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CompletionRequest {
    pub model: Option<String>,
    pub prompt: String,
    pub params: GenParams,
}

pub fn parse_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::new(400, "invalid_request_error", format!("the request body is not valid JSON: {e}"))
            .code("invalid_json")
    })?;
    match v {
        Value::Object(m) => Ok(m),
        other => Err(ApiError::new(
            400,
            "invalid_request_error",
            format!("the request body must be a JSON object, not {}", type_name(&other)),
        )),
    }
}

pub(super) fn number(m: &Map<String, Value>, name: &str, lo: f64, hi: f64, default: f64) -> Result<f32, ApiError> {
    match field(m, name) {
        None => Ok(default as f32),
        Some(Value::Number(n)) => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            if x >= lo && x <= hi {
                Ok(x as f32)
            } else {
                Err(ApiError::invalid(name, format!("'{name}' must be between {lo} and {hi}, got {x}")))
            }
        }
        Some(v) => Err(ApiError::invalid(
            name,
            format!("'{name}' must be a number between {lo} and {hi}, not {}", type_name(v)),
        )),
    }
}

pub(super) fn integer(m: &Map<String, Value>, name: &str, lo: u64, hi: u64) -> Result<Option<u64>, ApiError> {
    match field(m, name) {
        None => Ok(None),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(x) if x >= lo && x <= hi => Ok(Some(x)),
            _ => Err(ApiError::invalid(name, format!("'{name}' must be an integer between {lo} and {hi}, got {n}"))),
        },
        Some(v) => Err(ApiError::invalid(
            name,
            format!("'{name}' must be an integer between {lo} and {hi}, not {}", type_name(v)),
        )),
    }
}

pub(super) fn model(m: &Map<String, Value>) -> Result<Option<String>, ApiError> {
    match field(m, "model") {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(ApiError::invalid("model", format!("'model' must be a string, not {}", type_name(v)))),
    }
}

fn stop(m: &Map<String, Value>) -> Result<Vec<String>, ApiError> {
    stop_list(m, "stop", MAX_STOP_SEQUENCES)
}

/// The stop sequences in field `name`: a string or at most `max` strings, each of 1 to
/// [`MAX_STOP_BYTES`] bytes.
pub(super) fn stop_list(m: &Map<String, Value>, name: &str, max: usize) -> Result<Vec<String>, ApiError> {
    let list = match field(m, name) {
        None => return Ok(Vec::new()),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => {
            if a.len() > max {
                return Err(ApiError::invalid(
                    name,
                    format!("'{name}' takes at most {max} sequences, got {}", a.len()),
                ));
            }
            a.iter()
                .map(|v| {
                    v.as_str().map(str::to_string).ok_or_else(|| {
                        ApiError::invalid(name, format!("'{name}' must be a string or an array of strings"))
                    })
                })
                .collect::<Result<_, _>>()?
        }
        Some(v) => {
            return Err(ApiError::invalid(
                name,
                format!("'{name}' must be a string or an array of strings, not {}", type_name(v)),
            ))
        }
    };
    for s in &list {
        if s.is_empty() || s.len() > MAX_STOP_BYTES {
            return Err(ApiError::invalid(
                name,
                format!("each stop sequence must be 1 to {MAX_STOP_BYTES} bytes long, got {}", s.len()),
            ));
        }
    }
    Ok(list)
}

fn gen_params(m: &Map<String, Value>, max_tokens_fields: &[&str]) -> Result<GenParams, ApiError> {
    refuse_unsupported(m)?;
    match field(m, "n") {
        None => {}
        Some(Value::Number(n)) if n.as_u64() == Some(1) => {}
        Some(n) => {
            return Err(ApiError::invalid("n", format!("only n: 1 is supported (one choice per request), got n: {n}")))
        }
    }
    let mut max_tokens = None;
    for f in max_tokens_fields {
        if let Some(v) = integer(m, f, 1, u32::MAX as u64)? {
            max_tokens = Some(v as usize);
        }
    }
    let stream = boolean(m, "stream")?;
    let include_usage = match field(m, "stream_options") {
        None => false,
        Some(Value::Object(o)) => boolean(o, "include_usage").map_err(|mut e| {
            e.param = Some("stream_options.include_usage".into());
            e
        })?,
        Some(v) => {
            return Err(ApiError::invalid(
                "stream_options",
                format!("'stream_options' must be an object, not {}", type_name(v)),
            ))
        }
    };
    let top_k = integer(m, "top_k", 0, u32::MAX as u64)?.unwrap_or(0) as usize;
    let seed = match field(m, "seed") {
        None => None,
        Some(Value::Number(n)) => Some(
            n.as_u64()
                .or_else(|| n.as_i64().map(|i| i as u64))
                .ok_or_else(|| ApiError::invalid("seed", format!("'seed' must be an integer, got {n}")))?,
        ),
        Some(v) => return Err(ApiError::invalid("seed", format!("'seed' must be an integer, not {}", type_name(v)))),
    };
    let sampling = SamplingParams {
        temperature: number(m, "temperature", 0.0, 2.0, 1.0)?,
        top_p: number(m, "top_p", 0.0, 1.0, 1.0)?,
        top_k,
        min_p: number(m, "min_p", 0.0, 1.0, 0.0)?,
        presence_penalty: number(m, "presence_penalty", -2.0, 2.0, 0.0)?,
        frequency_penalty: number(m, "frequency_penalty", -2.0, 2.0, 0.0)?,
        seed,
    };
    let draft = draft_request(m)?;
    let ignore_eos = boolean(m, "ignore_eos")?;
    let format = super::openai_agent_fields::response_format(m)?;
    Ok(GenParams {
        max_tokens,
        sampling,
        stop: stop(m)?,
        logprobs: None,
        stream,
        include_usage,
        draft,
        ignore_eos,
        format,
        tools: None,
    })
}

/// The `mtplx` extension object: drafting off, another drafter, or a lower depth.
pub(super) fn draft_request(m: &Map<String, Value>) -> Result<DraftRequest, ApiError> {
    let o = match field(m, "mtplx") {
        None => return Ok(DraftRequest::default()),
        Some(Value::Object(o)) => o,
        Some(v) => return Err(ApiError::invalid("mtplx", format!("'mtplx' must be an object, not {}", type_name(v)))),
    };
    let mode = match field(o, "draft") {
        None => None,
        Some(Value::String(s)) => {
            Some(DraftMode::parse(s).map_err(|e| ApiError::invalid("mtplx.draft", format!("'mtplx.draft': {e}")))?)
        }
        Some(v) => {
            return Err(ApiError::invalid(
                "mtplx.draft",
                format!("'mtplx.draft' must be a string, not {}", type_name(v)),
            ))
        }
    };
    let max_depth = integer(o, "depth", 1, MAX_DRAFT_DEPTH as u64).map_err(|mut e| {
        e.param = Some("mtplx.depth".into());
        e
    })?;
    Ok(DraftRequest { mode, max_depth: max_depth.map(|d| d as usize) })
}

fn message(i: usize, v: &Value) -> Result<ChatMessage, ApiError> {
    let param = format!("messages[{i}]");
    let Value::Object(o) = v else {
        return Err(ApiError::invalid(&param, format!("'{param}' must be an object with 'role' and 'content'")));
    };
    let role = match o.get("role") {
        Some(Value::String(r)) if matches!(r.as_str(), "system" | "developer" | "user" | "assistant" | "tool") => {
            r.clone()
        }
        Some(Value::String(r)) => {
            return Err(ApiError::invalid(
                &format!("{param}.role"),
                format!("'{param}.role' must be one of system, developer, user, assistant, tool; got '{r}'"),
            ))
        }
        _ => {
            return Err(ApiError::invalid(
                &format!("{param}.role"),
                format!("'{param}.role' is required and must be a string"),
            ))
        }
    };
    let content = match o.get("content") {
        None | Some(Value::Null) if role == "assistant" => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (j, p) in parts.iter().enumerate() {
                match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(t)) => text.push_str(t),
                    _ => {
                        return Err(ApiError::invalid(
                            &format!("{param}.content[{j}]"),
                            format!("'{param}.content[{j}]' must be a text part {{\"type\": \"text\", \"text\": ...}}; other part types are not supported"),
                        ))
                    }
                }
            }
            text
        }
        _ => {
            return Err(ApiError::invalid(
                &format!("{param}.content"),
                format!("'{param}.content' must be a string or an array of text parts"),
            ))
        }
    };
    Ok(ChatMessage { role, content })
}

pub fn parse_chat(body: &[u8]) -> Result<ChatRequest, ApiError> {
    let mut m = parse_object(body)?;
    let tools = take_tools(&mut m)?;
    let raw = match field(&m, "messages") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(Value::Array(_)) => {
            return Err(ApiError::invalid("messages", "'messages' must hold at least one message"))
        }
        Some(v) => {
            return Err(ApiError::invalid("messages", format!("'messages' must be an array, not {}", type_name(v))))
        }
        None => return Err(ApiError::invalid("messages", "'messages' is required")),
    };
    let mut messages = raw.iter().enumerate().map(|(i, v)| message(i, v)).collect::<Result<Vec<_>, _>>()?;
    weave_tool_turns(raw, &mut messages)?;
    let mut params = chat_params(&m)?;
    if let Some(t) = tools {
        if t.offered() {
            params.format = t.grammar(answer_rule(params.format.as_ref(), "response_format")?.as_deref());
            t.announce(&mut messages, &["system", "developer"]);
        }
        params.tools = Some(t);
    }
    Ok(ChatRequest { model: model(&m)?, messages, params })
}

/// The generation settings of a chat request: every field but `messages` (the chat routes
/// take them from a stored conversation instead).
pub fn chat_params(m: &Map<String, Value>) -> Result<GenParams, ApiError> {
    let mut params = gen_params(m, &["max_tokens", "max_completion_tokens"])?;
    let logprobs = boolean(m, "logprobs")?;
    let top = integer(m, "top_logprobs", 0, MAX_TOP_LOGPROBS as u64)?;
    if top.is_some() && !logprobs {
        return Err(ApiError::invalid("top_logprobs", "'top_logprobs' needs 'logprobs': true"));
    }
    params.logprobs = logprobs.then(|| top.unwrap_or(0) as usize);
    Ok(params)
}

pub fn parse_completion(body: &[u8]) -> Result<CompletionRequest, ApiError> {
    let m = parse_object(body)?;
    let prompt = match field(&m, "prompt") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => a[0].as_str().unwrap_or_default().to_string(),
        Some(v) => {
            return Err(ApiError::invalid(
                "prompt",
                format!("'prompt' must be a string (or an array of exactly one string), not {}", type_name(v)),
            ))
        }
        None => return Err(ApiError::invalid("prompt", "'prompt' is required")),
    };
    let mut params = gen_params(&m, &["max_tokens"])?;
    params.logprobs = integer(&m, "logprobs", 0, MAX_COMPLETION_LOGPROBS as u64)?.map(|n| n as usize);
    Ok(CompletionRequest { model: model(&m)?, prompt, params })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(s: &str) -> Result<ChatRequest, ApiError> {
        parse_chat(s.as_bytes())
    }

    #[test]
    fn accepts_a_full_chat_request() {
        let r = chat(r#"{"model":"x","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]}],
            "max_completion_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":40,"min_p":0.05,"presence_penalty":1,"frequency_penalty":-1,
            "seed":42,"stop":["\n\n","END"],"logprobs":true,"top_logprobs":3,"stream":true,"stream_options":{"include_usage":true},"unknown_field":{"a":1}}"#)
        .unwrap();
        assert_eq!(r.messages[1].content, "hi there");
        assert_eq!(r.params.max_tokens, Some(7));
        assert_eq!(r.params.sampling.top_k, 40);
        assert_eq!(r.params.sampling.seed, Some(42));
        assert_eq!(r.params.stop, vec!["\n\n", "END"]);
        assert_eq!(r.params.logprobs, Some(3));
        assert!(r.params.stream && r.params.include_usage);
        assert_eq!(r.params.sampling.temperature, 0.5);
        assert!(!r.params.ignore_eos);
        let r = parse_completion(br#"{"prompt":"x","ignore_eos":true}"#).unwrap();
        assert!(r.params.ignore_eos);
    }

    #[test]
    fn defaults_when_fields_are_absent() {
        let r = chat(r#"{"messages":[{"role":"user","content":"hi"}]}"#).unwrap();
        assert_eq!(r.params.sampling.temperature, 1.0);
        assert_eq!(r.params.sampling.top_p, 1.0);
        assert_eq!((r.params.sampling.top_k, r.params.logprobs, r.params.max_tokens), (0, None, None));
        assert!(!r.params.stream);
    }

    #[test]
    fn refusals_name_the_field_and_the_bound() {
        let cases = [
            (r#"{"messages":[{"role":"user","content":"hi"}],"temperature":3}"#, "temperature", "between 0 and 2"),
            (r#"{"messages":[{"role":"user","content":"hi"}],"temperature":"hot"}"#, "temperature", "not a string"),
            (r#"{"messages":[{"role":"user","content":"hi"}],"n":2}"#, "n", "only n: 1 is supported"),
            (r#"{"messages":[{"role":"user","content":"hi"}],"n":-1}"#, "n", "only n: 1 is supported"),
            (r#"{"messages":[{"role":"user","content":"hi"}],"n":"2"}"#, "n", "only n: 1 is supported"),
            (r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":0}"#, "max_tokens", "between 1 and"),
            (
                r#"{"messages":[{"role":"user","content":"hi"}],"top_logprobs":21,"logprobs":true}"#,
                "top_logprobs",
                "between 0 and 20",
            ),
            (r#"{"messages":[{"role":"user","content":"hi"}],"stop":["a","b","c","d","e"]}"#, "stop", "at most 4"),
            (r#"{"messages":[]}"#, "messages", "at least one"),
            (r#"{"messages":[{"role":"wizard","content":"hi"}]}"#, "messages[0].role", "must be one of"),
            (
                r#"{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}"#,
                "messages[0].content[0]",
                "text part",
            ),
            (
                r#"{"messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":1}}"#,
                "stream_options.include_usage",
                "boolean",
            ),
            (r#"{"messages":[{"role":"user","content":"hi"}],"ignore_eos":"yes"}"#, "ignore_eos", "boolean"),
        ];
        for (body, param, needle) in cases {
            let e = chat(body).unwrap_err();
            assert_eq!(e.status, 400, "{body}");
            assert_eq!(e.param.as_deref(), Some(param), "{body}");
            assert!(e.message.contains(needle), "{body}: {}", e.message);
        }
    }

    #[test]
    fn fields_without_effect_here_are_refused_by_name() {
        for (f, v) in [("logit_bias", "{\"50256\":-100}"), ("functions", "[{\"name\":\"f\"}]")] {
            let body = format!(r#"{{"messages":[{{"role":"user","content":"hi"}}],"{f}":{v}}}"#);
            let e = chat(&body).unwrap_err();
            assert_eq!((e.status, e.param.as_deref(), e.code), (400, Some(f), Some("unsupported_parameter")), "{body}");
            assert!(e.message.contains(f), "{}", e.message);
        }
        let e = parse_completion(br#"{"prompt":"x","echo":true}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("echo"));
        // Fields that only inform are accepted.
        chat(r#"{"messages":[{"role":"user","content":"hi"}],"user":"u1","metadata":{"k":"v"},"store":false}"#)
            .unwrap();
    }

    #[test]
    fn malformed_json_is_a_400_without_param() {
        for body in ["{", "[1,2]", "", "null"] {
            let e = chat(body).unwrap_err();
            assert_eq!((e.status, e.param.clone()), (400, None), "{body}");
        }
    }

    #[test]
    fn completions_take_integer_logprobs() {
        let r = parse_completion(br#"{"prompt":"Once","logprobs":2,"max_tokens":3}"#).unwrap();
        assert_eq!((r.prompt.as_str(), r.params.logprobs, r.params.max_tokens), ("Once", Some(2), Some(3)));
        assert_eq!(parse_completion(br#"{"prompt":"x","logprobs":6}"#).unwrap_err().param.as_deref(), Some("logprobs"));
        assert_eq!(parse_completion(br#"{"prompt":5}"#).unwrap_err().param.as_deref(), Some("prompt"));
    }
}
