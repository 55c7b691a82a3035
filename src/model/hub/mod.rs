//! Models by Hugging Face reference (`--model hf:owner/repo[:QUANT]`): the repository's GGUF is
//! found by its listing, fetched over the Hub's HTTP interface into the cache other Hugging Face
//! tools share (`cache.rs`), resumed where a transfer was cut, and checked against the SHA-256
//! the Hub reports. With no network, or `HF_HUB_OFFLINE=1`, what the cache holds is used.
//!
//! `HF_ENDPOINT` names another Hub (a mirror, or a test's local server); `HF_TOKEN` (else the
//! token `huggingface-cli login` saved) opens gated and private repositories.

pub mod cache;
mod http;
pub mod reference;

use cache::RepoDir;
use reference::{HubRef, Select};
use std::ffi::OsString;
use std::path::PathBuf;

/// The Hub asked when `HF_ENDPOINT` is unset.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

#[derive(Debug)]
pub enum HubError {
    BadReference {
        given: String,
        why: &'static str,
    },
    NoCacheDir,
    /// The Hub could not be reached, and the cache holds no copy.
    Unreachable {
        url: String,
        detail: String,
    },
    /// 401/403: a gated or private repository, and no token or one without access.
    Unauthorized {
        repo: String,
        status: u16,
    },
    RepoNotFound {
        repo: String,
    },
    NoSuchFile {
        repo: String,
        file: String,
        files: Vec<String>,
    },
    NoGguf {
        repo: String,
    },
    /// No file of the quantization asked for (or none asked, and no default to take).
    NoSuchQuant {
        repo: String,
        wanted: Option<String>,
        available: Vec<String>,
    },
    Status {
        url: String,
        status: u16,
    },
    BadAnswer {
        url: String,
        detail: String,
    },
    Interrupted {
        file: String,
        have: u64,
        size: u64,
        tries: u32,
        detail: String,
    },
    Checksum {
        file: String,
        expected: String,
        found: String,
    },
    Io {
        path: PathBuf,
        err: std::io::Error,
    },
}

impl std::fmt::Display for HubError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HubError::BadReference { given, why } => {
                write!(f, "--model {given}: {why} (forms: hf:owner/repo, hf:owner/repo:Q4_K_M, hf:owner/repo/file.gguf, with @revision after repo)")
            }
            HubError::NoCacheDir => write!(f, "none of HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME or HOME is set, so there is no Hugging Face cache to fetch into"),
            HubError::Unreachable { url, detail } => {
                write!(f, "cannot reach {url} ({detail}), and the Hugging Face cache holds no copy of the model; check the network, or set HF_ENDPOINT to a mirror")
            }
            HubError::Unauthorized { repo, status } => write!(
                f,
                "{repo}: the Hub answered {status}: the repository is gated or private. Set HF_TOKEN to a token with read access (https://huggingface.co/settings/tokens), and accept the model's terms on its page if it is gated"
            ),
            HubError::RepoNotFound { repo } => write!(f, "{repo}: no such repository or revision on the Hub (if it is private, set HF_TOKEN)"),
            HubError::NoSuchFile { repo, file, files } if files.is_empty() => write!(f, "{repo}: no file {file} at that revision"),
            HubError::NoSuchFile { repo, file, files } => write!(f, "{repo}: no file {file}; its GGUF files are: {}", files.join(", ")),
            HubError::NoGguf { repo } => write!(f, "{repo}: the repository holds no .gguf file, which is what mtplx-lite loads from the Hub"),
            HubError::NoSuchQuant { repo, wanted: Some(q), available } => {
                write!(f, "{repo}: no {q} file; the quantizations it has are: {} (name one as hf:{repo}:QUANT)", available.join(", "))
            }
            HubError::NoSuchQuant { repo, wanted: None, available } => write!(
                f,
                "{repo}: has no {} file and several quantizations: {}; name one, e.g. hf:{repo}:{}",
                reference::DEFAULT_QUANT,
                available.join(", "),
                available.first().map_or("Q8_0", |q| q.as_str())
            ),
            HubError::Status { url, status } => write!(f, "{url}: the Hub answered HTTP {status}"),
            HubError::BadAnswer { url, detail } => write!(f, "{url}: unexpected answer from the Hub: {detail}"),
            HubError::Interrupted { file, have, size, tries, detail } => write!(
                f,
                "{file}: the transfer stopped at {have} of {size} bytes after {tries} tries ({detail}); run again to resume from there"
            ),
            HubError::Checksum { file, expected, found } => write!(
                f,
                "{file}: sha256 is {found}, but the Hub says {expected}; the download was deleted, run again to fetch it anew"
            ),
            HubError::Io { path, err } => write!(f, "{}: {err}", path.display()),
        }
    }
}

impl std::error::Error for HubError {}

/// Lines for the log, and a transfer's progress (a terminal redraws it; a log gets a line now
/// and then).
pub trait Report {
    fn line(&mut self, line: &str);
    fn progress(&mut self, file: &str, done: u64, total: u64);
}

/// Where the Hub is and how to speak to it, from the environment.
pub struct HubConfig {
    pub endpoint: String,
    pub token: Option<String>,
    pub hub_dir: PathBuf,
    /// `HF_HUB_OFFLINE`: use the cache only.
    pub offline: bool,
}

impl HubConfig {
    pub fn from_env() -> Result<HubConfig, HubError> {
        Self::from_vars(&|k| std::env::var_os(k))
    }

