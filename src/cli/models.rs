//! What `--model` names: a path, a catalogue name fetched on first use (the default demo
//! model when none is given), or a Hugging Face reference (`hf:owner/repo[:QUANT]`); and the
//! `models` and `pull` subcommands that list and fetch them.

use super::demo_head;
use argh::FromArgs;
use mtplx_lite::model::catalogue::{self, Entry, CATALOGUE, DEMO};
use mtplx_lite::model::fetch;
use mtplx_lite::model::hub::{self, reference::HubRef};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// list the models mtplx-lite can fetch by name, and which are already cached
#[derive(FromArgs)]
#[argh(subcommand, name = "models")]
pub struct ModelsCmd {}

/// fetch a model by name or Hugging Face reference (hf:owner/repo[:QUANT]) into the cache
/// without serving it, and print its path
#[derive(FromArgs)]
#[argh(subcommand, name = "pull")]
pub struct PullCmd {
    /// the model's name (mtplx-lite models lists them) or hf:owner/repo[:QUANT]
    #[argh(positional)]
    pub name: String,
}

fn say(line: &str) {
    eprintln!("mtplx-lite: {line}");
}

/// How often a transfer's progress is shown: redrawn on a terminal, a line in a log.
const PROGRESS_EVERY_TTY: Duration = Duration::from_millis(200);
const PROGRESS_EVERY_LOG: Duration = Duration::from_secs(10);

/// The Hub client's lines and progress, on standard error.
struct Stderr {
    tty: bool,
    last: Option<Instant>,
}

impl hub::Report for Stderr {
    fn line(&mut self, line: &str) {
        if self.tty && self.last.take().is_some() {
            eprintln!();
        }
        say(line);
    }

    fn progress(&mut self, file: &str, done: u64, total: u64) {
        let every = if self.tty { PROGRESS_EVERY_TTY } else { PROGRESS_EVERY_LOG };
        let finished = total > 0 && done >= total;
        if !finished && self.last.is_some_and(|t| t.elapsed() < every) {
            return;
        }
        let mb = |b: u64| b as f64 / 1e6;
        let of = if total > 0 {
            format!(" of {:.1} MB ({:.0}%)", mb(total), 100.0 * done as f64 / total as f64)
        } else {
            String::new()
        };
        if self.tty {
            eprint!("\rmtplx-lite: {file}: {:.1} MB{of}   ", mb(done));
            if finished {
                eprintln!();
            }
        } else {
            say(&format!("{file}: {:.1} MB{of}", mb(done)));
        }
        self.last = (!finished).then(Instant::now);
    }
}

/// The local files an `hf:` reference names (a split GGUF's parts in order), fetched first if
/// the Hugging Face cache lacks them.
fn from_hub(r: &HubRef) -> Result<Vec<PathBuf>, String> {
    let cfg = hub::HubConfig::from_env().map_err(|e| e.to_string())?;
    let mut report = Stderr { tty: std::io::stderr().is_terminal(), last: None };
    hub::ensure(r, &cfg, &mut report).map_err(|e| e.to_string())
}

/// The model file `model` names: an existing path as it is; else a catalogue name, fetched
/// first if not cached; no `--model` is the demo model. The entry is the catalogue's where the
/// model came by name.
pub fn resolve(model: Option<&Path>) -> Result<(PathBuf, Option<&'static Entry>), String> {
    let name = match model {
        None => return ensure_entry(DEMO),
        Some(p) if p.exists() => return Ok((p.to_path_buf(), None)),
        Some(p) => p.to_string_lossy(),
    };
    if let Some(r) = HubRef::parse(&name) {
        // A split GGUF's first part: the loader finds the others beside it.
        let files = from_hub(&r.map_err(|e| e.to_string())?)?;
        return Ok((files[0].clone(), None));
    }
    match catalogue::find(&name) {
        Some(e) => ensure_entry(e),
        None => Err(format!(
            "--model {name}: no such file or directory, not a model name mtplx-lite knows ({}), and not a Hugging Face reference (hf:owner/repo[:QUANT])",
            catalogue::names().join(", ")
        )),
    }
}

fn ensure_entry(entry: &'static Entry) -> Result<(PathBuf, Option<&'static Entry>), String> {
    let path = fetch::ensure(entry, &mut |l| say(l)).map_err(|e| e.to_string())?;
    Ok((path, Some(entry)))
}

/// Whether the file at `path` is the demo model's, however it was named: the size first, so
/// that only a file of the very size is hashed.
fn is_demo_file(path: &Path) -> bool {
    let same_size = std::fs::metadata(path).is_ok_and(|m| m.len() == DEMO.bytes);
    same_size && mtplx_lite::model::sha256::file_hex(path).is_ok_and(|h| h == DEMO.sha256)
}

/// The demo's shipped MTP head, written to the cache, when `path` holds the demo model.
pub fn demo_head_for(path: &Path, entry: Option<&Entry>) -> Result<Option<PathBuf>, String> {
    if entry != Some(DEMO) && !is_demo_file(path) {
        return Ok(None);
    }
    let beside = fetch::cached_demo_model().map_err(|e| e.to_string())?;
    demo_head::ensure_beside(&beside).map(Some)
}

/// `mtplx-lite models`: the catalogue, one model a line, with what is cached.
pub fn list() -> Result<(), String> {
    println!("{:<14} {:>8}  {:<8}  about", "NAME", "SIZE", "CACHED");
    for e in CATALOGUE {
        let size = format!("{} MB", e.bytes / 1_000_000);
        let cached = if fetch::is_cached(e) { "yes" } else { "no" };
        println!("{:<14} {size:>8}  {cached:<8}  {}; licence: {}", e.name, e.about, e.licence);
    }
    let dir = fetch::cache_dir().map_err(|e| e.to_string())?;
    println!("cache: {}", dir.display());
    if let Ok(cfg) = hub::HubConfig::from_env() {
        let cached = hub::cached_ggufs(&cfg.hub_dir);
        println!(
            "Hugging Face cache: {} ({} GGUF files; --model takes each line)",
            cfg.hub_dir.display(),
            cached.len()
        );
        for (reference, bytes) in cached {
            println!("  {reference}  {} MB", bytes / 1_000_000);
        }
    }
    Ok(())
}

/// `mtplx-lite pull NAME`: the file's path on standard output.
pub fn pull(name: &str) -> Result<(), String> {
    let named = catalogue::find(name).is_some() || name.starts_with(hub::reference::PREFIX);
    if !named {
        return Err(format!(
            "{name}: pull takes a model name ({}) or hf:owner/repo[:QUANT], not a path",
            catalogue::names().join(", ")
        ));
    }
    let (path, _) = resolve(Some(Path::new(name)))?;
    println!("{}", path.display());
    Ok(())
}
