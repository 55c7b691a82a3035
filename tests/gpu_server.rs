//! The server with `--backend gpu` (lavapipe in CI, where there is no GPU): it says which
//! device it chose in its log, `/health` and the metrics, and answers from the device; without
//! any adapter it refuses to start, naming what it looked for, before taking the port.

mod common;

use common::{get, post_json, Server};
use serde_json::json;
use std::process::Command;
use std::time::Duration;

#[test]
fn the_gpu_backend_is_named_everywhere_and_greedy_answers_follow_its_own_top_token() {
    let model = common::demo_model();
    let server = Server::start(&["--model", model.to_str().unwrap(), "--backend", "gpu", "--draft", "none"]);
    let health = get(server.addr, "/health").json();
    assert_eq!(health["backend"], "gpu", "{health}");
    assert!(!health["adapter"].as_str().unwrap_or("").is_empty(), "{health}");
    let metrics = get(server.addr, "/metrics").text();
    assert!(metrics.contains("mtplx_backend_info{backend=\"gpu\",adapter=\""), "{metrics}");
    assert!(server.log.lock().unwrap().iter().any(|l| l.starts_with("mtplx-lite: backend gpu: ")));
    let body = json!({"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0, "logprobs": 3});
    let r = post_json(server.addr, "/v1/completions", &body).json();
    let lp = &r["choices"][0]["logprobs"];
    let tokens = lp["tokens"].as_array().expect("tokens");
    assert_eq!(tokens.len(), 4, "{r}");
    // Greedy: each token chosen is the most likely of the top alternatives the device computed.
    for (i, top) in lp["top_logprobs"].as_array().unwrap().iter().enumerate() {
        let best = top.as_object().unwrap().values().map(|v| v.as_f64().unwrap()).fold(f64::MIN, f64::max);
        let chosen = lp["token_logprobs"][i].as_f64().unwrap();
        assert!(chosen >= best - 1e-6, "step {i}: chose {chosen}, best was {best}: {r}");
    }
    assert!(r["choices"][0]["text"].as_str().unwrap().contains("Paris"), "{r}");
    // The same prompt again reuses the cached prefix on the device and answers the same.
    let again = post_json(server.addr, "/v1/completions", &body).json();
    assert_eq!(again["choices"][0]["text"], r["choices"][0]["text"]);
    // Without logprobs a greedy step reads back only the device's argmax ids: the same text,
    // and 4 bytes a token.
    let read = |m: &str| common::metric(m, "mtplx_gpu_read_back_bytes_total").unwrap_or(0.0);
    let before = read(&get(server.addr, "/metrics").text());
    let ids_only = json!({"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0});
    let plain = post_json(server.addr, "/v1/completions", &ids_only).json();
    assert_eq!(plain["choices"][0]["text"], r["choices"][0]["text"], "{plain}");
    let after = read(&get(server.addr, "/metrics").text());
    assert_eq!(after - before, 16.0, "four greedy tokens read back as four ids");
    server.terminate();
}

#[test]
fn without_any_adapter_gpu_is_refused_before_the_port_is_taken() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mtplx-lite"));
    cmd.args(["--listen", &format!("127.0.0.1:{port}"), "--backend", "gpu"])
        .env("VK_ICD_FILENAMES", "/nonexistent/icd.json")
        .env("VK_DRIVER_FILES", "/nonexistent/icd.json");
    let out = common::output_within(&mut cmd, Duration::from_secs(60), "mtplx-lite --backend gpu");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--backend gpu: no GPU adapter found (looked for Vulkan, Metal and DirectX 12"), "{err}");
    assert!(!err.contains("listening"), "{err}");
}

/// A short greedy completion: lavapipe reads a prompt at a few tokens a second, so no chat
/// template's system prompt.
fn complete(addr: std::net::SocketAddr, prompt: &str, mtplx: serde_json::Value) -> String {
    complete_drafted(addr, prompt, mtplx).0
}

/// The text, and how many tokens were drafted for it.
fn complete_drafted(addr: std::net::SocketAddr, prompt: &str, mtplx: serde_json::Value) -> (String, u64) {
    let body = json!({"prompt": prompt, "temperature": 0, "max_tokens": 8, "mtplx": mtplx});
    let r = post_json(addr, "/v1/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    (v["choices"][0]["text"].as_str().unwrap().to_string(), v["mtplx_stats"]["drafted_tokens"].as_u64().unwrap_or(0))
}

/// Speculative decoding on the device (verify rows in one pass, the MTP head's block on the
/// device, rollback of device caches) answers at temperature 0 exactly as plain decoding does,
/// and so do four requests at once, batched in one pass.
#[test]
fn on_the_gpu_drafts_and_batches_change_no_greedy_answer() {
    let model = common::demo_model();
    let server = Server::start(&["--model", model.to_str().unwrap(), "--backend", "gpu", "--draft", "auto"]);
    let prompts = ["Monday, Tuesday, Wednesday,", "one, two, three, four,"];
    let want: Vec<String> = prompts.iter().map(|p| complete(server.addr, p, json!({"draft": "none"}))).collect();
    for (drafter, i) in [("mtp", 0), ("ngram", 1)] {
        let (text, drafted) = complete_drafted(server.addr, prompts[i], json!({"draft": drafter, "depth": 2}));
        assert_eq!(text, want[i], "{drafter}");
        if drafter == "mtp" {
            // The head drafts at every step: its block ran on the device.
            assert!(drafted > 0, "no MTP drafts");
        }
    }
    let options =
        [json!({"draft": "none"}), json!({"draft": "mtp", "depth": 2}), json!({"draft": "ngram", "depth": 3})];
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let (addr, p, o) = (server.addr, prompts[i % 2], options[i % 3].clone());
            std::thread::spawn(move || complete(addr, p, o))
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join().unwrap(), want[i % 2], "request {i}");
    }
    server.terminate();
}

/// A GPU lost mid-generation (the device destroyed after its fourth command buffer, as a
/// driver reset would leave it): the running request ends with an error, health turns 503
/// and names the fault, the metrics say so, new generations get a clear 503, and everything
/// else keeps answering.
#[test]
fn a_lost_gpu_ends_the_running_request_and_health_and_metrics_say_so() {
    let model = common::demo_model();
    let args = ["--model", model.to_str().unwrap(), "--backend", "gpu", "--draft", "none"];
    let server = Server::start_with_env(&args, &[("MTPLX_TEST_LOSE_GPU_AFTER_SUBMITS", "4")]);
    // Two command buffers: the cache's first storage, and the prompt's pass.
    let first = post_json(server.addr, "/v1/completions", &json!({"prompt": "Hi", "max_tokens": 1}));
    assert_eq!(first.status, 200, "{}", first.text());
    let metrics = get(server.addr, "/metrics").text();
    assert_eq!(common::metric(&metrics, "mtplx_gpu_healthy"), Some(1.0), "{metrics}");
    assert_eq!(common::metric(&metrics, "mtplx_gpu_submits_total"), Some(2.0), "{metrics}");
    // One logits row of the 49,152-token vocabulary came back, and nothing else.
    assert_eq!(common::metric(&metrics, "mtplx_gpu_read_back_bytes_total"), Some(196_608.0), "{metrics}");
    assert!(common::metric(&metrics, "mtplx_gpu_dispatches_total").unwrap_or(0.0) > 30.0, "{metrics}");
    // The prompt's pass and the first decode step run; the device is gone for the second.
    let body = json!({"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0});
    let failed = post_json(server.addr, "/v1/completions", &body);
    assert!(failed.status >= 500, "{} {}", failed.status, failed.text());
    let health = get(server.addr, "/health");
    assert_eq!(health.status, 503, "{}", health.text());
    let h = health.json();
    assert_eq!(h["status"], "degraded", "{h}");
    assert!(!h["device_fault"].as_str().unwrap_or("").is_empty(), "{h}");
    let metrics = get(server.addr, "/metrics").text();
    assert_eq!(common::metric(&metrics, "mtplx_gpu_healthy"), Some(0.0), "{metrics}");
    let refused =
        post_json(server.addr, "/v1/chat/completions", &json!({"messages": [{"role": "user", "content": "hi"}]}));
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(refused.json()["error"]["code"], "device_failed", "{}", refused.text());
    assert!(refused.text().contains("the GPU failed"), "{}", refused.text());
    assert_eq!(get(server.addr, "/v1/models").status, 200);
    assert!(server.log.lock().unwrap().iter().any(|l| l.contains("gpu:")), "the log names the fault");
    server.terminate();
}
