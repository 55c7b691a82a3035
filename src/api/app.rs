//! The application: routes every request, answers CORS preflights, applies admission (rate
//! limit and API key on the API routes, the metrics token on the metrics routes), calls the
//! handler and counts the outcome. Implements the server's `Handler`.

use super::admission::{check_bearer, client_ip, Guard, RateLimiter};
use super::chats::{self, Chats};
use super::cors::Cors;
use super::error::ApiError;
use super::router::{Lookup, Router};
use super::state::{ApiConfig, InFlightGuard, Llm, Route, ROUTES};
use super::{anthropic, anthropic_wire, dashboard, health, metrics_handlers, openai, prompt_cache};
use crate::http::{Handler, Rejected, Request, Response};
use crate::metrics::{DeviceCounters, Metrics, RouteId};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub struct App {
    cfg: ApiConfig,
    router: Router<(Route, RouteId)>,
    metrics: Arc<Metrics>,
    limiter: Option<RateLimiter>,
    cors: Cors,
    llm: Option<Arc<Llm>>,
    chats: Option<Arc<Chats>>,
}

impl App {
    pub fn new(cfg: ApiConfig, metrics: Arc<Metrics>, llm: Option<Arc<Llm>>) -> App {
        let router = ROUTES.iter().fold(Router::new(), |r, &(m, t, route)| r.add(m, t, (route, metrics.route_id(t))));
        let limiter = cfg.rate_limit_per_minute.map(RateLimiter::new);
        let cors = Cors::new(cfg.cors_origins.clone());
        App { cfg, router, metrics, limiter, cors, llm, chats: None }
    }

    /// Serves the persisted-chat routes from `chats` (without it they answer 503).
    pub fn with_chats(mut self, chats: Arc<Chats>) -> App {
        self.chats = Some(chats);
        self
    }

    pub fn llm(&self) -> Option<&Arc<Llm>> {
        self.llm.as_ref()
    }

    pub fn model_id(&self) -> Option<&str> {
        self.llm.as_ref().map(|l| l.model_id.as_str())
    }

    fn not_found(&self, path: &str) -> (RouteId, Response) {
        let msg = format!("no route for '{}'", truncate(path, 200));
        let e = ApiError::new(404, "invalid_request_error", msg).code("not_found");
        (self.metrics.route_label(path), respond(is_anthropic_path(path), e))
    }

