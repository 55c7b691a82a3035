//! A whole connection fed arbitrary bytes in memory, in reads of fuzzer-chosen sizes: never
//! panics or hangs, and everything it writes is a sequence of HTTP/1.1 responses.

use std::pin::Pin;
use std::task::{Context, Poll};

use mtplx_lite::http::conn::{serve_connection, ConnCtx};
use mtplx_lite::http::{Handler, HttpConfig, Request, Response, Shutdown};
use smol::io::{AsyncRead, AsyncWrite};

struct Mem<'a> {
    input: &'a [u8],
    step: usize,
    output: Vec<u8>,
}

impl AsyncRead for Mem<'_> {
    fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut [u8]) -> Poll<std::io::Result<usize>> {
        let n = self.step.min(buf.len()).min(self.input.len());
        buf[..n].copy_from_slice(&self.input[..n]);
        self.input = &self.input[n..];
        Poll::Ready(Ok(n))
    }
}

impl AsyncWrite for Mem<'_> {
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

/// Echoes the body; `/stream` streams it back in pieces; `/panic` panics.
struct Echo;

impl Handler for Echo {
    fn handle(&self, req: Request) -> Pin<Box<dyn std::future::Future<Output = Response> + Send + '_>> {
        Box::pin(async move {
            match req.path.as_str() {
                "/panic" => panic!("fuzz handler panic"),
                "/stream" => {
                    let (tx, rx) = async_channel::unbounded();
                    for piece in req.body.chunks(7) {
                        let _ = tx.try_send(piece.to_vec());
                    }
                    Response::sse(rx)
                }
                _ => Response::new(200, "application/octet-stream", req.body),
            }
        })
    }
}

/// The handler's deliberate panic is caught by the server; keep libfuzzer's abort-on-panic hook
/// for every other panic.
fn quiet_handler_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<&str>() != Some(&"fuzz handler panic") {
                previous(info);
            }
        }));
    });
}

/// One input through the target: panics when an invariant breaks.
pub fn run(data: &[u8]) {
    quiet_handler_panics();
    let Some((&step, input)) = data.split_first() else {
        return;
    };
    let cfg = HttpConfig { max_body_bytes: 1024, ..HttpConfig::default() };
    let shutdown = Shutdown::new();
    let ctx = ConnCtx {
        handler: &Echo,
        cfg: &cfg,
        shutdown: &shutdown,
        peer: "127.0.0.1:9".parse().unwrap(),
        reserve: false,
    };
    let mut io = Mem { input, step: step as usize + 1, output: Vec::new() };
    smol::block_on(serve_connection(&mut io, &ctx));
    assert!(io.output.is_empty() || io.output.starts_with(b"HTTP/1.1 "));
}
