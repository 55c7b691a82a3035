//! A model's tool calls found in its streamed text: text outside calls passes through (with the
//! start of a call's opening held back, as stop sequences are); a call comes out as its name
//! once the grammar's `{"name":...,"arguments":` is written, then its arguments piece by piece
//! (the closing brace and marker held back) until its closing. The syntax is `tools::SYNTAX`'s.

use super::tools::SYNTAX;
use serde_json::Value;

/// What a piece of text turned into.
#[derive(Debug, PartialEq)]
pub enum Found {
    Text(String),
    /// A call begins: its name. Its arguments follow as `Args`.
    Call {
        name: String,
    },
    /// More of the current call's arguments (JSON text; all of them together are the object).
    Args(String),
}

#[derive(Clone, Copy, Default, PartialEq)]
enum State {
    #[default]
    Outside,
    /// After a call's opening, before its name is known.
    Opened,
    /// Inside a call's arguments, which stream.
    Arguments,
}

#[derive(Default)]
pub struct CallParser {
    pending: String,
    state: State,
    /// The current call's arguments passed on so far.
    args: String,
    /// Calls found so far: text that is only whitespace after one is dropped.
    calls: usize,
}

fn open() -> &'static str {
    SYNTAX.open.trim_end()
}

fn close() -> &'static str {
    SYNTAX.close.trim_start()
}

/// What ends a call's arguments: the brace of the call's object, then the closing marker.
fn closing() -> String {
    format!("}}{}", SYNTAX.close)
}

/// How the grammar writes a call's body up to its name (compact JSON, name first).
fn name_prefix() -> &'static str {
    "{\"name\":\""
}

/// What follows the name, up to the arguments.
fn args_prefix() -> String {
    format!("\",\"{}\":", SYNTAX.args_key)
}

impl CallParser {
    pub fn calls(&self) -> usize {
        self.calls
    }

    pub fn push(&mut self, delta: &str) -> Vec<Found> {
        self.pending.push_str(delta);
        let mut out = Vec::new();
        loop {
            match self.state {
                State::Arguments => {
                    if let Some(at) = self.pending.find(close()) {
                        // The body's last brace closes the call's object, not the arguments.
                        let args = self.pending[..at].trim_end().strip_suffix('}').unwrap_or_default().to_string();
                        self.pending.drain(..at + close().len());
                        self.state = State::Outside;
                        if !args.is_empty() {
                            out.push(Found::Args(args));
                        }
                        continue;
                    }
                    let keep = held(&self.pending, &closing());
                    let args: String = self.pending.drain(..self.pending.len() - keep).collect();
                    if !args.is_empty() {
                        self.args.push_str(&args);
                        out.push(Found::Args(args));
                    }
                    break;
                }
                State::Opened => {
                    let body = self.pending.trim_start();
                    if let Some(rest) = body.strip_prefix(name_prefix()) {
                        if let Some(end) = rest.find(&args_prefix()) {
                            let name = rest[..end].to_string();
                            let used = self.pending.len() - rest.len() + end + args_prefix().len();
                            self.pending.drain(..used);
                            self.calls += 1;
                            self.args.clear();
                            self.state = State::Arguments;
                            out.push(Found::Call { name });
                            continue;
                        }
                    }
                    let could = name_prefix().starts_with(body) || body.starts_with(name_prefix());
                    if could && !body.contains(close()) {
                        break;
                    }
                    // Not written as the grammar writes a call: judged whole at its closing.
                    let Some(at) = self.pending.find(close()) else { break };
                    let body = self.pending[..at].trim().to_string();
                    self.pending.drain(..at + close().len());
                    self.state = State::Outside;
                    self.whole(&body, &mut out);
                }
                State::Outside => {
                    if let Some(at) = self.pending.find(open()) {
                        let text: String = self.pending.drain(..at).collect();
                        self.text(text, &mut out);
                        self.pending.drain(..open().len());
                        self.state = State::Opened;
                        continue;
                    }
                    let keep = held(&self.pending, open());
                    let text: String = self.pending.drain(..self.pending.len() - keep).collect();
                    self.text(text, &mut out);
                    break;
                }
            }
        }
        out
    }

    /// The answer ended. A call whose arguments were streaming (cut by `max_tokens`) ends with
    /// what was written; one whose name was not yet written comes back as the text it was.
    pub fn finish(&mut self) -> Vec<Found> {
        let rest = std::mem::take(&mut self.pending);
        let mut out = Vec::new();
        match std::mem::take(&mut self.state) {
            State::Arguments => {
                // Held back as a possible closing: it was one when the arguments are whole
                // without it (the marker itself was cut).
                let keep = held(&rest, &closing());
                let cut = &rest[..rest.len() - keep];
                let whole = serde_json::from_str::<Value>(&format!("{}{cut}", self.args)).is_ok();
                let args = if whole { cut.to_string() } else { rest };
                if !args.is_empty() {
                    out.push(Found::Args(args));
                }
            }
            State::Opened => self.text(format!("{}{rest}", open()), &mut out),
            State::Outside => self.text(rest, &mut out),
        }
        out
    }

