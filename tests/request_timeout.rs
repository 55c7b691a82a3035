//! `--request-timeout` on the real binary: a generation that runs past it is cancelled in the
//! engine, its stream ends with a `request_timeout` error chunk and `[DONE]`, its record says
//! `timed_out`, and the server goes on serving. No timing assertions: the only ordering relied
//! on is that a 1 s deadline passes long before 4000 tokens are generated.

mod common;

use common::sse::Sse;
use common::{demo_model, get, post_json, Server};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Bound on every poll for a state the server reaches asynchronously; only a broken server
/// takes this long.
const POLL_DEADLINE: Duration = Duration::from_secs(60);
/// A prompt the demo model continues without an end under greedy decoding: it counts on.
const COUNTING: &str = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,";
/// What every timeout message names: the flag and its bound.
const BOUND: &str = "the request ran past --request-timeout (1 s), ";

fn poll<T>(what: &str, mut found: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + POLL_DEADLINE;
    loop {
        if let Some(v) = found() {
            return v;
        }
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn record(addr: SocketAddr, request_id: &str) -> Value {
    poll(&format!("a record for {request_id}"), || {
        let env = get(addr, "/v1/mtplx/metrics").json();
        env["history"].as_array().unwrap().iter().find(|r| r["request_id"] == request_id).cloned()
    })
}

fn requests_running(addr: SocketAddr) -> f64 {
    let text = get(addr, "/metrics").text();
    text.lines()
        .find_map(|l| l.strip_prefix("llm_requests_running ")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no llm_requests_running in\n{text}"))
}

#[test]
fn a_generation_past_the_request_timeout_ends_with_a_timeout_error_and_the_server_serves_on() {
    let model = demo_model();
    let s = Server::start(&["--model", model.to_str().unwrap(), "--threads", "2", "--request-timeout", "1"]);
    let addr = s.addr;

    // Streamed: the last chunk carries the error, then `[DONE]` (`rest` checks that it ends so).
    let long = json!({"prompt": COUNTING, "max_tokens": 4000, "stream": true, "temperature": 0});
    let mut sse = Sse::open(addr, "/v1/completions", &long);
    assert_eq!(sse.status, 200);
    let chunks = sse.rest();
    let last = chunks.last().expect("a final chunk before [DONE]");
    assert_eq!(last["choices"][0]["finish_reason"], "error", "{last}");
    assert_eq!(last["error"]["code"], "request_timeout", "{last}");
    assert_eq!(last["error"]["type"], "server_error", "{last}");
    let message = last["error"]["message"].as_str().unwrap();
    assert!(message.starts_with(BOUND), "{message}");
    assert_eq!(last["mtplx_stats"]["status"], "timed_out", "{last}");

    let rec = record(addr, last["id"].as_str().unwrap());
    assert_eq!(rec["status"], "timed_out", "{rec}");
    assert_eq!(rec["error"], message, "{rec}");
    assert!(rec["completion_tokens"].as_u64().unwrap() < 4000, "{rec}");
    eprintln!("the streamed generation timed out: {message}");
    // The engine let the sequence go.
    poll("the timed-out generation leaves the engine", || (requests_running(addr) == 0.0).then_some(()));

    // Not streamed: what was generated, cut short (or, had nothing come yet, a 504).
    let r = post_json(addr, "/v1/completions", &json!({"prompt": COUNTING, "max_tokens": 4000, "temperature": 0}));
    let v = r.json();
    eprintln!("the whole answer to a timed-out request: {} {}", r.status, v["mtplx_stats"]["error"]);
    match r.status {
        200 => {
            assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
            assert_eq!(v["mtplx_stats"]["status"], "timed_out", "{v}");
            assert!(v["mtplx_stats"]["error"].as_str().unwrap().starts_with(BOUND), "{v}");
            assert!(!v["choices"][0]["text"].as_str().unwrap().is_empty(), "{v}");
        }
        504 => assert_eq!(v["error"]["code"], "request_timeout", "{v}"),
        other => panic!("a timed-out request answered {other}: {v}"),
    }

    // The server goes on serving.
    let r = post_json(addr, "/v1/completions", &json!({"prompt": "Hi", "max_tokens": 1, "temperature": 0}));
    assert_eq!(r.status, 200, "{}", r.text());
    let status = r.json()["mtplx_stats"]["status"].clone();
    assert!(status == "length" || status == "done", "{}", r.text());
}
