//! `GET /health` and `GET /metrics` over keep-alive with wrk (-t2 -c64), our server against a
//! minimal hyper server serving the same bytes; prints requests/s, p99 and ratios.
//!
//! `/metrics` on our side goes through the real `App` route: it samples `/proc/self` (at most
//! once a second), walks the registry's values and, as long as none changed, serves the text
//! cached at the last change (`src/metrics/render_cache.rs`); hyper serves a pre-rendered copy
//! of those bytes. Nothing changes between these requests (`/metrics` is not counted in
//! `http_requests_total`), so this measures the cached path; a render costs ~6 us more (see
//! `metrics_bench`). Ours is also measured on `/metrics-static` (the same copy, cloned into each
//! response), which compares the HTTP layers alone.
//!
//! Run: `cargo bench --bench http_bench` (needs `wrk` on PATH). `HTTP_BENCH_SECS` sets the
//! duration of each measurement (default 10), `HTTP_BENCH_ROUNDS` the rounds (default 3; each
//! round measures every contender once, in an order that alternates between rounds; the summary
//! gives the median of the rounds).
//! `HTTP_BENCH_SERVE=1` only starts the servers and prints their addresses, for profiling.

mod http_support;

use http_support::{load_avg, seeded_app, start_hyper, wrk, Sample};
use mtplx_lite::http::{serve, Handler, HttpConfig, Request, Response, Shutdown};
use mtplx_lite::metrics::PROMETHEUS_CONTENT_TYPE;
use std::net::{SocketAddr, TcpListener};
use std::pin::Pin;
use std::sync::Arc;

// Measured 2026-11-30 (UTC) on the 2-core dev machine, shared with other work; each full bench
// started when the other load was low, run load averages 1.6-2.6 (our 3 busy threads included).
// Two ABBA sets of full benches (3 rounds each), so 12 rounds per build; medians of the rounds,
// and the median of the per-round ratios to hyper measured next to it:
//
// | build                         | route           | ours req/s | ours p99 | vs hyper req/s | p99   |
// |-------------------------------|-----------------|-----------:|---------:|---------------:|------:|
// | before (server of 23ee371)    | /health         |      80148 |  7.06 ms |          1.093 | 1.326 |
// | before                        | /metrics static |      61842 |  6.80 ms |          0.986 | 1.316 |
// | before                        | /metrics render |       8612 | 17.27 ms |          0.143 | 3.484 |
// | after (server of d0c96f7)     | /health         |      86988 |  4.24 ms |          1.079 | 0.918 |
// | after                         | /metrics static |      63452 |  4.51 ms |          1.021 | 0.966 |
// | after                         | /metrics render |       8498 | 14.01 ms |          0.141 | 2.707 |
//
// hyper medians: /health 76471-80200 req/s, 4.42-4.78 ms; /metrics 61159-64050 req/s, 4.67-4.69 ms.
// Rendering costs ~120 us a request, over half of it reading /proc/self (the fd count alone 27%),
// so 64 connections queue ~8 ms behind it; at load 3.4-6 its p99 was 121-566 ms without the turns
// and 11-26 ms with them. Single full benches vary: one run's ratios moved by up to 0.3 either way.
//
// 2026-11-30, main, HTTP_BENCH_ROUNDS=3 HTTP_BENCH_SECS=8, medians of 3 rounds, load ~2:
// | build                                        | route           | ours req/s | ours p99 | vs hyper req/s | p99   |
// |----------------------------------------------|-----------------|-----------:|---------:|---------------:|------:|
// | turns merged (e17aee1)                       | /metrics render |      22761 |  6.22 ms |          0.331 | 1.357 |
// |  + /proc/self/stat only, fds once a second   |                 |            |          |                |       |
// | + process series once a second, text cached  | /metrics        |      59734 |  3.95 ms |          0.915 | 0.747 |
// | + cached text shared, not copied (Bytes)     | /metrics        |      65189 |  4.43 ms |          1.092 | 0.807 |
// | same run                                     | /health         |      91620 |  4.18 ms |          1.147 | 0.944 |

const HEALTH_BODY: &[u8] = br#"{"status":"ok","version":"0.1.0","uptime_s":1}"#;

/// Static `/health` like before, the real `App` for `/metrics`, and the pre-rendered copy.
struct Bench {
    app: mtplx_lite::api::app::App,
    metrics_copy: Vec<u8>,
}