    fn text(&self, text: String, out: &mut Vec<Found>) {
        if text.is_empty() || (self.calls > 0 && text.trim().is_empty()) {
            return;
        }
        out.push(Found::Text(text));
    }

    /// A call's JSON body written otherwise than the grammar writes it; one that is not a call
    /// comes back as the text it was.
    fn whole(&mut self, body: &str, out: &mut Vec<Found>) {
        let v: Option<Value> = serde_json::from_str(body).ok();
        let name = v.as_ref().and_then(|v| v.get("name")).and_then(Value::as_str);
        match (name, v.as_ref().and_then(|v| v.get(SYNTAX.args_key))) {
            (Some(name), Some(args)) if args.is_object() => {
                self.calls += 1;
                out.push(Found::Call { name: name.to_string() });
                out.push(Found::Args(args.to_string()));
            }
            _ => out.push(Found::Text(format!("{}{body}{}", SYNTAX.open, SYNTAX.close))),
        }
    }
}

/// Bytes at the end of `s` that begin `marker` and so must wait for more text.
fn held(s: &str, marker: &str) -> usize {
    (1..marker.len().min(s.len() + 1))
        .rev()
        .find(|&n| s.is_char_boundary(s.len() - n) && marker.starts_with(&s[s.len() - n..]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(deltas: &[&str]) -> Vec<Found> {
        let mut p = CallParser::default();
        let mut out: Vec<Found> = deltas.iter().flat_map(|d| p.push(d)).collect();
        out.extend(p.finish());
        out
    }

    /// The pieces with each call's arguments joined, and how many pieces they came in.
    fn joined(out: Vec<Found>) -> (Vec<Found>, usize) {
        let mut v: Vec<Found> = Vec::new();
        let mut pieces = 0;
        for f in out {
            match (f, v.last_mut()) {
                (Found::Args(a), Some(Found::Args(b))) => {
                    b.push_str(&a);
                    pieces += 1;
                }
                (f, _) => {
                    pieces += matches!(f, Found::Args(_)) as usize;
                    v.push(f);
                }
            }
        }
        (v, pieces)
    }

    #[test]
    fn calls_split_across_deltas_stream_their_arguments_and_text_passes() {
        let (out, pieces) = joined(run(&[
            "Let me look. <tool",
            "_call>\n{\"name\":\"f\",\"argu",
            "ments\":{\"a\":1,",
            "\"b\":[2]}}\n</tool_",
            "call>\n<tool_call>\n{\"name\":\"g\",\"arguments\":{}}\n</tool_call>",
        ]));
        assert_eq!(
            out,
            [
                Found::Text("Let me look. ".into()),
                Found::Call { name: "f".into() },
                Found::Args("{\"a\":1,\"b\":[2]}".into()),
                Found::Call { name: "g".into() },
                Found::Args("{}".into()),
            ]
        );
        assert!(pieces >= 3, "f's arguments came in {pieces} pieces with g's");
    }

    #[test]
    fn the_closing_brace_and_marker_are_held_back_until_known() {
        let mut p = CallParser::default();
        assert_eq!(
            p.push("<tool_call>\n{\"name\":\"f\",\"arguments\":{\"a\":{}"),
            [Found::Call { name: "f".into() }, Found::Args("{\"a\":{".into())]
        );
        assert_eq!(p.push("}"), [Found::Args("}".into())]);
        assert_eq!(p.push("\n</tool"), []);
        assert_eq!(p.push("_call>"), []);
        assert_eq!(p.finish(), []);
    }

    #[test]
    fn what_is_not_a_call_stays_text() {
        assert_eq!(run(&["a <tool", "box> b"]), [Found::Text("a ".into()), Found::Text("<toolbox> b".into())]);
        assert_eq!(run(&["<tool_call>\n{\"na"]), [Found::Text("<tool_call>\n{\"na".into())]);
        assert_eq!(
            run(&["<tool_call>not json</tool_call>"]),
            [Found::Text("<tool_call>\nnot json\n</tool_call>".into())]
        );
        // Written otherwise than the grammar writes it, but a call: it comes out whole.
        assert_eq!(
            run(&["<tool_call>{\"arguments\": {\"a\": 1}, \"name\": \"f\"}</tool_call>"]),
            [Found::Call { name: "f".into() }, Found::Args("{\"a\":1}".into())]
        );
    }

    #[test]
    fn a_call_cut_short_ends_with_what_was_written() {
        let (out, _) = joined(run(&["<tool_call>\n{\"name\":\"f\",\"arguments\":{\"a\":", "12"]));
        assert_eq!(out, [Found::Call { name: "f".into() }, Found::Args("{\"a\":12".into())]);
        // Cut inside its closing: the arguments were whole.
        let (out, _) = joined(run(&["<tool_call>\n{\"name\":\"f\",\"arguments\":{\"a\":{}}", "}\n</tool"]));
        assert_eq!(out, [Found::Call { name: "f".into() }, Found::Args("{\"a\":{}}".into())]);
        let (out, _) = joined(run(&["<tool_call>\n{\"name\":\"f\",\"arguments\":{\"a\":{}", "}"]));
        assert_eq!(out, [Found::Call { name: "f".into() }, Found::Args("{\"a\":{}}".into())]);
    }
}
