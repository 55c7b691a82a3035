//! The three metrics routes: `/metrics` (Prometheus text, OpenMetrics or JSON by `Accept`),
//! `/v1/mtplx/metrics` (the JSON envelope) and `/v1/mtplx/metrics/stream` (SSE or NDJSON).

use super::error::ApiError;
use crate::http::{Request, Response};
use crate::metrics::{negotiate, negotiate_stream, Format, Metrics, StreamFormat};
use std::sync::Arc;

/// Largest `?limit=` honoured; the ring holds at most `--metrics-history` records anyway.
pub const MAX_LIMIT: usize = 100_000;

/// Compares in time independent of where the strings differ (length still leaks, as it must).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `None` when the request may see metrics; otherwise the 401 to send (no metric text).
pub fn check_token(req: &Request, token: Option<&str>) -> Option<ApiError> {
    let token = token?;
    let given = req.header("authorization").and_then(|h| {
        let (scheme, rest) = h.trim().split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
    });
    match given {
        Some(g) if constant_time_eq(g.as_bytes(), token.as_bytes()) => None,
        Some(_) => Some(unauthorized("the bearer token does not match")),
        None => Some(unauthorized("the metrics routes need 'Authorization: Bearer <token>'")),
    }
}

fn unauthorized(msg: &str) -> ApiError {
    ApiError::new(401, "authentication_error", msg).code("invalid_api_key").header("WWW-Authenticate", "Bearer realm=\"mtplx-metrics\"")
}

pub fn prometheus(req: &Request, metrics: &Metrics) -> Response {
    let format = negotiate(req.header("accept"));
    Response::shared(200, format.content_type(), metrics.render_shared(format))
}

fn limit(req: &Request) -> Result<Option<usize>, ApiError> {
    match req.query_param("limit") {
        None => Ok(None),
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|&n| n <= MAX_LIMIT)
            .map(Some)
            .ok_or_else(|| ApiError::invalid("limit", format!("'limit' must be an integer between 0 and {MAX_LIMIT}, got '{v}'"))),
    }
}

pub fn snapshot(req: &Request, metrics: &Metrics) -> Result<Response, ApiError> {
    Ok(Response::new(200, Format::Json.content_type(), metrics.envelope_json(limit(req)?)))
}

/// The live stream. `Last-Event-ID` (what EventSource sends on reconnect) replays the records
/// the client missed that are still in the ring.
pub fn stream(req: &Request, metrics: &Arc<Metrics>) -> Result<Response, ApiError> {
    let last = match req.header("last-event-id").map(str::trim) {
        None | Some("") => None,
        Some(v) => Some(v.parse::<u64>().map_err(|_| ApiError::invalid("Last-Event-ID", format!("'Last-Event-ID' must be a record id (an integer), got '{v}'")))?),
    };
    let format = negotiate_stream(req.header("accept"));
    let sub = metrics.requests.subscribe(last);
    let (tx, rx) = async_channel::bounded(16);
    let mut resp = Response::sse_produced(rx, Box::pin(sub.pump(format, tx)));
    if format == StreamFormat::Ndjson {
        for (_, value) in resp.headers.iter_mut().filter(|(n, _)| n.eq_ignore_ascii_case("content-type")) {
            *value = format.content_type().into();
        }
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_is_equality() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(constant_time_eq(b"", b""));
    }
}
