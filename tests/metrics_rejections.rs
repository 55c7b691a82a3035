//! Requests the HTTP layer answers itself (413 for a body over the limit, 431 for an oversized
//! head, 500 after a handler panic) reach the handler only through `Handler::on_rejected`; here
//! they are followed from the socket to the exposition: each is counted once in
//! `http_requests_total` under its method, route and status, and the 500 also in
//! `http_request_errors_total`.

mod common;

use std::future::Future;
use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use mtplx_lite::api::app::App;
use mtplx_lite::api::state::ApiConfig;
use mtplx_lite::http::{serve, Handler, HttpConfig, Rejected, Request, Response, Shutdown};
use mtplx_lite::metrics::{BuildInfo, Metrics};

/// A body this much over the 4 MiB default of `--max-body-bytes`.
const TOO_LONG_BODY: u64 = 4 * 1024 * 1024 + 1;
/// A header field of 32 KiB: over any head limit an HTTP server sets (ours is 16 KiB).
const HUGE_HEADER_BYTES: usize = 32 * 1024;

/// The value of one exactly-labelled sample in Prometheus text.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The `http_requests_total` samples of one status, summed over method and route: a head too
/// large to parse has no method or path the HTTP layer vouches for (today it reports neither,
/// and the request counts as `method="other",route="other"`), so only the count is fixed.
fn total_with_status(text: &str, status: u16) -> f64 {
    let end_of_labels = format!(",status=\"{status}\"}} ");
    text.lines()
        .filter(|l| l.starts_with("http_requests_total{"))
        .filter_map(|l| l.split_once(&end_of_labels))
        .map(|(_, v)| v.trim().parse::<f64>().unwrap())
        .sum()
}

/// Sends raw bytes on a fresh connection and reads the one response.
fn raw(addr: SocketAddr, bytes: &[u8]) -> common::Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    // The server may answer and close before it has read everything: a failed write is fine.
    let _ = s.write_all(bytes);
    common::read_response(&mut BufReader::new(s), false)
}

fn oversized_body(addr: SocketAddr) -> common::Resp {
    let head = format!("POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {TOO_LONG_BODY}\r\n\r\n");
    raw(addr, head.as_bytes())
}

fn oversized_head(addr: SocketAddr) -> common::Resp {
    let head = format!("GET /health HTTP/1.1\r\nHost: t\r\nX-Padding: {}\r\n\r\n", "a".repeat(HUGE_HEADER_BYTES));
    raw(addr, head.as_bytes())
}

/// The real binary: 413 and 431 are counted like every other answer.
#[test]
fn the_server_counts_413_and_431_in_http_requests_total() {
    let model = common::demo_model();
    let s = common::Server::start(&["--model", model.to_str().unwrap(), "--threads", "1"]);
    assert_eq!(oversized_body(s.addr).status, 413);
    assert_eq!(oversized_head(s.addr).status, 431);
    let text = common::get(s.addr, "/metrics").text();
    assert_eq!(
        sample(&text, r#"http_requests_total{method="POST",route="/v1/chat/completions",status="413"}"#),
        Some(1.0),
        "{text}"
    );
    assert_eq!(total_with_status(&text, 431), 1.0, "{text}");
    assert!(
        !text.lines().any(|l| l.starts_with("http_request_errors_total{") && !l.ends_with(" 0")),
        "a 4xx is not an error: {text}"
    );
}

/// The application, with a handler that panics on one route: a real handler panic cannot be
/// provoked from outside, so this one is planted in front of it. Everything else, the
/// rejections included, goes to the application as the binary wires it.
struct PanicsOnChat(App);

impl Handler for PanicsOnChat {
    fn handle(&self, req: Request) -> Pin<Box<dyn Future<Output = Response> + Send + '_>> {
        if req.method == "POST" && req.path == "/v1/chat/completions" {
            return Box::pin(async { panic!("a handler panics on purpose") });
        }
        self.0.handle(req)
    }

    fn rejection(&self, rejected: &Rejected<'_>) -> Response {
        self.0.rejection(rejected)
    }

    fn on_rejected(&self, rejected: &Rejected<'_>) {
        self.0.on_rejected(rejected)
    }
}

/// The application behind the real HTTP server, in this process: a handler panic's 500 is
/// counted in `http_requests_total` and `http_request_errors_total` under its route, as are the
/// 413 and 431.
#[test]
fn a_handler_panic_is_counted_as_a_500_of_its_route() {
    let metrics = Metrics::shared(8, BuildInfo::current("cpu", "none"));
    let app = App::new(ApiConfig::new(), metrics.clone(), None);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = Shutdown::new();
    let server = {
        let shutdown = shutdown.clone();
        std::thread::spawn(move || serve(listener, Arc::new(PanicsOnChat(app)), HttpConfig::default(), shutdown))
    };

    let body = br#"{"messages": [{"role": "user", "content": "hi"}]}"#;
    let r = common::request(addr, "POST", "/v1/chat/completions", &[("Content-Type", "application/json")], body);
    assert_eq!(r.status, 500, "{}", r.text());
    // The server's own refusals are rendered by the application, in the API's error shape.
    assert_eq!(r.json()["error"]["code"], "internal_error", "{}", r.text());
    let r = oversized_body(addr);
    assert_eq!(r.status, 413);
    assert_eq!(r.header("Content-Type"), Some("application/json"));
    assert_eq!(r.json()["error"]["code"], "body_too_large", "{}", r.text());
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    let r = oversized_head(addr);
    assert_eq!(r.status, 431);
    assert_eq!(r.json()["error"]["code"], "header_section_too_large", "{}", r.text());

    let text = common::get(addr, "/metrics").text();
    assert_eq!(
        sample(&text, r#"http_requests_total{method="POST",route="/v1/chat/completions",status="500"}"#),
        Some(1.0),
        "{text}"
    );
    assert_eq!(sample(&text, r#"http_request_errors_total{route="/v1/chat/completions"}"#), Some(1.0), "{text}");
    assert_eq!(
        sample(&text, r#"http_requests_total{method="POST",route="/v1/chat/completions",status="413"}"#),
        Some(1.0),
        "{text}"
    );
    assert_eq!(total_with_status(&text, 431), 1.0, "{text}");
    // The panicking request left nothing counted in flight.
    assert_eq!(sample(&text, "http_requests_in_flight"), Some(0.0), "{text}");

    // Stopped without waiting for it: the test has what it came for.
    shutdown.force();
    drop(server);
}
