//! Graceful shutdown: a clonable handle with two stages, `stop` (stop accepting, close idle
//! connections, finish in-flight responses) and `force` (grace expired: end open streams).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_channel::{Receiver, Sender};

/// One latch that many tasks can wait on: closing the channel wakes every waiter at once.
struct Latch {
    set: AtomicBool,
    tx: Mutex<Option<Sender<()>>>,
    rx: Receiver<()>,
}

impl Latch {
    fn new() -> Latch {
        let (tx, rx) = async_channel::bounded(1);
        Latch { set: AtomicBool::new(false), tx: Mutex::new(Some(tx)), rx }
    }

    fn set(&self) {
        self.set.store(true, Ordering::SeqCst);
        // Dropping the only sender closes the channel, which wakes every `recv`.
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    fn is_set(&self) -> bool {
        self.set.load(Ordering::SeqCst)
    }

    async fn wait(&self) {
        if !self.is_set() {
            let _ = self.rx.recv().await;
        }
    }
}

/// A handle to shut the server down; clones share the same state.
#[derive(Clone)]
pub struct Shutdown {
    stop: Arc<Latch>,
    force: Arc<Latch>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown::new()
    }
}

impl std::fmt::Debug for Shutdown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shutdown").field("stopping", &self.is_triggered()).field("forced", &self.is_forced()).finish()
    }
}

impl Shutdown {
    pub fn new() -> Shutdown {
        Shutdown { stop: Arc::new(Latch::new()), force: Arc::new(Latch::new()) }
    }

    /// Starts a graceful shutdown: stop accepting, let in-flight responses finish.
    pub fn trigger(&self) {
        self.stop.set();
    }

    pub fn is_triggered(&self) -> bool {
        self.stop.is_set()
    }

    /// Resolves once `trigger` has been called.
    pub async fn triggered(&self) {
        self.stop.wait().await
    }

    /// Ends the grace period at once: streaming responses are terminated cleanly and closed.
    /// Also implies `trigger`.
    pub fn force(&self) {
        self.stop.set();
        self.force.set();
    }

    pub fn is_forced(&self) -> bool {
        self.force.is_set()
    }

    pub async fn forced(&self) {
        self.force.wait().await
    }
}

/// Spawns a thread that triggers `shutdown` on the first SIGINT or SIGTERM and forces it on the
/// second (so a second Ctrl-C does not wait out the grace period).
pub fn shutdown_on_signals(shutdown: Shutdown) -> std::io::Result<()> {
    use async_signal::{Signal, Signals};
    use smol::stream::StreamExt as _;
    let mut signals = Signals::new([Signal::Int, Signal::Term])?;
    std::thread::Builder::new().name("mtplx-signals".into()).spawn(move || {
        smol::block_on(async {
            let mut seen = 0;
            while let Some(Ok(_)) = signals.next().await {
                seen += 1;
                if seen == 1 {
                    shutdown.trigger();
                } else {
                    shutdown.force();
                    break;
                }
            }
        })
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_wakes_waiters_and_clones_share_state() {
        let s = Shutdown::new();
        let c = s.clone();
        let waiter = std::thread::spawn(move || smol::block_on(c.triggered()));
        assert!(!s.is_triggered());
        s.trigger();
        waiter.join().unwrap();
        assert!(s.is_triggered() && !s.is_forced());
        smol::block_on(s.triggered());
        s.force();
        smol::block_on(s.forced());
        assert!(s.is_forced());
    }
}
