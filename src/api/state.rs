//! What the api files share: the route table, the loaded model as the API sees it, the api's
//! settings and the in-flight guard. A leaf: it imports no sibling.

use crate::engine::{Engine, GrammarVocab};
use crate::metrics::Metrics;
use crate::model::{ChatTemplate, ModelInfo, Tokenizer};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    Health,
    Metrics,
    MtplxMetrics,
    MtplxMetricsStream,
    Models,
    Model,
    ChatCompletions,
    Completions,
    /// Anthropic's Messages API.
    Messages,
    MessagesCountTokens,
    /// The dashboard page (`/`, `/dashboard`, `/dashboard/`, its `/favicon.ico`) and its files; withheld with the metrics routes.
    Dashboard,
    DashboardAsset,
    ChatsCreate,
    ChatsList,
    ChatGet,
    ChatDelete,
    ChatMessagesPost,
    ChatMessagesList,
    /// The prompt cache's tiers (`GET`), and clearing the disk tier (`DELETE`).
    PromptCache,
    PromptCacheClear,
}

impl Route {
    pub fn is_metrics(self) -> bool {
        matches!(self, Route::Metrics | Route::MtplxMetrics | Route::MtplxMetricsStream)
    }

    /// Withheld with the metrics routes (`--no-metrics`): the page shows nothing without them.
    pub fn is_dashboard(self) -> bool {
        matches!(self, Route::Dashboard | Route::DashboardAsset)
    }

    /// The routes that the API key guards (`/v1/...` but the metrics snapshot and stream, which
    /// the metrics token guards). Probes and scrapes stay outside.
    pub fn is_api(self) -> bool {
        matches!(
            self,
            Route::Models
                | Route::Model
                | Route::ChatCompletions
                | Route::Completions
                | Route::PromptCache
                | Route::PromptCacheClear
        ) || self.is_anthropic()
            || self.is_chats()
    }

    /// The routes that answer in Anthropic's shapes (their errors too).
    pub fn is_anthropic(self) -> bool {
        matches!(self, Route::Messages | Route::MessagesCountTokens)
    }

    /// The routes that can cost model time, which the rate limiter counts: completions and
    /// chat turns (a refused API key counts on every API route, see `App::admit`).
    pub fn is_generation(self) -> bool {
        matches!(self, Route::ChatCompletions | Route::Completions | Route::Messages | Route::ChatMessagesPost)
    }

    /// The persisted-chat routes (`/v1/chats...`).
    pub fn is_chats(self) -> bool {
        matches!(
            self,
            Route::ChatsCreate
                | Route::ChatsList
                | Route::ChatGet
                | Route::ChatDelete
                | Route::ChatMessagesPost
                | Route::ChatMessagesList
        )
    }
}

/// Every route the server answers: (method, path template, handler).
pub const ROUTES: &[(&str, &str, Route)] = &[
    ("GET", "/health", Route::Health),
    ("GET", "/metrics", Route::Metrics),
    ("GET", "/v1/mtplx/metrics", Route::MtplxMetrics),
    ("GET", "/v1/mtplx/metrics/stream", Route::MtplxMetricsStream),
    ("GET", "/v1/models", Route::Models),
    ("GET", "/v1/models/{model_id}", Route::Model),
    ("POST", "/v1/chat/completions", Route::ChatCompletions),
    ("POST", "/v1/completions", Route::Completions),
    ("POST", "/v1/messages", Route::Messages),
    ("POST", "/v1/messages/count_tokens", Route::MessagesCountTokens),
    ("GET", "/", Route::Dashboard),
    ("GET", "/dashboard", Route::Dashboard),
    ("GET", "/dashboard/", Route::Dashboard),
    ("GET", "/favicon.ico", Route::Dashboard),
    ("GET", "/dashboard/{asset}", Route::DashboardAsset),
    ("POST", "/v1/chats", Route::ChatsCreate),
    ("GET", "/v1/chats", Route::ChatsList),
    ("GET", "/v1/chats/{chat_id}", Route::ChatGet),
    ("DELETE", "/v1/chats/{chat_id}", Route::ChatDelete),
    ("POST", "/v1/chats/{chat_id}/messages", Route::ChatMessagesPost),
    ("GET", "/v1/chats/{chat_id}/messages", Route::ChatMessagesList),
    ("GET", "/v1/mtplx/cache", Route::PromptCache),
    ("DELETE", "/v1/mtplx/cache", Route::PromptCacheClear),
];

/// Silence after which a stream gets a `: keep-alive` comment: well under the idle timeouts of
/// common proxies (nginx and AWS load balancers cut at 60 s).
pub const DEFAULT_STREAM_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Largest chat message (and system prompt) accepted, in bytes; larger gets 413
/// (`--max-message-bytes`).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// What `/metrics` serves when the request's `Accept` names no format (`--metrics-format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MetricsDefault {
    #[default]
    Prometheus,
    Json,
}

