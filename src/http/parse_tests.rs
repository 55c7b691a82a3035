//! Unit tests of the head parser and the chunked decoder (kept beside parse.rs, in their own file
//! so that both stay short).

use super::*;

fn head(s: &str) -> Head {
    let (h, n) = parse_head(s.as_bytes()).expect("parses").expect("complete");
    assert_eq!(n, s.len(), "head length");
    h
}

fn err(s: &[u8]) -> HttpError {
    parse_head(s).expect_err("must be refused").error
}

#[test]
fn simple_get() {
    let h = head("GET /v1/models?limit=3&x HTTP/1.1\r\nHost: a\r\nX-Y:  z \r\n\r\n");
    assert_eq!(h.method, "GET");
    assert_eq!(h.path, "/v1/models");
    assert_eq!(h.query.as_deref(), Some("limit=3&x"));
    assert_eq!(h.version, 1);
    assert_eq!(h.headers, vec![("Host".into(), b"a".to_vec()), ("X-Y".into(), b"z".to_vec())]);
    assert_eq!(h.framing, Framing::None);
    assert!(h.keep_alive);
    assert!(!h.expect_continue);
}

#[test]
fn every_proper_prefix_is_incomplete() {
    let s = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\nabc";
    let head_len = s.len() - 3;
    for i in 0..head_len {
        assert_eq!(parse_head(&s[..i]), Ok(None), "prefix {i}");
    }
    let (h, n) = parse_head(s).unwrap().unwrap();
    assert_eq!(n, head_len);
    assert_eq!(h.framing, Framing::Length(3));
    assert!(h.expect_continue);
}

