//! HTTP/1.1 from bytes to requests and back: a hand-rolled server on smol + httparse.
//!
//! The contract with the layer above is small: the server parses a [`Request`], hands it to a
//! [`Handler`], and writes the [`Response`] it gets back (fixed length, chunked, or SSE).
//! Requests the server rejects itself (limits, smuggling, timeouts) never reach `handle`: the
//! server picks the status and the reason ([`HttpError`]), the handler how the answer looks
//! ([`Handler::rejection`]) and hears of it through [`Handler::on_rejected`] to count it.

#![forbid(unsafe_code)]

pub mod config;
pub mod conn;
pub mod date;
pub mod error;
mod exec;
mod io;
pub mod limits;
pub mod parse;
pub mod response;
pub mod server;
pub mod shutdown;
mod stream;

pub use config::{HttpConfig, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONNECTIONS, DEFAULT_SHUTDOWN_GRACE};
pub use error::HttpError;
pub use server::serve;
pub use shutdown::{shutdown_on_signals, Shutdown};

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;

/// One parsed request, body fully read (bodies are bounded by `--max-body-bytes`).
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// The path part of the request target, percent-encoding untouched (`/v1/models`).
    pub path: String,
    /// The query string without `?`, if any.
    pub query: Option<String>,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub version: u8,
    /// Header names as sent; look them up with [`Request::header`] (case-insensitive).
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
    pub peer: SocketAddr,
}

impl Request {
    /// The first header of that name (ASCII case-insensitive), as UTF-8 if it is valid UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).and_then(|(_, v)| std::str::from_utf8(v).ok())
    }

    /// The value of one query parameter (no percent-decoding: our parameters are plain numbers).
    pub fn query_param(&self, key: &str) -> Option<&str> {
        self.query.as_deref()?.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k == key).then_some(v)
        })
    }
}

/// How a response body is sent.
pub enum Body {
    /// Sent with `Content-Length`.
    Full(Bytes),
    /// Sent with `Transfer-Encoding: chunked`; every item is written and flushed as it arrives
    /// (one SSE event per item for `text/event-stream`). The stream ends when the sender drops.
    /// The producer, when given, is the future that feeds the channel: the connection's own
    /// task polls it beside the socket (an item then crosses no thread; a producer spawned on
    /// another thread costs a cross-thread wake-up per item) and drops it when the client goes.
    Stream(async_channel::Receiver<Vec<u8>>, Option<Producer>),
}

/// The bytes of a whole body: owned by the response, or shared with a cache that serves the
/// same body again (then no copy is made per response).
pub enum Bytes {
    Owned(Vec<u8>),
    Shared(std::sync::Arc<[u8]>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Owned(v) => v,
            Bytes::Shared(a) => a,
        }
    }
}

impl From<Vec<u8>> for Bytes {
    fn from(v: Vec<u8>) -> Bytes {
        Bytes::Owned(v)
    }
}

/// A future that feeds a [`Body::Stream`].
pub type Producer = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Body::Full(b) => write!(f, "Full({} bytes)", b.len()),
            Body::Stream(..) => write!(f, "Stream"),
        }
    }
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    /// Extra headers. The server adds `Date`, `Content-Length` / `Transfer-Encoding` and
    /// `Connection` itself; handlers must not.
    pub headers: Vec<(String, String)>,
    pub body: Body,
}

impl Response {
    pub fn new(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Response {
        Response::full(status, content_type, Bytes::Owned(body.into()))
    }

    /// A response whose body is shared with a cache (sent without copying it).
    pub fn shared(status: u16, content_type: &str, body: std::sync::Arc<[u8]>) -> Response {
        Response::full(status, content_type, Bytes::Shared(body))
    }

    fn full(status: u16, content_type: &str, body: Bytes) -> Response {
        Response { status, headers: vec![("Content-Type".into(), content_type.into())], body: Body::Full(body) }
    }

    pub fn json<T: serde::Serialize + ?Sized>(status: u16, value: &T) -> Response {
        Response::new(status, "application/json", serde_json::to_vec(value).unwrap_or_default())
    }

    /// A Server-Sent Events response; each item the receiver yields is flushed at once.
    pub fn sse(rx: async_channel::Receiver<Vec<u8>>) -> Response {
        Response::sse_body(Body::Stream(rx, None))
    }

    /// [`Response::sse`] whose items come from `producer`, run by the connection's own task.
    pub fn sse_produced(rx: async_channel::Receiver<Vec<u8>>, producer: Producer) -> Response {
        Response::sse_body(Body::Stream(rx, Some(producer)))
    }

    fn sse_body(body: Body) -> Response {
        Response {
            status: 200,
            headers: vec![
                ("Content-Type".into(), "text/event-stream".into()),
                ("Cache-Control".into(), "no-cache".into()),
                ("X-Accel-Buffering".into(), "no".into()),
            ],
            body,
        }
    }

    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> Response {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// What the server knows of a request it answered itself, without calling `handle`.
#[derive(Debug, Clone)]
pub struct Rejected<'a> {
    /// The method, or `""` when the head could not be parsed that far.
    pub method: &'a str,
    /// The raw path, or `""` when the head could not be parsed that far.
    pub path: &'a str,
    pub status: u16,
    /// Why: its text says what was wrong and the bound it broke, its `code()` names it.
    pub error: &'a HttpError,
    pub peer: SocketAddr,
}

/// The layer above the server. Implemented by `api::App`.
pub trait Handler: Send + Sync + 'static {
    fn handle(&self, req: Request) -> Pin<Box<dyn Future<Output = Response> + Send + '_>>;

    /// The answer to a request the server refuses itself (limits, parse errors, timeouts, a
    /// handler panic), so that it looks like the handler's own errors. The server keeps
    /// `rejected.status`, sends only a [`Body::Full`] (none to `HEAD`), frames it and closes the
    /// connection. The default is the reason as plain text.
    fn rejection(&self, rejected: &Rejected<'_>) -> Response {
        plain_rejection(rejected)
    }

    /// Called for every request the server answers itself (4xx/5xx from limits, parse errors,
    /// timeouts, and 500 after a handler panic), so that it can be counted.
    fn on_rejected(&self, _rejected: &Rejected<'_>) {}

    /// Whether a request is a short probe (liveness, a metrics scrape) that the connections
    /// held in reserve may serve while the connection table is full. None by default.
    fn is_probe(&self, _method: &str, _path: &str) -> bool {
        false
    }
}

/// A refusal's reason as plain text: the default [`Handler::rejection`].
pub fn plain_rejection(rejected: &Rejected<'_>) -> Response {
    let text = format!("{}\n", rejected.error);
    Response::new(rejected.status, "text/plain; charset=utf-8", text)
}

/// The handler's rendering of a refusal. It runs outside the handler's panic guard, so a panic
/// falls back to plain text rather than taking the I/O thread down.
fn render_rejection(handler: &dyn Handler, rejected: &Rejected<'_>) -> Response {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler.rejection(rejected)))
        .unwrap_or_else(|_| plain_rejection(rejected))
}
