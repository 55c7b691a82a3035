//! Tools on the Messages API: `tools` and `tool_choice` into the one [`ToolSpec`] both APIs
//! use, and the `tool_use` and `tool_result` blocks of a conversation written into it in the
//! tool syntax (`tools::SYNTAX`), each result answering a call made earlier.

use super::error::ApiError;
use super::request_fields::{field, type_name};
use super::tools::{check_name, render_call, render_result, Tool, ToolChoice, ToolSpec};
use serde_json::{Map, Value};

/// `tools` and `tool_choice`; `None` when no tool is offered.
pub fn tool_spec(m: &Map<String, Value>) -> Result<Option<ToolSpec>, ApiError> {
    let tools = match field(m, "tools") {
        None => Vec::new(),
        Some(Value::Array(a)) => a.iter().enumerate().map(|(i, v)| tool(i, v)).collect::<Result<_, _>>()?,
        Some(v) => return Err(ApiError::invalid("tools", format!("'tools' must be an array, not {}", type_name(v)))),
    };
    let (choice, parallel) = match field(m, "tool_choice") {
        None => (ToolChoice::Auto, true),
        Some(c) => {
            let parallel = !c.get("disable_parallel_tool_use").and_then(Value::as_bool).unwrap_or(false);
            let choice = match (c.get("type").and_then(Value::as_str), c.get("name").and_then(Value::as_str)) {
                (Some("auto"), _) => ToolChoice::Auto,
                (Some("any"), _) => ToolChoice::Required,
                (Some("none"), _) => ToolChoice::None,
                (Some("tool"), Some(n)) => ToolChoice::Named(n.to_string()),
                _ => {
                    let msg = "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", \"name\": ...}";
                    return Err(ApiError::invalid("tool_choice", msg));
                }
            };
            (choice, parallel)
        }
    };
    ToolSpec::offer(tools, choice, parallel)
}

/// One client tool: `{"name", "description", "input_schema"}`. Anthropic's server tools (web
/// search, code execution) have a `type` and are refused: this server runs no tools itself.
fn tool(i: usize, v: &Value) -> Result<Tool, ApiError> {
    let p = format!("tools[{i}]");
    if let Some(t) = v.get("type").and_then(Value::as_str).filter(|t| *t != "custom") {
        let msg = format!("'{p}' is a server tool ('{t}'); this server runs no tools itself, only client tools");
        return Err(ApiError::invalid(&p, msg).code("unsupported_parameter"));
    }
    let name = v.get("name").and_then(Value::as_str).unwrap_or_default();
    check_name(name, &format!("{p}.name"))?;
    let parameters = match v.get("input_schema") {
        Some(s @ Value::Object(_)) => s.clone(),
        _ => {
            let pp = format!("{p}.input_schema");
            return Err(ApiError::invalid(&pp, format!("'{pp}' is required and must be a JSON schema object")));
        }
    };
    let description = v.get("description").and_then(Value::as_str).map(str::to_string);
    Ok(Tool { name: name.to_string(), description, parameters })
}

/// A `tool_use` block of an assistant turn (`calls` gets its id) or a `tool_result` block of a
/// user turn (which must answer one of `calls`), as the text the model reads; `p` names the
/// block. Any other block kind is `None`.
pub fn tool_block(b: &Value, p: &str, role: &str, calls: &mut Vec<String>) -> Result<Option<String>, ApiError> {
    match (b.get("type").and_then(Value::as_str), role) {
        (Some("tool_use"), "assistant") => {
            let (Some(id), Some(name), Some(input)) =
                (b.get("id").and_then(Value::as_str), b.get("name").and_then(Value::as_str), b.get("input"))
            else {
                return Err(ApiError::invalid(p, format!("'{p}' must have 'id', 'name' and 'input'")));
            };
            calls.push(id.to_string());
            Ok(Some(render_call(name, input)))
        }
        (Some("tool_result"), "user") => {
            let id = b.get("tool_use_id").and_then(Value::as_str).unwrap_or_default();
            if !calls.iter().any(|c| c == id) {
                let msg = format!("'{p}.tool_use_id' is '{id}', which answers no tool_use block of an earlier turn");
                return Err(ApiError::invalid(&format!("{p}.tool_use_id"), msg));
            }
            let content = match b.get("content") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => {
                    parts.iter().filter_map(|x| x.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n\n")
                }
                Some(v) => {
                    let msg = format!("'{p}.content' must be a string or text blocks, not {}", type_name(v));
                    return Err(ApiError::invalid(&format!("{p}.content"), msg));
                }
            };
            let error = b.get("is_error").and_then(Value::as_bool) == Some(true);
            Ok(Some(render_result(&if error { format!("Error: {content}") } else { content })))
        }
        (Some(kind @ ("tool_use" | "tool_result")), _) => {
            let msg = format!("'{p}' is a {kind} block in a {role} turn; tool_use belongs to assistant turns and tool_result to user turns");
            Err(ApiError::invalid(p, msg))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn choices_map_onto_the_shared_spec() {
        let m = |v: Value| v.as_object().unwrap().clone();
        let tools = json!([{"name": "f", "input_schema": {"type": "object"}}]);
        let s =
            tool_spec(&m(json!({"tools": tools, "tool_choice": {"type": "any", "disable_parallel_tool_use": true}})))
                .unwrap()
                .unwrap();
        assert_eq!((s.choice, s.parallel), (ToolChoice::Required, false));
        let s = tool_spec(&m(json!({"tools": tools, "tool_choice": {"type": "tool", "name": "f"}}))).unwrap().unwrap();
        assert_eq!(s.choice, ToolChoice::Named("f".into()));
        let e = tool_spec(&m(json!({"tools": tools, "tool_choice": {"type": "tool", "name": "g"}}))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tool_choice"));
        let e = tool_spec(&m(json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}))).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools[0]"));
        assert_eq!(tool_spec(&m(json!({"tools": []}))).unwrap(), None);
    }

    #[test]
    fn results_must_answer_earlier_calls() {
        let mut calls = Vec::new();
        let used = json!({"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}});
        assert!(tool_block(&used, "m", "assistant", &mut calls).unwrap().unwrap().contains("\"name\":\"f\""));
        let answer =
            json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "42"}]});
        assert_eq!(
            tool_block(&answer, "m", "user", &mut calls).unwrap().unwrap(),
            "<tool_response>\n42\n</tool_response>"
        );
        let stray = json!({"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"});
        assert_eq!(tool_block(&stray, "m", "user", &mut calls).unwrap_err().param.as_deref(), Some("m.tool_use_id"));
        assert!(tool_block(&used, "m", "user", &mut calls).is_err());
    }
}
