//! Seed 000's stream reader (Python `requests`, verbatim but for the address) against the SSE
//! framing of the record stream, over a real socket. The socket side here is a minimal
//! HTTP/1.1 writer (the product server lives in `http/`); what is under test is the framing
//! produced by `Subscription::pump` and the records of `Metrics::record_generation`.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mtplx_lite::metrics::{
    negotiate_stream, BuildInfo, FinishStatus, GenerationClock, GenerationOutcome, Metrics,
    SpecStats,
};

/// Seed 000's stream reader, the same file the end-to-end test runs (tests/openai_client.rs).
const SEED_000_STREAM_CLIENT: &str = include_str!("py/seed000_stream.py");

/// Serve one stream request: read the head, then write what the pump produces until it ends.
fn serve_one(listener: TcpListener, metrics: Arc<Metrics>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let (mut sock, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(sock.try_clone().unwrap());
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let accept = head.lines().find_map(|l| {
            l.strip_prefix("Accept: ")
                .or_else(|| l.strip_prefix("accept: "))
        });
        let format = negotiate_stream(accept);
        let sub = metrics.requests.subscribe(None);
        write!(sock, "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n", format.content_type()).unwrap();
        let (tx, rx) = async_channel::unbounded();
        let pump = std::thread::spawn(move || smol::block_on(sub.pump(format, tx)));
        while let Ok(frame) = rx.recv_blocking() {
            sock.write_all(&frame).unwrap();
            sock.flush().unwrap();
        }
        pump.join().unwrap();
        head
    })
}

fn generation(m: &Metrics, i: u64, drafted: u64) {
    let t0 = Instant::now();
    let mut clock = GenerationClock::start_at(t0);
    clock.token_at(t0 + Duration::from_millis(100), m);
    clock.finish_at(t0 + Duration::from_millis(1000));
    let mut o = GenerationOutcome::new(
        format!("req-{i}"),
        "/v1/chat/completions",
        "smol",
        FinishStatus::Done,
        clock,
    );
    o.completion_tokens = 10 * (i + 1);
    o.spec = SpecStats {
        mtp_depth: 1,
        drafted_tokens: drafted,
        accepted_tokens: drafted / 2,
        verify_calls: drafted,
        accepted_by_depth: vec![drafted / 2],
    };
    m.record_generation(o);
}

#[test]
fn seed_000_stream_reader_prints_real_values() {
    let metrics = Arc::new(Metrics::new(8, BuildInfo::current("cpu", "smol")));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = serve_one(listener, metrics.clone());
    let script = SEED_000_STREAM_CLIENT.replace("http://localhost:8000", &format!("http://{addr}"));
    let client = Command::new("python3")
        .arg("-c")
        .arg(script)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 with requests is required for this test (.ci/run installs it)");
    // Wait for the client to subscribe (a synchronisation point, not a timing assertion).
    while metrics.requests.subscriber_count() == 0 {
        std::thread::sleep(Duration::from_millis(10));
    }
    generation(&metrics, 0, 0);
    generation(&metrics, 1, 8);
    generation(&metrics, 2, 4);
    metrics.requests.close_subscribers();
    let out = client.wait_with_output().unwrap();
    let head = server.join().unwrap();
    assert!(
        head.starts_with("GET /v1/mtplx/metrics/stream HTTP/1.1"),
        "{head}"
    );
    assert!(
        out.status.success(),
        "client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    // tok_s = completion_tokens / ttlt_s with ttlt_s = 1 s; accept_rate = accepted / drafted.
    assert_eq!(printed, "tok_s=10.0, accept_rate=0.00\ntok_s=20.0, accept_rate=0.50\ntok_s=30.0, accept_rate=0.50\n");
}
