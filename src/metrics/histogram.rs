//! Histograms: fixed Prometheus buckets in atomics, plus full-resolution hdrhistogram stripes.
//!
//! An observation is converted once to an integer in the series' base unit (microseconds for
//! seconds, milli-tokens/s, characters), so bucket bounds, `_sum` and the hdr value all agree.
//! Buckets and the sum are atomics; the hdr copy goes to one of [`STRIPES`] small histograms,
//! chosen per thread, whose mutex only the render path (JSON quantiles) ever contends for.
//! `_count` is not stored: it is the sum of the buckets read at render time, so that the `+Inf`
//! bucket always equals `_count` even while observations race with a scrape.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use hdrhistogram::Histogram as Hdr;

/// Per-thread hdr stripes per histogram (the I/O threads and the decode thread).
pub const STRIPES: usize = 4;
/// Significant decimal digits hdrhistogram keeps (0.1 % relative error).
pub const HDR_SIGFIG: u8 = 3;
/// Upper bound of bucket lists (the renderer keeps cumulative counts on the stack).
pub const MAX_BUCKETS: usize = 32;

/// How one histogram series is bucketed and scaled.
#[derive(Clone, Copy, Debug)]
pub struct HistogramSpec {
    /// Upper bounds (`le`) in the series' unit, strictly increasing, `+Inf` implied.
    pub bounds: &'static [f64],
    /// Integer base units per unit: 1e6 for seconds (1 µs resolution), 1 for characters.
    pub scale: f64,
    /// Largest value hdrhistogram tracks, in base units; larger ones are clamped to it.
    pub hdr_max: u64,
}

static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn my_stripe() -> usize {
    STRIPE.with(|s| {
        let v = s.get();
        if v != usize::MAX {
            return v;
        }
        let v = NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPES;
        s.set(v);
        v
    })
}

pub struct Histogram {
    spec: HistogramSpec,
    bounds_scaled: Box<[u64]>,
    /// Non-cumulative counts; the last cell is the `+Inf` overflow.
    buckets: Box<[AtomicU64]>,
    sum_scaled: AtomicU64,
    stripes: Box<[Mutex<Hdr<u64>>]>,
    /// `le` label values, Go-formatted once.
    le: Box<[Box<str>]>,
    merged: Mutex<Hdr<u64>>,
}

