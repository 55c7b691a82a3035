//! A real Prometheus server (Debian's `prometheus`) scrapes the real binary during a short load,
//! and the dashboard queries `docs/metrics.md` gives answer with real values through
//! Prometheus's HTTP API; under both `--metrics-format` settings, since Prometheus names the
//! text formats in its `Accept` header. Also the metrics guide's `curl -sf .../metrics` under both.

mod common;

use common::{demo_model, get, output_within, post_json, Server, CHILD_DEADLINE};
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
        // One per scraped server: the tests of this file run side by side.
        let dir = std::env::temp_dir().join(format!("mtplx-prom-{}-{}", std::process::id(), target.port()));
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
        // The whole answer first (the request asked to close): a Prometheus still starting may
        // accept and then reset the connection, which is a retry here, not a failure.
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut s, &mut raw).ok()?;
        if !raw.starts_with(b"HTTP/1.1 ") {
            return None;
        }
        let resp = common::read_response(&mut raw.as_slice(), false);
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

fn start(extra: &[&str]) -> Server {
    let model = demo_model();
    let mut args = vec!["--model", model.to_str().unwrap(), "--threads", "1"];
    args.extend_from_slice(extra);
    Server::start(&args)
}

#[test]
fn prometheus_scrapes_and_answers_the_dashboard_queries() {
    scrape_under_load(&start(&[]));
}

/// `--metrics-format json` changes what `/metrics` serves to a client that names no format;
/// Prometheus names the text formats, so it keeps scraping.
#[test]
fn prometheus_scrapes_under_metrics_format_json() {
    scrape_under_load(&start(&["--metrics-format", "json"]));
}

fn scrape_under_load(server: &Server) {
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

/// The metrics guide's command, `curl -sf http://127.0.0.1:8100/metrics | head -20`, on the
/// test server: what curl's `Accept: */*` gets under each setting, and the text format it still
/// gets under `json` by naming it.
#[test]
fn the_guides_curl_command_under_both_metrics_formats() {
    let curl = |s: &Server, extra: &[&str]| {
        let out = output_within(
            Command::new("curl").args(["-sf", &format!("http://{}/metrics", s.addr)]).args(extra),
            CHILD_DEADLINE,
            "curl",
        );
        assert!(out.status.success(), "curl -sf failed: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let is_text_exposition = |body: &str| {
        let head: Vec<&str> = body.lines().take(20).collect();
        head.len() == 20
            && head.iter().any(|l| l.starts_with("# TYPE "))
            && head
                .iter()
                .all(|l| l.starts_with("# ") || l.split_whitespace().nth(1).is_some_and(|v| v.parse::<f64>().is_ok()))
    };
    let prometheus = start(&[]);
    let body = curl(&prometheus, &[]);
    assert!(is_text_exposition(&body), "the default is the text exposition:\n{body}");

    let json = start(&["--metrics-format", "json"]);
    let body = curl(&json, &[]);
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("not the JSON envelope ({e}): {body}"));
    assert!(v["history"].is_array() && v.get("latest").is_some(), "{v}");
    let body = curl(&json, &["-H", "Accept: text/plain"]);
    assert!(is_text_exposition(&body), "a named text format wins over the setting:\n{body}");
}
