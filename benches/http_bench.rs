//! `GET /health` over keep-alive with wrk (-t2 -c64), our server against a minimal hyper server
//! serving the same bytes, one after the other in one run; prints requests/s, p99 and ratios.
//!
//! Run: `cargo bench --bench http_bench` (needs `wrk` on PATH). `HTTP_BENCH_SECS` sets the
//! duration of each measurement (default 10).

use std::net::{SocketAddr, TcpListener};
use std::pin::Pin;
use std::process::Command;
use std::sync::Arc;

use mtplx_lite::http::{serve, Handler, HttpConfig, Request, Response, Shutdown};

const BODY: &[u8] = br#"{"status":"ok","version":"0.1.0","uptime_s":1}"#;

struct Health;

impl Handler for Health {
    fn handle(
        &self,
        req: Request,
    ) -> Pin<Box<dyn std::future::Future<Output = Response> + Send + '_>> {
        Box::pin(async move {
            match req.path.as_str() {
                "/health" => Response::new(200, "application/json", BODY),
                _ => Response::new(404, "text/plain", &b"not found"[..]),
            }
        })
    }
}

fn start_ours() -> (SocketAddr, Shutdown) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let s = shutdown.clone();
    std::thread::spawn(move || serve(listener, Arc::new(Health), HttpConfig::default(), s));
    (addr, shutdown)
}

/// hyper 1 on a current-thread tokio runtime: the same single I/O thread as ours by default.
fn start_hyper() -> SocketAddr {
    use http_body_util::Full;
    use hyper::service::service_fn;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let _ = stream.set_nodelay(true);
                tokio::spawn(async move {
                    let service = service_fn(|_req| async {
                        let resp = hyper::Response::builder()
                            .header("Content-Type", "application/json")
                            .body(Full::new(BODY))
                            .unwrap();
                        Ok::<_, std::convert::Infallible>(resp)
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                });
            }
        });
    });
    addr
}

struct Result {
    rps: f64,
    p99_ms: f64,
}

/// Runs wrk and reads requests/s and the 99th percentile latency from its `--latency` report.
fn wrk(addr: SocketAddr, secs: u32) -> Result {
    let url = format!("http://{addr}/health");
    let out = Command::new("wrk")
        .args(["-t2", "-c64", &format!("-d{secs}s"), "--latency", &url])
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
    Result { rps, p99_ms: p99 }
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

fn main() {
    // `cargo bench` passes `--bench`; nothing to filter here.
    let secs: u32 = std::env::var("HTTP_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let (ours, shutdown) = start_ours();
    let hyper = start_hyper();
    // Warm both up, then measure alternately so that machine noise hits both alike.
    wrk(ours, 1);
    wrk(hyper, 1);
    let a1 = wrk(ours, secs);
    let b1 = wrk(hyper, secs);
    let b2 = wrk(hyper, secs);
    let a2 = wrk(ours, secs);
    let ours_r = Result {
        rps: (a1.rps + a2.rps) / 2.0,
        p99_ms: (a1.p99_ms + a2.p99_ms) / 2.0,
    };
    let hyper_r = Result {
        rps: (b1.rps + b2.rps) / 2.0,
        p99_ms: (b1.p99_ms + b2.p99_ms) / 2.0,
    };
    println!("GET /health, wrk -t2 -c64 -d{secs}s x2 each, keep-alive");
    println!("{:<12} {:>12} {:>10}", "server", "requests/s", "p99 ms");
    println!(
        "{:<12} {:>12.0} {:>10.3}",
        "mtplx-lite", ours_r.rps, ours_r.p99_ms
    );
    println!(
        "{:<12} {:>12.0} {:>10.3}",
        "hyper", hyper_r.rps, hyper_r.p99_ms
    );
    println!(
        "throughput ratio (ours / hyper): {:.3}",
        ours_r.rps / hyper_r.rps
    );
    println!(
        "p99 ratio (ours / hyper, lower is better): {:.3}",
        ours_r.p99_ms / hyper_r.p99_ms
    );
    shutdown.trigger();
}
