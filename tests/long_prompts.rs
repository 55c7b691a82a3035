//! Long prompts on the real binary: while a prompt of thousands of tokens is prefilled, a
//! running stream keeps receiving tokens and a short request gets its first token; a long
//! prefill whose client leaves is cancelled and recorded as interrupted. No timing assertions:
//! benches/long_prompt_interference.py measures the latencies.

mod common;

use common::sse::Sse;
use common::{demo_model, get, metric, post_json, request_within, Server};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bound on every poll for a state the server reaches asynchronously.
const POLL_DEADLINE: Duration = Duration::from_secs(120);
/// Bound on one answer over the whole context: a prefill of 8,000 tokens took about 2 minutes
/// on a loaded 2-core machine.
const FULL_CONTEXT_DEADLINE: Duration = Duration::from_secs(600);
/// Step budget of these servers: the long prefill takes dozens of steps beside the stream.
const MAX_BATCH_TOKENS: usize = 128;

fn start() -> Server {
    let model = demo_model();
    let budget = MAX_BATCH_TOKENS.to_string();
    Server::start(&[
        "--model",
        model.to_str().unwrap(),
        "--threads",
        "2",
        "--max-batch-tokens",
        &budget,
        "--prefill-chunk",
        "256",
    ])
}

/// A prompt of about `tokens` tokens of the demo tokenizer (about 16 per sentence).
fn long_text(tokens: usize) -> String {
    (0..tokens / 16)
        .map(|i| format!("Item {i} says the river near the harbor is number {}.", i * 7))
        .collect::<Vec<_>>()
        .join(" ")
}

