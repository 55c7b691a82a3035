//! Tool calls: the request's tools (OpenAI's `tools`, `tool_choice`, `parallel_tool_calls`,
//! and Anthropic's equivalents once translated), how a model is told about them, the grammar
//! that makes its calls well formed, and how calls and results in a conversation are written
//! back into the prompt. The syntax of a call is described once, in [`SYNTAX`].

use super::error::ApiError;
use super::request_fields::ChatMessage;
use crate::engine::Grammar;
use serde_json::{json, Value};

/// Most tools one request may offer: each adds its schema to the prompt and the grammar.
pub const MAX_TOOLS: usize = 128;
/// Longest tool name, and its alphabet: OpenAI's and Anthropic's rule.
pub const MAX_TOOL_NAME: usize = 64;

/// How a model writes a tool call: between `open` and `close`, a JSON object with the tool's
/// name and its arguments under `args_key`. Results go back to the model between
/// `result_open` and `result_close`, in a user turn.
pub struct ToolSyntax {
    pub family: &'static str,
    pub open: &'static str,
    pub close: &'static str,
    pub args_key: &'static str,
    pub result_open: &'static str,
    pub result_close: &'static str,
}

/// The Hermes / Qwen syntax, which chat-tuned models of the llama family know too; the one
/// every template uses here (the tools are described in the system turn, so a template needs no
/// tool support of its own).
pub const SYNTAX: ToolSyntax = ToolSyntax {
    family: "hermes",
    open: "<tool_call>\n",
    close: "\n</tool_call>",
    args_key: "arguments",
    result_open: "<tool_response>\n",
    result_close: "\n</tool_response>",
};

#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// A JSON schema of the arguments object.
    pub parameters: Value,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ToolChoice {
    /// The model does not call tools (they are not offered).
    None,
    /// The model may answer or call.
    Auto,
    /// The model calls at least one tool.
    Required,
    /// The model calls this tool.
    Named(String),
}

/// What a request offers the model.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    pub tools: Vec<Tool>,
    pub choice: ToolChoice,
    /// More than one call in an answer.
    pub parallel: bool,
}

/// Checks one tool's name (`param` names the field for the 400).
pub fn check_name(name: &str, param: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_TOOL_NAME
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        return Ok(());
    }
    Err(ApiError::invalid(
        param,
        format!("'{param}' must be 1 to {MAX_TOOL_NAME} letters, digits, '_' or '-'; got '{}'", name.escape_default()),
    ))
}

impl ToolSpec {
    /// What a request offers, checked (see [`ToolSpec::check`]); `None` when it offers no tool.
    /// Both APIs' parsers end here.
    pub fn offer(tools: Vec<Tool>, choice: ToolChoice, parallel: bool) -> Result<Option<ToolSpec>, ApiError> {
        if tools.is_empty() && matches!(choice, ToolChoice::None | ToolChoice::Auto) {
            return Ok(None);
        }
        let spec = ToolSpec { tools, choice, parallel };
        spec.check("tools", "tool_choice")?;
        Ok(Some(spec))
    }

    /// Refuses two tools of one name and a `Named` choice that names no tool.
    pub fn check(&self, tools_param: &str, choice_param: &str) -> Result<(), ApiError> {
        if self.tools.len() > MAX_TOOLS {
            let msg = format!("'{tools_param}' may hold at most {MAX_TOOLS} tools, got {}", self.tools.len());
            return Err(ApiError::invalid(tools_param, msg));
        }
        for (i, t) in self.tools.iter().enumerate() {
            if self.tools[..i].iter().any(|u| u.name == t.name) {
                return Err(ApiError::invalid(tools_param, format!("two tools are named '{}'", t.name)));
            }
        }
        if let ToolChoice::Named(n) = &self.choice {
            if !self.tools.iter().any(|t| &t.name == n) {
                let msg = format!("'{choice_param}' names the tool '{n}', which is not among the request's tools");
                return Err(ApiError::invalid(choice_param, msg));
            }
        }
        if self.tools.is_empty() && matches!(self.choice, ToolChoice::Required) {
            return Err(ApiError::invalid(
                choice_param,
                format!("'{choice_param}' requires a tool, but none is offered"),
            ));
        }
        Ok(())
    }

    /// Whether the model is told about the tools at all.
    pub fn offered(&self) -> bool {
        !self.tools.is_empty() && self.choice != ToolChoice::None
    }

    /// What the system turn says about the tools, in the model's [`SYNTAX`].
    pub fn preamble(&self) -> String {
        let list: Vec<Value> = self
            .tools
            .iter()
            .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
            .collect();
        let mut s = String::from("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n");
        s.push_str("You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n");
        for t in &list {
            s.push_str(&t.to_string());
            s.push('\n');
        }
        s.push_str("</tools>\n\nFor each function call, return a json object with function name and arguments within ");
        s.push_str(&format!(
            "<tool_call></tool_call> XML tags:\n{}{{\"name\": <function-name>, \"{}\": <args-json-object>}}{}",
            SYNTAX.open, SYNTAX.args_key, SYNTAX.close
        ));
        s
    }

    /// Tells the model about the tools: appended to the first turn when its role is one of
    /// `system_roles`, else in a system turn of its own before the others.
    pub fn announce(&self, messages: &mut Vec<ChatMessage>, system_roles: &[&str]) {
        match messages.first_mut() {
            Some(first) if system_roles.contains(&first.role.as_str()) => {
                first.content = format!("{}\n\n{}", first.content, self.preamble());
            }
            _ => messages.insert(0, ChatMessage { role: "system".into(), content: self.preamble() }),
        }
    }

