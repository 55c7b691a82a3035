//! Validation of Anthropic Messages bodies (`/v1/messages`, `/v1/messages/count_tokens`) into
//! the plain structs the OpenAI routes make: both APIs become one internal request, so there is
//! one generation path. Every refusal names the field in `param` and the bound it broke.

use super::anthropic_tools::{tool_block, tool_spec};
use super::error::ApiError;
use super::openai_agent_fields::answer_rule;
use super::openai_request::{draft_request, integer, model, number, parse_object, stop_list, GenParams};
use super::request_fields::{boolean, field, type_name, ChatMessage};
use crate::engine::{Grammar, SamplingParams};
use serde_json::{Map, Value};

/// Stop sequences one request may name. Anthropic documents no bound; each costs a scan of the
/// held-back text per token, so a generous one is kept.
pub const MAX_STOP_SEQUENCES: usize = 16;

/// What separates text blocks of one turn, and turns of one role that follow each other (the
/// Messages API merges those): a paragraph break, so that the model reads them apart.
const BLOCK_SEPARATOR: &str = "\n\n";

/// Fields whose effect this server does not have; refused by name rather than ignored.
const REFUSED: &[(&str, &str)] = &[
    ("mcp_servers", "remote MCP servers are not supported"),
    ("container", "code-execution containers are not supported"),
];

#[derive(Debug, Clone, PartialEq)]
pub struct MessagesRequest {
    pub model: Option<String>,
    /// The system prompt (when there is one) as a `system` message, then the turns.
    pub messages: Vec<ChatMessage>,
    /// A last assistant turn, which the answer continues (Anthropic's "prefill"); its text is
    /// not repeated in the answer.
    pub prefill: Option<String>,
    pub params: GenParams,
}

/// A `/v1/messages` body: `max_tokens` is required, as Anthropic's API requires it.
pub fn parse_messages(body: &[u8]) -> Result<MessagesRequest, ApiError> {
    let m = parse_object(body)?;
    let r = conversation(&m)?;
    if field(&m, "max_tokens").is_none() {
        return Err(ApiError::invalid("max_tokens", "'max_tokens' is required"));
    }
    let p = params(&m)?;
    // The tools' grammar, built here and not for count_tokens; an answer format is its other
    // branch.
    let format = match r.params.tools.as_ref().filter(|t| t.offered()) {
        Some(t) => t.grammar(answer_rule(p.format.as_ref(), "output_config.format")?.as_deref()),
        None => p.format.clone(),
    };
    let params = GenParams { format, tools: r.params.tools.clone(), ..p };
    Ok(MessagesRequest { params, ..r })
}

/// A `/v1/messages/count_tokens` body: the conversation only; sampling fields are not read.
pub fn parse_count_tokens(body: &[u8]) -> Result<MessagesRequest, ApiError> {
    conversation(&parse_object(body)?)
}

fn conversation(m: &Map<String, Value>) -> Result<MessagesRequest, ApiError> {
    refuse_unsupported(m)?;
    let mut messages = Vec::new();
    if let Some(system) = text_of(field(m, "system"), "system", None)? {
        if !system.is_empty() {
            messages.push(ChatMessage { role: "system".into(), content: system });
        }
    }
    let turns = match field(m, "messages") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(Value::Array(_)) => {
            return Err(ApiError::invalid("messages", "'messages' must hold at least one message"))
        }
        Some(v) => {
            return Err(ApiError::invalid("messages", format!("'messages' must be an array, not {}", type_name(v))))
        }
        None => return Err(ApiError::invalid("messages", "'messages' is required")),
    };
    let first_turn = messages.len();
    let mut calls = Vec::new();
    for (i, v) in turns.iter().enumerate() {
        let (role, content) = turn(i, v, &mut calls)?;
        if i == 0 && role != "user" {
            return Err(ApiError::invalid(
                "messages[0].role",
                format!("'messages[0].role' must be 'user': a conversation starts with the user, got '{role}'"),
            ));
        }
        let last = i + 1 == turns.len();
        if content.is_empty() && !(last && role == "assistant") {
            let param = format!("messages[{i}].content");
            return Err(ApiError::invalid(&param, format!("'{param}' must not be empty")));
        }
        let merge = messages.len() > first_turn;
        match messages.last_mut() {
            Some(prev) if merge && prev.role == role => {
                prev.content.push_str(BLOCK_SEPARATOR);
                prev.content.push_str(&content);
            }
            _ => messages.push(ChatMessage { role: role.to_string(), content }),
        }
    }
    let prefill = match messages.last() {
        Some(last) if last.role == "assistant" => messages.pop().map(|m| m.content).filter(|c| !c.is_empty()),
        _ => None,
    };
    let mut params = default_params();
    if let Some(t) = tool_spec(m)? {
        if t.offered() {
            t.announce(&mut messages, &["system"]);
        }
        params.tools = Some(t);
    }
    Ok(MessagesRequest { model: model(m)?, messages, prefill, params })
}

