//! `GET /health`: liveness plus what is being served.

use crate::http::Response;
use serde::Serialize;

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
    /// Where the model runs (`cpu`, `gpu`) and on what.
    backend: &'a str,
    adapter: &'a str,
    /// What the GPU reported when it failed; left out while it works.
    #[serde(skip_serializing_if = "Option::is_none")]
    device_fault: Option<&'a str>,
}

/// The answer, `uptime_s` seconds after the server started: 200 and `ok`, or 503 and
/// `degraded` once the device failed (the server still answers, but cannot generate).
pub fn health(uptime_s: f64, model: Option<&str>, (backend, adapter): (&str, &str), fault: Option<&str>) -> Response {
    let body = Health {
        status: if fault.is_some() { "degraded" } else { "ok" },
        version: env!("CARGO_PKG_VERSION"),
        uptime_s: (uptime_s * 1000.0).round() / 1000.0,
        model,
        backend,
        adapter,
        device_fault: fault,
    };
    Response::json(if fault.is_some() { 503 } else { 200 }, &body)
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
        let with: serde_json::Value = body(health(1.23456, Some("m.gguf"), ("gpu", "llvmpipe"), None));
        assert_eq!(with["status"], "ok");
        assert_eq!((with["backend"].as_str(), with["adapter"].as_str()), (Some("gpu"), Some("llvmpipe")));
        assert_eq!(with["model"], "m.gguf");
        assert_eq!(with["uptime_s"].as_f64(), Some(1.235));
        let without: serde_json::Value = body(health(0.0, None, ("cpu", ""), None));
        assert!(without.get("model").is_none() && without.get("device_fault").is_none(), "{without}");
    }

    #[test]
    fn a_failed_device_makes_health_503_and_names_the_fault() {
        let r = health(1.0, Some("m.gguf"), ("gpu", "llvmpipe"), Some("the GPU device was lost"));
        assert_eq!(r.status, 503);
        let b = body(r);
        assert_eq!(
            (b["status"].as_str(), b["device_fault"].as_str()),
            (Some("degraded"), Some("the GPU device was lost"))
        );
    }
}
