//! The text expositions as a scraper reads them: families, buckets, escaping, the format
//! differences, and the JSON envelope.

use super::*;
use crate::metrics::series::BuildInfo;
use std::collections::HashMap;

fn populated() -> Metrics {
    let m = Metrics::new(8, BuildInfo::current("cpu", "smol\"lm\\2\nq4"));
    let chat = m.route_id("/v1/chat/completions");
    m.record_http("POST", chat, 200);
    m.record_http("POST", chat, 200);
    m.record_http("POST", chat, 503);
    m.record_http("GET", m.route_id("/metrics"), 200);
    m.record_http("GET", m.route_label("/weird\"path\\x\ny"), 404);
    m.record_rate_limited(chat);
    for v in [0.0005, 0.003, 0.2, 42.0, 1e9] {
        m.llm_time_to_first_token_seconds.observe(v);
    }
    m.llm_spec_decode_num_accepted_tokens_per_pos_total.add(1, 3);
    m
}

fn text(m: &Metrics, f: Format) -> String {
    let mut out = b"stale".to_vec();
    m.render_with(
        f,
        &mut out,
        &ProcessStats {
            start_time_seconds: 1.5e9,
            resident_memory_bytes: Some(1 << 20),
            cpu_seconds: Some(0.25),
            open_fds: Some(9),
        },
    );
    String::from_utf8(out).unwrap()
}

#[test]
fn help_and_type_once_per_family_and_before_samples() {
    for f in [Format::Prometheus, Format::OpenMetrics] {
        let t = text(&populated(), f);
        let mut seen: HashMap<String, (usize, usize)> = HashMap::new();
        for l in t.lines() {
            if let Some(rest) = l.strip_prefix("# HELP ") {
                seen.entry(rest.split(' ').next().unwrap().into()).or_default().0 += 1;
            } else if let Some(rest) = l.strip_prefix("# TYPE ") {
                seen.entry(rest.split(' ').next().unwrap().into()).or_default().1 += 1;
            }
        }
        assert_eq!(seen.len(), 39, "{f:?}: one family per series");
        assert!(seen.values().all(|&(h, t)| h == 1 && t == 1), "{seen:?}");
        assert!(!t.starts_with("stale"), "buffer is cleared");
    }
}

#[test]
fn histogram_buckets_cumulative_increasing_and_inf_is_count() {
    let t = text(&populated(), Format::Prometheus);
    let buckets: Vec<(f64, u64)> = t
        .lines()
        .filter_map(|l| l.strip_prefix("llm_time_to_first_token_seconds_bucket{le=\""))
        .map(|l| {
            let (le, v) = l.split_once("\"} ").unwrap();
            (if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap() }, v.parse().unwrap())
        })
        .collect();
    assert_eq!(buckets.len(), crate::metrics::series::LATENCY_BUCKETS.len() + 1);
    assert!(buckets.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
    assert_eq!(buckets.last().unwrap(), &(f64::INFINITY, 5));
    assert!(t.contains("llm_time_to_first_token_seconds_count 5\n"));
    assert!(t.contains("llm_time_to_first_token_seconds_bucket{le=\"0.001\"} 1\n"));
    assert!(t.contains("llm_time_to_first_token_seconds_bucket{le=\"0.005\"} 2\n"));
    // 1e9 s is clamped to the hdr maximum (an hour).
    assert!(t.contains("llm_time_to_first_token_seconds_sum 3642.2035\n"), "{t}");
}

#[test]
fn samples_escape_labels_and_skip_metrics_route() {
    let t = text(&populated(), Format::Prometheus);
    assert!(t.contains("http_requests_total{method=\"POST\",route=\"/v1/chat/completions\",status=\"200\"} 2\n"));
    assert!(t.contains("http_requests_total{method=\"GET\",route=\"/weird\\\"path\\\\x\\ny\",status=\"404\"} 1\n"));
    assert!(!t.contains("route=\"/metrics\",status"), "/metrics is not counted in http_requests_total");
    assert!(t.contains("http_request_errors_total{route=\"/v1/chat/completions\"} 1\n"));
    assert!(t.contains("rejected_requests_total{route=\"/v1/chat/completions\"} 1\n"));
    assert!(t.contains("requests_per_ip_total{route=\"/v1/chat/completions\"} 0\n"));
    assert!(t.contains("mtplx_build_info{version=\"0.1.0\",backend=\"cpu\",model=\"smol\\\"lm\\\\2\\nq4\"} 1\n"));
    assert!(t.contains("process_start_time_seconds 1.5e+09\n"));
    assert!(t.contains("process_cpu_seconds_total 0.25\n"));
    assert!(t.contains("llm_spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"} 0\n"));
    assert!(t.contains("llm_spec_decode_num_accepted_tokens_per_pos_total{position=\"1\"} 3\n"));
    assert!(!t.contains("# EOF"));
    assert!(t.ends_with("mtplx_metrics_stream_dropped_total 0\n# HELP mtplx_metrics_stream_subscribers Open subscriptions to the live record stream (not counted in http_requests_in_flight).\n# TYPE mtplx_metrics_stream_subscribers gauge\nmtplx_metrics_stream_subscribers 0\n"), "{t}");
}

#[test]
fn openmetrics_names_counter_families_without_total_and_ends_with_eof() {
    let t = text(&populated(), Format::OpenMetrics);
    assert!(t.contains("# TYPE http_requests counter\n"));
    assert!(t.contains("# TYPE process_cpu_seconds counter\n# UNIT process_cpu_seconds seconds\n"));
    assert!(t.contains("# TYPE mtplx_build info\n"));
    assert!(t.contains("\nhttp_requests_total{method=\"POST\""));
    assert!(t.contains(
        "# TYPE llm_time_to_first_token_seconds histogram\n# UNIT llm_time_to_first_token_seconds seconds\n"
    ));
    assert!(t.ends_with("mtplx_metrics_stream_subscribers 0\n# EOF\n"));
    assert_eq!(t.matches("# EOF").count(), 1);
}

#[test]
fn json_format_is_the_envelope() {
    let m = populated();
    let t = text(&m, Format::Json);
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    assert!(v["latest"].is_null());
    assert_eq!(v["history"], serde_json::json!([]));
    assert_eq!(v["quantiles"]["llm_time_to_first_token_seconds"]["count"], 5);
}

#[test]
fn stream_subscribers_and_delivered_tokens_are_exposed() {
    let m = populated();
    let sub = m.requests.subscribe(None);
    m.llm_generation_tokens_total.add(6);
    m.llm_generation_tokens_delivered_total.add(5);
    let t = text(&m, Format::Prometheus);
    assert!(t.contains("\nmtplx_metrics_stream_subscribers 1\n"), "{t}");
    assert!(t.contains("\nllm_generation_tokens_total 6\n"), "{t}");
    assert!(t.contains("\nllm_generation_tokens_delivered_total 5\n"), "{t}");
    drop(sub);
    let t = text(&m, Format::Prometheus);
    assert!(t.contains("\nmtplx_metrics_stream_subscribers 0\n"), "{t}");
}
