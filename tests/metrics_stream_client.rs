//! The MTPLX stream reader example (Python `requests`, as `docs/metrics.md` prints it but for the
//! address) against the SSE framing of the record stream, over a real socket. The
//! socket side here is a minimal HTTP/1.1 writer (the product server lives in `http/`); what is
//! under test is the framing produced by `Subscription::pump` and the records of
//! `Metrics::record_generation`.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::Stdio;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use mtplx_lite::metrics::{
    negotiate_stream, BuildInfo, FinishStatus, GenerationClock, GenerationOutcome, Metrics, SpecStats,
};

/// Longest wait for each step of the exchange (the client subscribing, the stream ending).
const STEP_DEADLINE: Duration = Duration::from_secs(30);

/// Serve one stream request: read the head, then write what the pump produces until it ends.
/// The head read is sent back when the stream is over (nothing, if the thread failed).
fn serve_one(listener: TcpListener, metrics: Arc<Metrics>) -> mpsc::Receiver<String> {
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (mut sock, _) = listener.accept().unwrap();
        sock.set_read_timeout(Some(STEP_DEADLINE)).unwrap();
        let mut reader = BufReader::new(sock.try_clone().unwrap());
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let accept = head.lines().find_map(|l| l.strip_prefix("Accept: ").or_else(|| l.strip_prefix("accept: ")));
        let format = negotiate_stream(accept);
        let sub = metrics.requests.subscribe(None);
        write!(
            sock,
            "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n",
            format.content_type()
        )
        .unwrap();
        let (tx, rx) = async_channel::unbounded();
        let pump = std::thread::spawn(move || smol::block_on(sub.pump(format, tx, std::time::Duration::ZERO)));
        while let Ok(frame) = rx.recv_blocking() {
            sock.write_all(&frame).unwrap();
            sock.flush().unwrap();
        }
        pump.join().unwrap();
        let _ = done_tx.send(head);
    });
    done_rx
}

fn generation(m: &Metrics, i: u64, drafted: u64) {
    let t0 = Instant::now();
    let mut clock = GenerationClock::start_at(t0);
    clock.token_at(t0 + Duration::from_millis(100), m);
    clock.finish_at(t0 + Duration::from_millis(1000));
    let mut o = GenerationOutcome::new(format!("req-{i}"), "/v1/chat/completions", "smol", FinishStatus::Done, clock);
    o.completion_tokens = 10 * (i + 1);
    o.spec = SpecStats {
        mtp_depth: 1,
        drafted_tokens: drafted,
        accepted_tokens: drafted / 2,
        verify_calls: drafted,
        accepted_by_depth: vec![drafted / 2],
        ..Default::default()
    };
    m.record_generation(o);
}

#[test]
fn mtplx_stream_reader_example_prints_real_values() {
    let metrics = Arc::new(Metrics::new(8, BuildInfo::current("cpu", "smol")));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = serve_one(listener, metrics.clone());
    let script =
        common::docs::example("metrics.md", "mtplx-stream").replace("http://localhost:8100", &format!("http://{addr}"));
    let child = common::python()
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the test venv's python (tests/setup.sh installs it with requests)");
    let mut client = common::Watched::new(child, "the MTPLX stream reader example");
    // Wait for the client to subscribe (a synchronisation point, not a timing assertion).
    let deadline = Instant::now() + STEP_DEADLINE;
    while metrics.requests.subscriber_count() == 0 {
        if client.exited() {
            // Its output says why (a missing module, a refused connection).
            let out = client.finish_within(STEP_DEADLINE);
            panic!("the client exited before subscribing: {}", String::from_utf8_lossy(&out.stderr));
        }
        assert!(Instant::now() < deadline, "the client did not subscribe within {STEP_DEADLINE:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    generation(&metrics, 0, 0);
    generation(&metrics, 1, 8);
    generation(&metrics, 2, 4);
    metrics.requests.close_subscribers();
    let out = client.finish_within(STEP_DEADLINE);
    let head = server.recv_timeout(STEP_DEADLINE).unwrap_or_else(|e| {
        panic!(
            "the stream server did not finish its response within {STEP_DEADLINE:?} ({e}); client stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(head.starts_with("GET /v1/mtplx/metrics/stream HTTP/1.1"), "{head}");
    assert!(out.status.success(), "client failed: {}", String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8(out.stdout).unwrap();
    // tok_s = completion_tokens / ttlt_s with ttlt_s = 1 s; accept_rate = accepted / drafted.
    assert_eq!(printed, "tok_s=10.0, accept_rate=0.00\ntok_s=20.0, accept_rate=0.50\ntok_s=30.0, accept_rate=0.50\n");
}
