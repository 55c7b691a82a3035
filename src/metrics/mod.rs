//! Metrics, beside the request flow: every layer may record, none is called back.
//!
//! - `registry`, `histogram`, `routes`: counters, gauges and histograms whose recording takes
//!   no lock and allocates nothing (label sets resolve to fixed slots of atomic arrays).
//! - `series`: [`Metrics`], one typed field per exposed series, and the recording calls the api
//!   layer makes; `generation`: [`Metrics::record_generation`] at the end of every generation.
//! - `prometheus` and `render`: Prometheus text 0.0.4 and OpenMetrics 1.0, by hand, into a
//!   reused buffer; `negotiate`: which format (and stream framing) `Accept` asks for.
//! - `records` and `requests`: the per-request JSON record, the ring buffer of the last
//!   `--metrics-history` records and its fan-out to live SSE/NDJSON subscribers.
//! - `process`: `process_*` from `/proc/self`.
//!
//! See `docs/metrics.md` for every series, bucket and field.

pub mod generation;
pub mod histogram;
pub mod negotiate;
pub mod process;
pub mod prometheus;
pub mod records;
pub mod registry;
mod help;
pub mod render;
mod render_cache;
pub mod requests;
pub mod routes;
pub mod series;

pub use negotiate::negotiate_or;
pub use generation::{GenerationClock, GenerationOutcome, SpecStats};
pub use prometheus::{
    negotiate, negotiate_stream, Format, StreamFormat, JSON_CONTENT_TYPE, NDJSON_CONTENT_TYPE,
    OPENMETRICS_CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE, SSE_CONTENT_TYPE,
};
pub use records::{
    ndjson_line, sse_event, FinishStatus, KvSnapshot, PrefixCommit, RequestRecord, KEEP_ALIVE,
    KEEP_ALIVE_INTERVAL,
};
pub use requests::{Entry, RequestLog, Subscription};
pub use routes::{RouteId, MAX_RAW_ROUTES, OTHER_ROUTE};
pub use series::{BuildInfo, InFlight, Metrics};
