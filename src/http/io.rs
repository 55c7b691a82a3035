//! Socket plumbing for a connection: the reusable read buffer and writes bounded in time.

use std::future::poll_fn;
use std::io::IoSlice;
use std::pin::Pin;
use std::time::Duration;

use smol::future::FutureExt as _;
use smol::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _};
use smol::Timer;

/// Initial size of a connection's read buffer, and how much it grows by at least.
const READ_CHUNK: usize = 16 * 1024;
/// The read buffer grows when less than this is free at its end.
const MIN_READ: usize = 4 * 1024;

/// Input read but not yet consumed. The vector stays initialised to its full length, so reads go
/// straight into its spare end without zeroing it again for every read.
#[derive(Default)]
pub struct ReadBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Whether the last read found no data at first and so had to wait (the task yielded).
    waited: bool,
}

impl ReadBuf {
    pub fn filled(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    pub fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Reads once into the spare end, first moving unread bytes to the front.
    pub async fn read_from<S: AsyncRead + Unpin>(&mut self, io: &mut S) -> std::io::Result<usize> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() - self.end < MIN_READ {
            let grown = (self.buf.len() * 2).max(self.end + READ_CHUNK);
            self.buf.resize(grown, 0);
        }
        let buf = &mut self.buf[self.end..];
        let mut first = true;
        let n = poll_fn(|cx| {
            let polled = Pin::new(&mut *io).poll_read(cx, buf);
            self.waited = !first || polled.is_pending();
            first = false;
            polled
        })
        .await?;
        self.end += n;
        Ok(n)
    }

    pub fn waited(&self) -> bool {
        self.waited
    }
}

/// Writes all of `head` then `body` within the write timeout, in one `writev` when the socket
/// takes it all; false if the client is gone or too slow.
pub async fn write_pair_timed<S: AsyncWrite + Unpin>(io: &mut S, head: &[u8], body: &[u8], timeout: Duration) -> bool {
    let write = async {
        let (mut head, mut body) = (head, body);
        while !head.is_empty() || !body.is_empty() {
            let bufs = [IoSlice::new(head), IoSlice::new(body)];
            let n = match io.write_vectored(&bufs).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => n,
            };
            let from_head = n.min(head.len());
            head = &head[from_head..];
            body = &body[n - from_head..];
        }
        io.flush().await.is_ok()
    };
    write.or(expire(timeout)).await
}

async fn expire(timeout: Duration) -> bool {
    Timer::after(timeout).await;
    false
}

/// Writes all of `buf` within the write timeout; false if the client is gone or too slow.
pub async fn write_timed<S: AsyncWrite + Unpin>(io: &mut S, buf: &[u8], timeout: Duration) -> bool {
    buf.is_empty() || write_pair_timed(io, buf, &[], timeout).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::{Context, Poll};

    /// Takes at most three bytes per write, so that every split of head and body happens.
    struct Trickle(Vec<u8>);

    impl AsyncWrite for Trickle {
        fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
            let n = buf.len().min(3);
            self.0.extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[test]
    fn write_pair_survives_partial_writes() {
        let t = Duration::from_secs(5);
        for (head, body) in [(&b"head:"[..], &b"the body"[..]), (b"", b"only body"), (b"h", b"")] {
            let mut w = Trickle(Vec::new());
            assert!(smol::block_on(write_pair_timed(&mut w, head, body, t)));
            assert_eq!(w.0, [head, body].concat());
        }
    }
}