impl Handler for Bench {
    fn handle(&self, req: Request) -> Pin<Box<dyn std::future::Future<Output = Response> + Send + '_>> {
        Box::pin(async move {
            match req.path.as_str() {
                "/health" => Response::new(200, "application/json", HEALTH_BODY),
                "/metrics-static" => Response::new(200, PROMETHEUS_CONTENT_TYPE, self.metrics_copy.clone()),
                _ => self.app.handle(req).await,
            }
        })
    }
}

fn start_ours(handler: Arc<Bench>) -> (SocketAddr, Shutdown) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let s = shutdown.clone();
    std::thread::spawn(move || serve(listener, handler, HttpConfig::default(), s));
    (addr, shutdown)
}

/// Medians of one contender's runs: on a shared machine one run now and then is disturbed by
/// other work, which a mean would carry into the result.
fn median(runs: &[Sample]) -> (f64, f64) {
    let mid = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    };
    (mid(runs.iter().map(|r| r.rps).collect()), mid(runs.iter().map(|r| r.p99_ms).collect()))
}

/// Measures each contender `rounds` times, reversing the order every other round so that
/// machine noise hits all alike, then prints every run and the medians.
fn compare(title: &str, contenders: &[(&str, String)], secs: u32, rounds: u32) -> Vec<(f64, f64)> {
    for (_, url) in contenders {
        wrk(url, 1); // warm-up
    }
    let mut runs: Vec<Vec<Sample>> = vec![Vec::new(); contenders.len()];
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..contenders.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let s = wrk(&contenders[i].1, secs);
            println!(
                "  round {round} {:<22} {:>9.0} req/s  p99 {:>8.3} ms  load {}",
                contenders[i].0, s.rps, s.p99_ms, s.load
            );
            runs[i].push(s);
        }
    }
    println!("{title}, wrk -t2 -c64 -d{secs}s x{rounds} each, keep-alive");
    println!("{:<24} {:>12} {:>10}  (medians)", "server", "requests/s", "p99 ms");
    let medians: Vec<(f64, f64)> = runs.iter().map(|r| median(r)).collect();
    for ((name, _), (rps, p99)) in contenders.iter().zip(&medians) {
        println!("{name:<24} {rps:>12.0} {p99:>10.3}");
    }
    medians
}

fn ratios(what: &str, ours: (f64, f64), hyper: (f64, f64)) {
    println!(
        "{what}: throughput ratio (ours / hyper) {:.3}, p99 ratio (lower is better) {:.3}",
        ours.0 / hyper.0,
        ours.1 / hyper.1
    );
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to filter here.
    let env = |k: &str, d: u32| std::env::var(k).ok().and_then(|s| s.parse().ok()).unwrap_or(d);
    let (secs, rounds) = (env("HTTP_BENCH_SECS", 10), env("HTTP_BENCH_ROUNDS", 3).max(1));
    let (app, metrics_copy) = seeded_app();
    let bench = Arc::new(Bench { app, metrics_copy: metrics_copy.clone() });
    let (ours, shutdown) = start_ours(bench);
    let hyper = start_hyper(HEALTH_BODY, metrics_copy.clone());
    if std::env::var_os("HTTP_BENCH_SERVE").is_some() {
        println!("ours http://{ours}  hyper http://{hyper}  (Ctrl-C to stop)");
        loop {
            std::thread::park();
        }
    }
    println!("load average at start: {}", load_avg());

    let u = |a: SocketAddr, p: &str| format!("http://{a}{p}");
    let health =
        compare("GET /health", &[("mtplx-lite", u(ours, "/health")), ("hyper", u(hyper, "/health"))], secs, rounds);
    println!();
    println!(
        "/metrics body: {} bytes of Prometheus text; hyper serves it pre-rendered, \
         mtplx-lite through its route (cached text while no value changes; /metrics-static serves the copy)",
        metrics_copy.len()
    );
    let metrics = compare(
        "GET /metrics",
        &[
            ("mtplx-lite (route)", u(ours, "/metrics")),
            ("mtplx-lite (static)", u(ours, "/metrics-static")),
            ("hyper (static)", u(hyper, "/metrics")),
        ],
        secs,
        rounds,
    );
    println!();
    ratios("GET /health", health[0], health[1]);
    ratios("GET /metrics, ours through the route", metrics[0], metrics[2]);
    ratios("GET /metrics, both static", metrics[1], metrics[2]);
    println!("load average at end: {}", load_avg());
    shutdown.trigger();
}
