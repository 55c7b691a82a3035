//! The application: routes every request, applies admission (rate limit, metrics token), calls
//! the handler and counts the outcome. Implements the server's `Handler`.

use super::admission::{client_ip, RateLimiter};
use super::error::ApiError;
use super::router::{Lookup, Router};
use super::{health, metrics_routes, openai};
use crate::config::ServeConfig;
use crate::http::{Handler, Rejected, Request, Response};
use crate::metrics::{Metrics, RouteId};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    Health,
    Metrics,
    MtplxMetrics,
    MtplxMetricsStream,
    Models,
    ChatCompletions,
    Completions,
}

impl Route {
    fn is_metrics(self) -> bool {
        matches!(self, Route::Metrics | Route::MtplxMetrics | Route::MtplxMetricsStream)
    }
}

/// Every route the server answers: (method, path template, handler).
pub const ROUTES: &[(&str, &str, Route)] = &[
    ("GET", "/health", Route::Health),
    ("GET", "/metrics", Route::Metrics),
    ("GET", "/v1/mtplx/metrics", Route::MtplxMetrics),
    ("GET", "/v1/mtplx/metrics/stream", Route::MtplxMetricsStream),
    ("GET", "/v1/models", Route::Models),
    ("POST", "/v1/chat/completions", Route::ChatCompletions),
    ("POST", "/v1/completions", Route::Completions),
];

/// Holds `http_requests_in_flight` up while a request is handled; moves into a streaming
/// response's producer so that a stream counts until it ends.
pub struct InFlightGuard(Arc<Metrics>);

impl InFlightGuard {
    pub fn new(m: &Arc<Metrics>) -> InFlightGuard {
        m.http_requests_in_flight.inc();
        InFlightGuard(m.clone())
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.http_requests_in_flight.dec();
    }
}

pub struct App {
    cfg: ServeConfig,
    router: Router<(Route, RouteId)>,
    metrics: Arc<Metrics>,
    limiter: Option<RateLimiter>,
    started: Instant,
    llm: Option<Arc<openai::Llm>>,
}

impl App {
    pub fn new(cfg: ServeConfig, metrics: Arc<Metrics>, llm: Option<Arc<openai::Llm>>) -> App {
        let router = ROUTES.iter().fold(Router::new(), |r, &(m, t, route)| r.add(m, t, (route, metrics.route_id(t))));
        let limiter = cfg.rate_limit_per_minute.map(RateLimiter::new);
        App { cfg, router, metrics, limiter, started: Instant::now(), llm }
    }

    pub fn model_id(&self) -> Option<&str> {
        self.llm.as_ref().map(|l| l.model_id.as_str())
    }

    fn not_found(&self, path: &str) -> (RouteId, Response) {
        let msg = format!("no route for '{}'", truncate(path, 200));
        (self.metrics.route_label(path), ApiError::new(404, "invalid_request_error", msg).code("not_found").into_response())
    }

    async fn route(&self, req: Request, guard: InFlightGuard) -> (RouteId, Response) {
        let (route, rid) = match self.router.lookup(&req.method, &req.path) {
            Lookup::NotFound => return self.not_found(&req.path),
            Lookup::MethodNotAllowed { template, allow } => {
                let msg = format!("{} is not allowed on {template}; allowed: {allow}", req.method);
                let e = ApiError::new(405, "invalid_request_error", msg).code("method_not_allowed").header("Allow", allow);
                return (self.metrics.route_id(template), e.into_response());
            }
            Lookup::Found { route, .. } => route,
        };
        // Withheld metrics routes look exactly like unknown paths.
        if route.is_metrics() && !self.cfg.metrics_enabled {
            return self.not_found(&req.path);
        }
        if let Some(limiter) = &self.limiter {
            self.metrics.record_rate_limit_seen(rid);
            let ip = client_ip(req.peer, req.header("x-forwarded-for"), &self.cfg.trusted_proxies);
            if let Err(l) = limiter.check(ip) {
                self.metrics.record_rate_limited(rid);
                let msg = format!("rate limit of {} requests per minute exceeded for {ip}; retry in {} s", self.cfg.rate_limit_per_minute.unwrap_or(0), l.retry_after_secs);
                let e = ApiError::new(429, "rate_limit_error", msg).code("rate_limit_exceeded").header("Retry-After", l.retry_after_secs.to_string());
                return (rid, e.into_response());
            }
        }
        if route.is_metrics() {
            if let Some(e) = metrics_routes::check_token(&req, self.cfg.metrics_token.as_deref()) {
                return (rid, e.into_response());
            }
        }
        let resp = match route {
            Route::Health => Ok(health::health(self.started, self.llm.as_ref().map(|l| l.model_id.as_str()))),
            Route::Metrics => {
                // Like `http_requests_total`, the in-flight gauge leaves the scrape itself out, so
                // that an idle server reads 0.
                drop(guard);
                // The engine's gauges are sampled here, at scrape time, and nowhere else.
                if let Some(llm) = &self.llm {
                    self.metrics.llm_requests_running.set(llm.engine.running() as i64);
                    self.metrics.llm_requests_waiting.set(llm.engine.waiting() as i64);
                }
                Ok(metrics_routes::prometheus(&req, &self.metrics))
            }
            Route::MtplxMetrics => metrics_routes::snapshot(&req, &self.metrics),
            Route::MtplxMetricsStream => metrics_routes::stream(&req, &self.metrics),
            Route::Models | Route::ChatCompletions | Route::Completions => match &self.llm {
                Some(llm) => openai::handle(llm, route, &req, &self.metrics, guard).await,
                None => Err(ApiError::new(503, "server_error", "no model is loaded").code("model_not_loaded")),
            },
        };
        (rid, resp.unwrap_or_else(ApiError::into_response))
    }
}

/// Methods outside RFC 9110's registry are counted as `other`, so that invented methods cannot
/// grow the label set.
fn method_label(m: &str) -> &'static str {
    const KNOWN: [&str; 9] = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE"];
    KNOWN.iter().find(|k| **k == m).copied().unwrap_or("other")
}

fn truncate(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl Handler for App {
    fn handle(&self, req: Request) -> Pin<Box<dyn Future<Output = Response> + Send + '_>> {
        Box::pin(async move {
            let guard = InFlightGuard::new(&self.metrics);
            let method = method_label(&req.method);
            let (rid, resp) = self.route(req, guard).await;
            self.metrics.record_http(method, rid, resp.status);
            resp
        })
    }

    fn rejection(&self, r: &Rejected<'_>) -> Response {
        ApiError::from(r.error).into_response()
    }

    fn on_rejected(&self, r: &Rejected<'_>) {
        let method = method_label(r.method);
        let rid = if r.path.is_empty() { RouteId::OTHER } else { self.metrics.route_label(r.path) };
        self.metrics.record_http(method, rid, r.status);
    }
}
