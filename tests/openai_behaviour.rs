//! Behaviour of the OpenAI routes that a client library hides: cancellation by disconnect, a
//! full queue, seeded sampling, stop sequences, `ignore_eos`, UTF-8 in streamed deltas, and the
//! metrics record every generation leaves. The real binary, raw sockets.

mod common;

use common::sse::Sse;
use common::{demo_model, get, metric, post_json, Server};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Bound on every poll for a state the server reaches asynchronously; only a broken server
/// takes this long.
const POLL_DEADLINE: Duration = Duration::from_secs(60);

fn start(extra: &[&str]) -> Server {
    let model = demo_model();
    let mut args = vec!["--model", model.to_str().unwrap(), "--threads", "1"];
    args.extend_from_slice(extra);
    Server::start(&args)
}

fn chat_text(events: &[Value]) -> String {
    events.iter().filter_map(|e| e["choices"][0]["delta"]["content"].as_str()).collect()
}

/// The record of `request_id` in `/v1/mtplx/metrics`, once it is there.
fn record(addr: SocketAddr, request_id: &str) -> Value {
    let deadline = Instant::now() + POLL_DEADLINE;
    loop {
        let env = get(addr, "/v1/mtplx/metrics").json();
        if let Some(r) = env["history"].as_array().unwrap().iter().find(|r| r["request_id"] == request_id) {
            return r.clone();
        }
        assert!(Instant::now() < deadline, "no record for {request_id}: {env}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The answer's usage and its record agree.
fn assert_record_matches(addr: SocketAddr, id: &str, usage: &Value) {
    let r = record(addr, id);
    assert_eq!(r["prompt_tokens"], usage["prompt_tokens"], "{r}\n{usage}");
    assert_eq!(r["completion_tokens"], usage["completion_tokens"], "{r}\n{usage}");
    let cached = &usage["prompt_tokens_details"]["cached_tokens"];
    assert_eq!(r["session_prompt_prefix_commit"]["cached_tokens"], *cached, "{r}\n{usage}");
}

fn wait_idle(addr: SocketAddr) {
    let deadline = Instant::now() + POLL_DEADLINE;
    loop {
        let text = get(addr, "/metrics").text();
        // Waiting counts too: a job held for room is neither running nor in flight once its
        // client left, and it still takes the queue's place until the decode thread ends it.
        if metric(&text, "http_requests_in_flight") == Some(0.0)
            && metric(&text, "llm_requests_running") == Some(0.0)
            && metric(&text, "llm_requests_waiting") == Some(0.0)
        {
            return;
        }
        assert!(Instant::now() < deadline, "never idle again:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn disconnect_mid_stream_cancels_and_is_recorded_as_interrupted() {
    let s = start(&[]);
    const MAX: u64 = 4000;
    let mut sse = Sse::open(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Write a very long essay about the history of Rome."}], "max_tokens": MAX, "stream": true}),
    );
    assert_eq!(sse.status, 200);
    let mut id = String::new();
    for _ in 0..4 {
        let v: Value = serde_json::from_slice(&sse.next_data().expect("a chunk")).unwrap();
        id = v["id"].as_str().unwrap().to_string();
    }
    drop(sse);
    let deadline = Instant::now() + POLL_DEADLINE;
    let rec = loop {
        let env = get(s.addr, "/v1/mtplx/metrics").json();
        if let Some(r) = env["history"].as_array().unwrap().iter().find(|r| r["request_id"] == id.as_str()) {
            break r.clone();
        }
        assert!(Instant::now() < deadline, "no record for {id}: {env}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(rec["status"], "interrupted", "{rec}");
    let done = rec["completion_tokens"].as_u64().unwrap();
    assert!((3..MAX).contains(&done), "{rec}");
    assert!(rec["ttlt_s"].as_f64().unwrap() > 0.0, "{rec}");
    wait_idle(s.addr);
    // The server goes on serving after the cancellation.
    let r = post_json(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn a_full_queue_answers_503_with_retry_after() {
    // One context's worth of cache (the demo model keeps 46080 bytes per position) lets one
    // long sequence run; one more waits in the decode thread, one in the queue of depth 1.
    let s = start(&["--queue-depth", "1", "--ctx", "256", "--kv-cache-bytes", "11796480"]);
    let body =
        json!({"messages": [{"role": "user", "content": "Count to a thousand."}], "max_tokens": 200, "stream": true});
    let mut open = Vec::new();
    let mut refused = None;
    for _ in 0..8 {
        let sse = Sse::open(s.addr, "/v1/chat/completions", &body);
        if sse.status == 503 {
            refused = Some(sse);
            break;
        }
        assert_eq!(sse.status, 200);
        open.push(sse);
    }
    let mut refused = refused.expect("one of 8 concurrent long requests is refused while the queue is full");
    assert!(!open.is_empty());
    let retry: u64 = refused.header("retry-after").expect("Retry-After").parse().unwrap();
    assert!(retry >= 1);
    let b = refused.plain_body();
    let err: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(err["error"]["code"], "queue_full", "{err}");
    assert_eq!(err["error"]["type"], "server_error", "{err}");
    drop(open);
    wait_idle(s.addr);
    let text = get(s.addr, "/metrics").text();
    assert!(
        text.contains("http_requests_total{method=\"POST\",route=\"/v1/chat/completions\",status=\"503\"} "),
        "{text}"
    );
    let r = post_json(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
    );
    assert_eq!(r.status, 200, "the server serves again once the queue drained: {}", r.text());
}

#[test]
fn seeded_sampling_repeats_itself() {
    let s = start(&[]);
    let ask = |seed: u64| {
        let r = post_json(
            s.addr,
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "Invent a name for a cat."}], "max_tokens": 16, "temperature": 1.0, "seed": seed}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        assert_record_matches(s.addr, v["id"].as_str().unwrap(), &v["usage"]);
        v["choices"][0]["message"]["content"].as_str().unwrap().to_string()
    };
    let a = ask(1234);
    assert!(!a.is_empty());
    assert_eq!(ask(1234), a, "same seed, same text");
    // Sixteen tokens at temperature 1 from three other seeds: all three equal to the first would
    // mean the seed is ignored (or the distribution is a spike, which this prompt's is not).
    let others: Vec<String> = [1, 2, 3].into_iter().map(ask).collect();
    assert!(others.iter().any(|o| *o != a), "every seed gave {a:?}");
    // Streamed with the same seed: the same text.
    let mut sse = Sse::open(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Invent a name for a cat."}], "max_tokens": 16, "temperature": 1.0, "seed": 1234, "stream": true}),
    );
    assert_eq!(chat_text(&sse.rest()), a);
}

#[test]
fn stop_sequences_end_the_text_before_the_stop_string() {
    let s = start(&[]);
    let prompt = "Here is a list of fruits: apple, banana,";
    let req = |stop: Option<&str>, stream: bool| {
        let mut b = json!({"prompt": prompt, "max_tokens": 24, "temperature": 0, "stream": stream, "stream_options": {"include_usage": true}});
        if let Some(st) = stop {
            b["stop"] = json!([st, "never-in-this-text-ZQX"]);
        }
        b
    };
    let r = post_json(s.addr, "/v1/completions", &req(None, false));
    assert_eq!(r.status, 200, "{}", r.text());
    let free = r.json()["choices"][0]["text"].as_str().unwrap().to_string();
    let chars: Vec<(usize, char)> = free.char_indices().collect();
    assert!(chars.len() >= 8, "the greedy text is long enough to cut: {free:?}");
    // A stop string from the middle of the free text: the stopped text is what came before its
    // first occurrence.
    let (at, _) = chars[chars.len() / 2];
    let end = chars.get(chars.len() / 2 + 2).map_or(free.len(), |c| c.0);
    let stop = &free[at..end];
    let want = &free[..free.find(stop).unwrap()];

    let r = post_json(s.addr, "/v1/completions", &req(Some(stop), false));
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["choices"][0]["text"], want, "stop {stop:?} in {free:?}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(record(s.addr, v["id"].as_str().unwrap())["status"], "stop");
    assert_record_matches(s.addr, v["id"].as_str().unwrap(), &v["usage"]);

    let mut sse = Sse::open(s.addr, "/v1/completions", &req(Some(stop), true));
    let events = sse.rest();
    let text: String = events.iter().filter_map(|e| e["choices"].get(0).and_then(|c| c["text"].as_str())).collect();
    assert_eq!(text, want, "streamed: stop {stop:?} in {free:?}");
    let finishes: Vec<&Value> = events
        .iter()
        .filter_map(|e| e["choices"].get(0))
        .map(|c| &c["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finishes, vec!["stop"]);
    let usage = &events.last().unwrap()["usage"];
    assert_record_matches(s.addr, events[0]["id"].as_str().unwrap(), usage);
}

#[test]
fn ignore_eos_generates_past_the_end_of_the_answer_to_max_tokens() {
    let s = start(&[]);
    let req = |ignore: bool| {
        json!({"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 48, "temperature": 0,
               "ignore_eos": ignore, "mtplx": {"draft": "none"}})
    };
    let r = post_json(s.addr, "/v1/chat/completions", &req(false));
    assert_eq!(r.status, 200, "{}", r.text());
    let short = r.json();
    assert_eq!(short["choices"][0]["finish_reason"], "stop", "the greedy answer ends by itself: {short}");
    let ended_at = short["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(ended_at < 48, "{short}");

    let r = post_json(s.addr, "/v1/chat/completions", &req(true));
    assert_eq!(r.status, 200, "{}", r.text());
    let long = r.json();
    assert_eq!(long["choices"][0]["finish_reason"], "length", "{long}");
    assert_eq!(long["usage"]["completion_tokens"], 48, "{long}");
    let answer = short["choices"][0]["message"]["content"].as_str().unwrap();
    let text = long["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(text.starts_with(answer) && text.len() > answer.len(), "{answer:?} then more: {text:?}");
    assert_record_matches(s.addr, long["id"].as_str().unwrap(), &long["usage"]);

    let r = post_json(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "ignore_eos": 1}),
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["param"], "ignore_eos");
}

#[test]
fn streamed_text_never_splits_a_utf8_character() {
    let s = start(&[]);
    // Text the byte-level tokenizer spells in pieces of characters: accents, CJK, emoji.
    let prompt = "Répète exactement: café, naïve, 日本語, 😀👍, Ελληνικά. Répète:";
    let mut all = String::new();
    for seed in [1u64, 2, 3] {
        let body = json!({"prompt": prompt, "max_tokens": 24, "temperature": 1.0, "seed": seed, "stream": true, "stream_options": {"include_usage": true}});
        let mut sse = Sse::open(s.addr, "/v1/completions", &body);
        assert_eq!(sse.status, 200);
        let events = sse.rest();
        let text: String = events.iter().filter_map(|e| e["choices"].get(0).and_then(|c| c["text"].as_str())).collect();
        assert!(!text.contains('\u{FFFD}'), "a replacement character in the stream: {text:?}");
        // The whole answer of the same request is the same text.
        let mut whole = body.clone();
        whole["stream"] = json!(false);
        let r = post_json(s.addr, "/v1/completions", &whole);
        assert_eq!(r.json()["choices"][0]["text"], text.as_str());
        assert_record_matches(s.addr, events[0]["id"].as_str().unwrap(), &events.last().unwrap()["usage"]);
        all.push_str(&text);
    }
    assert!(all.chars().any(|c| c.len_utf8() > 1), "the model wrote some multi-byte characters: {all:?}");
}

#[test]
fn every_generation_leaves_a_record_matching_its_usage() {
    let s = start(&[]);
    let r = post_json(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}),
    );
    let v = r.json();
    assert_record_matches(s.addr, v["id"].as_str().unwrap(), &v["usage"]);
    assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 0, "a first prompt is computed: {v}");
    let r = post_json(s.addr, "/v1/completions", &json!({"prompt": "Once upon", "max_tokens": 5}));
    let v = r.json();
    assert_record_matches(s.addr, v["id"].as_str().unwrap(), &v["usage"]);
    let mut sse = Sse::open(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "stream": true, "stream_options": {"include_usage": true}}),
    );
    let events = sse.rest();
    let usage = &events.last().unwrap()["usage"];
    assert_record_matches(s.addr, events[0]["id"].as_str().unwrap(), usage);
    // The first chat's prompt again: its prefix comes from the cache, and usage says how much.
    let cached = usage["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap();
    assert!(cached > 0 && cached < usage["prompt_tokens"].as_u64().unwrap(), "{usage}");
    let env = get(s.addr, "/v1/mtplx/metrics").json();
    assert_eq!(env["history"].as_array().unwrap().len(), 3, "{env}");
    // A refused request leaves no generation record.
    let r = post_json(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "temperature": 9}),
    );
    assert_eq!(r.status, 400);
    assert_eq!(get(s.addr, "/v1/mtplx/metrics").json()["history"].as_array().unwrap().len(), 3);
}

/// A client that leaves before its whole answer is ready cancels the generation at the next step,
/// as a stream's client does: its record says `interrupted`, short of `max_tokens`.
#[test]
fn disconnect_while_a_whole_answer_is_gathered_cancels_it() {
    let s = start(&[]);
    const MAX: u64 = 1500;
    let body = json!({"messages": [{"role": "user", "content": "Write a very long essay about the history of Rome."}], "max_tokens": MAX, "ignore_eos": true});
    common::post_then_leave(&s, "/v1/chat/completions", &body, POLL_DEADLINE);
    wait_idle(s.addr);
    let rec = get(s.addr, "/v1/mtplx/metrics").json()["latest"].clone();
    assert_eq!(rec["status"], "interrupted", "{rec}");
    assert!(rec["completion_tokens"].as_u64().unwrap() < MAX, "{rec}");
}

/// The KV budget is what the buffers take: a sequence whose positions end inside a group of
/// keys (4 past a multiple of 32) leaves the cache gauges at its positions, not half as many
/// again (a reservation of whole positions let the last group's keys reallocate and double).
#[test]
fn the_kv_cache_holds_what_its_positions_need() {
    let s = start(&["--kv-cache-bytes", "100000000"]);
    let prompt = "The history of Rome is long. ".repeat(40);
    let probe = post_json(s.addr, "/v1/completions", &json!({"prompt": prompt, "max_tokens": 1}));
    let p = probe.json()["usage"]["prompt_tokens"].as_u64().unwrap();
    let max_tokens = 64 - (p % 32) + 4;
    let r = post_json(
        s.addr,
        "/v1/completions",
        &json!({"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": true, "temperature": 0}),
    );
    assert_eq!(r.json()["usage"]["completion_tokens"].as_u64(), Some(max_tokens), "{}", r.text());
    let positions = p + max_tokens;
    let text = get(s.addr, "/metrics").text();
    let used = metric(&text, "mtplx_kv_cache_used_tokens").unwrap() as u64;
    let (used_bytes, cap_bytes) =
        (metric(&text, "mtplx_kv_cache_used_bytes").unwrap(), metric(&text, "mtplx_kv_cache_capacity_bytes").unwrap());
    assert!(used <= positions + 32 && used + 32 >= positions, "{used} tokens held for {positions} positions");
    assert!(used_bytes <= cap_bytes, "{used_bytes} > {cap_bytes}");
}
