//! The series the server exposes, one typed field each, and the calls that record them.
//!
//! Names, labels, HELP meanings and bucket bounds are the contract that `docs/metrics.md`
//! documents; a change here is a change there.

use std::sync::{Arc, RwLock};
use std::time::Instant;

use super::histogram::{Histogram, HistogramSpec};
use super::registry::{method_index, Counter, Gauge, HttpCounter, PositionCounter, RouteCounter};
use super::request_log::{Entry, RequestLog};
use super::route_labels::{RouteId, RouteTable};

/// TTFT / TTLT bounds: 1 ms steps below 10 ms, then up to 10 minutes.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 30.0,
    60.0, 120.0, 300.0, 600.0,
];
/// Inter-token latency bounds: a decode step is 1-200 ms on a CPU.
pub const INTER_TOKEN_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5,
    5.0, 10.0,
];
/// Message length bounds (characters): powers of two up to the 4 MiB body limit.
pub const LENGTH_BUCKETS: &[f64] = &[
    16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 32768.0, 65536.0, 131072.0,
    262144.0, 524288.0, 1048576.0, 4194304.0,
];
/// Decode speed bounds (tokens/s).
pub const TOKENS_PER_SECOND_BUCKETS: &[f64] = &[
    1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 75.0, 100.0, 150.0, 200.0, 300.0, 500.0, 750.0, 1000.0,
    2000.0,
];

/// Database write bounds: a commit is tens of microseconds on SQLite, milliseconds on a network.
pub const DB_WRITE_BUCKETS: &[f64] =
    &[0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// Seconds at 1 µs resolution, tracked up to an hour.
const SECONDS: fn(&'static [f64]) -> HistogramSpec =
    |bounds| HistogramSpec { bounds, scale: 1e6, hdr_max: 3_600_000_000 };
const CHARS: HistogramSpec = HistogramSpec { bounds: LENGTH_BUCKETS, scale: 1.0, hdr_max: 1 << 26 };
const TOK_S: HistogramSpec = HistogramSpec { bounds: TOKENS_PER_SECOND_BUCKETS, scale: 1000.0, hdr_max: 100_000_000 };

/// The GPU's counters and health (`mtplx_gpu_*`), sampled from the engine at scrape time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    pub dispatches: u64,
    pub submits: u64,
    pub read_bytes: u64,
    /// False once the device reported a fault (lost, out of memory).
    pub healthy: bool,
}

/// The route whose own requests `http_requests_total` leaves out (`docs/metrics.md`: a scrape
/// does not count itself).
pub const METRICS_ROUTE: &str = "/metrics";

/// Labels of `mtplx_build_info`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BuildInfo {
    pub version: String,
    pub backend: String,
    pub model: String,
    /// The device the backend runs on and its driver (`mtplx_backend_info`).
    pub adapter: String,
    pub driver: String,
}

impl BuildInfo {
    /// This crate's version with the given backend and model.
    pub fn current(backend: &str, model: &str) -> BuildInfo {
        BuildInfo {
            version: env!("CARGO_PKG_VERSION").into(),
            backend: backend.into(),
            model: model.into(),
            adapter: String::new(),
            driver: String::new(),
        }
    }

    /// The same, naming the device and its driver.
    pub fn on(self, adapter: &str, driver: &str) -> BuildInfo {
        BuildInfo { adapter: adapter.into(), driver: driver.into(), ..self }
    }

    /// `mtplx_backend_info`'s labels.
    pub(crate) fn backend_label_block(&self) -> String {
        let mut s = String::from("{backend=\"");
        super::prometheus::escape_label_value(&self.backend, &mut s);
        s.push_str("\",adapter=\"");
        super::prometheus::escape_label_value(&self.adapter, &mut s);
        s.push_str("\",driver=\"");
        super::prometheus::escape_label_value(&self.driver, &mut s);
        s.push_str("\"}");
        s
    }

    fn label_block(&self) -> String {
        let mut s = String::from("{version=\"");
        super::prometheus::escape_label_value(&self.version, &mut s);
        s.push_str("\",backend=\"");
        super::prometheus::escape_label_value(&self.backend, &mut s);
        s.push_str("\",model=\"");
        super::prometheus::escape_label_value(&self.model, &mut s);
        s.push_str("\"}");
        s
    }
}

/// Every series of the server. Share it as `Arc<Metrics>`; every method takes `&self`.
pub struct Metrics {
    pub routes: RouteTable,
    metrics_route: RouteId,

    pub http_requests_total: HttpCounter,
    pub http_requests_in_flight: Gauge,
    pub http_request_errors_total: RouteCounter,
    pub llm_time_to_first_token_seconds: Histogram,
    pub llm_time_to_last_token_seconds: Histogram,
    pub llm_question_length_chars: Histogram,
    pub llm_answer_length_chars: Histogram,
    pub rejected_requests_total: RouteCounter,
    pub requests_per_ip_total: RouteCounter,

