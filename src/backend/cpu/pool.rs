//! A persistent worker pool for the kernels: `threads - 1` OS threads plus the calling thread.
//!
//! The decode loop issues a couple of hundred small matmuls per token, so a dispatch must cost
//! about a microsecond, not a thread spawn or a channel round trip: workers spin on a generation
//! counter for a while after each job and only then park on a condvar. A job is a borrowed
//! closure called once per worker with `(worker_index, n_workers)`; `run` returns when every
//! worker has finished, which is what makes lending it stack data sound.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle worker spins before parking: longer than the gap between two matmuls of a
/// decode step (norms, RoPE, attention: microseconds), shorter than a human-noticeable burn.
const SPIN_BEFORE_PARK: Duration = Duration::from_micros(500);
/// Spin iterations between two looks at the clock.
const SPINS_PER_CLOCK_CHECK: u32 = 64;

type Job = dyn Fn(usize, usize) + Sync;

struct Shared {
    /// Bumped (Release) once per job after `job` is written; workers wait for it to change.
    generation: AtomicU64,
    /// The current job, erased to 'static; valid from the generation bump until `pending` is 0.
    job: UnsafeCell<Option<*const Job>>,
    /// Workers that have not yet finished the current job.
    pending: AtomicUsize,
    /// Workers parked (or about to park) on `cv`; lets a dispatch skip the lock when all spin.
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    cv: Condvar,
    shutdown: AtomicBool,
    panicked: AtomicBool,
}

// SAFETY: `job` is written only by the dispatching thread while no worker is running a job
// (`pending == 0`, under the `dispatch` mutex) and read by workers only after they observe the
// new generation with Acquire ordering, which orders the write before the read. The closure it
// points to is `Sync`.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw pointer is only dereferenced under that protocol.
unsafe impl Send for Shared {}

pub struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Serializes `run` calls so that one job is in flight at a time.
    dispatch: Mutex<()>,
}

impl Pool {
    /// A pool of `threads` workers in all (the caller counts as one); 0 means every core.
    pub fn new(threads: usize) -> Pool {
        let threads = if threads == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { threads };
        let shared = Arc::new(Shared {
            generation: AtomicU64::new(0),
            job: UnsafeCell::new(None),
            pending: AtomicUsize::new(0),
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
                    .spawn(move || worker_loop(&s, i, threads))
                    .expect("spawning a kernel worker thread")
            })
            .collect();
        Pool { shared, workers, dispatch: Mutex::new(()) }
    }

    /// Workers in all, the calling thread included.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Calls `f(i, n)` once for every worker index `i` in `0..n` (`n = self.threads()`), in
    /// parallel, the calling thread taking `i = 0`; returns when all calls have returned.
    ///
    /// # Panics
    /// Re-raises a panic of any worker's call (after all calls have ended).
    pub fn run(&self, f: &(dyn Fn(usize, usize) + Sync)) {
        let n = self.threads();
        if n == 1 {
            return f(0, 1);
        }
        let _serial = self.dispatch.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        // SAFETY: erasing the lifetime is sound because this function does not return (nor
        // unwind: see `WaitOnDrop`) before `pending` is back to 0, i.e. before every worker has
        // finished calling `f`; after that no worker reads `job` until the next generation.
        let erased: *const Job = unsafe { std::mem::transmute::<&(dyn Fn(usize, usize) + Sync), &'static Job>(f) };
        // SAFETY: no worker reads `job` now (pending == 0 and the generation is unchanged), and
        // the `dispatch` lock excludes other writers.
        unsafe { *s.job.get() = Some(erased) };
        s.pending.store(n - 1, Ordering::SeqCst);
        s.generation.fetch_add(1, Ordering::SeqCst);
        if s.sleepers.load(Ordering::SeqCst) > 0 {
            // Taking the lock orders this wake-up after any worker's check-then-wait.
            let _g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.cv.notify_all();
        }
        let wait = WaitOnDrop(s);
        f(0, n);
        drop(wait);
        if s.panicked.swap(false, Ordering::SeqCst) {
            panic!("a kernel worker thread panicked");
        }
    }

    /// Splits `0..total` into `threads()` contiguous ranges (the last ones possibly empty) and
    /// calls `f` on each in parallel.
    pub fn split(&self, total: usize, f: &(dyn Fn(std::ops::Range<usize>) + Sync)) {
        self.run(&|i, n| {
            let r = chunk(total, i, n);
            if !r.is_empty() {
                f(r)
            }
        })
    }
}

/// The `i`-th of `n` near-equal contiguous parts of `0..total`.
pub fn chunk(total: usize, i: usize, n: usize) -> std::ops::Range<usize> {
    let per = total / n;
    let extra = total % n;
    let start = i * per + i.min(extra);
    start..start + per + usize::from(i < extra)
}

/// Waits for every worker to finish the current job, also when the caller's share unwinds.
struct WaitOnDrop<'a>(&'a Shared);

