//! `mtplx-lite` with no subcommand: bind, load the model, serve until a signal, shut down
//! visibly.

use super::Settings;
use mtplx_lite::api::app::App;
use mtplx_lite::api::chats::Chats;
use mtplx_lite::api::client_geo::{CountrySource, GeoIp};
use mtplx_lite::api::state::{unix_now, Llm};
use mtplx_lite::engine::{Engine, EngineConfig};
use mtplx_lite::http::{serve, shutdown_on_signals, Shutdown};
use mtplx_lite::metrics::{BuildInfo, Metrics};
use mtplx_lite::store::Db;
use smol::future::FutureExt as _;
use std::sync::Arc;
use std::time::Duration;

/// Generations still running this long before the grace period ends are ended by the engine,
/// so that each stream closes with an error chunk and `[DONE]` rather than being cut off.
const STREAM_END_MARGIN: Duration = Duration::from_secs(1);
/// How often shutdown looks whether the engine has gone idle.
const IDLE_POLL: Duration = Duration::from_millis(20);

pub fn run(s: Settings) -> Result<(), String> {
    // The device first: `--backend gpu` without one is an error before the port is taken.
    let (backend, chosen) = mtplx_lite::backend::open(s.model.backend, s.model.threads).map_err(|e| e.to_string())?;
    // Bind before anything slow (the model's download and load), so a busy port is said at once.
    let listener = std::net::TcpListener::bind(s.listen).map_err(|e| format!("cannot listen on {}: {e}", s.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let path = s.model.path()?;
    eprintln!("mtplx-lite: backend {}: {} {} ({})", chosen.backend, chosen.adapter, chosen.driver, chosen.reason);
    eprintln!("mtplx-lite: loading {}", path.display());
    let loaded = mtplx_lite::model::load::load_on(&path, backend).map_err(|e| e.to_string())?;
    let info = loaded.model.info().clone();
    let why = if loaded.template.is_fallback() { " (the file carries none)" } else { "" };
    eprintln!("mtplx-lite: {} model, chat template: {}{why}", info.arch, loaded.template.origin());
    let engine_cfg = EngineConfig {
        budget: s.model.budget,
        draft: s.model.draft,
        prior: super::tune::spec_prior(&s.model, &path)?,
        disk: prompt_cache(&s, &path, &*loaded.model)?,
        ..EngineConfig::for_model(&*loaded.model, s.model.queue_depth, s.model.ctx, s.model.kv_cache_bytes)
    };
    let ctx = engine_cfg.ctx;
    let head = super::load_head(&s.model, &path, &loaded)?;
    let engine = Engine::start_with_head(loaded.model.clone(), loaded.tokenizer.clone(), engine_cfg, head);
    let metrics = Metrics::shared(
        s.metrics_history,
        BuildInfo::current(chosen.backend, &loaded.name).on(&chosen.adapter, &chosen.driver),
    );
    let llm = Arc::new(Llm {
        grammar: Default::default(),
        engine,
        tokenizer: loaded.tokenizer,
        template: loaded.template,
        info,
        model_id: loaded.name,
        created: unix_now(),
        ctx,
    });
    let shutdown = Shutdown::new();
    shutdown_on_signals(shutdown.clone()).map_err(|e| format!("cannot install signal handlers: {e}"))?;
    let grace = s.http.shutdown_grace;
    let chats = open_chats(&s, &metrics)?;
    let app = Arc::new(App::new(s.api, metrics.clone(), Some(llm.clone())).with_chats(chats.clone()));
    let (m, sd) = (metrics.clone(), shutdown.clone());
    std::thread::spawn(move || smol::block_on(wind_down(sd, m, llm, grace)));
    eprintln!(
        "mtplx-lite: serving {} on http://{addr} (OpenAI API under /v1, metrics on /metrics)",
        app.model_id().unwrap_or("no model")
    );
    println!("listening on http://{addr}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    serve(listener, app, s.http, shutdown).map_err(|e| format!("server error: {e}"))?;
    // The answers of the last generations are written before the process ends.
    chats.db.close();
    eprintln!("mtplx-lite: stopped");
    Ok(())
}

/// Opens the chat database (its schema brought up to date) and the GeoIP database.
/// The disk tier's settings, with the identity of the model it caches for.
fn prompt_cache(
    s: &Settings,
    path: &std::path::Path,
    model: &dyn mtplx_lite::model::Model,
) -> Result<Option<mtplx_lite::engine::DiskConfig>, String> {
    let Some((dir, max_bytes)) = s.prompt_cache.clone() else { return Ok(None) };
    let format = format!("{:?}", model.new_cache(0).format());
    let identity =
        mtplx_lite::engine::prompt_disk::identity(path, &format).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Some(mtplx_lite::engine::DiskConfig { dir, max_bytes, identity }))
}

fn open_chats(s: &Settings, metrics: &Arc<Metrics>) -> Result<Arc<Chats>, String> {
    let db = Db::open(&s.database, Some(metrics.clone())).map_err(|e| format!("chats: {e}"))?;
    eprintln!("mtplx-lite: chats kept in {}", s.database.describe());
    let geoip = s.geoip_db.as_deref().map(GeoIp::open).transpose()?;
    let country = CountrySource { geoip, header: s.api.country_header.clone() };
    Ok(Arc::new(Chats::new(Arc::new(db), country)))
}

/// After the first signal: say what shutdown waits for, end metrics streams at once, and end
/// the generations still running shortly before the grace period is over (or at a second
/// signal), so that their clients see an error chunk, not a stream that merely stops.
async fn wind_down(shutdown: Shutdown, metrics: Arc<Metrics>, llm: Arc<Llm>, grace: Duration) {
    shutdown.triggered().await;
    metrics.requests.close_subscribers();
    let busy = || llm.engine.running() + llm.engine.waiting();
    let n = busy();
    if n > 0 {
        eprintln!("mtplx-lite: shutting down: waiting up to {:.0} s for {n} generation(s) to finish; Ctrl-C again to stop now", grace.as_secs_f64());
    } else {
        eprintln!("mtplx-lite: shutting down (nothing in flight)");
    }
    let idle = async {
        while busy() > 0 {
            async_io::Timer::after(IDLE_POLL).await;
        }
    };
    let cutoff = async {
        async_io::Timer::after(grace.saturating_sub(STREAM_END_MARGIN)).await;
    };
    idle.or(cutoff).or(shutdown.forced()).await;
    if busy() > 0 {
        eprintln!("mtplx-lite: ending {} generation(s) that did not finish in time", busy());
    }
    llm.engine.shutdown();
}