    pub(crate) start_time_seconds: f64,
    /// When the server made its metrics, on the monotonic clock: its uptime counts from here (the
    /// process's start time from `/proc` is the kernel's, and a wall clock that steps moves it).
    started: Instant,
    pub(crate) build_labels: RwLock<String>,
    build: RwLock<BuildInfo>,
    /// `None` on the CPU backend, where the `mtplx_gpu_*` families are left out.
    pub(crate) device: RwLock<Option<DeviceCounters>>,
    /// The last `/metrics` text per format, reused while nothing in it changed.
    pub(crate) render_cache: super::render_cache::RenderCache,

    pub llm_prompt_tokens_total: Counter,
    /// Decoded: every token the decode thread sampled.
    pub llm_generation_tokens_total: Counter,
    /// Delivered: the tokens the API took from the decode thread for its clients.
    pub llm_generation_tokens_delivered_total: Counter,
    pub llm_requests_running: Gauge,
    pub llm_requests_waiting: Gauge,
    /// The KV cache now: bytes and positions held (active and idle sequences), what the budget
    /// holds, and the sequences holding a cache. Sampled from the engine at scrape time.
    pub mtplx_kv_cache_used_bytes: Gauge,
    pub mtplx_kv_cache_capacity_bytes: Gauge,
    pub mtplx_kv_cache_used_tokens: Gauge,
    pub mtplx_kv_cache_capacity_tokens: Gauge,
    pub mtplx_kv_cache_sequences: Gauge,
    pub llm_spec_decode_num_drafts_total: Counter,
    pub llm_spec_decode_num_draft_tokens_total: Counter,
    pub llm_spec_decode_num_accepted_tokens_total: Counter,
    pub llm_spec_decode_num_accepted_tokens_per_pos_total: PositionCounter,
    pub llm_decode_tokens_per_second: Histogram,
    pub llm_inter_token_latency_seconds: Histogram,

    /// Chats created (`POST /v1/chats`).
    pub mtplx_chats_total: Counter,
    /// Chat messages stored, by role: `[user, assistant]`.
    pub mtplx_messages_total: [Counter; 2],
    /// Prompt tokens by where their keys and values came from: memory, disk, computed.
    pub mtplx_prompt_cache_tokens_total: [Counter; 3],
    /// Disk-tier lookups by outcome, in `DiskLookup::ALL`'s order.
    pub mtplx_prompt_cache_disk_lookups_total: [Counter; 7],
    /// Time of each write transaction of the chat store, on its thread.
    pub mtplx_db_write_seconds: Histogram,
    /// What a chat turn waited on the store, per turn (both round trips, summed).
    pub mtplx_chat_turn_db_wait_seconds: Histogram,

    /// The per-request records; its `dropped` is `mtplx_metrics_stream_dropped_total`, its
    /// `subscribers` `mtplx_metrics_stream_subscribers`.
    pub requests: RequestLog,
}

