//! The agent fields of an OpenAI request: `response_format`, and `tools`, `tool_choice` and
//! `parallel_tool_calls` with the messages that carry calls (`assistant` with `tool_calls`) and
//! results (`role: "tool"`), written into the conversation in the tool syntax
//! (`tools::SYNTAX`).

use super::error::ApiError;
use super::request_fields::{boolean, field, type_name, ChatMessage};
use super::tools::{check_name, render_call, render_result, Tool, ToolChoice, ToolSpec};
use crate::engine::Grammar;
use serde_json::{Map, Value};

/// `response_format`: `text` (no grammar), `json_object`, or `json_schema` with its `schema`
/// (and `strict`, under which a keyword the compiler lacks is an error rather than ignored).
pub(super) fn response_format(m: &Map<String, Value>) -> Result<Option<Grammar>, ApiError> {
    let o = match field(m, "response_format") {
        None => return Ok(None),
        Some(Value::Object(o)) => o,
        Some(v) => {
            let msg = format!("'response_format' must be an object with a 'type', not {}", type_name(v));
            return Err(ApiError::invalid("response_format", msg));
        }
    };
    match o.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(Grammar::JsonObject)),
        Some("json_schema") => {
            let Some(Value::Object(js)) = field(o, "json_schema") else {
                let msg = "'response_format.json_schema' is required with type json_schema: an object with 'name' and 'schema'";
                return Err(ApiError::invalid("response_format.json_schema", msg));
            };
            let schema = match field(js, "schema") {
                Some(v @ Value::Object(_)) => v.clone(),
                Some(v) => {
                    let msg = format!(
                        "'response_format.json_schema.schema' must be a JSON schema object, not {}",
                        type_name(v)
                    );
                    return Err(ApiError::invalid("response_format.json_schema.schema", msg));
                }
                None => {
                    let msg = "'response_format.json_schema.schema' is required";
                    return Err(ApiError::invalid("response_format.json_schema.schema", msg));
                }
            };
            let strict = boolean(js, "strict").map_err(|mut e| {
                e.param = Some("response_format.json_schema.strict".into());
                e
            })?;
            Ok(Some(Grammar::JsonSchema { schema, strict }))
        }
        Some(t) => Err(ApiError::invalid(
            "response_format.type",
            format!("'response_format.type' must be one of text, json_object, json_schema; got '{t}'"),
        )),
        None => {
            Err(ApiError::invalid("response_format.type", "'response_format.type' is required and must be a string"))
        }
    }
}

/// Takes `tools`, `tool_choice` and `parallel_tool_calls` out of `m`, so that the generation
/// fields (which refuse them on the routes without tools) do not see them. `None` when no tool
/// is offered.
pub(super) fn take_tools(m: &mut Map<String, Value>) -> Result<Option<ToolSpec>, ApiError> {
    let tools = match m.remove("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.iter().enumerate().map(|(i, v)| tool(i, v)).collect::<Result<_, _>>()?,
        Some(v) => return Err(ApiError::invalid("tools", format!("'tools' must be an array, not {}", type_name(&v)))),
    };
    let choice = match m.remove("tool_choice") {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            _ => {
                let msg = format!("'tool_choice' must be none, auto, required or a named function; got '{s}'");
                return Err(ApiError::invalid("tool_choice", msg));
            }
        },
        Some(Value::Object(o)) => match o.get("function").and_then(|f| f.get("name")).and_then(Value::as_str) {
            Some(n) if o.get("type").and_then(Value::as_str) == Some("function") => ToolChoice::Named(n.to_string()),
            _ => {
                let msg = "'tool_choice' as an object must be {\"type\": \"function\", \"function\": {\"name\": ...}}";
                return Err(ApiError::invalid("tool_choice", msg));
            }
        },
        Some(v) => {
            let msg = format!("'tool_choice' must be a string or an object, not {}", type_name(&v));
            return Err(ApiError::invalid("tool_choice", msg));
        }
    };
    let parallel = match m.remove("parallel_tool_calls") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => b,
        Some(v) => {
            let msg = format!("'parallel_tool_calls' must be a boolean, not {}", type_name(&v));
            return Err(ApiError::invalid("parallel_tool_calls", msg));
        }
    };
    ToolSpec::offer(tools, choice, parallel)
}

