//! Walking every family of [`Metrics`] into one text exposition (the JSON envelope is
//! `server_state.rs`).

use super::help;
use super::histogram::{Histogram, MAX_BUCKETS};
use super::negotiate::Format;
use super::process::ProcessStats;
use super::prometheus::{write_f64, write_header, write_i64, write_u64, Kind};
use super::registry::{Counter, Gauge, RouteCounter, METHODS};
use super::request_record::DiskLookup;
use super::series::Metrics;
use std::sync::Arc;

/// Where a walk over the registry goes: the text (unless only the values are wanted, as when
/// the render cache checks whether anything changed) and every value written, in order.
struct Out<'a> {
    fmt: Format,
    buf: Option<&'a mut Vec<u8>>,
    values: &'a mut Vec<u64>,
}

impl Out<'_> {
    fn head(&mut self, name: &str, kind: Kind, unit: Option<&str>, help: &str) {
        if let Some(b) = self.buf.as_deref_mut() {
            write_header(b, self.fmt, name, kind, unit, help);
        }
    }

    fn put(&mut self, s: &str) {
        if let Some(b) = self.buf.as_deref_mut() {
            b.extend_from_slice(s.as_bytes());
        }
    }

    fn nl(&mut self) {
        self.put("\n");
    }

    fn u64(&mut self, v: u64) {
        self.values.push(v);
        if let Some(b) = self.buf.as_deref_mut() {
            write_u64(b, v);
        }
    }

    fn i64(&mut self, v: i64) {
        self.values.push(v as u64);
        if let Some(b) = self.buf.as_deref_mut() {
            write_i64(b, v);
        }
    }

    /// Text that can change at run time (the build labels): its bytes count as values too.
    fn label_block(&mut self, s: &str) {
        self.values.push(s.len() as u64);
        self.values.extend(s.as_bytes().chunks(8).map(|c| {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(w)
        }));
        self.put(s);
    }

    fn f64(&mut self, v: f64) {
        self.values.push(v.to_bits());
        if let Some(b) = self.buf.as_deref_mut() {
            write_f64(b, v);
        }
    }

    fn counter(&mut self, name: &str, help: &str, c: &Counter) {
        self.head(name, Kind::Counter, None, help);
        self.put(name);
        self.put(" ");
        self.u64(c.get());
        self.nl();
    }

    fn gauge(&mut self, name: &str, help: &str, g: &Gauge) {
        self.gauge_in(name, None, help, g);
    }

    fn gauge_in(&mut self, name: &str, unit: Option<&str>, help: &str, g: &Gauge) {
        self.head(name, Kind::Gauge, unit, help);
        self.put(name);
        self.put(" ");
        self.i64(g.get());
        self.nl();
    }

    fn gauge_f64(&mut self, name: &str, kind: Kind, unit: Option<&str>, help: &str, v: f64) {
        self.head(name, kind, unit, help);
        self.put(name);
        self.put(" ");
        self.f64(v);
        self.nl();
    }

    fn route_counter(&mut self, m: &Metrics, name: &str, help: &str, c: &RouteCounter) {
        self.head(name, Kind::Counter, None, help);
        for i in 0..m.routes.len() {
            let id = super::route_labels::RouteId(i as u16);
            let v = c.get(id);
            // Templates are shown from zero (so rate() works from the start); raw paths only
            // once counted.
            if v == 0 && !m.routes.is_template(id) {
                continue;
            }
            self.put(name);
            self.put("{route=\"");
            self.put(m.routes.escaped(id));
            self.put("\"} ");
            self.u64(v);
            self.nl();
        }
    }

    fn histogram(&mut self, name: &str, unit: Option<&str>, help: &str, h: &Histogram) {
        self.head(name, Kind::Histogram, unit, help);
        let mut cum = [0u64; MAX_BUCKETS];
        let n = h.le_labels().len() + 1;
        let (count, sum) = h.read(&mut cum[..n]);
        for (i, c) in cum[..n].iter().enumerate() {
            self.put(name);
            self.put("_bucket{le=\"");
            self.put(h.le_labels().get(i).map_or("+Inf", |s| s));
            self.put("\"} ");
            self.u64(*c);
            self.nl();
        }
        self.put(name);
        self.put("_sum ");
        self.f64(sum);
        self.nl();
        self.put(name);
        self.put("_count ");
        self.u64(count);
        self.nl();
    }
}

