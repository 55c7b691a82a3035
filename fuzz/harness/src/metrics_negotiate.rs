//! `Accept` negotiation for the metrics routes (`negotiate` picks the exposition of `/metrics`,
//! `negotiate_stream` the framing of the live stream) on arbitrary header values. Besides never
//! panicking, the choice must be one the header asked for, must not depend on ASCII case,
//! spacing or a trailing type we do not serve, and a type we serve put first at q=1 must win.
//! `negotiate_or` (`--metrics-format`) only changes what the header leaves open.

use mtplx_lite::metrics::negotiate::{negotiate, negotiate_or, negotiate_stream, StreamFormat};
use mtplx_lite::metrics::Format;

/// One input through the target: panics when an invariant breaks.
pub fn run(data: &[u8]) {
    let Ok(accept) = std::str::from_utf8(data) else {
        return;
    };
    let lower = accept.to_ascii_lowercase();
    let spaced = accept.replace(',', ", ").replace(';', " ; ");
    let trailing = format!("{accept}, image/png");

    let fmt = negotiate(Some(accept));
    match fmt {
        Format::Json => assert!(lower.contains("application/json"), "{accept:?}"),
        Format::OpenMetrics => {
            assert!(lower.contains("application/openmetrics-text"), "{accept:?}")
        }
        Format::Prometheus => {}
    }
    assert_eq!(negotiate(Some(&accept.to_ascii_uppercase())), fmt, "case: {accept:?}");
    assert_eq!(negotiate(Some(&spaced)), fmt, "spacing: {accept:?}");
    assert_eq!(negotiate(Some(&trailing)), fmt, "trailing type: {accept:?}");
    let first = |ty: &str| negotiate(Some(&format!("{ty}, {accept}")));
    assert_eq!(first("application/json"), Format::Json, "{accept:?}");
    assert_eq!(first("application/openmetrics-text"), Format::OpenMetrics, "{accept:?}");
    assert_eq!(first("text/plain"), Format::Prometheus, "{accept:?}");

    assert_eq!(negotiate_or(Some(accept), Format::Prometheus), fmt, "{accept:?}");
    match negotiate_or(Some(accept), Format::Json) {
        Format::OpenMetrics => {
            assert!(lower.contains("application/openmetrics-text"), "{accept:?}")
        }
        Format::Prometheus => assert!(lower.contains("text/"), "json default: {accept:?}"),
        Format::Json => {}
    }

    let stream = negotiate_stream(Some(accept));
    if stream == StreamFormat::Ndjson {
        assert!(lower.contains("ndjson") || lower.contains("jsonl"), "{accept:?}");
    }
    assert_eq!(negotiate_stream(Some(&accept.to_ascii_uppercase())), stream, "case: {accept:?}");
    assert_eq!(negotiate_stream(Some(&spaced)), stream, "spacing: {accept:?}");
    assert_eq!(negotiate_stream(Some(&trailing)), stream, "trailing type: {accept:?}");
    let first_stream = negotiate_stream(Some(&format!("text/event-stream, {accept}")));
    assert_eq!(first_stream, StreamFormat::Sse, "{accept:?}");
}