/// One turn's role and its text; `calls` holds the ids of the tool calls made so far.
fn turn(i: usize, v: &Value, calls: &mut Vec<String>) -> Result<(&'static str, String), ApiError> {
    let param = format!("messages[{i}]");
    let Value::Object(o) = v else {
        return Err(ApiError::invalid(&param, format!("'{param}' must be an object with 'role' and 'content'")));
    };
    let role = match o.get("role").and_then(Value::as_str) {
        Some("user") => "user",
        Some("assistant") => "assistant",
        Some(r) => {
            let p = format!("{param}.role");
            let hint = if r == "system" { " (the system prompt goes in the top-level 'system' field)" } else { "" };
            return Err(ApiError::invalid(&p, format!("'{p}' must be 'user' or 'assistant', got '{r}'{hint}")));
        }
        None => {
            let p = format!("{param}.role");
            return Err(ApiError::invalid(&p, format!("'{p}' is required and must be a string")));
        }
    };
    let content = text_of(o.get("content"), &format!("{param}.content"), Some((role, calls)))?.unwrap_or_default();
    Ok((role, content))
}

/// The text of `content`: a string, or an array of content blocks of which the text blocks
/// count, and in a turn (`turn`: its role and the calls so far) the tool blocks. `None` when
/// absent, which only the system prompt (no `turn`) may be.
fn text_of(
    content: Option<&Value>,
    param: &str,
    mut turn: Option<(&str, &mut Vec<String>)>,
) -> Result<Option<String>, ApiError> {
    let blocks = match content {
        None | Some(Value::Null) if turn.is_none() => return Ok(None),
        Some(Value::String(s)) => return Ok(Some(s.clone())),
        Some(Value::Array(a)) => a,
        _ => return Err(ApiError::invalid(param, format!("'{param}' must be a string or an array of content blocks"))),
    };
    let mut text = String::new();
    for (j, b) in blocks.iter().enumerate() {
        let p = format!("{param}[{j}]");
        match b.get("type").and_then(Value::as_str) {
            Some("text") => {
                let Some(t) = b.get("text").and_then(Value::as_str) else {
                    return Err(ApiError::invalid(&p, format!("'{p}.text' is required and must be a string")));
                };
                if !text.is_empty() {
                    text.push_str(BLOCK_SEPARATOR);
                }
                text.push_str(t);
            }
            // An earlier answer's reasoning: this model has none to continue, so it is dropped.
            Some("thinking" | "redacted_thinking") => {}
            Some("tool_use" | "tool_result") if turn.is_some() => {
                let (role, calls) = turn.as_mut().expect("checked");
                if let Some(t) = tool_block(b, &p, role, calls)? {
                    if !text.is_empty() {
                        text.push_str(BLOCK_SEPARATOR);
                    }
                    text.push_str(&t);
                }
            }
            Some(kind) => {
                return Err(ApiError::invalid(
                    &p,
                    format!("'{p}' is a {kind} block; only text blocks are supported (this model reads text only)"),
                ))
            }
            None => return Err(ApiError::invalid(&p, format!("'{p}' must be a content block with a 'type'"))),
        }
    }
    Ok(Some(text))
}

/// The 400 for a field this server has not the effect of, and for a `metadata` that is no object.
fn refuse_unsupported(m: &Map<String, Value>) -> Result<(), ApiError> {
    for (f, why) in REFUSED {
        if field(m, f).is_some() {
            let msg = format!("'{f}' is not supported by this server ({why}); remove it from the request");
            return Err(ApiError::invalid(f, msg).code("unsupported_parameter"));
        }
    }
    if let Some(v) = field(m, "metadata") {
        if !v.is_object() {
            return Err(ApiError::invalid("metadata", format!("'metadata' must be an object, not {}", type_name(v))));
        }
    }
    Ok(())
}

