//! Serialising responses into a reused buffer: the head, fixed-length bodies and chunks.

use std::io::Write as _;

use super::date;
use super::{Body, Response};

/// The terminating chunk of a chunked body with no trailers (RFC 9112 §7.1).
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";
/// Seconds a client refused with 503 (too many connections) is asked to wait.
const RETRY_AFTER_SECS: &str = "1";
/// The interim response sent for `Expect: 100-continue` (RFC 9110 §10.1.1).
pub const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// How the body of a response is delimited on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length: n`.
    Length(usize),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// No length; the body ends when the connection closes (HTTP/1.0 streaming).
    UntilClose,
    /// Statuses that never carry a body (1xx, 204, 304): neither header.
    NoBody,
}

/// What the `Connection` header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnHeader {
    /// Nothing: HTTP/1.1 persistence is the default.
    Omit,
    /// `Connection: keep-alive`, needed by HTTP/1.0 clients.
    KeepAlive,
    Close,
}

/// Whether a status code may carry a body (RFC 9110 §6.4.1).
pub fn status_allows_body(status: u16) -> bool {
    !(100..200).contains(&status) && status != 204 && status != 304
}

/// Appends a response head to `out`. Handler headers that the server owns (framing, `Date`,
/// `Connection`) or that contain CR, LF or NUL (response splitting) are dropped.
pub fn write_head(out: &mut Vec<u8>, status: u16, headers: &[(String, String)], framing: Framing, conn: ConnHeader) {
    out.extend_from_slice(b"HTTP/1.1 ");
    let _ = write!(out, "{status:03} ");
    out.extend_from_slice(reason(status).as_bytes());
    out.extend_from_slice(b"\r\nDate: ");
    date::append_now(out);
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        if is_server_owned(name) || !is_safe(name) || !is_safe(value) || name.is_empty() {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    match framing {
        Framing::Length(n) => {
            let _ = write!(out, "Content-Length: {n}\r\n");
        }
        Framing::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        Framing::UntilClose | Framing::NoBody => {}
    }
    match conn {
        ConnHeader::Omit => {}
        ConnHeader::KeepAlive => out.extend_from_slice(b"Connection: keep-alive\r\n"),
        ConnHeader::Close => out.extend_from_slice(b"Connection: close\r\n"),
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends one chunk; an empty `data` writes nothing, since an empty chunk would end the body.
pub fn write_chunk(out: &mut Vec<u8>, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    let _ = write!(out, "{:x}\r\n", data.len());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Appends the answer to a request the server refuses (`resp` is the handler's rendering of
/// it), with the refusal's `status`, closing the connection. A 503 tells the client when to come
/// back (RFC 9110 §10.2.3) unless the rendering already does.
pub fn write_rejection(out: &mut Vec<u8>, status: u16, resp: Response, head_only: bool) {
    let body: &[u8] = match &resp.body {
        Body::Full(bytes) => bytes,
        Body::Stream(..) => &[],
    };
    let mut headers = resp.headers;
    if status == 503 && !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("retry-after")) {
        headers.push(("Retry-After".to_owned(), RETRY_AFTER_SECS.to_owned()));
    }
    write_head(out, status, &headers, Framing::Length(body.len()), ConnHeader::Close);
    if !head_only {
        out.extend_from_slice(body);
    }
}

fn is_server_owned(name: &str) -> bool {
    ["content-length", "transfer-encoding", "connection", "date"].iter().any(|n| name.eq_ignore_ascii_case(n))
}

fn is_safe(s: &str) -> bool {
    !s.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0)
}

/// The reason phrase for a status code (RFC 9110 §15); any text is valid, so unknown codes get
/// a generic one.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        417 => "Expectation Failed",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(b: &[u8]) -> String {
        String::from_utf8(b.to_vec()).unwrap()
    }

    #[test]
    fn fixed_length_head() {
        let mut out = Vec::new();
        let headers = vec![
            ("Content-Type".to_owned(), "application/json".to_owned()),
            ("content-length".to_owned(), "999".to_owned()),
            ("X-Evil".to_owned(), "a\r\nSet-Cookie: x".to_owned()),
        ];
        write_head(&mut out, 200, &headers, Framing::Length(12), ConnHeader::Omit);
        let t = text(&out);
        assert!(t.starts_with("HTTP/1.1 200 OK\r\nDate: "), "{t}");
        assert!(t.contains("\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n"), "{t}");
        assert!(!t.contains("999") && !t.contains("X-Evil") && !t.contains("Connection"), "{t}");
    }

    #[test]
    fn chunked_and_connection_headers() {
        let mut out = Vec::new();
        write_head(&mut out, 200, &[], Framing::Chunked, ConnHeader::KeepAlive);
        let t = text(&out);
        assert!(t.ends_with("Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"), "{t}");
        out.clear();
        write_head(&mut out, 599, &[], Framing::UntilClose, ConnHeader::Close);
        let t = text(&out);
        assert!(t.starts_with("HTTP/1.1 599 Unknown\r\n") && t.ends_with("\r\nConnection: close\r\n\r\n"));
        assert!(!t.contains("Content-Length") && !t.contains("Transfer-Encoding"));
    }

    #[test]
    fn chunks() {
        let mut out = Vec::new();
        write_chunk(&mut out, b"data: x\n\n");
        write_chunk(&mut out, b"");
        write_chunk(&mut out, &[b'a'; 26]);
        out.extend_from_slice(LAST_CHUNK);
        assert_eq!(text(&out), format!("9\r\ndata: x\n\n\r\n1a\r\n{}\r\n0\r\n\r\n", "a".repeat(26)));
    }

    #[test]
    fn rejections_keep_their_status_and_close() {
        let mut out = Vec::new();
        // The rendering's own status is not the refusal's: the refusal's wins.
        let rendered = Response::new(200, "application/json", &b"{\"code\":\"x\"}"[..]);
        write_rejection(&mut out, 503, rendered, false);
        let t = text(&out);
        assert!(t.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{t}");
        assert!(t.contains("Retry-After: 1\r\n") && t.contains("Connection: close\r\n"));
        assert!(t.contains("\r\nContent-Type: application/json\r\n"), "{t}");
        assert!(t.ends_with("Content-Length: 12\r\nConnection: close\r\n\r\n{\"code\":\"x\"}"), "{t}");
        // A rendering that says when to come back is not contradicted.
        out.clear();
        let rendered = Response::new(503, "text/plain", "later").with_header("Retry-After", "7");
        write_rejection(&mut out, 503, rendered, false);
        let t = text(&out);
        assert_eq!(t.matches("Retry-After").count(), 1, "{t}");
        assert!(t.contains("Retry-After: 7\r\n"), "{t}");
        // HEAD: the length of the body that would have been sent, and no body.
        out.clear();
        write_rejection(&mut out, 431, Response::new(431, "text/plain", "big"), true);
        let t = text(&out);
        assert!(t.contains("Content-Length: 3\r\n") && t.ends_with("\r\n\r\n"), "{t}");
        // A streamed rendering is not sent: the refusal goes out whole, with an empty body.
        out.clear();
        let (_tx, rx) = async_channel::unbounded();
        write_rejection(&mut out, 400, Response::sse(rx), false);
        let t = text(&out);
        assert!(t.starts_with("HTTP/1.1 400 ") && t.ends_with("Content-Length: 0\r\nConnection: close\r\n\r\n"), "{t}");
    }

    #[test]
    fn bodyless_statuses() {
        assert!(!status_allows_body(204) && !status_allows_body(304) && !status_allows_body(101));
        assert!(status_allows_body(200) && status_allows_body(404));
    }
}
