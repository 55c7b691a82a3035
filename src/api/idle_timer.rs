//! The clock of a stream's keep-alive comments: the wall clock when serving, and in tests a
//! clock the test moves by hand, so that a test says when a tick has passed instead of racing
//! the wall clock on a loaded machine.

use std::future::Future;
use std::time::Instant;

/// A one-shot timer that can be moved, with the clock it runs on.
pub trait IdleTimer {
    /// Now, on this timer's clock.
    fn now(&self) -> Instant;
    /// The next [`wait`](Self::wait) ends at `at`.
    fn set_at(&mut self, at: Instant);
    /// Resolves once the clock reaches the time last set.
    fn wait(&mut self) -> impl Future<Output = ()> + Send + '_;
}

/// The wall clock: one `async_io` timer, moved rather than remade (a timer made per token
/// would register with the reactor, a wake-up of its thread, per token).
pub struct WallTimer(async_io::Timer);

impl WallTimer {
    pub fn new() -> WallTimer {
        WallTimer(async_io::Timer::never())
    }
}

impl Default for WallTimer {
    fn default() -> Self {
        WallTimer::new()
    }
}

impl IdleTimer for WallTimer {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn set_at(&mut self, at: Instant) {
        self.0.set_at(at);
    }

    async fn wait(&mut self) {
        (&mut self.0).await;
    }
}

#[cfg(test)]
pub use manual::{ManualClock, ManualTimer};

#[cfg(test)]
mod manual {
    use super::IdleTimer;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    /// A clock that stands still until [`advance`](ManualClock::advance) moves it.
    pub struct ManualClock {
        now: Mutex<Instant>,
        moved: (async_channel::Sender<()>, async_channel::Receiver<()>),
    }

    impl ManualClock {
        pub fn new() -> Arc<ManualClock> {
            Arc::new(ManualClock { now: Mutex::new(Instant::now()), moved: async_channel::unbounded() })
        }

        pub fn now(&self) -> Instant {
            *self.now.lock().unwrap()
        }

        /// Moves the clock on, waking a timer waiting on it.
        pub fn advance(&self, by: Duration) {
            *self.now.lock().unwrap() += by;
            let _ = self.moved.0.try_send(());
        }

        pub fn timer(self: &Arc<Self>) -> ManualTimer {
            ManualTimer { at: self.now(), clock: self.clone() }
        }
    }

    pub struct ManualTimer {
        clock: Arc<ManualClock>,
        at: Instant,
    }

    impl IdleTimer for ManualTimer {
        fn now(&self) -> Instant {
            self.clock.now()
        }

        fn set_at(&mut self, at: Instant) {
            self.at = at;
        }

        async fn wait(&mut self) {
            // Each move of the clock leaves one wake-up; a stale one only costs a look.
            while self.clock.now() < self.at {
                let _ = self.clock.moved.1.recv().await;
            }
        }
    }
}
