//! The three metrics routes: `/metrics` (Prometheus text, OpenMetrics or JSON by `Accept`),
//! `/v1/mtplx/metrics` (the JSON envelope) and `/v1/mtplx/metrics/stream` (SSE or NDJSON).

use super::error::ApiError;
use super::state::MetricsDefault;
use crate::http::{Request, Response};
use crate::metrics::{negotiate_or, negotiate_stream, Format, Metrics, StreamFormat};
use std::sync::Arc;
use std::time::Duration;

/// Largest `?limit=` honoured; the ring holds at most `--metrics-history` records anyway.
pub const MAX_LIMIT: usize = 100_000;
/// Longest `?batch_ms=` of the stream: a live view that waits longer is no longer live.
pub const MAX_BATCH_MS: u64 = 10_000;

/// `GET /metrics`: the format `Accept` names, or `default` when it names none (`*/*`, or no
/// header, as curl and Python's requests send). The JSON envelope honours `?limit=` as on
/// `/v1/mtplx/metrics` (a poller of the server's state asks for `limit=0`).
pub fn prometheus(req: &Request, metrics: &Metrics, default: MetricsDefault) -> Result<Response, ApiError> {
    let fallback = match default {
        MetricsDefault::Prometheus => Format::Prometheus,
        MetricsDefault::Json => Format::Json,
    };
    let format = negotiate_or(req.header("accept"), fallback);
    if format == Format::Json {
        return snapshot(req, metrics);
    }
    Ok(Response::shared(200, format.content_type(), metrics.render_shared(format)))
}

fn limit(req: &Request) -> Result<Option<usize>, ApiError> {
    match req.query_param("limit") {
        None => Ok(None),
        Some(v) => v.parse::<usize>().ok().filter(|&n| n <= MAX_LIMIT).map(Some).ok_or_else(|| {
            ApiError::invalid("limit", format!("'limit' must be an integer between 0 and {MAX_LIMIT}, got '{v}'"))
        }),
    }
}

pub fn snapshot(req: &Request, metrics: &Metrics) -> Result<Response, ApiError> {
    Ok(Response::new(200, Format::Json.content_type(), metrics.envelope_json(limit(req)?)))
}

fn batch(req: &Request) -> Result<Duration, ApiError> {
    match req.query_param("batch_ms") {
        None => Ok(Duration::ZERO),
        Some(v) => v.parse::<u64>().ok().filter(|&n| n <= MAX_BATCH_MS).map(Duration::from_millis).ok_or_else(|| {
            ApiError::invalid(
                "batch_ms",
                format!("'batch_ms' must be an integer between 0 and {MAX_BATCH_MS}, got '{v}'"),
            )
        }),
    }
}

/// The live stream. `Last-Event-ID` (what EventSource sends on reconnect) replays the records
/// the client missed that are still in the ring; `?batch_ms=N` writes the records of each N ms
/// together (see [`crate::metrics::Subscription::pump`]).
pub fn stream(req: &Request, metrics: &Arc<Metrics>) -> Result<Response, ApiError> {
    let batch = batch(req)?;
    let last = match req.header("last-event-id").map(str::trim) {
        None | Some("") => None,
        Some(v) => Some(v.parse::<u64>().map_err(|_| {
            ApiError::invalid("Last-Event-ID", format!("'Last-Event-ID' must be a record id (an integer), got '{v}'"))
        })?),
    };
    let format = negotiate_stream(req.header("accept"));
    let sub = metrics.requests.subscribe(last);
    let (tx, rx) = async_channel::bounded(16);
    let mut resp = Response::sse_produced(rx, Box::pin(sub.pump(format, tx, batch)));
    if format == StreamFormat::Ndjson {
        for (_, value) in resp.headers.iter_mut().filter(|(n, _)| n.eq_ignore_ascii_case("content-type")) {
            *value = format.content_type().into();
        }
    }
    Ok(resp)
}
