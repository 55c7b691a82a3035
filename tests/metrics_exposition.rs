//! The expositions, checked by the reference tools: `promtool check metrics` for Prometheus
//! text 0.0.4 and the strict OpenMetrics parser of Python's `prometheus_client`. Both tools are
//! required (`tests/setup.sh` installs them); a missing tool fails the test with a message.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mtplx_lite::metrics::{BuildInfo, FinishStatus, Format, GenerationClock, GenerationOutcome, Metrics, SpecStats};

fn populated() -> Metrics {
    let m = Metrics::new(16, BuildInfo::current("cpu", "SmolLM2-135M \"Instruct\"\\Q4_1"));
    let chat = m.route_id("/v1/chat/completions");
    let models = m.route_id("/v1/models");
    m.route_id("/v1/chats/{chat_id}/messages");
    for i in 0..7 {
        let _g = m.in_flight();
        m.record_http("POST", chat, if i == 6 { 500 } else { 200 });
        m.record_rate_limit_seen(chat);
    }
    m.record_http("GET", models, 200);
    m.record_http("GET", m.route_label("/wp-admin/\"x\"\\y\nz é"), 404);
    m.record_http("BREW", m.route_label("/coffee"), 405);
    m.record_rate_limited(chat);
    let _still_running = m.in_flight();
    m.llm_requests_running.set(1);
    m.llm_requests_waiting.set(2);
    let t0 = Instant::now();
    for (i, status) in [FinishStatus::Done, FinishStatus::Length, FinishStatus::Interrupted].into_iter().enumerate() {
        let mut clock = GenerationClock::start_at(t0);
        for k in 0..5u64 {
            clock.token_at(t0 + Duration::from_millis(3 + 20 * k + i as u64), &m);
        }
        clock.finish_at(t0 + Duration::from_millis(200 * (i as u64 + 1)));
        let mut o = GenerationOutcome::new(format!("req-{i}"), "/v1/chat/completions", "smol", status, clock);
        o.prompt_tokens = 30;
        o.completion_tokens = 5;
        o.question_chars = Some(100 + i as u64);
        o.answer_chars = 2000;
        o.spec = SpecStats {
            mtp_depth: 2,
            drafted_tokens: 4,
            accepted_tokens: 3,
            verify_calls: 2,
            accepted_by_depth: vec![2, 1],
            ..Default::default()
        };
        m.record_generation(o);
    }
    std::mem::forget(_still_running);
    m
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mtplx-expo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn run(cmd: &mut Command, what: &str) -> String {
    let out = common::output_within(cmd, common::CHILD_DEADLINE, what);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} rejected the exposition:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Samples as `name{k="v",...}` (labels sorted) -> value, parsed back by prometheus_client.
fn python_samples(path: &PathBuf, openmetrics: bool) -> BTreeMap<String, f64> {
    let module = if openmetrics { "prometheus_client.openmetrics.parser" } else { "prometheus_client.parser" };
    let script = format!(
        r#"
import json, sys
from {module} import text_string_to_metric_families
text = open(sys.argv[1], encoding="utf-8").read()
out = {{}}
for fam in text_string_to_metric_families(text):
    for s in fam.samples:
        key = s.name + "{{" + ",".join(f"{{k}}={{json.dumps(v, ensure_ascii=False)}}" for k, v in sorted(s.labels.items())) + "}}"
        out[key] = s.value
print(json.dumps(out, ensure_ascii=False))
"#
    );
    let stdout = run(common::python().arg("-c").arg(script).arg(path), "the test venv's python with prometheus_client");
    let v: BTreeMap<String, serde_json::Value> = serde_json::from_str(stdout.trim()).unwrap();
    v.into_iter().map(|(k, v)| (k, v.as_f64().unwrap())).collect()
}

#[test]
fn promtool_accepts_prometheus_text() {
    let m = populated();
    let mut buf = Vec::new();
    m.render(Format::Prometheus, &mut buf);
    let path = tmp("metrics.prom");
    std::fs::write(&path, &buf).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("promtool is required (Debian package `prometheus`); could not run it: {e}"));
    let out = common::Watched::new(promtool, "promtool check metrics").finish_within(common::CHILD_DEADLINE);
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}\n--- exposition ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&buf)
    );
}