    /// The grammar of the answer: with `Required` or `Named`, calls from the first token; with
    /// `Auto`, free text in which a call, once its opening is written, must be well formed (a
    /// lazy grammar), or, when the request also sets an answer format, either calls or an answer
    /// in that format (`answer`, a rule from [`Grammar::lark_rule`]). `None` when nothing is
    /// offered.
    pub fn grammar(&self, answer: Option<&str>) -> Option<Grammar> {
        if !self.offered() {
            return None;
        }
        let callable: Vec<&Tool> = match &self.choice {
            ToolChoice::Named(n) => self.tools.iter().filter(|t| &t.name == n).collect(),
            _ => self.tools.iter().collect(),
        };
        let calls: Vec<Value> = callable
            .iter()
            .map(|t| {
                json!({"type": "object", "properties": {"name": {"const": t.name}, SYNTAX.args_key: t.parameters},
                    "required": ["name", SYNTAX.args_key], "additionalProperties": false})
            })
            .collect();
        let schema = json!({"anyOf": calls, "x-guidance": {"whitespace_flexible": false, "lenient": true}});
        let (open, close) = (lark_string(SYNTAX.open), lark_string(SYNTAX.close));
        let repeat = if self.parallel { "call (\"\\n\" call)*" } else { "call" };
        let src = match (&self.choice, answer) {
            (ToolChoice::Auto, Some(answer)) => {
                format!("start: answer | {repeat}\nanswer: {answer}\ncall: {open} %json {schema} {close}\n")
            }
            (ToolChoice::Auto, None) => format!(
                "%llguidance {{}}\nstart: call{more} text\ntext: TEXT\nTEXT: /(.|\\n)*/\n\
                 trigger[lazy]: TEXT {open_trimmed}\ncall: trigger \"\\n\" %json {schema} {close}\n",
                more = if self.parallel { "*" } else { "?" },
                open_trimmed = lark_string(SYNTAX.open.trim_end()),
            ),
            _ => format!("start: {repeat}\ncall: {open} %json {schema} {close}\n"),
        };
        Some(Grammar::Lark(src))
    }
}

/// `s` as a Lark string literal.
fn lark_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// A call as the model writes it, for an earlier assistant turn going back into the prompt.
pub fn render_call(name: &str, arguments: &Value) -> String {
    let body = json!({"name": name, SYNTAX.args_key: arguments});
    format!("{}{}{}", SYNTAX.open, body, SYNTAX.close)
}

/// A tool's result as the model reads it, in a user turn.
pub fn render_result(content: &str) -> String {
    format!("{}{}{}", SYNTAX.result_open, content, SYNTAX.result_close)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(choice: ToolChoice, parallel: bool) -> ToolSpec {
        let t = |n: &str| Tool { name: n.into(), description: None, parameters: json!({"type": "object"}) };
        ToolSpec { tools: vec![t("get_weather"), t("get_time")], choice, parallel }
    }

    #[test]
    fn a_choice_must_name_an_offered_tool() {
        assert!(spec(ToolChoice::Named("get_time".into()), true).check("tools", "tool_choice").is_ok());
        let e = spec(ToolChoice::Named("nope".into()), true).check("tools", "tool_choice").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tool_choice"));
        assert!(e.message.contains("'nope'"), "{}", e.message);
        let mut twice = spec(ToolChoice::Auto, true);
        twice.tools.push(twice.tools[0].clone());
        assert!(twice.check("tools", "tool_choice").unwrap_err().message.contains("two tools"));
        assert!(check_name("a b", "tools[0].function.name").is_err());
        assert!(check_name(&"x".repeat(65), "n").is_err());
        assert!(check_name("get_weather-2", "n").is_ok());
    }

    #[test]
    fn grammars_follow_the_choice() {
        assert_eq!(spec(ToolChoice::None, true).grammar(None), None);
        let Some(Grammar::Lark(named)) = spec(ToolChoice::Named("get_time".into()), false).grammar(None) else {
            panic!()
        };
        assert!(named.contains("get_time") && !named.contains("get_weather") && !named.contains("[lazy]"), "{named}");
        let Some(Grammar::Lark(auto)) = spec(ToolChoice::Auto, true).grammar(None) else { panic!() };
        assert!(auto.contains("[lazy]") && auto.contains("get_weather") && auto.contains("get_time"), "{auto}");
        // With an answer format: calls or an answer in it, from the first token.
        let rule = Grammar::JsonObject.lark_rule().unwrap();
        let Some(Grammar::Lark(both)) = spec(ToolChoice::Auto, false).grammar(Some(&rule)) else { panic!() };
        assert!(
            both.starts_with("start: answer | call\n") && both.contains(&rule) && !both.contains("[lazy]"),
            "{both}"
        );
        let Some(Grammar::Lark(required)) = spec(ToolChoice::Required, true).grammar(Some(&rule)) else { panic!() };
        assert!(!required.contains("answer"), "a required call leaves no room for an answer: {required}");
    }

    #[test]
    fn calls_and_results_are_written_in_the_syntax() {
        assert_eq!(
            render_call("f", &json!({"a": 1})),
            "<tool_call>\n{\"name\":\"f\",\"arguments\":{\"a\":1}}\n</tool_call>"
        );
        assert_eq!(render_result("42"), "<tool_response>\n42\n</tool_response>");
        assert!(spec(ToolChoice::Auto, true).preamble().contains("\"name\":\"get_weather\""));
    }
}
