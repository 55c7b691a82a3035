//! `GET /health`: liveness plus what is being served.

use crate::http::Response;
use serde_json::json;
use std::time::Instant;

pub fn health(started: Instant, model: Option<&str>) -> Response {
    let mut body = json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_s": (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
    });
    if let Some(m) = model {
        body["model"] = json!(m);
    }
    Response::json(200, &body)
}
