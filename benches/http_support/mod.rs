//! What `http_bench` needs besides our server: the seeded `App`, the hyper contender, and wrk.

use std::net::{SocketAddr, TcpListener};
use std::process::Command;
use std::time::{Duration, Instant};

use mtplx_lite::api::app::App;
use mtplx_lite::api::state::ApiConfig;
use mtplx_lite::http::{Body, Handler, Request};
use mtplx_lite::metrics::{
    BuildInfo, FinishStatus, GenerationClock, GenerationOutcome, Metrics, SpecStats, PROMETHEUS_CONTENT_TYPE,
};

/// Finished generations recorded before the bench, so that every histogram has a spread.
const SEEDED_GENERATIONS: u64 = 500;
/// Requests counted per (route, method, status) combination seeded.
const SEEDED_REQUESTS: u64 = 1000;

/// An `App` without a model whose registry holds a realistic day of traffic, and the bytes its
/// `GET /metrics` answers right now (hyper serves those).
pub fn seeded_app() -> (App, Vec<u8>) {
    let m = Metrics::shared(1024, BuildInfo::current("cpu", "qwen3-0.6b"));
    m.set_model("qwen3-0.6b");
    let app = App::new(ApiConfig::new(), m.clone(), None);
    let traffic: [(&str, &str, &[u16]); 5] = [
        ("POST", "/v1/chat/completions", &[200, 400, 499, 503]),
        ("POST", "/v1/completions", &[200, 400]),
        ("GET", "/v1/models", &[200]),
        ("GET", "/health", &[200]),
        ("GET", "/v1/mtplx/metrics", &[200, 401]),
    ];
    for (k, (method, route, statuses)) in traffic.iter().enumerate() {
        let id = m.route_id(route);
        for &status in *statuses {
            for _ in 0..SEEDED_REQUESTS * (k as u64 + 1) {
                m.record_http(method, id, status);
            }
        }
    }
    m.record_http("GET", m.route_label("/favicon.ico"), 404);
    let chat = m.route_id("/v1/chat/completions");
    for _ in 0..17 {
        m.record_rate_limit_seen(chat);
    }
    m.record_rate_limited(chat);
    let t0 = Instant::now();
    for i in 0..SEEDED_GENERATIONS {
        let mut clock = GenerationClock::start_at(t0);
        let first = Duration::from_millis(20 + i % 300);
        let tokens = 10 + i % 200;
        for k in 0..tokens {
            clock.token_at(t0 + first + Duration::from_micros(k * (8_000 + 37 * (i % 50))), &m);
        }
        clock.finish_at(t0 + first + Duration::from_millis(tokens * 12));
        let status = [FinishStatus::Done, FinishStatus::Length, FinishStatus::Stop][i as usize % 3];
        let mut o =
            GenerationOutcome::new(format!("chatcmpl-{i}"), "/v1/chat/completions", "qwen3-0.6b", status, clock);
        o.prompt_tokens = 30 + i % 900;
        o.completion_tokens = tokens;
        o.question_chars = Some(120 + 7 * (i % 400));
        o.answer_chars = tokens * 4;
        o.spec = SpecStats {
            mtp_depth: 2,
            drafted_tokens: tokens,
            accepted_tokens: tokens * 2 / 3,
            verify_calls: tokens / 2,
            accepted_by_depth: vec![tokens / 2, tokens / 6],
            ..Default::default()
        };
        m.record_generation(o);
    }
    let req = Request {
        method: "GET".into(),
        path: "/metrics".into(),
        query: None,
        version: 1,
        headers: Vec::new(),
        body: Vec::new(),
        peer: "127.0.0.1:1".parse().unwrap(),
    };
    let resp = smol::block_on(app.handle(req));
    let Body::Full(copy) = resp.body else { panic!("/metrics answered a stream") };
    assert_eq!(resp.status, 200);
    (app, copy.to_vec())
}

/// hyper 1 on a current-thread tokio runtime: the same single I/O thread as ours by default.
/// Serves `/health` and `/metrics` from static bytes.
pub fn start_hyper(health: &'static [u8], metrics: Vec<u8>) -> SocketAddr {
    use http_body_util::Full;
    use hyper::body::Bytes;
    use hyper::service::service_fn;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let metrics = Bytes::from(metrics);
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let _ = stream.set_nodelay(true);
                let metrics = metrics.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req: hyper::Request<_>| {
                        let (ctype, body) = match req.uri().path() {
                            "/health" => ("application/json", Bytes::from_static(health)),
                            "/metrics" => (PROMETHEUS_CONTENT_TYPE, metrics.clone()),
                            _ => ("text/plain", Bytes::from_static(b"not found")),
                        };
                        let resp =
                            hyper::Response::builder().header("Content-Type", ctype).body(Full::new(body)).unwrap();
                        async { Ok::<_, std::convert::Infallible>(resp) }
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                });
            }
        });
    });
    addr
}

/// One wrk run.
#[derive(Clone, Debug)]
pub struct Sample {
    pub rps: f64,
    pub p99_ms: f64,
    /// The 1-minute load average when the run ended.
    pub load: String,
}

/// The three load averages, as `/proc/loadavg` gives them.
pub fn load_avg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Runs wrk and reads requests/s and the 99th percentile latency from its `--latency` report.
pub fn wrk(url: &str, secs: u32) -> Sample {
    let out = Command::new("wrk")
        .args(["-t2", "-c64", &format!("-d{secs}s"), "--latency", url])
        .output()
        .expect("wrk on PATH");
    let text = String::from_utf8_lossy(&out.stdout);
    let rps = text
        .lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Requests/sec in wrk output:\n{text}"));
    let p99 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("99%"))
        .map(|v| parse_latency(v.trim()))
        .unwrap_or_else(|| panic!("no 99% line in wrk output:\n{text}"));
    assert!(!text.contains("Non-2xx"), "errors in wrk output:\n{text}");
    if let Some(errors) = text.lines().find(|l| l.contains("Socket errors")) {
        println!("  wrk {url}: {}", errors.trim());
    }
    let load = load_avg().split(' ').next().unwrap_or("?").to_owned();
    Sample { rps, p99_ms: p99, load }
}

fn parse_latency(v: &str) -> f64 {
    let split = v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len());
    let (n, unit) = v.split_at(split);
    let n: f64 = n.parse().unwrap_or(f64::NAN);
    match unit {
        "us" => n / 1000.0,
        "ms" => n,
        "s" => n * 1000.0,
        _ => f64::NAN,
    }
}
