//! Counters and gauges, plain and labelled, recorded with atomics only.
//!
//! Choice: every label set resolves to a fixed slot of a pre-sized array of atomics. `{route}`
//! families index by [`RouteId`]; `{position}` by the draft position; the three-label
//! `http_requests_total{method,route,status}` uses a lock-free open-addressed table of
//! [`HTTP_CELLS`] cells keyed by the packed (route, method, status), claimed with one CAS the
//! first time a combination appears; claimed cells are also appended to an index list so that
//! rendering visits only them, in the order they appeared. Recording therefore never takes a lock and never
//! allocates; rendering walks the arrays.

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use super::route_labels::{RouteId, ROUTE_SLOTS};

/// A monotonically increasing count.
#[derive(Default, Debug)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down.
#[derive(Default, Debug)]
pub struct Gauge(AtomicI64);

impl Gauge {
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    pub fn dec(&self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
    pub fn set(&self, v: i64) {
        self.0.store(v, Ordering::Relaxed);
    }
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A counter family with the single label `route`.
pub struct RouteCounter {
    cells: Box<[AtomicU64]>,
}

impl Default for RouteCounter {
    fn default() -> Self {
        RouteCounter { cells: (0..ROUTE_SLOTS).map(|_| AtomicU64::new(0)).collect() }
    }
}

impl RouteCounter {
    pub fn inc(&self, route: RouteId) {
        self.cells[route.index()].fetch_add(1, Ordering::Relaxed);
    }
    pub fn get(&self, route: RouteId) -> u64 {
        self.cells[route.index()].load(Ordering::Relaxed)
    }
}

/// Draft positions with their own `position` label; deeper drafts are counted at the last one.
pub const MAX_DRAFT_POSITIONS: usize = 16;

/// A counter family with the single label `position` (0-based draft position).
#[derive(Default)]
pub struct PositionCounter {
    cells: [AtomicU64; MAX_DRAFT_POSITIONS],
    /// One more than the deepest position recorded so far; positions below it are rendered.
    used: AtomicU64,
}

impl PositionCounter {
    pub fn add(&self, position: usize, n: u64) {
        let p = position.min(MAX_DRAFT_POSITIONS - 1);
        self.cells[p].fetch_add(n, Ordering::Relaxed);
        self.used.fetch_max(p as u64 + 1, Ordering::Relaxed);
    }
    pub fn get(&self, position: usize) -> u64 {
        self.cells.get(position).map_or(0, |c| c.load(Ordering::Relaxed))
    }
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed) as usize
    }
}

/// HTTP methods with their own `method` label value; anything else is `other`.
pub const METHODS: [&str; 10] =
    ["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", "other"];

pub fn method_index(method: &str) -> u8 {
    METHODS[..METHODS.len() - 1].iter().position(|m| *m == method).unwrap_or(METHODS.len() - 1) as u8
}

/// Cells of the `{method,route,status}` table (a power of two). Realistic traffic uses a few
/// dozen; once full, new combinations are counted in one overflow series
/// (`method="other",route="other",status="other"`).
pub const HTTP_CELLS: usize = 4096;

const CLAIMED: u64 = 1 << 63;

/// `http_requests_total{method,route,status}`: lock-free open addressing, keys never removed.
pub struct HttpCounter {
    keys: Box<[AtomicU64]>,
    values: Box<[AtomicU64]>,
    /// Claimed cell indices + 1, in claim order (0: claimed but not yet published).
    order: Box<[AtomicU32]>,
    claimed: AtomicUsize,
    overflow: AtomicU64,
}

impl Default for HttpCounter {
    fn default() -> Self {
        HttpCounter {
            keys: (0..HTTP_CELLS).map(|_| AtomicU64::new(0)).collect(),
            values: (0..HTTP_CELLS).map(|_| AtomicU64::new(0)).collect(),
            order: (0..HTTP_CELLS).map(|_| AtomicU32::new(0)).collect(),
            claimed: AtomicUsize::new(0),
            overflow: AtomicU64::new(0),
        }
    }
}

/// One rendered cell of [`HttpCounter`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct HttpCell {
    pub route: RouteId,
    pub method: u8,
    pub status: u16,
}

fn pack(route: RouteId, method: u8, status: u16) -> u64 {
    CLAIMED | (route.0 as u64) << 32 | (method as u64) << 16 | status as u64
}

