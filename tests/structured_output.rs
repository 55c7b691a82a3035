//! Structured outputs (`response_format`) and tool calls against the real binary over real
//! sockets: the official `openai` package (`tests/py/check_structured.py`,
//! `tests/py/check_tools.py`), and greedy answers under a schema
//! that are the same with speculative decoding off and on (drafts checked against the grammar,
//! each verify row masked with its own prefix's mask).

mod common;

use common::{demo_model, output_within, post_json, python, Server, CHILD_DEADLINE};
use serde_json::json;
use std::path::Path;

fn start() -> Server {
    let model = demo_model();
    Server::start(&["--model", model.to_str().unwrap(), "--threads", "1"])
}

fn run_check(script: &str, done: &str) {
    let s = start();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py").join(script);
    let out =
        output_within(python().arg(path).env("MTPLX_BASE_URL", format!("http://{}", s.addr)), CHILD_DEADLINE, script);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(done),
        "{}\n--- stdout\n{stdout}\n--- stderr\n{}\n--- server log\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        s.log.lock().unwrap().join("\n")
    );
}

#[test]
fn openai_package_structured_outputs() {
    run_check("check_structured.py", "structured ok");
}

#[test]
fn openai_package_tool_calls() {
    run_check("check_tools.py", "tools ok");
}

/// At temperature 0 an answer under a grammar is the same whatever drafts: none, n-gram, or the
/// MTP head at a fixed depth (whose drafts run into forbidden tokens and get cut or rejected).
#[test]
fn greedy_answers_under_a_grammar_are_the_same_with_speculation() {
    let s = start();
    let schema = json!({"type": "object", "properties": {
        "fruits": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 4},
        "count": {"type": "integer"}}, "required": ["fruits", "count"], "additionalProperties": false});
    for format in
        [json!({"type": "json_object"}), json!({"type": "json_schema", "json_schema": {"name": "f", "schema": schema}})]
    {
        let answer = |draft: serde_json::Value| {
            let body = json!({"messages": [{"role": "user", "content": "List three fruits, then list them again."}],
                "max_tokens": 96, "temperature": 0, "response_format": format, "mtplx": draft});
            let r = post_json(s.addr, "/v1/chat/completions", &body);
            assert_eq!(r.status, 200, "{}", r.text());
            let v = r.json();
            let text = v["choices"][0]["message"]["content"].as_str().unwrap().to_string();
            (text, v["mtplx_stats"]["drafted_tokens"].as_u64().unwrap_or(0))
        };
        let (plain, _) = answer(json!({"draft": "none"}));
        let parsed: serde_json::Value = serde_json::from_str(&plain).unwrap_or_else(|e| panic!("{e}: {plain}"));
        assert!(parsed.is_object(), "{plain}");
        let mut drafted = 0;
        for draft in [json!({"draft": "ngram", "depth": 4}), json!({"draft": "mtp", "depth": 3})] {
            let (text, n) = answer(draft.clone());
            assert_eq!(text, plain, "{draft} under {format}");
            drafted += n;
        }
        assert!(drafted > 0, "nothing was drafted: the comparison checked nothing");
    }
}

/// Bad `response_format` values are 400s naming the field and the bound.
#[test]
fn bad_formats_are_refused_by_name() {
    let s = start();
    let deep = (0..40).fold(json!({"type": "string"}), |acc, _| json!({"type": "array", "items": acc}));
    for (format, param, needle) in [
        (json!({"type": "xml"}), "response_format.type", "one of text, json_object, json_schema"),
        (json!({"type": "json_schema"}), "response_format.json_schema", "required"),
        (
            json!({"type": "json_schema", "json_schema": {"name": "x", "schema": 5}}),
            "response_format.json_schema.schema",
            "JSON schema object",
        ),
        (
            json!({"type": "json_schema", "json_schema": {"name": "x", "strict": true, "schema": {"type": "array", "uniqueItems": true}}}),
            "response_format",
            "uniqueItems",
        ),
        (
            json!({"type": "json_schema", "json_schema": {"name": "x", "schema": deep}}),
            "response_format",
            "limit of 32 levels",
        ),
    ] {
        let body = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "response_format": format});
        let r = post_json(s.addr, "/v1/chat/completions", &body);
        assert_eq!(r.status, 400, "{format}: {}", r.text());
        let e = r.json();
        assert_eq!(e["error"]["param"], param, "{e}");
        assert!(e["error"]["message"].as_str().unwrap().contains(needle), "{e}");
    }
    // The server serves on.
    let r = post_json(s.addr, "/v1/completions", &json!({"prompt": "Hi", "max_tokens": 2}));
    assert_eq!(r.status, 200);
}
