//! What the request parsers of both APIs read bodies with: optional fields, their JSON type in
//! messages, flags, and the chat message they turn turns into.

use super::error::ApiError;
use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A field that is absent or null is `None`.
pub fn field<'a>(m: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    m.get(name).filter(|v| !v.is_null())
}

pub fn boolean(m: &Map<String, Value>, name: &str) -> Result<bool, ApiError> {
    match field(m, name) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(ApiError::invalid(name, format!("'{name}' must be a boolean, not {}", type_name(v)))),
    }
}
