//! The server's own contracts over real sockets, against the real binary: routing (404 / 405),
//! the metrics routes and their formats, `--no-metrics`, the metrics token, rate limiting,
//! the cap on raw-path route labels, and graceful shutdown.

mod common;

use common::{get, request, Server};

fn start(extra: &[&str]) -> Server {
    let model = common::demo_model();
    let mut args = vec!["--model", model.to_str().unwrap(), "--threads", "1"];
    args.extend_from_slice(extra);
    Server::start(&args)
}

/// The value of one unlabelled or exactly-labelled sample in Prometheus text.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')).and_then(|v| v.trim().parse().ok())
    })
}

#[test]
fn routing_health_and_metrics_formats() {
    let s = start(&[]);
    let h = get(s.addr, "/health");
    assert_eq!(h.status, 200);
    let hj = h.json();
    assert_eq!(hj["status"], "ok");
    assert_eq!(hj["model"], "SmolLM2-135M-Instruct.Q4_1");
    assert!(hj["uptime_s"].as_f64().unwrap() >= 0.0);

    let nf = get(s.addr, "/nope/123");
    assert_eq!(nf.status, 404);
    assert_eq!(nf.json()["error"]["code"], "not_found");
    assert!(nf.json()["error"]["message"].as_str().unwrap().contains("/nope/123"));

    let na = request(s.addr, "DELETE", "/v1/models", &[], b"");
    assert_eq!(na.status, 405);
    assert_eq!(na.header("allow"), Some("GET, HEAD"));

    let prom = get(s.addr, "/metrics");
    assert_eq!(prom.status, 200);
    assert_eq!(prom.header("content-type"), Some("text/plain; version=0.0.4; charset=utf-8"));
    let text = prom.text();
    assert!(text.contains("# TYPE http_requests_total counter"));
    assert_eq!(sample(&text, r#"http_requests_total{method="GET",route="/health",status="200"}"#), Some(1.0), "{text}");
    assert_eq!(sample(&text, r#"http_requests_total{method="GET",route="/nope/123",status="404"}"#), Some(1.0));
    assert_eq!(sample(&text, r#"http_requests_total{method="DELETE",route="/v1/models",status="405"}"#), Some(1.0));
    assert!(
        !text.lines().any(|l| l.starts_with("http_requests_total{") && l.contains(r#"route="/metrics""#)),
        "/metrics must not count itself"
    );
    assert!(text.contains(r#"mtplx_build_info{version="0.1.0",backend="cpu",model="SmolLM2-135M-Instruct.Q4_1"} 1"#));

    let om = request(s.addr, "GET", "/metrics", &[("Accept", "application/openmetrics-text; version=1.0.0")], b"");
    assert!(om.header("content-type").unwrap().starts_with("application/openmetrics-text"));
    assert!(om.text().trim_end().ends_with("# EOF"));

    let js = request(s.addr, "GET", "/metrics", &[("Accept", "application/json")], b"");
    assert_eq!(js.status, 200);
    let v = js.json();
    assert!(v["latest"].is_null() && v["history"].as_array().unwrap().is_empty(), "{v}");

    let snap = get(s.addr, "/v1/mtplx/metrics?limit=5");
    assert_eq!(snap.status, 200);
    assert!(snap.json()["history"].is_array());
    let bad = get(s.addr, "/v1/mtplx/metrics?limit=x");
    assert_eq!((bad.status, bad.json()["error"]["param"].as_str()), (400, Some("limit")));

    let head = request(s.addr, "HEAD", "/health", &[], b"");
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
}

#[test]
fn raw_path_labels_are_capped() {
    let s = start(&[]);
    for i in 0..100 {
        assert_eq!(get(s.addr, &format!("/scan/{i}")).status, 404);
    }
    let text = get(s.addr, "/metrics").text();
    let raw_routes =
        text.lines().filter(|l| l.starts_with("http_requests_total{") && l.contains("route=\"/scan/")).count();
    assert!(raw_routes <= mtplx_lite::metrics::MAX_RAW_ROUTES, "{raw_routes} raw routes");
    let other = text
        .lines()
        .find(|l| l.starts_with("http_requests_total{") && l.contains(r#"route="other""#) && l.contains("404"))
        .expect("an 'other' series");
    let counted: f64 = other.rsplit(' ').next().unwrap().parse().unwrap();
    assert_eq!(raw_routes as f64 + counted, 100.0, "every request is counted once: {other}");
}

#[test]
fn no_metrics_withholds_all_three_routes() {
    let s = start(&["--no-metrics"]);
    for path in ["/metrics", "/v1/mtplx/metrics", "/v1/mtplx/metrics/stream"] {
        let r = get(s.addr, path);
        assert_eq!(r.status, 404, "{path}");
        assert!(!r.text().contains("http_requests_total"));
    }
    assert_eq!(get(s.addr, "/health").status, 200);
}

#[test]
fn metrics_token_guards_the_metrics_routes() {
    let dir = std::env::temp_dir().join(format!("mtplx-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("token");
    std::fs::write(&file, "s3cret-token\n").unwrap();
    let s = start(&["--metrics-token-file", file.to_str().unwrap()]);
    for path in ["/metrics", "/v1/mtplx/metrics", "/v1/mtplx/metrics/stream"] {
        let r = get(s.addr, path);
        assert_eq!(r.status, 401, "{path}");
        assert!(r.header("www-authenticate").unwrap().starts_with("Bearer"));
        assert!(!r.text().contains("http_requests_total"));
        let wrong = request(s.addr, "GET", path, &[("Authorization", "Bearer s3cret-tokeN")], b"");
        assert_eq!(wrong.status, 401, "{path}");
    }
    let ok = request(s.addr, "GET", "/metrics", &[("Authorization", "Bearer s3cret-token")], b"");
    assert_eq!(ok.status, 200);
    assert!(ok.text().contains("http_requests_total"));
    // Other routes are not guarded.
    assert_eq!(get(s.addr, "/health").status, 200);

    let env = Server::start_with_env(
        &["--model", common::demo_model().to_str().unwrap(), "--threads", "1"],
        &[("MTPLX_METRICS_TOKEN", "from-env")],
    );
    assert_eq!(get(env.addr, "/metrics").status, 401);
    assert_eq!(request(env.addr, "GET", "/metrics", &[("Authorization", "Bearer from-env")], b"").status, 200);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn rate_limit_answers_429_and_counts() {
    // Behind a trusted proxy, each X-Forwarded-For client has its own bucket; the scrape below
    // comes from the proxy itself (127.0.0.1), a client of its own.
    let s = start(&["--rate-limit-per-minute", "3", "--trusted-proxy", "127.0.0.1/32"]);
    // A malformed completion is refused (400) after the limiter counted it: it is a generation
    // route, and refusing costs nothing of the model.
    let as_client = |ip: &str| request(s.addr, "POST", "/v1/completions", &[("X-Forwarded-For", ip)], b"{}");
    let statuses: Vec<u16> = (0..5).map(|_| as_client("198.51.100.7").status).collect();
    assert_eq!(statuses, [400, 400, 400, 429, 429]);
    let limited = as_client("198.51.100.7");
    assert_eq!(limited.status, 429);
    assert_eq!(limited.json()["error"]["type"], "rate_limit_error");
    let retry: u64 = limited.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=20).contains(&retry), "{retry}");
    assert_eq!(as_client("198.51.100.8").status, 400, "another client has its own bucket");
    // Probes, scrapes and listings from a limited client are never limited, and never use up
    // its budget.
    for _ in 0..5 {
        for path in ["/health", "/metrics", "/v1/models"] {
            assert_eq!(request(s.addr, "GET", path, &[("X-Forwarded-For", "198.51.100.7")], b"").status, 200, "{path}");
        }
    }
    let text = get(s.addr, "/metrics").text();
    assert_eq!(sample(&text, r#"requests_per_ip_total{route="/v1/completions"}"#), Some(7.0), "{text}");
    assert_eq!(sample(&text, r#"rejected_requests_total{route="/v1/completions"}"#), Some(3.0), "{text}");
    assert_eq!(sample(&text, r#"http_requests_total{method="POST",route="/v1/completions",status="429"}"#), Some(3.0));
    assert_eq!(sample(&text, r#"requests_per_ip_total{route="/v1/models"}"#).unwrap_or(0.0), 0.0, "{text}");
    assert_eq!(sample(&text, r#"requests_per_ip_total{route="/health"}"#).unwrap_or(0.0), 0.0, "{text}");
    assert_eq!(sample(&text, r#"http_requests_total{method="GET",route="/health",status="200"}"#), Some(5.0));
}

#[test]
fn counters_read_zero_while_limiting_is_off() {
    let s = start(&[]);
    for _ in 0..3 {
        get(s.addr, "/health");
    }
    let text = get(s.addr, "/metrics").text();
    assert!(text.contains("# TYPE requests_per_ip_total counter"));
    assert!(!text.lines().any(|l| l.starts_with("requests_per_ip_total{") && !l.ends_with(" 0")), "{text}");
}

/// With no `--model`, the server takes the demo model from `$XDG_CACHE_HOME/mtplx-lite/`, the
/// one cache directory of the project, and not from `$HOME/.cache`.
#[test]
fn the_demo_model_is_found_under_xdg_cache_home() {
    let model = common::demo_model();
    let root = std::env::temp_dir().join(format!("mtplx-xdg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let (xdg, home) = (root.join("xdg"), root.join("home"));
    std::fs::create_dir_all(xdg.join("mtplx-lite")).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    std::os::unix::fs::symlink(&model, xdg.join("mtplx-lite").join(mtplx_lite::model::fetch::DEMO_FILE)).unwrap();
    // HOME holds no cache: only XDG_CACHE_HOME leads to the model without a download.
    let s = Server::start_with_env(
        &["--threads", "1"],
        &[("XDG_CACHE_HOME", xdg.to_str().unwrap()), ("HOME", home.to_str().unwrap())],
    );
    assert_eq!(get(s.addr, "/health").json()["model"], "SmolLM2-135M-Instruct.Q4_1");
    let log = s.log.lock().unwrap().join("\n");
    assert!(!log.contains("fetching"), "{log}");
    assert!(!home.join(".cache").exists(), "nothing was written under HOME");
    drop(s);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn sigterm_shuts_down_cleanly() {
    let s = start(&[]);
    assert_eq!(get(s.addr, "/health").status, 200);
    let status = s.terminate();
    assert!(status.success(), "exit status {status:?}");
}

/// Reads SSE events (id, data) from a stream until `n` data events have arrived.
fn read_events(r: &mut impl std::io::BufRead, n: usize) -> Vec<(u64, serde_json::Value)> {
    let mut out = Vec::new();
    let mut id = 0;
    let mut line = String::new();
    while out.len() < n {
        line.clear();
        if r.read_line(&mut line).expect("reading the stream (bounded by the socket's read timeout)") == 0 {
            break;
        }
        // Chunked framing: size lines are hex digits only; event lines have a field name.
        let l = line.trim_end();
        if let Some(v) = l.strip_prefix("id: ") {
            id = v.parse().unwrap();
        } else if let Some(v) = l.strip_prefix("data: ") {
            out.push((id, serde_json::from_str(v).unwrap()));
        }
    }
    out
}

#[test]
fn metrics_stream_replays_after_last_event_id_then_goes_live() {
    use std::io::{BufReader, Write};
    let s = start(&[]);
    let complete = || {
        common::post_json(
            s.addr,
            "/v1/completions",
            &serde_json::json!({"prompt": "Hello", "max_tokens": 2, "temperature": 0}),
        )
    };
    for _ in 0..3 {
        assert_eq!(complete().status, 200);
    }
    let mut sock = s.connect();
    sock.write_all(b"GET /v1/mtplx/metrics/stream HTTP/1.1\r\nHost: t\r\nLast-Event-ID: 1\r\n\r\n").unwrap();
    let mut r = BufReader::new(sock);
    let head = common::read_head(&mut r);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: text/event-stream"), "{head}");
    // Records 2 and 3 are replayed; the next request arrives live as record 4.
    let replayed = read_events(&mut r, 2);
    assert_eq!(replayed.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [2, 3]);
    assert_eq!(complete().status, 200);
    let live = read_events(&mut r, 1);
    assert_eq!(live[0].0, 4);
    let rec = &live[0].1;
    assert_eq!(rec["route"], "/v1/completions");
    assert_eq!(rec["completion_tokens"], 2);
    assert!(rec["tok_s"].as_f64().unwrap() > 0.0 && rec["accept_rate"].as_f64() == Some(0.0), "{rec}");
    assert!(rec["ttft_s"].as_f64().unwrap() <= rec["ttlt_s"].as_f64().unwrap());
}

#[test]
fn metrics_stream_batches_on_request_and_refuses_a_bad_batch() {
    use std::io::{BufReader, Write};
    let s = start(&[]);
    for bad in ["abc", "-1", "10001"] {
        let r = get(s.addr, &format!("/v1/mtplx/metrics/stream?batch_ms={bad}"));
        assert_eq!(r.status, 400, "batch_ms={bad}");
        assert!(r.text().contains("'batch_ms' must be an integer between 0 and 10000"), "{}", r.text());
    }
    let mut sock = s.connect();
    sock.write_all(b"GET /v1/mtplx/metrics/stream?batch_ms=300 HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    let mut r = BufReader::new(sock);
    let head = common::read_head(&mut r);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // Every record arrives, in order, whether it went out alone or with others.
    let body = serde_json::json!({"prompt": "Hello", "max_tokens": 2, "temperature": 0});
    for _ in 0..3 {
        assert_eq!(common::post_json(s.addr, "/v1/completions", &body).status, 200);
    }
    let ids: Vec<u64> = read_events(&mut r, 3).iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, [1, 2, 3]);
}

/// Longest wait for the server's state to settle after a client left; only a broken server
/// takes this long.
const SETTLE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

#[test]
fn the_json_envelope_carries_the_server_state_of_real_traffic() {
    use common::sse::Sse;
    use serde_json::{json, Value};
    let s = start(&["--rate-limit-per-minute", "3", "--trusted-proxy", "127.0.0.1/32"]);
    let state = || {
        let r = request(s.addr, "GET", "/metrics?limit=0", &[("Accept", "application/json")], b"");
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    };
    let idle = state();
    let srv = &idle["server"];
    assert_eq!((srv["requests_in_flight"].as_i64(), srv["requests_running"].as_i64()), (Some(0), Some(0)), "{srv}");
    let mut build = srv["build"].clone();
    let adapter = build.as_object_mut().unwrap().remove("adapter");
    assert_eq!(build, json!({"version": "0.1.0", "backend": "cpu", "model": "SmolLM2-135M-Instruct.Q4_1"}));
    assert!(adapter.and_then(|a| a.as_str().map(|a| a.starts_with("CPU at "))).unwrap_or(false), "{srv}");
    assert!(srv["uptime_s"].as_f64().unwrap() > 0.0, "{srv}");
    assert!(srv["kv_cache"]["capacity_bytes"].as_i64().unwrap() > 0, "{srv}");
    assert!(srv["kv_cache"]["capacity_tokens"].as_i64().unwrap() > 0, "{srv}");

    // Traffic: two health probes, a client over its rate limit, one whole completion.
    for _ in 0..2 {
        assert_eq!(get(s.addr, "/health").status, 200);
    }
    let statuses: Vec<u16> = (0..4)
        .map(|_| request(s.addr, "POST", "/v1/completions", &[("X-Forwarded-For", "198.51.100.7")], b"{}").status)
        .collect();
    assert_eq!(statuses, [400, 400, 400, 429]);
    let body = json!({"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4});
    assert_eq!(common::post_json(s.addr, "/v1/chat/completions", &body).status, 200);

    // A streamed answer under way: in flight, running, and holding part of the KV cache.
    let long = json!({"messages": [{"role": "user", "content": "Write a very long essay about the history of Rome."}],
        "max_tokens": 400, "stream": true});
    let mut sse = Sse::open(s.addr, "/v1/chat/completions", &long);
    assert_eq!(sse.status, 200);
    for _ in 0..3 {
        sse.next_data().expect("a chunk of the long answer");
    }
    let busy = state();
    let srv = &busy["server"];
    assert_eq!(srv["requests_in_flight"], 1, "the stream, not the scrape: {srv}");
    assert_eq!((srv["requests_running"].as_i64(), srv["requests_waiting"].as_i64()), (Some(1), Some(0)), "{srv}");
    let kv = &srv["kv_cache"];
    let (used, cap) = (kv["used_tokens"].as_i64().unwrap(), kv["capacity_tokens"].as_i64().unwrap());
    assert!(used > 10 && used <= cap, "{kv}");
    assert!(kv["used_bytes"].as_i64().unwrap() > 0 && kv["sequences"].as_i64().unwrap() >= 1, "{kv}");
    drop(sse);

    let deadline = std::time::Instant::now() + SETTLE_DEADLINE;
    let done = loop {
        let v = state();
        if v["server"]["requests_running"] == 0 && v["server"]["requests_in_flight"] == 0 {
            break v;
        }
        assert!(std::time::Instant::now() < deadline, "the stream never ended: {}", v["server"]);
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let srv = &done["server"];
    let count = |method: &str, route: &str, status: u64| {
        srv["requests"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["method"] == method && c["route"] == route && c["status"] == status)
            .map(|c| c["count"].as_u64().unwrap())
    };
    assert_eq!(count("GET", "/health", 200), Some(2), "{srv}");
    assert_eq!(count("POST", "/v1/completions", 400), Some(3), "{srv}");
    assert_eq!(count("POST", "/v1/completions", 429), Some(1), "{srv}");
    assert_eq!(count("POST", "/v1/chat/completions", 200), Some(2), "{srv}");
    assert_eq!(count("GET", "/metrics", 200), None, "/metrics does not count itself: {srv}");
    assert_eq!(srv["rate_limited_total"], 1, "{srv}");
    assert_eq!(srv["rate_limited"], json!([{"route": "/v1/completions", "count": 1}]));
    // `limit=0`: no history, but the newest record and the quantiles are there.
    assert_eq!(done["history"], json!([]));
    assert!(done["latest"]["request_id"].is_string(), "{}", done["latest"]);
    assert_eq!(done["quantiles"]["llm_time_to_first_token_seconds"]["count"], 2);

    // The text exposition shows the same KV gauges; the JSON routes the same state.
    let text = get(s.addr, "/metrics").text();
    let json_kv = &state()["server"]["kv_cache"];
    for (series, field) in [
        ("mtplx_kv_cache_used_bytes", "used_bytes"),
        ("mtplx_kv_cache_capacity_bytes", "capacity_bytes"),
        ("mtplx_kv_cache_used_tokens", "used_tokens"),
        ("mtplx_kv_cache_capacity_tokens", "capacity_tokens"),
        ("mtplx_kv_cache_sequences", "sequences"),
    ] {
        assert_eq!(sample(&text, series), json_kv[field].as_f64(), "{series} against {json_kv}");
    }
    let snap: Value = get(s.addr, "/v1/mtplx/metrics?limit=1").json();
    assert_eq!(snap["server"]["rate_limited_total"], 1);
    assert_eq!(snap["history"].as_array().unwrap().len(), 1);
}

/// The rate limiter counts what costs model time and refused keys, nothing else: the issue's
/// sequence (two 401s and a 200 on `/v1/models`) leaves the first chat completion its turn.
#[test]
fn listings_never_use_up_the_budget_and_refused_keys_do() {
    let model = common::demo_model();
    let args = ["--model", model.to_str().unwrap(), "--threads", "1", "--rate-limit-per-minute", "5"];
    let s = Server::start_with_env(&args, &[("MTPLX_API_KEY", "k")]);
    let auth = [("Authorization", "Bearer k"), ("Content-Type", "application/json")];
    for _ in 0..2 {
        assert_eq!(request(s.addr, "GET", "/v1/models", &[], b"").status, 401);
    }
    for _ in 0..3 {
        assert_eq!(request(s.addr, "GET", "/v1/models", &auth, b"").status, 200);
    }
    let chat = br#"{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}"#;
    assert_eq!(request(s.addr, "POST", "/v1/chat/completions", &auth, chat).status, 200);
    for _ in 0..2 {
        assert_eq!(request(s.addr, "POST", "/v1/completions", &auth, b"{}").status, 400);
    }
    let guess = request(s.addr, "GET", "/v1/models", &[("Authorization", "Bearer guess")], b"");
    assert_eq!(guess.status, 429, "5 counted: a further refused key is throttled: {}", guess.text());
    assert_eq!(request(s.addr, "GET", "/v1/models", &auth, b"").status, 200, "listings are never limited");
}

/// A full connection table does not fail the liveness probe: `/health` and the metrics scrapes
/// are answered on connections held in reserve; other routes get the 503 of a full table.
#[test]
fn a_full_connection_table_still_answers_the_probes() {
    let s = start(&["--max-connections", "8"]);
    let held: Vec<std::net::TcpStream> = (0..8).map(|_| s.connect()).collect();
    for path in ["/health", "/metrics", "/v1/mtplx/metrics"] {
        assert_eq!(get(s.addr, path).status, 200, "{path} with the table full");
    }
    let refused = get(s.addr, "/v1/models");
    assert_eq!((refused.status, refused.json()["error"]["code"].as_str()), (503, Some("too_many_connections")));
    drop(held);
}

/// Uptime counts from the server's own start, on `/health` and in the JSON snapshot (which the
/// dashboard shows) alike: not from the start of the process it replaced, as under `cargo run`,
/// which builds first and then `exec`s the server in its own process.
#[test]
fn uptime_counts_from_the_servers_own_start() {
    const BEFORE: &str = "3";
    let model = common::demo_model();
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", &format!("sleep {BEFORE}; exec \"$0\" \"$@\""), env!("CARGO_BIN_EXE_mtplx-lite")]).args([
        "--listen",
        "127.0.0.1:0",
        "--model",
        model.to_str().unwrap(),
        "--threads",
        "1",
    ]);
    let s = Server::start_command(cmd);
    let started = std::time::Instant::now();
    let health = get(s.addr, "/health").json()["uptime_s"].as_f64().unwrap();
    let snapshot = get(s.addr, "/v1/mtplx/metrics").json()["server"]["uptime_s"].as_f64().unwrap();
    let bound = 1.0 + started.elapsed().as_secs_f64();
    for (what, uptime) in [("/health", health), ("the snapshot", snapshot)] {
        assert!(uptime < bound, "{what}: {uptime} s up, {BEFORE} s of it before the server started");
    }
}
