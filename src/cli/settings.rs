//! The server's settings from its command line, every value checked: what each layer is
//! configured with.

use super::{Cli, ModelOpts, MIN_STREAM_KEEP_ALIVE};
use mtplx_lite::api::state::{ApiConfig, Cidr, MetricsDefault};
use mtplx_lite::engine::StepBudget;
use mtplx_lite::engine::{Depth, DraftConfig, DraftMode};
use mtplx_lite::http::HttpConfig;
use mtplx_lite::store::url::DatabaseUrl;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

/// Every layer's settings, checked.
pub struct Settings {
    pub listen: SocketAddr,
    pub http: HttpConfig,
    pub api: ApiConfig,
    pub model: ModelOpts,
    pub metrics_history: usize,
    /// Where chats are kept.
    pub database: DatabaseUrl,
    pub geoip_db: Option<PathBuf>,
    /// The prompt cache's disk tier: its directory and size (`None`: off).
    pub prompt_cache: Option<(PathBuf, u64)>,
}

/// A secret from a file, else from an environment variable; blank is none.
fn secret(file: &Option<PathBuf>, flag: &str, env: &str) -> Result<Option<String>, String> {
    match file {
        Some(p) => {
            let t = std::fs::read_to_string(p).map_err(|e| format!("{flag} {}: {e}", p.display()))?;
            let t = t.trim().to_string();
            if t.is_empty() {
                return Err(format!("{flag} {}: the file is empty", p.display()));
            }
            Ok(Some(t))
        }
        None => Ok(std::env::var(env).ok().map(|t| t.trim().to_string()).filter(|t| !t.is_empty())),
    }
}

/// `HOST:PORT` to an address; a host name is resolved (the first address wins).
pub fn resolve_listen(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse() {
        return Ok(a);
    }
    let mut addrs =
        s.to_socket_addrs().map_err(|e| format!("--listen {s}: not HOST:PORT, or the host does not resolve ({e})"))?;
    addrs.next().ok_or_else(|| format!("--listen {s}: the host resolves to no address"))
}