impl Drop for WaitOnDrop<'_> {
    fn drop(&mut self) {
        let mut spins = 0u32;
        while self.0.pending.load(Ordering::Acquire) != 0 {
            spins += 1;
            if spins < 1 << 14 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

fn worker_loop(s: &Shared, index: usize, n: usize) {
    let mut seen = 0u64;
    loop {
        seen = wait_for_new_generation(s, seen);
        if s.shutdown.load(Ordering::Acquire) {
            return;
        }
        // SAFETY: the generation changed (Acquire), so `job` holds this generation's closure,
        // which stays alive until we decrement `pending` below.
        let job = unsafe { (*s.job.get()).expect("a job is set with each generation") };
        // SAFETY: see above; the pointer came from a live `&Job`.
        let f = unsafe { &*job };
        if catch_unwind(AssertUnwindSafe(|| f(index, n))).is_err() {
            s.panicked.store(true, Ordering::SeqCst);
        }
        s.pending.fetch_sub(1, Ordering::Release);
    }
}

fn wait_for_new_generation(s: &Shared, seen: u64) -> u64 {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        let g = s.generation.load(Ordering::Acquire);
        if g != seen {
            return g;
        }
        spins += 1;
        if !spins.is_multiple_of(SPINS_PER_CLOCK_CHECK) || start.elapsed() < SPIN_BEFORE_PARK {
            std::hint::spin_loop();
            continue;
        }
        let mut guard = s.lock.lock().unwrap_or_else(|e| e.into_inner());
        s.sleepers.fetch_add(1, Ordering::SeqCst);
        while s.generation.load(Ordering::SeqCst) == seen {
            guard = s.cv.wait(guard).unwrap_or_else(|e| e.into_inner());
        }
        s.sleepers.fetch_sub(1, Ordering::SeqCst);
        drop(guard);
        return s.generation.load(Ordering::Acquire);
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let s = &*self.shared;
        s.shutdown.store(true, Ordering::SeqCst);
        s.generation.fetch_add(1, Ordering::SeqCst);
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
    fn every_worker_runs_each_job_once() {
        let pool = Pool::new(3);
        assert_eq!(pool.threads(), 3);
        for round in 0..200 {
            let hits: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
            pool.run(&|i, n| {
                assert_eq!(n, 3);
                hits[i].fetch_add(round + 1, Ordering::Relaxed);
            });
            for h in &hits {
                assert_eq!(h.load(Ordering::Relaxed), round + 1);
            }
        }
    }

    #[test]
    fn parked_workers_wake_up_for_the_next_job() {
        let pool = Pool::new(2);
        let count = AtomicUsize::new(0);
        pool.run(&|_, _| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        std::thread::sleep(SPIN_BEFORE_PARK * 4);
        pool.run(&|_, _| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(count.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn split_covers_the_range_exactly_once() {
        let pool = Pool::new(2);
        for total in [0, 1, 2, 7, 192, 1000] {
            let seen: Vec<AtomicUsize> = (0..total).map(|_| AtomicUsize::new(0)).collect();
            pool.split(total, &|r| {
                for k in r {
                    seen[k].fetch_add(1, Ordering::Relaxed);
                }
            });
            assert!(seen.iter().all(|s| s.load(Ordering::Relaxed) == 1), "total {total}");
        }
        assert_eq!(chunk(10, 0, 3), 0..4);
        assert_eq!(chunk(10, 2, 3), 7..10);
    }

    #[test]
    fn a_worker_panic_reaches_the_caller_and_the_pool_survives() {
        let pool = Pool::new(2);
        let r = catch_unwind(AssertUnwindSafe(|| pool.run(&|i, _| assert!(i != 1, "boom"))));
        assert!(r.is_err());
        let count = AtomicUsize::new(0);
        pool.run(&|_, _| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(count.load(Ordering::Relaxed), 2);
    }
}
