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

    fn is_probe(&self, _: &str, path: &str) -> bool {
        path == "/health"
    }
}

/// Serves `input` on one connection; what was written, and what the handler heard of.
fn serve(style: Style, input: &[u8]) -> (String, Vec<(String, u16, &'static str)>) {
    serve_on(style, input, false)
}

/// [`serve`] on a connection of the reserve (`reserve`) or an ordinary one.
fn serve_on(style: Style, input: &[u8], reserve: bool) -> (String, Vec<(String, u16, &'static str)>) {
    let handler = Test { style, rejected: Mutex::new(Vec::new()) };
    let cfg = HttpConfig { max_body_bytes: 4, ..HttpConfig::default() };
    let shutdown = Shutdown::new();
    let ctx =
        ConnCtx { handler: &handler, cfg: &cfg, shutdown: &shutdown, peer: "127.0.0.1:9".parse().unwrap(), reserve };
    let mut io = Mem { input: input.to_vec(), output: Vec::new() };
    smol::block_on(serve_connection(&mut io, &ctx));
    let rejected = handler.rejected.into_inner().unwrap();
    (String::from_utf8(io.output).unwrap(), rejected)
}

/// A connection of the reserve answers one probe and closes; anything else gets the 503 of a
/// full connection table, unread.
#[test]
fn a_reserve_connection_answers_one_probe_only() {
    let (out, rejected) = serve_on(
        Style::Default,
        b"GET /health HTTP/1.1\r\nHost: a\r\n\r\nGET /health HTTP/1.1\r\nHost: a\r\n\r\n",
        true,
    );
    assert!(out.starts_with("HTTP/1.1 200 OK\r\n") && out.contains("\r\nConnection: close\r\n"), "{out}");
    assert_eq!(out.matches("HTTP/1.1").count(), 1, "one probe, then closed: {out}");
    assert!(rejected.is_empty(), "{rejected:?}");
    let (out, rejected) = serve_on(Style::Default, b"POST /v1/completions HTTP/1.1\r\nHost: a\r\n\r\n", true);
    assert!(out.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{out}");
    assert_eq!(rejected, [("/v1/completions".to_owned(), 503, "too_many_connections")]);
}

/// Answers nothing, ever; records when its future is dropped.
struct Stalls(std::sync::Arc<std::sync::atomic::AtomicBool>);

struct DropFlag(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Handler for Stalls {
    fn handle(&self, _: Request) -> Pin<Box<dyn Future<Output = Response> + Send + '_>> {
        let flag = DropFlag(self.0.clone());
        Box::pin(async move {
            let _flag = flag;
            future::pending::<Response>().await
        })
    }
}

/// A client that leaves while the handler works drops the handler's future (which cancels a
/// whole answer's generation) and ends the connection, unanswered.
#[test]
fn a_client_that_leaves_drops_the_handler_under_way() {
    let dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let handler = Stalls(dropped.clone());
    let (cfg, shutdown) = (HttpConfig::default(), Shutdown::new());
    let ctx = ConnCtx {
        handler: &handler,
        cfg: &cfg,
        shutdown: &shutdown,
        peer: "127.0.0.1:9".parse().unwrap(),
        reserve: false,
    };
    let mut io = Mem { input: b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(), output: Vec::new() };
    assert_eq!(smol::block_on(serve_connection(&mut io, &ctx)), ConnEnd::Closed);
    assert!(dropped.load(std::sync::atomic::Ordering::SeqCst), "the handler's future was dropped");
    assert!(io.output.is_empty(), "{:?}", String::from_utf8_lossy(&io.output));
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
