//! A persistent worker pool for the kernels: `threads - 1` OS threads plus the calling thread.
//!
//! The decode loop issues a couple of hundred small matmuls per token, so a dispatch must cost
//! about a microsecond, not a thread spawn or a channel round trip: workers spin on a generation
//! counter for a while after each job and only then park on a condvar.
//!
//! A job is split into chunks that the caller and the workers claim from a shared counter, so a
//! worker the OS has not scheduled yet never holds the caller up: the caller does the chunks
//! itself, then closes the job; a worker arriving after that sees it closed and skips it. The
//! caller only ever waits for workers that are inside a chunk, which is what makes lending the
//! job stack data sound.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle worker spins before parking: longer than the gap between two matmuls of a
/// decode step (norms, RoPE, attention: microseconds), short enough not to burn a core when idle.
const SPIN_BEFORE_PARK: Duration = Duration::from_micros(500);
/// Spin iterations between two looks at the clock.
const SPINS_PER_CLOCK_CHECK: u32 = 64;
/// Chunks per thread a `split` aims for: enough to rebalance when one thread starts late.
const CHUNKS_PER_THREAD: usize = 4;

type Job<'a> = &'a (dyn Fn(usize) + Sync + 'a);

struct Shared {
    /// Bumped once per job (after it is open) to wake workers.
    generation: AtomicU64,
    /// Points at the caller's `Job` (a fat reference on the caller's stack) while `open`.
    job: AtomicPtr<()>,
    chunks: AtomicUsize,
    /// The next chunk to claim.
    next: AtomicUsize,
    /// Workers may join the job only while it is open.
    open: AtomicBool,
    /// Workers that have joined the current job and not yet left it.
    active: AtomicUsize,
    /// Workers parked (or about to park) on `cv`; lets a dispatch skip the lock when all spin.
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    cv: Condvar,
    shutdown: AtomicBool,
    panicked: AtomicBool,
}

pub struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Serializes `run` calls so that one job is in flight at a time.
    dispatch: Mutex<()>,
}

/// The kernel thread count `requested` stands for: 0 means one per core. The one rule for every
/// caller that reports or records the count (`bench`, `tune`'s profile) and for the pool itself.
pub fn threads_for(requested: usize) -> usize {
    if requested == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        requested
    }
}

impl Pool {
    /// A pool of `threads` workers in all (the caller counts as one); 0 means every core.
    pub fn new(threads: usize) -> Pool {
        let threads = threads_for(threads);
        let shared = Arc::new(Shared {
            generation: AtomicU64::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            chunks: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            open: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            cv: Condvar::new(),
            shutdown: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
        });
        let workers = (1..threads)
            .map(|i| {
                let s = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("mtplx-kernel-{i}"))
                    .spawn(move || worker_loop(&s))
                    .expect("spawning a kernel worker thread")
            })
            .collect();
        Pool { shared, workers, dispatch: Mutex::new(()) }
    }

    /// Threads in all, the calling thread included.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Calls `f(c)` exactly once for every chunk `c` in `0..chunks`, spread over the calling
    /// thread and whichever workers are ready; returns when all calls have returned.
    ///
    /// # Panics
    /// Re-raises a panic of any call (after every started call has ended).
    pub fn run(&self, chunks: usize, f: &(dyn Fn(usize) + Sync)) {
        if self.workers.is_empty() || chunks <= 1 {
            return (0..chunks).for_each(f);
        }
        let _serial = self.dispatch.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        let job: Job<'_> = f;
        s.job.store(&job as *const Job<'_> as *mut (), Relaxed);
        s.chunks.store(chunks, Relaxed);
        s.next.store(0, Relaxed);
        // SeqCst: a worker that sees `open` also sees the job, chunks and next stored above.
        s.open.store(true, SeqCst);
        s.generation.fetch_add(1, SeqCst);
        if s.sleepers.load(SeqCst) > 0 {
            // Taking the lock orders this wake-up after any worker's check-then-wait.
            let _g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.cv.notify_all();
        }
        let close = CloseOnDrop(s);
        claim_chunks(s, f);
        drop(close);
        if s.panicked.swap(false, SeqCst) {
            panic!("a kernel worker thread panicked");
        }
    }

    /// Splits `0..total` into contiguous ranges of at least `min_len` items (a few per thread)
    /// and calls `f` on each, in parallel.
    pub fn split(&self, total: usize, min_len: usize, f: &(dyn Fn(std::ops::Range<usize>) + Sync)) {
        let n = (total / min_len.max(1)).clamp(1, CHUNKS_PER_THREAD * self.threads());
        self.run(n, &|c| f(chunk(total, c, n)))
    }
}

/// The `i`-th of `n` near-equal contiguous parts of `0..total`.
pub fn chunk(total: usize, i: usize, n: usize) -> std::ops::Range<usize> {
    let per = total / n;
    let extra = total % n;
    let start = i * per + i.min(extra);
    start..start + per + usize::from(i < extra)
}

fn claim_chunks(s: &Shared, f: &(dyn Fn(usize) + Sync)) {
    let n = s.chunks.load(Relaxed);
    loop {
        let c = s.next.fetch_add(1, Relaxed);
        if c >= n {
            return;
        }
        f(c);
    }
}