/// One CIDR block (`10.0.0.0/8`, `::1/128`), used for `--trusted-proxy`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = a.parse().map_err(|_| format!("'{s}' is not an IP address or CIDR block"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= max)
                .ok_or_else(|| format!("'{s}': prefix length must be 0..={max}"))?,
            None => max,
        };
        Ok(Cidr { addr, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = if self.prefix == 0 { 0 } else { u32::MAX << (32 - self.prefix as u32) };
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = if self.prefix == 0 { 0 } else { u128::MAX << (128 - self.prefix as u32) };
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// The api layer's settings, built from the flags by the binary's `cli` module.
#[derive(Clone, Debug, Default)]
pub struct ApiConfig {
    /// Withhold the metrics routes (`--no-metrics`): they answer 404.
    pub metrics_enabled: bool,
    /// Bearer token that guards the metrics routes.
    pub metrics_token: Option<String>,
    /// Bearer key that guards the API routes (`--api-key-file`, `MTPLX_API_KEY`).
    pub api_key: Option<String>,
    /// What `/metrics` serves when `Accept` names no format.
    pub metrics_default: MetricsDefault,
    /// Requests per minute per client IP on the API routes; `None` is off.
    pub rate_limit_per_minute: Option<u32>,
    pub trusted_proxies: Vec<Cidr>,
    /// Origins allowed to call the API from a browser (`--cors-allow-origin`); `*` allows any.
    pub cors_origins: Vec<String>,
    /// Parse special-token strings inside chat message contents as control tokens
    /// (`--allow-special-tokens-in-content`); off, a user cannot forge a turn of another role.
    pub special_tokens_in_content: bool,
    /// Longest a generation may run, counted from when it is queued for the model
    /// (`--request-timeout`); `None` is no deadline.
    pub request_timeout: Option<Duration>,
    /// Largest chat message or system prompt, in bytes (`--max-message-bytes`).
    pub max_message_bytes: usize,
    /// Header a trusted proxy sets to the client's country (`--country-header`), lower-case.
    pub country_header: Option<String>,
    /// Silence after which a streamed answer gets a `: keep-alive` comment
    /// (`--stream-keep-alive`); `None` is [`DEFAULT_STREAM_KEEP_ALIVE`].
    pub stream_keep_alive: Option<Duration>,
}

impl ApiConfig {
    /// The settings a server has with no flags given.
    pub fn new() -> ApiConfig {
        ApiConfig { metrics_enabled: true, max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES, ..ApiConfig::default() }
    }

    /// How long a stream may stay silent before a `: keep-alive` comment.
    pub fn keep_alive(&self) -> Duration {
        self.stream_keep_alive.unwrap_or(DEFAULT_STREAM_KEEP_ALIVE)
    }
}

/// The loaded model as the API sees it.
pub struct Llm {
    pub engine: Engine,
    pub tokenizer: Arc<Tokenizer>,
    pub template: ChatTemplate,
    pub info: ModelInfo,
    /// The id `/v1/models` lists and every answer names.
    pub model_id: String,
    /// Unix seconds when the model was loaded.
    pub created: u64,
    /// Context length one sequence may really use (prompt plus completion): the model's or
    /// `--ctx`, bounded by what the KV budget holds.
    pub ctx: usize,
    /// The vocabulary made ready for grammars, on the first request that has one (building it
    /// takes a fraction of a second that no other request should pay at start-up).
    pub grammar: std::sync::OnceLock<Result<GrammarVocab, String>>,
}

impl Llm {
    /// The vocabulary for grammars, built on first use; the error says why it cannot be.
    pub fn grammar_vocab(&self) -> Result<&GrammarVocab, &str> {
        let built = self
            .grammar
            .get_or_init(|| GrammarVocab::new(&self.tokenizer, self.info.vocab_size).map_err(|e| e.to_string()));
        built.as_ref().map_err(String::as_str)
    }
}

pub fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_matches_inside_and_rejects_outside() {
        let c = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(c.contains("10.1.200.3".parse().unwrap()));
        assert!(!c.contains("10.2.0.1".parse().unwrap()));
        assert!(c.contains("::ffff:10.1.0.9".parse().unwrap()));
        let one = Cidr::parse("::1").unwrap();
        assert!(one.contains("::1".parse().unwrap()));
        assert!(!one.contains("::2".parse().unwrap()));
        assert!(Cidr::parse("10.0.0.0/33").is_err());
        assert!(Cidr::parse("nope").is_err());
    }
}