fn default_params() -> GenParams {
    GenParams {
        max_tokens: None,
        sampling: SamplingParams { temperature: 1.0, top_p: 1.0, ..Default::default() },
        stop: Vec::new(),
        logprobs: None,
        stream: false,
        include_usage: false,
        draft: Default::default(),
        ignore_eos: false,
        format: None,
        tools: None,
    }
}

/// The generation settings, in Anthropic's ranges (`temperature` from 0 to 1).
fn params(m: &Map<String, Value>) -> Result<GenParams, ApiError> {
    let sampling = SamplingParams {
        temperature: number(m, "temperature", 0.0, 1.0, 1.0)?,
        top_p: number(m, "top_p", 0.0, 1.0, 1.0)?,
        top_k: integer(m, "top_k", 0, u32::MAX as u64)?.unwrap_or(0) as usize,
        ..Default::default()
    };
    if let Some(v @ Value::String(_)) = field(m, "stop_sequences") {
        let msg = format!("'stop_sequences' must be an array of strings, not {}", type_name(v));
        return Err(ApiError::invalid("stop_sequences", msg));
    }
    Ok(GenParams {
        max_tokens: integer(m, "max_tokens", 1, u32::MAX as u64)?.map(|n| n as usize),
        sampling,
        stop: stop_list(m, "stop_sequences", MAX_STOP_SEQUENCES)?,
        stream: boolean(m, "stream")?,
        draft: draft_request(m)?,
        format: output_format(m)?,
        ..default_params()
    })
}

