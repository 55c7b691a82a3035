//! A streamed response body: every item written and flushed as it arrives, while the socket is
//! watched, so that a client that goes away drops the receiver (and so cancels the producer)
//! at once instead of at the next item.

use std::time::Duration;

use smol::future::{self, FutureExt as _};
use smol::io::{AsyncRead, AsyncWrite};

use super::io::{write_timed, ReadBuf};
use super::limits::MAX_HEAD_BYTES;
use super::response::{self, LAST_CHUNK};
use super::shutdown::Shutdown;
use super::Producer;

enum StreamEvent {
    Item(Option<Vec<u8>>),
    ProducerDone,
    ClientGone,
    ClientSent,
    Forced,
}

/// What a stream writes through: the connection's socket, its input (bytes of a pipelined next
/// request are kept there) and its output buffer, which holds the response head at the start.
pub struct StreamSink<'a, S> {
    pub io: &'a mut S,
    pub input: &'a mut ReadBuf,
    pub out: &'a mut Vec<u8>,
    pub write_timeout: Duration,
    pub shutdown: &'a Shutdown,
}

impl<S: AsyncRead + AsyncWrite + Unpin> StreamSink<'_, S> {
    /// Writes pending output; false if the client is gone or too slow to take it.
    async fn flush(&mut self) -> bool {
        let ok = write_timed(self.io, self.out, self.write_timeout).await;
        self.out.clear();
        ok
    }

    /// Streams the receiver's items (chunked, or raw for HTTP/1.0) until the sender is dropped
    /// or shutdown is forced, then ends the body. False if the connection cannot continue.
    pub async fn send(
        mut self,
        rx: async_channel::Receiver<Vec<u8>>,
        mut producer: Option<Producer>,
        chunked: bool,
    ) -> bool {
        if !self.flush().await {
            return false;
        }
        let shutdown = self.shutdown;
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
                let (io, input) = (&mut *self.io, &mut *self.input);
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
                        response::write_chunk(self.out, &data);
                    } else {
                        self.out.extend_from_slice(&data);
                    }
                    if !self.flush().await {
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
        self.flush().await
    }
}
