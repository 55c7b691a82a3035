//! Metrics, beside the request flow: every layer may record, none is called back.
//!
//! - `registry`, `histogram`, `route_labels`: counters, gauges and histograms whose recording
//!   takes no lock and allocates nothing (label sets resolve to fixed slots of atomic arrays;
//!   `route_labels` interns the `route` label values).
//! - `series`: [`Metrics`], one typed field per exposed series, and the recording calls the api
//!   layer makes; `generation_outcome`: what a finished generation reports, and
//!   [`Metrics::record_generation`], called at the end of every generation.
//! - `prometheus` and `render`: Prometheus text 0.0.4 and OpenMetrics 1.0, by hand, into a
//!   reused buffer; `negotiate`: which format (and stream framing) `Accept` asks for.
//! - `request_record`: the per-request JSON record and its SSE/NDJSON framings;
//!   `request_log`: the ring buffer of the last `--metrics-history` records and its fan-out to
//!   live stream subscribers.
//! - `process`: `process_*` from `/proc/self`.
//! - `server_state`: the JSON envelope: records, quantiles and the server's state now.
//!
//! See `docs/metrics.md` for every series, bucket and field.
#![forbid(unsafe_code)]

pub mod generation_outcome;
mod help;
pub mod histogram;
pub mod negotiate;
pub mod process;
pub mod prometheus;
pub mod registry;
pub mod render;
mod render_cache;
pub mod request_log;
pub mod request_record;
pub mod route_labels;
pub mod series;
pub mod server_state;

pub use generation_outcome::{DecodeSpan, GenerationClock, GenerationOutcome, SpecStats};
pub use negotiate::{
    negotiate, negotiate_or, negotiate_stream, Format, StreamFormat, JSON_CONTENT_TYPE, NDJSON_CONTENT_TYPE,
    OPENMETRICS_CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE, SSE_CONTENT_TYPE,
};
pub use request_log::{Entry, RequestLog, Subscription};
pub use request_record::{
    ndjson_line, sse_event, FinishStatus, KvRecord, PrefixCommit, RequestRecord, KEEP_ALIVE, KEEP_ALIVE_INTERVAL,
};
pub use route_labels::{RouteId, MAX_RAW_ROUTES, OTHER_ROUTE};
pub use series::{BuildInfo, DeviceCounters, InFlight, Metrics};
