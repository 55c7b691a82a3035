//! Request fields whose effect this server does not have: refused with a 400 naming the field
//! rather than silently ignored, except for the values that ask for nothing, which clients send
//! as their defaults.

use super::error::ApiError;
use serde_json::{Map, Value};

/// Fields whose effect a client relies on and that this server does not have: refused with a
/// 400 naming the field rather than silently ignored. (Fields that only inform, such as `user`,
/// `metadata` or `store`, are accepted; unknown fields are ignored.)
pub const REFUSED_FIELDS: &[(&str, &str)] = &[
    ("tools", "tool calling is not supported"),
    ("tool_choice", "tool calling is not supported"),
    ("parallel_tool_calls", "tool calling is not supported"),
    ("functions", "function calling is not supported"),
    ("function_call", "function calling is not supported"),
    ("logit_bias", "logit_bias is not supported"),
    ("audio", "audio output is not supported"),
    ("modalities", "only text output is supported"),
    ("prediction", "predicted outputs are not supported"),
    ("reasoning_effort", "reasoning_effort is not supported by this model"),
    ("web_search_options", "web search is not supported"),
    ("echo", "echo is not supported"),
    ("suffix", "suffix (insertion) is not supported"),
    ("best_of", "best_of is not supported"),
];

/// Whether `f: v` asks for nothing this server lacks: what SDKs and agent frameworks send by
/// default (`tools: []`, `tool_choice: "none"`, `logit_bias: {}`, ...), which
/// is accepted as what it means.
fn asks_nothing(m: &Map<String, Value>, f: &str, v: &Value) -> bool {
    let empty = |name: &str| m.get(name).is_none_or(|t| t.is_null() || t.as_array().is_some_and(Vec::is_empty));
    let no_tools = empty("tools") && empty("functions");
    match (f, v) {
        ("tools" | "functions", Value::Array(a)) => a.is_empty(),
        ("tool_choice" | "function_call", Value::String(s)) => s == "none" || (s == "auto" && no_tools),
        ("parallel_tool_calls", Value::Bool(_)) => no_tools,
        ("logit_bias", Value::Object(o)) => o.is_empty(),
        ("modalities", Value::Array(a)) => a.len() == 1 && a[0] == "text",
        _ => false,
    }
}

/// The 400 for the first refused field that asks for something.
pub fn refuse_unsupported(m: &Map<String, Value>) -> Result<(), ApiError> {
    let asked = |(f, _): &&(&str, &str)| m.get(*f).is_some_and(|v| !v.is_null() && !asks_nothing(m, f, v));
    match REFUSED_FIELDS.iter().find(asked) {
        Some((f, why)) => Err(ApiError::invalid(
            f,
            format!("'{f}' is not supported by this server ({why}); remove it from the request"),
        )
        .code("unsupported_parameter")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(body: &str) -> Result<(), ApiError> {
        refuse_unsupported(serde_json::from_str::<Value>(body).unwrap().as_object().unwrap())
    }

    /// The defaults clients send are accepted; the same fields asking for something are refused
    /// by name.
    #[test]
    fn defaults_that_ask_for_nothing_pass_and_real_asks_are_refused() {
        for ok in [
            r#"{"response_format": {"type": "text"}}"#,
            r#"{"tools": []}"#,
            r#"{"tool_choice": "none"}"#,
            r#"{"tools": [], "tool_choice": "auto", "parallel_tool_calls": true}"#,
            r#"{"logit_bias": {}, "modalities": ["text"], "functions": null}"#,
        ] {
            assert_eq!(check(ok).map_err(|e| e.message), Ok(()), "{ok}");
        }
        for (bad, param) in [
            (r#"{"tools": [{"type": "function", "function": {"name": "f"}}]}"#, "tools"),
            (r#"{"tool_choice": "required"}"#, "tool_choice"),
            (r#"{"tools": [], "logit_bias": {"1": 5}}"#, "logit_bias"),
            (r#"{"modalities": ["text", "audio"]}"#, "modalities"),
        ] {
            let e = check(bad).unwrap_err();
            assert_eq!(
                (e.status, e.param.as_deref(), e.code),
                (400, Some(param), Some("unsupported_parameter")),
                "{bad}"
            );
        }
    }
}