    pub fn from_vars(var: &dyn Fn(&str) -> Option<OsString>) -> Result<HubConfig, HubError> {
        let text =
            |k: &str| var(k).and_then(|v| v.into_string().ok()).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        let saved_token = || {
            cache::hf_home(var)
                .and_then(|h| std::fs::read_to_string(h.join("token")).ok())
                .map(|t| t.trim().to_string())
        };
        Ok(HubConfig {
            endpoint: text("HF_ENDPOINT")
                .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string())
                .trim_end_matches('/')
                .to_string(),
            token: text("HF_TOKEN").or_else(saved_token).filter(|t| !t.is_empty()),
            hub_dir: cache::hub_dir(var).ok_or(HubError::NoCacheDir)?,
            offline: text("HF_HUB_OFFLINE")
                .is_some_and(|v| !matches!(v.to_ascii_lowercase().as_str(), "0" | "false" | "no" | "off")),
        })
    }
}

/// The local paths of the files `r` names (one, or a split GGUF's parts in order), fetched
/// first where the cache lacks them.
pub fn ensure(r: &HubRef, cfg: &HubConfig, report: &mut dyn Report) -> Result<Vec<PathBuf>, HubError> {
    let dir = RepoDir::new(&cfg.hub_dir, &r.repo);
    if cfg.offline {
        return from_cache(r, &dir).ok_or_else(|| HubError::Unreachable {
            url: cfg.endpoint.clone(),
            detail: "HF_HUB_OFFLINE is set".into(),
        });
    }
    match fetch(r, cfg, &dir, report) {
        Err(HubError::Unreachable { url, detail }) => match from_cache(r, &dir) {
            Some(paths) => {
                report.line(&format!("cannot reach {url} ({detail}); using the cached copy of hf:{}", r.repo));
                Ok(paths)
            }
            None => Err(HubError::Unreachable { url, detail }),
        },
        other => other,
    }
}

fn fetch(r: &HubRef, cfg: &HubConfig, dir: &RepoDir, report: &mut dyn Report) -> Result<Vec<PathBuf>, HubError> {
    let client = http::Client::new(cfg);
    let (files, listed_commit) = match &r.select {
        Select::File(f) => (vec![f.clone()], None),
        select => {
            let (listing, commit) = client.list(&r.repo, &r.revision)?;
            (reference::choose(&r.repo, &listing, select)?, commit)
        }
    };
    let mut paths = Vec::with_capacity(files.len());
    for file in &files {
        let meta = client.meta(&r.repo, &r.revision, file)?;
        let Some(commit) = meta.commit.clone().or_else(|| listed_commit.clone()).filter(|c| cache::is_commit(c)) else {
            return Err(HubError::BadAnswer {
                url: meta.url,
                detail: "no X-Repo-Commit header naming the file's commit".into(),
            });
        };
        let blob = dir.blob(&meta.etag);
        let io = |path: &std::path::Path| {
            let path = path.to_path_buf();
            move |err| HubError::Io { path, err }
        };
        let whole = std::fs::metadata(&blob).is_ok_and(|m| meta.size.is_none_or(|s| m.len() == s));
        if whole {
            report.line(&format!("hf:{}/{file}: in the cache ({})", r.repo, blob.display()));
        } else {
            let part = dir.incomplete(&meta.etag);
            std::fs::create_dir_all(part.parent().unwrap_or(&cfg.hub_dir)).map_err(io(&part))?;
            let size = meta.size.map_or("unknown size".into(), |s| format!("{:.1} MB", s as f64 / 1e6));
            report.line(&format!("fetching hf:{}/{file} ({size}) into {}", r.repo, cfg.hub_dir.display()));
            client.download(&meta, &part, file, report)?;
            std::fs::rename(&part, &blob).map_err(io(&blob))?;
        }
        paths.push(dir.link(&commit, file, &meta.etag).map_err(io(&blob))?);
        dir.write_ref(&r.revision, &commit).map_err(io(&blob))?;
    }
    Ok(paths)
}

/// Every GGUF the Hugging Face cache holds whole, however it got there: `(hf: reference with
/// its file, bytes)`, sorted; a file in several snapshots is listed once.
pub fn cached_ggufs(hub_dir: &std::path::Path) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = Vec::new();
    for repo in std::fs::read_dir(hub_dir).into_iter().flatten().flatten() {
        let name = repo.file_name().to_string_lossy().to_string();
        let Some(id) = name.strip_prefix("models--").map(|r| r.replacen("--", "/", 1)) else { continue };
        let dir = RepoDir::new(hub_dir, &id);
        for snap in std::fs::read_dir(repo.path().join("snapshots")).into_iter().flatten().flatten() {
            let commit = snap.file_name().to_string_lossy().to_string();
            for file in dir.snapshot_files(&commit).into_iter().filter(|f| f.ends_with(".gguf")) {
                let bytes = std::fs::metadata(dir.snapshot(&commit, &file)).map_or(0, |m| m.len());
                out.push((format!("{}{id}/{file}", reference::PREFIX), bytes));
            }
        }
    }
    out.sort();
    out.dedup_by(|a, b| a.0 == b.0);
    out
}

/// The files `r` names from the cache alone: the snapshot its revision last pointed to.
fn from_cache(r: &HubRef, dir: &RepoDir) -> Option<Vec<PathBuf>> {
    let commit = dir.commit_of(&r.revision)?;
    let files = reference::choose(&r.repo, &dir.snapshot_files(&commit), &r.select).ok()?;
    Some(files.iter().map(|f| dir.snapshot(&commit, f)).collect())
}
