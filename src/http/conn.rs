//! One connection: read a head, read its body, call the handler, write the response; repeat while
//! the connection is kept alive. Runs over any `AsyncRead + AsyncWrite`, so the whole state
//! machine can be driven by a socket or, in tests and fuzzing, by bytes in memory.

use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::time::Instant;

use smol::future::{self, FutureExt as _};
use smol::io::{AsyncRead, AsyncWrite};
use smol::Timer;

use super::config::HttpConfig;
use super::error::HttpError;
use super::exec::Turn;
use super::io::{write_pair_timed, write_timed, ReadBuf};
use super::limits::{MAX_HEAD_BYTES, MAX_TARGET_BYTES};
use super::parse::{parse_head, ChunkedDecoder, Framing, Head};
use super::response::{self, ConnHeader, CONTINUE};
use super::shutdown::Shutdown;
use super::stream::StreamSink;
use super::{render_rejection, Body, Handler, Rejected, Request, Response};

/// Pending output is written out once it grows past this, even while pipelined requests remain.
const WRITE_BATCH_BYTES: usize = 64 * 1024;
/// Larger bodies are written with their head in one `writev` instead of being copied behind it
/// (a 13 KB `/metrics` body spent 7% of the I/O thread in `memmove`).
const COPY_BODY_MAX: usize = 4 * 1024;

/// How a connection ended, which tells the caller how to close the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnEnd {
    /// Orderly: every request read was answered.
    Closed,
    /// Closed after an error response; the client may still be sending (a refused body), so the
    /// caller should half-close and drain briefly, lest a reset destroy the response in flight.
    Linger,
}

/// What one connection needs from the server.
pub struct ConnCtx<'a> {
    pub handler: &'a dyn Handler,
    pub cfg: &'a HttpConfig,
    pub shutdown: &'a Shutdown,
    pub peer: SocketAddr,
    /// One of the connections held in reserve while the table is full: it answers one probe
    /// ([`Handler::is_probe`]) and closes, and refuses anything else with 503.
    pub reserve: bool,
}

enum ReadOutcome {
    Data,
    Eof,
    Timeout,
    Stopped,
}

/// What the request asked of its response.
#[derive(Clone, Copy)]
struct Asked {
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    version: u8,
    /// The client allows the connection to stay open.
    keep_alive: bool,
    /// A `HEAD` request: the head of the response only.
    head_only: bool,
}

struct Conn<'a, 'c, S> {
    io: &'a mut S,
    ctx: &'a ConnCtx<'c>,
    input: ReadBuf,
    out: Vec<u8>,
    turn: Turn,
    /// Method and path of the request in the handler, kept (in reused buffers) to report a panic.
    method: String,
    path: String,
    /// One timer per connection, re-armed only when a deadline comes earlier than it is set for:
    /// registering a timer for every keep-alive wait cost a quarter of the throughput.
    timer: Timer,
    /// When `timer` fires, if armed.
    armed: Option<Instant>,
    /// Resolves when shutdown starts; kept across waits so that it registers only once.
    stop: Pin<Box<dyn Future<Output = ()> + Send + 'c>>,
}