/// Values a whole walk writes, about: enough that collecting them does not reallocate.
const VALUES_HINT: usize = 512;

/// The `tier` labels of `mtplx_prompt_cache_tokens_total`, in the order of its counters.
const PROMPT_TIERS: [&str; 3] = ["memory", "disk", "computed"];
/// Bytes of a whole exposition, about (13-19 KB with every family in use).
const TEXT_HINT: usize = 24 * 1024;

impl Metrics {
    /// Render into `out` (cleared first) in `format`; see [`Metrics::render_shared`].
    pub fn render(&self, format: Format, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.render_shared(format));
    }

    /// The exposition in `format`. `process_*` come from [`ProcessStats::sampled`]; the text is
    /// the cached one when no value changed since it was rendered (see `render_cache.rs`).
    pub fn render_shared(&self, format: Format) -> Arc<[u8]> {
        if format == Format::Json {
            return self.envelope_json(None).into();
        }
        let stats = ProcessStats::sampled(self.start_time_seconds);
        let mut values = Vec::with_capacity(VALUES_HINT);
        self.walk(format, None, &mut values, &stats);
        if let Some(text) = self.render_cache.lookup(format, &values) {
            return text;
        }
        // The key is what this very walk wrote, so the text and its key always agree even
        // while other threads record.
        values.clear();
        let mut out = Vec::with_capacity(TEXT_HINT);
        self.walk(format, Some(&mut out), &mut values, &stats);
        let text: Arc<[u8]> = out.into();
        self.render_cache.store(format, values, text.clone());
        text
    }

    /// Render with given process readings (benchmarks and tests pin them); never cached.
    pub fn render_with(&self, format: Format, out: &mut Vec<u8>, stats: &ProcessStats) {
        out.clear();
        if format == Format::Json {
            out.extend_from_slice(&self.envelope_json(None));
            return;
        }
        self.walk(format, Some(out), &mut Vec::with_capacity(VALUES_HINT), stats);
    }

    /// Every family in exposition order: the text into `buf` when given, the values always.
    fn walk(&self, format: Format, buf: Option<&mut Vec<u8>>, values: &mut Vec<u64>, stats: &ProcessStats) {
        let mut o = Out { fmt: format, buf, values };
        self.render_request_series(&mut o);
        self.render_process(&mut o, stats);
        self.render_generation(&mut o);
        if format == Format::OpenMetrics {
            o.put("# EOF\n");
        }
    }

    /// The request-level series: HTTP traffic, generation latency, message lengths and the
    /// rate limiter.
    fn render_request_series(&self, o: &mut Out<'_>) {
        let name = "http_requests_total";
        o.head(name, Kind::Counter, None, help::HTTP_REQUESTS);
        self.http_requests_total.for_each(|cell, v| {
            o.put("http_requests_total{method=\"");
            o.put(METHODS[(cell.method as usize).min(METHODS.len() - 1)]);
            o.put("\",route=\"");
            o.put(self.routes.escaped(cell.route));
            o.put("\",status=\"");
            o.u64(cell.status as u64);
            o.put("\"} ");
            o.u64(v);
            o.nl();
        });
        let overflow = self.http_requests_total.overflow();
        if overflow > 0 {
            o.put("http_requests_total{method=\"other\",route=\"other\",status=\"other\"} ");
            o.u64(overflow);
            o.nl();
        }
        o.gauge("http_requests_in_flight", help::IN_FLIGHT, &self.http_requests_in_flight);
        o.route_counter(self, "http_request_errors_total", help::ERRORS, &self.http_request_errors_total);
        o.histogram(
            "llm_time_to_first_token_seconds",
            Some("seconds"),
            help::TTFT,
            &self.llm_time_to_first_token_seconds,
        );
        o.histogram(
            "llm_time_to_last_token_seconds",
            Some("seconds"),
            help::TTLT,
            &self.llm_time_to_last_token_seconds,
        );
        o.histogram("llm_question_length_chars", Some("chars"), help::QUESTION, &self.llm_question_length_chars);
        o.histogram("llm_answer_length_chars", Some("chars"), help::ANSWER, &self.llm_answer_length_chars);
        o.route_counter(self, "rejected_requests_total", help::REJECTED, &self.rejected_requests_total);
        o.route_counter(self, "requests_per_ip_total", help::PER_IP, &self.requests_per_ip_total);
    }

    fn render_process(&self, o: &mut Out<'_>, s: &ProcessStats) {
        // Which optional series are shown, so that two readings missing different series can
        // never share a cache key.
        let shown = [s.resident_memory_bytes.is_some(), s.cpu_seconds.is_some(), s.open_fds.is_some()];
        o.values.push(shown.iter().fold(0, |bits, &b| bits << 1 | b as u64));
        o.gauge_f64("process_start_time_seconds", Kind::Gauge, Some("seconds"), help::START, s.start_time_seconds);
        if let Some(rss) = s.resident_memory_bytes {
            o.gauge_f64("process_resident_memory_bytes", Kind::Gauge, Some("bytes"), help::RSS, rss as f64);
        }
        if let Some(cpu) = s.cpu_seconds {
            o.gauge_f64("process_cpu_seconds_total", Kind::Counter, Some("seconds"), help::CPU, cpu);
        }
        if let Some(fds) = s.open_fds {
            o.gauge_f64("process_open_fds", Kind::Gauge, None, help::FDS, fds as f64);
        }
        o.head("mtplx_build_info", Kind::Info, None, help::BUILD);
        o.put("mtplx_build_info");
        o.label_block(&self.build_labels.read().unwrap_or_else(|e| e.into_inner()));
        o.put(" 1\n");
        o.head("mtplx_backend_info", Kind::Info, None, help::BACKEND);
        o.put("mtplx_backend_info");
        o.label_block(&self.build_info().backend_label_block());
        o.put(" 1\n");
        let device = *self.device.read().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = device {
            o.gauge_f64("mtplx_gpu_dispatches_total", Kind::Counter, None, help::GPU_DISPATCHES, d.dispatches as f64);
            o.gauge_f64("mtplx_gpu_submits_total", Kind::Counter, None, help::GPU_SUBMITS, d.submits as f64);
            let bytes = Some("bytes");
            o.gauge_f64("mtplx_gpu_read_back_bytes_total", Kind::Counter, bytes, help::GPU_READ, d.read_bytes as f64);
            o.gauge_f64("mtplx_gpu_healthy", Kind::Gauge, None, help::GPU_HEALTHY, f64::from(u8::from(d.healthy)));
        }
    }

    fn render_generation(&self, o: &mut Out<'_>) {
        o.counter("llm_prompt_tokens_total", help::PROMPT_TOKENS, &self.llm_prompt_tokens_total);
        o.counter("llm_generation_tokens_total", help::GEN_TOKENS, &self.llm_generation_tokens_total);
        o.counter(
            "llm_generation_tokens_delivered_total",
            help::GEN_TOKENS_DELIVERED,
            &self.llm_generation_tokens_delivered_total,
        );
        o.gauge("llm_requests_running", help::RUNNING, &self.llm_requests_running);
        o.gauge("llm_requests_waiting", help::WAITING, &self.llm_requests_waiting);
        let bytes = Some("bytes");
        o.gauge_in("mtplx_kv_cache_used_bytes", bytes, help::KV_USED_BYTES, &self.mtplx_kv_cache_used_bytes);
        o.gauge_in(
            "mtplx_kv_cache_capacity_bytes",
            bytes,
            help::KV_CAPACITY_BYTES,
            &self.mtplx_kv_cache_capacity_bytes,
        );
        o.gauge("mtplx_kv_cache_used_tokens", help::KV_USED_TOKENS, &self.mtplx_kv_cache_used_tokens);
        o.gauge("mtplx_kv_cache_capacity_tokens", help::KV_CAPACITY_TOKENS, &self.mtplx_kv_cache_capacity_tokens);
        o.gauge("mtplx_kv_cache_sequences", help::KV_SEQUENCES, &self.mtplx_kv_cache_sequences);
        o.counter("llm_spec_decode_num_drafts_total", help::DRAFTS, &self.llm_spec_decode_num_drafts_total);
        o.counter(
            "llm_spec_decode_num_draft_tokens_total",
            help::DRAFT_TOKENS,
            &self.llm_spec_decode_num_draft_tokens_total,
        );
        o.counter(
            "llm_spec_decode_num_accepted_tokens_total",
            help::ACCEPTED,
            &self.llm_spec_decode_num_accepted_tokens_total,
        );
        let name = "llm_spec_decode_num_accepted_tokens_per_pos_total";
        o.head(name, Kind::Counter, None, help::PER_POS);
        let pos = &self.llm_spec_decode_num_accepted_tokens_per_pos_total;
        for p in 0..pos.used() {
            o.put(name);
            o.put("{position=\"");
            o.u64(p as u64);
            o.put("\"} ");
            o.u64(pos.get(p));
            o.nl();
        }
        o.histogram("llm_decode_tokens_per_second", None, help::DECODE_TOK_S, &self.llm_decode_tokens_per_second);
        o.histogram(
            "llm_inter_token_latency_seconds",
            Some("seconds"),
            help::ITL,
            &self.llm_inter_token_latency_seconds,
        );
        o.counter("mtplx_chats_total", help::CHATS, &self.mtplx_chats_total);
        let name = "mtplx_messages_total";
        o.head(name, Kind::Counter, None, help::MESSAGES);
        for (role, c) in ["user", "assistant"].iter().zip(&self.mtplx_messages_total) {
            o.put(name);
            o.put("{role=\"");
            o.put(role);
            o.put("\"} ");
            o.u64(c.get());
            o.nl();
        }
        let name = "mtplx_prompt_cache_tokens_total";
        o.head(name, Kind::Counter, None, help::PROMPT_CACHE_TOKENS);
        for (tier, c) in PROMPT_TIERS.iter().zip(&self.mtplx_prompt_cache_tokens_total) {
            o.put(name);
            o.put("{tier=\"");
            o.put(tier);
            o.put("\"} ");
            o.u64(c.get());
            o.nl();
        }
        let name = "mtplx_prompt_cache_disk_lookups_total";
        o.head(name, Kind::Counter, None, help::PROMPT_CACHE_DISK_LOOKUPS);
        for (d, c) in DiskLookup::ALL.iter().zip(&self.mtplx_prompt_cache_disk_lookups_total) {
            o.put(name);
            o.put("{outcome=\"");
            o.put(d.label());
            o.put("\"} ");
            o.u64(c.get());
            o.nl();
        }
        o.histogram("mtplx_db_write_seconds", Some("seconds"), help::DB_WRITE, &self.mtplx_db_write_seconds);
        o.histogram(
            "mtplx_chat_turn_db_wait_seconds",
            Some("seconds"),
            help::TURN_DB_WAIT,
            &self.mtplx_chat_turn_db_wait_seconds,
        );
        o.counter("mtplx_metrics_stream_dropped_total", help::DROPPED, &self.requests.dropped);
        o.gauge("mtplx_metrics_stream_subscribers", help::SUBSCRIBERS, &self.requests.subscribers);
    }
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