/// Structured output: `output_config.format` (or the beta's top-level `output_format`),
/// `{"type": "json_schema", "schema": {...}}`. Anthropic's schemas are strict: a keyword the
/// compiler lacks is an error.
fn output_format(m: &Map<String, Value>) -> Result<Option<Grammar>, ApiError> {
    let (f, param) =
        match (field(m, "output_config").and_then(|o| field(o.as_object()?, "format")), field(m, "output_format")) {
            (Some(f), _) => (f, "output_config.format"),
            (None, Some(f)) => (f, "output_format"),
            (None, None) => return Ok(None),
        };
    if f.get("type").and_then(Value::as_str) != Some("json_schema") {
        return Err(ApiError::invalid(param, format!("'{param}.type' must be 'json_schema'")));
    }
    match f.get("schema") {
        Some(schema @ Value::Object(_)) => Ok(Some(Grammar::JsonSchema { schema: schema.clone(), strict: true })),
        _ => Err(ApiError::invalid(param, format!("'{param}.schema' is required and must be a JSON schema object"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<MessagesRequest, ApiError> {
        parse_messages(s.as_bytes())
    }

    #[test]
    fn a_full_request_becomes_the_internal_one() {
        let r = parse(
            r#"{"model":"claude-x","max_tokens":64,"system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],
            "messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":[{"type":"text","text":"Hello."}]},
            {"role":"user","content":[{"type":"text","text":"One"},{"type":"text","text":"Two"}]},{"role":"user","content":"Three"}],
            "temperature":0.5,"top_p":0.9,"top_k":40,"stop_sequences":["END"],"stream":true,"metadata":{"user_id":"u"},
            "thinking":{"type":"disabled"},"tools":[],"tool_choice":{"type":"none"}}"#,
        )
        .unwrap();
        let roles: Vec<&str> = r.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "user"]);
        assert_eq!(r.messages[0].content, "Be brief.");
        assert_eq!(r.messages[3].content, "One\n\nTwo\n\nThree", "blocks and same-role turns are merged");
        assert_eq!(r.prefill, None);
        let p = &r.params;
        assert_eq!((p.max_tokens, p.sampling.top_k, p.stream), (Some(64), 40, true));
        assert_eq!((p.sampling.temperature, p.sampling.top_p), (0.5, 0.9));
        assert_eq!(p.stop, ["END"]);
    }

    #[test]
    fn a_last_assistant_turn_is_a_prefill() {
        let r = parse(
            r#"{"max_tokens":5,"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"{\"a\":"}]}"#,
        )
        .unwrap();
        assert_eq!((r.messages.len(), r.prefill.as_deref()), (1, Some("{\"a\":")));
        let r =
            parse(r#"{"max_tokens":5,"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":""}]}"#)
                .unwrap();
        assert_eq!((r.messages.len(), r.prefill), (1, None));
    }

    #[test]
    fn refusals_name_the_field_and_the_bound() {
        let user = r#"[{"role":"user","content":"Hi"}]"#;
        let cases = [
            (format!(r#"{{"messages":{user}}}"#), "max_tokens", "required"),
            (format!(r#"{{"max_tokens":0,"messages":{user}}}"#), "max_tokens", "between 1 and"),
            (format!(r#"{{"max_tokens":9,"messages":{user},"temperature":1.5}}"#), "temperature", "between 0 and 1"),
            (r#"{"max_tokens":9,"messages":[]}"#.into(), "messages", "at least one"),
            (
                r#"{"max_tokens":9,"messages":[{"role":"assistant","content":"x"}]}"#.into(),
                "messages[0].role",
                "starts with the user",
            ),
            (
                r#"{"max_tokens":9,"messages":[{"role":"system","content":"x"}]}"#.into(),
                "messages[0].role",
                "top-level 'system'",
            ),
            (
                r#"{"max_tokens":9,"messages":[{"role":"user","content":""}]}"#.into(),
                "messages[0].content",
                "must not be empty",
            ),
            (
                r#"{"max_tokens":9,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}"#.into(),
                "messages[0].content[0]",
                "only text blocks",
            ),
            (
                r#"{"max_tokens":9,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t"}]}]}"#
                    .into(),
                "messages[0].content[0].tool_use_id",
                "answers no tool_use",
            ),
            (
                format!(r#"{{"max_tokens":9,"messages":{user},"tools":[{{"name":"f"}}]}}"#),
                "tools[0].input_schema",
                "required",
            ),
            (format!(r#"{{"max_tokens":9,"messages":{user},"mcp_servers":[]}}"#), "mcp_servers", "not supported"),
            (format!(r#"{{"max_tokens":9,"messages":{user},"stop_sequences":"x"}}"#), "stop_sequences", "array"),
            (format!(r#"{{"max_tokens":9,"messages":{user},"metadata":"x"}}"#), "metadata", "object"),
            (format!(r#"{{"max_tokens":9,"messages":{user},"system":5}}"#), "system", "string or an array"),
        ];
        for (body, param, needle) in cases {
            let e = parse(&body).unwrap_err();
            assert_eq!((e.status, e.param.as_deref()), (400, Some(param)), "{body}");
            assert!(e.message.contains(needle), "{body}: {}", e.message);
        }
    }

    #[test]
    fn an_output_format_is_a_strict_schema() {
        let r = parse(r#"{"max_tokens":9,"messages":[{"role":"user","content":"Hi"}],"output_config":{"effort":"low","format":{"type":"json_schema","schema":{"type":"object"}}}}"#).unwrap();
        assert_eq!(
            r.params.format,
            Some(Grammar::JsonSchema { schema: serde_json::json!({"type": "object"}), strict: true })
        );
        let e = parse(r#"{"max_tokens":9,"messages":[{"role":"user","content":"Hi"}],"output_format":{"type":"xml"}}"#)
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("output_format"));
        // With tools, the format is the answer's branch of the tools' grammar.
        let r = parse(r#"{"max_tokens":9,"messages":[{"role":"user","content":"Hi"}],"tools":[{"name":"f","input_schema":{"type":"object"}}],"output_config":{"format":{"type":"json_schema","schema":{"type":"object","properties":{"verdict":{"type":"boolean"}}}}}}"#).unwrap();
        let Some(Grammar::Lark(g)) = r.params.format else { panic!("{:?}", r.params.format) };
        assert!(g.contains("start: answer | call") && g.contains("verdict") && g.contains("<tool_call>"), "{g}");
    }

    #[test]
    fn counting_needs_no_max_tokens() {
        let r =
            parse_count_tokens(br#"{"model":"m","system":"S","messages":[{"role":"user","content":"Hi"}]}"#).unwrap();
        assert_eq!(r.messages.len(), 2);
    }
}
