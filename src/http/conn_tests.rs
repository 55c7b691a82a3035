//! Unit tests of one connection over bytes in memory: how the server's own refusals are
//! answered and reported.

use std::sync::Mutex;
use std::task::{Context, Poll};

use super::*;
use crate::http::plain_rejection;

/// Reads `input` in one go, then end of file; keeps what is written.
struct Mem {
    input: Vec<u8>,
    output: Vec<u8>,
}

impl AsyncRead for Mem {
    fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut [u8]) -> Poll<std::io::Result<usize>> {
        let n = buf.len().min(self.input.len());
        buf[..n].copy_from_slice(&self.input[..n]);
        self.input.drain(..n);
        Poll::Ready(Ok(n))
    }
}

impl AsyncWrite for Mem {
    fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.output.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// How a test handler renders refusals.
enum Style {
    Default,
    Json,
    Panics,
}

struct Test {
    style: Style,
    rejected: Mutex<Vec<(String, u16, &'static str)>>,
}

impl Handler for Test {
    fn handle(&self, _: Request) -> Pin<Box<dyn Future<Output = Response> + Send + '_>> {
        Box::pin(async { Response::new(200, "text/plain", "ok") })
    }

    fn rejection(&self, r: &Rejected<'_>) -> Response {
        match self.style {
            Style::Default => plain_rejection(r),
            // A status of its own, which the server must not send: the refusal's wins.
            Style::Json => Response::new(299, "application/json", format!("{{\"code\":\"{}\"}}", r.error.code()))
                .with_header("X-Rendered", "api"),
            Style::Panics => panic!("rendering a refusal panics on purpose"),
        }
    }

    fn on_rejected(&self, r: &Rejected<'_>) {
        self.rejected.lock().unwrap().push((r.path.to_owned(), r.status, r.error.code()));
    }
}

/// Serves `input` on one connection; what was written, and what the handler heard of.
fn serve(style: Style, input: &[u8]) -> (String, Vec<(String, u16, &'static str)>) {
    let handler = Test { style, rejected: Mutex::new(Vec::new()) };
    let cfg = HttpConfig { max_body_bytes: 4, ..HttpConfig::default() };
    let shutdown = Shutdown::new();
    let ctx = ConnCtx { handler: &handler, cfg: &cfg, shutdown: &shutdown, peer: "127.0.0.1:9".parse().unwrap() };
    let mut io = Mem { input: input.to_vec(), output: Vec::new() };
    smol::block_on(serve_connection(&mut io, &ctx));
    let rejected = handler.rejected.into_inner().unwrap();
    (String::from_utf8(io.output).unwrap(), rejected)
}

#[test]
fn refusals_default_to_their_reason_as_plain_text() {
    let (out, rejected) = serve(Style::Default, b"GET /x HTTP/1.1\r\n\r\n");
    assert!(out.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{out}");
    assert!(out.contains("\r\nContent-Type: text/plain; charset=utf-8\r\n"), "{out}");
    assert!(out.contains("\r\nConnection: close\r\n"), "{out}");
    assert!(out.ends_with("\r\n\r\nHTTP/1.1 request has no Host header (RFC 9112 §3.2)\n"), "{out}");
    assert_eq!(rejected, [("/x".to_owned(), 400, "missing_host")]);
}

#[test]
fn refusals_take_the_handlers_rendering_and_the_servers_status() {
    // A refused body, after an accepted request on the same connection.
    let input = b"GET / HTTP/1.1\r\nHost: a\r\n\r\nPOST /big HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n";
    let (out, rejected) = serve(Style::Json, input);
    let refusal = &out[out.find("HTTP/1.1 413").expect("a 413 follows the 200")..];
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
    assert!(refusal.contains("\r\nX-Rendered: api\r\n") && refusal.contains("\r\nConnection: close\r\n"), "{refusal}");
    assert!(refusal.ends_with("\r\n\r\n{\"code\":\"body_too_large\"}"), "{refusal}");
    assert!(!out.contains(" 299 "), "{out}");
    assert_eq!(rejected, [("/big".to_owned(), 413, "body_too_large")]);
}

#[test]
fn a_rendering_that_panics_falls_back_to_plain_text() {
    let (out, rejected) = serve(Style::Panics, b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n");
    assert!(out.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{out}");
    assert!(out.ends_with("request has more than one Host header (RFC 9112 §3.2)\n"), "{out}");
    assert_eq!(rejected, [("/".to_owned(), 400, "duplicate_host")]);
}