/// Closes the job and waits for the workers inside it, also when the caller's share unwinds.
struct CloseOnDrop<'a>(&'a Shared);

impl Drop for CloseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.open.store(false, SeqCst);
        let mut spins = 0u32;
        while self.0.active.load(SeqCst) != 0 {
            spins += 1;
            if spins < 1 << 12 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

fn worker_loop(s: &Shared) {
    let mut seen = 0u64;
    loop {
        seen = wait_for_new_generation(s, seen);
        if s.shutdown.load(Acquire) {
            return;
        }
        // Join first, then check `open` (both SeqCst): either the caller's close comes later,
        // and then it waits for us, or we see the job closed and leave without touching it.
        s.active.fetch_add(1, SeqCst);
        if s.open.load(SeqCst) {
            let p = s.job.load(Relaxed) as *const Job<'_>;
            // SAFETY: the job is open, so `p` points at the caller's `Job`, which lives until the
            // caller has closed the job and seen `active` drop to 0, which we delay until we are
            // done with it.
            let f = unsafe { *p };
            if catch_unwind(AssertUnwindSafe(|| claim_chunks(s, f))).is_err() {
                s.panicked.store(true, SeqCst);
            }
        }
        s.active.fetch_sub(1, SeqCst);
    }
}

fn wait_for_new_generation(s: &Shared, seen: u64) -> u64 {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        let g = s.generation.load(Acquire);
        if g != seen {
            return g;
        }
        spins += 1;
        if !spins.is_multiple_of(SPINS_PER_CLOCK_CHECK) || start.elapsed() < SPIN_BEFORE_PARK {
            std::hint::spin_loop();
            continue;
        }
        let mut guard = s.lock.lock().unwrap_or_else(|e| e.into_inner());
        s.sleepers.fetch_add(1, SeqCst);
        while s.generation.load(SeqCst) == seen {
            guard = s.cv.wait(guard).unwrap_or_else(|e| e.into_inner());
        }
        s.sleepers.fetch_sub(1, SeqCst);
        drop(guard);
        return s.generation.load(Acquire);
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let s = &*self.shared;
        s.shutdown.store(true, SeqCst);
        s.generation.fetch_add(1, SeqCst);
        {
            let _g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.cv.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_threads_means_every_core_and_a_count_is_kept() {
        assert_eq!(threads_for(3), 3);
        assert!(threads_for(0) >= 1);
        assert_eq!(Pool::new(0).threads(), threads_for(0));
    }

    #[test]
    fn every_chunk_runs_exactly_once() {
        let pool = Pool::new(3);
        assert_eq!(pool.threads(), 3);
        for round in 0..300 {
            let chunks = round % 17;
            let hits: Vec<AtomicUsize> = (0..chunks).map(|_| AtomicUsize::new(0)).collect();
            pool.run(chunks, &|c| {
                hits[c].fetch_add(1, Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Relaxed) == 1), "round {round}");
        }
    }

    #[test]
    fn workers_share_the_chunks() {
        // Each chunk waits a little so that a spinning worker has time to join.
        let pool = Pool::new(2);
        let worker_did = AtomicUsize::new(0);
        let caller = std::thread::current().id();
        for _ in 0..50 {
            pool.run(8, &|_| {
                std::thread::sleep(Duration::from_micros(200));
                if std::thread::current().id() != caller {
                    worker_did.fetch_add(1, Relaxed);
                }
            });
        }
        assert!(worker_did.load(Relaxed) > 0);
    }

    #[test]
    fn parked_workers_wake_up_for_the_next_job() {
        let pool = Pool::new(2);
        let count = AtomicUsize::new(0);
        pool.run(4, &|_| {
            count.fetch_add(1, Relaxed);
        });
        std::thread::sleep(SPIN_BEFORE_PARK * 4);
        pool.run(4, &|_| {
            count.fetch_add(1, Relaxed);
        });
        assert_eq!(count.load(Relaxed), 8);
    }

    #[test]
    fn split_covers_the_range_exactly_once() {
        let pool = Pool::new(2);
        for total in [0, 1, 2, 7, 192, 1000] {
            let seen: Vec<AtomicUsize> = (0..total).map(|_| AtomicUsize::new(0)).collect();
            pool.split(total, 16, &|r| {
                for k in r {
                    seen[k].fetch_add(1, Relaxed);
                }
            });
            assert!(seen.iter().all(|s| s.load(Relaxed) == 1), "total {total}");
        }
        assert_eq!(chunk(10, 0, 3), 0..4);
        assert_eq!(chunk(10, 2, 3), 7..10);
    }

    #[test]
    fn a_panic_in_a_chunk_reaches_the_caller_and_the_pool_survives() {
        let pool = Pool::new(2);
        let r = catch_unwind(AssertUnwindSafe(|| pool.run(64, &|c| assert!(c != 40, "boom"))));
        assert!(r.is_err());
        let count = AtomicUsize::new(0);
        pool.run(5, &|_| {
            count.fetch_add(1, Relaxed);
        });
        assert_eq!(count.load(Relaxed), 5);
    }
}