/// Serves requests on `io` until the client or the server ends the connection.
pub async fn serve_connection<S>(io: &mut S, ctx: &ConnCtx<'_>) -> ConnEnd
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut conn = Conn {
        io,
        ctx,
        input: ReadBuf::default(),
        out: Vec::with_capacity(1024),
        turn: Turn::default(),
        method: String::new(),
        path: String::new(),
        timer: Timer::never(),
        armed: None,
        stop: Box::pin(ctx.shutdown.triggered()),
    };
    let end = conn.run().await;
    // Best effort: a client that is gone cannot be told anything more.
    if !conn.out.is_empty() {
        let _ = conn.write_out().await;
    }
    end
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<'_, '_, S> {
    fn filled(&self) -> &[u8] {
        self.input.filled()
    }

    fn consume(&mut self, n: usize) {
        self.input.consume(n);
    }

    /// Writes pending output; false if the client is gone or too slow to take it.
    async fn write_out(&mut self) -> bool {
        let ok = write_timed(self.io, &self.out, self.ctx.cfg.write_timeout).await;
        self.out.clear();
        ok
    }

    /// Flushes pending output, then reads more input, giving up at `deadline` (and, if
    /// `watch_stop`, when a shutdown starts).
    async fn read_more(&mut self, deadline: Instant, watch_stop: bool) -> ReadOutcome {
        if !self.out.is_empty() && !self.write_out().await {
            return ReadOutcome::Eof;
        }
        if self.armed.is_none_or(|at| deadline < at) {
            self.timer.set_at(deadline);
            self.armed = Some(deadline);
        }
        let Conn { io, input, timer, armed, stop, .. } = self;
        let read = async {
            match input.read_from(*io).await {
                Ok(0) | Err(_) => ReadOutcome::Eof,
                Ok(_) => ReadOutcome::Data,
            }
        };
        let timeout = async {
            loop {
                (&mut *timer).await;
                *armed = None;
                if Instant::now() >= deadline {
                    return ReadOutcome::Timeout;
                }
                // Set for an earlier deadline than this wait's: wait on.
                timer.set_at(deadline);
                *armed = Some(deadline);
            }
        };
        let stop = async {
            if watch_stop {
                // Polled no more after this: the connection ends on `Stopped`.
                stop.as_mut().await;
                ReadOutcome::Stopped
            } else {
                future::pending().await
            }
        };
        let outcome = read.or(stop).or(timeout).await;
        if matches!(outcome, ReadOutcome::Data) {
            // Its responses went out in the flush above, so the yield delays none of them.
            self.turn.after_read(self.input.waited()).await;
        }
        outcome
    }

    /// Answers a request the server refuses itself, in the handler's rendering, and reports it.
    fn reject(&mut self, err: &HttpError, method: &str, path: &str, head_only: bool) {
        let rejected = Rejected { method, path, status: err.status(), error: err, peer: self.ctx.peer };
        let resp = render_rejection(self.ctx.handler, &rejected);
        response::write_rejection(&mut self.out, rejected.status, resp, head_only);
        self.ctx.handler.on_rejected(&rejected);
    }

    /// Serves one request after another until the connection ends.
    async fn run(&mut self) -> ConnEnd {
        let mut first = true;
        loop {
            if let Err(end) = self.exchange(first).await {
                return end;
            }
            first = false;
        }
    }

    /// One request and its response. `Err` ends the connection, saying how.
    async fn exchange(&mut self, first: bool) -> Result<(), ConnEnd> {
        let head = self.read_head(first).await?;
        if self.ctx.reserve && !self.ctx.handler.is_probe(&head.method, &head.path) {
            let err = HttpError::TooManyConnections { limit: self.ctx.cfg.max_connections };
            self.reject(&err, &head.method, &head.path, head.method == "HEAD");
            return Err(ConnEnd::Linger);
        }
        let body = self.read_body(&head).await?;
        let keep_alive = head.keep_alive && !self.ctx.reserve;
        let asked = Asked { version: head.version, keep_alive, head_only: head.method == "HEAD" };
        let resp = self.call_handler(head, body, asked.head_only).await?;
        self.turn.answered();
        self.write_response(resp, asked).await
    }

    /// Reads until a whole request head is there: an idle wait first (keep-alive; the
    /// connection's first request skips it), then the header timeout from the first byte.
    async fn read_head(&mut self, first: bool) -> Result<Head, ConnEnd> {
        let cfg = self.ctx.cfg;
        let mut idle = !first && self.filled().is_empty();
        let mut deadline = Instant::now() + if idle { cfg.idle_timeout } else { cfg.header_timeout };
        // Bytes of `filled()` already parsed as an incomplete head: a head can only complete
        // with a new LF, so a client dripping bytes does not make us reparse on each one.
        let mut checked = 0;
        loop {
            let buf = self.filled();
            if !buf.is_empty() && worth_parsing(buf, checked) {
                checked = buf.len();
                match parse_head(buf) {
                    Ok(Some((head, n))) => {
                        self.consume(n);
                        return Ok(head);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        self.reject(&e.error, &e.method, &e.path, false);
                        return Err(ConnEnd::Linger);
                    }
                }
            }
            if idle && !self.filled().is_empty() {
                idle = false;
                deadline = Instant::now() + cfg.header_timeout;
            }
            let watch_stop = self.filled().is_empty();
            match self.read_more(deadline, watch_stop).await {
                ReadOutcome::Data => {}
                ReadOutcome::Eof | ReadOutcome::Stopped => return Err(ConnEnd::Closed),
                ReadOutcome::Timeout if idle => return Err(ConnEnd::Closed),
                ReadOutcome::Timeout => {
                    let err = HttpError::HeadTimeout { millis: cfg.header_timeout.as_millis() };
                    self.reject(&err, "", "", false);
                    return Err(ConnEnd::Linger);
                }
            }
        }
    }

    /// Reads the body the head declares, bounded in size and time.
    async fn read_body(&mut self, head: &Head) -> Result<Vec<u8>, ConnEnd> {
        let cfg = self.ctx.cfg;
        let head_only = head.method == "HEAD";
        let deadline = Instant::now() + cfg.body_timeout;
        let send_continue = head.expect_continue && head.version == 1;
        let mut body = Vec::new();
        match head.framing {
            Framing::None => {}
            Framing::Length(len) => {
                if len > cfg.max_body_bytes as u64 {
                    let err = HttpError::BodyTooLarge { len, limit: cfg.max_body_bytes };
                    self.reject(&err, &head.method, &head.path, head_only);
                    return Err(ConnEnd::Linger);
                }
                let len = len as usize;
                if send_continue && self.filled().len() < len {
                    self.out.extend_from_slice(CONTINUE);
                }
                body.reserve_exact(len);
                loop {
                    let take = (len - body.len()).min(self.filled().len());
                    body.extend_from_slice(&self.filled()[..take]);
                    self.consume(take);
                    if body.len() == len {
                        break;
                    }
                    self.read_body_more(deadline, head).await?;
                }
            }
            Framing::Chunked => {
                if send_continue && self.filled().is_empty() {
                    self.out.extend_from_slice(CONTINUE);
                }
                let mut decoder = ChunkedDecoder::new(cfg.max_body_bytes);
                loop {
                    match decoder.decode(self.filled(), &mut body) {
                        Ok(n) => self.consume(n),
                        Err(err) => {
                            self.reject(&err, &head.method, &head.path, head_only);
                            return Err(ConnEnd::Linger);
                        }
                    }
                    if decoder.is_done() {
                        break;
                    }
                    self.read_body_more(deadline, head).await?;
                }
            }
        }
        Ok(body)
    }

    /// Reads more of a body; `Err` when the connection must end instead.
    async fn read_body_more(&mut self, deadline: Instant, head: &Head) -> Result<(), ConnEnd> {
        match self.read_more(deadline, false).await {
            ReadOutcome::Data => Ok(()),
            ReadOutcome::Eof | ReadOutcome::Stopped => Err(ConnEnd::Closed),
            ReadOutcome::Timeout => {
                let err = HttpError::BodyTimeout { millis: self.ctx.cfg.body_timeout.as_millis() };
                self.reject(&err, &head.method, &head.path, false);
                Err(ConnEnd::Linger)
            }
        }
    }

    /// Calls the handler, with a panic contained to this connection (answered with 500).
    async fn call_handler(&mut self, head: Head, body: Vec<u8>, head_only: bool) -> Result<Response, ConnEnd> {
        self.method.clear();
        self.method.push_str(&head.method);
        self.path.clear();
        self.path.push_str(&head.path);
        let req = Request {
            method: head.method,
            path: head.path,
            query: head.query,
            version: head.version,
            headers: head.headers,
            body,
            peer: self.ctx.peer,
        };
        let handler = self.ctx.handler;
        let call = async { Some(AssertUnwindSafe(async move { handler.handle(req).await }).catch_unwind().await) };
        // The socket is watched while the handler runs, as a stream's writer watches it: a
        // client that leaves while a whole answer is gathered drops the handler's future, which
        // cancels its generation at the next step instead of decoding for nobody.
        let (io, input) = (&mut *self.io, &mut self.input);
        let watch = async {
            loop {
                // Bytes of a pipelined next request are kept, within the head bound.
                if input.filled().len() > MAX_HEAD_BYTES {
                    future::pending::<()>().await;
                }
                if let Ok(0) | Err(_) = input.read_from(io).await {
                    return None;
                }
            }
        };
        match call.or(watch).await {
            None => Err(ConnEnd::Closed),
            Some(Ok(resp)) => Ok(resp),
            Some(Err(_)) => {
                let (method, path) = (std::mem::take(&mut self.method), std::mem::take(&mut self.path));
                self.reject(&HttpError::HandlerPanicked, &method, &path, head_only);
                Err(ConnEnd::Linger)
            }
        }
    }

    /// Writes the handler's response: a whole body after its head, or a stream item by item.
    /// `Err` when the connection ends with it.
    async fn write_response(&mut self, resp: Response, asked: Asked) -> Result<(), ConnEnd> {
        // A shutdown that began while the handler ran closes the connection.
        let keep_alive = asked.keep_alive && !self.ctx.shutdown.is_triggered();
        let has_body = response::status_allows_body(resp.status);
        let conn_header = match (keep_alive, asked.version) {
            (true, 0) => ConnHeader::KeepAlive,
            (true, _) => ConnHeader::Omit,
            (false, _) => ConnHeader::Close,
        };
        // HTTP/1.0 has no chunked coding: a streamed body ends with the connection.
        let chunked = asked.version == 1;
        let (framing, conn_header) = match (&resp.body, has_body, chunked) {
            (_, false, _) => (response::Framing::NoBody, conn_header),
            (Body::Full(bytes), true, _) => (response::Framing::Length(bytes.len()), conn_header),
            (Body::Stream(..), true, true) => (response::Framing::Chunked, conn_header),
            (Body::Stream(..), true, false) => (response::Framing::UntilClose, ConnHeader::Close),
        };
        response::write_head(&mut self.out, resp.status, &resp.headers, framing, conn_header);
        match resp.body {
            Body::Full(bytes) => {
                if has_body && !asked.head_only {
                    self.write_full_body(&bytes).await?;
                }
                if !keep_alive {
                    return Err(ConnEnd::Closed);
                }
                if self.out.len() > WRITE_BATCH_BYTES && !self.write_out().await {
                    return Err(ConnEnd::Closed);
                }
            }
            Body::Stream(rx, producer) => {
                if !has_body || asked.head_only {
                    drop((rx, producer));
                } else if !self.stream(rx, producer, chunked).await || !chunked {
                    return Err(ConnEnd::Closed);
                }
                if !keep_alive || self.ctx.shutdown.is_forced() {
                    return Err(ConnEnd::Closed);
                }
            }
        }
        Ok(())
    }

    /// Streams a body after the head already in `out`; false if the connection cannot continue.
    async fn stream(
        &mut self,
        rx: async_channel::Receiver<Vec<u8>>,
        producer: Option<super::Producer>,
        chunked: bool,
    ) -> bool {
        let sink = StreamSink {
            io: &mut *self.io,
            input: &mut self.input,
            out: &mut self.out,
            write_timeout: self.ctx.cfg.write_timeout,
            shutdown: self.ctx.shutdown,
        };
        sink.send(rx, producer, chunked).await
    }

    /// Puts a whole body behind the head already in `out`: copied when small, else written with
    /// the head in one `writev`.
    async fn write_full_body(&mut self, bytes: &[u8]) -> Result<(), ConnEnd> {
        if bytes.len() <= COPY_BODY_MAX {
            self.out.extend_from_slice(bytes);
            return Ok(());
        }
        let timeout = self.ctx.cfg.write_timeout;
        let ok = write_pair_timed(self.io, &self.out, bytes, timeout).await;
        self.out.clear();
        if ok {
            Ok(())
        } else {
            Err(ConnEnd::Closed)
        }
    }
}

/// Whether `buf` may parse differently from its first `checked` bytes: first look, a new line
/// end, or a size bound just crossed.
fn worth_parsing(buf: &[u8], checked: usize) -> bool {
    let crossed = |bound: usize| checked <= bound && buf.len() > bound;
    checked == 0 || buf[checked..].contains(&b'\n') || crossed(MAX_TARGET_BYTES) || crossed(MAX_HEAD_BYTES)
}

#[cfg(test)]
#[path = "conn_tests.rs"]
mod tests;