/// Decrements `http_requests_in_flight` when dropped (also on panic or cancellation).
pub struct InFlight<'a>(&'a Gauge);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Metrics {
    /// Seconds since the server started (`uptime_s` of `/health` and of the JSON snapshot).
    pub fn uptime_s(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// A registry keeping `history` per-request records (`--metrics-history`).
    pub fn new(history: usize, build: BuildInfo) -> Metrics {
        let routes = RouteTable::new();
        let metrics_route = routes.template(METRICS_ROUTE);
        let start = super::process::start_time().unwrap_or_else(super::process::unix_now);
        Metrics {
            routes,
            metrics_route,
            http_requests_total: HttpCounter::default(),
            http_requests_in_flight: Gauge::default(),
            http_request_errors_total: RouteCounter::default(),
            llm_time_to_first_token_seconds: Histogram::new(SECONDS(LATENCY_BUCKETS)),
            llm_time_to_last_token_seconds: Histogram::new(SECONDS(LATENCY_BUCKETS)),
            llm_question_length_chars: Histogram::new(CHARS),
            llm_answer_length_chars: Histogram::new(CHARS),
            rejected_requests_total: RouteCounter::default(),
            requests_per_ip_total: RouteCounter::default(),
            start_time_seconds: start,
            started: Instant::now(),
            build_labels: RwLock::new(build.label_block()),
            build: RwLock::new(build),
            device: RwLock::new(None),
            render_cache: Default::default(),
            llm_prompt_tokens_total: Counter::default(),
            llm_generation_tokens_total: Counter::default(),
            llm_generation_tokens_delivered_total: Counter::default(),
            llm_requests_running: Gauge::default(),
            llm_requests_waiting: Gauge::default(),
            mtplx_kv_cache_used_bytes: Gauge::default(),
            mtplx_kv_cache_capacity_bytes: Gauge::default(),
            mtplx_kv_cache_used_tokens: Gauge::default(),
            mtplx_kv_cache_capacity_tokens: Gauge::default(),
            mtplx_kv_cache_sequences: Gauge::default(),
            llm_spec_decode_num_drafts_total: Counter::default(),
            llm_spec_decode_num_draft_tokens_total: Counter::default(),
            llm_spec_decode_num_accepted_tokens_total: Counter::default(),
            llm_spec_decode_num_accepted_tokens_per_pos_total: PositionCounter::default(),
            llm_decode_tokens_per_second: Histogram::new(TOK_S),
            llm_inter_token_latency_seconds: Histogram::new(SECONDS(INTER_TOKEN_BUCKETS)),
            mtplx_chats_total: Counter::default(),
            mtplx_messages_total: Default::default(),
            mtplx_prompt_cache_tokens_total: Default::default(),
            mtplx_prompt_cache_disk_lookups_total: Default::default(),
            mtplx_db_write_seconds: Histogram::new(SECONDS(DB_WRITE_BUCKETS)),
            mtplx_chat_turn_db_wait_seconds: Histogram::new(SECONDS(DB_WRITE_BUCKETS)),
            requests: RequestLog::new(history),
        }
    }

    /// Convenience for sharing.
    pub fn shared(history: usize, build: BuildInfo) -> Arc<Metrics> {
        Arc::new(Self::new(history, build))
    }

    /// Resolve a route template once (at router construction); record with the id.
    pub fn route_id(&self, template: &str) -> RouteId {
        self.routes.template(template)
    }

    /// The label for a raw path (a 404 or a request rejected before routing): its own value for
    /// the first 64 distinct paths, `other` after that.
    pub fn route_label(&self, raw_path: &str) -> RouteId {
        self.routes.raw(raw_path)
    }

    /// Count a request as handled: `http_requests_total` (except `/metrics` itself) and, for a
    /// 5xx, `http_request_errors_total`. Call once per response, including rejected requests.
    pub fn record_http(&self, method: &str, route: RouteId, status: u16) {
        if route != self.metrics_route {
            self.http_requests_total.inc(route, method_index(method), status);
        }
        if status >= 500 {
            self.http_request_errors_total.inc(route);
        }
    }

    /// Mark a request as being handled until the guard drops.
    pub fn in_flight(&self) -> InFlight<'_> {
        self.http_requests_in_flight.inc();
        InFlight(&self.http_requests_in_flight)
    }

    /// The rate limiter saw a request on this route (`requests_per_ip_total`).
    pub fn record_rate_limit_seen(&self, route: RouteId) {
        self.requests_per_ip_total.inc(route);
    }

    /// The rate limiter answered 429 (`rejected_requests_total`).
    pub fn record_rate_limited(&self, route: RouteId) {
        self.rejected_requests_total.inc(route);
    }

    /// A write transaction of the chat store took `d` (`mtplx_db_write_seconds`).
    pub fn record_db_write(&self, d: std::time::Duration) {
        self.mtplx_db_write_seconds.observe_duration(d);
    }

    /// A chat turn waited `d` on the store in all: storing its question and reading the
    /// history, then storing its answer, each a round trip to the store's thread
    /// (`mtplx_chat_turn_db_wait_seconds`).
    pub fn record_chat_turn_db_wait(&self, d: std::time::Duration) {
        self.mtplx_chat_turn_db_wait_seconds.observe_duration(d);
    }

    /// A chat message was stored (`mtplx_messages_total{role}`); a user message was accepted
    /// (`llm_question_length_chars`) or an assistant message persisted (`llm_answer_length_chars`).
    pub fn record_chat_message(&self, assistant: bool, chars: u64) {
        self.mtplx_messages_total[assistant as usize].inc();
        if assistant {
            self.llm_answer_length_chars.observe_scaled(chars);
        } else {
            self.llm_question_length_chars.observe_scaled(chars);
        }
    }

    /// Replace the `model` label of `mtplx_build_info` (once the model is loaded).
    pub fn set_model(&self, model: &str) {
        let mut b = self.build.write().unwrap_or_else(|e| e.into_inner());
        b.model = model.into();
        *self.build_labels.write().unwrap_or_else(|e| e.into_inner()) = b.label_block();
    }

    /// The device's counters as the engine last published them.
    pub fn set_device(&self, d: Option<DeviceCounters>) {
        *self.device.write().unwrap_or_else(|e| e.into_inner()) = d;
    }

    pub fn build_info(&self) -> BuildInfo {
        self.build.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Records of finished requests; see [`RequestLog`].
    pub fn latest(&self) -> Option<Arc<Entry>> {
        self.requests.latest()
    }
}
