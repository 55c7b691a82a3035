//! Metrics against the `prometheus-client` crate, as ratios in one run:
//! 1. rendering the whole registry (~150 series with histograms), target >= 2x faster;
//! 2. recording one request's worth of the request-level series (HTTP, latency, lengths),
//!    target no slower.
//!
//! Run: `cargo bench --bench metrics_bench`. Prints timings and ratios; asserts nothing.

use std::hint::black_box;
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter as PcCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge as PcGauge;
use prometheus_client::metrics::histogram::Histogram as PcHistogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

use mtplx_lite::metrics::process::ProcessStats;
use mtplx_lite::metrics::series::{INTER_TOKEN_BUCKETS, LATENCY_BUCKETS, LENGTH_BUCKETS, TOKENS_PER_SECOND_BUCKETS};
use mtplx_lite::metrics::{BuildInfo, Format, Metrics};

const ROUTES: [&str; 12] = [
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/models",
    "/health",
    "/metrics",
    "/v1/mtplx/metrics",
    "/v1/mtplx/metrics/stream",
    "/v1/chats/{chat_id}/messages",
    "/v1/chats/{chat_id}",
    "/v1/chats",
    "/v1/embeddings",
    "/v1/responses",
];
const METHODS: [&str; 2] = ["GET", "POST"];
const STATUSES: [u16; 3] = [200, 400, 500];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    method: &'static str,
    route: &'static str,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PosLabels {
    position: u32,
}

struct Pc {
    registry: Registry,
    http: Family<HttpLabels, PcCounter>,
    in_flight: PcGauge,
    errors: Family<RouteLabels, PcCounter>,
    rejected: Family<RouteLabels, PcCounter>,
    per_ip: Family<RouteLabels, PcCounter>,
    ttft: PcHistogram,
    ttlt: PcHistogram,
    question: PcHistogram,
    answer: PcHistogram,
}

fn pc_registry() -> Pc {
    let mut r = Registry::default();
    let http = Family::<HttpLabels, PcCounter>::default();
    let in_flight = PcGauge::default();
    let errors = Family::<RouteLabels, PcCounter>::default();
    let rejected = Family::<RouteLabels, PcCounter>::default();
    let per_ip = Family::<RouteLabels, PcCounter>::default();
    let h = |b: &[f64]| PcHistogram::new(b.iter().copied());
    let (ttft, ttlt, question, answer) = (h(LATENCY_BUCKETS), h(LATENCY_BUCKETS), h(LENGTH_BUCKETS), h(LENGTH_BUCKETS));
    let (tps, itl) = (h(TOKENS_PER_SECOND_BUCKETS), h(INTER_TOKEN_BUCKETS));
    r.register("http_requests", "Requests received", http.clone());
    r.register("http_requests_in_flight", "Requests being handled", in_flight.clone());
    r.register("http_request_errors", "5xx", errors.clone());
    r.register("llm_time_to_first_token_seconds", "TTFT", ttft.clone());
    r.register("llm_time_to_last_token_seconds", "TTLT", ttlt.clone());
    r.register("llm_question_length_chars", "question", question.clone());
    r.register("llm_answer_length_chars", "answer", answer.clone());
    r.register("rejected_requests", "429", rejected.clone());
    r.register("requests_per_ip", "seen", per_ip.clone());
    for (name, v) in
        [("process_start_time_seconds", 1.7e9), ("process_resident_memory_bytes", 5e7), ("process_open_fds", 12.0)]
    {
        let g = PcGauge::<f64, std::sync::atomic::AtomicU64>::default();
        g.set(v);
        r.register(name, "process", g);
    }
    let cpu = PcCounter::<f64, std::sync::atomic::AtomicU64>::default();
    cpu.inc_by(1.25);
    r.register("process_cpu_seconds", "cpu", cpu);
    r.register("mtplx_build", "build", Info::new(vec![("version", "0.1.0"), ("backend", "cpu"), ("model", "smol")]));
    for name in [
        "llm_prompt_tokens",
        "llm_generation_tokens",
        "llm_spec_decode_num_drafts",
        "llm_spec_decode_num_draft_tokens",
        "llm_spec_decode_num_accepted_tokens",
        "mtplx_metrics_stream_dropped",
    ] {
        let c = PcCounter::<u64>::default();
        c.inc_by(1234);
        r.register(name, "tokens", c);
    }
    for name in ["llm_requests_running", "llm_requests_waiting"] {
        let g = PcGauge::<i64>::default();
        g.set(3);
        r.register(name, "gauge", g);
    }
    let pos = Family::<PosLabels, PcCounter>::default();
    for p in 0..4 {
        pos.get_or_create(&PosLabels { position: p }).inc_by(100 - p as u64);
    }
    r.register("llm_spec_decode_num_accepted_tokens_per_pos", "per pos", pos);
    r.register("llm_decode_tokens_per_second", "decode", tps.clone());
    r.register("llm_inter_token_latency_seconds", "itl", itl.clone());
    for i in 0..1000 {
        tps.observe(10.0 + i as f64 % 80.0);
        itl.observe(0.001 * (i % 200) as f64);
    }
    Pc { registry: r, http, in_flight, errors, rejected, per_ip, ttft, ttlt, question, answer }
}