    async fn route(&self, req: Request, guard: InFlightGuard) -> (RouteId, Response) {
        let preflight = self.cors.is_preflight(&req);
        let (route, rid, model_param) = match self.router.lookup(&req.method, &req.path) {
            Lookup::NotFound => return self.not_found(&req.path),
            // No route takes OPTIONS, so a preflight always lands here, with the methods to allow.
            Lookup::MethodNotAllowed { template, allow } if preflight => {
                return (self.metrics.route_id(template), self.cors.preflight(&req, &allow));
            }
            Lookup::MethodNotAllowed { template, allow } => {
                let msg = format!("{} is not allowed on {template}; allowed: {allow}", req.method);
                let e =
                    ApiError::new(405, "invalid_request_error", msg).code("method_not_allowed").header("Allow", allow);
                return (self.metrics.route_id(template), respond(is_anthropic_path(template), e));
            }
            Lookup::Found { route: (route, rid), params, .. } => (
                route,
                rid,
                params.get("model_id").or(params.get("chat_id")).or(params.get("asset")).map(str::to_string),
            ),
        };
        // Withheld metrics routes look exactly like unknown paths.
        if (route.is_metrics() || route.is_dashboard()) && !self.cfg.metrics_enabled {
            return self.not_found(&req.path);
        }
        if let Some(e) = self.admit(&req, route, rid) {
            return (rid, respond(route.is_anthropic(), e));
        }
        if let (true, Some(fault)) = (route.is_generation(), self.device_fault()) {
            let msg = format!("the GPU failed ({fault}); this server cannot generate until it is restarted");
            let e = ApiError::new(503, "server_error", msg).code("device_failed");
            return (rid, respond(route.is_anthropic(), e));
        }
        let resp = match route {
            Route::Health => {
                let b = self.metrics.build_info();
                let fault = self.device_fault();
                Ok(health::health(self.metrics.uptime_s(), self.model_id(), (&b.backend, &b.adapter), fault.as_deref()))
            }
            Route::Dashboard => Ok(dashboard::page(&req)),
            Route::DashboardAsset => dashboard::asset(&req, model_param.as_deref().unwrap_or_default()),
            Route::Metrics => {
                // Like `http_requests_total`, the in-flight gauge leaves the scrape itself out, so
                // that an idle server reads 0.
                drop(guard);
                self.sample_engine();
                metrics_handlers::prometheus(&req, &self.metrics, self.cfg.metrics_default)
            }
            Route::MtplxMetrics => {
                self.sample_engine();
                metrics_handlers::snapshot(&req, &self.metrics)
            }
            Route::MtplxMetricsStream => metrics_handlers::stream(&req, &self.metrics),
            Route::ChatsCreate
            | Route::ChatsList
            | Route::ChatGet
            | Route::ChatDelete
            | Route::ChatMessagesPost
            | Route::ChatMessagesList => {
                self.chats(route, req, model_param.as_deref().unwrap_or_default(), guard).await
            }
            Route::Models
            | Route::Model
            | Route::ChatCompletions
            | Route::Completions
            | Route::Messages
            | Route::MessagesCountTokens
            | Route::PromptCache
            | Route::PromptCacheClear => match &self.llm {
                None => Err(ApiError::new(503, "server_error", "no model is loaded").code("model_not_loaded")),
                Some(llm) => match route {
                    Route::Models => Ok(openai::models(llm)),
                    Route::Model => openai::model(llm, model_param.as_deref().unwrap_or_default()),
                    Route::ChatCompletions => openai::chat(llm, &self.cfg, req, &self.metrics, guard).await,
                    Route::Messages => anthropic::messages(llm, &self.cfg, req, &self.metrics, guard).await,
                    Route::MessagesCountTokens => anthropic::count_tokens(llm, &self.cfg, req).await,
                    Route::PromptCache => Ok(prompt_cache::status(llm)),
                    Route::PromptCacheClear => Ok(prompt_cache::clear(llm)),
                    _ => openai::completion(llm, &self.cfg, req, &self.metrics, guard).await,
                },
            },
        };
        (rid, resp.unwrap_or_else(|e| respond(route.is_anthropic(), e)))
    }

    /// The engine's gauges, sampled here, when a metrics route is read, and nowhere else: the
    /// decode thread never pays for them.
    fn sample_engine(&self) {
        let Some(llm) = &self.llm else { return };
        let m = &self.metrics;
        m.llm_requests_running.set(llm.engine.running() as i64);
        m.llm_requests_waiting.set(llm.engine.waiting() as i64);
        let kv = llm.engine.kv_snapshot();
        m.mtplx_kv_cache_used_bytes.set(kv.bytes as i64);
        m.mtplx_kv_cache_capacity_bytes.set(kv.budget_bytes as i64);
        m.mtplx_kv_cache_used_tokens.set(kv.positions() as i64);
        m.mtplx_kv_cache_capacity_tokens.set(kv.capacity_positions() as i64);
        m.mtplx_kv_cache_sequences.set(kv.sequences as i64);
        m.set_device(llm.engine.device_stats().map(|d| DeviceCounters {
            dispatches: d.dispatches,
            submits: d.submits,
            read_bytes: d.read_bytes,
            healthy: d.fault.is_none(),
        }));
    }

    /// What the GPU reported when it failed; `None` while it works, and on the CPU.
    fn device_fault(&self) -> Option<String> {
        self.llm.as_ref()?.engine.device_stats()?.fault
    }

