//! End to end over real sockets: timeouts, many connections, the connection cap, client
//! disconnects mid-stream, and graceful shutdown.

mod common;
mod http_support;

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::Duration;

use http_support::*;
use mtplx_lite::http::HttpConfig;

#[test]
fn slowloris_gets_408_while_others_are_served() {
    let cfg = HttpConfig { header_timeout: Duration::from_millis(300), ..quick_cfg() };
    let server = TestServer::start(cfg);
    let mut slow = server.connect();
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Drip: ").unwrap();
    // Meanwhile another client is served, several times over.
    let mut c = Client::new(&server);
    for _ in 0..5 {
        c.send(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(c.response().status, 200);
    }
    let raw = read_to_close(&mut slow);
    assert_eq!(status_of(&raw), 408, "{raw}");
    assert_eq!(error_body(&raw)["error"]["code"], "header_timeout");
    assert!(error_body(&raw)["error"]["message"].as_str().unwrap().contains("300 ms"));
    // A connection that never sends anything gets the same.
    let raw = read_to_close(&mut server.connect());
    assert_eq!(status_of(&raw), 408, "{raw}");
    assert_eq!(server.rejected().iter().filter(|r| r.2 == 408).count(), 2);
}

#[test]
fn idle_keep_alive_outlives_the_header_timeout() {
    let cfg = HttpConfig { header_timeout: Duration::from_millis(200), ..quick_cfg() };
    let server = TestServer::start(cfg);
    let mut c = Client::new(&server);
    c.send(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response().status, 200);
    // Idle longer than the header timeout: the idle timeout (60 s) governs, not that one.
    std::thread::sleep(Duration::from_millis(600));
    c.send(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response().status, 200);
    assert!(server.rejected().is_empty());
}

#[test]
fn idle_keep_alive_is_closed_without_a_response() {
    let cfg = HttpConfig { idle_timeout: Duration::from_millis(200), ..quick_cfg() };
    let server = TestServer::start(cfg);
    let mut c = Client::new(&server);
    c.send(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response().status, 200);
    assert!(c.at_eof(), "idle connection closed silently");
    assert!(server.rejected().is_empty());
}

#[test]
fn slow_body_gets_408() {
    let cfg = HttpConfig { body_timeout: Duration::from_millis(300), ..quick_cfg() };
    let server = TestServer::start(cfg);
    let mut s = server.connect();
    s.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc").unwrap();
    let raw = read_to_close(&mut s);
    assert_eq!(status_of(&raw), 408, "{raw}");
    assert_eq!(error_body(&raw)["error"]["code"], "body_timeout");
    assert_eq!(server.rejected(), vec![("POST".to_owned(), "/echo".to_owned(), 408)]);
}

#[test]
fn a_thousand_concurrent_connections_are_served() {
    const N: usize = 1000;
    // Both ends of every connection live in this process: 2,000 descriptors and change, over
    // the soft limit of 1024 that many shells start with.
    common::raise_open_files_limit(2 * N as u64 + 256);
    let cfg = HttpConfig { io_threads: 2, ..quick_cfg() };
    let server = TestServer::start(cfg);
    // All connections open at once before any request is sent.
    let mut conns: Vec<TcpStream> = (0..N).map(|_| server.connect()).collect();
    for s in &mut conns {
        s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    }
    for s in conns.iter_mut() {
        let mut r = BufReader::new(&mut *s);
        assert_eq!(read_response(&mut r, false).status, 200);
    }
    // And every one of them is still alive for a second request.
    for s in &mut conns {
        s.write_all(b"GET /echo?again HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    }
    for s in conns.iter_mut() {
        let mut r = BufReader::new(&mut *s);
        assert_eq!(read_response(&mut r, false).header("X-Query"), Some("again"));
    }
    assert!(server.rejected().is_empty());
}

#[test]
fn connections_over_the_cap_get_503() {
    let cfg = HttpConfig { max_connections: 2, ..quick_cfg() };
    let server = TestServer::start(cfg);
    let mut held: Vec<Client> = (0..2).map(|_| Client::new(&server)).collect();
    for c in &mut held {
        c.send(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(c.response().status, 200);
    }
    let raw = server.roundtrip(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status_of(&raw), 503, "{raw}");
    assert!(raw.contains("Retry-After: 1\r\n") && raw.contains("Connection: close\r\n"));
    assert_eq!(error_body(&raw)["error"]["code"], "too_many_connections");
    assert_eq!(server.rejected(), vec![("GET".to_owned(), "/stream".to_owned(), 503)]);
    // The liveness probe is still answered, on a connection of the reserve, which then closes.
    let raw = server.roundtrip(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status_of(&raw), 200, "{raw}");
    assert!(raw.contains("Connection: close\r\n"), "{raw}");
    // With the reserve full too (connections that send nothing), even a probe gets 503, unread.
    let idle: Vec<TcpStream> =
        (0..mtplx_lite::http::server::PROBE_RESERVE_CONNECTIONS).map(|_| server.connect()).collect();
    let raw = server.roundtrip(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status_of(&raw), 503, "{raw}");
    assert_eq!(server.rejected().last(), Some(&(String::new(), String::new(), 503)));
    drop(idle);
    // Once one closes, a new connection is served again.
    held.pop();
    let mut served = false;
    for _ in 0..200 {
        let raw = server.roundtrip(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        if status_of(&raw) == 200 {
            served = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(served, "a freed slot is reused");
}

#[test]
fn client_gone_mid_stream_drops_the_receiver() {
    let (gone_tx, gone_rx) = mpsc::channel();
    let handler = TestHandler { gone_tx: std::sync::Mutex::new(Some(gone_tx)), ..TestHandler::default() };
    let server = TestServer::start_with(quick_cfg(), handler);
    let mut c = Client::new(&server);
    c.send(b"GET /forever HTTP/1.1\r\nHost: x\r\n\r\n");
    let (status, _) = read_head(&mut c.reader);
    assert_eq!(status, 200);
    let mut line = String::new();
    std::io::BufRead::read_line(&mut c.reader, &mut line).unwrap();
    assert_eq!(line, "9\r\n", "first chunk");
    drop(c);
    // The producer's send fails once the server notices the close (the bound only avoids a hang).
    gone_rx.recv_timeout(CLIENT_TIMEOUT).expect("producer saw the receiver dropped");
}

#[test]
fn client_gone_during_a_quiet_stream_is_noticed_without_a_write() {
    let (gone_tx, gone_rx) = mpsc::channel();
    let handler = TestHandler { gone_tx: std::sync::Mutex::new(Some(gone_tx)), ..TestHandler::default() };
    let server = TestServer::start_with(quick_cfg(), handler);
    let mut c = Client::new(&server);
    c.send(b"GET /quiet HTTP/1.1\r\nHost: x\r\n\r\n");
    let (status, _) = read_head(&mut c.reader);
    assert_eq!(status, 200);
    let mut line = String::new();
    std::io::BufRead::read_line(&mut c.reader, &mut line).unwrap();
    assert_eq!(line, "c\r\n", "the one chunk");
    drop(c);
    gone_rx.recv_timeout(CLIENT_TIMEOUT).expect("receiver dropped although nothing more was written");
}

#[test]
fn graceful_shutdown_lets_an_in_flight_response_finish() {
    let (started_tx, started_rx) = mpsc::channel();
    let handler = TestHandler { started_tx: std::sync::Mutex::new(Some(started_tx)), ..TestHandler::default() };
    let server = TestServer::start_with(quick_cfg(), handler);
    let mut idle = Client::new(&server);
    idle.send(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(idle.response().status, 200);
    let mut c = Client::new(&server);
    c.send(b"GET /slow?ms=400 HTTP/1.1\r\nHost: x\r\n\r\n");
    started_rx.recv_timeout(CLIENT_TIMEOUT).unwrap();
    let addr = server.addr;
    let shutdown = server.shutdown.clone();
    shutdown.trigger();
    let r = c.response();
    assert_eq!((r.status, r.body_str().as_str()), (200, "slow done"));
    assert_eq!(r.header("Connection"), Some("close"));
    assert!(c.at_eof());
    assert!(idle.at_eof(), "idle keep-alive connection closed on shutdown");
    server.stop().unwrap();
    assert!(TcpStream::connect(addr).is_err(), "no longer accepting");
}

#[test]
fn shutdown_grace_expiry_ends_streams_with_the_last_chunk() {
    let cfg = HttpConfig { shutdown_grace: Duration::from_millis(200), ..quick_cfg() };
    let server = TestServer::start(cfg);
    let mut c = Client::new(&server);
    c.send(b"GET /forever HTTP/1.1\r\nHost: x\r\n\r\n");
    let (status, _) = read_head(&mut c.reader);
    assert_eq!(status, 200);
    server.shutdown.trigger();
    // The rest of the stream reads as well-formed chunks ending in the terminating chunk.
    let mut chunks = 0;
    loop {
        let mut size = String::new();
        std::io::BufRead::read_line(&mut c.reader, &mut size).unwrap();
        let n = usize::from_str_radix(size.trim_end(), 16).expect("chunk size line");
        let mut data = vec![0; n + 2];
        std::io::Read::read_exact(&mut c.reader, &mut data).unwrap();
        if n == 0 {
            break;
        }
        chunks += 1;
    }
    assert!(chunks >= 1);
    assert!(c.at_eof());
    server.stop().unwrap();
}
