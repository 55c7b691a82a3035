//! End to end over real sockets: request/response basics, limits and smuggling defences.

mod http_support;

use http_support::*;
use mtplx_lite::http::HttpConfig;

#[test]
fn keep_alive_serves_several_requests_with_date_and_length() {
    let server = TestServer::start(quick_cfg());
    let mut c = Client::new(&server);
    for _ in 0..3 {
        c.send(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
        let r = c.response();
        assert_eq!(r.status, 200);
        assert_eq!(r.body_str(), "{\"status\":\"ok\"}");
        assert_eq!(r.header("Content-Length"), Some("15"));
        assert_eq!(r.header("Content-Type"), Some("application/json"));
        assert!(r.header("Date").unwrap().ends_with(" GMT"));
        assert_eq!(r.header("Connection"), None);
    }
}

#[test]
fn connection_close_and_http10_rules() {
    let server = TestServer::start(quick_cfg());
    let raw = server.roundtrip(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(status_of(&raw), 200);
    assert!(raw.contains("\r\nConnection: close\r\n"), "{raw}");
    // HTTP/1.0 without keep-alive: one response, then the server closes.
    let raw = server.roundtrip(b"GET /health HTTP/1.0\r\n\r\nGET /health HTTP/1.0\r\n\r\n");
    assert_eq!(raw.matches("HTTP/1.1 200").count(), 1, "{raw}");
    // HTTP/1.0 with keep-alive: the connection stays open.
    let mut c = Client::new(&server);
    c.send(b"GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    let r = c.response();
    assert_eq!(r.header("Connection"), Some("keep-alive"));
    c.send(b"GET /health HTTP/1.0\r\n\r\n");
    let r = c.response();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Connection"), Some("close"));
    assert!(c.at_eof());
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let server = TestServer::start(quick_cfg());
    let mut c = Client::new(&server);
    c.send(
        b"GET /echo?n=1 HTTP/1.1\r\nHost: x\r\n\r\n\
          POST /echo?n=2 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello\
          POST /echo?n=3 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n\
          GET /echo?n=4 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    let bodies: Vec<(Option<String>, String)> = (0..4)
        .map(|_| {
            let r = c.response();
            (r.header("X-Query").map(str::to_owned), r.body_str())
        })
        .collect();
    let want = [("n=1", ""), ("n=2", "hello"), ("n=3", "abc"), ("n=4", "")];
    for (got, want) in bodies.iter().zip(want) {
        assert_eq!((got.0.as_deref(), got.1.as_str()), (Some(want.0), want.1));
    }
    assert!(c.at_eof());
}

#[test]
fn large_bodies_go_out_whole_between_small_ones() {
    // Bodies over a few KiB are written with their head in one writev rather than copied into
    // the output buffer; 1 MiB does not fit the socket buffer, so the writes are partial too.
    let server = TestServer::start(quick_cfg());
    let mut c = Client::new(&server);
    let big: Vec<u8> = (0..1024 * 1024).map(|i| (i % 251) as u8).collect();
    let mut req = format!("POST /echo?n=1 HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n", big.len()).into_bytes();
    req.extend_from_slice(&big);
    req.extend_from_slice(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    req.extend_from_slice(b"POST /echo?n=3 HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n");
    req.extend_from_slice(&[b'x'; 5000]);
    c.send(&req);
    let r = c.response();
    assert_eq!((r.status, r.header("X-Query")), (200, Some("n=1")));
    assert!(r.body == big, "1 MiB body differs");
    assert_eq!(c.response().body_str(), "{\"status\":\"ok\"}");
    let r = c.response();
    assert_eq!((r.header("X-Query"), r.body.len()), (Some("n=3"), 5000));
    assert!(r.body.iter().all(|&b| b == b'x'));
}

#[test]
fn expect_100_continue_is_answered_before_the_body() {
    let server = TestServer::start(quick_cfg());
    let mut c = Client::new(&server);
    c.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n");
    let interim = c.head_response();
    assert_eq!(interim.status, 100);
    c.send(b"ping");
    let r = c.response();
    assert_eq!((r.status, r.body_str().as_str()), (200, "ping"));
    // Too large: refused with 413 instead of 100, body never sent.
    c.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\nExpect: 100-continue\r\n\r\n");
    let r = c.response();
    assert_eq!(r.status, 413);
}

#[test]
fn head_gets_headers_without_body() {
    let server = TestServer::start(quick_cfg());
    let mut c = Client::new(&server);
    c.send(b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n");
    let r = c.head_response();
    assert_eq!((r.status, r.header("Content-Length")), (200, Some("15")));
    // If a body had been sent, this next response would not parse.
    c.send(
        b"HEAD /stream HTTP/1.1\r\nHost: x\r\n\r\nGET /nocontent HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    let r = c.head_response();
    assert_eq!(r.header("Transfer-Encoding"), Some("chunked"));
    let r = c.response();
    assert_eq!((r.status, r.header("Content-Length")), (204, None));
    assert_eq!(c.response().body_str(), "{\"status\":\"ok\"}");
}

#[test]
fn chunked_request_body_with_trailers_is_decoded() {
    let server = TestServer::start(quick_cfg());
    let mut c = Client::new(&server);
    c.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n");
    c.send(b"6\r\n world\r\n0\r\nX-Checksum: 1\r\n\r\n");
    let r = c.response();
    assert_eq!((r.status, r.body_str().as_str()), (200, "hello world"));
}

#[test]
fn sse_stream_is_chunked_one_event_per_chunk() {
    let server = TestServer::start(quick_cfg());
    let mut c = Client::new(&server);
    c.send(b"GET /stream?n=3 HTTP/1.1\r\nHost: x\r\n\r\n");
    let r = c.response();
    assert_eq!(r.header("Content-Type"), Some("text/event-stream"));
    assert_eq!(r.header("Cache-Control"), Some("no-cache"));
    assert_eq!(r.header("X-Accel-Buffering"), Some("no"));
    assert_eq!(r.chunks, vec![b"data: 0\n\n".to_vec(), b"data: 1\n\n".to_vec(), b"data: 2\n\n".to_vec()]);
    // The connection is still usable after the terminating chunk.
    c.send(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response().status, 200);
    // HTTP/1.0 gets the raw stream, ended by close.
    let raw = server.roundtrip(b"GET /stream?n=2 HTTP/1.0\r\n\r\n");
    assert!(raw.contains("Connection: close\r\n") && !raw.contains("Transfer-Encoding"), "{raw}");
    assert!(raw.ends_with("\r\n\r\ndata: 0\n\ndata: 1\n\n"), "{raw:?}");
}

fn expect_rejection(server: &TestServer, req: &[u8], status: u16, code: &str) {
    let raw = server.roundtrip(req);
    assert_eq!(status_of(&raw), status, "{raw}");
    assert!(raw.contains("\r\nConnection: close\r\n"), "{raw}");
    let e = error_body(&raw);
    assert_eq!(e["error"]["code"], code, "{raw}");
    assert!(e["error"]["param"].is_null() && e["error"]["type"].is_string());
    assert!(!e["error"]["message"].as_str().unwrap().is_empty());
    assert_eq!(server.rejected().last().map(|r| r.2), Some(status));
}

#[test]
fn limits_answer_431_414_413() {
    let cfg = HttpConfig { max_body_bytes: 1000, ..quick_cfg() };
    let server = TestServer::start(cfg);
    let big_header = format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "a".repeat(17 * 1024));
    expect_rejection(&server, big_header.as_bytes(), 431, "header_section_too_large");
    let mut many = String::from("GET / HTTP/1.1\r\nHost: x\r\n");
    for i in 0..65 {
        many.push_str(&format!("X-H{i}: v\r\n"));
    }
    many.push_str("\r\n");
    expect_rejection(&server, many.as_bytes(), 431, "too_many_headers");
    let long_target = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "p".repeat(8 * 1024 + 1));
    expect_rejection(&server, long_target.as_bytes(), 414, "request_target_too_long");
    // Declared too large: refused from the head alone, the body is never sent.
    expect_rejection(&server, b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n", 413, "body_too_large");
    let raw = server.roundtrip(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n");
    assert!(error_body(&raw)["error"]["message"].as_str().unwrap().contains("1000"), "{raw}");
    // Chunked bodies are counted as they arrive.
    let chunked =
        format!("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3e9\r\n{}\r\n", "z".repeat(1001));
    expect_rejection(&server, chunked.as_bytes(), 413, "body_too_large");
    // At the bound exactly, accepted.
    let mut c = Client::new(&server);
    c.send(format!("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{}", "q".repeat(1000)).as_bytes());
    assert_eq!(c.response().body.len(), 1000);
    assert!(server.rejected().iter().any(|r| r == &("POST".to_owned(), "/echo".to_owned(), 413)));
}

#[test]
fn smuggling_and_malformed_requests_are_refused() {
    let server = TestServer::start(quick_cfg());
    let cases: &[(&[u8], u16, &str)] = &[
        (
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            400,
            "content_length_with_transfer_encoding",
        ),
        (
            b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde",
            400,
            "conflicting_content_length",
        ),
        (b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "unsupported_transfer_encoding"),
        (
            b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            501,
            "unsupported_transfer_encoding",
        ),
        (b"POST /echo HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, "transfer_encoding_on_http10"),
        (b"GET / HTTP/1.1\r\nHost: x\r\nX-A: one\r\n two\r\n\r\n", 400, "malformed_request"),
        (b"GET / HTTP/2.0\r\n\r\n", 505, "http_version_not_supported"),
        (b"GET / HTTX/1.1\r\n\r\n", 400, "malformed_request"),
        (b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", 400, "malformed_request"),
        (b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400, "invalid_content_length"),
        (b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400, "invalid_chunk"),
    ];
    for (req, status, code) in cases {
        expect_rejection(&server, req, *status, code);
    }
    let rejected = server.rejected();
    assert!(rejected.contains(&("POST".to_owned(), "/echo".to_owned(), 501)), "{rejected:?}");
    assert!(rejected.contains(&(String::new(), String::new(), 505)), "{rejected:?}");
}

#[test]
fn host_must_be_there_once_and_authorization_at_most_once() {
    let server = TestServer::start(quick_cfg());
    // RFC 9112 §3.2: an HTTP/1.1 request without Host, or any request with two, gets 400.
    expect_rejection(&server, b"GET /health HTTP/1.1\r\n\r\n", 400, "missing_host");
    expect_rejection(&server, b"GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "duplicate_host");
    expect_rejection(&server, b"GET /health HTTP/1.0\r\nHost: a\r\nhost: a\r\n\r\n", 400, "duplicate_host");
    expect_rejection(&server, b"GET /health HTTP/1.1\r\nHost: a b\r\n\r\n", 400, "invalid_host");
    // Two credentials: which one counts would depend on who reads them.
    expect_rejection(
        &server,
        b"GET /health HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer one\r\nAuthorization: Bearer two\r\n\r\n",
        400,
        "duplicate_authorization",
    );
    let rejected = server.rejected();
    assert!(rejected.contains(&("GET".to_owned(), "/health".to_owned(), 400)), "counted under the route: {rejected:?}");
    // One of each is served; so is HTTP/1.0 without Host.
    let mut c = Client::new(&server);
    c.send(b"GET /health HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer one\r\n\r\n");
    assert_eq!(c.response().status, 200);
    let raw = server.roundtrip(b"GET /health HTTP/1.0\r\n\r\n");
    assert_eq!(status_of(&raw), 200, "{raw}");
}

#[test]
fn smuggled_request_after_refusal_is_never_served() {
    let server = TestServer::start(quick_cfg());
    // The classic CL.TE desync: the trailing request must not be answered.
    let raw = server.roundtrip(
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nG\
          GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    assert_eq!(raw.matches("HTTP/1.1 ").count(), 1, "{raw}");
    assert_eq!(status_of(&raw), 400);
}

#[test]
fn handler_panic_is_500_and_closes_only_that_connection() {
    let server = TestServer::start(quick_cfg());
    let mut other = Client::new(&server);
    other.send(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(other.response().status, 200);
    let raw = server.roundtrip(b"GET /panic HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status_of(&raw), 500);
    assert_eq!(raw.matches("HTTP/1.1 ").count(), 1, "closed after the 500: {raw}");
    assert_eq!(error_body(&raw)["error"]["code"], "internal_error");
    assert!(server.rejected().contains(&("GET".to_owned(), "/panic".to_owned(), 500)));
    other.send(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(other.response().status, 200);
    let mut fresh = Client::new(&server);
    fresh.send(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(fresh.response().status, 200);
}
