//! Admission and the first minutes of a new user, over real sockets against the real binary:
//! the API key, CORS, `/v1/models/{id}`, `--metrics-format`, the KV budget as the context,
//! `--listen` host names, `--version`, the `MTPLX_ISA` cap, errors that point the right way, and a shutdown that
//! ends open streams visibly.

mod common;

use common::{get, post_json, request, Server};
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::process::Command;

fn model_args() -> Vec<String> {
    vec!["--model".into(), common::demo_model().to_str().unwrap().into(), "--threads".into(), "1".into()]
}

fn start(extra: &[&str]) -> Server {
    let mut args = model_args();
    args.extend(extra.iter().map(|s| s.to_string()));
    Server::start(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mtplx-lite"))
}

fn temp_file(name: &str, content: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("mtplx-admission-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, content).unwrap();
    p
}

#[test]
fn the_api_key_guards_the_generation_routes_only() {
    let key = temp_file("api-key", "k3y-secret\n");
    let s = start(&["--api-key-file", key.to_str().unwrap()]);
    let body = br#"{"prompt":"Hi","max_tokens":1}"#;
    for (method, path) in
        [("GET", "/v1/models"), ("GET", "/v1/models/x"), ("POST", "/v1/completions"), ("POST", "/v1/chat/completions")]
    {
        let r = request(s.addr, method, path, &[("Content-Type", "application/json")], body);
        assert_eq!(r.status, 401, "{path}");
        let e = r.json();
        assert_eq!(
            (e["error"]["type"].as_str(), e["error"]["code"].as_str()),
            (Some("authentication_error"), Some("invalid_api_key")),
            "{e}"
        );
        assert!(r.header("www-authenticate").unwrap().starts_with("Bearer"));
        let wrong = request(s.addr, method, path, &[("Authorization", "Bearer k3y-secreT")], body);
        assert_eq!(wrong.status, 401, "{path}");
    }
    let ok = request(
        s.addr,
        "POST",
        "/v1/completions",
        &[("Authorization", "Bearer k3y-secret"), ("Content-Type", "application/json")],
        body,
    );
    assert_eq!(ok.status, 200, "{}", ok.text());
    // Probes and the metrics routes are not guarded by the API key.
    assert_eq!(get(s.addr, "/health").status, 200);
    let text = get(s.addr, "/metrics").text();
    // Refusals are counted under the route's template, like every other request.
    assert!(
        text.contains(r#"http_requests_total{method="GET",route="/v1/models/{model_id}",status="401"} 2"#),
        "{text}"
    );
    assert!(text.contains(r#"http_requests_total{method="POST",route="/v1/completions",status="401"} 2"#), "{text}");

    let env = Server::start_with_env(
        &model_args().iter().map(String::as_str).collect::<Vec<_>>(),
        &[("MTPLX_API_KEY", "from-env")],
    );
    assert_eq!(get(env.addr, "/v1/models").status, 401);
    assert_eq!(request(env.addr, "GET", "/v1/models", &[("Authorization", "Bearer from-env")], b"").status, 200);
}

#[test]
fn a_public_address_without_an_api_key_is_refused_before_anything_loads() {
    let out = bin()
        .args(["--listen", "0.0.0.0:0", "--model", "/nonexistent/model.gguf"])
        .env_remove("MTPLX_API_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    // The message says how to set a key, both ways, and how to say that none is meant.
    for how in ["--api-key-file", "MTPLX_API_KEY", "--allow-no-api-key"] {
        assert!(err.contains(how), "the refusal does not mention {how}: {err}");
    }
}

/// `--allow-no-api-key` says that an open public address is meant: the server starts on
/// 0.0.0.0 and serves the generation routes without a key.
#[test]
fn a_public_address_without_an_api_key_starts_when_allowed() {
    let mut args = model_args();
    args.push("--allow-no-api-key".into());
    let s = Server::start_on("0.0.0.0:0", &args.iter().map(String::as_str).collect::<Vec<_>>(), &[]);
    assert!(s.addr.ip().is_unspecified(), "listening on {}", s.addr);
    let local = std::net::SocketAddr::from(([127, 0, 0, 1], s.addr.port()));
    assert_eq!(get(local, "/health").status, 200);
    assert_eq!(get(local, "/v1/models").status, 200, "no key guards /v1/ when none is set");
}

/// `MTPLX_ISA` lowers the kernels' level: a name that is no level is refused at start, naming
/// the variable and the levels; a valid one is the level the benchmark reports running at.
#[test]
fn the_instruction_set_cap_is_checked_at_start_and_obeyed() {
    let out = bin().args(["--model", "/nonexistent/model.gguf"]).env("MTPLX_ISA", "avx9").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("MTPLX_ISA=avx9") && err.contains("avx512vnni"), "{err}");

    let out = bin()
        .args(model_args())
        .args(["bench", "--rows", "1", "--reps", "1"])
        .env("MTPLX_ISA", "scalar")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("kernels at scalar"), "{text}");
}

/// `bench --rows --context N` measures its passes after N cached positions, and refuses a
/// context the model does not have.
#[test]
fn the_row_benchmark_takes_the_context_it_is_given_within_the_models() {
    let run = |context: &str| {
        bin().args(model_args()).args(["bench", "--rows", "1,2", "--reps", "1", "--context", context]).output().unwrap()
    };
    let out = run("300");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("after 300 cached positions") && text.contains("| 2 |"), "{text}");
    let out = run("8191");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--context 8191") && err.contains("8193 positions") && err.contains("context of 8192"),
        "{err}"
    );
}

#[test]
fn a_busy_port_is_reported_before_the_model_loads() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    // The model path does not exist: had the server loaded first, it would complain about that.
    let out = bin().args(["--listen", &addr, "--model", "/nonexistent/model.gguf"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot listen on") && !err.contains("nonexistent"), "{err}");
}

#[test]
fn version_and_host_names() {
    for flag in ["--version", "-V"] {
        let out = bin().arg(flag).output().unwrap();
        assert!(out.status.success(), "{flag}: {}", String::from_utf8_lossy(&out.stderr));
        let want = format!("mtplx-lite {}", env!("CARGO_PKG_VERSION"));
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), want, "{flag}");
    }
    // `-h` is `--help`, as users type it, also after a subcommand.
    for args in [&["--help"][..], &["-h"], &["bench", "-h"]] {
        let out = bin().args(args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains("Usage: mtplx-lite"), "{args:?}: {text}");
    }
    let mut args = model_args();
    args.extend(["--listen".to_string(), "localhost:0".to_string()]);
    let mut child =
        bin().args(&args).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let addr: std::net::SocketAddr = line.trim().strip_prefix("listening on http://").expect(&line).parse().unwrap();
    assert!(addr.ip().is_loopback(), "{addr}");
}

#[test]
fn cors_preflight_and_responses_for_allowed_origins_only() {
    let s = start(&["--cors-allow-origin", "https://app.example"]);
    let pre = request(
        s.addr,
        "OPTIONS",
        "/v1/chat/completions",
        &[
            ("Origin", "https://app.example"),
            ("Access-Control-Request-Method", "POST"),
            ("Access-Control-Request-Headers", "authorization, content-type"),
        ],
        b"",
    );
    assert_eq!(pre.status, 204);
    assert_eq!(pre.header("access-control-allow-origin"), Some("https://app.example"));
    assert_eq!(pre.header("access-control-allow-methods"), Some("POST"));
    let allowed = pre.header("access-control-allow-headers").unwrap().to_ascii_lowercase();
    assert!(allowed.contains("authorization") && allowed.contains("content-type"), "{allowed}");
    let r = request(s.addr, "GET", "/v1/models", &[("Origin", "https://app.example")], b"");
    assert_eq!(r.header("access-control-allow-origin"), Some("https://app.example"));
    assert_eq!(r.header("vary"), Some("Origin"));
    let other = request(s.addr, "GET", "/v1/models", &[("Origin", "https://evil.example")], b"");
    assert_eq!((other.status, other.header("access-control-allow-origin")), (200, None));
    let other_pre = request(
        s.addr,
        "OPTIONS",
        "/v1/models",
        &[("Origin", "https://evil.example"), ("Access-Control-Request-Method", "GET")],
        b"",
    );
    assert_eq!(other_pre.header("access-control-allow-origin"), None);

    // Off by default: no CORS header, and OPTIONS is an ordinary 405.
    let off = start(&[]);
    let r = request(
        off.addr,
        "OPTIONS",
        "/v1/models",
        &[("Origin", "https://app.example"), ("Access-Control-Request-Method", "GET")],
        b"",
    );
    assert_eq!((r.status, r.header("access-control-allow-origin")), (405, None));
}

#[test]
fn a_model_by_id_and_the_metrics_format_setting() {
    let s = start(&["--metrics-format", "json"]);
    let list = get(s.addr, "/v1/models").json();
    let id = list["data"][0]["id"].as_str().unwrap().to_string();
    let one = get(s.addr, &format!("/v1/models/{id}"));
    assert_eq!(one.status, 200);
    assert_eq!(one.json(), list["data"][0]);
    let missing = get(s.addr, "/v1/models/gpt-4");
    assert_eq!((missing.status, missing.json()["error"]["code"].as_str()), (404, Some("model_not_found")));

    // What curl and requests send names no format: the setting decides. Named formats win.
    let plain = request(s.addr, "GET", "/metrics", &[("Accept", "*/*")], b"");
    assert_eq!(plain.header("content-type"), Some("application/json"));
    assert!(plain.json()["history"].is_array());
    let prom = request(s.addr, "GET", "/metrics", &[("Accept", "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")], b"");
    assert!(prom.header("content-type").unwrap().starts_with("text/plain"));
    let default = start(&[]);
    assert!(request(default.addr, "GET", "/metrics", &[("Accept", "*/*")], b"")
        .header("content-type")
        .unwrap()
        .starts_with("text/plain"));
}

#[test]
fn a_small_kv_budget_is_the_context_a_request_may_use() {
    // 4 MiB hold 91 positions of the demo model (30 layers x 2 x 192 floats).
    let s = start(&["--kv-cache-bytes", "4194304"]);
    let ctx = get(s.addr, "/v1/models").json()["data"][0]["context_length"].as_u64().unwrap();
    assert!(ctx < 8192 && ctx > 16, "context_length {ctx}");
    // No max_tokens: the default fits the budget, and the request runs.
    let ok = post_json(s.addr, "/v1/completions", &json!({"prompt": "Once upon a time", "temperature": 0}));
    assert_eq!(ok.status, 200, "{}", ok.text());
    // Never fits: 400 with the real limit, not a 500.
    let over = post_json(s.addr, "/v1/completions", &json!({"prompt": "Once upon a time", "max_tokens": ctx}));
    assert_eq!(over.status, 400, "{}", over.text());
    let e = over.json();
    assert_eq!(
        (e["error"]["code"].as_str(), e["error"]["param"].as_str()),
        (Some("context_length_exceeded"), Some("max_tokens"))
    );
    assert!(e["error"]["message"].as_str().unwrap().contains(&ctx.to_string()), "{e}");
    // A prompt too long by itself names the prompt, whatever max_tokens says.
    let long = "word ".repeat(ctx as usize * 2);
    let e = post_json(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": long}], "max_tokens": 1}),
    )
    .json();
    assert_eq!(
        (e["error"]["code"].as_str(), e["error"]["param"].as_str()),
        (Some("context_length_exceeded"), Some("messages")),
        "{e}"
    );
    let text = get(s.addr, "/metrics").text();
    assert!(
        !text.lines().any(|l| l.starts_with("http_request_errors_total{") && !l.ends_with(" 0")),
        "no server errors: {text}"
    );
}

#[test]
fn shutdown_ends_open_streams_with_an_error_chunk_and_done() {
    let s = start(&["--shutdown-grace", "1.5"]);
    let mut sock = s.connect();
    // Counting goes on for far longer than the grace period.
    let body =
        json!({"prompt": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,", "max_tokens": 4000, "stream": true, "temperature": 0})
            .to_string();
    write!(sock, "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len()).unwrap();
    let mut r = BufReader::new(sock);
    let head = common::read_head(&mut r);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // Tokens flow; then the server is told to stop.
    let mut line = String::new();
    while !line.starts_with("data: ") {
        line.clear();
        assert!(r.read_line(&mut line).unwrap() > 0, "stream ended before any token");
    }
    let _ = Command::new("kill").args(["-INT", &s.child.id().to_string()]).status();
    let mut events = Vec::new();
    loop {
        line.clear();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        if let Some(d) = line.trim_end().strip_prefix("data: ") {
            events.push(d.to_string());
        }
    }
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{events:?}");
    let last: serde_json::Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "error", "{last}");
    assert_eq!(last["error"]["code"], "server_shutdown", "{last}");
    assert_eq!(last["mtplx_stats"]["status"], "interrupted", "{last}");
    let log = s.log.lock().unwrap().join("\n");
    assert!(log.contains("shutting down: waiting up to") && log.contains("Ctrl-C again"), "{log}");
}