fn unpack(key: u64) -> HttpCell {
    HttpCell { route: RouteId((key >> 32) as u16), method: (key >> 16) as u8, status: key as u16 }
}

impl HttpCounter {
    pub fn inc(&self, route: RouteId, method: u8, status: u16) {
        let key = pack(route, method, status);
        // Fibonacci hashing spreads the packed fields over the table.
        let mut i = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize & (HTTP_CELLS - 1);
        for _ in 0..HTTP_CELLS {
            let k = self.keys[i].load(Ordering::Acquire);
            if k == key {
                self.values[i].fetch_add(1, Ordering::Relaxed);
                return;
            }
            if k == 0 {
                match self.keys[i].compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        let n = self.claimed.fetch_add(1, Ordering::AcqRel);
                        self.order[n].store(i as u32 + 1, Ordering::Release);
                        self.values[i].fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    Err(other) if other == key => {
                        self.values[i].fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    Err(_) => {}
                }
            }
            i = (i + 1) & (HTTP_CELLS - 1);
        }
        self.overflow.fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(&self, route: RouteId, method: u8, status: u16) -> u64 {
        let key = pack(route, method, status);
        self.keys
            .iter()
            .position(|k| k.load(Ordering::Acquire) == key)
            .map_or(0, |i| self.values[i].load(Ordering::Relaxed))
    }

    /// Visit every claimed cell with its value, in the order the cells were first claimed (a
    /// cell claimed during the walk may be left for the next one).
    pub fn for_each(&self, mut f: impl FnMut(HttpCell, u64)) {
        let n = self.claimed.load(Ordering::Acquire).min(HTTP_CELLS);
        for slot in &self.order[..n] {
            let i = slot.load(Ordering::Acquire);
            if i == 0 {
                continue;
            }
            let i = i as usize - 1;
            f(unpack(self.keys[i].load(Ordering::Acquire)), self.values[i].load(Ordering::Relaxed));
        }
    }

    /// Every claimed cell with its value, into `out` (cleared first), sorted by route, method,
    /// status.
    pub fn snapshot(&self, out: &mut Vec<(HttpCell, u64)>) {
        out.clear();
        self.for_each(|c, v| out.push((c, v)));
        out.sort_unstable_by_key(|(c, _)| *c);
    }

    pub fn overflow(&self) -> u64 {
        self.overflow.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_cells_count_each_combination_separately() {
        let c = HttpCounter::default();
        let r = RouteId(3);
        for _ in 0..5 {
            c.inc(r, method_index("GET"), 200);
        }
        c.inc(r, method_index("POST"), 200);
        c.inc(r, method_index("BREW"), 418);
        assert_eq!(c.get(r, 0, 200), 5);
        assert_eq!(c.get(r, 2, 200), 1);
        assert_eq!(c.get(r, 9, 418), 1);
        assert_eq!(c.get(r, 0, 404), 0);
        let mut snap = Vec::new();
        c.snapshot(&mut snap);
        assert_eq!(snap.len(), 3);
        assert!(snap.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn http_table_overflow_is_counted_not_lost() {
        let c = HttpCounter::default();
        for s in 0..(HTTP_CELLS as u16 + 10) {
            c.inc(RouteId(1), 0, s);
        }
        assert_eq!(c.overflow(), 10);
        let mut snap = Vec::new();
        c.snapshot(&mut snap);
        assert_eq!(snap.iter().map(|(_, v)| v).sum::<u64>() + c.overflow(), HTTP_CELLS as u64 + 10);
    }

    #[test]
    fn concurrent_claims_of_one_key_never_split_it() {
        let c = std::sync::Arc::new(HttpCounter::default());
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for s in 0..200u16 {
                        c.inc(RouteId(2), 2, s);
                    }
                })
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
        let mut snap = Vec::new();
        c.snapshot(&mut snap);
        assert_eq!(snap.len(), 200);
        assert!(snap.iter().all(|(_, v)| *v == 4));
    }

    #[test]
    fn positions_clamp_and_track_depth() {
        let p = PositionCounter::default();
        p.add(0, 3);
        p.add(2, 1);
        assert_eq!(p.used(), 3);
        p.add(99, 1);
        assert_eq!(p.get(MAX_DRAFT_POSITIONS - 1), 1);
        assert_eq!(p.used(), MAX_DRAFT_POSITIONS);
        assert_eq!(method_index("PATCH"), 8);
        assert_eq!(METHODS[method_index("get") as usize], "other");
    }
}
