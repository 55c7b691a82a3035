//! Walking every family of [`Metrics`] into one text exposition (or the JSON envelope).

use super::histogram::{Histogram, MAX_BUCKETS};
use super::process::ProcessStats;
use super::prometheus::{write_f64, write_header, write_i64, write_u64, Format, Kind};
use super::registry::{Counter, Gauge, RouteCounter, METHODS};
use super::series::Metrics;

struct Out<'a> {
    fmt: Format,
    buf: &'a mut Vec<u8>,
}

impl Out<'_> {
    fn head(&mut self, name: &str, kind: Kind, unit: Option<&str>, help: &str) {
        write_header(self.buf, self.fmt, name, kind, unit, help);
    }

    fn put(&mut self, s: &str) {
        self.buf.extend_from_slice(s.as_bytes());
    }

    fn counter(&mut self, name: &str, help: &str, c: &Counter) {
        self.head(name, Kind::Counter, None, help);
        self.put(name);
        self.buf.push(b' ');
        write_u64(self.buf, c.get());
        self.buf.push(b'\n');
    }

    fn gauge(&mut self, name: &str, help: &str, g: &Gauge) {
        self.head(name, Kind::Gauge, None, help);
        self.put(name);
        self.buf.push(b' ');
        write_i64(self.buf, g.get());
        self.buf.push(b'\n');
    }

    fn gauge_f64(&mut self, name: &str, kind: Kind, unit: Option<&str>, help: &str, v: f64) {
        self.head(name, kind, unit, help);
        self.put(name);
        self.buf.push(b' ');
        write_f64(self.buf, v);
        self.buf.push(b'\n');
    }

    fn route_counter(&mut self, m: &Metrics, name: &str, help: &str, c: &RouteCounter) {
        self.head(name, Kind::Counter, None, help);
        for i in 0..m.routes.len() {
            let id = super::routes::RouteId(i as u16);
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
            write_u64(self.buf, v);
            self.buf.push(b'\n');
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
            write_u64(self.buf, *c);
            self.buf.push(b'\n');
        }
        self.put(name);
        self.put("_sum ");
        write_f64(self.buf, sum);
        self.buf.push(b'\n');
        self.put(name);
        self.put("_count ");
        write_u64(self.buf, count);
        self.buf.push(b'\n');
    }
}

impl Metrics {
    /// Render into `out` (cleared first) in `format`, reading `/proc/self` for `process_*`.
    pub fn render(&self, format: Format, out: &mut Vec<u8>) {
        let stats = ProcessStats::read(self.start_time_seconds);
        self.render_with(format, out, &stats)
    }

    /// Render with given process readings (benchmarks and tests pin them).
    pub fn render_with(&self, format: Format, out: &mut Vec<u8>, stats: &ProcessStats) {
        out.clear();
        if format == Format::Json {
            out.extend_from_slice(&self.envelope_json(None));
            return;
        }
        let mut o = Out {
            fmt: format,
            buf: out,
        };
        self.render_seed003(&mut o);
        self.render_process(&mut o, stats);
        self.render_generation(&mut o);
        if format == Format::OpenMetrics {
            o.put("# EOF\n");
        }
    }

    fn render_seed003(&self, o: &mut Out<'_>) {
        let name = "http_requests_total";
        o.head(name, Kind::Counter, None, help::HTTP_REQUESTS);
        self.http_requests_total.for_each(|cell, v| {
            o.put("http_requests_total{method=\"");
            o.put(METHODS[(cell.method as usize).min(METHODS.len() - 1)]);
            o.put("\",route=\"");
            o.put(self.routes.escaped(cell.route));
            o.put("\",status=\"");
            write_u64(o.buf, cell.status as u64);
            o.put("\"} ");
            write_u64(o.buf, v);
            o.buf.push(b'\n');
        });
        let overflow = self.http_requests_total.overflow();
        if overflow > 0 {
            o.put("http_requests_total{method=\"other\",route=\"other\",status=\"other\"} ");
            write_u64(o.buf, overflow);
            o.buf.push(b'\n');
        }
        o.gauge(
            "http_requests_in_flight",
            help::IN_FLIGHT,
            &self.http_requests_in_flight,
        );
        o.route_counter(
            self,
            "http_request_errors_total",
            help::ERRORS,
            &self.http_request_errors_total,
        );
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
        o.histogram(
            "llm_question_length_chars",
            Some("chars"),
            help::QUESTION,
            &self.llm_question_length_chars,
        );
        o.histogram(
            "llm_answer_length_chars",
            Some("chars"),
            help::ANSWER,
            &self.llm_answer_length_chars,
        );
        o.route_counter(
            self,
            "rejected_requests_total",
            help::REJECTED,
            &self.rejected_requests_total,
        );
        o.route_counter(
            self,
            "requests_per_ip_total",
            help::PER_IP,
            &self.requests_per_ip_total,
        );
    }

