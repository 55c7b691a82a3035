//! The last exposition text per format, reused while no value in it has changed.
//!
//! Rendering is cheap (about 6 us for the whole registry), but a client polling `/metrics` in a
//! loop, or several scrapers, would pay it on every request. Before rendering, a walk collects
//! every value the text would show, in order (counters, gauges, buckets, label ids; no
//! formatting), and compares them with the values the cached text was rendered from. Equal means
//! the text would be byte-for-byte the same, so it is copied instead. The key is the exact list
//! of values, not a hash of them, so a stale text can never be served by a collision.

use std::sync::{Arc, Mutex};

use super::negotiate::Format;

/// One cached exposition: the values it shows and its text.
struct Entry {
    values: Vec<u64>,
    text: Arc<[u8]>,
}

#[derive(Default)]
pub struct RenderCache {
    /// Prometheus text and OpenMetrics (the JSON envelope is not cached).
    slots: [Mutex<Option<Entry>>; 2],
}

fn slot(format: Format) -> Option<usize> {
    match format {
        Format::Prometheus => Some(0),
        Format::OpenMetrics => Some(1),
        Format::Json => None,
    }
}

impl RenderCache {
    /// The cached text, when it was rendered from `values`.
    pub fn lookup(&self, format: Format, values: &[u64]) -> Option<Arc<[u8]>> {
        let cached = self.slots[slot(format)?].lock().unwrap_or_else(|e| e.into_inner());
        cached.as_ref().filter(|e| e.values == values).map(|e| e.text.clone())
    }

    /// Keeps `text`, rendered from `values`, for the next lookups.
    pub fn store(&self, format: Format, values: Vec<u64>, text: Arc<[u8]>) {
        let Some(i) = slot(format) else { return };
        *self.slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(Entry { values, text });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::process::ProcessStats;
    use crate::metrics::series::{BuildInfo, Metrics};

    #[test]
    fn a_hit_needs_the_same_values_and_format() {
        let c = RenderCache::default();
        assert!(c.lookup(Format::Prometheus, &[1, 2]).is_none(), "empty cache hit");
        c.store(Format::Prometheus, vec![1, 2], Arc::from(&b"text 1 2"[..]));
        assert_eq!(c.lookup(Format::Prometheus, &[1, 2]).as_deref(), Some(&b"text 1 2"[..]));
        assert!(c.lookup(Format::Prometheus, &[1, 3]).is_none());
        assert!(c.lookup(Format::Prometheus, &[1, 2, 0]).is_none());
        assert!(c.lookup(Format::OpenMetrics, &[1, 2]).is_none());
        assert!(c.lookup(Format::Json, &[1, 2]).is_none());
    }

    /// `render` (cached) against `render_with` (never cached) on the same process reading.
    fn assert_fresh(m: &Metrics, what: &str) {
        for format in [Format::Prometheus, Format::OpenMetrics] {
            loop {
                let before = ProcessStats::sampled(m.start_time_seconds);
                let mut cached = Vec::new();
                m.render(format, &mut cached);
                if ProcessStats::sampled(m.start_time_seconds) != before {
                    continue; // a new process reading came in between: compare again
                }
                let mut fresh = Vec::new();
                m.render_with(format, &mut fresh, &before);
                assert!(cached == fresh, "{what}: {format:?} text is stale:\n{}", String::from_utf8_lossy(&cached));
                break;
            }
        }
    }

    #[test]
    fn every_kind_of_change_renders_anew() {
        let m = Metrics::new(8, BuildInfo::current("cpu", "a"));
        let chat = m.route_id("/v1/chat/completions");
        assert_fresh(&m, "first render");
        assert_fresh(&m, "unchanged");
        m.record_http("POST", chat, 200);
        assert_fresh(&m, "counter cell");
        m.record_http("POST", chat, 200);
        assert_fresh(&m, "same cell again");
        m.record_http("GET", m.route_label("/scanner/probe"), 404);
        assert_fresh(&m, "new raw-path label");
        m.http_requests_in_flight.inc();
        assert_fresh(&m, "gauge up");
        m.http_requests_in_flight.dec();
        assert_fresh(&m, "gauge back down");
        m.llm_time_to_first_token_seconds.observe(0.004);
        assert_fresh(&m, "histogram");
        m.llm_spec_decode_num_accepted_tokens_per_pos_total.add(2, 1);
        assert_fresh(&m, "new position");
        m.record_rate_limited(chat);
        assert_fresh(&m, "route counter");
        m.set_model("b");
        assert_fresh(&m, "build labels");
        m.llm_generation_tokens_total.add(7);
        assert_fresh(&m, "plain counter");
        let sub = m.requests.subscribe(None);
        assert_fresh(&m, "stream subscriber");
        drop(sub);
        assert_fresh(&m, "stream subscriber gone");
    }
}