impl Settings {
    pub fn from_cli(cli: &Cli) -> Result<Settings, String> {
        let listen = resolve_listen(&cli.listen)?;
        mtplx_lite::backend::cpu::Isa::cap()?;
        let trusted_proxies = cli.trusted_proxy.iter().map(|s| Cidr::parse(s)).collect::<Result<Vec<_>, _>>()?;
        if !(cli.shutdown_grace.is_finite() && cli.shutdown_grace >= 0.0) {
            return Err(format!("--shutdown-grace must be a number of seconds >= 0, got {}", cli.shutdown_grace));
        }
        let request_timeout = match cli.request_timeout {
            None => None,
            Some(t) => match Duration::try_from_secs_f64(t) {
                Ok(d) if t > 0.0 => Some(d),
                _ => return Err(format!("--request-timeout must be a number of seconds > 0, got {t}")),
            },
        };
        let stream_keep_alive = match Duration::try_from_secs_f64(cli.stream_keep_alive) {
            Ok(d) if d >= MIN_STREAM_KEEP_ALIVE => d,
            _ => {
                return Err(format!(
                    "--stream-keep-alive must be a number of seconds >= {}, got {}",
                    MIN_STREAM_KEEP_ALIVE.as_secs_f64(),
                    cli.stream_keep_alive
                ))
            }
        };
        if cli.io_threads == 0 {
            return Err("--io-threads must be at least 1".into());
        }
        let metrics_default = match cli.metrics_format.as_str() {
            "prometheus" => MetricsDefault::Prometheus,
            "json" => MetricsDefault::Json,
            other => return Err(format!("--metrics-format must be prometheus or json, got '{other}'")),
        };
        let api_key = secret(&cli.api_key_file, "--api-key-file", "MTPLX_API_KEY")?;
        if api_key.is_none() && !listen.ip().is_loopback() && !cli.allow_no_api_key {
            return Err(format!(
                "refusing to serve on {listen} without an API key: anyone who reaches the port could generate. Put a key in a file and pass --api-key-file FILE (or set MTPLX_API_KEY), or pass --allow-no-api-key if this is meant"
            ));
        }
        let api = ApiConfig {
            metrics_enabled: !cli.no_metrics,
            metrics_token: secret(&cli.metrics_token_file, "--metrics-token-file", "MTPLX_METRICS_TOKEN")?,
            api_key,
            metrics_default,
            rate_limit_per_minute: cli.rate_limit_per_minute,
            trusted_proxies,
            cors_origins: cli.cors_allow_origin.clone(),
            special_tokens_in_content: cli.allow_special_tokens_in_content,
            request_timeout,
            max_message_bytes: cli.max_message_bytes.max(1),
            country_header: cli.country_header.as_ref().map(|h| h.trim().to_ascii_lowercase()),
            stream_keep_alive: Some(stream_keep_alive),
        };
        let database = mtplx_lite::store::url::resolve(cli.database.as_deref(), cli.data_dir.as_deref())?;
        let http = HttpConfig {
            io_threads: cli.io_threads,
            max_connections: cli.max_connections.max(1),
            max_body_bytes: cli.max_body_bytes,
            shutdown_grace: Duration::from_secs_f64(cli.shutdown_grace),
            ..HttpConfig::default()
        };
        let r = cli.max_step_ratio;
        if !(r == 0.0 || (r.is_finite() && r >= 1.0)) {
            return Err(format!("--max-step-ratio must be 0 (off) or a number >= 1, got {r}"));
        }
        let budget = StepBudget {
            max_batch_tokens: cli.max_batch_tokens.max(1),
            prefill_chunk: cli.prefill_chunk.max(1),
            max_step_ratio: r,
        };
        let model = ModelOpts {
            model: cli.model.clone(),
            threads: cli.threads,
            backend: cli.backend,
            queue_depth: cli.queue_depth.max(1),
            ctx: cli.ctx,
            kv_cache_bytes: cli.kv_cache_bytes,
            budget,
            draft: DraftConfig {
                mode: DraftMode::parse(&cli.draft).map_err(|e| format!("--draft: {e}"))?,
                depth: Depth::parse(&cli.depth).map_err(|e| format!("--depth: {e}"))?,
            },
            mtp_head: cli.mtp_head.clone(),
            tune_profile: cli.tune_profile.clone(),
        };
        Ok(Settings {
            listen,
            http,
            api,
            model,
            metrics_history: cli.metrics_history.max(1),
            database,
            geoip_db: cli.geoip_db.clone(),
            prompt_cache: cli
                .prompt_cache_dir
                .clone()
                .map(|d| (d, cli.prompt_cache_size.unwrap_or(mtplx_lite::engine::prompt_disk::DEFAULT_MAX_BYTES))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use argh::FromArgs;

    #[test]
    fn listen_takes_addresses_and_host_names() {
        assert_eq!(resolve_listen("127.0.0.1:8101").unwrap(), "127.0.0.1:8101".parse().unwrap());
        assert!(resolve_listen("localhost:8101").unwrap().ip().is_loopback());
        assert!(resolve_listen("localhost").unwrap_err().contains("HOST:PORT"));
    }

    #[test]
    fn request_timeout_is_a_positive_number_of_seconds() {
        let parse = |args: &[&str]| {
            Settings::from_cli(&Cli::from_args(&["mtplx-lite"], args).unwrap()).map(|s| s.api.request_timeout)
        };
        assert_eq!(parse(&[]).unwrap(), None);
        assert_eq!(parse(&["--request-timeout", "1.5"]).unwrap(), Some(Duration::from_millis(1500)));
        for bad in ["0", "-1", "nan", "inf", "1e300"] {
            let e = parse(&["--request-timeout", bad]).unwrap_err();
            assert!(e.contains("--request-timeout must be a number of seconds > 0"), "{bad}: {e}");
        }
    }
}