    fn render_process(&self, o: &mut Out<'_>, s: &ProcessStats) {
        o.gauge_f64(
            "process_start_time_seconds",
            Kind::Gauge,
            Some("seconds"),
            help::START,
            s.start_time_seconds,
        );
        if let Some(rss) = s.resident_memory_bytes {
            o.gauge_f64(
                "process_resident_memory_bytes",
                Kind::Gauge,
                Some("bytes"),
                help::RSS,
                rss as f64,
            );
        }
        if let Some(cpu) = s.cpu_seconds {
            o.gauge_f64(
                "process_cpu_seconds_total",
                Kind::Counter,
                Some("seconds"),
                help::CPU,
                cpu,
            );
        }
        if let Some(fds) = s.open_fds {
            o.gauge_f64("process_open_fds", Kind::Gauge, None, help::FDS, fds as f64);
        }
        o.head("mtplx_build_info", Kind::Info, None, help::BUILD);
        o.put("mtplx_build_info");
        o.put(&self.build_labels.read().unwrap_or_else(|e| e.into_inner()));
        o.put(" 1\n");
    }

    fn render_generation(&self, o: &mut Out<'_>) {
        o.counter(
            "llm_prompt_tokens_total",
            help::PROMPT_TOKENS,
            &self.llm_prompt_tokens_total,
        );
        o.counter(
            "llm_generation_tokens_total",
            help::GEN_TOKENS,
            &self.llm_generation_tokens_total,
        );
        o.gauge(
            "llm_requests_running",
            help::RUNNING,
            &self.llm_requests_running,
        );
        o.gauge(
            "llm_requests_waiting",
            help::WAITING,
            &self.llm_requests_waiting,
        );
        o.counter(
            "llm_spec_decode_num_drafts_total",
            help::DRAFTS,
            &self.llm_spec_decode_num_drafts_total,
        );
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
            write_u64(o.buf, p as u64);
            o.put("\"} ");
            write_u64(o.buf, pos.get(p));
            o.buf.push(b'\n');
        }
        o.histogram(
            "llm_decode_tokens_per_second",
            None,
            help::DECODE_TOK_S,
            &self.llm_decode_tokens_per_second,
        );
        o.histogram(
            "llm_inter_token_latency_seconds",
            Some("seconds"),
            help::ITL,
            &self.llm_inter_token_latency_seconds,
        );
        o.counter(
            "mtplx_metrics_stream_dropped_total",
            help::DROPPED,
            &self.requests.dropped,
        );
    }
}

/// HELP texts: the meanings of seed 003 for its series, the usual ones for the rest.
pub mod help {
    pub const HTTP_REQUESTS: &str =
        "Requests received, labelled by method, route, status; excludes /metrics itself.";
    pub const IN_FLIGHT: &str = "Requests currently being handled.";
    pub const ERRORS: &str = "Requests that ended in a 5xx response or an unhandled exception.";
    pub const TTFT: &str =
        "Time from the start of a generation to its first token reaching the client.";
    pub const TTLT: &str = "Time from the start of a generation to it reaching a terminal state (done, timed out, errored, or interrupted).";
    pub const QUESTION: &str = "Length of each accepted user message, in characters.";
    pub const ANSWER: &str =
        "Length of each persisted (completed) assistant message, in characters.";
    pub const REJECTED: &str = "Requests rejected by rate limiting: every 429 the limiter raised.";
    pub const PER_IP: &str = "Requests seen by the rate limiter, labelled by route (not by client IP, to keep cardinality bounded).";
    pub const START: &str = "Start time of the process since unix epoch in seconds.";
    pub const RSS: &str = "Resident memory size in bytes.";
    pub const CPU: &str = "Total user and system CPU time spent in seconds.";
    pub const FDS: &str = "Number of open file descriptors.";
    pub const BUILD: &str =
        "Build of the running server: version, compute backend and loaded model (always 1).";
    pub const PROMPT_TOKENS: &str =
        "Prompt tokens of finished generations (cached plus newly prefilled).";
    pub const GEN_TOKENS: &str = "Tokens generated.";
    pub const RUNNING: &str = "Generations being decoded.";
    pub const WAITING: &str = "Generations queued for the decode thread.";
    pub const DRAFTS: &str = "Speculative decoding rounds (drafts verified by the target model).";
    pub const DRAFT_TOKENS: &str = "Tokens proposed by the draft (MTP) head.";
    pub const ACCEPTED: &str = "Draft tokens accepted by verification.";
    pub const PER_POS: &str =
        "Draft tokens accepted, by position in the draft (0 is the first drafted token).";
    pub const DECODE_TOK_S: &str =
        "Decode speed of each generation: tokens after the first over the time after the first.";
    pub const ITL: &str = "Time between consecutive token deliveries of a generation.";
    pub const DROPPED: &str =
        "Records dropped (oldest first) from the queues of slow live-stream subscribers.";
}

