//! Content negotiation for the metrics routes: which exposition `GET /metrics` answers with,
//! and how the live stream is framed, from the request's `Accept` header.

/// `Content-Type` of the Prometheus text format.
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// `Content-Type` of OpenMetrics 1.0.
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// `Content-Type` of the JSON envelope.
pub const JSON_CONTENT_TYPE: &str = "application/json";
/// `Content-Type` of the live stream as Server-Sent Events.
pub const SSE_CONTENT_TYPE: &str = "text/event-stream";
/// `Content-Type` of the live stream as newline-delimited JSON.
pub const NDJSON_CONTENT_TYPE: &str = "application/x-ndjson";

/// What `GET /metrics` answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Prometheus,
    OpenMetrics,
    Json,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => PROMETHEUS_CONTENT_TYPE,
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
            Format::Json => JSON_CONTENT_TYPE,
        }
    }
}

/// Media ranges parsed from one `Accept` header before giving up (a header is bounded by the
/// HTTP layer anyway; this bounds the work per request).
pub const MAX_ACCEPT_RANGES: usize = 32;

/// The acceptable media types of an `Accept` header (RFC 9110 §12.5.1), with their q-values.
fn media_ranges(accept: &str) -> impl Iterator<Item = (&str, f32)> {
    accept.split(',').take(MAX_ACCEPT_RANGES).filter_map(|range| {
        let mut parts = range.split(';');
        let ty = parts.next()?.trim();
        let mut q = 1.0f32;
        for p in parts {
            if let Some((k, v)) = p.split_once('=') {
                if k.trim().eq_ignore_ascii_case("q") {
                    q = v.trim().parse::<f32>().ok().filter(|q| (0.0..=1.0).contains(q)).unwrap_or(0.0);
                }
            }
        }
        (!ty.is_empty() && q > 0.0).then_some((ty, q))
    })
}

/// Choose the exposition for `GET /metrics` from its `Accept` header: the highest q-value among
/// the types we serve wins; at equal q an exact type beats a wildcard and earlier beats later.
/// No header, or nothing we serve, means Prometheus text (what scrapers without `Accept` expect).
pub fn negotiate(accept: Option<&str>) -> Format {
    negotiate_or(accept, Format::Prometheus)
}

/// [`negotiate`], with `default` served when `Accept` names no format we serve by name (no
/// header, `*/*`, or only types we do not serve): `--metrics-format`.
pub fn negotiate_or(accept: Option<&str>, default: Format) -> Format {
    let mut best: Option<(f32, u8, Format)> = None;
    for (ty, q) in media_ranges(accept.unwrap_or("")) {
        let (fmt, exact) = if ty.eq_ignore_ascii_case("application/openmetrics-text") {
            (Format::OpenMetrics, 1)
        } else if ty.eq_ignore_ascii_case("text/plain") {
            (Format::Prometheus, 1)
        } else if ty.eq_ignore_ascii_case("application/json") {
            (Format::Json, 1)
        } else if ty == "*/*" {
            (default, 0)
        } else if ty.eq_ignore_ascii_case("text/*") {
            (Format::Prometheus, 0)
        } else {
            continue;
        };
        if best.is_none_or(|(bq, be, _)| q > bq || (q == bq && exact > be)) {
            best = Some((q, exact, fmt));
        }
    }
    best.map_or(default, |(_, _, f)| f)
}

/// How the live stream is framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamFormat {
    Sse,
    Ndjson,
}

impl StreamFormat {
    pub fn content_type(self) -> &'static str {
        match self {
            StreamFormat::Sse => SSE_CONTENT_TYPE,
            StreamFormat::Ndjson => NDJSON_CONTENT_TYPE,
        }
    }
}

/// SSE unless `Accept` prefers `application/x-ndjson` (or `application/jsonl`) over
/// `text/event-stream`.
pub fn negotiate_stream(accept: Option<&str>) -> StreamFormat {
    let (mut sse, mut nd) = (0.0f32, 0.0f32);
    for (ty, q) in media_ranges(accept.unwrap_or("")) {
        if ty.eq_ignore_ascii_case(NDJSON_CONTENT_TYPE) || ty.eq_ignore_ascii_case("application/jsonl") {
            nd = nd.max(q);
        } else if ty.eq_ignore_ascii_case(SSE_CONTENT_TYPE) {
            sse = sse.max(q);
        }
    }
    if nd > sse {
        StreamFormat::Ndjson
    } else {
        StreamFormat::Sse
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_default_serves_clients_that_name_no_format() {
        for accept in [None, Some("*/*"), Some("image/png")] {
            assert_eq!(negotiate_or(accept, Format::Json), Format::Json, "{accept:?}");
        }
        // Named formats win over the default: Prometheus still scrapes text.
        let prom = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(negotiate_or(Some(prom), Format::Json), Format::OpenMetrics);
        assert_eq!(negotiate_or(Some("text/plain"), Format::Json), Format::Prometheus);
        assert_eq!(negotiate_or(Some("text/*"), Format::Json), Format::Prometheus);
    }

    #[test]
    fn accept_negotiation() {
        assert_eq!(negotiate(None), Format::Prometheus);
        assert_eq!(negotiate(Some("*/*")), Format::Prometheus);
        assert_eq!(negotiate(Some("application/json")), Format::Json);
        assert_eq!(negotiate(Some("image/png")), Format::Prometheus);
        // What Prometheus 2.x sends when scraping.
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(negotiate(Some(prom)), Format::OpenMetrics);
        assert_eq!(negotiate(Some("text/plain;q=0.5, application/json")), Format::Json);
        assert_eq!(negotiate(Some("application/json;q=0, */*")), Format::Prometheus);
        assert_eq!(negotiate(Some("*/*;q=0.9, application/json;q=0.9")), Format::Json);
        assert_eq!(negotiate(Some("APPLICATION/JSON; charset=utf-8")), Format::Json);
        assert_eq!(negotiate(Some(";;,,q=,")), Format::Prometheus);
        assert_eq!(negotiate_stream(None), StreamFormat::Sse);
        assert_eq!(negotiate_stream(Some("*/*")), StreamFormat::Sse);
        assert_eq!(negotiate_stream(Some("application/x-ndjson")), StreamFormat::Ndjson);
        assert_eq!(negotiate_stream(Some("text/event-stream, application/x-ndjson;q=0.5")), StreamFormat::Sse);
    }
}