    /// The persisted-chat routes; `id` is the path's `{chat_id}`.
    async fn chats(&self, route: Route, req: Request, id: &str, guard: InFlightGuard) -> Result<Response, ApiError> {
        let Some(c) = &self.chats else {
            return Err(ApiError::new(503, "server_error", "this server keeps no chats (no database is open)")
                .code("chats_unavailable"));
        };
        match route {
            Route::ChatsCreate => chats::create(c, &self.cfg, &req, &self.metrics).await,
            Route::ChatsList => chats::list(c, &req).await,
            Route::ChatGet => chats::get(c, &req, id).await,
            Route::ChatDelete => chats::delete(c, id).await,
            Route::ChatMessagesList => chats::messages(c, &req, id).await,
            _ => match &self.llm {
                None => Err(ApiError::new(503, "server_error", "no model is loaded").code("model_not_loaded")),
                Some(llm) => chats::post(c, llm, &self.cfg, req, id, &self.metrics, guard).await,
            },
        }
    }

    /// The checks before a handler: the API key on the API routes and the metrics token on the
    /// metrics routes; the rate limit on what can cost model time (the generation routes and
    /// chat turns) and on every refused API key, so that guessing keys is throttled per client
    /// too. Probes, scrapes, listings and chat reads never use up a client's budget.
    fn admit(&self, req: &Request, route: Route, rid: RouteId) -> Option<ApiError> {
        if route.is_metrics() {
            return check_bearer(req, self.cfg.metrics_token.as_deref(), Guard::MetricsToken);
        }
        if !route.is_api() {
            return None;
        }
        let refused = check_bearer(req, self.cfg.api_key.as_deref(), Guard::ApiKey);
        if route.is_generation() || refused.is_some() {
            if let Some(limited) = self.rate_limit(req, rid) {
                return Some(limited);
            }
        }
        refused
    }

    /// Counts the request against its client's bucket; the 429 when the bucket is empty.
    fn rate_limit(&self, req: &Request, rid: RouteId) -> Option<ApiError> {
        let limiter = self.limiter.as_ref()?;
        self.metrics.record_rate_limit_seen(rid);
        let ip = client_ip(req.peer, req.header("x-forwarded-for"), &self.cfg.trusted_proxies);
        let l = limiter.check(ip).err()?;
        self.metrics.record_rate_limited(rid);
        let msg = format!(
            "rate limit of {} requests per minute exceeded for {ip}; retry in {} s",
            self.cfg.rate_limit_per_minute.unwrap_or(0),
            l.retry_after_secs
        );
        Some(
            ApiError::new(429, "rate_limit_error", msg)
                .code("rate_limit_exceeded")
                .header("Retry-After", l.retry_after_secs.to_string()),
        )
    }
}

/// Methods outside RFC 9110's registry are counted as `other`, so that invented methods cannot
/// grow the label set.
fn method_label(m: &str) -> &'static str {
    const KNOWN: [&str; 9] = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE"];
    KNOWN.iter().find(|k| **k == m).copied().unwrap_or("other")
}

/// An error in the shape of the API the client speaks: Anthropic's on the Messages routes
/// (whose SDK reads only that shape), OpenAI's everywhere else.
fn respond(anthropic: bool, e: ApiError) -> Response {
    if anthropic {
        anthropic_wire::error_response(e)
    } else {
        e.into_response()
    }
}

/// Paths under `/v1/messages` (Anthropic's API), for the errors given before a route is known.
fn is_anthropic_path(path: &str) -> bool {
    path == "/v1/messages" || path.starts_with("/v1/messages/")
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
            let origin = self.cors.origin_of(&req);
            let (rid, mut resp) = self.route(req, guard).await;
            self.cors.decorate(origin, &mut resp);
            self.metrics.record_http(method, rid, resp.status);
            resp
        })
    }

    fn rejection(&self, r: &Rejected<'_>) -> Response {
        respond(is_anthropic_path(r.path), ApiError::from(r.error))
    }

    fn on_rejected(&self, r: &Rejected<'_>) {
        let method = method_label(r.method);
        let rid = if r.path.is_empty() { RouteId::OTHER } else { self.metrics.route_label(r.path) };
        self.metrics.record_http(method, rid, r.status);
    }

    /// The liveness probe and the metrics scrapes; not the metrics stream, which would hold a
    /// reserve connection for as long as it is read.
    fn is_probe(&self, method: &str, path: &str) -> bool {
        matches!(method, "GET" | "HEAD") && matches!(path, "/health" | "/metrics" | "/v1/mtplx/metrics")
    }
}
