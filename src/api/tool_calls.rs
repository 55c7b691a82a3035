//! A model's tool calls found in its streamed text: text outside calls passes through (with the
//! start of a call's opening held back, as stop sequences are), each call comes out whole once
//! its closing is written. The syntax is `tools::SYNTAX`'s.

use super::tools::SYNTAX;
use serde_json::Value;

/// What a piece of text turned into.
#[derive(Debug, PartialEq)]
pub enum Found {
    Text(String),
    Call { name: String, arguments: String },
}

#[derive(Default)]
pub struct CallParser {
    pending: String,
    inside: bool,
    /// Calls found so far: text that is only whitespace after one is dropped.
    calls: usize,
}

fn open() -> &'static str {
    SYNTAX.open.trim_end()
}

fn close() -> &'static str {
    SYNTAX.close.trim_start()
}

impl CallParser {
    pub fn calls(&self) -> usize {
        self.calls
    }

    pub fn push(&mut self, delta: &str) -> Vec<Found> {
        self.pending.push_str(delta);
        let mut out = Vec::new();
        loop {
            if self.inside {
                let Some(at) = self.pending.find(close()) else { break };
                let body = self.pending[..at].trim().to_string();
                self.pending.drain(..at + close().len());
                self.inside = false;
                out.push(self.call(&body));
                continue;
            }
            if let Some(at) = self.pending.find(open()) {
                let text: String = self.pending.drain(..at).collect();
                self.text(text, &mut out);
                self.pending.drain(..open().len());
                self.inside = true;
                continue;
            }
            let keep = held(&self.pending, open());
            let text: String = self.pending.drain(..self.pending.len() - keep).collect();
            self.text(text, &mut out);
            break;
        }
        out
    }

    /// The answer ended: a call left open (cut by `max_tokens`) comes back as the text it was.
    pub fn finish(&mut self) -> Vec<Found> {
        let rest = std::mem::take(&mut self.pending);
        let text = if self.inside { format!("{}{rest}", open()) } else { rest };
        self.inside = false;
        let mut out = Vec::new();
        self.text(text, &mut out);
        out
    }

    fn text(&self, text: String, out: &mut Vec<Found>) {
        if text.is_empty() || (self.calls > 0 && text.trim().is_empty()) {
            return;
        }
        out.push(Found::Text(text));
    }

    /// A call's JSON body; one that is not a call comes back as the text it was.
    fn call(&mut self, body: &str) -> Found {
        let v: Option<Value> = serde_json::from_str(body).ok();
        let name = v.as_ref().and_then(|v| v.get("name")).and_then(Value::as_str);
        match (name, v.as_ref().and_then(|v| v.get(SYNTAX.args_key))) {
            (Some(name), Some(args)) if args.is_object() => {
                self.calls += 1;
                Found::Call { name: name.to_string(), arguments: args.to_string() }
            }
            _ => Found::Text(format!("{}{body}{}", SYNTAX.open, SYNTAX.close)),
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

    #[test]
    fn calls_split_across_deltas_come_out_whole_and_text_passes() {
        let out = run(&[
            "Let me look. <tool",
            "_call>\n{\"name\":\"f\",\"argu",
            "ments\":{\"a\":1}}\n</tool_",
            "call>\n<tool_call>\n{\"name\":\"g\",\"arguments\":{}}\n</tool_call>",
        ]);
        assert_eq!(
            out,
            [
                Found::Text("Let me look. ".into()),
                Found::Call { name: "f".into(), arguments: "{\"a\":1}".into() },
                Found::Call { name: "g".into(), arguments: "{}".into() },
            ]
        );
    }

    #[test]
    fn what_is_not_a_call_stays_text() {
        assert_eq!(run(&["a <tool", "box> b"]), [Found::Text("a ".into()), Found::Text("<toolbox> b".into())]);
        assert_eq!(
            run(&["<tool_call>\n{\"name\":\"f\",\"arg"]),
            [Found::Text("<tool_call>\n{\"name\":\"f\",\"arg".into())]
        );
        assert_eq!(
            run(&["<tool_call>not json</tool_call>"]),
            [Found::Text("<tool_call>\nnot json\n</tool_call>".into())]
        );
    }
}
