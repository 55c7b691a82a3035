//! `GET /health`: liveness plus what is being served.

use crate::http::Response;
use serde::Serialize;
use std::time::Instant;

/// The body of `GET /health`.
#[derive(Serialize)]
struct Health<'a> {
    status: &'static str,
    version: &'static str,
    /// Seconds since start, to the millisecond.
    uptime_s: f64,
    /// Left out when no model is loaded.
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
}

pub fn health(started: Instant, model: Option<&str>) -> Response {
    let body = Health {
        status: "ok",
        version: env!("CARGO_PKG_VERSION"),
        uptime_s: (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0,
        model,
    };
    Response::json(200, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(r: Response) -> serde_json::Value {
        let crate::http::Body::Full(bytes) = &r.body else { panic!("health is a full body") };
        serde_json::from_slice(bytes).unwrap()
    }

    #[test]
    fn the_model_is_named_when_loaded_and_left_out_when_not() {
        let started = Instant::now();
        let with: serde_json::Value = body(health(started, Some("m.gguf")));
        assert_eq!(with["status"], "ok");
        assert_eq!(with["model"], "m.gguf");
        assert!(with["uptime_s"].as_f64().unwrap() >= 0.0);
        let without: serde_json::Value = body(health(started, None));
        assert!(without.get("model").is_none(), "{without}");
    }
}
