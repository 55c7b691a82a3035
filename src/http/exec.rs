//! How the connections of an I/O thread share it: the loop the thread runs, and the turn each
//! connection takes.
//!
//! A task that never waits is never descheduled, and under load a client can have its next
//! request in the socket by the time the response is written: that connection was then served in
//! a loop while every other one starved (under wrk -c64, some tasks answered over 64 requests in
//! one poll; this made the p99 of `GET /health` 1.3-1.5x hyper's). So a connection answers one
//! request per turn, then yields if its next one is already there.
//!
//! A yielded task must also not overtake the connections whose socket became ready meanwhile, so
//! the loop runs tasks in rounds: every task ready now runs once, then the reactor is polled
//! (without blocking) and the tasks whose sockets are ready are queued, then the ones that
//! yielded during the round, behind them. tokio does the same: its `yield_now` and cooperative
//! budget defer the task until the I/O driver has been polled.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::task::{Poll, Waker};

use smol::Executor;

/// Requests a connection answers in a row while the next is always there already, before it
/// yields (measured under wrk -c64: 4 and 16 gave a higher p99 than 1).
const REQUESTS_PER_TURN: u32 = 1;
/// Tasks run at most between two polls of the reactor (tokio polls its driver every 61).
const TASKS_PER_IO_POLL: u32 = 61;

thread_local! {
    /// Whether this thread runs [`run_tasks`], which wakes `DEFERRED`.
    static IN_RUN_LOOP: Cell<bool> = const { Cell::new(false) };
    /// Tasks that yielded during this round, woken after the next reactor poll.
    static DEFERRED: RefCell<Vec<Waker>> = const { RefCell::new(Vec::new()) };
}

/// Runs `ex`'s tasks on this thread forever; race it against what should end the thread.
pub async fn run_tasks<T>(ex: &Executor<'_>) -> T {
    IN_RUN_LOOP.with(|f| f.set(true));
    let mut deferred = Vec::new();
    loop {
        let mut ran = 0;
        while ran < TASKS_PER_IO_POLL && ex.try_tick() {
            ran += 1;
        }
        DEFERRED.with(|d| std::mem::swap(&mut *d.borrow_mut(), &mut deferred));
        if ran == 0 && deferred.is_empty() {
            // Nothing to do: wait for a task (`block_on` blocks in the reactor meanwhile).
            ex.tick().await;
            continue;
        }
        // Pending once, so that `block_on` polls the reactor and queues the tasks whose sockets
        // became ready; the ones that yielded go after them.
        smol::future::yield_now().await;
        for w in deferred.drain(..) {
            w.wake();
        }
    }
}

/// Lets every other ready connection go first, including those whose socket became ready
/// meanwhile. Outside [`run_tasks`] (an in-memory stream in tests) it is a plain yield.
async fn yield_to_others() {
    let mut yielded = false;
    poll_fn(|cx| {
        if yielded {
            return Poll::Ready(());
        }
        yielded = true;
        if IN_RUN_LOOP.with(Cell::get) {
            DEFERRED.with(|d| d.borrow_mut().push(cx.waker().clone()));
        } else {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    })
    .await
}

/// A connection's turn: how many more requests it may answer before it lets the others go.
pub struct Turn {
    left: u32,
}

impl Default for Turn {
    fn default() -> Self {
        Turn { left: REQUESTS_PER_TURN }
    }
}

impl Turn {
    pub fn answered(&mut self) {
        self.left = self.left.saturating_sub(1);
    }

    /// After a read: a connection that had to wait let the others run meanwhile; one whose data
    /// was there already yields first if its turn is used up. (Yielding before the read instead
    /// would also yield when the read is going to wait anyway, and measured a higher p99.)
    pub async fn after_read(&mut self, waited: bool) {
        if !waited && self.left == 0 {
            yield_to_others().await;
        }
        if waited || self.left == 0 {
            self.left = REQUESTS_PER_TURN;
        }
    }
}
