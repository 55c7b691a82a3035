//! A streamed answer on the wire: its pieces as SSE chunks, raced against the request's
//! deadline and the client leaving, with a `: keep-alive` comment through long silences. The
//! chat routes' turn streams wait with the same [`KeepAlive`].

use super::generation::{Generation, Kind, Piece};
use super::idle_timer::{IdleTimer, WallTimer};
use super::state::InFlightGuard;
use crate::engine::Event;
use std::time::{Duration, Instant};

// One `Step` lives on the stack per loop turn; boxing the event would allocate per token.
#[allow(clippy::large_enum_variant)]
enum Step {
    Event(Result<Event, async_channel::RecvError>),
    /// The request's deadline passed (`--request-timeout`).
    Deadline,
    Idle,
    ClientGone,
}

/// Drives a streamed answer into `out` (one SSE event per chunk). Returns when the answer is
/// complete or the client is gone; `guard` keeps the request counted in flight until then.
/// `keep_alive`: see [`KeepAlive`].
pub async fn stream(gen: Generation, out: async_channel::Sender<Vec<u8>>, guard: InFlightGuard, keep_alive: Duration) {
    stream_every(gen, out, guard, keep_alive, WallTimer::new()).await
}

/// [`stream`] with its keep-alives timed by `idle`.
pub(super) async fn stream_every(
    mut gen: Generation,
    out: async_channel::Sender<Vec<u8>>,
    guard: InFlightGuard,
    keep_alive: Duration,
    idle: impl IdleTimer,
) {
    let _guard = guard;
    let mut keep = KeepAlive::with_timer(keep_alive, idle);
    let now = keep.now();
    if gen.kind == Kind::Chat && out.send(gen.chunk(None, true, &[], None)).await.is_err() {
        return;
    }
    keep.sent_at(now);
    while let Some(piece) = keep.next(&mut gen, &out).await {
        let (bytes, done) = match piece {
            Piece::Delta { text, logprobs } => (gen.chunk(Some(&text), false, &logprobs, None), false),
            Piece::ToolCall { index, id, name, arguments } => {
                (gen.tool_call_chunks(index, &id, name.as_deref(), &arguments), false)
            }
            Piece::End(end) => {
                let mut b = gen.chunk(None, false, &[], Some(&end));
                if gen.params.include_usage {
                    b.extend_from_slice(&gen.usage_chunk());
                }
                b.extend_from_slice(b"data: [DONE]\n\n");
                (b, true)
            }
        };
        let now = keep.now();
        if out.send(bytes).await.is_err() || done {
            return;
        }
        keep.sent_at(now);
    }
}

/// An SSE comment: every client skips it.
pub const KEEP_ALIVE_COMMENT: &[u8] = b": keep-alive\n\n";

/// What every streamed route waits with between pieces: the engine's next event, the request's
/// deadline and the client leaving, raced; and a beat (a `: keep-alive` comment, or the route's
/// own, such as Anthropic's `ping` event) after each `every` without output (a long prefill),
/// so that proxies and clients keep the stream open.
pub struct KeepAlive<T: IdleTimer = WallTimer> {
    every: Duration,
    beat: &'static [u8],
    // One keep-alive timer for the whole stream, moved only when it fires (see `WallTimer`).
    // The deadline is the generation's own single timer, raced in `recv_event`.
    idle: T,
    last_sent: Instant,
}

impl KeepAlive {
    pub fn new(every: Duration) -> KeepAlive {
        KeepAlive::with_timer(every, WallTimer::new())
    }
}

impl<T: IdleTimer> KeepAlive<T> {
    pub fn with_timer(every: Duration, mut idle: T) -> KeepAlive<T> {
        let last_sent = idle.now();
        idle.set_at(last_sent + every);
        KeepAlive { every, beat: KEEP_ALIVE_COMMENT, idle, last_sent }
    }

    /// Sends `beat` through silences instead of the comment.
    pub fn with_beat(mut self, beat: &'static [u8]) -> KeepAlive<T> {
        self.beat = beat;
        self
    }

    /// Now on the keep-alive's clock. Read it before sending an output and pass it to
    /// [`sent_at`](Self::sent_at), so that a reader who sees the output knows the silence after
    /// it counts from no later than that.
    pub fn now(&self) -> Instant {
        self.idle.now()
    }

    /// Output was sent at `at`: the next keep-alive is a whole `every` after it.
    pub fn sent_at(&mut self, at: Instant) {
        self.last_sent = at;
    }

    /// Output was just sent.
    pub fn sent(&mut self) {
        self.last_sent = self.idle.now();
    }

    /// The generation's next piece, or `None` once the client is gone.
    pub async fn next(&mut self, gen: &mut Generation, out: &async_channel::Sender<Vec<u8>>) -> Option<Piece> {
        loop {
            if let Some(piece) = gen.take_queued() {
                return Some(piece);
            }
            let idle = &mut self.idle;
            let step = smol::future::or(
                smol::future::or(async { gen.recv_event().await.map_or(Step::Deadline, Step::Event) }, async {
                    out.closed().await;
                    Step::ClientGone
                }),
                async {
                    idle.wait().await;
                    Step::Idle
                },
            )
            .await;
            match step {
                Step::Event(ev) => gen.on_event(ev),
                Step::Deadline => gen.time_out(),
                Step::Idle => {
                    let now = self.idle.now();
                    if now.saturating_duration_since(self.last_sent) >= self.every {
                        if out.send(self.beat.to_vec()).await.is_err() {
                            return None;
                        }
                        self.last_sent = now;
                    }
                    self.idle.set_at(self.last_sent + self.every);
                }
                Step::ClientGone => return None,
            }
        }
    }
}