/// One entry of `tools`: `{"type": "function", "function": {"name", "description", "parameters"}}`.
fn tool(i: usize, v: &Value) -> Result<Tool, ApiError> {
    let p = format!("tools[{i}]");
    let f = match (v.get("type").and_then(Value::as_str), v.get("function")) {
        (Some("function"), Some(Value::Object(f))) => f,
        _ => {
            let msg = format!("'{p}' must be {{\"type\": \"function\", \"function\": {{\"name\", \"parameters\"}}}}");
            return Err(ApiError::invalid(&p, msg));
        }
    };
    let name_param = format!("{p}.function.name");
    let name = f.get("name").and_then(Value::as_str).unwrap_or_default();
    check_name(name, &name_param)?;
    let parameters = match field(f, "parameters") {
        None => serde_json::json!({"type": "object", "properties": {}}),
        Some(v @ Value::Object(_)) => v.clone(),
        Some(v) => {
            let pp = format!("{p}.function.parameters");
            return Err(ApiError::invalid(&pp, format!("'{pp}' must be a JSON schema object, not {}", type_name(v))));
        }
    };
    let description = f.get("description").and_then(Value::as_str).map(str::to_string);
    Ok(Tool { name: name.to_string(), description, parameters })
}

/// Writes the calls of assistant turns (`tool_calls`) and the tool results (`role: "tool"`)
/// into the conversation as the model reads them; `raw` is the request's `messages`, parsed
/// into `messages` one for one. A result must answer a call made earlier.
pub(super) fn weave_tool_turns(raw: &[Value], messages: &mut [ChatMessage]) -> Result<(), ApiError> {
    let mut ids: Vec<String> = Vec::new();
    for (i, (v, m)) in raw.iter().zip(messages.iter_mut()).enumerate() {
        if m.role == "assistant" {
            let Some(calls) = field(v.as_object().unwrap_or(&Map::new()), "tool_calls").cloned() else { continue };
            let p = format!("messages[{i}].tool_calls");
            let Value::Array(calls) = calls else {
                return Err(ApiError::invalid(&p, format!("'{p}' must be an array")));
            };
            for (j, c) in calls.iter().enumerate() {
                let f = c.get("function");
                let name = f.and_then(|f| f.get("name")).and_then(Value::as_str);
                let args = f.and_then(|f| f.get("arguments")).and_then(Value::as_str);
                let (Some(name), Some(args)) = (name, args) else {
                    let msg = format!("'{p}[{j}]' must have function.name and function.arguments (a JSON string)");
                    return Err(ApiError::invalid(&format!("{p}[{j}]"), msg));
                };
                let args: Value = serde_json::from_str(args).map_err(|e| {
                    let pa = format!("{p}[{j}].function.arguments");
                    ApiError::invalid(&pa, format!("'{pa}' is not JSON: {e}"))
                })?;
                if let Some(id) = c.get("id").and_then(Value::as_str) {
                    ids.push(id.to_string());
                }
                if !m.content.is_empty() {
                    m.content.push('\n');
                }
                m.content.push_str(&render_call(name, &args));
            }
        } else if m.role == "tool" {
            let p = format!("messages[{i}].tool_call_id");
            match v.get("tool_call_id").and_then(Value::as_str) {
                Some(id) if ids.iter().any(|k| k == id) => {}
                Some(id) => {
                    let msg = format!("'{p}' is '{id}', which answers no tool call of an earlier assistant turn");
                    return Err(ApiError::invalid(&p, msg));
                }
                None => return Err(ApiError::invalid(&p, format!("'{p}' is required on a tool message"))),
            }
            m.role = "user".into();
            m.content = render_result(&m.content);
        }
    }
    Ok(())
}

/// An answer format to combine with tools, as a grammar rule (`param` names it for the 400).
pub(super) fn answer_rule(format: Option<&Grammar>, param: &str) -> Result<Option<String>, ApiError> {
    format.map(Grammar::lark_rule).transpose().map_err(|e| ApiError::invalid(param, format!("'{param}': {e}")))
}