fn check_values(s: &BTreeMap<String, f64>, counter_suffix_in_name: bool) {
    let _ = counter_suffix_in_name;
    let get =
        |k: &str| *s.get(k).unwrap_or_else(|| panic!("sample {k} missing; have {:?}", s.keys().collect::<Vec<_>>()));
    assert_eq!(get(r#"http_requests_total{method="POST",route="/v1/chat/completions",status="200"}"#), 6.0);
    assert_eq!(get(r#"http_requests_total{method="POST",route="/v1/chat/completions",status="500"}"#), 1.0);
    assert_eq!(get(r#"http_requests_total{method="other",route="/coffee",status="405"}"#), 1.0);
    assert_eq!(get(r#"http_requests_total{method="GET",route="/wp-admin/\"x\"\\y\nz é",status="404"}"#), 1.0);
    assert_eq!(get(r#"http_request_errors_total{route="/v1/chat/completions"}"#), 1.0);
    assert_eq!(get(r#"http_requests_in_flight{}"#), 1.0);
    assert_eq!(get(r#"requests_per_ip_total{route="/v1/chat/completions"}"#), 7.0);
    assert_eq!(get(r#"requests_per_ip_total{route="/v1/chats/{chat_id}/messages"}"#), 0.0);
    assert_eq!(get(r#"rejected_requests_total{route="/v1/chat/completions"}"#), 1.0);
    assert_eq!(get(r#"llm_time_to_last_token_seconds_count{}"#), 3.0);
    assert_eq!(get(r#"llm_time_to_last_token_seconds_bucket{le="0.25"}"#), 1.0);
    assert_eq!(get(r#"llm_time_to_last_token_seconds_bucket{le="0.5"}"#), 2.0);
    assert_eq!(get(r#"llm_time_to_last_token_seconds_bucket{le="+Inf"}"#), 3.0);
    assert!((get(r#"llm_time_to_last_token_seconds_sum{}"#) - 1.2).abs() < 1e-9);
    assert_eq!(get(r#"llm_time_to_first_token_seconds_bucket{le="0.0025"}"#), 0.0);
    assert_eq!(get(r#"llm_time_to_first_token_seconds_bucket{le="0.005"}"#), 3.0);
    assert_eq!(get(r#"llm_inter_token_latency_seconds_count{}"#), 12.0);
    assert_eq!(get(r#"llm_answer_length_chars_count{}"#), 2.0);
    assert_eq!(get(r#"llm_answer_length_chars_sum{}"#), 4000.0);
    assert_eq!(get(r#"llm_question_length_chars_sum{}"#), 303.0);
    assert_eq!(get(r#"llm_prompt_tokens_total{}"#), 90.0);
    assert_eq!(get(r#"llm_generation_tokens_total{}"#), 15.0);
    assert_eq!(get(r#"llm_requests_waiting{}"#), 2.0);
    assert_eq!(get(r#"llm_spec_decode_num_accepted_tokens_per_pos_total{position="0"}"#), 6.0);
    assert_eq!(get(r#"llm_spec_decode_num_accepted_tokens_per_pos_total{position="1"}"#), 3.0);
    assert_eq!(get(r#"llm_spec_decode_num_draft_tokens_total{}"#), 12.0);
    assert_eq!(get(r#"mtplx_metrics_stream_dropped_total{}"#), 0.0);
    assert_eq!(get(r#"mtplx_build_info{backend="cpu",model="SmolLM2-135M \"Instruct\"\\Q4_1",version="0.1.0"}"#), 1.0);
    assert!(get("process_resident_memory_bytes{}") > 0.0);
    assert!(get("process_open_fds{}") >= 3.0);
    assert!(get("process_start_time_seconds{}") > 1.5e9);
}

#[test]
fn strict_openmetrics_parser_accepts_and_values_round_trip() {
    let m = populated();
    let mut buf = Vec::new();
    m.render(Format::OpenMetrics, &mut buf);
    let path = tmp("metrics.om");
    std::fs::write(&path, &buf).unwrap();
    let s = python_samples(&path, true);
    check_values(&s, true);
}

#[test]
fn prometheus_text_values_round_trip() {
    let m = populated();
    let mut buf = Vec::new();
    m.render(Format::Prometheus, &mut buf);
    let path = tmp("metrics-values.prom");
    std::fs::write(&path, &buf).unwrap();
    let s = python_samples(&path, false);
    check_values(&s, false);
    // The same samples in both formats.
    let mut om = Vec::new();
    m.render(Format::OpenMetrics, &mut om);
    let p2 = tmp("metrics-values.om");
    std::fs::write(&p2, &om).unwrap();
    let o = python_samples(&p2, true);
    let volatile =
        |k: &str| k.starts_with("process_cpu") || k.starts_with("process_resident") || k.starts_with("process_open");
    let a: Vec<_> = s.iter().filter(|(k, _)| !volatile(k)).collect();
    let b: Vec<_> = o.iter().filter(|(k, _)| !volatile(k)).collect();
    assert_eq!(a, b);
}
