//! Anthropic's Messages API (`/v1/messages`, `/v1/messages/count_tokens`) against the real
//! binary over real sockets: the official `anthropic` package (`tests/py/check_anthropic.py`),
//! and the raw stream and error bytes, which the SDK would hide.

mod common;

use common::{demo_model, output_within, python, request, Server, CHILD_DEADLINE};
use std::path::Path;

const KEY: &str = "k3y-for-anthropic";

fn start() -> Server {
    let model = demo_model();
    Server::start_with_env(&["--model", model.to_str().unwrap(), "--threads", "1"], &[("MTPLX_API_KEY", KEY)])
}

fn post(s: &Server, path: &str, body: &str) -> common::Resp {
    request(s.addr, "POST", path, &[("x-api-key", KEY), ("content-type", "application/json")], body.as_bytes())
}

#[test]
fn anthropic_package_messages() {
    let s = start();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/check_anthropic.py");
    let out = output_within(
        python().arg(script).env("MTPLX_BASE_URL", format!("http://{}", s.addr)).env("MTPLX_API_KEY", KEY),
        CHILD_DEADLINE,
        "check_anthropic.py",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("anthropic ok"),
        "{}\n--- stdout\n{stdout}\n--- stderr\n{}\n--- server log\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        s.log.lock().unwrap().join("\n")
    );
}

/// The stream as bytes: every event has an `event:` line naming its `data`'s type, a `ping`
/// goes out before the first token (right after `message_start`), and the text deltas rebuild the whole answer's text.
#[test]
fn the_stream_names_every_event_and_pings() {
    let s = start();
    let body = r#"{"model":"m","max_tokens":8,"temperature":0,"messages":[{"role":"user","content":"Hi"}]BODY_END"#;
    let whole = post(&s, "/v1/messages", &body.replace("BODY_END", "}"));
    assert_eq!(whole.status, 200, "{}", whole.text());
    let text = whole.json()["content"][0]["text"].as_str().unwrap().to_string();
    let r = post(&s, "/v1/messages", &body.replace("BODY_END", r#","stream":true}"#));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.header("content-type").unwrap().starts_with("text/event-stream"));
    let mut names = Vec::new();
    let mut streamed = String::new();
    for event in r.text().split("\n\n").filter(|e| !e.is_empty()) {
        let (name_line, data_line) = event.split_once('\n').unwrap_or_else(|| panic!("one line only: {event:?}"));
        let name = name_line.strip_prefix("event: ").unwrap_or_else(|| panic!("no event line: {event:?}"));
        let data: serde_json::Value = serde_json::from_str(data_line.strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(data["type"], name, "{event}");
        if name == "content_block_delta" {
            streamed.push_str(data["delta"]["text"].as_str().unwrap());
        }
        if name == "message_delta" {
            assert_eq!(data["usage"]["output_tokens"], whole.json()["usage"]["output_tokens"], "{event}");
        }
        names.push(name.to_string());
    }
    assert_eq!(names[..3], ["message_start", "ping", "content_block_start"], "{names:?}");
    assert_eq!(names[names.len() - 3..], ["content_block_stop", "message_delta", "message_stop"], "{names:?}");
    assert_eq!(streamed, text);
}

/// Errors on the Messages routes take Anthropic's shape, also those given before a handler runs
/// (a wrong method, a missing key); the OpenAI routes keep theirs.
#[test]
fn errors_on_the_messages_routes_take_anthropics_shape() {
    let s = start();
    let is_anthropic = |r: &common::Resp, status: u16, kind: &str| {
        assert_eq!(r.status, status, "{}", r.text());
        let v = r.json();
        assert_eq!((v["type"].as_str(), v["error"]["type"].as_str()), (Some("error"), Some(kind)), "{v}");
        assert!(!v["error"]["message"].as_str().unwrap().is_empty(), "{v}");
    };
    is_anthropic(
        &post(&s, "/v1/messages", r#"{"messages":[{"role":"user","content":"Hi"}]}"#),
        400,
        "invalid_request_error",
    );
    is_anthropic(&post(&s, "/v1/messages/count_tokens", "{"), 400, "invalid_request_error");
    is_anthropic(&request(s.addr, "GET", "/v1/messages", &[("x-api-key", KEY)], b""), 405, "invalid_request_error");
    let no_key = request(
        s.addr,
        "POST",
        "/v1/messages",
        &[],
        br#"{"max_tokens":1,"messages":[{"role":"user","content":"Hi"}]}"#,
    );
    is_anthropic(&no_key, 401, "authentication_error");
    assert!(no_key.json()["error"]["message"].as_str().unwrap().contains("x-api-key"));
    // The key in Authorization works here too, and x-api-key on the OpenAI routes.
    let bearer = format!("Bearer {KEY}");
    let r = request(
        s.addr,
        "POST",
        "/v1/messages/count_tokens",
        &[("authorization", &bearer)],
        br#"{"messages":[{"role":"user","content":"Hi"}]}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()["input_tokens"].as_u64().unwrap() > 0);
    let r = request(s.addr, "POST", "/v1/completions", &[("x-api-key", KEY)], br#"{"prompt":"Hi","max_tokens":1}"#);
    assert_eq!(r.status, 200, "{}", r.text());
    let openai = request(s.addr, "POST", "/v1/completions", &[], br#"{"prompt":"Hi"}"#);
    assert_eq!(openai.json()["error"]["code"], "invalid_api_key");
}
