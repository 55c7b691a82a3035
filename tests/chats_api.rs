//! The persisted-chat API end to end on SQLite: every route, streaming, errors, metrics,
//! restarts, a client that leaves mid-answer, 50 chats at once and pagination.

mod common;

use common::chats::{call, create, messages, start, turn, TempDir};
use common::sse::Sse;
use common::{get, metric, request};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Bound on waiting for a write that follows a disconnect; only a broken server takes this long.
const POLL_DEADLINE: Duration = Duration::from_secs(60);

/// The last of a chat's `count` messages, once the answer its client left is stored.
fn interrupted_answer(addr: std::net::SocketAddr, chat_id: &str, count: usize) -> Value {
    let deadline = Instant::now() + POLL_DEADLINE;
    loop {
        let all = messages(addr, chat_id);
        if all.len() == count {
            return all[count - 1].clone();
        }
        assert!(Instant::now() < deadline, "the interrupted answer was never stored: {all:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn every_route_and_every_refusal() {
    let dir = TempDir::new("chats-api");
    let s = start(&dir.join("chats.db"), &["--max-message-bytes", "64"]);
    let id =
        create(s.addr, &json!({"title": "greetings", "system": "You are terse.", "temperature": 0, "max_tokens": 6}));
    assert!(id.starts_with("chat_") && id.len() == 37, "{id}");

    let t = turn(s.addr, &id, "Say hello.", 4);
    let (u, a) = (&t["user_message"], &t["assistant_message"]);
    assert_eq!((u["role"].as_str(), a["role"].as_str()), (Some("user"), Some("assistant")));
    assert_eq!(u["content"], "Say hello.");
    assert_eq!(u["request_id"], a["request_id"], "one turn, one metrics record");
    assert!(a["request_id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert!(["stop", "length"].contains(&a["finish_reason"].as_str().unwrap()), "{a}");
    assert!(a["prompt_tokens"].as_i64().unwrap() > 5 && a["completion_tokens"].as_i64().unwrap() <= 4, "{a}");
    // The turn's record is the one the metrics routes show, under the route's template.
    let env = get(s.addr, "/v1/mtplx/metrics").json();
    let rec = env["history"].as_array().unwrap().iter().find(|r| r["request_id"] == a["request_id"]).unwrap().clone();
    assert_eq!(rec["route"], "/v1/chats/{chat_id}/messages");

    // A streamed second turn: chunks, then the stored turn, then [DONE].
    let mut sse = Sse::open(s.addr, &format!("/v1/chats/{id}/messages"), &json!({"content": "Again.", "stream": true}));
    assert_eq!(sse.status, 200);
    let events = sse.rest();
    let text: String = events.iter().filter_map(|e| e["choices"][0]["delta"]["content"].as_str()).collect();
    let end = events.last().unwrap();
    assert_eq!(end["object"], "chat.turn", "{end}");
    assert_eq!(end["assistant_message"]["content"].as_str().unwrap(), text);
    assert!(end["assistant_message"]["completion_tokens"].as_i64().unwrap() <= 6, "the chat's default max_tokens");

    let all = messages(s.addr, &id);
    assert_eq!(all.len(), 4);
    assert_eq!(
        all.iter().map(|m| m["role"].as_str().unwrap()).collect::<Vec<_>>(),
        ["user", "assistant", "user", "assistant"]
    );
    assert_eq!(all[3]["content"].as_str().unwrap(), text);
    let chat = call(s.addr, "GET", &format!("/v1/chats/{id}?include_messages=true"), None).json();
    assert_eq!((chat["title"].as_str(), chat["system"].as_str()), (Some("greetings"), Some("You are terse.")));
    assert_eq!(chat["defaults"], json!({"temperature": 0, "max_tokens": 6}));
    assert_eq!(chat["messages"].as_array().unwrap().len(), 4);
    assert_eq!((chat["client_ip"].as_str(), &chat["country"]), (Some("127.0.0.1"), &Value::Null));
    assert!(call(s.addr, "GET", &format!("/v1/chats/{id}"), None).json().get("messages").is_none());

    // Refusals, each in the OpenAI shape.
    let refusals: Vec<(&str, String, Option<Value>, u16, &str)> = vec![
        ("GET", "/v1/chats/chat_nope".into(), None, 404, "chat_not_found"),
        ("DELETE", "/v1/chats/chat_nope".into(), None, 404, "chat_not_found"),
        ("GET", "/v1/chats/chat_nope/messages".into(), None, 404, "chat_not_found"),
        ("POST", "/v1/chats/chat_nope/messages".into(), Some(json!({"content": "hi"})), 404, "chat_not_found"),
        (
            "POST",
            format!("/v1/chats/{id}/messages"),
            Some(json!({"content": "x".repeat(65)})),
            413,
            "message_too_large",
        ),
        ("POST", "/v1/chats".into(), Some(json!({"system": "y".repeat(65)})), 413, "message_too_large"),
        ("POST", format!("/v1/chats/{id}/messages"), Some(json!({"content": ""})), 400, "invalid_value"),
        (
            "POST",
            format!("/v1/chats/{id}/messages"),
            Some(json!({"content": "a", "temperature": 5})),
            400,
            "invalid_value",
        ),
        ("POST", "/v1/chats".into(), Some(json!({"tools": [{"type": "function"}]})), 400, "unsupported_parameter"),
        ("GET", "/v1/chats?page_size=101".into(), None, 400, "invalid_value"),
        ("PUT", "/v1/chats".into(), None, 405, "method_not_allowed"),
    ];
    for (method, path, body, status, code) in refusals {
        let r = call(s.addr, method, &path, body.as_ref());
        assert_eq!(r.status, status, "{method} {path}: {}", r.text());
        let e = r.json();
        assert_eq!(e["error"]["code"], code, "{method} {path}: {e}");
        assert!(!e["error"]["message"].as_str().unwrap().is_empty());
    }
    let bad = request(s.addr, "POST", &format!("/v1/chats/{id}/messages"), &[], b"{not json");
    assert_eq!((bad.status, bad.json()["error"]["code"].as_str()), (400, Some("invalid_json")));
    // None of the refusals stored anything.
    assert_eq!(messages(s.addr, &id).len(), 4);

    // A second message while the first is answered is a 409; the first goes on to its end.
    let long =
        json!({"content": "Write a long story about a dragon.", "stream": true, "max_tokens": 60, "temperature": 0.8});
    let mut first = Sse::open(s.addr, &format!("/v1/chats/{id}/messages"), &long);
    assert_eq!(first.status, 200);
    first.next_data().expect("the first chunk");
    let busy = call(s.addr, "POST", &format!("/v1/chats/{id}/messages"), Some(&json!({"content": "hi"})));
    assert_eq!((busy.status, busy.json()["error"]["code"].as_str()), (409, Some("chat_busy")), "{}", busy.text());
    first.rest();
    assert_eq!(messages(s.addr, &id).len(), 6);

    // Metrics: the chat routes under their templates, and the chat series.
    let m = get(s.addr, "/metrics").text();
    for needle in [
        "http_requests_total{method=\"POST\",route=\"/v1/chats/{chat_id}/messages\",status=\"200\"} 3",
        "http_requests_total{method=\"POST\",route=\"/v1/chats/{chat_id}/messages\",status=\"409\"} 1",
        "http_requests_total{method=\"GET\",route=\"/v1/chats/{chat_id}\",status=\"404\"} 1",
        "mtplx_messages_total{role=\"user\"} 3",
        "mtplx_messages_total{role=\"assistant\"} 3",
    ] {
        assert!(m.contains(needle), "{needle} missing:\n{m}");
    }
    assert_eq!(metric(&m, "mtplx_chats_total"), Some(1.0));
    assert_eq!(metric(&m, "llm_question_length_chars_count"), Some(3.0), "one per accepted user message");
    assert_eq!(metric(&m, "llm_answer_length_chars_count"), Some(3.0), "one per stored answer");
    assert!(metric(&m, "mtplx_db_write_seconds_count").unwrap() >= 7.0, "chat, 3 questions, 3 answers");
    assert_eq!(metric(&m, "mtplx_chat_turn_db_wait_seconds_count"), Some(3.0), "one per answered turn");
    assert!(metric(&m, "mtplx_chat_turn_db_wait_seconds_sum").unwrap() > 0.0);

    let d = call(s.addr, "DELETE", &format!("/v1/chats/{id}"), None);
    assert_eq!((d.status, d.json()["deleted"].as_bool()), (200, Some(true)));
    assert_eq!(call(s.addr, "GET", &format!("/v1/chats/{id}/messages"), None).status, 404);
}

#[test]
fn a_restart_keeps_everything_and_a_client_that_leaves_keeps_its_answer() {
    let dir = TempDir::new("chats-restart");
    let db = dir.join("chats.db");
    let s = start(&db, &[]);
    let id = create(s.addr, &json!({"title": "kept", "temperature": 0}));
    turn(s.addr, &id, "Name a color.", 3);
    let mut sse = Sse::open(
        s.addr,
        &format!("/v1/chats/{id}/messages"),
        &json!({"content": "Write a very long essay about the history of Rome.", "stream": true, "max_tokens": 400}),
    );
    assert_eq!(sse.status, 200);
    let mut sent = String::new();
    for _ in 0..4 {
        let v: Value = serde_json::from_slice(&sse.next_data().expect("a chunk")).unwrap();
        sent.push_str(v["choices"][0]["delta"]["content"].as_str().unwrap_or(""));
    }
    drop(sse);
    let answer = interrupted_answer(s.addr, &id, 4);
    assert_eq!(answer["finish_reason"], "interrupted", "{answer}");
    let stored = answer["content"].as_str().unwrap();
    assert!(stored.starts_with(&sent) && answer["completion_tokens"].as_i64().unwrap() < 400, "{answer} / {sent:?}");
    // The chat is free again once its answer is stored.
    turn(s.addr, &id, "Thanks.", 2);
    let before = messages(s.addr, &id);
    assert_eq!(before.len(), 6);
    assert!(s.terminate().success());

    let s = start(&db, &[]);
    assert_eq!(messages(s.addr, &id), before);
    let chat = call(s.addr, "GET", &format!("/v1/chats/{id}"), None).json();
    assert_eq!(chat["title"], "kept");
    // The conversation goes on where it was.
    let t = turn(s.addr, &id, "And another?", 2);
    assert!(t["assistant_message"]["prompt_tokens"].as_i64().unwrap() > before.len() as i64);
    assert_eq!(messages(s.addr, &id).len(), 8);
}

#[test]
fn fifty_chats_at_once_then_pages_of_them() {
    let dir = TempDir::new("chats-fifty");
    let s = start(&dir.join("chats.db"), &[]);
    let addr = s.addr;
    let threads: Vec<_> = (0..50)
        .map(|i| {
            std::thread::spawn(move || {
                let id = create(addr, &json!({"title": format!("chat {i}"), "temperature": 0}));
                let t = turn(addr, &id, &format!("Say the number {i}."), 2);
                (id, t)
            })
        })
        .collect();
    let chats: Vec<(String, Value)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for (id, t) in &chats {
        let all = messages(addr, id);
        assert_eq!(all.len(), 2, "{id}");
        assert_eq!(all[1]["message_id"], t["assistant_message"]["message_id"]);
    }
    let mut seen = Vec::new();
    for page in 1..=3 {
        let r = call(addr, "GET", &format!("/v1/chats?page={page}&page_size=20"), None).json();
        assert_eq!(r["total"], 50);
        assert_eq!(r["has_more"], page < 3, "{page}");
        let data = r["data"].as_array().unwrap();
        assert_eq!(data.len(), if page < 3 { 20 } else { 10 });
        seen.extend(
            data.iter().map(|c| (c["created_at"].as_i64().unwrap(), c["chat_id"].as_str().unwrap().to_string())),
        );
    }
    assert!(seen.windows(2).all(|w| w[0].0 >= w[1].0), "newest first");
    let mut ids: Vec<_> = seen.into_iter().map(|(_, id)| id).collect();
    ids.sort();
    let mut want: Vec<_> = chats.into_iter().map(|(id, _)| id).collect();
    want.sort();
    assert_eq!(ids, want, "every chat exactly once across the pages");
    let page = call(addr, "GET", &format!("/v1/chats/{}/messages?page=2&page_size=1", ids[0]), None).json();
    assert_eq!((page["total"].as_u64(), page["data"][0]["role"].as_str()), (Some(2), Some("assistant")));
}

#[test]
fn the_api_key_and_the_rate_limiter_guard_the_chat_routes() {
    let dir = TempDir::new("chats-guard");
    let model = common::demo_model();
    let db = dir.join("chats.db");
    let args =
        ["--model", model.to_str().unwrap(), "--threads", "1", "--database", &db, "--rate-limit-per-minute", "3"];
    let s = common::Server::start_with_env(&args, &[("MTPLX_API_KEY", "sekrit")]);
    let no_key = request(s.addr, "POST", "/v1/chats", &[], b"{}");
    assert_eq!((no_key.status, no_key.json()["error"]["code"].as_str()), (401, Some("invalid_api_key")));
    let auth = [("Authorization", "Bearer sekrit")];
    let ok = request(s.addr, "POST", "/v1/chats", &auth, b"{}");
    assert_eq!(ok.status, 200, "{}", ok.text());
    let id = ok.json()["chat_id"].as_str().unwrap().to_string();
    // Creating, listing and reading chats cost no model time: never counted.
    for _ in 0..4 {
        assert_eq!(request(s.addr, "GET", "/v1/chats", &auth, b"").status, 200);
        assert_eq!(request(s.addr, "GET", &format!("/v1/chats/{id}/messages"), &auth, b"").status, 200);
    }
    // The refused key used one of 3; a turn uses one; a second refused key the last one.
    let turn_path = format!("/v1/chats/{id}/messages");
    let body = br#"{"content": "Hi.", "max_tokens": 2}"#;
    assert_eq!(request(s.addr, "POST", &turn_path, &auth, body).status, 200);
    assert_eq!(request(s.addr, "GET", "/v1/models", &[], b"").status, 401);
    let limited = request(s.addr, "POST", &turn_path, &auth, body);
    assert_eq!((limited.status, limited.json()["error"]["code"].as_str()), (429, Some("rate_limit_exceeded")));
    let m = get(s.addr, "/metrics").text();
    assert!(m.contains("rejected_requests_total{route=\"/v1/chats/{chat_id}/messages\"} 1"), "{m}");
    assert!(m.contains("requests_per_ip_total{route=\"/v1/chats\"} 1"), "the refused key only: {m}");
}

#[test]
fn a_long_prefill_gets_keep_alive_comments_like_a_completion_stream() {
    let dir = TempDir::new("chats-keep-alive");
    // A keep-alive after 20 ms of silence: the prefill of the long question below is far longer
    // on any machine.
    let s = start(&dir.join("chats.db"), &["--stream-keep-alive", "0.02"]);
    let id = create(s.addr, &json!({"temperature": 0}));
    let question = "The quick brown fox jumps over the lazy dog, again and again. ".repeat(120);
    let mut sse = Sse::open(
        s.addr,
        &format!("/v1/chats/{id}/messages"),
        &json!({"content": question, "stream": true, "max_tokens": 2}),
    );
    assert_eq!(sse.status, 200);
    let (mut keep_alives, mut role_seen) = (0, false);
    let first_text = loop {
        let line = sse.next_line().expect("the stream ended before any answer text");
        if line == b": keep-alive" {
            assert!(role_seen, "a keep-alive before the first chunk");
            keep_alives += 1;
        } else if let Some(d) = line.strip_prefix(b"data: ") {
            let v: Value = serde_json::from_slice(d).unwrap();
            role_seen |= v["choices"][0]["delta"]["role"] == "assistant";
            if let Some(t) = v["choices"][0]["delta"]["content"].as_str() {
                break t.to_string();
            }
            assert_ne!(v["object"], "chat.turn", "the turn ended without text: {v}");
        }
    };
    assert!(keep_alives >= 1, "no keep-alive comment while the question was prefilled");
    let events = sse.rest();
    let end = events.last().unwrap();
    assert_eq!(end["object"], "chat.turn", "{end}");
    assert!(end["assistant_message"]["content"].as_str().unwrap().starts_with(&first_text), "{end}");
    assert_eq!(messages(s.addr, &id).len(), 2);
}

#[test]
fn a_turn_refused_before_generation_leaves_the_chat_as_it_was() {
    let dir = TempDir::new("chats-refused");
    let s = start(&dir.join("chats.db"), &["--ctx", "256"]);
    let id = create(s.addr, &json!({"temperature": 0, "max_tokens": 3}));
    let t = turn(s.addr, &id, "Say hi.", 3);
    let before = messages(s.addr, &id);
    assert_eq!(before.len(), 2);
    let records = || get(s.addr, "/v1/mtplx/metrics").json()["history"].as_array().unwrap().len();
    let records_before = records();

    // Refused by the API once the conversation is known, each whole and streamed: a completion
    // that cannot fit the context, and a question that alone is longer than the context.
    let long = "Tell me everything about the sea and its fish. ".repeat(40);
    let refused = [
        (json!({"content": "Again.", "max_tokens": 1000}), "max_tokens"),
        (json!({"content": "Again.", "max_tokens": 1000, "stream": true}), "max_tokens"),
        (json!({"content": long}), "messages"),
        (json!({"content": long, "stream": true}), "messages"),
    ];
    for (body, param) in refused {
        let r = call(s.addr, "POST", &format!("/v1/chats/{id}/messages"), Some(&body));
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert_eq!(r.header("content-type"), Some("application/json"), "{body}: a refusal, not a stream");
        let e = r.json();
        assert_eq!(
            (e["error"]["code"].as_str(), e["error"]["param"].as_str()),
            (Some("context_length_exceeded"), Some(param))
        );
        // No phantom answer, and no question left behind to hold the chat.
        assert_eq!(messages(s.addr, &id), before, "{body}");
    }
    assert_eq!(records(), records_before, "a refused turn makes no metrics record");
    let m = get(s.addr, "/metrics").text();
    assert!(m.contains("mtplx_messages_total{role=\"user\"} 1"), "{m}");
    assert!(m.contains("mtplx_messages_total{role=\"assistant\"} 1"), "{m}");
    assert_eq!(metric(&m, "llm_question_length_chars_count"), Some(1.0));

    // The chat is free at once, and every stored answer has its record.
    let again = turn(s.addr, &id, "Again.", 2);
    let all = messages(s.addr, &id);
    assert_eq!(all.len(), 4);
    let env = get(s.addr, "/v1/mtplx/metrics").json();
    for a in [&t["assistant_message"], &again["assistant_message"]] {
        let rid = &a["request_id"];
        assert!(env["history"].as_array().unwrap().iter().any(|r| &r["request_id"] == rid), "no record for {a}");
    }
}

/// A whole (not streamed) turn whose client leaves is cancelled at the next step: its answer is
/// stored as `interrupted` and the chat takes the next turn at once, not a 409 until an answer
/// nobody waits for is done.
#[test]
fn a_whole_turn_whose_client_leaves_is_cancelled_and_frees_the_chat() {
    let dir = TempDir::new("chats-leave");
    let s = start(&dir.join("chats.db"), &[]);
    // Greedy: this essay runs to 1,500 tokens, far past the moment its client leaves.
    let id = create(s.addr, &json!({"title": "left", "temperature": 0}));
    let body = json!({"content": "Write a very long essay about the history of Rome.", "max_tokens": 1500});
    common::post_then_leave(&s, &format!("/v1/chats/{id}/messages"), &body, POLL_DEADLINE);
    let answer = interrupted_answer(s.addr, &id, 2);
    assert_eq!(answer["finish_reason"], "interrupted", "{answer}");
    assert!(answer["completion_tokens"].as_i64().unwrap() < 1500, "{answer}");
    let t = turn(s.addr, &id, "Thanks.", 2);
    assert_eq!(t["assistant_message"]["role"], "assistant");
}