/// Full-resolution summary of a histogram, from hdrhistogram.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Quantiles {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Histogram {
    pub fn new(spec: HistogramSpec) -> Histogram {
        assert!(spec.bounds.len() < MAX_BUCKETS, "bucket list too long");
        assert!(spec.bounds.windows(2).all(|w| w[0] < w[1]), "bounds must increase");
        let hdr = || Hdr::<u64>::new_with_bounds(1, spec.hdr_max.max(2), HDR_SIGFIG).expect("valid hdr bounds");
        Histogram {
            spec,
            bounds_scaled: spec.bounds.iter().map(|b| (b * spec.scale).round() as u64).collect(),
            buckets: (0..=spec.bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_scaled: AtomicU64::new(0),
            stripes: (0..STRIPES).map(|_| Mutex::new(hdr())).collect(),
            le: spec
                .bounds
                .iter()
                .map(|b| {
                    let mut v = Vec::new();
                    super::prometheus::write_f64(&mut v, *b);
                    String::from_utf8(v).unwrap_or_default().into_boxed_str()
                })
                .collect(),
            merged: Mutex::new(hdr()),
        }
    }

    pub fn spec(&self) -> &HistogramSpec {
        &self.spec
    }

    /// The `le` label values of the finite buckets, in order.
    pub fn le_labels(&self) -> &[Box<str>] {
        &self.le
    }

    /// Record one value already in base units.
    pub fn observe_scaled(&self, v: u64) {
        let v = v.min(self.spec.hdr_max);
        let i = self.bounds_scaled.partition_point(|b| *b < v);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_scaled.fetch_add(v, Ordering::Relaxed);
        let mut h = self.stripes[my_stripe()].lock().unwrap_or_else(|e| e.into_inner());
        h.saturating_record(v);
    }

    /// Record a value in the series' unit. NaN is ignored; negatives count as 0; infinities as
    /// the hdr maximum.
    pub fn observe(&self, v: f64) {
        if v.is_nan() {
            return;
        }
        // `as` saturates: negatives become 0, +Inf becomes u64::MAX (then clamped).
        self.observe_scaled((v * self.spec.scale).round() as u64);
    }

    /// Record a duration in a seconds histogram.
    pub fn observe_duration(&self, d: Duration) {
        self.observe(d.as_secs_f64());
    }

    /// Cumulative bucket counts into `cumulative` (len = bounds + 1, last is `+Inf`); returns
    /// (`_count`, `_sum`). `_count` equals the `+Inf` bucket by construction.
    pub fn read(&self, cumulative: &mut [u64]) -> (u64, f64) {
        let mut acc = 0u64;
        for (c, b) in cumulative.iter_mut().zip(self.buckets.iter()) {
            acc += b.load(Ordering::Relaxed);
            *c = acc;
        }
        (acc, self.sum_scaled.load(Ordering::Relaxed) as f64 / self.spec.scale)
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    /// Quantiles over every observation so far, merged from the stripes.
    pub fn quantiles(&self) -> Quantiles {
        let mut m = self.merged.lock().unwrap_or_else(|e| e.into_inner());
        m.reset();
        for s in self.stripes.iter() {
            let s = s.lock().unwrap_or_else(|e| e.into_inner());
            if s.is_empty() {
                continue;
            }
            // Same bounds on both sides, so adding cannot fail.
            let _ = m.add(&*s);
        }
        let k = self.spec.scale;
        let q = |x: f64| {
            if m.is_empty() {
                0.0
            } else {
                m.value_at_quantile(x) as f64 / k
            }
        };
        Quantiles {
            count: m.len(),
            mean: if m.is_empty() { 0.0 } else { m.mean() / k },
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            max: if m.is_empty() { 0.0 } else { m.max() as f64 / k },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: HistogramSpec = HistogramSpec { bounds: &[0.005, 0.01, 0.5, 60.0], scale: 1e6, hdr_max: 3_600_000_000 };

    #[test]
    fn buckets_are_cumulative_and_inf_equals_count() {
        let h = Histogram::new(SPEC);
        for v in [0.001, 0.005, 0.0051, 0.3, 59.0, 61.0, 4000.0] {
            h.observe(v);
        }
        h.observe(f64::NAN);
        h.observe(-1.0);
        let mut c = [0u64; 5];
        let (count, sum) = h.read(&mut c);
        // -1 counts as 0 (first bucket); 0.005 is inclusive (le).
        assert_eq!(c, [3, 4, 5, 6, 8]);
        assert_eq!(count, 8);
        assert_eq!(c[4], count);
        let expected = 0.001 + 0.005 + 0.0051 + 0.3 + 59.0 + 61.0 + 3600.0;
        assert!((sum - expected).abs() < 1e-6, "{sum} vs {expected}");
    }

    #[test]
    fn quantiles_come_from_all_stripes() {
        let h = std::sync::Arc::new(Histogram::new(SPEC));
        let hs: Vec<_> = (0..3)
            .map(|t| {
                let h = h.clone();
                std::thread::spawn(move || {
                    for i in 1..=100u64 {
                        h.observe_scaled(i * 1000 + t);
                    }
                })
            })
            .collect();
        hs.into_iter().for_each(|x| x.join().unwrap());
        let q = h.quantiles();
        assert_eq!(q.count, 300);
        assert!((q.p50 - 0.05).abs() < 0.001, "{q:?}");
        assert!((q.max - 0.1).abs() < 0.001, "{q:?}");
        assert_eq!(Histogram::new(SPEC).quantiles().p99, 0.0);
    }
}