#[cfg(test)]
mod tests {
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
        m.llm_spec_decode_num_accepted_tokens_per_pos_total
            .add(1, 3);
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
                    seen.entry(rest.split(' ').next().unwrap().into())
                        .or_default()
                        .0 += 1;
                } else if let Some(rest) = l.strip_prefix("# TYPE ") {
                    seen.entry(rest.split(' ').next().unwrap().into())
                        .or_default()
                        .1 += 1;
                }
            }
            assert_eq!(seen.len(), 25, "{f:?}: one family per series");
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
                (
                    if le == "+Inf" {
                        f64::INFINITY
                    } else {
                        le.parse().unwrap()
                    },
                    v.parse().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            buckets.len(),
            crate::metrics::series::LATENCY_BUCKETS.len() + 1
        );
        assert!(buckets
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
        assert_eq!(buckets.last().unwrap(), &(f64::INFINITY, 5));
        assert!(t.contains("llm_time_to_first_token_seconds_count 5\n"));
        assert!(t.contains("llm_time_to_first_token_seconds_bucket{le=\"0.001\"} 1\n"));
        assert!(t.contains("llm_time_to_first_token_seconds_bucket{le=\"0.005\"} 2\n"));
        // 1e9 s is clamped to the hdr maximum (an hour).
        assert!(
            t.contains("llm_time_to_first_token_seconds_sum 3642.2035\n"),
            "{t}"
        );
    }

    #[test]
    fn samples_escape_labels_and_skip_metrics_route() {
        let t = text(&populated(), Format::Prometheus);
        assert!(t.contains("http_requests_total{method=\"POST\",route=\"/v1/chat/completions\",status=\"200\"} 2\n"));
        assert!(t.contains("http_requests_total{method=\"GET\",route=\"/weird\\\"path\\\\x\\ny\",status=\"404\"} 1\n"));
        assert!(
            !t.contains("route=\"/metrics\",status"),
            "/metrics is not counted in http_requests_total"
        );
        assert!(t.contains("http_request_errors_total{route=\"/v1/chat/completions\"} 1\n"));
        assert!(t.contains("rejected_requests_total{route=\"/v1/chat/completions\"} 1\n"));
        assert!(t.contains("requests_per_ip_total{route=\"/v1/chat/completions\"} 0\n"));
        assert!(t.contains("mtplx_build_info{version=\"0.1.0\",backend=\"cpu\",model=\"smol\\\"lm\\\\2\\nq4\"} 1\n"));
        assert!(t.contains("process_start_time_seconds 1.5e+09\n"));
        assert!(t.contains("process_cpu_seconds_total 0.25\n"));
        assert!(t.contains("llm_spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"} 0\n"));
        assert!(t.contains("llm_spec_decode_num_accepted_tokens_per_pos_total{position=\"1\"} 3\n"));
        assert!(!t.contains("# EOF"));
        assert!(t.ends_with("mtplx_metrics_stream_dropped_total 0\n"));
    }

    #[test]
    fn openmetrics_names_counter_families_without_total_and_ends_with_eof() {
        let t = text(&populated(), Format::OpenMetrics);
        assert!(t.contains("# TYPE http_requests counter\n"));
        assert!(
            t.contains("# TYPE process_cpu_seconds counter\n# UNIT process_cpu_seconds seconds\n")
        );
        assert!(t.contains("# TYPE mtplx_build info\n"));
        assert!(t.contains("\nhttp_requests_total{method=\"POST\""));
        assert!(t.contains("# TYPE llm_time_to_first_token_seconds histogram\n# UNIT llm_time_to_first_token_seconds seconds\n"));
        assert!(t.ends_with("mtplx_metrics_stream_dropped_total 0\n# EOF\n"));
        assert_eq!(t.matches("# EOF").count(), 1);
    }

    #[test]
    fn json_format_is_the_envelope() {
        let m = populated();
        let t = text(&m, Format::Json);
        let v: serde_json::Value = serde_json::from_str(&t).unwrap();
        assert!(v["latest"].is_null());
        assert_eq!(v["history"], serde_json::json!([]));
        assert_eq!(
            v["quantiles"]["llm_time_to_first_token_seconds"]["count"],
            5
        );
    }
}
