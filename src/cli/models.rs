//! What `--model` names: a path, or a catalogue name fetched on first use (the default demo
//! model when none is given); and the `models` and `pull` subcommands that list and fetch the
//! catalogue.

use super::demo_head;
use argh::FromArgs;
use mtplx_lite::model::catalogue::{self, Entry, CATALOGUE, DEMO};
use mtplx_lite::model::fetch;
use std::path::{Path, PathBuf};

/// list the models mtplx-lite can fetch by name, and which are already cached
#[derive(FromArgs)]
#[argh(subcommand, name = "models")]
pub struct ModelsCmd {}

/// fetch a catalogue model into the cache without serving it
#[derive(FromArgs)]
#[argh(subcommand, name = "pull")]
pub struct PullCmd {
    /// the model's name (mtplx-lite models lists them)
    #[argh(positional)]
    pub name: String,
}

fn say(line: &str) {
    eprintln!("mtplx-lite: {line}");
}

/// The model file `model` names: an existing path as it is; else a catalogue name, fetched
/// first if not cached; no `--model` is the demo model. The entry is the catalogue's where the
/// model came by name.
pub fn resolve(model: Option<&Path>) -> Result<(PathBuf, Option<&'static Entry>), String> {
    let entry = match model {
        None => DEMO,
        Some(p) if p.exists() => return Ok((p.to_path_buf(), None)),
        Some(p) => match p.to_str().and_then(catalogue::find) {
            Some(e) => e,
            None => {
                return Err(format!(
                    "--model {}: no such file or directory, and not a model name mtplx-lite knows ({})",
                    p.display(),
                    catalogue::names().join(", ")
                ))
            }
        },
    };
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
    Ok(())
}

/// `mtplx-lite pull NAME`.
pub fn pull(name: &str) -> Result<(), String> {
    let (path, _) = resolve(Some(Path::new(name))).and_then(|(p, e)| match e {
        Some(e) => Ok((p, e)),
        None => Err(format!("{name}: pull takes a model name ({}), not a path", catalogue::names().join(", "))),
    })?;
    println!("{}", path.display());
    Ok(())
}
