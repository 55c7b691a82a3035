//! The JSON envelope of `/v1/mtplx/metrics` (and of `/metrics` asked for JSON): the records of
//! the last requests, the histograms' quantiles, and the server's state now (the counters and
//! gauges the text exposition shows), so that a JSON client needs no Prometheus parser.

use serde::Serialize;

use super::histogram::Quantiles;
use super::registry::METHODS;
use super::route_labels::RouteId;
use super::series::Metrics;

/// Full-resolution quantiles of the eight histograms (`quantiles` in the envelope).
#[derive(Serialize)]
struct QuantilesOut {
    llm_time_to_first_token_seconds: Quantiles,
    llm_time_to_last_token_seconds: Quantiles,
    llm_inter_token_latency_seconds: Quantiles,
    llm_decode_tokens_per_second: Quantiles,
    llm_question_length_chars: Quantiles,
    llm_answer_length_chars: Quantiles,
    mtplx_db_write_seconds: Quantiles,
    mtplx_chat_turn_db_wait_seconds: Quantiles,
}

/// One `{method, route, status}` cell of `http_requests_total`.
#[derive(Serialize)]
struct RequestCount<'a> {
    method: &'a str,
    route: &'a str,
    /// `null` for the overflow cell (`status="other"` in the text).
    status: Option<u16>,
    count: u64,
}

/// One route of a counter labelled by route.
#[derive(Serialize)]
struct RouteCount<'a> {
    route: &'a str,
    count: u64,
}

#[derive(Serialize)]
struct BuildOut {
    version: String,
    backend: String,
    adapter: String,
    model: String,
}

/// The KV cache now, as sampled by the last scrape (`mtplx_kv_cache_*`).
#[derive(Serialize)]
struct KvCacheOut {
    used_bytes: i64,
    capacity_bytes: i64,
    used_tokens: i64,
    capacity_tokens: i64,
    sequences: i64,
}

/// `server` in the envelope: the state the text exposition shows, read at the same instant.
#[derive(Serialize)]
struct ServerOut<'a> {
    uptime_s: f64,
    start_time_seconds: f64,
    build: BuildOut,
    /// `http_requests_total` (without `/metrics` itself), cells in first-seen order.
    requests: Vec<RequestCount<'a>>,
    /// `http_requests_in_flight`.
    requests_in_flight: i64,
    /// `llm_requests_running`, `llm_requests_waiting`.
    requests_running: i64,
    requests_waiting: i64,
    kv_cache: KvCacheOut,
    /// `rejected_requests_total`, summed and by route.
    rate_limited_total: u64,
    rate_limited: Vec<RouteCount<'a>>,
    /// `mtplx_metrics_stream_subscribers`.
    stream_subscribers: i64,
}

impl Metrics {
    /// `{"latest": ..., "history": [...], "quantiles": {...}, "server": {...}}` (newest last;
    /// `limit` caps the history). `quantiles` holds hdrhistogram count/mean/p50/p90/p99/max per
    /// histogram; `server` the counters and gauges of the text exposition.
    pub fn envelope_json(&self, limit: Option<usize>) -> Vec<u8> {
        let q = QuantilesOut {
            llm_time_to_first_token_seconds: self.llm_time_to_first_token_seconds.quantiles(),
            llm_time_to_last_token_seconds: self.llm_time_to_last_token_seconds.quantiles(),
            llm_inter_token_latency_seconds: self.llm_inter_token_latency_seconds.quantiles(),
            llm_decode_tokens_per_second: self.llm_decode_tokens_per_second.quantiles(),
            llm_question_length_chars: self.llm_question_length_chars.quantiles(),
            llm_answer_length_chars: self.llm_answer_length_chars.quantiles(),
            mtplx_db_write_seconds: self.mtplx_db_write_seconds.quantiles(),
            mtplx_chat_turn_db_wait_seconds: self.mtplx_chat_turn_db_wait_seconds.quantiles(),
        };
        let mut extra = b"\"quantiles\":".to_vec();
        extra.extend_from_slice(&serde_json::to_vec(&q).unwrap_or_default());
        extra.extend_from_slice(b",\"server\":");
        extra.extend_from_slice(&serde_json::to_vec(&self.server_state()).unwrap_or_default());
        self.requests.envelope_json(limit, Some(&extra))
    }

    fn server_state(&self) -> ServerOut<'_> {
        let mut requests = Vec::new();
        self.http_requests_total.for_each(|cell, count| {
            requests.push(RequestCount {
                method: METHODS[(cell.method as usize).min(METHODS.len() - 1)],
                route: self.routes.name(cell.route),
                status: Some(cell.status),
                count,
            })
        });
        let overflow = self.http_requests_total.overflow();
        if overflow > 0 {
            requests.push(RequestCount { method: "other", route: "other", status: None, count: overflow });
        }
        let rate_limited: Vec<RouteCount<'_>> = (0..self.routes.len())
            .map(|i| RouteId(i as u16))
            .map(|id| RouteCount { route: self.routes.name(id), count: self.rejected_requests_total.get(id) })
            .filter(|r| r.count > 0)
            .collect();
        let b = self.build_info();
        ServerOut {
            uptime_s: self.uptime_s(),
            start_time_seconds: self.start_time_seconds,
            build: BuildOut { version: b.version, backend: b.backend, adapter: b.adapter, model: b.model },
            requests,
            requests_in_flight: self.http_requests_in_flight.get(),
            requests_running: self.llm_requests_running.get(),
            requests_waiting: self.llm_requests_waiting.get(),
            kv_cache: KvCacheOut {
                used_bytes: self.mtplx_kv_cache_used_bytes.get(),
                capacity_bytes: self.mtplx_kv_cache_capacity_bytes.get(),
                used_tokens: self.mtplx_kv_cache_used_tokens.get(),
                capacity_tokens: self.mtplx_kv_cache_capacity_tokens.get(),
                sequences: self.mtplx_kv_cache_sequences.get(),
            },
            rate_limited_total: rate_limited.iter().map(|r| r.count).sum(),
            rate_limited,
            stream_subscribers: self.requests.subscribers.get(),
        }
    }
}
