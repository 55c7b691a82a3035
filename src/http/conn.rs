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
use super::parse::{parse_head, ChunkedDecoder, Framing};
use super::response::{self, ConnHeader, CONTINUE, LAST_CHUNK};
use super::shutdown::Shutdown;
use super::{Body, Handler, Rejected, Request};

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
}

enum ReadOutcome {
    Data,
    Eof,
    Timeout,
    Stopped,
}

enum StreamEvent {
    Item(Option<Vec<u8>>),
    ProducerDone,
    ClientGone,
    ClientSent,
    Forced,
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
        let Conn {
            io,
            input,
            timer,
            armed,
            stop,
            ..
        } = self;
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

    /// Answers a request the server refuses itself, and reports it to the handler.
    fn reject(&mut self, err: &HttpError, method: &str, path: &str, head_only: bool) {
        response::write_error(&mut self.out, err, head_only);
        let rejected = Rejected {
            method,
            path,
            status: err.status(),
            peer: self.ctx.peer,
        };
        self.ctx.handler.on_rejected(&rejected);
    }

    async fn run(&mut self) -> ConnEnd {
        let cfg = self.ctx.cfg;
        let mut first = true;
        loop {
            // The head: idle wait (keep-alive), then the header timeout from the first byte.
            let mut idle = !first && self.filled().is_empty();
            let now = Instant::now();
            let mut deadline = now
                + if idle {
                    cfg.idle_timeout
                } else {
                    cfg.header_timeout
                };
            // Bytes of `filled()` already parsed as an incomplete head: a head can only complete
            // with a new LF, so a client dripping bytes does not make us reparse on each one.
            let mut checked = 0;
            let head = loop {
                let buf = self.filled();
                if !buf.is_empty() && worth_parsing(buf, checked) {
                    checked = buf.len();
                    match parse_head(buf) {
                        Ok(Some((head, n))) => {
                            self.consume(n);
                            break head;
                        }
                        Ok(None) => {}
                        Err(e) => {
                            self.reject(&e.error, &e.method, &e.path, false);
                            return ConnEnd::Linger;
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
                    ReadOutcome::Eof | ReadOutcome::Stopped => return ConnEnd::Closed,
                    ReadOutcome::Timeout if idle => return ConnEnd::Closed,
                    ReadOutcome::Timeout => {
                        let err = HttpError::HeadTimeout {
                            millis: cfg.header_timeout.as_millis(),
                        };
                        self.reject(&err, "", "", false);
                        return ConnEnd::Linger;
                    }
                }
            };
            first = false;
            let head_only = head.method == "HEAD";

            // The body, bounded in size and time.
            let body_deadline = Instant::now() + cfg.body_timeout;
            let send_continue = head.expect_continue && head.version == 1;
            let mut body = Vec::new();
            match head.framing {
                Framing::None => {}
                Framing::Length(len) => {
                    if len > cfg.max_body_bytes as u64 {
                        let err = HttpError::BodyTooLarge {
                            len,
                            limit: cfg.max_body_bytes,
                        };
                        self.reject(&err, &head.method, &head.path, head_only);
                        return ConnEnd::Linger;
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
                        if let Some(end) = self
                            .read_body_more(body_deadline, &head.method, &head.path)
                            .await
                        {
                            return end;
                        }
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
                                return ConnEnd::Linger;
                            }
                        }
                        if decoder.is_done() {
                            break;
                        }
                        if let Some(end) = self
                            .read_body_more(body_deadline, &head.method, &head.path)
                            .await
                        {
                            return end;
                        }
                    }
                }
            }

            // The handler, with panics contained to this connection.
            let client_keep_alive = head.keep_alive;
            let version = head.version;
            self.method.clear();
            self.method.push_str(&head.method);
            self.path.clear();
            self.path.push_str(&head.path);
            let req = Request {
                method: head.method,
                path: head.path,
                query: head.query,
                version,
                headers: head.headers,
                body,
                peer: self.ctx.peer,
            };
            let handler = self.ctx.handler;
            let resp = match AssertUnwindSafe(async move { handler.handle(req).await })
                .catch_unwind()
                .await
            {
                Ok(resp) => resp,
                Err(_) => {
                    let (method, path) = (
                        std::mem::take(&mut self.method),
                        std::mem::take(&mut self.path),
                    );
                    self.reject(&HttpError::HandlerPanicked, &method, &path, head_only);
                    return ConnEnd::Linger;
                }
            };

            self.turn.answered();
            // The response. A shutdown that began while the handler ran closes the connection.
            let keep_alive = client_keep_alive && !self.ctx.shutdown.is_triggered();
            let has_body = response::status_allows_body(resp.status);
            let conn_header = match (keep_alive, version) {
                (true, 0) => ConnHeader::KeepAlive,
                (true, _) => ConnHeader::Omit,
                (false, _) => ConnHeader::Close,
            };
            match resp.body {
                Body::Full(bytes) => {
                    let framing = if has_body {
                        response::Framing::Length(bytes.len())
                    } else {
                        response::Framing::NoBody
                    };
                    response::write_head(
                        &mut self.out,
                        resp.status,
                        &resp.headers,
                        framing,
                        conn_header,
                    );
                    if has_body && !head_only {
                        if bytes.len() > COPY_BODY_MAX {
                            let (out, timeout) = (&self.out, cfg.write_timeout);
                            let ok = write_pair_timed(self.io, out, &bytes, timeout).await;
                            self.out.clear();
                            if !ok {
                                return ConnEnd::Closed;
                            }
                        } else {
                            self.out.extend_from_slice(&bytes);
                        }
                    }
                    if !keep_alive {
                        return ConnEnd::Closed;
                    }
                    if self.out.len() > WRITE_BATCH_BYTES && !self.write_out().await {
                        return ConnEnd::Closed;
                    }
                }
                Body::Stream(rx, producer) => {
                    // HTTP/1.0 has no chunked coding: the body ends with the connection.
                    let chunked = version == 1;
                    let (framing, conn_header) = match (has_body, chunked) {
                        (false, _) => (response::Framing::NoBody, conn_header),
                        (true, true) => (response::Framing::Chunked, conn_header),
                        (true, false) => (response::Framing::UntilClose, ConnHeader::Close),
                    };
                    response::write_head(
                        &mut self.out,
                        resp.status,
                        &resp.headers,
                        framing,
                        conn_header,
                    );
                    if !has_body || head_only {
                        drop((rx, producer));
                    } else if !self.stream(rx, producer, chunked).await || !chunked {
                        return ConnEnd::Closed;
                    }
                    if !keep_alive || self.ctx.shutdown.is_forced() {
                        return ConnEnd::Closed;
                    }
                }
            }
        }
    }

