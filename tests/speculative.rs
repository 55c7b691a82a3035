//! Speculative decoding on the real binary and the demo model: at temperature 0 the answer is
//! token for token the plain answer, for each drafter and depth and with four requests at once
//! mixing drafting and plain ones; the records say what was drafted and accepted; the Prometheus
//! counters follow; and a bad `mtplx` option is refused by name.

mod common;

use common::{demo_model, get, metric, post_json, Server};
use serde_json::{json, Value};
use std::net::SocketAddr;

/// An editing request: the answer repeats most of the prompt, which n-gram drafts thrive on.
const EDIT_PROMPT: &str = "Rewrite this function with the variable `total` renamed to `sum`. Reply with the code only.\n\n```rust\nfn add_all(values: &[i64]) -> i64 {\n    let mut total = 0;\n    for v in values {\n        total += v;\n    }\n    total\n}\n```";

fn start(draft: &str, depth: &str) -> Server {
    let model = demo_model();
    Server::start(&["--model", model.to_str().unwrap(), "--threads", "2", "--draft", draft, "--depth", depth])
}

fn ask(addr: SocketAddr, content: &str, extra: Value) -> (String, String) {
    let mut body = json!({
        "messages": [{"role": "user", "content": content}],
        "temperature": 0,
        "max_tokens": 96,
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let r = post_json(addr, "/v1/chat/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    (v["choices"][0]["message"]["content"].as_str().unwrap().to_string(), v["id"].as_str().unwrap().to_string())
}

fn record(addr: SocketAddr, id: &str) -> Value {
    let h = get(addr, "/v1/mtplx/metrics").json();
    h["history"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["request_id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no record {id}"))
}

#[test]
fn greedy_answers_are_the_plain_answers_and_records_count_the_drafts() {
    let plain = start("none", "auto");
    let prompts = [EDIT_PROMPT, "List the days of the week, one per line, then list them again in the same order."];
    let want: Vec<String> = prompts.iter().map(|p| ask(plain.addr, p, json!({})).0).collect();
    for depth in ["1", "4", "auto"] {
        let spec = start("ngram", depth);
        for (p, w) in prompts.iter().zip(&want) {
            let (got, id) = ask(spec.addr, p, json!({}));
            assert_eq!(&got, w, "--depth {depth}");
            let r = record(spec.addr, &id);
            assert_eq!(r["drafter"], "ngram", "{r}");
            let (drafted, accepted) = (r["drafted_tokens"].as_u64().unwrap(), r["accepted_tokens"].as_u64().unwrap());
            assert!(accepted <= drafted, "{r}");
            if p == &EDIT_PROMPT && depth != "auto" {
                assert!(accepted > 0 && r["accept_rate"].as_f64().unwrap() > 0.0, "{r}");
                let by_depth: u64 =
                    r["accepted_by_depth"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).sum();
                assert_eq!(by_depth, accepted, "{r}");
            }
        }
        let text = get(spec.addr, "/metrics").text();
        let total = metric(&text, "llm_spec_decode_num_accepted_tokens_total").unwrap();
        assert!(total > 0.0 || depth == "auto", "--depth {depth}: {total}");
    }
}

#[test]
fn four_requests_at_once_mixing_drafters_each_get_the_plain_answer() {
    let plain = start("none", "auto");
    let want = ask(plain.addr, EDIT_PROMPT, json!({})).0;
    drop(plain);
    let spec = start("ngram", "3");
    let options = [
        json!({}),
        json!({"mtplx": {"draft": "none"}}),
        json!({"mtplx": {"depth": 2}}),
        json!({"mtplx": {"draft": "ngram", "depth": 8}}),
    ];
    let handles: Vec<_> = options
        .into_iter()
        .map(|o| {
            let addr = spec.addr;
            std::thread::spawn(move || ask(addr, EDIT_PROMPT, o))
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let (got, id) = h.join().unwrap();
        assert_eq!(got, want, "request {i}");
        let r = record(spec.addr, &id);
        if i == 1 {
            assert_eq!((r["drafter"].as_str(), r["drafted_tokens"].as_u64()), (Some(""), Some(0)), "{r}");
        } else {
            assert_eq!(r["drafter"], "ngram", "{r}");
        }
    }
}

#[test]
fn bad_drafting_options_are_refused_by_name() {
    // A model with no MTP head (the demo file gets its shipped head however it is named).
    common::gemma_model();
    let spec = Server::start(&["--model", "gemma3-270m", "--threads", "2", "--draft", "ngram"]);
    for (opt, param) in [
        (json!({"mtplx": {"draft": "eagle"}}), "mtplx.draft"),
        (json!({"mtplx": {"draft": "mtp"}}), "mtplx.draft"),
        (json!({"mtplx": {"depth": 0}}), "mtplx.depth"),
        (json!({"mtplx": {"depth": 9}}), "mtplx.depth"),
        (json!({"mtplx": "fast"}), "mtplx"),
    ] {
        let mut body = json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4});
        body["mtplx"] = opt["mtplx"].clone();
        let r = post_json(spec.addr, "/v1/chat/completions", &body);
        assert_eq!(r.status, 400, "{opt}: {}", r.text());
        assert_eq!(r.json()["error"]["param"], param, "{opt}: {}", r.text());
    }
}

/// The demo model's forged MTP head, committed beside the code.
const HEAD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/models/SmolLM2-135M-Instruct.Q4_1.mtp.safetensors");
const POEM_PROMPT: &str = "Write a short poem about the sea.";

fn start_with_head(draft: &str, depth: &str) -> Server {
    let model = demo_model();
    let m = model.to_str().unwrap();
    Server::start(&["--model", m, "--threads", "2", "--draft", draft, "--depth", depth, "--mtp-head", HEAD])
}

#[test]
fn mtp_drafts_give_the_plain_answers_also_after_prefix_reuse_and_beside_other_drafters() {
    let plain = start("none", "auto");
    let prompts = [POEM_PROMPT, EDIT_PROMPT];
    let want: Vec<String> = prompts.iter().map(|p| ask(plain.addr, p, json!({})).0).collect();
    drop(plain);
    let spec = start_with_head("mtp", "3");
    let mut accepted = 0;
    // Each prompt twice: the second time most of the prompt comes from the first request's
    // cache, whose positions have no hidden rows, so the head starts after the reused prefix.
    for (p, w) in prompts.iter().chain(&prompts).zip(want.iter().chain(&want)) {
        let (got, id) = ask(spec.addr, p, json!({}));
        assert_eq!(&got, w);
        let r = record(spec.addr, &id);
        assert_eq!(r["drafter"], "mtp", "{r}");
        assert!(r["drafted_tokens"].as_u64().unwrap() > 0, "{r}");
        accepted += r["accepted_tokens"].as_u64().unwrap();
    }
    assert!(accepted > 0, "the head's drafts were never accepted");
    // Four at once, each with another drafter, in the same batched steps.
    let options = [
        json!({}),
        json!({"mtplx": {"draft": "none"}}),
        json!({"mtplx": {"draft": "ngram"}}),
        json!({"mtplx": {"draft": "auto", "depth": 2}}),
    ];
    let handles: Vec<_> = options
        .into_iter()
        .enumerate()
        .map(|(i, o)| {
            let (addr, p) = (spec.addr, prompts[i % 2]);
            std::thread::spawn(move || ask(addr, p, o))
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let (got, id) = h.join().unwrap();
        assert_eq!(got, want[i % 2], "request {i}");
        let drafter = record(spec.addr, &id)["drafter"].clone();
        assert_eq!(drafter, ["mtp", "", "ngram", "ngram+mtp"][i], "request {i}");
    }
}

#[test]
fn the_mtp_drafter_needs_a_head_made_for_the_model() {
    let model = demo_model();
    let m = model.to_str().unwrap();
    let bin = env!("CARGO_BIN_EXE_mtplx-lite");
    // A model with no head of its own (the demo file gets its shipped one however it is named).
    let gemma = common::gemma_model();
    let args = ["--listen", "127.0.0.1:0", "--model", gemma.to_str().unwrap(), "--draft", "mtp"];
    let out = std::process::Command::new(bin).args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--draft mtp") && err.contains("--mtp-head"), "{err}");
    // A head made for another trunk: the tests' tiny one.
    let other = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/mtp/head.safetensors");
    let out = std::process::Command::new(bin)
        .args(["--listen", "127.0.0.1:0", "--model", m, "--mtp-head", other])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("sha256") || err.contains("trunk"), "{err}");
}