fn ours() -> Metrics {
    let m = Metrics::new(256, BuildInfo::current("cpu", "smol"));
    for r in ROUTES {
        m.route_id(r);
    }
    m.llm_prompt_tokens_total.add(1234);
    m.llm_generation_tokens_total.add(1234);
    m.llm_spec_decode_num_drafts_total.add(1234);
    m.llm_spec_decode_num_draft_tokens_total.add(1234);
    m.llm_spec_decode_num_accepted_tokens_total.add(1234);
    m.requests.dropped.add(1234);
    m.llm_requests_running.set(3);
    m.llm_requests_waiting.set(3);
    for p in 0..4 {
        m.llm_spec_decode_num_accepted_tokens_per_pos_total.add(p, 100 - p as u64);
    }
    for i in 0..1000 {
        m.llm_decode_tokens_per_second.observe(10.0 + i as f64 % 80.0);
        m.llm_inter_token_latency_seconds.observe(0.001 * (i % 200) as f64);
    }
    m
}

/// Per-iteration time of two contenders: the best of several timed batches each, the batches
/// interleaved so that both see the same machine load (the bench machine is shared).
fn time2<A: FnMut(), B: FnMut()>(iters: u32, mut a: A, mut b: B) -> (Duration, Duration) {
    let (mut best_a, mut best_b) = (Duration::MAX, Duration::MAX);
    for _ in 0..15 {
        let t = Instant::now();
        for _ in 0..iters {
            a();
        }
        best_a = best_a.min(t.elapsed() / iters);
        let t = Instant::now();
        for _ in 0..iters {
            b();
        }
        best_b = best_b.min(t.elapsed() / iters);
    }
    (best_a, best_b)
}

fn main() {
    let pc = pc_registry();
    let m = ours();
    // Populate the same traffic in both: 12 routes x 2 methods x 3 statuses = 72 request series.
    for (k, route) in ROUTES.iter().enumerate() {
        let id = m.route_id(route);
        for method in METHODS {
            for status in STATUSES {
                let n = 1 + k as u64;
                for _ in 0..n {
                    m.record_http(method, id, status);
                }
                pc.http.get_or_create(&HttpLabels { method, route, status }).inc_by(n);
                if status >= 500 {
                    pc.errors.get_or_create(&RouteLabels { route }).inc_by(n);
                }
            }
        }
        let _ = pc.errors.get_or_create(&RouteLabels { route });
        let _ = pc.rejected.get_or_create(&RouteLabels { route });
        let _ = pc.per_ip.get_or_create(&RouteLabels { route });
    }

    let stats = ProcessStats {
        start_time_seconds: 1.7e9,
        resident_memory_bytes: Some(50_000_000),
        cpu_seconds: Some(1.25),
        open_fds: Some(12),
    };
    let chat = m.route_id("/v1/chat/completions");
    let record_ours = || {
        let _g = m.in_flight();
        m.record_http("POST", chat, 200);
        m.record_rate_limit_seen(chat);
        m.llm_time_to_first_token_seconds.observe(0.042);
        m.llm_time_to_last_token_seconds.observe(1.7);
        m.llm_question_length_chars.observe_scaled(120);
        m.llm_answer_length_chars.observe_scaled(900);
    };
    let record_pc = || {
        pc.in_flight.inc();
        pc.http.get_or_create(&HttpLabels { method: "POST", route: "/v1/chat/completions", status: 200 }).inc();
        pc.per_ip.get_or_create(&RouteLabels { route: "/v1/chat/completions" }).inc();
        pc.ttft.observe(0.042);
        pc.ttlt.observe(1.7);
        pc.question.observe(120.0);
        pc.answer.observe(900.0);
        pc.in_flight.dec();
    };
    // Record before measuring rendering so both registries hold the same observations.
    let (rec_ours, rec_pc) = time2(100_000, record_ours, record_pc);

    let mut buf = Vec::with_capacity(64 * 1024);
    m.render_with(Format::OpenMetrics, &mut buf, &stats);
    let series = buf
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty() && l[0] != b'#' && !l.windows(7).any(|w| w == b"_bucket"))
        .count();
    let mut s = String::with_capacity(64 * 1024);
    prometheus_client::encoding::text::encode(&mut s, &pc.registry).unwrap();
    println!(
        "registry: {series} series (histograms counted by _sum/_count), ours {} bytes, prometheus-client {} bytes",
        buf.len(),
        s.len()
    );

    let mut buf2 = Vec::with_capacity(64 * 1024);
    let (r_om, r_pc) = time2(
        1_000,
        || {
            m.render_with(Format::OpenMetrics, &mut buf, &stats);
            black_box(&buf);
        },
        || {
            s.clear();
            prometheus_client::encoding::text::encode(&mut s, &pc.registry).unwrap();
            black_box(&s);
        },
    );
    let (r_prom, r_proc) = time2(
        1_000,
        || {
            m.render_with(Format::Prometheus, &mut buf2, &stats);
            black_box(&buf2);
        },
        || {
            m.render(Format::Prometheus, &mut buf);
            black_box(&buf);
        },
    );
    println!(
        "render  ours OpenMetrics {:>9.2?}  ours Prometheus {:>9.2?}  prometheus-client {:>9.2?}",
        r_om, r_prom, r_pc
    );
    println!(
        "render  ratio prometheus-client / ours (OpenMetrics) = {:.2}x (target >= 2x)",
        r_pc.as_secs_f64() / r_om.as_secs_f64()
    );
    println!(
        "render  as GET /metrics does it, nothing changed between scrapes (the values walk, then the cached text): {:.2?}",
        r_proc
    );
    println!("record  ours {:>7.1?}  prometheus-client {:>7.1?}  per request (7 series)", rec_ours, rec_pc);
    println!(
        "record  ratio prometheus-client / ours = {:.2}x (target >= 1x)",
        rec_pc.as_secs_f64() / rec_ours.as_secs_f64()
    );
}
