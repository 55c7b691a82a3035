//! A real Prometheus server (Debian's `prometheus`) scrapes the real binary during a short load,
//! and the dashboard queries `docs/metrics.md` gives answer with real values through
//! Prometheus's HTTP API.

mod common;

use common::{demo_model, get, post_json, Server};
use serde_json::{json, Value};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the load runs: several 1 s scrapes, so that `rate(...[1m])` has points to use.
const LOAD: Duration = Duration::from_secs(10);
/// Bound on the wait for Prometheus to start and for each query to answer.
const DEADLINE: Duration = Duration::from_secs(60);
/// The dashboard queries of `docs/metrics.md` ("Examples").
const QUERIES: [&str; 3] = [
    "sum(rate(http_requests_total[1m]))",
    "histogram_quantile(0.9, sum(rate(llm_time_to_first_token_seconds_bucket[1m])) by (le))",
    "sum(rate(llm_answer_length_chars_sum[1m])) / sum(rate(llm_answer_length_chars_count[1m]))",
];

/// Prometheus, killed (and its temp dir removed) when the test ends however it ends.
struct Prometheus {
    child: Child,
    dir: PathBuf,
    addr: SocketAddr,
}

impl Prometheus {
    fn start(target: SocketAddr) -> Prometheus {
        let dir = std::env::temp_dir().join(format!("mtplx-prom-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        std::fs::write(
            dir.join("prometheus.yml"),
            format!("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: mtplx\n    static_configs:\n      - targets: ['{target}']\n"),
        )
        .unwrap();
        // A free port: bind :0, read it, release it for Prometheus.
        let addr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .expect("start prometheus (Debian package `prometheus`; tests/setup.sh installs it)");
        Prometheus { child, dir, addr }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    fn query(&self, q: &str) -> Option<Value> {
        let path = format!("/api/v1/query?query={}", encode(q));
        let mut s = std::net::TcpStream::connect(self.addr).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        use std::io::Write;
        write!(s, "GET {path} HTTP/1.1\r\nHost: prom\r\nConnection: close\r\n\r\n").ok()?;
        let resp = common::read_response(&mut std::io::BufReader::new(s), false);
        (resp.status == 200).then(|| resp.json())
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Percent-encoding of a query-string value (RFC 3986 §2.1: all but unreserved characters).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The single value of an instant-vector answer, if there is exactly one sample.
fn scalar(v: &Value) -> Option<f64> {
    let result = v["data"]["result"].as_array()?;
    if v["data"]["resultType"] != "vector" || result.len() != 1 {
        return None;
    }
    result[0]["value"][1].as_str()?.parse().ok()
}

#[test]
fn prometheus_scrapes_and_answers_the_dashboard_queries() {
    let model = demo_model();
    let server = Server::start(&["--model", model.to_str().unwrap(), "--threads", "1"]);
    let prom = Prometheus::start(server.addr);

    // Prometheus is up and scraping us.
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = prom.query("up{job=\"mtplx\"}") {
            if scalar(&v) == Some(1.0) {
                break;
            }
        }
        assert!(Instant::now() < deadline, "prometheus never scraped the server:\n{}", prom.log());
        std::thread::sleep(Duration::from_millis(200));
    }

    // A short load from a few threads: chats of a few tokens, plus some cheap requests.
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..3)
        .map(|i| {
            let (stop, done, addr) = (stop.clone(), done.clone(), server.addr);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let r = post_json(addr, "/v1/chat/completions", &json!({"messages": [{"role": "user", "content": format!("Say something about the number {i}.")}], "max_tokens": 6}));
                    assert_eq!(r.status, 200, "{}", r.text());
                    assert_eq!(get(addr, "/v1/models").status, 200);
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(LOAD);
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    assert!(done.load(Ordering::Relaxed) >= 3, "the load produced chats");

    for q in QUERIES {
        let deadline = Instant::now() + DEADLINE;
        let value = loop {
            let v = prom.query(q);
            if let Some(x) = v.as_ref().and_then(scalar) {
                if x.is_finite() && x > 0.0 {
                    break x;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{q} never gave a finite positive value; last answer {v:?}\n{}",
                prom.log()
            );
            std::thread::sleep(Duration::from_millis(500));
        };
        eprintln!("{q} = {value}");
    }
    // The answer length query is a mean of real answers, each at least one character long.
    let mean_len = scalar(&prom.query(QUERIES[2]).unwrap()).unwrap();
    assert!(mean_len >= 1.0, "{mean_len}");
}