fn gauge(addr: SocketAddr, name: &str) -> f64 {
    let text = get(addr, "/metrics").text();
    metric(&text, name).unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

fn poll(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + POLL_DEADLINE;
    while !cond() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn history(addr: SocketAddr) -> Vec<Value> {
    get(addr, "/v1/mtplx/metrics").json()["history"].as_array().unwrap().clone()
}

#[test]
fn a_long_prefill_stalls_neither_a_running_stream_nor_a_short_request() {
    let s = start();
    let addr = s.addr;
    let mut stream = Sse::open(
        addr,
        "/v1/completions",
        &json!({"prompt": "Once upon a time", "max_tokens": 3000, "stream": true, "temperature": 0.7, "seed": 3}),
    );
    assert_eq!(stream.status, 200);
    stream.next_data().expect("the stream's first token");

    let long_done = Arc::new(AtomicBool::new(false));
    let long = {
        let done = long_done.clone();
        std::thread::spawn(move || {
            // Beside a stream, a step feeds a prompt only what keeps the stream's gaps bounded:
            // 25 s alone became 110-140 s here on a 2-vCPU Xeon, past `post_json`'s 120 s.
            let body = json!({"prompt": long_text(4000), "max_tokens": 1, "temperature": 0});
            let headers = [("Content-Type", "application/json")];
            let r = request_within(
                addr,
                ("POST", "/v1/completions"),
                &headers,
                body.to_string().as_bytes(),
                FULL_CONTEXT_DEADLINE,
            );
            done.store(true, Ordering::SeqCst);
            r
        })
    };
    poll("the long prompt runs beside the stream", || gauge(addr, "llm_requests_running") >= 2.0);

    let mut short =
        Sse::open(addr, "/v1/completions", &json!({"prompt": "Hi", "max_tokens": 2, "stream": true, "temperature": 0}));
    assert_eq!(short.status, 200);
    short.next_data().expect("the short request's first token");
    assert!(!long_done.load(Ordering::SeqCst), "the short request waited for the whole long prefill");
    short.rest();

    // The stream gets tokens while the long prompt is prefilled, one per step at least.
    let mut during = 0;
    while !long_done.load(Ordering::SeqCst) {
        match stream.next_data() {
            Some(d) if d != b"[DONE]" => during += 1,
            _ => break,
        }
    }
    let r = long.join().unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let prompt_tokens = r.json()["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(prompt_tokens >= 3500, "the long prompt has {prompt_tokens} tokens");
    assert!(during >= 10, "the stream got {during} tokens while the long prompt was prefilled");

    let rec =
        history(addr).into_iter().find(|r| r["prompt_tokens"] == prompt_tokens).expect("the long prompt's record");
    let chunks = rec["prefill_chunks"].as_u64().unwrap();
    // Beside a decoding stream a step feeds at most MAX_BATCH_TOKENS tokens, alone at most 256.
    assert!(chunks >= prompt_tokens / 256 && chunks >= 10, "{rec}");
    drop(stream);
}

#[test]
fn a_long_prefill_whose_client_leaves_is_cancelled_and_recorded_as_interrupted() {
    let s = start();
    let addr = s.addr;
    let body = json!({"messages": [{"role": "user", "content": long_text(6000)}], "max_tokens": 5, "stream": true});
    let mut sse = Sse::open(addr, "/v1/chat/completions", &body);
    assert_eq!(sse.status, 200);
    let role: Value = serde_json::from_slice(&sse.next_data().expect("the role chunk")).unwrap();
    assert_eq!(role["choices"][0]["delta"]["role"], "assistant", "{role}");
    poll("the long prompt is being prefilled", || gauge(addr, "llm_requests_running") == 1.0);
    drop(sse);
    let left = Instant::now();
    poll("the prefill stops", || gauge(addr, "llm_requests_running") == 0.0);
    eprintln!("the decode thread let the prefill go {:?} after its client left", left.elapsed());
    let rec = history(addr).into_iter().find(|r| r["request_id"] == role["id"]).expect("the record");
    assert_eq!(rec["status"], "interrupted", "{rec}");
    assert_eq!(rec["completion_tokens"], 0, "{rec}");
    // The server goes on serving.
    let r = post_json(addr, "/v1/completions", &json!({"prompt": "Hi", "max_tokens": 2}));
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn the_full_context_is_usable_its_long_prefix_reused_and_one_more_token_refused() {
    // The demo model at its whole 8,192-token context: a document that nearly fills it, then a
    // second question about it (only the new part is prefilled), a completion that ends exactly
    // at the last position, and a request one token over, refused by name.
    let server = start();
    let addr = server.addr;
    let ctx = get(addr, "/v1/models").json()["data"][0]["context_length"].as_u64().expect("context_length");
    assert_eq!(ctx, 8192, "the demo model's context");
    let doc = long_text(6900); // about 7,960 tokens
    let ask = |question: &str, max_tokens: Value| {
        let body = json!({"prompt": format!("{doc}\n{question}"), "max_tokens": max_tokens, "temperature": 0});
        let headers = [("Content-Type", "application/json")];
        request_within(addr, ("POST", "/v1/completions"), &headers, body.to_string().as_bytes(), FULL_CONTEXT_DEADLINE)
    };
    let first = ask("Question: which item is the last?", json!(1));
    assert_eq!(first.status, 200, "{}", first.text());
    let n = first.json()["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!((7600..ctx - 8).contains(&n), "the document has {n} tokens");

    let second = ask("Question: what is near the harbor?", json!(1));
    assert_eq!(second.status, 200, "{}", second.text());
    let m = second.json()["usage"]["prompt_tokens"].as_u64().unwrap();
    let rec = history(addr).into_iter().last().expect("the second request's record");
    assert_eq!(rec["prompt_tokens"].as_u64(), Some(m), "{rec}");
    let prefix = &rec["session_prompt_prefix_commit"];
    let prefilled = prefix["prefilled_tokens"].as_u64().expect("prefilled_tokens");
    assert!(prefilled <= 16 && prefix["cached_tokens"].as_u64().unwrap() + prefilled == m, "{rec}");

    // What is left of the context, and no more.
    let over = ask("Question: what is near the harbor?", json!(ctx - m + 1));
    assert_eq!(over.status, 400, "{}", over.text());
    let err = over.json();
    assert_eq!(err["error"]["code"], "context_length_exceeded", "{err}");
    assert!(err["error"]["message"].as_str().unwrap().contains(&format!("at most {}", ctx - m)), "{err}");
    let full = ask("Question: what is near the harbor?", json!(ctx - m));
    assert_eq!(full.status, 200, "{}", full.text());
    let usage = &full.json()["usage"];
    assert_eq!(usage["prompt_tokens"].as_u64(), Some(m));
    let done = usage["completion_tokens"].as_u64().unwrap();
    let finish = full.json()["choices"][0]["finish_reason"].clone();
    assert!(done == ctx - m || finish == "stop", "{done} of {} tokens, finish {finish}", ctx - m);
}