    /// Reads more of a body; `Some(end)` when the connection must end instead.
    async fn read_body_more(
        &mut self,
        deadline: Instant,
        method: &str,
        path: &str,
    ) -> Option<ConnEnd> {
        match self.read_more(deadline, false).await {
            ReadOutcome::Data => None,
            ReadOutcome::Eof | ReadOutcome::Stopped => Some(ConnEnd::Closed),
            ReadOutcome::Timeout => {
                let err = HttpError::BodyTimeout {
                    millis: self.ctx.cfg.body_timeout.as_millis(),
                };
                self.reject(&err, method, path, false);
                Some(ConnEnd::Linger)
            }
        }
    }

    /// Streams a body item by item, each written and flushed at once. Watches the socket while
    /// waiting, so that a client that goes away drops the receiver (and so cancels the producer)
    /// promptly. Returns false if the connection cannot continue.
    async fn stream(
        &mut self,
        rx: async_channel::Receiver<Vec<u8>>,
        mut producer: Option<super::Producer>,
        chunked: bool,
    ) -> bool {
        if !self.write_out().await {
            return false;
        }
        let shutdown = self.ctx.shutdown;
        loop {
            let event = {
                let item = async { StreamEvent::Item(rx.recv().await.ok()) };
                let produce = async {
                    match producer.as_mut() {
                        Some(p) => {
                            p.as_mut().await;
                            StreamEvent::ProducerDone
                        }
                        None => future::pending().await,
                    }
                };
                let (io, input) = (&mut *self.io, &mut self.input);
                let watch = async {
                    // Bytes of a pipelined next request are kept, within the head bound.
                    if input.filled().len() > MAX_HEAD_BYTES {
                        future::pending::<()>().await;
                    }
                    match input.read_from(io).await {
                        Ok(0) | Err(_) => StreamEvent::ClientGone,
                        Ok(_) => StreamEvent::ClientSent,
                    }
                };
                let forced = async {
                    shutdown.forced().await;
                    StreamEvent::Forced
                };
                item.or(produce).or(forced).or(watch).await
            };
            match event {
                StreamEvent::Item(Some(data)) => {
                    if chunked {
                        response::write_chunk(&mut self.out, &data);
                    } else {
                        self.out.extend_from_slice(&data);
                    }
                    if !self.write_out().await {
                        return false;
                    }
                }
                StreamEvent::ProducerDone => producer = None,
                StreamEvent::Item(None) | StreamEvent::Forced => break,
                StreamEvent::ClientSent => {}
                StreamEvent::ClientGone => return false,
            }
        }
        drop((rx, producer));
        if chunked {
            self.out.extend_from_slice(LAST_CHUNK);
        }
        self.write_out().await
    }
}

/// Whether `buf` may parse differently from its first `checked` bytes: first look, a new line
/// end, or a size bound just crossed.
fn worth_parsing(buf: &[u8], checked: usize) -> bool {
    let crossed = |bound: usize| checked <= bound && buf.len() > bound;
    checked == 0
        || buf[checked..].contains(&b'\n')
        || crossed(MAX_TARGET_BYTES)
        || crossed(MAX_HEAD_BYTES)
}