#[test]
fn keep_alive_rules() {
    assert!(!head("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").keep_alive);
    assert!(!head("GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, Close\r\n\r\n").keep_alive);
    assert!(!head("GET / HTTP/1.0\r\n\r\n").keep_alive);
    assert!(head("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keep_alive);
    assert!(head("GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n").keep_alive);
}

#[test]
fn target_forms() {
    let h = head("GET http://example.com/x/y?q=1 HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!((h.path.as_str(), h.query.as_deref()), ("/x/y", Some("q=1")));
    assert_eq!(head("GET HTTPS://example.com HTTP/1.1\r\nHost: x\r\n\r\n").path, "/");
    assert_eq!(head("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n").path, "*");
    assert!(matches!(err(b"GET foo HTTP/1.1\r\nHost: x\r\n\r\n"), HttpError::Malformed(_)));
}

#[test]
fn content_length_rules() {
    assert_eq!(head("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").framing, Framing::None);
    assert_eq!(
        head("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\ncontent-length: 5\r\n\r\n").framing,
        Framing::Length(5)
    );
    assert_eq!(head("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 7, 7\r\n\r\n").framing, Framing::Length(7));
    assert_eq!(
        err(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"),
        HttpError::ConflictingContentLength
    );
    assert_eq!(err(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\n"), HttpError::ConflictingContentLength);
    for bad in ["+5", "-1", "0x10", "", "1 2", "99999999999999999999"] {
        let req = format!("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {bad}\r\n\r\n");
        assert_eq!(err(req.as_bytes()), HttpError::InvalidContentLength, "{bad:?}");
    }
}

#[test]
fn transfer_encoding_rules() {
    assert_eq!(head("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n").framing, Framing::Chunked);
    assert_eq!(
        err(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"),
        HttpError::LengthAndTransferEncoding
    );
    assert_eq!(
        err(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"),
        HttpError::LengthAndTransferEncoding
    );
    assert_eq!(
        err(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n"),
        HttpError::UnsupportedTransferEncoding
    );
    assert_eq!(
        err(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
        HttpError::UnsupportedTransferEncoding
    );
    assert_eq!(
        err(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"),
        HttpError::UnsupportedTransferEncoding
    );
    assert_eq!(err(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), HttpError::TransferEncodingOnHttp10);
}

#[test]
fn version_errors() {
    assert_eq!(err(b"GET / HTTP/2.0\r\n\r\n"), HttpError::UnsupportedVersion);
    assert_eq!(err(b"GET / HTTP/1.2\r\n\r\n"), HttpError::UnsupportedVersion);
    assert_eq!(err(b"GET / HTTP/3\r\n\r\n"), HttpError::UnsupportedVersion);
    assert!(matches!(err(b"GET / HTTQ/1.1\r\n\r\n"), HttpError::Malformed(_)));
    assert!(matches!(err(b"GET / HTTP/1.1x\r\n\r\n"), HttpError::Malformed(_)));
}

#[test]
fn malformed_heads() {
    let cases: &[&[u8]] = &[
        b"GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n", // obs-fold
        b"GET / HTTP/1.1\r\nHost: x\r\nX : a\r\n\r\n",      // space before colon
        b"GET  / HTTP/1.1\r\nHost: x\r\n\r\n",              // double space
        b"G\x01T / HTTP/1.1\r\nHost: x\r\n\r\n",            // control char in method
        b"GET / HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n",  // NUL in value
        b"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n",            // space in target
        b"GET / HTTP/1.1\r\nHost: x\r\n: novalue\r\n\r\n",  // empty name
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",    // TLS hello
    ];
    for c in cases {
        let e = err(c);
        assert_eq!(e.status(), 400, "{:?} -> {e:?}", String::from_utf8_lossy(c));
    }
}

#[test]
fn header_limits() {
    let mut many = String::from("GET / HTTP/1.1\r\nHost: x\r\n");
    for i in 1..MAX_HEADERS {
        many.push_str(&format!("X-{i}: v\r\n"));
    }
    assert_eq!(head(&format!("{many}\r\n")).headers.len(), MAX_HEADERS);
    many.push_str("X-last: v\r\n\r\n");
    assert_eq!(err(many.as_bytes()), HttpError::TooManyHeaders);

    let big = format!("GET / HTTP/1.1\r\nHost: x\r\nX: {}\r\n\r\n", "a".repeat(MAX_HEAD_BYTES));
    assert_eq!(err(big.as_bytes()), HttpError::HeadTooLarge);
    // Incomplete and already over the bound: refused without waiting for the end.
    assert_eq!(err(&big.as_bytes()[..MAX_HEAD_BYTES + 1]), HttpError::HeadTooLarge);
    // Just under the bound is fine.
    let ok = format!("GET / HTTP/1.1\r\nHost: x\r\nX: {}\r\n\r\n", "a".repeat(MAX_HEAD_BYTES - 40));
    assert!(ok.len() <= MAX_HEAD_BYTES);
    head(&ok);
}

#[test]
fn target_limit() {
    let at = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(MAX_TARGET_BYTES - 1));
    assert_eq!(head(&at).path.len(), MAX_TARGET_BYTES);
    let over = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(MAX_TARGET_BYTES));
    let e = parse_head(over.as_bytes()).unwrap_err();
    assert_eq!(e.error, HttpError::TargetTooLong { len: MAX_TARGET_BYTES + 1 });
    assert_eq!(e.method, "GET");
    // A target still arriving is refused once it passes the bound.
    let huge = format!("GET /{}", "a".repeat(MAX_TARGET_BYTES + 10));
    assert_eq!(err(huge.as_bytes()).status(), 414);
    let short_then_big = format!("GET /{} HTTP/1.1\r\nHost: x\r\nX: {}", "a".repeat(10), "b".repeat(MAX_HEAD_BYTES));
    assert_eq!(err(short_then_big.as_bytes()), HttpError::HeadTooLarge);
}

#[test]
fn host_is_required_once_in_http11() {
    // RFC 9112 §3.2: 400 to an HTTP/1.1 request without Host, and to any request with two.
    assert_eq!(err(b"GET / HTTP/1.1\r\n\r\n"), HttpError::MissingHost);
    assert_eq!(err(b"GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n"), HttpError::DuplicateHost);
    assert_eq!(err(b"GET / HTTP/1.0\r\nHost: a\r\nHOST: b\r\n\r\n"), HttpError::DuplicateHost);
    let e = parse_head(b"POST /v1/x?y HTTP/1.1\r\nContent-Length: 1\r\n\r\n").unwrap_err();
    assert_eq!((e.method.as_str(), e.path.as_str()), ("POST", "/v1/x"));
    // HTTP/1.0 predates Host.
    assert_eq!(head("GET / HTTP/1.0\r\n\r\n").version, 0);
    // An absolute-form target still needs its Host line (RFC 9112 §3.2.2).
    assert_eq!(err(b"GET http://a/b HTTP/1.1\r\n\r\n"), HttpError::MissingHost);
}

#[test]
fn host_value_must_be_a_host_and_port() {
    // Empty is allowed: a target without an authority (RFC 9112 §3.2).
    for ok in ["", "localhost:8100", "[::1]:8100", "127.0.0.1", "a-b.c_d~e", "x%41y"] {
        let req = format!("GET / HTTP/1.1\r\nHost: {ok}\r\n\r\n");
        assert_eq!(head(&req).headers[0].1, ok.as_bytes(), "{ok:?}");
    }
    for bad in ["a b", "a/b", "user@host", "host?x", "ho#st", "caf\u{e9}", "a\"b"] {
        let req = format!("GET / HTTP/1.1\r\nHost: {bad}\r\n\r\n");
        assert_eq!(err(req.as_bytes()), HttpError::InvalidHost, "{bad:?}");
    }
}

#[test]
fn authorization_is_refused_twice() {
    // Proxies and servers that pick different copies would disagree about who is asking.
    let one = "GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer k\r\n\r\n";
    assert_eq!(head(one).headers.len(), 2);
    for second in ["Authorization: Bearer k", "authorization: Bearer other"] {
        let req = format!("GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer k\r\n{second}\r\n\r\n");
        assert_eq!(err(req.as_bytes()), HttpError::DuplicateAuthorization, "{second}");
    }
    assert_eq!(HttpError::DuplicateAuthorization.status(), 400);
}

fn decode_all(input: &[u8], max: usize) -> Result<(Vec<u8>, usize), HttpError> {
    let mut d = ChunkedDecoder::new(max);
    let mut out = Vec::new();
    let n = d.decode(input, &mut out)?;
    assert!(d.is_done(), "not done after {n} of {} bytes", input.len());
    Ok((out, n))
}

/// Feeds `input` split at every position (and byte by byte) and checks the result is the same.
fn decode_split(input: &[u8], max: usize) -> Result<Vec<u8>, HttpError> {
    let whole = decode_all(input, max);
    for split in 0..=input.len() {
        let mut d = ChunkedDecoder::new(max);
        let mut out = Vec::new();
        let mut pending: Vec<u8> = Vec::new();
        let mut result = Ok(());
        for part in [&input[..split], &input[split..]] {
            pending.extend_from_slice(part);
            match d.decode(&pending, &mut out) {
                Ok(n) => drop(pending.drain(..n)),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        match (&whole, result) {
            (Ok((w, _)), Ok(())) => assert_eq!(&out, w, "split {split}"),
            (Err(a), Err(b)) => assert_eq!(a, &b, "split {split}"),
            (w, r) => panic!("split {split}: whole {w:?} vs split {r:?}"),
        }
    }
    let mut d = ChunkedDecoder::new(max);
    let mut out = Vec::new();
    let mut pending = Vec::new();
    for &b in input {
        pending.push(b);
        let n = d.decode(&pending, &mut out)?;
        pending.drain(..n);
    }
    assert!(d.is_done());
    whole.map(|(w, _)| w)
}

#[test]
fn chunked_decodes_whatever_the_split() {
    let body = decode_split(b"5\r\nhello\r\n6;ext=1\r\n world\r\nA\r\n0123456789\r\n0\r\n\r\n", 100).unwrap();
    assert_eq!(body, b"hello world0123456789");
    let body = decode_split(b"3\r\nabc\r\n0\r\nX-Trailer: yes\r\nY: \r\n\r\n", 100).unwrap();
    assert_eq!(body, b"abc");
    assert_eq!(decode_split(b"0\r\n\r\n", 0).unwrap(), b"");
}

#[test]
fn chunked_stops_at_the_end_and_leaves_the_next_request() {
    let input = b"2\r\nhi\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n";
    let (out, n) = decode_all(input, 10).unwrap();
    assert_eq!(out, b"hi");
    assert_eq!(&input[n..], b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
}

#[test]
fn chunked_errors() {
    let bad: &[&[u8]] = &[
        b"x\r\n",        // not hex
        b"\r\n",         // empty size
        b";ext\r\n",     // size missing
        b"5\r\nhelloXX", // data not followed by CRLF
        b"5\nhello\r\n", // bare LF
        b"2\r\nhi\r\n0\r\nbad trailer\r\n\r\n",
        b"2\r\nhi\r\n0\r\n folded: x\r\n\r\n",
        b"2\r\nhi\r\n0\r\nX: y\n\r\n",
        b"12345678901234567\r\n", // more than 16 hex digits
    ];
    for b in bad {
        let mut out = Vec::new();
        let r = ChunkedDecoder::new(1 << 20).decode(b, &mut out);
        assert!(r.is_err(), "{:?} gave {r:?}", String::from_utf8_lossy(b));
    }
}

#[test]
fn chunked_limits() {
    assert_eq!(
        decode_split(b"5\r\nhello\r\n2\r\n!!\r\n0\r\n\r\n", 6),
        Err(HttpError::BodyTooLarge { len: 7, limit: 6 })
    );
    let mut out = Vec::new();
    let huge = b"ffffffffffffffff\r\n";
    assert!(matches!(ChunkedDecoder::new(10).decode(huge, &mut out), Err(HttpError::BodyTooLarge { .. })));
    let long_ext = format!("1;{}\r\n", "e".repeat(MAX_CHUNK_LINE_BYTES));
    assert_eq!(ChunkedDecoder::new(10).decode(long_ext.as_bytes(), &mut out), Err(HttpError::InvalidChunk));
    let long_partial = format!("1;{}", "e".repeat(MAX_CHUNK_LINE_BYTES));
    assert_eq!(ChunkedDecoder::new(10).decode(long_partial.as_bytes(), &mut out), Err(HttpError::InvalidChunk));
    let trailers = format!("0\r\n{}", "X: yyyyyyyyyyyyyy\r\n".repeat(MAX_TRAILER_BYTES / 10));
    assert_eq!(ChunkedDecoder::new(10).decode(trailers.as_bytes(), &mut out), Err(HttpError::TrailersTooLarge));
    let endless = format!("0\r\nX: {}", "y".repeat(MAX_TRAILER_BYTES));
    assert_eq!(ChunkedDecoder::new(10).decode(endless.as_bytes(), &mut out), Err(HttpError::TrailersTooLarge));
}
