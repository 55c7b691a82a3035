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
